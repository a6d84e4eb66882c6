//! The `mariadb` command-line client against Tern's MySQL front end (the test installs the Debian
//! package when it is missing and it may): connect with and without a database, the statements it
//! sends itself, database DDL, and errors as the client prints them.

mod common;

use common::{mariadb, start};

#[test]
fn mariadb_client_sessions() {
    let (_d, _n, port) = start(64 << 20);
    let (ok, out, err) = mariadb(port, &[], "SELECT @@version_comment LIMIT 1; CREATE DATABASE shop; SHOW DATABASES");
    assert!(ok, "{err}");
    assert_eq!(out, "@@version_comment\nTern\nDatabase\ninformation_schema\nndbinfo\nshop\n");
    let (ok, out, err) = mariadb(port, &["shop"], "SELECT DATABASE(); SHOW TABLES; SET NAMES utf8mb4; SELECT 7");
    assert!(ok, "{err}");
    assert_eq!(out, "DATABASE()\nshop\n7\n7\n");
    let (ok, _, err) = mariadb(port, &["nope"], "SELECT 1");
    assert!(!ok);
    assert!(err.contains("ERROR 1049 (42000)") && err.contains("Unknown database 'nope'"), "{err}");
    let (ok, _, err) = mariadb(port, &[], "SELECT * FROM shop.items");
    assert!(!ok);
    assert!(err.contains("ERROR 1146 (42S02)") && err.contains("Table 'shop.items' doesn't exist"), "{err}");
    let (ok, _, err) = mariadb(port, &[], "CREATE VIEW v AS SELECT 1");
    assert!(!ok);
    assert!(err.contains("ERROR 1235 (42000)") && err.contains("CREATE VIEW"), "{err}");
    let (ok, _, err) = mariadb(port, &["-u", "mallory"], "SELECT 1");
    assert!(!ok);
    assert!(err.contains("ERROR 1045 (28000)"), "{err}");
    let (ok, _, err) = mariadb(port, &[], "DROP DATABASE shop; DROP DATABASE shop");
    assert!(!ok);
    assert!(err.contains("ERROR 1008"), "{err}");
}

/// DDL, DML, transactions, SQL-level prepared statements and errors through the real client.
#[test]
fn mariadb_client_sql() {
    let (_d, _n, port) = start(64 << 20);
    let run = |sql: &str| {
        let (ok, out, err) = mariadb(port, &["shop"], sql);
        assert!(ok, "{sql}: {err}");
        out
    };
    let (ok, _, err) = mariadb(port, &[], "CREATE DATABASE shop");
    assert!(ok, "{err}");
    run("CREATE TABLE items (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, name VARCHAR(40) NOT NULL, \
         price DECIMAL(10,2), qty INT DEFAULT 0, added DATE, KEY by_name (name)) ENGINE=ndbcluster");
    assert_eq!(
        run(
            "INSERT INTO items (name, price, added) VALUES ('apple', 1.50, '2024-03-01'), ('pear', 2.25, NULL), ('fig', 10, '2024-01-31'); SELECT LAST_INSERT_ID(), ROW_COUNT()"
        ),
        "LAST_INSERT_ID()\tROW_COUNT()\n1\t3\n"
    );
    assert_eq!(
        run("SELECT id, name, price, qty, added FROM items ORDER BY id"),
        "id\tname\tprice\tqty\tadded\n1\tapple\t1.50\t0\t2024-03-01\n2\tpear\t2.25\t0\tNULL\n3\tfig\t10.00\t0\t2024-01-31\n"
    );
    assert_eq!(run("SELECT name FROM items WHERE name LIKE 'p%' OR price > 5 ORDER BY name DESC"), "name\npear\nfig\n");
    assert_eq!(
        run("SELECT COUNT(*), SUM(price), MIN(name), MAX(added) FROM items"),
        "COUNT(*)\tSUM(price)\tMIN(name)\tMAX(added)\n3\t13.75\tapple\t2024-03-01\n"
    );
    // A transaction rolled back leaves nothing; a committed one stays.
    run("BEGIN; UPDATE items SET qty = qty + 5 WHERE id = 1; DELETE FROM items WHERE id = 2; ROLLBACK");
    assert_eq!(run("SELECT id, qty FROM items ORDER BY id"), "id\tqty\n1\t0\n2\t0\n3\t0\n");
    run("SET autocommit = 0; UPDATE items SET qty = 7 WHERE name = 'fig'; COMMIT; SET autocommit = 1");
    assert_eq!(run("SELECT qty FROM items WHERE id = 3"), "qty\n7\n");
    // SQL-level prepared statements.
    assert_eq!(
        run(
            "PREPARE s FROM 'SELECT name FROM items WHERE id = ?'; SET @i = 2; EXECUTE s USING @i; DEALLOCATE PREPARE s"
        ),
        "name\npear\n"
    );
    // Errors: duplicate key, unknown column, syntax, statement rollback inside a transaction.
    let (ok, _, err) = mariadb(port, &["shop"], "INSERT INTO items (id, name) VALUES (1, 'dup')");
    assert!(!ok && err.contains("ERROR 1062 (23000)") && err.contains("Duplicate entry '1'"), "{err}");
    let (ok, _, err) = mariadb(port, &["shop"], "SELECT nope FROM items");
    assert!(!ok && err.contains("ERROR 1054 (42S22)") && err.contains("Unknown column 'nope'"), "{err}");
    let (ok, _, err) = mariadb(port, &["shop"], "SELECT * FROM items WHERE");
    assert!(!ok && err.contains("ERROR 1064 (42000)"), "{err}");
    let (ok, _, err) = mariadb(
        port,
        &["shop"],
        "BEGIN; INSERT INTO items (id, name) VALUES (10, 'ten'); INSERT INTO items (id, name) VALUES (11, 'x'), (1, 'dup')",
    );
    assert!(!ok && err.contains("ERROR 1062"), "{err}");
    assert_eq!(run("SELECT COUNT(*) FROM items WHERE id >= 10"), "COUNT(*)\n0\n");
    let (ok, _, err) = mariadb(port, &["shop"], "INSERT INTO items (name) VALUES (NULL)");
    assert!(!ok && err.contains("ERROR 1048 (23000)"), "{err}");
    // Secondary index, DDL round trip.
    run("CREATE TABLE u (a INT PRIMARY KEY, b INT); CREATE UNIQUE INDEX ub ON u (b); INSERT INTO u VALUES (1, 10)");
    let (ok, _, err) = mariadb(port, &["shop"], "INSERT INTO u VALUES (2, 10)");
    assert!(!ok && err.contains("ERROR 1062"), "{err}");
    assert_eq!(run("SELECT a FROM u WHERE b = 10"), "a\n1\n");
    run("DROP INDEX ub ON u; INSERT INTO u VALUES (2, 10); DROP TABLE u");
    run("CREATE INDEX by_qty ON items (qty); DROP INDEX by_qty ON items");
    assert!(run("SHOW CREATE TABLE items").contains("KEY `by_name` (`name`)"));
    assert_eq!(
        run("SHOW COLUMNS FROM items LIKE 'qty'"),
        "Field\tType\tNull\tKey\tDefault\tExtra\nqty\tint\tYES\t\t0\t\n"
    );
    run("TRUNCATE TABLE items");
    assert_eq!(run("SELECT COUNT(*) FROM items"), "COUNT(*)\n0\n");
    run("DROP TABLE items");
    assert_eq!(run("SHOW TABLES"), "");
}

/// LOAD DATA LOCAL INFILE through the real client: a CSV with a header, quoted fields, NULLs,
/// more rows than one batch, and keys that exist already (skipped, as LOCAL loads do).
#[test]
fn mariadb_client_load_data_local() {
    let (_d, _n, port) = start(64 << 20);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("items.csv");
    let mut csv = String::from("id,name,price\n");
    for i in 1..=2500 {
        let name = if i % 7 == 0 { format!("\"item, \"\"{i}\"\"\"") } else { format!("item{i}") };
        let price = if i % 10 == 0 { "\\N".to_string() } else { format!("{}.{:02}", i, i % 100) };
        csv.push_str(&format!("{i},{name},{price}\n"));
    }
    csv.push_str("1,dup,0\n");
    std::fs::write(&path, csv).unwrap();
    let run = |sql: &str| {
        let (ok, out, err) = mariadb(port, &["--local-infile=1", "shop"], sql);
        assert!(ok, "{sql}: {err}");
        out
    };
    let (ok, _, err) = mariadb(port, &[], "CREATE DATABASE shop");
    assert!(ok, "{err}");
    run("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, price DECIMAL(10,2))");
    let load = format!(
        "LOAD DATA LOCAL INFILE '{}' INTO TABLE items FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' IGNORE 1 LINES; SELECT ROW_COUNT()",
        path.display()
    );
    let out = run(&load);
    assert!(out.contains("2500"), "{out}");
    assert_eq!(
        run("SELECT COUNT(*), COUNT(price), SUM(id) FROM items"),
        "COUNT(*)\tCOUNT(price)\tSUM(id)\n2500\t2250\t3126250\n"
    );
    assert_eq!(
        run("SELECT name, price FROM items WHERE id IN (1, 7, 10) ORDER BY id"),
        "name\tprice\nitem1\t1.01\nitem, \"7\"\t7.07\nitem10\tNULL\n"
    );
    // Keys repeated across batches (several insert transactions are in flight at once): the
    // first row of a key wins when duplicates are skipped, the last with REPLACE — as if loaded
    // row by row.
    run("CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)");
    let kv = dir.path().join("kv.txt");
    let text: String = (0..6000).map(|i| format!("{}\t{i}\n", i % 1500)).collect();
    std::fs::write(&kv, text).unwrap();
    run(&format!("LOAD DATA LOCAL INFILE '{}' INTO TABLE kv", kv.display()));
    assert_eq!(run("SELECT COUNT(*), SUM(v) FROM kv WHERE v = k"), "COUNT(*)\tSUM(v)\n1500\t1124250\n");
    run(&format!("LOAD DATA LOCAL INFILE '{}' REPLACE INTO TABLE kv", kv.display()));
    assert_eq!(run("SELECT COUNT(*), SUM(v) FROM kv WHERE v = k + 4500"), "COUNT(*)\tSUM(v)\n1500\t7874250\n");
    // TPC-H's .tbl format: '|' ends fields and '|\n' ends lines (before issue 10 this loaded one
    // row); the file also holds a 2.4 MB record, which is parsed in one pass.
    run("CREATE TABLE nation (n_nationkey INT PRIMARY KEY, n_name CHAR(25), n_regionkey INT, n_comment TEXT)");
    let tbl = dir.path().join("nation.tbl");
    let mut text = String::new();
    for i in 0..25 {
        text.push_str(&format!("{i}|NATION{i}|{}|comment {i}, with words|\n", i % 5));
    }
    std::fs::write(&tbl, &text).unwrap();
    let load = format!(
        "LOAD DATA LOCAL INFILE '{}' INTO TABLE nation FIELDS TERMINATED BY '|' LINES TERMINATED BY '|\\n'",
        tbl.display()
    );
    run(&load);
    assert_eq!(
        run("SELECT COUNT(*), SUM(n_regionkey), MAX(n_comment) FROM nation"),
        "COUNT(*)\tSUM(n_regionkey)\tMAX(n_comment)\n25\t50\tcomment 9, with words\n"
    );
    run("CREATE TABLE big (id INT PRIMARY KEY, body LONGBLOB)");
    let big = dir.path().join("big.tbl");
    std::fs::write(&big, format!("1|{}|\n2|small|\n", "z".repeat(2_400_000))).unwrap();
    // (Tern's BLOB holds at most 65,535 bytes: the record is read whole, then refused clearly.)
    let (ok, _, err) = mariadb(
        port,
        &["--local-infile=1", "shop"],
        &format!(
            "LOAD DATA LOCAL INFILE '{}' INTO TABLE big FIELDS TERMINATED BY '|' LINES TERMINATED BY '|\\n'",
            big.display()
        ),
    );
    assert!(!ok && err.contains("1406") && err.contains("Data too long for column 'body' at row 1"), "{err}");
    // Without --local-infile the client refuses; a server-side file is not served.
    let (ok, _, err) = mariadb(port, &["shop"], "LOAD DATA INFILE '/etc/passwd' INTO TABLE items");
    assert!(!ok && err.contains("1235"), "{err}");
}

/// Accounts: CREATE USER with a password (stored hashed in `mysql.user`), GRANT on a database,
/// what the user can and cannot reach, REVOKE, ALTER USER (root too), DROP USER.
#[test]
fn mariadb_client_accounts() {
    let (_d, _n, port) = start(64 << 20);
    let root = |sql: &str| {
        let (ok, out, err) = mariadb(port, &[], sql);
        assert!(ok, "{sql}: {err}");
        out
    };
    root("CREATE DATABASE shop; CREATE DATABASE secret; CREATE USER 'bob'@'%' IDENTIFIED BY 'pw1'");
    root("GRANT ALL PRIVILEGES ON shop.* TO 'bob'@'%'");
    // The hash is stored, not the password (mysql_native_password's SHA1(SHA1(pw))).
    let stored = root("SELECT HEX(authentication_string) FROM mysql.user WHERE User = 'bob'");
    let hex: String = tern_mysql::proto::native_password_hash(b"pw1").iter().map(|b| format!("{b:02X}")).collect();
    assert!(stored.contains(&hex), "{stored}");
    let bob = |args: &[&str], sql: &str| mariadb(port, &[&["-u", "bob"], args].concat(), sql);
    let (ok, _, err) = bob(&["--password=wrong"], "SELECT 1");
    assert!(!ok && err.contains("ERROR 1045 (28000)") && err.contains("'bob'"), "{err}");
    let (ok, _, err) = bob(&[], "SELECT 1");
    assert!(!ok && err.contains("ERROR 1045"), "{err}");
    let (ok, out, err) = bob(
        &["--password=pw1", "shop"],
        "CREATE TABLE t (id INT PRIMARY KEY); INSERT INTO t VALUES (1); SELECT id FROM t; SHOW DATABASES",
    );
    assert!(ok, "{err}");
    assert_eq!(out, "id\n1\nDatabase\ninformation_schema\nshop\n");
    let (ok, out, err) = bob(&["--password=pw1"], "SHOW GRANTS");
    assert!(ok, "{err}");
    assert!(out.contains("GRANT USAGE ON *.*") && out.contains("ON `shop`.*"), "{out}");
    let (ok, _, err) = bob(&["--password=pw1"], "USE secret");
    assert!(!ok && err.contains("ERROR 1044 (42000)"), "{err}");
    // A table of a database without privileges: 1142, as MySQL and MariaDB (whether it exists
    // is not told).
    let (ok, _, err) = bob(&["--password=pw1"], "SELECT * FROM secret.x");
    assert!(!ok && err.contains("ERROR 1142"), "{err}");
    let (ok, _, err) = bob(&["--password=pw1"], "CREATE USER eve");
    assert!(!ok && err.contains("ERROR 1227"), "{err}");
    let (ok, _, err) = bob(&["--password=pw1"], "DROP DATABASE secret");
    assert!(!ok && err.contains("ERROR 1044"), "{err}");
    // Revoked: the next connection cannot use the database.
    root("REVOKE ALL PRIVILEGES ON shop.* FROM 'bob'@'%'");
    let (ok, _, err) = bob(&["--password=pw1", "shop"], "SELECT 1");
    assert!(!ok && err.contains("ERROR 1044"), "{err}");
    root("ALTER USER 'bob'@'%' IDENTIFIED BY 'pw2'");
    let (ok, _, _) = bob(&["--password=pw2"], "SELECT 1");
    assert!(ok);
    let (ok, _, err) = mariadb(port, &[], "CREATE USER 'bob'@'%'");
    assert!(!ok && err.contains("ERROR 1396"), "{err}");
    root("DROP USER 'bob'@'%'");
    let (ok, _, err) = bob(&["--password=pw2"], "SELECT 1");
    assert!(!ok && err.contains("ERROR 1045"), "{err}");
    // root gets a password, then none again.
    root("ALTER USER 'root'@'localhost' IDENTIFIED BY 'rootpw'");
    let (ok, _, err) = mariadb(port, &[], "SELECT 1");
    assert!(!ok && err.contains("ERROR 1045"), "{err}");
    let (ok, _, err) = mariadb(port, &["--password=rootpw"], "ALTER USER 'root'@'localhost' IDENTIFIED BY ''");
    assert!(ok, "{err}");
    root("SELECT 1");
}

/// RonDB's TTL table option through SQL: rows are invisible once `ts + TTL` has passed, and a
/// new row may take an expired row's key.
#[test]
fn mariadb_client_ttl_table() {
    let (_d, _n, port) = start(64 << 20);
    let run = |sql: &str| {
        let (ok, out, err) = mariadb(port, &["shop"], sql);
        assert!(ok, "{sql}: {err}");
        out
    };
    let (ok, _, err) = mariadb(port, &[], "CREATE DATABASE shop");
    assert!(ok, "{err}");
    run(
        "CREATE TABLE s (id INT PRIMARY KEY, ts DATETIME NOT NULL, v VARCHAR(10)) ENGINE=ndbcluster COMMENT=\"NDB_TABLE=TTL=2@ts\"",
    );
    assert!(run("SHOW CREATE TABLE s").contains("TTL=2@ts"));
    run("INSERT INTO s VALUES (1, NOW(), 'fresh'), (2, NOW() - INTERVAL 1 HOUR, 'old')");
    assert_eq!(run("SELECT id, v FROM s ORDER BY id"), "id\tv\n1\tfresh\n");
    assert_eq!(run("SELECT v FROM s WHERE id = 2"), "");
    std::thread::sleep(std::time::Duration::from_millis(3500));
    assert_eq!(run("SELECT COUNT(*) FROM s"), "COUNT(*)\n0\n");
    run("INSERT INTO s VALUES (1, NOW(), 'again')");
    assert_eq!(run("SELECT v FROM s WHERE id = 1"), "v\nagain\n");
    let (ok, _, err) =
        mariadb(port, &["shop"], "CREATE TABLE bad (id INT PRIMARY KEY) COMMENT='NDB_TABLE=TTL=5000000000@id'");
    assert!(!ok && err.contains("The maximum ttl is 4294967039 seconds"), "{err}");
}
