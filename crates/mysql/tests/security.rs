//! Sign-in and transport security of the MySQL port (issue 14), through the real `mariadb`
//! client and PyMySQL: TLS after the SSL capability upgrade, `require_secure_transport`,
//! `caching_sha2_password` (first sign-in over TLS or with the RSA key exchange, then the cached
//! fast path), root's password given at start, and no port beyond loopback while root has none. The certificates
//! are the REST tests' fixtures (a test CA, a server certificate for localhost / 127.0.0.1).

mod common;

use common::{My, Res, mariadb, start_mariadb_with, start_with};
use std::path::PathBuf;
use tern_mysql::MysqlOptions;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rest/tests/tls").join(name).to_string_lossy().into_owned()
}

fn tls_files() -> tern_client::tls::TlsFiles {
    tern_client::tls::TlsFiles {
        certificate_file: fixture("server.pem"),
        private_key_file: fixture("server.key"),
        root_ca_cert_file: None,
        verify_client: false,
        names: ["tls_cert", "tls_key", "tls_ca"],
    }
}

fn ssl_args() -> Vec<String> {
    vec!["--ssl".into(), format!("--ssl-ca={}", fixture("ca.pem")), "--ssl-verify-server-cert".into()]
}

/// PyMySQL (installed by `.ci/run`): connects as `user` / `password`, over TLS when `tls`, and
/// prints the result of `sql` or the error's code and text.
fn pymysql(port: u16, user: &str, password: &str, tls: bool, sql: &str) -> String {
    let ssl = if tls { format!("{{'ca': {:?}}}", fixture("ca.pem")) } else { "None".into() };
    let script = format!(
        "import pymysql\ntry:\n    c = pymysql.connect(host='127.0.0.1', port={port}, user={user:?}, password={password:?}, ssl={ssl}, connect_timeout=10)\n    cur = c.cursor(); cur.execute({sql:?}); print(cur.fetchall())\nexcept pymysql.err.MySQLError as e:\n    print('error', e.args[0], e.args[1])\n"
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .expect("python3 with PyMySQL is needed (.ci/run installs it)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn tls_upgrade_with_the_mariadb_client_and_pymysql() {
    let (_d, _n, port) = start_with(MysqlOptions { tls: Some(tls_files()), ..Default::default() });
    let ssl = ssl_args();
    let ssl: Vec<&str> = ssl.iter().map(String::as_str).collect();
    let (ok, out, err) = mariadb(port, &ssl, "status");
    assert!(ok, "{err}");
    assert!(out.contains("Cipher in use is TLS"), "{out}");
    let (ok, out, err) = mariadb(port, &ssl, "SELECT 1 + 1");
    assert!(ok, "{err}");
    assert_eq!(out, "1 + 1\n2\n");
    // Plain clients are still served (require_secure_transport is off).
    let (ok, out, err) = mariadb(port, &["--skip-ssl"], "status");
    assert!(ok, "{err}");
    assert!(out.contains("SSL:\t\t\tNot in use"), "{out}");
    assert_eq!(pymysql(port, "root", "", true, "SELECT 40 + 2"), "((42,),)");
    assert_eq!(pymysql(port, "root", "", false, "SELECT 40 + 2"), "((42,),)");

    // require_secure_transport: plain clients get 3159.
    let (_d2, _n2, strict) =
        start_with(MysqlOptions { tls: Some(tls_files()), require_secure_transport: true, ..Default::default() });
    let (ok, _, err) = mariadb(strict, &["--skip-ssl"], "SELECT 1");
    assert!(!ok);
    assert!(err.contains("3159") && err.contains("insecure transport are prohibited"), "{err}");
    let (ok, _, err) = mariadb(strict, &ssl, "SELECT 1");
    assert!(ok, "{err}");
}

#[test]
fn caching_sha2_password_signs_in_over_tls_first_then_by_scramble() {
    let (_d, _n, port) = start_with(MysqlOptions { tls: Some(tls_files()), ..Default::default() });
    let (ok, _, err) = mariadb(
        port,
        &[],
        "CREATE USER carol IDENTIFIED WITH caching_sha2_password BY 'c4r0l'; CREATE USER dan IDENTIFIED WITH 'sha256_password' BY 'x'",
    );
    assert!(!ok && err.contains("1524") && err.contains("Plugin 'sha256_password' is not loaded"), "{err}");
    let (ok, out, err) = mariadb(port, &[], "SELECT User, plugin FROM mysql.user WHERE User = 'carol'");
    assert!(ok, "{err}");
    assert_eq!(out, "User\tplugin\ncarol\tcaching_sha2_password\n");
    // The first sign-in without TLS sends the password encrypted with the server's RSA key
    // (PyMySQL asks for the key); a wrong one is refused that way too.
    let out = pymysql(port, "carol", "wrong", false, "SELECT 1");
    assert!(out.starts_with("error 1045"), "{out}");
    assert_eq!(pymysql(port, "carol", "c4r0l", false, "SELECT 3"), "((3,),)");
    // Wrong password over TLS.
    let out = pymysql(port, "carol", "wrong", true, "SELECT 1");
    assert!(out.starts_with("error 1045"), "{out}");
    // Over TLS (the full authentication), then without TLS (the cached scramble check).
    assert_eq!(pymysql(port, "carol", "c4r0l", true, "SELECT 5"), "((5,),)");
    assert_eq!(pymysql(port, "carol", "c4r0l", false, "SELECT 7"), "((7,),)");
    let out = pymysql(port, "carol", "wrong", false, "SELECT 1");
    assert!(out.starts_with("error 1045"), "{out}");
    // The mariadb client's caching_sha2_password plugin takes the fast path too.
    let (ok, out, err) = mariadb(port, &["-u", "carol", "--password=c4r0l"], "SELECT 8");
    assert!(ok, "{err}");
    assert_eq!(out, "8\n8\n");
    // A new password misses the cache: a full authentication again (over TLS here).
    let (ok, _, err) = mariadb(port, &[], "ALTER USER carol IDENTIFIED WITH caching_sha2_password BY 'n3w'");
    assert!(ok, "{err}");
    assert_eq!(pymysql(port, "carol", "n3w", true, "SELECT 9"), "((9,),)");
    let out = pymysql(port, "carol", "c4r0l", true, "SELECT 1");
    assert!(out.starts_with("error 1045"), "the old password no longer works: {out}");
}

/// `caching_sha2_password_private_key_path`: the server uses that key; a client that already
/// holds the public key sends the encrypted password at once (PyMySQL's `server_public_key`).
#[test]
fn caching_sha2_password_with_a_configured_rsa_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("private_key.pem");
    let public = dir.path().join("public_key.pem");
    let ok = |args: &[&str]| std::process::Command::new("openssl").args(args).status().expect("openssl").success();
    assert!(ok(&["genrsa", "-out", key.to_str().unwrap(), "2048"]));
    assert!(ok(&["rsa", "-in", key.to_str().unwrap(), "-pubout", "-out", public.to_str().unwrap()]));
    let (_d, _n, port) = start_with(MysqlOptions { rsa_private_key: Some(key.clone()), ..Default::default() });
    let (ok, _, err) = mariadb(port, &[], "CREATE USER erin IDENTIFIED WITH caching_sha2_password BY 'e-r1n'");
    assert!(ok, "{err}");
    let script = format!(
        "import pymysql\nkey = open({public:?}, 'rb').read()\nfor pw in ['nope', 'e-r1n']:\n    try:\n        c = pymysql.connect(host='127.0.0.1', port={port}, user='erin', password=pw, server_public_key=key, connect_timeout=10)\n        cur = c.cursor(); cur.execute('SELECT 11'); print(cur.fetchall())\n    except pymysql.err.MySQLError as e:\n        print('error', e.args[0])\n"
    );
    let out = std::process::Command::new("python3").args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "error 1045\n((11,),)\n");
    // A key file that is not one stops the server from starting, naming the setting.
    std::fs::write(&key, "not a key").unwrap();
    let node_dir = dir.path().join("node");
    let n = tern_runtime::DataNode::start(tern_runtime::DataNodeConfig::local(&node_dir, 64 << 20)).unwrap();
    assert!(n.wait_started(std::time::Duration::from_secs(20)));
    let addr = n.local_addr().to_string();
    let opts = MysqlOptions { rsa_private_key: Some(key), ..Default::default() };
    let connect = move || tern_client::Client::connect(&addr).map_err(|e| e.to_string());
    let e = tern_mysql::run(connect, opts, |_| {}).unwrap_err();
    assert!(e.contains("caching_sha2_password_private_key_path"), "{e}");
}

#[test]
fn root_password_at_start_and_no_open_port_without_one() {
    let (_d, _n, port) = start_with(MysqlOptions { root_password: Some("r00t".into()), ..Default::default() });
    let (ok, _, err) = mariadb(port, &[], "SELECT 1");
    assert!(!ok);
    assert!(err.contains("ERROR 1045 (28000)") && err.contains("'root'@'localhost' (using password: NO)"), "{err}");
    let (ok, out, err) = mariadb(port, &["--password=r00t"], "SELECT 1");
    assert!(ok, "{err}");
    assert_eq!(out, "1\n1\n");

    // Beyond loopback while root has no password: the server does not start.
    let dir = tempfile::tempdir().unwrap();
    let n = tern_runtime::DataNode::start(tern_runtime::DataNodeConfig::local(dir.path(), 64 << 20)).unwrap();
    assert!(n.wait_started(std::time::Duration::from_secs(20)));
    let addr = n.local_addr().to_string();
    let opts = MysqlOptions { listen: "0.0.0.0:0".parse().unwrap(), ..Default::default() };
    let connect = move || tern_client::Client::connect(&addr).map_err(|e| e.to_string());
    let e = tern_mysql::run(connect, opts, |_| {}).unwrap_err();
    assert!(e.contains("while root has no password") && e.contains("--root-password"), "{e}");
}

/// Privileges per table and per operation, differentially against MariaDB with its grant tables
/// on: the same accounts and grants made by root on both, then the same statements by the
/// restricted users; every statement must succeed or fail with the same error number, SELECTs
/// and SHOW TABLES must return the same rows, SHOW GRANTS the same lines.
#[test]
fn table_and_operation_privileges_match_mariadb() {
    let peer = start_mariadb_with(true);
    let (_d, _n, tern) = start_with(MysqlOptions::default());
    let setup = [
        "CREATE DATABASE shop",
        "CREATE DATABASE hr",
        "CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(20))",
        "CREATE TABLE shop.orders (id INT PRIMARY KEY, item INT)",
        "CREATE TABLE hr.pay (id INT PRIMARY KEY, amount INT)",
        "INSERT INTO shop.items VALUES (1, 'tea'), (2, 'cake')",
        "INSERT INTO shop.orders VALUES (10, 1)",
        "INSERT INTO hr.pay VALUES (1, 100)",
        "CREATE USER 'reader'@'%'",
        "CREATE USER 'clerk'@'%'",
        "CREATE USER 'boss'@'%'",
        "CREATE USER 'other'@'%'",
        "CREATE USER 'filler'@'%'",
        "GRANT INSERT ON shop.orders TO 'filler'@'%'",
        "GRANT SELECT ON shop.items TO 'reader'@'%'",
        "GRANT SELECT, INSERT, UPDATE ON shop.orders TO 'clerk'@'%'",
        "GRANT SELECT ON shop.items TO 'clerk'@'%'",
        "GRANT ALL PRIVILEGES ON shop.* TO 'boss'@'%' WITH GRANT OPTION",
        "GRANT SELECT, DELETE ON hr.pay TO 'boss'@'%'",
    ];
    let steps: &[(&str, &str)] = &[
        ("reader", "SELECT id, name FROM shop.items ORDER BY id"),
        ("reader", "SELECT id FROM shop.orders"),
        ("reader", "INSERT INTO shop.items VALUES (3, 'pie')"),
        ("reader", "UPDATE shop.items SET name = 'x' WHERE id = 1"),
        ("reader", "DELETE FROM shop.items WHERE id = 1"),
        ("reader", "SELECT i.name FROM shop.items i JOIN shop.orders o ON o.item = i.id"),
        ("reader", "SELECT amount FROM hr.pay"),
        ("reader", "SELECT COUNT(*) FROM (SELECT id FROM shop.orders) x"),
        ("reader", "WITH c AS (SELECT id FROM shop.items) SELECT COUNT(*) FROM c"),
        ("reader", "ALTER TABLE shop.items ADD COLUMN z INT"),
        ("reader", "CREATE INDEX ix ON shop.items (name)"),
        ("reader", "SHOW CREATE TABLE shop.orders"),
        ("reader", "USE hr"),
        ("reader", "SHOW TABLES FROM shop"),
        ("reader", "SHOW GRANTS"),
        ("reader", "DROP TABLE shop.items"),
        ("reader", "CREATE TABLE shop.more (id INT PRIMARY KEY)"),
        ("reader", "CREATE DATABASE mine"),
        ("reader", "GRANT SELECT ON shop.items TO 'other'@'%'"),
        ("reader", "CREATE USER 'x'@'%'"),
        ("clerk", "INSERT INTO shop.orders VALUES (11, 2)"),
        ("clerk", "UPDATE shop.orders SET item = 1 WHERE id = 11"),
        ("clerk", "DELETE FROM shop.orders WHERE id = 11"),
        ("clerk", "INSERT INTO shop.orders SELECT id + 100, id FROM shop.items"),
        ("clerk", "SELECT id, item FROM shop.orders ORDER BY id"),
        ("clerk", "TRUNCATE TABLE shop.orders"),
        ("clerk", "SHOW GRANTS"),
        ("boss", "CREATE TABLE shop.more (id INT PRIMARY KEY)"),
        ("boss", "INSERT INTO shop.more VALUES (1)"),
        ("boss", "DELETE FROM hr.pay WHERE id = 1"),
        ("boss", "INSERT INTO hr.pay VALUES (2, 5)"),
        ("boss", "GRANT SELECT ON shop.more TO 'other'@'%'"),
        ("boss", "GRANT SELECT ON hr.pay TO 'other'@'%'"),
        ("boss", "ALTER TABLE shop.more ADD COLUMN extra INT"),
        ("boss", "SELECT id, extra FROM shop.more"),
        ("boss", "DROP TABLE shop.more"),
        ("boss", "SHOW GRANTS"),
        ("other", "SHOW GRANTS"),
        // INSERT without SELECT: values go in, reading the target (INSERT ... SELECT from it,
        // a subquery on it) needs SELECT there too.
        ("filler", "INSERT INTO shop.orders VALUES (30, 1)"),
        ("filler", "INSERT INTO shop.orders SELECT id + 100, item FROM shop.orders"),
        ("filler", "INSERT INTO shop.orders VALUES ((SELECT MAX(id) + 1 FROM shop.orders), 2)"),
    ];
    let outcome = |r: Res| match r {
        Res::Ok => "ok".to_string(),
        Res::Err(code, _, msg) => format!("error {code} ({msg})"),
        Res::Rows(_, mut rows) => {
            // MariaDB's install grants the `test` databases to PUBLIC (a role Tern has not).
            rows.retain(|r| !r.iter().any(|c| c.as_deref().is_some_and(|c| c.ends_with(" TO PUBLIC"))));
            rows.sort();
            format!("{rows:?}")
        }
    };
    let run = |port: u16| -> Vec<String> {
        let (mut root, r) = My::connect(port, "root", None, tern_mysql::proto::NATIVE_PASSWORD, true);
        assert!(matches!(r, Res::Ok));
        for s in setup {
            assert!(matches!(root.query(s), Res::Ok), "{s}");
        }
        let mut out = Vec::new();
        for (user, sql) in steps {
            let (mut c, r) = My::connect(port, user, None, tern_mysql::proto::NATIVE_PASSWORD, true);
            assert!(matches!(r, Res::Ok), "{user} signs in");
            out.push(format!("{user}: {sql} -> {}", outcome(c.query(sql))));
        }
        out
    };
    // mariadb-install-db makes anonymous accounts (''@localhost), which MariaDB would match
    // before 'reader'@'%' for a client on 127.0.0.1.
    let (mut root, _) = My::connect(peer.port, "root", None, tern_mysql::proto::NATIVE_PASSWORD, true);
    assert!(matches!(root.query("DELETE FROM mysql.global_priv WHERE User = ''"), Res::Ok));
    assert!(matches!(root.query("FLUSH PRIVILEGES"), Res::Ok));
    let theirs = run(peer.port);
    let ours = run(tern);
    // The error texts differ in quoting between MySQL and MariaDB: numbers and rows must match.
    let code = |l: &str| match l.find("-> error ") {
        Some(i) => format!("{}{}", &l[..i + 9], l[i + 9..].split(' ').next().unwrap_or("")),
        None => l.to_string(),
    };
    for (t, m) in ours.iter().zip(&theirs) {
        if t.contains("SHOW GRANTS") || t.contains("SHOW TABLES") || !t.contains("-> error") {
            assert_eq!(t, m, "Tern vs MariaDB");
        } else {
            assert_eq!(code(t), code(m), "Tern: {t}\nMariaDB: {m}");
        }
    }
}

/// GRANT and REVOKE apply to a connected client from its next statement (as MySQL does for
/// table and database privileges), also to statements whose plans it had cached.
#[test]
fn revoke_and_grant_reach_a_connected_client_at_its_next_statement() {
    let (_d, _n, port) = start_with(MysqlOptions::default());
    let (ok, _, err) = mariadb(
        port,
        &[],
        "CREATE DATABASE shop; CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(20)); INSERT INTO shop.items VALUES (1, 'pen'); CREATE USER fay IDENTIFIED BY 'f4y'; GRANT SELECT ON shop.items TO fay",
    );
    assert!(ok, "{err}");
    let script = format!(
        r#"import pymysql
fay = pymysql.connect(host='127.0.0.1', port={port}, user='fay', password='f4y', connect_timeout=10)
root = pymysql.connect(host='127.0.0.1', port={port}, user='root', password='', connect_timeout=10)
def q(c, sql):
    try:
        cur = c.cursor(); cur.execute(sql); return cur.fetchall()
    except pymysql.err.MySQLError as e:
        return e.args[0]
print(q(fay, 'SELECT name FROM shop.items WHERE id = 1'))
print(q(fay, 'SELECT name FROM shop.items WHERE id = 1'))
q(root, 'REVOKE SELECT ON shop.items FROM fay')
print(q(fay, 'SELECT name FROM shop.items WHERE id = 1'))
q(root, 'GRANT SELECT, INSERT ON shop.items TO fay')
print(q(fay, 'SELECT name FROM shop.items WHERE id = 1'))
print(q(fay, "INSERT INTO shop.items VALUES (2, 'ink')"))
"#
    );
    let out = std::process::Command::new("python3").args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "(('pen',),)\n(('pen',),)\n1142\n(('pen',),)\n[]\n");
}
