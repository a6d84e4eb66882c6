-- Joins whose probe side is read by the build side's keys (tern_sql::engine::scan): key reads on
-- a one-column primary key, multi-range scans of secondary indexes and of the PRIMARY ordered
-- index's first column, partitioned tables, NULL, duplicate and missing keys, empty build sides,
-- semi and anti joins, outer joins, keys of several types, and rows changed between queries.
CREATE TABLE big (id INT PRIMARY KEY, grp INT, code VARCHAR(10), d DATE, amt DECIMAL(10,2), KEY grp_idx (grp), KEY code_idx (code), KEY d_idx (d)) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin PARTITION BY KEY (id) PARTITIONS 4;
CREATE TABLE pairs (a INT NOT NULL, b INT NOT NULL, v INT, PRIMARY KEY (a, b)) PARTITION BY KEY (a, b) PARTITIONS 3;
CREATE TABLE small (k INT, g INT, c VARCHAR(10), d DATE, amt DECIMAL(10,2)) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO big VALUES (1, 1, 'c01', '2024-01-02', 3.07), (2, 2, 'c02', '2024-01-03', 6.14), (3, 3, 'c03', '2024-01-04', 9.21), (4, 4, 'c04', '2024-01-05', 12.28), (5, 5, 'c05', '2024-01-06', 15.35), (6, 6, 'c06', '2024-01-07', 18.42), (7, 0, 'c07', '2024-01-08', 21.49), (8, 1, 'c08', '2024-01-09', 24.56), (9, 2, 'c00', '2024-01-10', 27.63), (10, 3, 'c01', '2024-01-01', 30.70), (11, NULL, 'c02', '2024-01-02', 33.77), (12, 5, 'c03', '2024-01-03', 36.84), (13, 6, NULL, '2024-01-04', 39.91), (14, 0, 'c05', '2024-01-05', 42.98), (15, 1, 'c06', '2024-01-06', 45.05), (16, 2, 'c07', '2024-01-07', 48.12), (17, 3, 'c08', '2024-01-08', 1.19), (18, 4, 'c00', '2024-01-09', 4.26), (19, 5, 'c01', '2024-01-10', 7.33), (20, 6, 'c02', '2024-01-01', 10.40), (21, 0, 'c03', '2024-01-02', 13.47), (22, NULL, 'c04', '2024-01-03', 16.54), (23, 2, 'c05', '2024-01-04', 19.61), (24, 3, 'c06', '2024-01-05', 22.68), (25, 4, 'c07', '2024-01-06', 25.75), (26, 5, NULL, '2024-01-07', 28.82), (27, 6, 'c00', '2024-01-08', 31.89), (28, 0, 'c01', '2024-01-09', 34.96), (29, 1, 'c02', '2024-01-10', 37.03), (30, 2, 'c03', '2024-01-01', 40.10), (31, 3, 'c04', '2024-01-02', 43.17), (32, 4, 'c05', '2024-01-03', 46.24), (33, NULL, 'c06', '2024-01-04', 49.31), (34, 6, 'c07', '2024-01-05', 2.38), (35, 0, 'c08', '2024-01-06', 5.45), (36, 1, 'c00', '2024-01-07', 8.52), (37, 2, 'c01', '2024-01-08', 11.59), (38, 3, 'c02', '2024-01-09', 14.66), (39, 4, NULL, '2024-01-10', 17.73), (40, 5, 'c04', '2024-01-01', 20.80), (41, 6, 'c05', '2024-01-02', 23.87), (42, 0, 'c06', '2024-01-03', 26.94), (43, 1, 'c07', '2024-01-04', 29.01), (44, NULL, 'c08', '2024-01-05', 32.08), (45, 3, 'c00', '2024-01-06', 35.15), (46, 4, 'c01', '2024-01-07', 38.22), (47, 5, 'c02', '2024-01-08', 41.29), (48, 6, 'c03', '2024-01-09', 44.36), (49, 0, 'c04', '2024-01-10', 47.43), (50, 1, 'c05', '2024-01-01', 0.50), (51, 2, 'c06', '2024-01-02', 3.57), (52, 3, NULL, '2024-01-03', 6.64), (53, 4, 'c08', '2024-01-04', 9.71), (54, 5, 'c00', '2024-01-05', 12.78), (55, NULL, 'c01', '2024-01-06', 15.85), (56, 0, 'c02', '2024-01-07', 18.92), (57, 1, 'c03', '2024-01-08', 21.99), (58, 2, 'c04', '2024-01-09', 24.06), (59, 3, 'c05', '2024-01-10', 27.13), (60, 4, 'c06', '2024-01-01', 30.20);
INSERT INTO pairs VALUES (1, 0, 10), (1, 1, 11), (1, 3, 13), (2, 0, 20), (2, 2, 22), (2, 3, 23), (3, 1, 31), (3, 2, 32), (4, 0, 40), (4, 1, 41), (4, 3, 43), (5, 0, 50), (5, 2, 52), (5, 3, 53), (6, 1, 61), (6, 2, 62), (7, 0, 70), (7, 1, 71), (7, 3, 73), (8, 0, 80), (8, 2, 82), (8, 3, 83);
INSERT INTO small VALUES (3, 3, 'c03', '2024-01-04', 9.21), (7, 0, 'c07', '2024-01-08', 21.49), (7, 0, 'c07', '2024-01-08', 21.49), (22, 1, NULL, '2024-01-03', 16.54), (999, 6, 'zz', '2023-05-05', 1.00), (NULL, NULL, NULL, NULL, NULL), (44, 2, 'c08', '2024-01-05', 32.08);
SELECT s.k, b.id, b.grp, b.amt FROM small s JOIN big b ON b.id = s.k ORDER BY s.k, b.id;
SELECT s.g, b.id FROM small s JOIN big b ON b.grp = s.g ORDER BY s.g, b.id;
SELECT s.k, p.a, p.b, p.v FROM small s JOIN pairs p ON p.a = s.k ORDER BY s.k, p.a, p.b;
SELECT s.c, b.id FROM small s JOIN big b ON b.code = s.c ORDER BY s.c, b.id;
SELECT s.d, b.id FROM small s JOIN big b ON b.d = s.d ORDER BY s.d, b.id;
SELECT s.amt, b.id FROM small s JOIN big b ON b.amt = s.amt ORDER BY s.amt, b.id;
SELECT b.id FROM small s JOIN big b ON b.id = s.k WHERE s.g = 12345;
SELECT COUNT(*) FROM small s JOIN big b ON b.grp = s.g WHERE s.c = 'none';
SELECT s.k, s.g FROM small s WHERE EXISTS (SELECT 1 FROM big b WHERE b.id = s.k) ORDER BY s.k, s.g;
SELECT s.k, s.g FROM small s WHERE NOT EXISTS (SELECT 1 FROM big b WHERE b.grp = s.g) ORDER BY s.k, s.g;
SELECT s.k FROM small s WHERE s.k NOT IN (SELECT id FROM big WHERE grp = 3) ORDER BY s.k;
SELECT s.k, s.c, b.id, b.amt FROM small s LEFT JOIN big b ON b.code = s.c ORDER BY s.k, s.c, b.id;
SELECT s.g, SUM(b.amt) AS total, COUNT(*) AS n FROM small s JOIN big b ON b.grp = s.g WHERE b.amt < (SELECT 1.5 * AVG(x.amt) FROM big x WHERE x.grp = s.g) GROUP BY s.g ORDER BY s.g;
SELECT p.a, p.b, b.id, b.grp FROM small s JOIN pairs p ON p.a = s.k JOIN big b ON b.id = p.a AND b.grp = p.b ORDER BY p.a, p.b, b.id;
SELECT s.k, b.id, p.v FROM small s JOIN big b ON b.grp = s.g JOIN pairs p ON p.a = b.id ORDER BY s.k, b.id, p.v;
UPDATE big SET grp = 6 WHERE id IN (1, 2, 3);
DELETE FROM big WHERE id = 7;
INSERT INTO big VALUES (100, 0, 'c07', '2024-01-08', 5.00);
SELECT s.g, b.id FROM small s JOIN big b ON b.grp = s.g ORDER BY s.g, b.id;
SELECT s.k, b.id, b.grp FROM small s JOIN big b ON b.id = s.k ORDER BY s.k, b.id;
SELECT s.c, b.id FROM small s JOIN big b ON b.code = s.c ORDER BY s.c, b.id;
-- The key-value path's nested loops read an inner table by key for a thousand outer rows at a
-- time (batched key access): more outer rows than one batch, keys repeating across batches,
-- missing keys under LEFT JOIN, NULL keys.
CREATE TABLE d50 (n INT PRIMARY KEY);
INSERT INTO d50 VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9), (10), (11), (12), (13), (14), (15), (16), (17), (18), (19), (20), (21), (22), (23), (24), (25), (26), (27), (28), (29), (30), (31), (32), (33), (34), (35), (36), (37), (38), (39), (40), (41), (42), (43), (44), (45), (46), (47), (48), (49);
CREATE TABLE seq (id INT PRIMARY KEY, ref INT, KEY ref_idx (ref));
INSERT INTO seq SELECT a.n * 50 + b.n, CASE WHEN b.n = 7 THEN NULL ELSE (a.n * 50 + b.n) % 97 END FROM d50 a, d50 b;
SELECT COUNT(*), SUM(x.id), SUM(y.id), SUM(y.ref) FROM seq x JOIN seq y ON y.id = x.ref * 7 WHERE x.ref BETWEEN 10 AND 80;
SELECT COUNT(*), COUNT(y.id), SUM(x.id), SUM(y.id) FROM seq x LEFT JOIN seq y ON y.id = x.ref * 40 WHERE x.ref BETWEEN 5 AND 90;
SELECT x.id, x.ref, y.id, y.ref FROM seq x JOIN seq y ON y.id = x.ref + 2400 WHERE x.ref BETWEEN 90 AND 96 ORDER BY x.id LIMIT 20;
