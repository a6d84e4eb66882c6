-- GROUP BY, HAVING, aggregates.
CREATE TABLE sales (id INT PRIMARY KEY, region VARCHAR(10) NOT NULL, product VARCHAR(10), amount DECIMAL(8,2), units INT) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO sales VALUES (1, 'north', 'a', 10.00, 1), (2, 'north', 'b', 20.50, 2), (3, 'south', 'a', 5.25, 3), (4, 'south', 'a', NULL, 4), (5, 'east', 'c', 100.00, NULL), (6, 'north', 'a', 1.25, 1);
SELECT region, COUNT(*), SUM(amount), AVG(amount), MIN(amount), MAX(amount) FROM sales GROUP BY region ORDER BY region;
SELECT region, SUM(units) AS u FROM sales GROUP BY region HAVING u > 3 ORDER BY region;
SELECT region, COUNT(*) c FROM sales GROUP BY region HAVING COUNT(*) > 1 ORDER BY c DESC, region;
SELECT product, COUNT(DISTINCT region) FROM sales GROUP BY product ORDER BY product;
SELECT SUM(units), AVG(units), SUM(amount) / COUNT(amount) FROM sales;
SELECT COUNT(*), SUM(amount), MAX(region) FROM sales WHERE id > 100;
SELECT region, product, SUM(units) FROM sales GROUP BY region, product ORDER BY region, product;
SELECT SUM(amount) FROM sales WHERE id BETWEEN 2 AND 4;
SELECT MIN(id), MAX(id) FROM sales WHERE region = 'north';
SELECT units, COUNT(*) FROM sales GROUP BY units ORDER BY units;
SELECT region FROM sales GROUP BY region ORDER BY SUM(amount) DESC;
SELECT COUNT(*) + 1, SUM(units) * 2 FROM sales;
-- Shapes the data node aggregates itself (single table, plain columns) and ones it does not.
CREATE TABLE m (id INT PRIMARY KEY, g INT, s VARCHAR(10), d DOUBLE, KEY by_g (g)) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO m VALUES (1, 1, 'b', 0.5), (2, 1, 'a', 1.25), (3, 2, NULL, NULL), (4, NULL, 'z', 2), (5, NULL, 'y', -1), (6, 2, 'c', 4);
SELECT g, COUNT(*), COUNT(s), MIN(s), MAX(s), SUM(d), MIN(d), MAX(id) FROM m GROUP BY g ORDER BY g;
SELECT COUNT(*), SUM(id), MAX(d) FROM m WHERE id BETWEEN 2 AND 5;
SELECT COUNT(*) FROM m WHERE g = 2;
SELECT g, SUM(id) FROM m WHERE d > 0 GROUP BY g HAVING SUM(id) > 2 ORDER BY g;
SELECT COUNT(*), SUM(d) FROM m WHERE s LIKE 'b%' OR d < 0;
SELECT COUNT(*), MIN(id) FROM m WHERE id > 100;
SELECT g, COUNT(*) FROM m WHERE g IN (1, 2) GROUP BY g ORDER BY g;
SELECT g + 1 AS h, COUNT(*) FROM m GROUP BY g ORDER BY h;
