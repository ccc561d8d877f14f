// node-postgres' cancel, for tests/drivers.rs: ITERATIONS times a
// `pg_sleep(10)` cancelled after 0.1 s by another Client's cancel(), which
// sends the CancelRequest on a connection of its own; the script waits for
// that connection to end (PostgreSQL closes it once the backend was
// signalled; node-postgres itself does not wait), then runs `select 1`
// (sleeping 10 ms, so that a cancel a few milliseconds late is seen),
// which must not be cancelled. A bystander client runs short queries
// meanwhile that no cancel may hit. JSON summary as the last line.
//
// Usage: NODE_PATH=<dir with node_modules/pg> node cancel_loop.js URL ITERATIONS
'use strict';
const pg = require('pg');

const url = process.argv[2];
const iterations = Number(process.argv[3]);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
  const started = Date.now();
  const conn = new pg.Client({ connectionString: url });
  const other = new pg.Client({ connectionString: url });
  await conn.connect();
  await other.connect();
  const bystander = { queries: 0, cancelled: 0 };
  let stop = false;
  const watcher = (async () => {
    while (!stop) {
      try {
        await other.query('select pg_sleep(0.005)');
      } catch (e) {
        if (e.code === '57014') bystander.cancelled += 1;
        else throw e;
      }
      bystander.queries += 1;
    }
  })();
  let timedOut = 0;
  let late = 0;
  let completed = 0;
  const failed = [];
  for (let i = 0; i < iterations; i++) {
    const running = conn.query('select pg_sleep(10)').then(
      () => 'completed',
      (e) => (e.code === '57014' ? 'cancelled' : Promise.reject(e)),
    );
    await sleep(100);
    const canceller = new pg.Client({ connectionString: url });
    const ended = new Promise((resolve) => canceller.connection.once('end', resolve));
    canceller.cancel(conn, conn._getActiveQuery());
    await ended;
    if ((await running) === 'cancelled') timedOut += 1;
    else completed += 1;
    try {
      const r = await conn.query('select 1 as one from pg_sleep(0.01)');
      if (r.rows[0].one !== 1) failed.push('select 1 gave something else');
    } catch (e) {
      if (e.code === '57014') late += 1;
      else throw e;
    }
  }
  stop = true;
  await watcher;
  await conn.end();
  await other.end();
  console.error(
    `node-postgres: ${timedOut} cancelled, ${completed} completed, ${late} late cancels, ` +
      `bystander ${JSON.stringify(bystander)}, ${(Date.now() - started) / 1000} s`,
  );
  if (late) failed.push(`${late} queries after a cancelled one were cancelled`);
  if (bystander.cancelled) failed.push(`${bystander.cancelled} of the bystander's queries were cancelled`);
  if (timedOut < 0.9 * iterations) failed.push(`only ${timedOut} of ${iterations} sleeps were cancelled`);
  const results = {
    driver: 'node-postgres',
    late_cancels: late,
    bystander_cancelled: bystander.cancelled,
    bystander_ran: bystander.queries > 0,
  };
  console.log(JSON.stringify({ results, checksum: 0, failed }));
  process.exit(failed.length === 0 ? 0 : 1);
}

main().catch((e) => {
  console.log(JSON.stringify({ results: {}, checksum: 0, failed: [String(e.stack || e)] }));
  process.exit(1);
});
