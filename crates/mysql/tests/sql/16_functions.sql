-- MySQL functions in both paths: each query once as the key-value/scan path runs it and once
-- through a derived table (the analytic engine, which runs these functions on the same
-- evaluator): DATE_FORMAT, the week and day functions, SUBSTRING_INDEX, FIELD/ELT,
-- FROM_UNIXTIME/UNIX_TIMESTAMP, TRUNCATE, FLOOR/CEIL of decimals, LENGTH in bytes, SUBSTRING
-- with negative positions, MOD and friends.
CREATE TABLE fe (id INT PRIMARY KEY, name VARCHAR(20), d DATE, ts DATETIME, amt DECIMAL(10,3), x DOUBLE, n BIGINT) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO fe VALUES (1, 'www.mysql.com', '2024-03-05', '2024-03-05 13:04:05', 12.345, 2.75, 255), (2, 'héllo', '2000-01-01', '2000-01-01 00:00:00', -7.5, -1.25, -7), (3, NULL, NULL, NULL, NULL, NULL, NULL), (4, 'a,b,c', '2008-12-31', '2008-12-31 23:59:59', 0.999, 0, 0), (5, 'x', '2011-12-11', '1999-07-04 06:30:00', 100, 1e10, 1700000000);
SELECT id, DATE_FORMAT(ts, '%Y-%m-%d %H:%i:%s') AS a, DATE_FORMAT(d, '%a %b %c %D %e %j %M %W %w %y') AS b, DATE_FORMAT(ts, '%h %I %k %l %p %r %T %f %% %q') AS c FROM fe ORDER BY id;
SELECT id, DATE_FORMAT(ts, '%Y-%m-%d %H:%i:%s') AS a, DATE_FORMAT(d, '%a %b %c %D %e %j %M %W %w %y') AS b, DATE_FORMAT(ts, '%h %I %k %l %p %r %T %f %% %q') AS c FROM (SELECT * FROM fe) AS t ORDER BY id;
SELECT id, DATE_FORMAT(d, '%U %u %V %v %X %x') AS w, WEEK(d) AS w0, WEEK(d, 1) AS w1, WEEK(d, 2) AS w2, WEEK(d, 3) AS w3, WEEK(d, 5) AS w5, WEEK(d, 7) AS w7 FROM fe ORDER BY id;
SELECT id, DATE_FORMAT(d, '%U %u %V %v %X %x') AS w, WEEK(d) AS w0, WEEK(d, 1) AS w1, WEEK(d, 2) AS w2, WEEK(d, 3) AS w3, WEEK(d, 5) AS w5, WEEK(d, 7) AS w7 FROM (SELECT * FROM fe) AS t ORDER BY id;
SELECT id, DAYOFWEEK(d) AS dw, WEEKDAY(d) AS wd, DAYOFYEAR(ts) AS dy, LAST_DAY(d) AS ld, MONTHNAME(d) AS mn, DAYNAME(ts) AS dn FROM fe ORDER BY id;
SELECT id, DAYOFWEEK(d) AS dw, WEEKDAY(d) AS wd, DAYOFYEAR(ts) AS dy, LAST_DAY(d) AS ld, MONTHNAME(d) AS mn, DAYNAME(ts) AS dn FROM (SELECT * FROM fe) AS t ORDER BY id;
SELECT id, SUBSTRING_INDEX(name, '.', 2) AS a, SUBSTRING_INDEX(name, '.', -2) AS b, SUBSTRING_INDEX(name, ',', 1) AS c, SUBSTRING_INDEX(name, 'zz', 1) AS e, SUBSTRING_INDEX(name, '.', 0) AS z FROM fe ORDER BY id;
SELECT id, SUBSTRING_INDEX(name, '.', 2) AS a, SUBSTRING_INDEX(name, '.', -2) AS b, SUBSTRING_INDEX(name, ',', 1) AS c, SUBSTRING_INDEX(name, 'zz', 1) AS e, SUBSTRING_INDEX(name, '.', 0) AS z FROM (SELECT * FROM fe) AS t ORDER BY id;
SELECT id, FIELD(name, 'x', 'a,b,c', 'héllo') AS f, ELT(id, 'one', 'two', 'three') AS e, FROM_UNIXTIME(n) AS fu, FROM_UNIXTIME(n, '%Y %D %M') AS fuf, UNIX_TIMESTAMP(ts) AS ut FROM fe WHERE id <> 2 ORDER BY id;
SELECT id, FIELD(name, 'x', 'a,b,c', 'héllo') AS f, ELT(id, 'one', 'two', 'three') AS e, FROM_UNIXTIME(n) AS fu, FROM_UNIXTIME(n, '%Y %D %M') AS fuf, UNIX_TIMESTAMP(ts) AS ut FROM (SELECT * FROM fe) AS t WHERE id <> 2 ORDER BY id;
SELECT id, TRUNCATE(amt, 1) AS t1, TRUNCATE(amt, 0) AS t0, TRUNCATE(x, 1) AS tx, FLOOR(amt) AS fl, CEIL(amt) AS ce, CEILING(x) AS cx, MOD(n, 4) AS m, MOD(n, 0) AS m0, SIGN(amt) AS s FROM fe ORDER BY id;
SELECT id, TRUNCATE(amt, 1) AS t1, TRUNCATE(amt, 0) AS t0, TRUNCATE(x, 1) AS tx, FLOOR(amt) AS fl, CEIL(amt) AS ce, CEILING(x) AS cx, MOD(n, 4) AS m, MOD(n, 0) AS m0, SIGN(amt) AS s FROM (SELECT * FROM fe) AS t ORDER BY id;
SELECT id, LENGTH(name) AS len, SUBSTRING(name, -3) AS s3, SUBSTRING(name, 2, 3) AS s23, MID(name, -4, 2) AS m, LCASE(name) AS lc, UCASE(name) AS uc, LOCATE('l', name) AS lo, ORD(name) AS o, ISNULL(name) AS isn FROM fe ORDER BY id;
SELECT id, LENGTH(name) AS len, SUBSTRING(name, -3) AS s3, SUBSTRING(name, 2, 3) AS s23, MID(name, -4, 2) AS m, LCASE(name) AS lc, UCASE(name) AS uc, LOCATE('l', name) AS lo, ORD(name) AS o, ISNULL(name) AS isn FROM (SELECT * FROM fe) AS t ORDER BY id;
SELECT id, HEX(n) AS hn, HEX(name) AS hs, CONCAT('[', SPACE(id), ']') AS sp FROM fe WHERE id IN (1, 4, 5) ORDER BY id;
SELECT id, HEX(n) AS hn, HEX(name) AS hs, CONCAT('[', SPACE(id), ']') AS sp FROM (SELECT * FROM fe) AS t WHERE id IN (1, 4, 5) ORDER BY id;
SELECT DATE_FORMAT(d, '%Y-%m') AS month, COUNT(*) AS n, SUM(TRUNCATE(amt, 0)) AS s FROM (SELECT * FROM fe) AS t GROUP BY DATE_FORMAT(d, '%Y-%m') ORDER BY month;
SELECT id, CAST(amt AS SIGNED) AS s, CAST(x AS SIGNED) AS sx, CAST(n AS UNSIGNED) AS u, CONVERT(amt, SIGNED) AS cs, CONVERT(amt, CHAR) AS cc, CONVERT(name USING utf8mb4) AS cu, CAST(CONCAT(id, '7') AS SIGNED) AS fromtext FROM fe ORDER BY id;
SELECT id, CAST(amt AS SIGNED) AS s, CAST(x AS SIGNED) AS sx, CAST(n AS UNSIGNED) AS u, CONVERT(amt, SIGNED) AS cs, CONVERT(amt, CHAR) AS cc, CONVERT(name USING utf8mb4) AS cu, CAST(CONCAT(id, '7') AS SIGNED) AS fromtext FROM (SELECT * FROM fe) AS t ORDER BY id;
SELECT id, STR_TO_DATE(DATE_FORMAT(d, '%d,%m,%Y'), '%d,%m,%Y') AS back, STR_TO_DATE('May 1, 2013', '%M %d,%Y') AS m, STR_TO_DATE('a09:30:17', 'a%h:%i:%s') AS t, STR_TO_DATE('2024-03-05 01:04:05 PM', '%Y-%m-%d %r') AS r, FORMAT(amt * 1000, 2) AS f2, FORMAT(x, 0) AS f0, FORMAT(n, 1) AS fn FROM fe ORDER BY id;
SELECT id, STR_TO_DATE(DATE_FORMAT(d, '%d,%m,%Y'), '%d,%m,%Y') AS back, STR_TO_DATE('May 1, 2013', '%M %d,%Y') AS m, STR_TO_DATE('a09:30:17', 'a%h:%i:%s') AS t, STR_TO_DATE('2024-03-05 01:04:05 PM', '%Y-%m-%d %r') AS r, FORMAT(amt * 1000, 2) AS f2, FORMAT(x, 0) AS f0, FORMAT(n, 1) AS fn FROM (SELECT * FROM fe) AS t ORDER BY id;
SELECT id, TIMESTAMPDIFF(DAY, d, '2024-03-01') AS dd, TIMESTAMPDIFF(MONTH, d, '2024-03-05') AS mm, TIMESTAMPDIFF(MONTH, '2024-03-05 13:04:06', ts) AS mneg, TIMESTAMPDIFF(YEAR, ts, '2025-01-01') AS yy, TIMESTAMPDIFF(QUARTER, d, '2025-01-01') AS qq, TIMESTAMPDIFF(HOUR, ts, '2024-03-05') AS hh, TIMESTAMPDIFF(SECOND, d, ts) AS ss, TIMESTAMPADD(DAY, 1, d) AS nd, TIMESTAMPADD(MONTH, 1, ts) AS nm, TIMESTAMPADD(MINUTE, 90, d) AS nmin FROM fe ORDER BY id;
SELECT id, TIMESTAMPDIFF(DAY, d, '2024-03-01') AS dd, TIMESTAMPDIFF(MONTH, d, '2024-03-05') AS mm, TIMESTAMPDIFF(MONTH, '2024-03-05 13:04:06', ts) AS mneg, TIMESTAMPDIFF(YEAR, ts, '2025-01-01') AS yy, TIMESTAMPDIFF(QUARTER, d, '2025-01-01') AS qq, TIMESTAMPDIFF(HOUR, ts, '2024-03-05') AS hh, TIMESTAMPDIFF(SECOND, d, ts) AS ss, TIMESTAMPADD(DAY, 1, d) AS nd, TIMESTAMPADD(MONTH, 1, ts) AS nm, TIMESTAMPADD(MINUTE, 90, d) AS nmin FROM (SELECT * FROM fe) AS t ORDER BY id;
SELECT id, MD5(name) AS m, SHA1(name) AS s1, SHA(n) AS s, SHA2(name, 256) AS s2, SHA2(name, 0) AS s0, SHA2(name, 7) AS bad, CRC32(name) AS c, CRC32(n) AS cn FROM fe ORDER BY id;
SELECT id, MD5(name) AS m, SHA1(name) AS s1, SHA(n) AS s, SHA2(name, 256) AS s2, SHA2(name, 0) AS s0, SHA2(name, 7) AS bad, CRC32(name) AS c, CRC32(n) AS cn FROM (SELECT * FROM fe) AS t ORDER BY id;
SELECT id, FROM_UNIXTIME(n) AS fu, FROM_UNIXTIME(-1) AS neg, FROM_UNIXTIME(n, '%Y') AS fuf FROM fe WHERE id = 2;
SELECT id, FROM_UNIXTIME(n) AS fu, FROM_UNIXTIME(-1) AS neg, FROM_UNIXTIME(n, '%Y') AS fuf FROM (SELECT * FROM fe) AS t WHERE id = 2;
SELECT id, SHA2(name, 224) AS s224, SHA2(name, 384) AS s384, SHA2(name, 512) AS s512 FROM fe ORDER BY id;
SELECT id, SHA2(name, 224) AS s224, SHA2(name, 384) AS s384, SHA2(name, 512) AS s512 FROM (SELECT * FROM fe) AS t ORDER BY id;
-- SUBSTRING of a text column from a constant position (the engine's vectorised MID): multibyte
-- characters, empty and NULL strings, starts past the end, zero and negative lengths.
CREATE TABLE mb (id INT PRIMARY KEY, s VARCHAR(20)) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO mb VALUES (1, 'héllo wörld'), (2, '日本語テキスト'), (3, ''), (4, NULL), (5, 'ab');
SELECT id, SUBSTRING(s, 1, 2) AS a, SUBSTRING(s, 3) AS b, SUBSTRING(s, 2, 0) AS c, SUBSTRING(s, 9, 5) AS d, SUBSTRING(s, 2, -1) AS e, SUBSTR(s FROM 4 FOR 3) AS f, MID(s, 1, 100) AS g FROM mb ORDER BY id;
SELECT id, SUBSTRING(s, 1, 2) AS a, SUBSTRING(s, 3) AS b, SUBSTRING(s, 2, 0) AS c, SUBSTRING(s, 9, 5) AS d, SUBSTRING(s, 2, -1) AS e, SUBSTR(s FROM 4 FOR 3) AS f, MID(s, 1, 100) AS g FROM (SELECT * FROM mb) AS t ORDER BY id;
-- TIME(), CAST of text to integers, arithmetic on text and text compared with numbers (as
-- DOUBLEs), numbers with exponents (DOUBLEs), GROUP_CONCAT with orders, DISTINCT, separators.
CREATE TABLE tx (id INT PRIMARY KEY, k INT, s VARCHAR(20), i INT, d DECIMAL(5,2), dt DATETIME(3), tm TIME(2)) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO tx VALUES (1, 1, '10', 9, 1.50, '2024-01-02 10:11:12.345', '-12:13:14.5'), (2, 1, '10.0', 10, NULL, NULL, NULL), (3, 2, 'abc', 0, 2.25, '2000-02-29 23:59:59', '838:59:59'), (4, 1, ' 7x', 7, 3.00, '1999-12-31 00:00:00', '00:00:01'), (5, 2, 'c', 3, 10.00, NULL, '01:02:03'), (6, 3, NULL, NULL, NULL, NULL, NULL);
SELECT TIME('2024-01-02 10:11:12.5') AS a, TIME('10:11') AS b, TIME('838:59:59') AS c, TIME('101112') AS e, TIME(NULL) AS f;
SELECT id, TIME(dt) AS a, TIME(s) AS b, HOUR(TIME(dt)) AS h, MINUTE(tm) AS m, SECOND('10:11:12') AS s2 FROM tx ORDER BY id;
SELECT CAST('3.7x' AS SIGNED) AS a, CAST('-3.7' AS SIGNED) AS b, CAST('1e3' AS SIGNED) AS c, CAST(' +12x' AS UNSIGNED) AS e, CAST('-1' AS UNSIGNED) AS f;
SELECT * FROM (SELECT CAST('3.7x' AS SIGNED) AS a, CAST('-3.7' AS SIGNED) AS b, CAST('1e3' AS SIGNED) AS c, CAST(' +12x' AS UNSIGNED) AS e, CAST('-1' AS UNSIGNED) AS f) AS t;
SELECT id, s + i AS a, s * 2 AS b, s / 4 AS c, 10 - s AS e, s % 3 AS f FROM tx ORDER BY id;
SELECT id, s + i AS a, s * 2 AS b, s / 4 AS c, 10 - s AS e, s % 3 AS f FROM (SELECT * FROM tx) AS t ORDER BY id;
SELECT id FROM tx WHERE s = 10 OR s = i OR i = '3.0' ORDER BY id;
SELECT id FROM (SELECT * FROM tx) AS t WHERE s = 10 OR s = i OR i = '3.0' ORDER BY id;
SELECT id, s > i AS a, i >= '7' AS b, '9' < s AS c, s <=> 10 AS e FROM (SELECT * FROM tx) AS t ORDER BY id;
SELECT 1e3 AS a, 1.5e2 * 2 AS b, 2e0 / 3 AS c, -1E-2 AS e;
SELECT * FROM (SELECT 1e3 AS a, 1.5e2 * 2 AS b, 2e0 / 3 AS c, -1E-2 AS e) AS t;
SELECT k, GROUP_CONCAT(s ORDER BY id DESC SEPARATOR '; ') AS a, GROUP_CONCAT(DISTINCT s ORDER BY s) AS b, GROUP_CONCAT(s, ':', d ORDER BY id) AS c, GROUP_CONCAT(d ORDER BY d DESC) AS e, COUNT(*) AS n FROM tx GROUP BY k ORDER BY k;
SELECT k, GROUP_CONCAT(s ORDER BY id DESC SEPARATOR '; ') AS a, GROUP_CONCAT(DISTINCT s ORDER BY s) AS b, GROUP_CONCAT(s, ':', d ORDER BY id) AS c, GROUP_CONCAT(d ORDER BY d DESC) AS e, COUNT(*) AS n FROM (SELECT * FROM tx) AS t GROUP BY k ORDER BY k;
SELECT GROUP_CONCAT(DISTINCT k ORDER BY k DESC) AS a, GROUP_CONCAT(id ORDER BY k DESC, id) AS b, GROUP_CONCAT(d ORDER BY d) AS c, GROUP_CONCAT(s + i ORDER BY id) AS e, GROUP_CONCAT(id ORDER BY id SEPARATOR '') AS f, GROUP_CONCAT(NULL) AS g FROM tx;
SELECT k, GROUP_CONCAT(id ORDER BY id) AS a FROM tx WHERE id > 100 GROUP BY k;
