"""asyncpg workload for tests/drivers.rs: run against direct PostgreSQL and
against pglane (transaction mode, small pool); every result is checked here
against its known value, and a JSON summary goes to stdout as the last line
({"results": ..., "checksum": ..., "failed": [...]}). Exits non-zero on any
mismatch or unexpected exception.

Covers asyncpg's named statements (__asyncpg_stmt_N__, its statement cache
and the Close of statements it evicts, Parse + Describe statement, binary
formats for parameters and results, a cached statement whose result type DDL
changed), cursors (named portals fetched in chunks),
explicit conn.prepare() reused across transactions, fetch / fetchrow /
fetchval / executemany / copy_records_to_table / copy_from_query /
transactions with savepoints, errors inside a transaction, type codecs (uuid,
numeric, timestamptz, jsonb, arrays, intervals, bytea), and many concurrent
tasks on an asyncpg pool (20 client connections) over pglane's small server
pool, each checking its own rows.

Usage: python3 asyncpg_suite.py DSN [STEP...]  (default: every step but
those in OPT_IN)
"""
import asyncio
import datetime
import decimal
import hashlib
import json
import sys
import uuid

import asyncpg

DSN = sys.argv[1]
RESULTS = {}
# Steps run only when named (tests/drivers.rs runs "ddl" on its own, on a
# fresh database).
OPT_IN = {"ddl"}


class Mismatch(Exception):
    pass


def check(name, got, expected):
    if got != expected:
        raise Mismatch(f"{name}: got {got!r}, expected {expected!r}")
    RESULTS[name] = repr(got)


async def connect():
    return await asyncpg.connect(DSN, timeout=60, command_timeout=120)


async def setup():
    c = await connect()
    await c.execute("""
        drop table if exists apg_items, apg_events, apg_tasks;
        create table apg_items (id uuid primary key, n int not null, price numeric(12, 3),
                                at timestamptz, doc jsonb, tags text[], raw bytea);
        create table apg_events (id bigserial primary key, kind text, payload jsonb);
        create table apg_tasks (task int, step int, v bigint, primary key (task, step));
    """)
    await c.close()


def item(i):
    return (uuid.UUID(int=i * 7919 + 1), i, decimal.Decimal(i) / 8,
            datetime.datetime(2024, 3, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=i * 3601),
            json.dumps({"i": i, "sq": [i, i * i]}), [f"t{i}", f"u{i % 3}"], bytes([i % 256, 255 - i % 256]))


async def codecs_and_prepare():
    c = await connect()
    await c.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    rows = [item(i) for i in range(1, 101)]
    await c.executemany("insert into apg_items values ($1, $2, $3, $4, $5, $6, $7)",
                        [(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5], r[6]) for r in rows])
    got = await c.fetch("select * from apg_items order by n")
    check("items_count", len(got), 100)
    for r, g in zip(rows, got):
        if tuple(g) != (r[0], r[1], r[2], r[3], json.loads(r[4]), r[5], r[6]):
            raise Mismatch(f"item {r[1]}: got {tuple(g)!r}")
    RESULTS["items_digest"] = hashlib.sha256(repr([tuple(g) for g in got]).encode()).hexdigest()
    stmt = await c.prepare("select n, price, at, doc, tags from apg_items where id = $1")
    check("prepare_params", [t.name for t in stmt.get_parameters()], ["uuid"])
    check("prepare_attrs", [a.name for a in stmt.get_attributes()], ["n", "price", "at", "doc", "tags"])
    for round_ in range(3):
        async with c.transaction():
            for i in range(1, 101, 9):
                r = await stmt.fetchrow(uuid.UUID(int=i * 7919 + 1))
                check(f"prepared_{round_}_{i}", tuple(r), (i, decimal.Decimal(i) / 8, item(i)[3], {"i": i, "sq": [i, i * i]}, item(i)[5]))
        await asyncio.sleep(0)
    check("fetchval_types", await c.fetchval("select $1::numeric * 2", decimal.Decimal("1.25")), decimal.Decimal("2.50"))
    check("fetchval_interval", await c.fetchval("select $1::interval + interval '1 hour'", datetime.timedelta(minutes=30)),
          datetime.timedelta(minutes=90))
    check("fetchval_array", await c.fetchval("select array_agg(n order by n) from apg_items where n <= $1", 5), [1, 2, 3, 4, 5])
    check("fetchval_uuid_array", await c.fetchval("select $1::uuid[]", [uuid.UUID(int=1), uuid.UUID(int=2)]),
          [uuid.UUID(int=1), uuid.UUID(int=2)])
    check("fetchrow_null", tuple(await c.fetchrow("select null::int, $1::text", None)), (None, None))
    # copy
    n = await c.copy_records_to_table("apg_events", records=[(100000 + i, f"k{i % 4}") for i in range(1, 301)],
                                      columns=["id", "kind"])
    check("copy_records", n, "COPY 300")
    check("copy_check", tuple(await c.fetchrow("select count(*), sum(id), count(distinct kind) from apg_events")), (300, 30045150, 4))
    import io
    buf = io.BytesIO()
    await c.copy_from_query("select id - 100000, kind from apg_events where id <= $1 order by id", 100003, output=buf)
    check("copy_out", buf.getvalue(), b"1\tk1\n2\tk2\n3\tk3\n")
    # errors in a transaction, savepoints
    try:
        async with c.transaction():
            await c.execute("insert into apg_events (kind) values ('doomed')")
            await stmt.fetchrow("not a uuid")
    except asyncpg.DataError:
        RESULTS["error_data"] = "DataError"
    try:
        async with c.transaction():
            await c.execute("insert into apg_events (kind) values ('doomed')")
            await c.fetchval("select 1 / $1::int", 0)
        raise Mismatch("division by zero did not fail")
    except asyncpg.DivisionByZeroError as e:
        check("error_div", e.sqlstate, "22012")
    check("error_rolled_back", await c.fetchval("select count(*) from apg_events where kind = 'doomed'"), 0)
    async with c.transaction():
        await c.execute("insert into apg_events (kind) values ('kept')")
        try:
            async with c.transaction():  # a savepoint
                await c.execute("insert into apg_events (kind) values ('inner')")
                await c.execute("insert into apg_events (id, kind) values (100001, 'dup')")
        except asyncpg.UniqueViolationError as e:
            check("error_savepoint", e.constraint_name, "apg_events_pkey")
    check("savepoint_result", await c.fetchval("select string_agg(kind, ',') from apg_events where kind in ('kept', 'inner', 'dup')"), "kept")
    check("prepared_after_errors", (await stmt.fetchrow(uuid.UUID(int=1 * 7919 + 1)))["n"], 1)
    # a cursor (a named portal fetched in chunks: PortalSuspended) in a transaction
    async with c.transaction():
        got = [r[0] async for r in c.cursor("select g from generate_series(1, $1) g", 1000, prefetch=64)]
    check("cursor", (len(got), sum(got)), (1000, 500500))
    async with c.transaction():
        cur = await c.cursor("select g, g * g from generate_series(1, 100) g")
        first = await cur.fetch(10)
        await cur.forward(80)
        last = await cur.fetch(20)
    check("cursor_fetch", (tuple(first[0]), tuple(last[0]), len(last)), ((1, 1), (91, 8281), 10))
    # more distinct queries than the statement cache holds (100): asyncpg
    # closes the statements it evicts
    total = 0
    for k in range(150):
        total += await c.fetchval(f"select $1::int + {k}", 1)
    check("statement_cache_churn", total, sum(1 + k for k in range(150)))
    check("statement_cache_again", await c.fetchval("select $1::int + 0", 5), 5)
    await c.close()


async def ddl_changes_result_type():
    """A cached statement whose result type changes under it: asyncpg gets
    0A000 "cached plan must not change result type" and, outside a
    transaction, prepares it again by itself."""
    a, b = await connect(), await connect()
    await a.execute("drop table if exists apg_ddl; create table apg_ddl (id int primary key, v int)")
    await a.execute("insert into apg_ddl values (1, 10), (2, 20)")
    q = "select v from apg_ddl where id = $1"
    check("ddl_before_a", await a.fetchval(q, 1), 10)
    check("ddl_before_b", await b.fetchval(q, 2), 20)
    await a.execute("alter table apg_ddl alter column v type text")
    for k in range(3):
        check(f"ddl_after_a_{k}", await a.fetchval(q, 1), "10")
        check(f"ddl_after_b_{k}", await b.fetchval(q, 2), "20")
    await a.close()
    await b.close()


async def extension_recreated():
    """A type dropped and created again has a new OID: a connection that
    prepares a statement of it afterwards must be told the new one (asyncpg
    otherwise fails: "could not resolve query result and/or argument
    types"), whether the DDL ran on another connection or outside."""
    a = await connect()
    await a.execute("create extension if not exists hstore")
    await a.set_builtin_type_codec("hstore", codec_name="pg_contrib.hstore")
    check("hstore_before", await a.fetchval("select $1::hstore", {"a": "1"}), {"a": "1"})
    b = await connect()
    await b.execute("drop extension hstore; create extension hstore")
    await b.close()
    for k in range(3):
        c = await connect()
        await c.set_builtin_type_codec("hstore", codec_name="pg_contrib.hstore")
        check(f"hstore_after_{k}", await c.fetchval("select $1::hstore", {"b": str(k)}), {"b": str(k)})
        await c.close()
    await a.close()


async def pool_workload():
    pool = await asyncpg.create_pool(DSN, min_size=4, max_size=20, timeout=60, command_timeout=120)
    errors = []

    async def task(t):
        try:
            for step in range(15):
                async with pool.acquire() as c:
                    async with c.transaction():
                        await c.execute("insert into apg_tasks values ($1, $2, $3)", t, step, t * 100 + step)
                        s = await c.fetchrow("select sum(v), count(*), $2::text as tag from apg_tasks where task = $1", t, f"t{t}")
                        want = (sum(t * 100 + k for k in range(step + 1)), step + 1, f"t{t}")
                        if tuple(s) != want:
                            raise Mismatch(f"task {t} step {step}: got {tuple(s)!r}, expected {want!r}")
                    r = await c.fetchrow("select $1::uuid as u, $2::numeric(10,2) as n, $3::timestamptz as ts, $4::jsonb as j",
                                         uuid.UUID(int=t), decimal.Decimal(t) / 4, datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(days=t),
                                         json.dumps({"t": t}))
                    want = (uuid.UUID(int=t), (decimal.Decimal(t) / 4).quantize(decimal.Decimal("0.01")),
                            datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(days=t), json.dumps({"t": t}))
                    if tuple(r) != want:
                        raise Mismatch(f"task {t} codecs: got {tuple(r)!r}, expected {want!r}")
                    if step % 5 == 0:
                        stmt = await c.prepare("select count(*) from apg_tasks where task = $1 and step <= $2")
                        n = await stmt.fetchval(t, step)
                        if n != step + 1:
                            raise Mismatch(f"task {t} prepared: got {n}, expected {step + 1}")
        except Exception as e:
            errors.append(f"task {t}: {type(e).__name__}: {e}")

    await asyncio.wait_for(asyncio.gather(*(task(t) for t in range(40))), timeout=600)
    if errors:
        raise Mismatch("; ".join(errors[:5]))
    async with pool.acquire() as c:
        check("pool_total", tuple(await c.fetchrow("select count(*), sum(v) from apg_tasks")),
              (600, sum(t * 100 * 15 + 105 for t in range(40))))
    await pool.close()


async def main():
    await setup()
    failed = []
    only = set(sys.argv[2:])
    steps = [("codecs_and_prepare", codecs_and_prepare), ("pool", pool_workload), ("ddl", ddl_changes_result_type), ("hstore", extension_recreated)]
    for name, step in steps:
        if (only and name not in only) or (not only and name in OPT_IN):
            continue
        try:
            await step()
        except Exception as e:
            failed.append(name)
            print(f"FAIL {name}: {type(e).__name__}: {e}", file=sys.stderr)
    summary = {
        "results": dict(sorted(RESULTS.items())),
        "checksum": hashlib.sha256(json.dumps(sorted(RESULTS.items())).encode()).hexdigest(),
        "failed": failed,
    }
    print(json.dumps(summary, sort_keys=True))
    sys.exit(1 if failed else 0)


asyncio.run(main())
