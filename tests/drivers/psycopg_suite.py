"""psycopg 3 workload for tests/drivers.rs: run against direct PostgreSQL and
against pglane (transaction mode, small pool); every result is checked here
against its known value, and a JSON summary of all results goes to stdout as
the last line ({"results": ..., "checksum": ..., "backends_seen": ...}).
Exits non-zero on any mismatch or unexpected exception.

Covers: prepared statements (prepare_threshold 0 and the default 5, reused
after the client moved to another server connection), psycopg's
DEALLOCATE of statements it rotates out (prepared_max) and DEALLOCATE ALL
after ROLLBACK, pipeline mode (with an error in the middle), executemany,
COPY in/out (text and binary), a server-side cursor in a transaction, binary
results, errors inside a transaction then rollback, threads on the small
pool checking every row, and what sharing must never change (the unnamed
statement after search_path, literals in each client's TimeZone, set_config
staying with its connection).

Usage: python3 psycopg_suite.py DSN
"""
import datetime
import decimal
import hashlib
import json
import sys
import threading
import uuid

import psycopg
from psycopg import errors

DSN = sys.argv[1]
RESULTS = {}
BACKENDS = {}  # connection label -> set of backend pids it ran on
LOCK = threading.Lock()


class Mismatch(Exception):
    pass


def check(name, got, expected):
    if got != expected:
        raise Mismatch(f"{name}: got {got!r}, expected {expected!r}")
    with LOCK:
        RESULTS[name] = repr(got)


def connect(**kw):
    return psycopg.connect(DSN, connect_timeout=30, **kw)


def note_backend(label, conn):
    pid = conn.execute("select pg_backend_pid()").fetchone()[0]
    with LOCK:
        BACKENDS.setdefault(label, set()).add(pid)
    return pid


class Mover:
    """Makes the next transaction of a client run on another server
    connection than its last one, when there are exactly two (pglane with
    pool_size 2 on one shard): two blockers take both, the one that got the
    client's last backend keeps it while the other lets go."""

    def __init__(self):
        self.b = [connect(), connect()]

    def hold_pid(self, pid):
        pids = [c.execute("select pg_backend_pid()").fetchone()[0] for c in self.b]
        for c, p in zip(self.b, pids):
            if p != pid:
                c.commit()
        self.held = [c for c, p in zip(self.b, pids) if p == pid]

    def release(self):
        for c in self.held:
            c.commit()
        self.held = []

    def close(self):
        for c in self.b:
            c.close()


def setup():
    with connect(autocommit=True) as c:
        c.execute("drop table if exists pg3_items, pg3_copy, pg3_threads")
        c.execute("create table pg3_items (id int primary key, name text not null, price numeric(10,2))")
        c.execute("create table pg3_copy (a int, b text, c timestamptz)")
        c.execute("create table pg3_threads (t int, i int, v bigint, primary key (t, i))")
        c.execute("insert into pg3_items (id, name) values (4999, 'taken')")


def prepared_statements(mover):
    for threshold in (0, None):
        label = f"prepared_t{threshold}"
        kw = {} if threshold is None else {"prepare_threshold": threshold}
        with connect(autocommit=True, **kw) as c:
            total = 0
            last = note_backend(label, c)
            for i in range(12):
                mover.hold_pid(last)
                try:
                    row = c.execute("select %s::int * 2, %s::text || '!', %s::numeric / 4", (i, f"v{i}", i)).fetchone()
                    check(f"{label}_a{i}", row, (i * 2, f"v{i}!", decimal.Decimal(i) / 4))
                    row = c.execute("select count(*) from generate_series(1, %s)", (i + 1,)).fetchone()
                    check(f"{label}_b{i}", row, (i + 1,))
                    total += i
                    last = note_backend(label, c)
                finally:
                    mover.release()
            check(f"{label}_total", total, 66)


def rotation_deallocate(mover):
    """prepared_max 3: psycopg sends DEALLOCATE _pg3_N for the statements it
    evicts, as simple queries, and the evicted queries get prepared again."""
    with connect(autocommit=True, prepare_threshold=0) as c:
        c.prepared_max = 3
        last = note_backend("rotation", c)
        for rnd in range(3):
            for k in range(6):
                mover.hold_pid(last)
                try:
                    q = "select %s::int + " + str(k)
                    row = c.execute(q, (rnd,)).fetchone()
                    check(f"rotation_{rnd}_{k}", row, (rnd + k,))
                    last = note_backend("rotation", c)
                finally:
                    mover.release()


def pipeline_mode():
    with connect() as c:
        cur = c.cursor()
        with c.pipeline():
            for i in range(1, 21):
                cur.execute("insert into pg3_items (id, name, price) values (%s, %s, %s)", (i, f"item{i}", decimal.Decimal(i) + decimal.Decimal("0.25")))
            total = c.cursor()
            total.execute("select count(*), sum(price) from pg3_items where id <= 20")
        check("pipeline_sum", total.fetchone(), (20, decimal.Decimal("215.00")))
        c.commit()
        # an error in the middle of a pipeline: everything up to the next Sync fails
        try:
            with c.pipeline():
                cur.execute("insert into pg3_items (id, name) values (%s, %s)", (100, "x"))
                cur.execute("insert into pg3_items (id, name) values (%s, %s)", (1, "dup"))
                cur.execute("insert into pg3_items (id, name) values (%s, %s)", (101, "y"))
            raise Mismatch("pipeline with a duplicate key did not fail")
        except errors.UniqueViolation as e:
            check("pipeline_error", e.sqlstate, "23505")
        c.rollback()
        n = c.execute("select count(*) from pg3_items where id in (100, 101)").fetchone()
        check("pipeline_rolled_back", n, (0,))
        c.commit()
        # many small pipelined reads in autocommit, prepared past the threshold
        c.autocommit = True
        with c.pipeline():
            curs = []
            for i in range(1, 21):
                k = c.cursor()
                k.execute("select name, price from pg3_items where id = %s", (i,))
                curs.append(k)
        got = [k.fetchone() for k in curs]
        check("pipeline_reads", got, [(f"item{i}", decimal.Decimal(i) + decimal.Decimal("0.25")) for i in range(1, 21)])


def executemany_and_copy():
    with connect() as c:
        cur = c.cursor()
        rows = [(i, f"many{i}", decimal.Decimal(i) / 100) for i in range(1000, 1200)]
        cur.executemany("insert into pg3_items (id, name, price) values (%s, %s, %s)", rows)
        c.commit()
        check("executemany", c.execute("select count(*), sum(price), min(name) from pg3_items where id between 1000 and 1199").fetchone(),
              (200, decimal.Decimal("2199.00"), "many1000"))
        cur.executemany("update pg3_items set price = price + %s where id = %s returning id, price",
                        [(1, i) for i in range(1000, 1010)], returning=True)
        got = []
        while True:
            got.append(cur.fetchone())
            if not cur.nextset():
                break
        check("executemany_returning", got, [(i, decimal.Decimal(i) / 100 + 1) for i in range(1000, 1010)])
        c.commit()

        base = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
        with cur.copy("copy pg3_copy (a, b, c) from stdin") as cp:
            for i in range(500):
                cp.write_row((i, f"line {i}\twith tab", base + datetime.timedelta(minutes=i)))
        with cur.copy("copy pg3_copy (a, b, c) from stdin (format binary)") as cp:
            cp.set_types(["int4", "text", "timestamptz"])
            for i in range(500, 700):
                cp.write_row((i, f"bin {i}", base + datetime.timedelta(minutes=i)))
        c.commit()
        h = hashlib.sha256()
        with cur.copy("copy (select a, b, c from pg3_copy order by a) to stdout") as cp:
            for data in cp:
                h.update(bytes(data))
        text_digest = h.hexdigest()
        with cur.copy("copy (select a, b from pg3_copy order by a) to stdout (format binary)") as cp:
            cp.set_types(["int4", "text"])
            back = list(cp.rows())
        check("copy_binary_out", back[:2] + back[-1:], [(0, "line 0\twith tab"), (1, "line 1\twith tab"), (699, "bin 699")])
        check("copy_count", len(back), 700)
        with LOCK:
            RESULTS["copy_text_digest"] = text_digest
        c.commit()


def server_cursor():
    with connect() as c:
        with c.transaction():
            with c.cursor(name="pg3_big") as cur:
                cur.itersize = 7
                cur.execute("select g, md5(g::text) from generate_series(1, 100) g")
                first = cur.fetchmany(10)
                rest = list(cur)
            check("server_cursor_first", first[0], (1, hashlib.md5(b"1").hexdigest()))
            check("server_cursor_rows", len(first) + len(rest), 100)
            check("server_cursor_sum", sum(r[0] for r in first + rest), 5050)
            with c.cursor(name="pg3_scroll", scrollable=True) as cur:
                cur.execute("select g from generate_series(1, 50) g")
                cur.scroll(40)
                check("server_cursor_scroll", cur.fetchone(), (41,))
        c.commit()


TYPED = ("select 42::int4, 9000000000::int8, 12345.678::numeric, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, "
         "'2024-02-29 12:34:56.789+00'::timestamptz, '{\"k\": [1, 2]}'::jsonb, array[1,2,3]::int[], "
         "'\\xdeadbeef'::bytea, 1.5::float8, true, '2024-02-29'::date, '1 day 02:03:04'::interval, "
         "array['a', null, 'c']::text[], %s::text")
TYPED_EXPECTED = (42, 9000000000, decimal.Decimal("12345.678"), uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
                  datetime.datetime(2024, 2, 29, 12, 34, 56, 789000, tzinfo=datetime.timezone.utc),
                  {"k": [1, 2]}, [1, 2, 3], b"\xde\xad\xbe\xef", 1.5, True, datetime.date(2024, 2, 29),
                  datetime.timedelta(days=1, seconds=7384), ["a", None, "c"])


def binary_results(mover):
    with connect(autocommit=True) as c:
        c.execute("set timezone = 'UTC'")
        last = note_backend("binary", c)
        for i in range(8):
            mover.hold_pid(last)
            try:
                with c.cursor(binary=True) as cur:
                    row = cur.execute(TYPED, (f"b{i}",)).fetchone()
                    check(f"binary_cursor_{i}", row, TYPED_EXPECTED + (f"b{i}",))
                row = c.execute(TYPED, (f"t{i}",), binary=True).fetchone()
                check(f"binary_execute_{i}", row, TYPED_EXPECTED + (f"t{i}",))
                row = c.execute(TYPED, (f"x{i}",)).fetchone()
                check(f"text_execute_{i}", row, TYPED_EXPECTED + (f"x{i}",))
                last = note_backend("binary", c)
            finally:
                mover.release()


def errors_then_rollback(mover):
    with connect(prepare_threshold=0) as c:
        last = note_backend("errors", c)
        c.commit()
        for i in range(4):
            mover.hold_pid(last)
            try:
                c.execute("insert into pg3_items (id, name) values (%s, %s)", (5000 + i, "doomed"))
                try:
                    c.execute("select 10 / %s::int", (0,))
                    raise Mismatch("division by zero did not fail")
                except errors.DivisionByZero as e:
                    check(f"errors_div_{i}", e.sqlstate, "22012")
                try:
                    c.execute("select 1")
                    raise Mismatch("query in a failed transaction did not fail")
                except errors.InFailedSqlTransaction as e:
                    check(f"errors_aborted_{i}", e.sqlstate, "25P02")
                c.rollback()  # psycopg follows a ROLLBACK with DEALLOCATE ALL
                check(f"errors_gone_{i}", c.execute("select count(*) from pg3_items where id = %s", (5000 + i,)).fetchone(), (0,))
                check(f"errors_after_{i}", c.execute("select 10 / %s::int", (5,)).fetchone(), (2,))
                try:
                    c.execute("insert into pg3_items (id, name) values (%s, %s)", (4999, "dup"))
                    raise Mismatch("duplicate key did not fail")
                except errors.UniqueViolation as e:
                    check(f"errors_unique_{i}", e.diag.constraint_name, "pg3_items_pkey")
                c.rollback()
                last = note_backend("errors", c)
                c.commit()
            finally:
                mover.release()
        # statements first prepared inside a pipeline that fails: the one
        # after the error was skipped by the server and must prepare again
        for k in range(3):
            try:
                with c.pipeline():
                    c.execute("select %s::int + 100", (k,))
                    c.execute("select 1 / %s::int", (0,))
                    c.execute("select %s::int + 200", (k,))
                raise Mismatch("pipeline with a division by zero did not fail")
            except errors.DivisionByZero:
                pass
            c.rollback()
            check(f"errors_pipeline_prepare_{k}", [c.execute("select %s::int + 100", (k,)).fetchone(),
                                                   c.execute("select %s::int + 200", (k,)).fetchone()], [(k + 100,), (k + 200,)])
            c.commit()
        c.autocommit = True
        try:
            c.execute("select * from pg3_no_such_table")
        except errors.UndefinedTable as e:
            check("errors_undefined_table", e.sqlstate, "42P01")
        check("errors_autocommit_after", c.execute("select %s::int", (7,)).fetchone(), (7,))


def threads():
    failures = []

    def worker(t):
        try:
            kw = {"prepare_threshold": 0} if t % 2 else {}
            with connect(**kw) as c:
                total = 0
                for i in range(40):
                    v = t * 1000 + i
                    if i % 5 == 4:
                        with c.pipeline():
                            c.execute("insert into pg3_threads values (%s, %s, %s)", (t, i, v))
                            cur = c.execute("select sum(v), count(*) from pg3_threads where t = %s", (t,))
                    else:
                        c.execute("insert into pg3_threads values (%s, %s, %s)", (t, i, v))
                        cur = c.execute("select sum(v), count(*) from pg3_threads where t = %s", (t,))
                    total += v
                    row = cur.fetchone()
                    if row != (total, i + 1):
                        raise Mismatch(f"thread {t} step {i}: got {row!r}, expected {(total, i + 1)!r}")
                    check(f"thread_{t}_{i}_echo", c.execute("select %s::text || %s::text", (f"t{t}-", i)).fetchone(), (f"t{t}-{i}",))
                    c.commit()
                with LOCK:
                    RESULTS[f"thread_{t}_total"] = total
        except Exception as e:  # reported by the main thread
            failures.append(f"thread {t}: {type(e).__name__}: {e}")

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in ts:
        th.start()
    for th in ts:
        th.join(timeout=600)
        if th.is_alive():
            failures.append("a thread did not finish in 600 s")
    if failures:
        raise Mismatch("; ".join(failures))
    with connect() as c:
        check("threads_all", c.execute("select count(*), sum(v) from pg3_threads").fetchone(),
              (320, sum(t * 1000 * 40 + 780 for t in range(8))))


def sharing():
    """What sharing statements and server connections must never change:
    the unnamed statement psycopg's exec_params sends is always what it last
    parsed, even after search_path comes up; a literal is read in each
    connection's TimeZone; set_config by one connection reaches no other."""
    with connect(autocommit=True) as c:
        got = []
        for sql in [b"select 'first'", b"select 'first'", b"set search_path to public", b"select 'second'",
                    b"select 'third' where true"]:
            r = c.pgconn.exec_params(sql, [])
            got.append(r.get_value(0, 0).decode() if r.ntuples else r.command_status.decode())
        check("sharing_exec_params", got, ["first", "first", "SET", "second", "third"])
    instant = "2000-01-02 03:00:00.456789"
    for zone, offset in [("Etc/GMT+2", -2), ("Etc/GMT-2", 2), ("UTC", 0), ("Asia/Kolkata", 5.5)]:
        for threshold in (0, None):
            kw = {} if threshold is None else {"prepare_threshold": threshold}
            with connect(autocommit=True, options=f"-c TimeZone={zone}", **kw) as c:
                for k in range(3):
                    got = c.execute(f"select '{instant}'::timestamptz").fetchone()[0]
                    want = datetime.datetime(2000, 1, 2, 3, 0, 0, 456789,
                                             tzinfo=datetime.timezone(datetime.timedelta(hours=offset)))
                    check(f"sharing_tz_{zone}_{threshold}_{k}", got, want)
    with connect(autocommit=True) as a, connect(autocommit=True) as b:
        a.execute("select set_config('statement_timeout', '1234', false)")
        check("sharing_set_config_a", a.execute("show statement_timeout").fetchone()[0], "1234ms")
        for k in range(4):
            check(f"sharing_set_config_b_{k}", b.execute("show statement_timeout").fetchone()[0], "0")
            check(f"sharing_set_config_a_{k}", a.execute("show statement_timeout").fetchone()[0], "1234ms")


def main():
    setup()
    mover = Mover()
    steps = [
        ("prepared", lambda: prepared_statements(mover)),
        ("rotation", lambda: rotation_deallocate(mover)),
        ("pipeline", pipeline_mode),
        ("executemany_copy", executemany_and_copy),
        ("server_cursor", server_cursor),
        ("binary", lambda: binary_results(mover)),
        ("errors", lambda: errors_then_rollback(mover)),
        ("threads", threads),
        ("sharing", sharing),
    ]
    only = set(sys.argv[2:])
    failed = []
    for name, step in steps:
        if only and name not in only:
            continue
        try:
            step()
        except Exception as e:
            failed.append(name)
            print(f"FAIL {name}: {type(e).__name__}: {e}", file=sys.stderr)
            try:
                mover.close()
            except Exception:
                pass
            mover = Mover()
    mover.close()
    summary = {
        "results": dict(sorted(RESULTS.items())),
        "checksum": hashlib.sha256(json.dumps(sorted(RESULTS.items())).encode()).hexdigest(),
        "backends_seen": {k: len(v) for k, v in sorted(BACKENDS.items())},
        "failed": failed,
    }
    print(json.dumps(summary, sort_keys=True))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
