"""A PyMySQL session against Tern's MySQL front end (run by tests/pymysql.rs with the port).

Connects with a database, runs DDL, parameterised DML (PyMySQL quotes values client-side),
transactions (PyMySQL starts with autocommit off), typed results and errors."""
import datetime
import decimal
import sys

import pymysql

port = int(sys.argv[1])
admin = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", autocommit=True)
with admin.cursor() as c:
    c.execute("CREATE DATABASE IF NOT EXISTS pyshop")
admin.close()

conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database="pyshop")
cur = conn.cursor()
cur.execute("SELECT DATABASE(), @@autocommit")
assert cur.fetchone() == ("pyshop", 0), "connected with a database, autocommit off"
cur.execute(
    "CREATE TABLE items (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, name VARCHAR(50) NOT NULL,"
    " price DECIMAL(10,2), added DATETIME, data VARBINARY(16))"
)
n = cur.executemany(
    "INSERT INTO items (name, price, added, data) VALUES (%s, %s, %s, %s)",
    [
        ("it's \"quoted\"", decimal.Decimal("1.50"), datetime.datetime(2024, 2, 29, 12, 0, 1), b"\x00\x01\xff"),
        ("back\\slash", None, None, None),
        ("ünïcode ☃", decimal.Decimal("-0.05"), datetime.datetime(1999, 12, 31, 23, 59, 59), b""),
    ],
)
assert n == 3, n
conn.commit()
cur.execute("SELECT id, name, price, added, data FROM items ORDER BY id")
rows = cur.fetchall()
assert rows == (
    (1, "it's \"quoted\"", decimal.Decimal("1.50"), datetime.datetime(2024, 2, 29, 12, 0, 1), b"\x00\x01\xff"),
    (2, "back\\slash", None, None, None),
    (3, "ünïcode ☃", decimal.Decimal("-0.05"), datetime.datetime(1999, 12, 31, 23, 59, 59), b""),
), rows
# Parameters in WHERE, rowcount, lastrowid.
cur.execute("UPDATE items SET price = price + %s WHERE name = %s", (decimal.Decimal("1.00"), "it's \"quoted\""))
assert cur.rowcount == 1
cur.execute("INSERT INTO items (name) VALUES (%s)", ("four",))
assert cur.lastrowid == 4, cur.lastrowid
conn.rollback()
cur.execute("SELECT COUNT(*), SUM(price) FROM items")
assert cur.fetchone() == (3, decimal.Decimal("1.45")), "rolled back"
# A duplicate key is an IntegrityError with MySQL's errno; the connection stays usable.
try:
    cur.execute("INSERT INTO items (id, name) VALUES (1, 'dup')")
    raise AssertionError("expected a duplicate key error")
except pymysql.err.IntegrityError as e:
    assert e.args[0] == 1062, e.args
try:
    cur.execute("SELECT * FROM nope")
    raise AssertionError("expected an unknown table error")
except pymysql.err.ProgrammingError as e:
    assert e.args[0] == 1146, e.args
cur.execute("SELECT id FROM items WHERE id IN %s ORDER BY id", ((1, 3),))
assert cur.fetchall() == ((1,), (3,))
dc = conn.cursor(pymysql.cursors.DictCursor)
dc.execute("SELECT name, price FROM items WHERE id = %s", (3,))
assert dc.fetchone() == {"name": "ünïcode ☃", "price": decimal.Decimal("-0.05")}
conn.autocommit(True)
cur.execute("DELETE FROM items WHERE price IS NULL")
assert cur.rowcount == 1
cur.execute("SHOW COLUMNS FROM items")
assert [r[0] for r in cur.fetchall()] == ["id", "name", "price", "added", "data"]
cur.execute("DROP TABLE items")
conn.close()

# Several statements in one query, when the client asks for it (off by default).
multi = pymysql.connect(
    host="127.0.0.1", port=port, user="root", password="", database="pyshop",
    client_flag=pymysql.constants.CLIENT.MULTI_STATEMENTS,
)
mc = multi.cursor()
mc.execute("SELECT 1; SELECT 'two', 3; CREATE TABLE m (id INT PRIMARY KEY); INSERT INTO m VALUES (1), (2)")
assert mc.fetchall() == ((1,),)
assert mc.nextset() and mc.fetchall() == (("two", 3),)
assert mc.nextset()
assert mc.nextset() and mc.rowcount == 2
assert not mc.nextset()
try:
    mc.execute("SELECT 1; SELECT nope FROM m; SELECT 3")
    while mc.nextset():
        pass
    raise AssertionError("expected an error in the second statement")
except pymysql.err.OperationalError as e:
    assert e.args[0] == 1054, e.args
multi.close()
plain = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database="pyshop")
try:
    plain.cursor().execute("SELECT 1; SELECT 2")
    raise AssertionError("multi-statements must be off by default")
except pymysql.err.ProgrammingError as e:
    assert e.args[0] == 1064, e.args
print("pymysql ok")
