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
