//! Sign-in and transport security of the MySQL port (issue 14), through the real `mariadb`
//! client and PyMySQL: TLS after the SSL capability upgrade, `require_secure_transport`,
//! `caching_sha2_password` (first sign-in over TLS, then the cached fast path without it), root's
//! password given at start, and no port beyond loopback while root has none. The certificates
//! are the REST tests' fixtures (a test CA, a server certificate for localhost / 127.0.0.1).

mod common;

use common::{mariadb, start_with};
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
    // The first sign-in without TLS cannot send the password: a clear refusal.
    let out = pymysql(port, "carol", "c4r0l", false, "SELECT 1");
    assert!(out.starts_with("error 1045") && out.contains("over TLS"), "{out}");
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
    // A new password misses the cache: TLS again first.
    let (ok, _, err) = mariadb(port, &[], "ALTER USER carol IDENTIFIED WITH caching_sha2_password BY 'n3w'");
    assert!(ok, "{err}");
    let out = pymysql(port, "carol", "n3w", false, "SELECT 1");
    assert!(out.starts_with("error 1045"), "{out}");
    assert_eq!(pymysql(port, "carol", "n3w", true, "SELECT 9"), "((9,),)");
    let out = pymysql(port, "carol", "c4r0l", true, "SELECT 1");
    assert!(out.starts_with("error 1045"), "the old password no longer works: {out}");
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
