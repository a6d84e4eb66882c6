//! The REST API over TLS (`Security.TLS`), through real sockets on 127.0.0.1. The certificates in
//! `tests/tls/` were made once with openssl (a test CA valid for 100 years, a server certificate for
//! localhost / 127.0.0.1 and a client certificate, both signed by it; P-256 keys).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tern_rest::config::RestOptions;
use tern_rest::tls::TlsFiles;

mod common;
use common::start_node;

fn start_rest(addr: &str, tls: TlsFiles) -> u16 {
    common::start_rest(addr, RestOptions { tls: Some(tls), ..Default::default() })
}

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/tls").join(name).to_string_lossy().into_owned()
}

fn client_config(with_cert: bool) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(fixture("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let cfg = if with_cert {
        let chain: Vec<_> = CertificateDer::pem_file_iter(fixture("client.pem")).unwrap().map(|c| c.unwrap()).collect();
        let key = PrivateKeyDer::from_pem_file(fixture("client.key")).unwrap();
        b.with_client_auth_cert(chain, key).unwrap()
    } else {
        b.with_no_client_auth()
    };
    Arc::new(cfg)
}

/// GET `path` over TLS on a fresh connection; the status, or the I/O error's text.
fn get_tls(port: u16, path: &str, with_cert: bool) -> Result<(u16, String), String> {
    let name = ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(client_config(with_cert), name).map_err(|e| e.to_string())?;
    let sock = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut s = rustls::StreamOwned::new(conn, sock);
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut r = Vec::new();
    s.read_to_end(&mut r).map_err(|e| e.to_string())?;
    let r = String::from_utf8_lossy(&r).into_owned();
    let status = r.get(9..12).and_then(|x| x.parse().ok()).ok_or_else(|| format!("no status line in {r:?}"))?;
    Ok((status, r.split_once("\r\n\r\n").map(|x| x.1.to_string()).unwrap_or_default()))
}

#[test]
fn rest_over_tls_with_and_without_client_certificates() {
    let (_dir, _node, addr) = start_node();
    let server = TlsFiles {
        certificate_file: fixture("server.pem"),
        private_key_file: fixture("server.key"),
        root_ca_cert_file: None,
        verify_client: false,
        names: tern_rest::tls::NAMES,
    };
    let port = start_rest(&addr, server.clone());
    assert_eq!(get_tls(port, "/0.1.0/ping", false).unwrap().0, 200);
    let (st, body) = get_tls(port, "/0.1.0/health", false).unwrap();
    assert_eq!(st, 200, "{body}");
    // Plain HTTP to the TLS port gets no HTTP answer, and the server stays up.
    let mut plain = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    plain.write_all(b"GET /0.1.0/ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut r = Vec::new();
    let _ = plain.read_to_end(&mut r);
    assert!(!r.starts_with(b"HTTP/1.1 200"), "{:?}", String::from_utf8_lossy(&r));
    assert_eq!(get_tls(port, "/0.1.0/ping", false).unwrap().0, 200);

    // RequireAndVerifyClientCert: a client without a certificate is refused, one with is served.
    let verified = TlsFiles { root_ca_cert_file: Some(fixture("ca.pem")), verify_client: true, ..server };
    let port = start_rest(&addr, verified);
    assert!(get_tls(port, "/0.1.0/ping", false).is_err(), "served without a client certificate");
    assert_eq!(get_tls(port, "/0.1.0/ping", true).unwrap().0, 200);
}

/// New certificate files are served to new connections without a restart; files that cannot be
/// used leave the previous ones in service.
#[test]
fn renewed_certificates_are_served_without_a_restart() {
    let (_dir, _node, addr) = start_node();
    let tmp = tempfile::tempdir().unwrap();
    let (cert, key) = (tmp.path().join("cert.pem"), tmp.path().join("key.pem"));
    let put = |c: &str, k: &str| {
        std::fs::copy(fixture(c), &cert).unwrap();
        std::fs::copy(fixture(k), &key).unwrap();
    };
    put("server.pem", "server.key");
    let files = TlsFiles {
        certificate_file: cert.to_string_lossy().into_owned(),
        private_key_file: key.to_string_lossy().into_owned(),
        root_ca_cert_file: None,
        verify_client: false,
        names: tern_rest::tls::NAMES,
    };
    let port = start_rest(&addr, files);
    assert_eq!(get_tls(port, "/0.1.0/ping", false).unwrap().0, 200);
    // The client certificate (not for localhost, not for servers) replaces it: clients checking
    // the name now refuse the server, so the new files are in use.
    std::thread::sleep(Duration::from_millis(20));
    put("client.pem", "client.key");
    assert!(get_tls(port, "/0.1.0/ping", false).is_err(), "the replaced certificate is still served");
    // A broken file keeps the one in service.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&cert, b"not a certificate").unwrap();
    assert!(get_tls(port, "/0.1.0/ping", false).is_err());
    std::thread::sleep(Duration::from_millis(20));
    put("server.pem", "server.key");
    assert_eq!(get_tls(port, "/0.1.0/ping", false).unwrap().0, 200, "the renewed certificate is served");
}

#[test]
fn tls_file_problems_are_reported_before_start() {
    let missing = TlsFiles {
        certificate_file: fixture("nope.pem"),
        private_key_file: fixture("server.key"),
        root_ca_cert_file: None,
        verify_client: false,
        names: tern_rest::tls::NAMES,
    };
    let e = tern_rest::tls::acceptor(&missing).err().expect("missing certificate accepted");
    assert!(e.contains("Security.TLS.CertificateFile") && e.contains("nope.pem"), "{e}");
    // A key that is not the certificate's.
    let mismatched = TlsFiles {
        certificate_file: fixture("server.pem"),
        private_key_file: fixture("client.key"),
        root_ca_cert_file: None,
        verify_client: false,
        names: tern_rest::tls::NAMES,
    };
    let e = tern_rest::tls::acceptor(&mismatched).err().expect("mismatched key accepted");
    assert!(e.contains("do not form a usable pair"), "{e}");
    // The certificate file given as key: no key in it.
    let no_key = TlsFiles { private_key_file: fixture("ca.pem"), ..mismatched };
    let e = tern_rest::tls::acceptor(&no_key).err().expect("file without a key accepted");
    assert!(e.contains("Security.TLS.PrivateKeyFile"), "{e}");
    // run() refuses before binding.
    let opts = RestOptions { listen: "127.0.0.1:0".parse().unwrap(), tls: Some(missing), ..Default::default() };
    let r = tern_rest::run(|| Err("not reached".to_string()), opts, |_| panic!("bound with a bad certificate"));
    assert!(r.unwrap_err().contains("nope.pem"));
}

#[test]
fn config_json_enables_tls_and_names_missing_files() {
    let dir = tempfile::tempdir().unwrap();
    let write = |text: String| {
        let p = dir.path().join("rest.json");
        std::fs::write(&p, text).unwrap();
        tern_rest::config::RonDbConfig::load(&p).and_then(|c| RestOptions::from_config(&c))
    };
    let ok = write(format!(
        r#"{{"Security": {{"TLS": {{"EnableTLS": true, "CertificateFile": "{}", "PrivateKeyFile": "{}"}}}}}}"#,
        fixture("server.pem"),
        fixture("server.key")
    ))
    .unwrap();
    let t = ok.tls.expect("tls on");
    assert_eq!(t.certificate_file, fixture("server.pem"));
    assert!(!t.verify_client);
    let e = write(r#"{"Security": {"TLS": {"EnableTLS": true, "CertificateFile": "a.pem"}}}"#.into()).unwrap_err();
    assert!(e.contains("Security.TLS.PrivateKeyFile is not set"), "{e}");
    let e = write(format!(
        r#"{{"Security": {{"TLS": {{"EnableTLS": true, "RequireAndVerifyClientCert": true, "CertificateFile": "{}", "PrivateKeyFile": "{}"}}}}}}"#,
        fixture("server.pem"),
        fixture("server.key")
    ))
    .unwrap_err();
    assert!(e.contains("Security.TLS.RootCACertFile is not set"), "{e}");
    let off = write(r#"{"Security": {"TLS": {"EnableTLS": false, "CertificateFile": ""}}}"#.into()).unwrap();
    assert!(off.tls.is_none());
}
