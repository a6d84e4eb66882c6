//! TLS for the front doors (REST, MySQL, Redis): rustls with the ring provider, a server
//! certificate chain and key from PEM files, optionally client certificates verified against a
//! CA. Every file problem is reported naming the setting and the file. `Reloading` serves new
//! connections with the files as they are now: when a file's modification time changes it builds
//! the configuration again (a bad new file is logged and the previous configuration kept), so
//! certificates are renewed without a restart.

pub use tokio_rustls;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// The files of one TLS front door, each with the setting that names it (for errors).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    pub certificate_file: String,
    pub private_key_file: String,
    /// Required when client certificates are verified.
    pub root_ca_cert_file: Option<String>,
    pub verify_client: bool,
    /// The settings' names: certificate, key, CA (e.g. "Security.TLS.CertificateFile").
    pub names: [&'static str; 3],
}

impl TlsFiles {
    fn paths(&self) -> Vec<&str> {
        let mut v = vec![self.certificate_file.as_str(), self.private_key_file.as_str()];
        if self.verify_client
            && let Some(ca) = &self.root_ca_cert_file
        {
            v.push(ca);
        }
        v
    }
}

fn certs(key: &str, path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let iter = CertificateDer::pem_file_iter(path).map_err(|e| format!("{key} '{path}': {e}"))?;
    let certs: Vec<_> = iter.collect::<Result<_, _>>().map_err(|e| format!("{key} '{path}': {e}"))?;
    if certs.is_empty() {
        return Err(format!("{key} '{path}': no PEM certificate in the file"));
    }
    Ok(certs)
}

/// The server configuration for `t` (ALPN protocols as given); errors name the setting and file.
pub fn server_config(t: &TlsFiles, alpn: &[&[u8]]) -> Result<Arc<rustls::ServerConfig>, String> {
    let [cert_name, key_name, ca_name] = t.names;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certs(cert_name, &t.certificate_file)?;
    let key = PrivateKeyDer::from_pem_file(&t.private_key_file)
        .map_err(|e| format!("{key_name} '{}': {e}", t.private_key_file))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if t.verify_client {
        let path = t.root_ca_cert_file.as_deref().unwrap_or_default();
        let mut roots = rustls::RootCertStore::empty();
        for c in certs(ca_name, path)? {
            roots.add(c).map_err(|e| format!("{ca_name} '{path}': {e}"))?;
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| format!("{ca_name} '{path}': {e}"))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut cfg = builder.with_single_cert(chain, key).map_err(|e| {
        format!(
            "{cert_name}: certificate '{}' and key '{}' do not form a usable pair: {e}",
            t.certificate_file, t.private_key_file
        )
    })?;
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(cfg))
}

fn mtimes(t: &TlsFiles) -> Vec<Option<SystemTime>> {
    t.paths().iter().map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok()).collect()
}

/// An acceptor that follows its files (see the module comment).
pub struct Reloading {
    files: TlsFiles,
    alpn: Vec<Vec<u8>>,
    current: Mutex<(Vec<Option<SystemTime>>, Arc<rustls::ServerConfig>)>,
}

impl Reloading {
    /// Loads the files now (Err: they are not usable, naming the setting and file).
    pub fn new(files: TlsFiles, alpn: &[&[u8]]) -> Result<Reloading, String> {
        let stamp = mtimes(&files);
        let cfg = server_config(&files, alpn)?;
        Ok(Reloading { alpn: alpn.iter().map(|p| p.to_vec()).collect(), current: Mutex::new((stamp, cfg)), files })
    }

    /// The configuration for a new connection: rebuilt first when a file changed since it was
    /// loaded.
    pub fn config(&self) -> Arc<rustls::ServerConfig> {
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let now = mtimes(&self.files);
        if now != cur.0 {
            let alpn: Vec<&[u8]> = self.alpn.iter().map(|p| &p[..]).collect();
            match server_config(&self.files, &alpn) {
                Ok(cfg) => {
                    tracing::info!(file = %self.files.certificate_file, "TLS certificate reloaded");
                    *cur = (now, cfg);
                }
                Err(e) => {
                    // Half-written files are retried at the next connection.
                    tracing::warn!("TLS files changed but cannot be used, keeping the previous ones: {e}");
                }
            }
        }
        cur.1.clone()
    }

    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.config())
    }
}
