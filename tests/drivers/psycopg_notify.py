"""psycopg 3 LISTEN/NOTIFY for tests/drivers.rs: run against direct PostgreSQL
and against pglane (transaction mode, where the notification hub answers the
LISTENs). A client listens on two channels (one name quoted), another
notifies, in and out of a transaction block, and the listener notifies
itself; another client LISTENs in a transaction block (psycopg's default,
not autocommit); the notifications the listener's handler saw, in order, are the last
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

    # psycopg's default, not autocommit: the LISTEN runs in the block
    # psycopg opens, and takes effect when it commits. What committed
    # before that is not delivered.
    in_block = []
    txn = psycopg.connect(DSN, connect_timeout=30)
    txn.add_notify_handler(lambda n: in_block.append([n.channel, n.payload]))
    txn.execute("LISTEN txn_jobs")
    other.execute("NOTIFY txn_jobs, 'before commit'")
    # Through pglane, one committed within the hub's delivery time (about
    # a millisecond) before the COMMIT may still come (docs/features.md).
    time.sleep(0.2)
    txn.commit()
    other.execute("NOTIFY txn_jobs, 'after commit'")
    deadline = time.monotonic() + 10
    while not in_block and time.monotonic() < deadline:
        txn.execute("SELECT 1")
        txn.commit()
        time.sleep(0.05)
    txn.execute("UNLISTEN *")
    txn.commit()
    if in_block != [["txn_jobs", "after commit"]]:
        failed.append(f"LISTEN in a block: got {in_block!r}")
    print(json.dumps({"results": {"notifications": seen, "listen_in_a_block": in_block}, "failed": failed}))


main()
