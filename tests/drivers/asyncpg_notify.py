"""asyncpg LISTEN/NOTIFY for tests/drivers.rs, as psycopg_notify.py: run
against direct PostgreSQL and against pglane (transaction mode, where the
notification hub answers the LISTENs). asyncpg's add_listener prepares
`LISTEN "channel"` (Parse, Describe, Flush) and runs it later (Bind,
Execute, Sync); with statement_cache_size=0 it uses the unnamed statement.
One listener of each kind; another client notifies, in and out of a
transaction block, and each listener notifies itself. The notifications each
listener saw, in order, are the last line of stdout as JSON
({"results": ..., "failed": [...]}).

Usage: python3 asyncpg_notify.py DSN
"""
import asyncio
import json
import sys

import asyncpg

DSN = sys.argv[1]
EXPECTED = [["jobs", "one"], ["Mixed Case", "two"], ["jobs", "three"], ["jobs", "four"], ["jobs", "own"], ["jobs", "five"]]


async def listen(cache_size, other):
    seen = []
    listener = await asyncpg.connect(DSN, statement_cache_size=cache_size, timeout=30)

    def heard(_connection, _pid, channel, payload):
        seen.append([channel, payload])

    await listener.add_listener("jobs", heard)
    await listener.add_listener("Mixed Case", heard)
    await other.execute("NOTIFY jobs, 'one'")
    await other.execute("SELECT pg_notify('Mixed Case', 'two')")
    async with other.transaction():
        await other.execute("NOTIFY jobs, 'three'")
        await other.execute("NOTIFY jobs, 'four'")
    await listener.execute("NOTIFY jobs, 'own'")
    # asyncpg drops a notification whose channel has no listener left, and
    # through pglane one committed just before a request may come after
    # that request's answer (docs/features.md): direct, 'two' is here
    # already; through pglane, wait for it (the hub keeps the order).
    for _ in range(200):
        if ["Mixed Case", "two"] in seen:
            break
        await listener.fetchval("SELECT 1")
        await asyncio.sleep(0.01)
    await listener.remove_listener("Mixed Case", heard)
    await other.execute("SELECT pg_notify('Mixed Case', 'not heard')")
    await other.execute("NOTIFY jobs, 'five'")
    for _ in range(200):
        if len(seen) >= len(EXPECTED):
            break
        await listener.fetchval("SELECT 1")
        await asyncio.sleep(0.05)
    # A listener added again runs the statement asyncpg keeps, if it keeps one.
    await listener.add_listener("Mixed Case", heard)
    await listener.remove_listener("Mixed Case", heard)
    await listener.remove_listener("jobs", heard)
    await listener.close()
    return seen


async def main():
    other = await asyncpg.connect(DSN, timeout=30)
    results, failed = {}, []
    for cache_size in [100, 0]:
        seen = await listen(cache_size, other)
        results[f"cache {cache_size}"] = seen
        if seen != EXPECTED:
            failed.append(f"statement_cache_size={cache_size}: got {seen!r}, expected {EXPECTED!r}")
    await other.close()
    print(json.dumps({"results": results, "failed": failed}))


asyncio.run(main())
