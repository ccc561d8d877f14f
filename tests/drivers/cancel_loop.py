"""Timed-out queries, cancelled as each driver cancels them, for
tests/drivers.rs: `iterations` times a `pg_sleep(10)` cancelled after
0.1 s, then `select 1` on the same connection, which must not be the one
cancelled (a "late" cancel; the `select 1` sleeps 10 ms, so that a cancel
that comes a few milliseconds late is seen). Meanwhile a bystander connection runs short
queries that no cancel may ever hit. PostgreSQL's contract makes both
hold: a cancel connection closes once the backend was signalled, and the
drivers wait for that close before they send the next query.

- asyncpg: `fetchval(..., timeout=0.1)`, which sends the cancel and waits
  for its connection to close.
- psycopg: `conn.cancel()` from a timer thread (libpq's PQcancel, which
  waits for the close), no statement_timeout.

Prints the JSON summary tests/drivers.rs reads ({"results": ..., "failed":
[...]}) as its last line.

Usage: cancel_loop.py asyncpg|psycopg DSN ITERATIONS
"""
import asyncio
import json
import sys
import threading
import time

SLEEP = "select pg_sleep(10)"
BYSTANDER = "select pg_sleep(0.005)"
NEXT = "select 1 from pg_sleep(0.01)"


def summary(driver, timed_out, late, completed, bystander, started, failed):
    results = {
        "driver": driver,
        "late_cancels": late,
        "bystander_cancelled": bystander["cancelled"],
        "bystander_ran": bystander["queries"] > 0,
    }
    # How many timed out is timing, not a result: it goes to stderr.
    print(
        f"{driver}: {timed_out} timed out and cancelled, {completed} completed before their cancel, "
        f"{late} late cancels, bystander {bystander}, {time.monotonic() - started:.1f} s",
        file=sys.stderr,
    )
    if late:
        failed.append(f"{late} queries after a cancelled one were cancelled")
    if bystander["cancelled"]:
        failed.append(f"{bystander['cancelled']} of the bystander's queries were cancelled")
    if timed_out < 0.9 * (timed_out + completed):
        failed.append(f"only {timed_out} of {timed_out + completed} sleeps were cancelled")
    print(json.dumps({"results": results, "checksum": 0, "failed": failed}))
    return 1 if failed else 0


async def run_asyncpg(dsn, iterations):
    import asyncpg

    conn = await asyncpg.connect(dsn)
    other = await asyncpg.connect(dsn)
    bystander = {"queries": 0, "cancelled": 0}
    stop = asyncio.Event()

    async def watch():
        while not stop.is_set():
            try:
                await other.fetchval(BYSTANDER)
            except asyncpg.QueryCanceledError:
                bystander["cancelled"] += 1
            bystander["queries"] += 1

    watcher = asyncio.create_task(watch())
    started = time.monotonic()
    timed_out = late = completed = 0
    failed = []
    for _ in range(iterations):
        try:
            await conn.fetchval(SLEEP, timeout=0.1)
            completed += 1
        except asyncio.TimeoutError:
            timed_out += 1
        try:
            if await conn.fetchval(NEXT) != 1:
                failed.append("select 1 gave something else")
        except asyncpg.QueryCanceledError:
            late += 1
    stop.set()
    await watcher
    await conn.close()
    await other.close()
    return summary("asyncpg", timed_out, late, completed, bystander, started, failed)


def run_psycopg(dsn, iterations):
    import psycopg

    conn = psycopg.connect(dsn, autocommit=True)
    other = psycopg.connect(dsn, autocommit=True)
    bystander = {"queries": 0, "cancelled": 0}
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            try:
                other.execute(BYSTANDER)
            except psycopg.errors.QueryCanceled:
                bystander["cancelled"] += 1
            bystander["queries"] += 1

    watcher = threading.Thread(target=watch)
    watcher.start()
    started = time.monotonic()
    timed_out = late = completed = 0
    failed = []
    for _ in range(iterations):
        timer = threading.Timer(0.1, conn.cancel)
        timer.start()
        try:
            conn.execute(SLEEP)
            completed += 1
        except psycopg.errors.QueryCanceled:
            timed_out += 1
        # cancel() has returned: the server has the request.
        timer.join()
        try:
            if conn.execute(NEXT).fetchone() != (1,):
                failed.append("select 1 gave something else")
        except psycopg.errors.QueryCanceled:
            late += 1
    stop.set()
    watcher.join()
    conn.close()
    other.close()
    return summary("psycopg", timed_out, late, completed, bystander, started, failed)


def main():
    driver, dsn, iterations = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if driver == "asyncpg":
        return asyncio.run(run_asyncpg(dsn, iterations))
    return run_psycopg(dsn, iterations)


if __name__ == "__main__":
    sys.exit(main())
