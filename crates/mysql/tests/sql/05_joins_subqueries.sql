-- Inner and left joins (index nested loop), subqueries, UNION.
CREATE TABLE cust (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE ord (id INT PRIMARY KEY, cust_id INT, total DECIMAL(8,2), KEY by_cust (cust_id)) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO cust VALUES (1, 'ann'), (2, 'bob'), (3, 'cid');
INSERT INTO ord VALUES (10, 1, 5.00), (11, 1, 7.50), (12, 2, 1.00), (13, 9, 3.00);
SELECT c.name, o.id, o.total FROM cust c JOIN ord o ON o.cust_id = c.id ORDER BY o.id;
SELECT c.name, o.id FROM cust c LEFT JOIN ord o ON o.cust_id = c.id ORDER BY c.id, o.id;
SELECT c.name, COUNT(o.id), SUM(o.total) FROM cust c LEFT JOIN ord o ON o.cust_id = c.id GROUP BY c.name ORDER BY c.name;
SELECT o.id, c.name FROM ord o LEFT JOIN cust c ON c.id = o.cust_id ORDER BY o.id;
SELECT o.id FROM ord o, cust c WHERE c.id = o.cust_id AND c.name = 'ann' ORDER BY o.id;
SELECT o.id FROM ord o INNER JOIN cust c ON c.id = o.cust_id WHERE o.total > 2 ORDER BY o.id;
SELECT c.name FROM cust c LEFT JOIN ord o ON o.cust_id = c.id WHERE o.id IS NULL;
SELECT name FROM cust WHERE id IN (SELECT cust_id FROM ord) ORDER BY name;
SELECT name FROM cust WHERE id NOT IN (SELECT cust_id FROM ord WHERE cust_id IS NOT NULL) ORDER BY name;
SELECT name FROM cust WHERE EXISTS (SELECT 1 FROM ord WHERE total > 7) ORDER BY name;
SELECT (SELECT MAX(total) FROM ord) AS m;
SELECT id FROM cust UNION SELECT cust_id FROM ord ORDER BY id;
SELECT id FROM cust WHERE id < 3 UNION ALL SELECT cust_id FROM ord WHERE cust_id < 3 ORDER BY id;
SELECT a.id, b.id FROM cust a JOIN cust b ON b.id = a.id + 1 ORDER BY a.id;
