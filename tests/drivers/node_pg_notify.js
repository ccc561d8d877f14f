// node-postgres LISTEN/NOTIFY for tests/drivers.rs: run against direct
// PostgreSQL and against pglane (transaction mode, where the notification
// hub answers the LISTENs). A client listens on two channels (one name
// quoted), another notifies, in and out of a transaction block, and the
// listener notifies itself; the notifications its 'notification' handler
// saw, in order, are the last line of stdout as JSON
// ({"results": ..., "failed": [...]}).
//
// Usage: NODE_PATH=<dir with node_modules/pg> node node_pg_notify.js URL
'use strict';
const pg = require('pg');

const url = process.argv[2];

async function main() {
  const seen = [];
  const listener = new pg.Client({ connectionString: url });
  await listener.connect();
  listener.on('notification', (n) => seen.push([n.channel, n.payload]));
  // Without parameters node-postgres sends these by the simple query protocol.
  await listener.query('LISTEN jobs');
  await listener.query('LISTEN "Mixed Case"');
  const other = new pg.Client({ connectionString: url });
  await other.connect();
  await other.query("NOTIFY jobs, 'one'");
  await other.query("SELECT pg_notify('Mixed Case', $1)", ['two']);
  await other.query('BEGIN');
  await other.query("NOTIFY jobs, 'three'");
  await other.query("NOTIFY jobs, 'four'");
  await other.query('COMMIT');
  await listener.query("NOTIFY jobs, 'own'");
  await listener.query('UNLISTEN "Mixed Case"');
  await other.query("SELECT pg_notify('Mixed Case', 'not heard')");
  await other.query("NOTIFY jobs, 'five'");
  // node-postgres reads all the time: wait for the handler.
  const deadline = Date.now() + 10000;
  while (seen.length < 6 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await listener.query('UNLISTEN *');
  const expected = [['jobs', 'one'], ['Mixed Case', 'two'], ['jobs', 'three'], ['jobs', 'four'], ['jobs', 'own'], ['jobs', 'five']];
  const failed = JSON.stringify(seen) === JSON.stringify(expected) ? [] : [`notifications: got ${JSON.stringify(seen)}, expected ${JSON.stringify(expected)}`];
  await listener.end();
  await other.end();
  console.log(JSON.stringify({ results: { notifications: seen }, failed }));
}

main().catch((e) => {
  console.log(JSON.stringify({ results: {}, failed: [String(e && e.stack ? e.stack : e)] }));
  process.exit(1);
});
