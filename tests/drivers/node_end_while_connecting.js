// node-postgres clients that end while they connect, as pg.Pool's tests do:
// `client.end()` before the socket connected writes Terminate ahead of the
// StartupMessage. PostgreSQL closes such a connection without a word and
// the ending client reports nothing; a pooler that answers with an error
// makes node-postgres report it. Half the clients end before they connect,
// half right after; every one must end without an error. Prints the JSON
// summary tests/drivers.rs reads ({"results": ..., "failed": [...]}).
//
// Usage: NODE_PATH=<dir with node_modules/pg> node node_end_while_connecting.js URL
'use strict';
const pg = require('pg');

const url = process.argv[2];
const CLIENTS = 200;

async function main() {
  const failed = [];
  let connected = 0;
  for (let i = 0; i < CLIENTS; i++) {
    const c = new pg.Client({ connectionString: url });
    c.on('error', (e) => failed.push(`client ${i}: error event: ${e.message}`));
    const connecting = c.connect().then(
      () => { connected += 1; },
      (e) => failed.push(`client ${i}: connect: ${e.message}`),
    );
    // Ended before it connected, a client's connect() never settles on
    // PostgreSQL (nothing answers it); it fails on an error from the server.
    if (i % 2 === 1) await connecting;
    await c.end().catch((e) => failed.push(`client ${i}: end: ${e.message}`));
  }
  // Errors arrive after end() returned: give them time to.
  await new Promise((resolve) => setTimeout(resolve, 500));
  // The server still serves the next client.
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  const r = await c.query('select 1 + 1 as two');
  await c.end();
  const results = { clients: CLIENTS, awaited_connects: connected >= CLIENTS / 2, two: r.rows[0].two };
  console.log(JSON.stringify({ results, checksum: 0, failed }));
  process.exit(failed.length === 0 ? 0 : 1);
}

main().catch((e) => {
  console.log(JSON.stringify({ results: {}, checksum: 0, failed: [String(e.stack || e)] }));
  process.exit(1);
});
