//! TLS for the REST port (`Security.TLS` of RonDB's config): rustls with the ring provider.
//! A server certificate chain and key from PEM files; with `RequireAndVerifyClientCert`, clients
//! must present a certificate signed by `RootCACertFile`. Every file problem is reported at start
//! naming the key and the file, before the port is bound.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;

/// The TLS settings taken from the config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    pub certificate_file: String,
    pub private_key_file: String,
    /// Required when client certificates are verified.
    pub root_ca_cert_file: Option<String>,
    pub verify_client: bool,
}

fn certs(key: &str, path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let iter = CertificateDer::pem_file_iter(path).map_err(|e| format!("Security.TLS.{key} '{path}': {e}"))?;
    let certs: Vec<_> = iter.collect::<Result<_, _>>().map_err(|e| format!("Security.TLS.{key} '{path}': {e}"))?;
    if certs.is_empty() {
        return Err(format!("Security.TLS.{key} '{path}': no PEM certificate in the file"));
    }
    Ok(certs)
}

/// Builds the acceptor; errors name the config key and file.
pub fn acceptor(t: &TlsFiles) -> Result<tokio_rustls::TlsAcceptor, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certs("CertificateFile", &t.certificate_file)?;
    let key = PrivateKeyDer::from_pem_file(&t.private_key_file)
        .map_err(|e| format!("Security.TLS.PrivateKeyFile '{}': {e}", t.private_key_file))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if t.verify_client {
        let path = t.root_ca_cert_file.as_deref().unwrap_or_default();
        let mut roots = rustls::RootCertStore::empty();
        for c in certs("RootCACertFile", path)? {
            roots.add(c).map_err(|e| format!("Security.TLS.RootCACertFile '{path}': {e}"))?;
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| format!("Security.TLS.RootCACertFile '{path}': {e}"))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut cfg = builder.with_single_cert(chain, key).map_err(|e| {
        format!(
            "Security.TLS: certificate '{}' and key '{}' do not form a usable pair: {e}",
            t.certificate_file, t.private_key_file
        )
    })?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
}
