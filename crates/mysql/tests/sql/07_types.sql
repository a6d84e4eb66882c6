-- Column types: ranges, text forms, defaults, errors.
CREATE TABLE ty (id INT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT, bi BIGINT, bu BIGINT UNSIGNED, d DECIMAL(12,3), f FLOAT, db DOUBLE, c CHAR(5), vc VARCHAR(10), b BINARY(3), vb VARBINARY(8), tx TEXT, bl BLOB, dt DATE, tm TIME, dtt DATETIME, ts TIMESTAMP NULL, y YEAR) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO ty VALUES (1, -128, 255, -32768, 8388607, -9223372036854775808, 18446744073709551615, 123456789.123, 1.5, 2.25, 'ab  ', 'hello', 'xy', 'bin', 'some text', 'blob', '2024-02-29', '12:34:56', '2024-02-29 23:59:59', '2024-01-01 00:00:00', 2024);
INSERT INTO ty (id) VALUES (2);
SELECT id, ti, tu, si, mi, bi, bu, d, f, db, c, vc, HEX(b), vb, tx, bl, dt, tm, dtt, ts, y FROM ty ORDER BY id;
SELECT CONCAT('[', c, ']'), LENGTH(c), LENGTH(b) FROM ty WHERE id = 1;
INSERT INTO ty (id, ti) VALUES (3, 128);
INSERT INTO ty (id, tu) VALUES (3, -1);
INSERT INTO ty (id, vc) VALUES (3, 'this is too long');
INSERT INTO ty (id, dt) VALUES (3, '2023-02-29');
INSERT INTO ty (id, d) VALUES (3, 1234567890.5);
INSERT INTO ty (id, d) VALUES (3, 1.0005);
SELECT d FROM ty WHERE id = 3;
UPDATE ty SET bi = bi - 1 WHERE id = 1;
UPDATE ty SET ti = ti + 100 WHERE id = 1;
SELECT id FROM ty WHERE d > 100 AND dt = '2024-02-29';
SELECT id FROM ty WHERE dtt >= '2024-02-29' AND dtt < '2024-03-01';
SELECT id FROM ty WHERE vc = 'hello' AND c = 'ab';
