-- MySQL functions in the analytic engine (derived tables and joins send a statement there):
-- IF, CONCAT with NULL arguments, the date parts, DATE_ADD/DATE_SUB with intervals, DATEDIFF.
CREATE TABLE ev (id INT PRIMARY KEY, name VARCHAR(20), qty INT, d DATE, ts DATETIME) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE tag (id INT PRIMARY KEY, label VARCHAR(10)) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO ev VALUES (1, 'alpha', 5, '2024-01-31', '2024-01-31 23:59:58'), (2, NULL, NULL, '2023-12-01', '2023-12-01 00:00:00'), (3, 'gamma', 0, '2020-02-29', '2020-02-29 12:34:56'), (4, 'delta', -3, NULL, NULL);
INSERT INTO tag VALUES (1, 'one'), (2, 'two'), (3, NULL), (4, 'four');
SELECT id, IF(qty > 3, 'big', 'small') AS size, IF(qty IS NULL, -1, qty * 2) AS q2, IF(NULL, 1, 2) AS n FROM (SELECT id, qty FROM ev) AS t ORDER BY id;
SELECT ev.id, CONCAT(name, '-', label) AS both_, CONCAT(label) AS one_, CONCAT(name, qty) AS nq FROM ev JOIN tag ON tag.id = ev.id ORDER BY ev.id;
SELECT id, YEAR(d) AS y, QUARTER(d) AS q, MONTH(d) AS m, DAY(d) AS dd, DAYOFMONTH(d) AS dm, HOUR(ts) AS h, MINUTE(ts) AS mi, SECOND(ts) AS s FROM (SELECT id, d, ts FROM ev) AS t ORDER BY id;
SELECT id, DATE_ADD(d, INTERVAL 1 MONTH) AS next_month, DATE_SUB(d, INTERVAL 1 YEAR) AS last_year, DATE_ADD(d, INTERVAL 10 DAY) AS ten_days, ADDDATE(d, INTERVAL 1 DAY) AS tomorrow, SUBDATE(d, INTERVAL 1 DAY) AS yesterday FROM (SELECT id, d FROM ev) AS t ORDER BY id;
SELECT id, DATEDIFF(d, '2020-01-01') AS since_2020, DATEDIFF('2024-12-31', d) AS to_end, DATEDIFF(ts, d) AS same_day FROM (SELECT id, d, ts FROM ev) AS t ORDER BY id;
SELECT YEAR(d) AS y, COUNT(*) AS n, SUM(IF(qty > 0, qty, 0)) AS pos FROM (SELECT d, qty FROM ev) AS t GROUP BY YEAR(d) ORDER BY y;
SELECT tag.label, IF(ev.qty > 0, CONCAT(ev.name, '!'), 'none') AS v FROM ev JOIN tag ON tag.id = ev.id WHERE tag.label IS NOT NULL ORDER BY tag.label;
