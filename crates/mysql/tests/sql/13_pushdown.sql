-- Aggregation the data node computes itself (RonSQL's pushdown): arithmetic arguments, AVG,
-- the variance family, grouping by expressions, TPC-H Q1 and Q6 shapes, and the same queries
-- answered by the SQL layer where the data node cannot (functions, text arithmetic).
CREATE TABLE li (l_orderkey INT NOT NULL, l_linenumber INT NOT NULL, l_quantity DECIMAL(15,2) NOT NULL, l_extendedprice DECIMAL(15,2) NOT NULL, l_discount DECIMAL(15,2) NOT NULL, l_tax DECIMAL(15,2) NOT NULL, l_returnflag CHAR(1) NOT NULL, l_linestatus CHAR(1) NOT NULL, l_shipdate DATE NOT NULL, l_comment VARCHAR(44), n INT, f DOUBLE, u BIGINT UNSIGNED, PRIMARY KEY (l_orderkey, l_linenumber), KEY by_ship (l_shipdate)) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE digits (d INT PRIMARY KEY) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO digits VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9);
INSERT INTO li SELECT a.d * 10 + b.d, c.d, 1 + (a.d * 7 + b.d * 3 + c.d) % 50, 900 + ((a.d * 131 + b.d * 17 + c.d * 7) % 1000) * 10.37, ((a.d + b.d + c.d) % 11) / 100, ((a.d * 3 + c.d) % 9) / 100, CASE (a.d + c.d) % 3 WHEN 0 THEN 'A' WHEN 1 THEN 'N' ELSE 'R' END, CASE b.d % 2 WHEN 0 THEN 'F' ELSE 'O' END, DATE_ADD('1992-01-01', INTERVAL (a.d * 251 + b.d * 37 + c.d * 11) DAY), CONCAT('c', a.d, b.d, c.d), CASE WHEN c.d = 3 THEN NULL ELSE b.d - 4 END, (a.d - 4.5) * 1.25, a.d * 1000 + c.d FROM digits a, digits b, digits c;
SELECT COUNT(*) FROM li;
SELECT l_returnflag, l_linestatus, SUM(l_quantity) AS sum_qty, SUM(l_extendedprice) AS sum_base_price, SUM(l_extendedprice * (1 - l_discount)) AS sum_disc_price, SUM(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge, AVG(l_quantity) AS avg_qty, AVG(l_extendedprice) AS avg_price, AVG(l_discount) AS avg_disc, COUNT(*) AS count_order FROM li WHERE l_shipdate <= DATE '1998-12-01' - INTERVAL '90' DAY GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus;
SELECT SUM(l_extendedprice * l_discount) AS revenue FROM li WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1994-01-01' + INTERVAL '1' YEAR AND l_discount BETWEEN 0.06 - 0.01 AND 0.06 + 0.01 AND l_quantity < 30;
SELECT n, COUNT(*), COUNT(n), SUM(n), AVG(n), MIN(n), MAX(n), SUM(n * 2 - 1), AVG(-n) FROM li GROUP BY n ORDER BY n;
SELECT CAST(STDDEV(n) AS DECIMAL(30,6)), CAST(STDDEV_POP(l_quantity) AS DECIMAL(30,6)), CAST(STDDEV_SAMP(l_extendedprice) AS DECIMAL(30,6)), CAST(VARIANCE(f) AS DECIMAL(30,6)), CAST(VAR_POP(n) AS DECIMAL(30,6)), CAST(VAR_SAMP(l_discount * 100) AS DECIMAL(30,6)), CAST(STD(u) AS DECIMAL(30,6)) FROM li;
SELECT l_returnflag, CAST(VAR_SAMP(n) AS DECIMAL(30,6)), CAST(STDDEV_SAMP(n) AS DECIMAL(30,6)) FROM li WHERE l_orderkey < 3 GROUP BY l_returnflag ORDER BY l_returnflag;
SELECT VAR_SAMP(n), STDDEV_SAMP(n), VAR_POP(n), STDDEV(n), AVG(n), SUM(n), COUNT(n) FROM li WHERE l_orderkey = 5 AND l_linenumber = 2;
SELECT VAR_POP(n), STDDEV_SAMP(n), AVG(n), SUM(l_quantity), MIN(l_comment), COUNT(*) FROM li WHERE l_orderkey > 1000;
SELECT l_orderkey % 10 AS k, COUNT(*) FROM li GROUP BY l_orderkey % 10 ORDER BY k;
SELECT n * 2 + 1 AS g, SUM(l_quantity), MAX(l_comment), MIN(l_shipdate) FROM li GROUP BY n * 2 ORDER BY g;
SELECT l_linenumber - 5 AS g, COUNT(*), SUM(f), AVG(f), MAX(f * 2) FROM li GROUP BY l_linenumber - 5 HAVING COUNT(*) > 50 AND SUM(n) > 0 ORDER BY SUM(n * l_linenumber) DESC, g;
SELECT l_returnflag, SUM(u), AVG(u), SUM(u * 2), MAX(u + 1), SUM(l_quantity * n) FROM li GROUP BY l_returnflag ORDER BY 2 DESC;
SELECT SUM(f * f), SUM(l_quantity * l_tax * l_discount), SUM(n * l_discount), CAST(SUM(f * l_discount) AS DECIMAL(30,6)), AVG(l_quantity * l_tax), AVG(f * n) FROM li;
SELECT l_linestatus, COUNT(*) FROM li WHERE l_shipdate BETWEEN '1993-01-01' AND '1995-12-31' GROUP BY l_linestatus ORDER BY l_linestatus;
SELECT l_returnflag, CONCAT(l_returnflag, '!') AS x, COUNT(*) AS c FROM li GROUP BY l_returnflag ORDER BY c DESC, l_returnflag LIMIT 2;
SELECT SUM(ABS(n)), SUM(l_comment + 1), AVG(LENGTH(l_comment)), MAX(YEAR(l_shipdate)) FROM li;
SELECT l_returnflag, COUNT(DISTINCT n), SUM(DISTINCT n) FROM li GROUP BY l_returnflag ORDER BY l_returnflag;
SELECT SUM(n) FROM li WHERE l_comment LIKE 'c1%';
