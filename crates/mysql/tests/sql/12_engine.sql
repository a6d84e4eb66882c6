-- The analytic engine: joins that scan inner tables, derived tables, CTEs, correlated
-- subqueries, window functions and set operations over TPC-H-shaped tables.
CREATE TABLE region (r_regionkey INT PRIMARY KEY, r_name CHAR(25) NOT NULL) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE nation (n_nationkey INT PRIMARY KEY, n_name CHAR(25) NOT NULL, n_regionkey INT NOT NULL) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE customer (c_custkey INT PRIMARY KEY, c_name VARCHAR(25) NOT NULL, c_nationkey INT NOT NULL, c_acctbal DECIMAL(15,2) NOT NULL, c_mktsegment CHAR(10) NOT NULL) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE orders (o_orderkey INT PRIMARY KEY, o_custkey INT NOT NULL, o_orderstatus CHAR(1) NOT NULL, o_totalprice DECIMAL(15,2) NOT NULL, o_orderdate DATE NOT NULL, o_orderpriority CHAR(15) NOT NULL) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE lineitem (l_orderkey INT NOT NULL, l_linenumber INT NOT NULL, l_partkey INT NOT NULL, l_quantity DECIMAL(15,2) NOT NULL, l_extendedprice DECIMAL(15,2) NOT NULL, l_discount DECIMAL(15,2) NOT NULL, l_returnflag CHAR(1) NOT NULL, l_shipdate DATE NOT NULL, l_commitdate DATE NOT NULL, l_receiptdate DATE NOT NULL, PRIMARY KEY (l_orderkey, l_linenumber)) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE part (p_partkey INT PRIMARY KEY, p_name VARCHAR(55) NOT NULL, p_brand CHAR(10) NOT NULL, p_size INT NOT NULL) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO region VALUES (0, 'AFRICA'), (1, 'AMERICA'), (2, 'ASIA'), (3, 'EUROPE');
INSERT INTO nation VALUES (0, 'ALGERIA', 0), (1, 'ARGENTINA', 1), (2, 'BRAZIL', 1), (3, 'CANADA', 1), (4, 'CHINA', 2), (5, 'FRANCE', 3), (6, 'GERMANY', 3), (7, 'JAPAN', 2);
INSERT INTO customer VALUES (1, 'Customer#1', 2, 711.56, 'BUILDING'), (2, 'Customer#2', 5, 121.65, 'AUTOMOBILE'), (3, 'Customer#3', 2, 7498.12, 'AUTOMOBILE'), (4, 'Customer#4', 4, 2866.83, 'MACHINERY'), (5, 'Customer#5', 3, 794.47, 'HOUSEHOLD'), (6, 'Customer#6', 7, 7638.57, 'BUILDING'), (7, 'Customer#7', 6, -272.60, 'BUILDING');
INSERT INTO orders VALUES (1, 3, 'O', 173665.47, '1996-01-02', '5-LOW'), (2, 1, 'O', 46929.18, '1996-12-01', '1-URGENT'), (3, 6, 'F', 193846.25, '1993-10-14', '5-LOW'), (4, 1, 'O', 32151.78, '1995-10-11', '5-LOW'), (5, 4, 'F', 144659.20, '1994-07-30', '5-LOW'), (6, 6, 'F', 58749.59, '1992-02-21', '4-NOT SPECIFIED'), (7, 3, 'O', 252004.18, '1996-01-10', '2-HIGH'), (32, 2, 'O', 208660.75, '1995-07-16', '2-HIGH'), (33, 6, 'F', 163243.98, '1993-10-27', '3-MEDIUM'), (34, 5, 'O', 58949.67, '1998-07-21', '3-MEDIUM');
INSERT INTO lineitem VALUES (1, 1, 2, 17, 21168.23, 0.04, 'N', '1996-03-13', '1996-02-12', '1996-03-22'), (1, 2, 3, 36, 45983.16, 0.09, 'N', '1996-04-12', '1996-02-28', '1996-04-20'), (1, 3, 1, 8, 13309.60, 0.10, 'N', '1996-01-29', '1996-03-05', '1996-01-31'), (2, 1, 4, 38, 44694.46, 0.00, 'N', '1997-01-28', '1997-01-14', '1997-02-02'), (3, 1, 2, 45, 54058.05, 0.06, 'R', '1994-02-02', '1994-01-04', '1994-02-23'), (3, 2, 5, 49, 46796.47, 0.10, 'R', '1993-11-09', '1993-12-20', '1993-11-24'), (4, 1, 1, 30, 30690.90, 0.03, 'N', '1996-01-10', '1995-12-14', '1996-01-18'), (5, 1, 3, 15, 17554.68, 0.02, 'R', '1994-10-31', '1994-08-31', '1994-11-20'), (5, 2, 4, 26, 31876.28, 0.07, 'A', '1994-10-16', '1994-09-25', '1994-10-19'), (6, 1, 5, 37, 42230.20, 0.08, 'A', '1992-04-27', '1992-05-15', '1992-05-02'), (7, 1, 2, 12, 13608.60, 0.07, 'N', '1996-05-07', '1996-03-13', '1996-06-03'), (32, 1, 3, 28, 47227.60, 0.05, 'N', '1995-10-23', '1995-08-27', '1995-10-26'), (33, 1, 1, 31, 31884.77, 0.09, 'A', '1993-10-29', '1993-12-19', '1993-11-08'), (34, 1, 4, 13, 13317.76, 0.00, 'N', '1998-10-23', '1998-09-14', '1998-11-06');
INSERT INTO part VALUES (1, 'goldenrod lavender spring', 'Brand#13', 7), (2, 'blush thistle blue', 'Brand#13', 1), (3, 'spring green yellow', 'Brand#42', 21), (4, 'cornflower chocolate smoke', 'Brand#34', 14), (5, 'forest brown coral', 'Brand#32', 15);
SELECT l_orderkey, SUM(l_extendedprice * (1 - l_discount)) AS revenue, o_orderdate FROM customer, orders, lineitem WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey AND l_orderkey = o_orderkey AND o_orderdate < '1996-03-15' GROUP BY l_orderkey, o_orderdate ORDER BY revenue DESC, o_orderdate LIMIT 10;
SELECT n_name, SUM(l_extendedprice * (1 - l_discount)) AS revenue FROM customer JOIN orders ON o_custkey = c_custkey JOIN lineitem ON l_orderkey = o_orderkey JOIN nation ON n_nationkey = c_nationkey GROUP BY n_name ORDER BY revenue DESC;
SELECT o_orderpriority, COUNT(*) AS order_count FROM orders WHERE o_orderdate >= '1993-07-01' AND o_orderdate < '1996-10-01' AND EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey AND l_commitdate < l_receiptdate) GROUP BY o_orderpriority ORDER BY o_orderpriority;
SELECT SUM(l_extendedprice) AS total FROM lineitem, part WHERE p_partkey = l_partkey AND p_brand = 'Brand#13' AND l_quantity < (SELECT 1.2 * AVG(l_quantity) FROM lineitem WHERE l_partkey = p_partkey);
SELECT c_count, COUNT(*) AS custdist FROM (SELECT c_custkey, COUNT(o_orderkey) AS c_count FROM customer LEFT OUTER JOIN orders ON c_custkey = o_custkey GROUP BY c_custkey) AS c_orders GROUP BY c_count ORDER BY custdist DESC, c_count DESC;
WITH revenue AS (SELECT l_partkey AS pk, SUM(l_extendedprice * (1 - l_discount)) AS total FROM lineitem GROUP BY l_partkey) SELECT p_partkey, p_name, total FROM part, revenue WHERE p_partkey = pk AND total = (SELECT MAX(total) FROM revenue) ORDER BY p_partkey;
SELECT c_name, o_orderkey, ROW_NUMBER() OVER (PARTITION BY c_custkey ORDER BY o_orderdate) AS rn, SUM(o_totalprice) OVER (PARTITION BY c_custkey) AS cust_total FROM customer JOIN orders ON o_custkey = c_custkey ORDER BY c_name, rn;
SELECT c_custkey, c_name FROM customer WHERE NOT EXISTS (SELECT 1 FROM orders WHERE o_custkey = c_custkey) ORDER BY c_custkey;
SELECT c_custkey FROM customer WHERE c_acctbal > (SELECT AVG(c_acctbal) FROM customer WHERE c_acctbal > 0) AND c_custkey NOT IN (SELECT o_custkey FROM orders) ORDER BY c_custkey;
WITH RECURSIVE seq AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM seq WHERE n < 5) SELECT n FROM seq ORDER BY n;
SELECT r_name, cnt FROM region JOIN (SELECT n_regionkey, COUNT(*) AS cnt FROM nation GROUP BY n_regionkey) AS per ON per.n_regionkey = r_regionkey ORDER BY r_name;
SELECT YEAR(o_orderdate) AS o_year, COUNT(*) AS n FROM orders JOIN customer ON c_custkey = o_custkey JOIN nation ON n_nationkey = c_nationkey WHERE n_name IN ('BRAZIL', 'JAPAN') GROUP BY YEAR(o_orderdate) ORDER BY o_year;
SELECT l_returnflag, COUNT(*) AS n FROM lineitem WHERE l_partkey IN (SELECT p_partkey FROM part WHERE p_size > 10) GROUP BY l_returnflag HAVING COUNT(*) > 1 ORDER BY l_returnflag;
SELECT o_orderstatus AS s, COUNT(*) AS n FROM orders GROUP BY o_orderstatus UNION ALL SELECT l_returnflag, COUNT(*) FROM lineitem GROUP BY l_returnflag ORDER BY s, n;
SELECT c.c_name, o.o_orderkey FROM customer c LEFT JOIN orders o ON o.o_custkey = c.c_custkey AND o.o_totalprice > 150000 ORDER BY c.c_name, o.o_orderkey;
SELECT x, x / 2 AS half, x / 0 AS by_zero, x * 1.5 / 7 AS mixed, s / 7.0 AS dec_div, s / 3 AS s3, x / CAST(3 AS DOUBLE) AS dbl, -x / 7 AS neg, (x - 3) / 0.7 AS dec_neg, x / NULL AS n FROM (SELECT n_nationkey AS x, SUM(n_regionkey) AS s FROM nation GROUP BY n_nationkey) AS d ORDER BY x;
SELECT SUM(l_extendedprice) / 7.0 AS avg_yearly, SUM(l_quantity) / COUNT(*) AS per_line FROM lineitem, part WHERE p_partkey = l_partkey AND p_brand = 'Brand#13' AND l_quantity < (SELECT 1.2 * AVG(l_quantity) FROM lineitem WHERE l_partkey = p_partkey);
SELECT x / 2, x+1, 'lit', COUNT(*), d.x, SUM( x ) FROM (SELECT n_nationkey AS x FROM nation) AS d GROUP BY x ORDER BY x LIMIT 3;
SELECT x, x % 0 AS m0, x % 3 AS m3, -x % 3 AS mneg, s % 2.5 AS mdec, x % NULL AS mn FROM (SELECT n_nationkey AS x, SUM(n_regionkey) AS s FROM nation GROUP BY n_nationkey) AS d ORDER BY x;
SELECT * FROM (SELECT 1 AS a) AS t JOIN nosuchtable ON 1 = 1;
PREPARE pe FROM 'SELECT COUNT(*) AS n, SUM(c_acctbal) AS s FROM (SELECT * FROM customer WHERE c_mktsegment = ? AND c_acctbal > ?) AS t';
SET @seg = 'BUILDING', @k = -5;
EXECUTE pe USING @seg, @k;
SET @seg = 'it''s \\ odd';
EXECUTE pe USING @seg, @k;
PREPARE pw FROM 'WITH c AS (SELECT c_mktsegment AS seg, COUNT(*) AS n FROM customer GROUP BY c_mktsegment) SELECT seg, n, 10 -? AS m FROM c WHERE n >= ? ORDER BY seg';
SET @one = 1;
EXECUTE pw USING @k, @one;
PREPARE pl FROM 'SELECT LENGTH(?) AS len, ? AS v, ? - 1 AS neg FROM (SELECT 1 AS one) AS t';
EXECUTE pl USING @seg, @seg, @k;
DEALLOCATE PREPARE pl;
DEALLOCATE PREPARE pe;
DEALLOCATE PREPARE pw;
-- GROUP BY ... WITH ROLLUP: super-aggregate rows (NULL in the rolled-up columns) after the
-- groups they sum, groups ascending; positions, HAVING, LIMIT, NULL group values, a derived
-- table, and the words inside a string left alone.
SELECT n_regionkey, COUNT(*), SUM(n_nationkey) FROM nation GROUP BY n_regionkey WITH ROLLUP;
SELECT r_name, n_regionkey, COUNT(*) AS c, MAX(n_name) FROM nation JOIN region ON n_regionkey = r_regionkey GROUP BY 1, n_regionkey WITH ROLLUP;
SELECT o_orderstatus, o_orderpriority, COUNT(*) AS n, SUM(o_totalprice) FROM orders GROUP BY o_orderstatus, o_orderpriority WITH ROLLUP HAVING n > 1;
SELECT c_mktsegment, COUNT(*) FROM customer GROUP BY c_mktsegment WITH ROLLUP LIMIT 3;
SELECT IF(c_acctbal > 5000, NULL, c_nationkey) AS k, COUNT(*), AVG(c_acctbal) FROM customer GROUP BY k WITH ROLLUP;
SELECT x.k, x.n FROM (SELECT c_nationkey AS k, COUNT(*) AS n FROM customer GROUP BY c_nationkey WITH ROLLUP) AS x WHERE x.n > 1 ORDER BY x.n DESC, x.k;
SELECT 'GROUP BY a WITH ROLLUP' AS t, COUNT(*) FROM region GROUP BY t WITH ROLLUP;
