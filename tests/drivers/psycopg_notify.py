"""psycopg 3 LISTEN/NOTIFY for tests/drivers.rs: run against direct PostgreSQL
and against pglane (transaction mode, where the notification hub answers the
LISTENs). A client listens on two channels (one name quoted), another
notifies, in and out of a transaction block, and the listener notifies
itself; the notifications the listener's handler saw, in order, are the last
line of stdout as JSON ({"results": ..., "failed": [...]}).

Usage: python3 psycopg_notify.py DSN
"""
import json
import sys
import time

import psycopg

DSN = sys.argv[1]


def main():
    seen = []
    listener = psycopg.connect(DSN, autocommit=True, connect_timeout=30)
    listener.add_notify_handler(lambda n: seen.append([n.channel, n.payload]))
    # Without parameters psycopg sends these by the simple query protocol.
    listener.execute("LISTEN jobs")
    listener.execute('LISTEN "Mixed Case"')
    other = psycopg.connect(DSN, autocommit=True, connect_timeout=30)
    other.execute("NOTIFY jobs, 'one'")
    other.execute("SELECT pg_notify('Mixed Case', 'two')")
    with other.transaction():
        other.execute("NOTIFY jobs, 'three'")
        other.execute("NOTIFY jobs, 'four'")
    listener.execute("NOTIFY jobs, 'own'")
    listener.execute("UNLISTEN \"Mixed Case\"")
    other.execute("SELECT pg_notify('Mixed Case', 'not heard')")
    other.execute("NOTIFY jobs, 'five'")
    # The handler runs when the connection reads: keep it reading.
    deadline = time.monotonic() + 10
    while len(seen) < 6 and time.monotonic() < deadline:
        listener.execute("SELECT 1")
        time.sleep(0.05)
    listener.execute("UNLISTEN *")
    expected = [["jobs", "one"], ["Mixed Case", "two"], ["jobs", "three"], ["jobs", "four"], ["jobs", "own"], ["jobs", "five"]]
    failed = [] if seen == expected else [f"notifications: got {seen!r}, expected {expected!r}"]
    print(json.dumps({"results": {"notifications": seen}, "failed": failed}))


main()
