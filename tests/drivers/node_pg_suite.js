// node-postgres (pg) workload for tests/drivers.rs: run against direct
// PostgreSQL and against pglane (transaction mode, small pool). Every result
// is checked here against its known value; a JSON summary goes to stdout as
// the last line ({"results": ..., "checksum": ..., "failed": [...]}); exits
// non-zero on any mismatch or unexpected error.
//
// Covers: parameterized queries (unnamed statements), named queries
// ({name, text, values}: node-postgres prepares each name once per client
// connection and then only Binds it, so pglane must prepare it on whichever
// server connection the client gets), concurrent clients via pg.Pool,
// transactions with rollback, and errors (in a transaction, in a named query,
// a named query reused after an error).
//
// Usage: NODE_PATH=<dir with node_modules/pg> node node_pg_suite.js URL
'use strict';
const crypto = require('crypto');
const pg = require('pg');

const url = process.argv[2];
const results = {};

function check(name, got, expected) {
  const g = JSON.stringify(got);
  const e = JSON.stringify(expected);
  if (g !== e) throw new Error(`${name}: got ${g}, expected ${e}`);
  results[name] = g;
}

async function setup() {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await c.query('drop table if exists npg_accounts, npg_log');
  await c.query('create table npg_accounts (id int primary key, owner text not null, balance numeric(12,2) not null)');
  await c.query('create table npg_log (client int, step int, v int, primary key (client, step))');
  await c.end();
}

async function singleClient() {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  for (let i = 1; i <= 50; i++) {
    await c.query('insert into npg_accounts values ($1, $2, $3)', [i, `owner${i}`, (i * 10.5).toFixed(2)]);
  }
  for (let i = 1; i <= 50; i += 7) {
    const r = await c.query({ name: 'acct_by_id', text: 'select owner, balance from npg_accounts where id = $1', values: [i] });
    check(`named_${i}`, r.rows, [{ owner: `owner${i}`, balance: (i * 10.5).toFixed(2) }]);
    const s = await c.query('select $1::int + $2::int as s, $3::text as t', [i, 1, `x${i}`]);
    check(`unnamed_${i}`, s.rows, [{ s: i + 1, t: `x${i}` }]);
  }
  // transaction with a rollback
  await c.query('begin');
  await c.query({ name: 'move', text: 'update npg_accounts set balance = balance + $2 where id = $1 returning balance', values: [1, 100] });
  try {
    await c.query({ name: 'div', text: 'select 1 / $1::int as q', values: [0] });
    throw new Error('division by zero did not fail');
  } catch (e) {
    check('error_code', e.code, '22012');
  }
  try {
    await c.query('select 1');
    throw new Error('query in a failed transaction did not fail');
  } catch (e) {
    check('aborted_code', e.code, '25P02');
  }
  await c.query('rollback');
  check('rolled_back', (await c.query({ name: 'acct_by_id', text: 'select owner, balance from npg_accounts where id = $1', values: [1] })).rows,
    [{ owner: 'owner1', balance: '10.50' }]);
  check('named_after_error', (await c.query({ name: 'div', text: 'select 1 / $1::int as q', values: [1] })).rows, [{ q: 1 }]);
  await c.query('begin');
  const m = await c.query({ name: 'move', text: 'update npg_accounts set balance = balance + $2 where id = $1 returning balance', values: [2, 5] });
  await c.query('commit');
  check('committed', m.rows, [{ balance: '26.00' }]);
  try {
    await c.query('insert into npg_accounts values ($1, $2, $3)', [1, 'dup', 0]);
    throw new Error('duplicate key did not fail');
  } catch (e) {
    check('unique', [e.code, e.constraint], ['23505', 'npg_accounts_pkey']);
  }
  // a named statement whose Parse fails, tried again, then a good one
  for (let k = 0; k < 2; k++) {
    try {
      await c.query({ name: 'broken', text: 'selec 1', values: [] });
      throw new Error('syntax error did not fail');
    } catch (e) {
      check(`named_parse_error_${k}`, e.code, '42601');
    }
  }
  check('named_after_parse_error', (await c.query({ name: 'fine', text: 'select $1::int * 3 as x', values: [7] })).rows, [{ x: 21 }]);
  // many named statements on one connection
  let sum = 0;
  for (let k = 0; k < 60; k++) {
    const r = await c.query({ name: `many_${k}`, text: `select $1::int + ${k} as v`, values: [k] });
    sum += r.rows[0].v;
  }
  for (let k = 0; k < 60; k += 10) {
    const r = await c.query({ name: `many_${k}`, text: `select $1::int + ${k} as v`, values: [1] });
    sum += r.rows[0].v;
  }
  check('named_many', sum, 2 * 1770 + 6 + 150);
  const types = await c.query("select '2024-01-02T03:04:05Z'::timestamptz as ts, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid as u, '{\"a\":1}'::jsonb as j, array[1,2]::int[] as arr, 12345678901::int8 as big, $1::bytea as b",
    [Buffer.from([1, 2, 255])]);
  const row = types.rows[0];
  check('types', [row.ts.toISOString(), row.u, row.j, row.arr, row.big, row.b.toString('hex')],
    ['2024-01-02T03:04:05.000Z', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', { a: 1 }, [1, 2], '12345678901', '0102ff']);
  await c.end();
}

async function poolWorkload() {
  const pool = new pg.Pool({ connectionString: url, max: 12, connectionTimeoutMillis: 60000 });
  const failures = [];
  async function worker(w) {
    try {
      let total = 0;
      for (let step = 0; step < 20; step++) {
        const c = await pool.connect();
        try {
          await c.query('begin');
          await c.query({ name: 'log_ins', text: 'insert into npg_log values ($1, $2, $3)', values: [w, step, w * 100 + step] });
          const r = await c.query({ name: 'log_sum', text: 'select sum(v)::int as s, count(*)::int as n from npg_log where client = $1', values: [w] });
          total += w * 100 + step;
          const want = { s: total, n: step + 1 };
          if (JSON.stringify(r.rows[0]) !== JSON.stringify(want)) throw new Error(`worker ${w} step ${step}: got ${JSON.stringify(r.rows[0])}`);
          await c.query('commit');
          const e = await c.query('select $1::text || $2::text as echo', [`w${w}-`, step]);
          if (e.rows[0].echo !== `w${w}-${step}`) throw new Error(`worker ${w} echo: got ${e.rows[0].echo}`);
        } finally {
          c.release();
        }
      }
      // pool.query: any client of the pool, named statement
      const r = await pool.query({ name: 'log_sum', text: 'select sum(v)::int as s, count(*)::int as n from npg_log where client = $1', values: [w] });
      if (r.rows[0].s !== total) throw new Error(`worker ${w} total: got ${r.rows[0].s}`);
      results[`worker_${w}`] = String(total);
    } catch (e) {
      failures.push(`worker ${w}: ${e.message}`);
    }
  }
  await Promise.all(Array.from({ length: 30 }, (_, w) => worker(w)));
  await pool.end();
  if (failures.length) throw new Error(failures.slice(0, 5).join('; '));
}

(async () => {
  const failed = [];
  const timer = setTimeout(() => { console.error('FAIL: timed out after 600 s'); process.exit(2); }, 600000);
  try {
    await setup();
  } catch (e) {
    console.error(`FAIL setup: ${e.message}`);
    process.exit(1);
  }
  for (const [name, step] of [['single_client', singleClient], ['pool', poolWorkload]]) {
    try {
      await step();
    } catch (e) {
      failed.push(name);
      console.error(`FAIL ${name}: ${e.message}`);
    }
  }
  clearTimeout(timer);
  const sorted = Object.keys(results).sort().map((k) => [k, results[k]]);
  const checksum = crypto.createHash('sha256').update(JSON.stringify(sorted)).digest('hex');
  console.log(JSON.stringify({ results: Object.fromEntries(sorted), checksum, failed }));
  process.exit(failed.length ? 1 : 0);
})();
