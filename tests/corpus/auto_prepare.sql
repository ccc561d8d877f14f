--! Auto-prepare corpus: queries that must give the same answer as simple
--! queries and as rewritten prepared statements (Parse/Bind/Execute).
--!
--! Format (read by tests/lexer_corpus.rs, reused by the end-to-end test):
--! * lines starting with `--!` are directives or commentary, never SQL;
--! * `--! setup` starts statements run once, as user trustuser, in an empty
--!   database; `--! queries` starts the corpus;
--! * entries are separated by blank lines (so none holds one) and taken
--!   verbatim: comments and newlines inside an entry are part of it;
--! * an entry is expected to be rewritten unless the directive line right
--!   before it says `--! pass <reason>` (the lexer or the validator refuses
--!   it; reason = the label of lexer::Unsupported or shape::Reason) or
--!   `--! server-pass` (accepted by the validator, refused by the side-
--!   connection check: Parse/Describe of the rewritten text or its
--!   parameter types).
--! Results must not depend on time or randomness: every entry runs twice.

--! setup
CREATE TABLE accounts (
    id int PRIMARY KEY,
    name text NOT NULL,
    balance numeric(12,2),
    big bigint,
    small smallint,
    ratio float8,
    created date,
    ts timestamptz,
    flag boolean,
    tags text[],
    data jsonb,
    code char(3),
    note varchar(20),
    uid uuid,
    bits bit(4),
    vbits varbit,
    dur interval,
    t time,
    raw bytea,
    CHECK (balance > -1000)
)

INSERT INTO accounts VALUES
    (1, 'alice', 100.50, 3000000000, 7, 0.5, '2024-01-01', '2024-01-01 10:00+00', true, '{a,b}', '{"k": 1, "tags": ["x"]}', 'abc', 'first', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', B'1010', B'101', '1 day', '10:00', '\x00ff'),
    (2, 'bob', -20.00, -5, -3, 1.25, '2024-02-29', '2024-02-29 23:59:59.5+00', false, '{}', '{"k": 2}', 'xy', 'second', 'b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12', B'0001', B'', '2 hours 30 minutes', '23:59:59', ''),
    (3, 'carol', 0, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
    (4, 'dave''s', 12345.67, 9223372036854775807, 32767, -0.0, '1999-12-31', '1999-12-31 23:59:59+00', true, '{"with space","quote\"d"}', '[1, 2, 3]', 'z', 'it''s', 'c0eebc99-9c0b-4ef8-bb6d-6bb9bd380a13', B'1111', B'11110000', '-1 year', '00:00', '\xdeadbeef'),
    (5, 'Émile ünï', 5.5, 42, 1, 3.14159, '2024-06-15', '2024-06-15 12:00+02', false, '{é}', '{"nested": {"a": [1, {"b": null}]}}', 'é', 'ß', 'd0eebc99-9c0b-4ef8-bb6d-6bb9bd380a14', B'0110', B'1', '1 mon 2 days', '12:34:56.789', '\x41')

CREATE TABLE orders (
    id int PRIMARY KEY,
    account_id int NOT NULL REFERENCES accounts (id),
    amount numeric(10,2) NOT NULL,
    status text NOT NULL DEFAULT 'new',
    placed date NOT NULL
)

INSERT INTO orders
SELECT i, 1 + i % 5, (i * 7 % 100) + 0.25, (ARRAY['new', 'paid', 'shipped'])[1 + i % 3], date '2024-01-01' + i
FROM generate_series(1, 60) AS i

CREATE TABLE items (order_id int REFERENCES orders (id), sku text, qty int CHECK (qty > 0), PRIMARY KEY (order_id, sku))

INSERT INTO items SELECT i, 'sku-' || (i % 7), 1 + i % 4 FROM generate_series(1, 60) AS i

CREATE TABLE ivh (x interval hour)

CREATE TABLE kv (k text PRIMARY KEY, v int)

INSERT INTO kv VALUES ('a', 1), ('b', 2)

CREATE VIEW big_orders AS SELECT * FROM orders WHERE amount > 50

--! queries
SELECT 1

SELECT 42, -7, 0, 2147483647, -2147483648, 2147483648, -2147483649

SELECT 9223372036854775807, -9223372036854775808, 9223372036854775808, 99999999999999999999999

SELECT 007, -0, 1.5, .5, 5., -.25, 1e3, 1E-2, 2.5e+10, -1.5e-3

SELECT 0.1 + 0.2, 1.10 * 3, 10 / 4, 10 / 4.0, 10 % 3, 2 ^ 10, - 2 ^ 2

SELECT 'text', '', 'it''s', 'ünï', '   spaced   '

SELECT E'tab\there', E'line\nbreak', E'quote\'s', E'back\\slash', E'\x41\102\u00e9'

SELECT $$dollar 'quoted'$$, $tag$with $$ inside$tag$, $$$$

SELECT 'con'
       'tinued', E'a'
'\n'

--! pass syntax
--! PostgreSQL 15 takes -- comments between continued strings; libpg_query
--! 17 (pg_query) does not, so the validator passes these through.
SELECT 'continued' -- with a comment
'still'

--! pass syntax
SELECT 'continued'
   -- with a comment on its own line
'still'

SELECT B'1010', X'1F', B'', B'1010' | B'0101', X'F' & B'1010'

SELECT B'101'::varbit, X'00FF'::bit(16), B'1'::bit(4)

SELECT '42'::int, '3000000000'::bigint, '1.50'::numeric, '1.50'::numeric(5,1), 'abc'::varchar(2)

SELECT CAST('2024-01-01' AS date), CAST(12 AS text), CAST('12' AS int) + 1

SELECT '2024-02-29'::date + 1, '10:00'::time + '1 hour'::interval, '1 day'::interval * 3

SELECT '{1,2,3}'::int[], '{"a": 1}'::jsonb, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid

SELECT '(1,2)'::point, '[1,5)'::int4range, '192.168.0.1/24'::inet

SELECT 5::text || 'x', (-5)::text, 5 - -3, 5 -3, 5--3
-- the last one is a comment

SELECT -5::text

SELECT NULL, NULL::int, true, false, NOT true, NULL IS NULL, 1 IS NOT NULL

SELECT coalesce(NULL, 'fallback'), nullif(1, 1), nullif('a', 'b'), greatest(1, 5, 3), least('b', 'a')

SELECT CASE WHEN 1 = 1 THEN 'yes' ELSE 'no' END, CASE 2 WHEN 1 THEN 'one' WHEN 2 THEN 'two' END

SELECT length('hello'), upper('abc'), lower('ÀB'), substring('abcdef', 2, 3), substring('abcdef' FROM 2 FOR 2)

SELECT position('c' IN 'abcd'), trim('  x  '), trim(BOTH 'x' FROM 'xxaxx'), replace('aaa', 'a', 'b'), 'a' || 'b' || 'c'

SELECT to_char(12345.678, '99,999.99'), to_char(date '2024-03-01', 'YYYY-MM-DD'), lpad('7', 3, '0')

SELECT date_part('year', date '2024-06-15'), extract('month' FROM date '2024-06-15'), EXTRACT(day FROM date '2024-06-15')

SELECT date_trunc('month', timestamp '2024-06-15 10:30'), date '2024-01-31' + interval '1 month'

SELECT interval '1' day, interval '1 day 2 hours', interval '90' minute, interval '1-2' year to month

SELECT timestamp with time zone '2024-01-01 00:00+00' AT TIME ZONE 'UTC'

SELECT ARRAY[1, 2, 3], ARRAY['a', 'b'], ARRAY[1.5, 2], ARRAY[[1, 2], [3, 4]], array_length(ARRAY[1, 2], 1)

SELECT (ARRAY[10, 20, 30])[2], (ARRAY[10, 20, 30])[1:2], '{1,2,3}'::int[] @> ARRAY[2]

SELECT 1 IN (1, 2, 3), 'a' IN ('b', 'c'), 4 NOT IN (1, 2), 2 = ANY('{1,2,3}'::int[]), 2 = ANY(ARRAY[1, 2])

SELECT 5 BETWEEN 1 AND 10, 5 NOT BETWEEN 6 AND 10, 5 BETWEEN SYMMETRIC 10 AND 1

SELECT 'abc' LIKE 'a%', 'abc' ILIKE 'A_C', 'a%c' LIKE 'a!%c' ESCAPE '!', 'abc' ~ '^a', 'abc' SIMILAR TO 'a(b|c)+'

SELECT 'a' < 'b', 1 <> 2, 1 != 2, 3 >= 3, 'x' IS DISTINCT FROM 'y', NULL IS NOT DISTINCT FROM NULL

SELECT '{"a": {"b": [1, 2]}}'::jsonb -> 'a' -> 'b' ->> 1, '{"a": 1}'::jsonb ? 'a', '{"a": 1}'::jsonb @> '{"a": 1}'

SELECT jsonb_build_object('k'::text, 1, 'v'::text, 'x'::text), to_jsonb('text'::text)

--! server-pass
--! Arguments of type "any": an unknown parameter has no type (42P18).
SELECT json_build_array(1, 'a', NULL)

SELECT row(1, 2) = row(1, 2), (1, 'x') < (2, 'a')

--! server-pass
SELECT row(1, 'a')

SELECT generate_series(1, 3), generate_series(1, 10, 4)

SELECT * FROM generate_series(1, 5) AS g(i) WHERE i > 2 ORDER BY i DESC

SELECT md5('abc'), sha256('abc'::bytea), encode('\x00ff'::bytea, 'hex'), decode('ff', 'hex')

SELECT 1 WHERE false

SELECT
  id, name
FROM accounts WHERE id = 1

SELECT id, name FROM accounts WHERE id = 1;

select ID, NAME from ACCOUNTS where ID = 2 ;

SELECT * FROM accounts WHERE id = 4

SELECT * FROM accounts ORDER BY id

SELECT id, balance FROM accounts WHERE balance > 100 ORDER BY id

SELECT id FROM accounts WHERE balance = 100.5

SELECT id FROM accounts WHERE balance = 100.50

SELECT id FROM accounts WHERE id = 1.5

SELECT id FROM accounts WHERE id = '1'

SELECT id FROM accounts WHERE id = 3000000000

SELECT id FROM accounts WHERE big = 3000000000

SELECT id FROM accounts WHERE big = 42 OR small = -3

SELECT id FROM accounts WHERE small = 7 AND big > -10

SELECT id FROM accounts WHERE ratio < 1 ORDER BY id

SELECT id, ratio FROM accounts WHERE ratio = 0.5

SELECT id FROM accounts WHERE name = 'alice'

SELECT id FROM accounts WHERE name = 'dave''s'

SELECT id FROM accounts WHERE name = E'dave\'s'

SELECT id FROM accounts WHERE name = $$dave's$$

SELECT id FROM accounts WHERE name LIKE 'a%' OR name ILIKE '%O%' ORDER BY 1

SELECT id FROM accounts WHERE name IN ('alice', 'bob', 'nobody') ORDER BY id

SELECT id FROM accounts WHERE id IN (1, 2, 3, 4, 5, 6, 7, 8, 9, 10) ORDER BY id DESC

SELECT id FROM accounts WHERE id = ANY('{1,3}') ORDER BY 1

SELECT id FROM accounts WHERE created = '2024-02-29'

SELECT id FROM accounts WHERE created > '2024-01-01' ORDER BY id

SELECT id FROM accounts WHERE created BETWEEN '2024-01-01' AND '2024-12-31' ORDER BY id

SELECT id FROM accounts WHERE created = date '2024-02-29'

SELECT id FROM accounts WHERE ts > '2024-01-01 00:00:00+00' ORDER BY id

SELECT id FROM accounts WHERE ts AT TIME ZONE 'UTC' < '2024-06-01' ORDER BY id

SELECT id FROM accounts WHERE flag = true ORDER BY id

SELECT id FROM accounts WHERE flag ORDER BY id

SELECT id FROM accounts WHERE flag IS NULL

SELECT id FROM accounts WHERE big IS NULL OR ratio IS NULL

SELECT id FROM accounts WHERE tags @> '{a}' ORDER BY id

SELECT id FROM accounts WHERE 'b' = ANY(tags)

SELECT id FROM accounts WHERE tags = '{}'

SELECT id FROM accounts WHERE tags[1] = 'a'

SELECT id, tags[1], tags[2:3] FROM accounts ORDER BY id

SELECT id FROM accounts WHERE data @> '{"k": 1}'

SELECT id, data -> 'k', data ->> 'k', data #> '{nested,a,1}', data #>> '{nested,a}' FROM accounts ORDER BY id

SELECT id FROM accounts WHERE data ? 'nested'

SELECT id FROM accounts WHERE (data ->> 'k')::int = 2

SELECT id FROM accounts WHERE code = 'abc'

SELECT id FROM accounts WHERE code = 'xy '

SELECT id, code, length(code), code || '|' FROM accounts ORDER BY id

SELECT id FROM accounts WHERE note = 'first'

SELECT id FROM accounts WHERE uid = 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'

SELECT id FROM accounts WHERE uid = 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'::uuid

SELECT id FROM accounts WHERE bits = B'1010'

SELECT id FROM accounts WHERE bits = '1010'

SELECT id FROM accounts WHERE vbits = B'101'

SELECT id, bits & B'0011', bits | X'8' FROM accounts WHERE bits IS NOT NULL ORDER BY id

SELECT id FROM accounts WHERE dur > '1 hour' ORDER BY id

SELECT id FROM accounts WHERE dur = interval '1 day'

SELECT id, dur + '1 hour', dur * 2 FROM accounts WHERE dur IS NOT NULL ORDER BY id

SELECT id FROM accounts WHERE t > '12:00' ORDER BY id

SELECT id, t + interval '30 minutes' FROM accounts ORDER BY id

SELECT id FROM accounts WHERE raw = '\x00ff'

SELECT id, raw, length(raw) FROM accounts ORDER BY id

SELECT id, balance + 1, balance * 1.5, balance - -1, -balance, abs(balance), round(balance, 1) FROM accounts ORDER BY id

SELECT id, big + 1, big * 2, small + 1, small * 100000 FROM accounts WHERE id < 4 ORDER BY id

SELECT id, ratio * 2, ratio + 1.5 FROM accounts ORDER BY id

SELECT name || ' (' || id || ')' FROM accounts ORDER BY id

SELECT upper(name), substr(name, 1, 2), name ~ '^[a-c]' FROM accounts ORDER BY id

SELECT id, CASE WHEN balance > 100 THEN 'rich' WHEN balance < 0 THEN 'debt' ELSE 'ok' END FROM accounts ORDER BY id

SELECT id, coalesce(big, 0), coalesce(note, 'none'), coalesce(ratio, -1) FROM accounts ORDER BY id

SELECT id FROM accounts ORDER BY id LIMIT 2

SELECT id FROM accounts ORDER BY id LIMIT 2 OFFSET 1

SELECT id FROM accounts ORDER BY id OFFSET 3

SELECT id FROM accounts ORDER BY id LIMIT ALL

SELECT id FROM accounts ORDER BY id LIMIT 0

SELECT id FROM accounts ORDER BY id OFFSET 1 ROWS FETCH FIRST 2 ROWS ONLY

SELECT id FROM accounts ORDER BY id FETCH FIRST ROW ONLY

SELECT id FROM accounts ORDER BY id FETCH NEXT 3 ROWS ONLY

SELECT id, name FROM accounts ORDER BY 2

SELECT id, name FROM accounts ORDER BY 2 DESC, 1

SELECT id, name FROM accounts ORDER BY (1) DESC

SELECT id, balance FROM accounts ORDER BY balance DESC NULLS LAST, 1 LIMIT 3

SELECT id, name FROM accounts ORDER BY CASE WHEN name = 'bob' THEN 0 ELSE 1 END, id

SELECT id, name FROM accounts ORDER BY id % 2, id LIMIT 4

SELECT status, count(*) FROM orders GROUP BY 1 ORDER BY 1

SELECT status, count(*), sum(amount) FROM orders WHERE amount > 10 GROUP BY status HAVING count(*) > 5 ORDER BY 2 DESC, 1

SELECT account_id, count(*) FROM orders GROUP BY account_id ORDER BY account_id LIMIT 3

--! server-pass
--! GROUP BY keeps its literals; the select list's parameter no longer matches (42803).
SELECT date_trunc('month', placed) AS m, count(*) FROM orders GROUP BY date_trunc('month', placed) ORDER BY 1

SELECT date_trunc('month', placed) AS m, count(*) FROM orders GROUP BY 1 ORDER BY 1

SELECT placed > '2024-02-01', count(*) FROM orders GROUP BY 1 ORDER BY 1

SELECT status, account_id, count(*) FROM orders GROUP BY ROLLUP (1, 2) ORDER BY 1, 2

SELECT DISTINCT status FROM orders ORDER BY 1

SELECT DISTINCT ON (account_id) account_id, id FROM orders ORDER BY account_id, id DESC

SELECT DISTINCT ON (1) account_id, id FROM orders ORDER BY 1, 2

SELECT count(*), sum(amount), avg(amount), min(placed), max(placed) FROM orders WHERE status = 'paid'

SELECT count(*) FILTER (WHERE amount > 50), count(*) FILTER (WHERE status = 'new') FROM orders

SELECT string_agg(name, ', ' ORDER BY name) FROM accounts WHERE id < 4

SELECT array_agg(id ORDER BY id DESC) FROM orders WHERE account_id = 2

SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) FROM orders

SELECT id, rank() OVER (ORDER BY amount DESC, id) FROM orders WHERE account_id = 1 ORDER BY id

SELECT id, sum(amount) OVER (PARTITION BY account_id ORDER BY id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) FROM orders WHERE id <= 10 ORDER BY id

SELECT id, lag(amount, 1, 0) OVER w FROM orders WHERE id < 6 WINDOW w AS (ORDER BY id) ORDER BY id

SELECT a.name, o.id, o.amount FROM accounts a JOIN orders o ON o.account_id = a.id WHERE o.amount > 80 ORDER BY o.id

SELECT a.name, count(o.id) FROM accounts a LEFT JOIN orders o ON o.account_id = a.id AND o.status = 'paid' GROUP BY a.name ORDER BY a.name

SELECT a.id, o.id, i.sku FROM accounts a JOIN orders o ON o.account_id = a.id JOIN items i ON i.order_id = o.id WHERE a.id = 3 AND i.qty >= 2 ORDER BY o.id LIMIT 5

SELECT a.aid FROM (SELECT id AS aid FROM accounts WHERE id > 1) AS a WHERE a.aid < 4 ORDER BY 1

SELECT id FROM accounts WHERE id IN (SELECT account_id FROM orders WHERE amount > 95) ORDER BY id

SELECT id FROM accounts a WHERE EXISTS (SELECT 1 FROM orders o WHERE o.account_id = a.id AND o.status = 'shipped') ORDER BY id

SELECT id, (SELECT count(*) FROM orders o WHERE o.account_id = a.id AND o.amount > 50) FROM accounts a ORDER BY id

SELECT * FROM accounts a, LATERAL (SELECT max(amount) AS top FROM orders o WHERE o.account_id = a.id AND o.id > 10) l WHERE a.id < 3 ORDER BY a.id

WITH big AS (SELECT * FROM orders WHERE amount > 90) SELECT count(*) FROM big

WITH t(n) AS (VALUES (1), (2), (3)) SELECT sum(n) * 2 FROM t

WITH RECURSIVE r(n) AS (VALUES (1) UNION ALL SELECT n + 1 FROM r WHERE n < 10) SELECT sum(n) FROM r

WITH x AS MATERIALIZED (SELECT 1 AS a), y AS NOT MATERIALIZED (SELECT 2 AS b) SELECT a, b FROM x, y

SELECT 1 UNION SELECT 2 ORDER BY 1

SELECT 'a' UNION ALL SELECT 'b' ORDER BY 1

SELECT id FROM accounts WHERE id < 3 INTERSECT SELECT account_id FROM orders ORDER BY 1

SELECT id FROM accounts EXCEPT SELECT 2 ORDER BY 1

VALUES (1, 'one'), (2, 'two')

VALUES (1.5, E'a\tb', NULL)

SELECT * FROM (VALUES (1, 'x'), (2, 'y')) AS v(n, s) WHERE n > 1

TABLE kv

SELECT * FROM big_orders WHERE account_id = 2 ORDER BY id LIMIT 2

SELECT * FROM accounts WHERE id = 1 FOR UPDATE

SELECT * FROM kv WHERE k = 'a' FOR SHARE SKIP LOCKED

SELECT 1 / 0

SELECT 1.0 / 0

SELECT 'abc'::int

SELECT '2024-13-45'::date

SELECT id FROM accounts WHERE created = '2024-13-45'

SELECT id FROM accounts WHERE id = 'x'

SELECT 2147483647 + 1

SELECT 9223372036854775807 + 1

SELECT (ARRAY[1, 2])[5]

SELECT 'x'::varchar(1) || 'y', 'abcdef'::char(3)

SELECT sqrt(-1)

SELECT no_such_column FROM accounts

SELECT * FROM no_such_table WHERE a = 1

SELECT length(42)

INSERT INTO kv VALUES ('c', 3)

INSERT INTO kv (k, v) VALUES ('d', 4), ('e', NULL), (E'f\\g', -5) RETURNING *

INSERT INTO kv VALUES ('a', 10)

INSERT INTO kv VALUES ('a', 10) ON CONFLICT (k) DO UPDATE SET v = kv.v + 100 RETURNING k, v

INSERT INTO kv VALUES ('a', 10) ON CONFLICT DO NOTHING

INSERT INTO kv VALUES (NULL, 1)

INSERT INTO kv SELECT 'z' || i, i * 10 FROM generate_series(1, 3) AS i RETURNING v

INSERT INTO accounts (id, name, balance) VALUES (10, 'eve', -2000)

INSERT INTO accounts (id, name, balance, created, ts, tags, data, code, uid, bits) VALUES (11, 'frank', '12.345', '2024-05-05', '2024-05-05 05:05:05+05', '{x,y}', '{"new": true}', 'abcd', 'e0eebc99-9c0b-4ef8-bb6d-6bb9bd380a15', B'1')

--! server-pass
--! A quoted literal assigned to an interval column: refused, whatever the column's typmod.
INSERT INTO accounts (id, name, dur) VALUES (11, 'frank', '3 days')

INSERT INTO accounts (id, name, balance, small) VALUES (12, 'gina', 1.005, 40000)

INSERT INTO accounts (id, name, code, note) VALUES (13, 'hal', 'ab', 'short') RETURNING id, code, note, balance

INSERT INTO accounts (id, name, note) VALUES (14, 'ivy', 'this note is way too long for twenty')

INSERT INTO orders (id, account_id, amount, placed) VALUES (100, 99, 1, '2024-01-01')

INSERT INTO orders (id, account_id, amount, placed) VALUES (101, 1, 12.345, '2024-01-01') RETURNING amount, status

INSERT INTO items VALUES (1, 'sku-x', 0)

INSERT INTO accounts (id, name, balance) SELECT 20 + i, 'gen' || i, i * 1.5 FROM generate_series(1, 3) AS i RETURNING id, balance

INSERT INTO kv DEFAULT VALUES

UPDATE kv SET v = v + 1 WHERE k = 'a'

UPDATE kv SET v = v * 2 WHERE k IN ('a', 'b') RETURNING k, v

UPDATE kv SET v = NULL, k = k || '!' WHERE v > 1 RETURNING *

UPDATE accounts SET balance = balance - 5000 WHERE id = 1

UPDATE accounts SET note = 'updated', tags = array_append(tags, 'c') WHERE id = 1 RETURNING note, tags

UPDATE accounts SET balance = '7.777' WHERE id = 2 RETURNING balance

--! server-pass
UPDATE accounts SET dur = dur + '1 hour' WHERE id = 1 RETURNING dur

UPDATE accounts SET dur = dur + '1 hour'::interval WHERE id = 1 RETURNING dur

UPDATE accounts a SET balance = a.balance + o.amount FROM orders o WHERE o.account_id = a.id AND o.id = 7 RETURNING a.id, a.balance

UPDATE orders SET status = 'cancelled' WHERE placed < '2024-01-05' AND status <> 'shipped'

UPDATE kv SET v = 1 / 0 WHERE k = 'a'

DELETE FROM kv WHERE k = 'b'

DELETE FROM kv WHERE v < 100 RETURNING k

DELETE FROM orders WHERE id = 1

DELETE FROM items WHERE order_id BETWEEN 5 AND 9 AND sku LIKE 'sku-%' RETURNING order_id, qty

DELETE FROM accounts WHERE id = 99

WITH d AS (DELETE FROM kv WHERE k = 'a' RETURNING *) SELECT count(*) FROM d

WITH u AS (UPDATE orders SET amount = amount + 1 WHERE id < 4 RETURNING id, amount) SELECT sum(amount) FROM u

MERGE INTO kv USING (VALUES ('a', 5), ('q', 6)) AS s(k, v) ON kv.k = s.k WHEN MATCHED THEN UPDATE SET v = kv.v + s.v WHEN NOT MATCHED THEN INSERT VALUES (s.k, s.v)

MERGE INTO kv USING (SELECT 'b' AS k) s ON kv.k = s.k WHEN MATCHED AND kv.v > 100 THEN DELETE WHEN MATCHED THEN UPDATE SET v = 0

SELECT /* leading comment */ id FROM accounts WHERE id = 1 -- trailing comment

-- a comment first
SELECT id FROM accounts WHERE id = 2

SELECT id FROM accounts /* nested /* comment */ here */ WHERE id = 3

SELECT "id", "name" FROM "accounts" WHERE "id" = 4

SELECT id AS "Weird ""Name""", 'x' AS "quoted" FROM accounts WHERE id = 1

SELECT id, name AS year, 1 AS day FROM accounts WHERE id = 1

SELECT id FROM accounts WHERE id=1

SELECT id FROM accounts WHERE id=-1

SELECT id FROM accounts WHERE id+0=1

SELECT'a'AS x

SELECT id FROM accounts WHERE name = 'Émile ünï'

SELECT 'é' || name FROM accounts WHERE id = 5

SELECT lower('ÉÀ'), 'ß' = 'ss', length('😀'), E'\U0001F600'

SELECT '1 day'::interval, '1'::interval

SELECT 'now'::timestamptz = now(), 'today'::date = current_date

SELECT current_date = current_date, 1 < 2 AND 'a' <> 'b'

SELECT pg_typeof(1), pg_typeof(3000000000), pg_typeof(1.5), pg_typeof(B'1'), pg_typeof('a'::text)

--! server-pass
SELECT pg_typeof('a')

SELECT pg_typeof(-2147483648), pg_typeof(-2147483649), pg_typeof(9223372036854775808)

SELECT 'a' = 'a ', 'a'::char(3) = 'a', 'abc'::name

SELECT 7 / 2, 7 / 2.0, 7.0 / 2, -7 / 2, 7 % -3

SELECT 1 + '2', '3' || 4, '5'::int * '6'

SELECT '{1,2}'::text[] || '{3}', ARRAY[1] || 2, 3 || ARRAY[4]

SELECT '{1,2}'::text[] || '3'

SELECT 'x' = ANY(ARRAY['x', 'y']), 1 = ALL('{1,1}'::int[])

SELECT nextval IS NULL FROM (SELECT NULL AS nextval) s

SELECT to_timestamp(0) AT TIME ZONE 'UTC', make_date(2024, 2, 29), age(date '2024-03-01', date '2024-01-01')

SELECT '2024-01-01'::date - '2023-01-01'::date, '2024-01-01'::timestamp - interval '1 day'

SELECT split_part('a,b,c', ',', 2), regexp_replace('aaa', 'a', 'b', 'g'), format('%s-%s', 'a'::text, 1)

SELECT jsonb_path_query_array('{"a": [1, 2, 3]}', '$.a[*] ? (@ > 1)')

SELECT ((1 + 2) * (3 - -4)) / 2, ((((1))))

SELECT id FROM accounts WHERE (id, name) = (1, 'alice')

SELECT id FROM accounts WHERE id BETWEEN -1 AND +3 ORDER BY id

SELECT +5, + 5, -+5, +-5

SELECT id, balance FROM accounts WHERE balance >= -20 AND balance <= 100.5 ORDER BY id

SELECT 1 AS one, 2 AS two, 3 AS three, 4, 5, 6, 7, 8, 9, 10, 'eleven', 12.0, -13, E'\x0e', 15

SELECT id FROM accounts WHERE id IN (1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30) ORDER BY id

SELECT $x$a$x$ || $y$b$y$, $_$c$_$

SELECT 'select 1; select 2'

SELECT id FROM accounts WHERE name = 'x;y' OR note = '--not a comment' OR note = '/* nor this */'

SELECT id FROM accounts WHERE name = $$a ' b$$ OR name = 'a $$ b'

SELECT 1 AS "$1", '$1' AS dollar

SELECT t.a$1 FROM (SELECT 1 AS a$1) t

SELECT 'abc'::varchar(2), 'ab'::char(5) || '|', 1.2345::numeric(3,2)

SELECT x::numeric(4,1) FROM (VALUES ('1.25'), ('-9.95')) v(x)

SELECT CAST('1.005' AS numeric(10, 2)), CAST(x AS varchar(3)) FROM (VALUES ('abcdef')) v(x)

SELECT '2024-01-01 12:34:56.789'::timestamp(0), '12:34:56.789'::time(1)

SELECT sum(x) OVER (ORDER BY x ROWS 1 PRECEDING) FROM (VALUES (1), (2), (3)) v(x)

SELECT id FROM orders WHERE id % 10 = 0 AND amount > 10.5 ORDER BY amount DESC, id LIMIT 3 OFFSET 1

SELECT id FROM orders TABLESAMPLE SYSTEM (100) REPEATABLE (7) WHERE id = 5

SELECT o.id FROM orders o WHERE o.placed = (SELECT max(placed) FROM orders WHERE status = 'paid')

SELECT count(*) FROM orders WHERE status = ANY(ARRAY['new', 'paid']) AND placed >= '2024-01-15'

SELECT count(*) FROM orders WHERE (status, account_id) IN (('new', 1), ('paid', 2))

SELECT account_id, sum(amount) FROM orders GROUP BY account_id HAVING sum(amount) > 200 ORDER BY 2 DESC LIMIT 2

SELECT id FROM accounts WHERE created + 30 > '2024-02-15' ORDER BY 1

SELECT 'a' || NULL, NULL || 'b', NULL + 1, NULL = NULL

--! pass multiple_statements
SELECT 1; SELECT 2

--! pass multiple_statements
SELECT id FROM accounts WHERE id = 1; UPDATE kv SET v = 0

--! pass has_parameters
SELECT $1

--! pass empty
-- only a comment

--! pass utility
BEGIN

--! pass utility
SET search_path = 'public'

--! pass utility
SET statement_timeout TO 1000

--! pass utility
SHOW search_path

--! pass utility
CREATE TEMP TABLE tmp_x (a varchar(10) DEFAULT 'x')

--! pass utility
EXPLAIN SELECT * FROM accounts WHERE id = 1

--! pass utility
DO $$BEGIN RAISE NOTICE 'hi %', 1; END$$

--! pass utility
DISCARD ALL

--! pass utility
VACUUM kv

--! pass utility
LISTEN channel

--! pass select_into
SELECT 1 AS a INTO TEMP new_table

--! pass unsupported_literal
SELECT U&'d\0061t\+000061'

--! pass unsupported_literal
SELECT N'national'

--! pass unsupported_literal
SELECT 0x1F

--! pass unsupported_literal
SELECT 1_000

--! pass unsupported_literal
SELECT 123abc

--! pass unsupported_literal
SELECT E'\0'

--! pass unexpected_character
SELECT :var

--! pass unexpected_character
SELECT id FROM accounts WHERE id = :'v'

--! pass unterminated
SELECT 'unterminated

--! pass unterminated
SELECT 1 /* unterminated comment

--! pass unbalanced
SELECT (1

--! pass adjacent_literals
SELECT 'a' 'b'

--! pass interval_qualifier
SELECT '1'::interval hour

--! pass interval_qualifier
SELECT CAST('1' AS interval day to second)

--! pass time_dependent_literal
SELECT date 'today' = current_date

--! pass time_dependent_literal
SELECT timestamptz 'now' = now()

--! pass syntax
SELEC 1

--! pass syntax
SELECT id FROM accounts WHERE

--! pass syntax
SELECT 1 FROM accounts GROUP BY

--! pass long_name
SELECT 1 AS aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa

--! pass type_modifier
SELECT numeric(10, 2) '1.5'

--! pass constant_mismatch
SELECT - - 5

--! server-pass
SELECT 'a' IS NULL

--! server-pass
SELECT format('%s', 'x')

--! server-pass
SELECT ROW('a', 'b')

SELECT 'a' || 'b'

--! server-pass
--! Assigned to `interval hour`, '1' is 1 hour as a literal, 0 as a parameter.
INSERT INTO ivh VALUES ('1')

SELECT interval '1 day' + '1 hour'

--! server-pass
SELECT DISTINCT a + 1 FROM (VALUES (1)) v(a) ORDER BY a + 1

--! server-pass
SELECT date_trunc('day', placed), count(*) FROM orders GROUP BY date_trunc('day', placed) ORDER BY 1 LIMIT 2
