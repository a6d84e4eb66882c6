//! TLS for the REST port (`Security.TLS` of RonDB's config), through `tern_client::tls`: a server
//! certificate chain and key from PEM files; with `RequireAndVerifyClientCert`, clients must
//! present a certificate signed by `RootCACertFile`. Every file problem is reported at start
//! naming the key and the file, before the port is bound; changed files are picked up by new
//! connections without a restart.

pub use tern_client::tls::TlsFiles;

/// The names of RonDB's settings, for errors.
pub const NAMES: [&str; 3] =
    ["Security.TLS.CertificateFile", "Security.TLS.PrivateKeyFile", "Security.TLS.RootCACertFile"];

/// Builds the acceptor; errors name the config key and file.
pub fn acceptor(t: &TlsFiles) -> Result<tern_client::tls::Reloading, String> {
    tern_client::tls::Reloading::new(t.clone(), &[b"http/1.1"])
}
