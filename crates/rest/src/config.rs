//! RonDB's REST server configuration (JSON, interfaces.md §1.6), so RonDB users can reuse theirs.
//! Keys are case-sensitive; an unknown key is rejected naming it; keys starting with `#` are
//! comments. Every section and key is optional.

use serde::Deserialize;
use serde_json::Value as Json;

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RestSection {
    #[serde(rename = "ServerIP")]
    pub server_ip: Option<String>,
    #[serde(rename = "ServerPort")]
    pub server_port: Option<u16>,
    #[serde(rename = "NumThreads")]
    pub num_threads: Option<usize>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mgmd {
    #[serde(rename = "IP")]
    pub ip: String,
    #[serde(rename = "Port")]
    pub port: u16,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RonDbSection {
    #[serde(rename = "Mgmds")]
    pub mgmds: Option<Vec<Mgmd>>,
    #[serde(rename = "ConnectionPoolSize")]
    pub connection_pool_size: Option<usize>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    #[serde(rename = "EnableTLS")]
    pub enable_tls: Option<bool>,
    #[serde(rename = "RequireAndVerifyClientCert")]
    pub require_and_verify_client_cert: Option<bool>,
    #[serde(rename = "CertificateFile")]
    pub certificate_file: Option<String>,
    #[serde(rename = "PrivateKeyFile")]
    pub private_key_file: Option<String>,
    #[serde(rename = "RootCACertFile")]
    pub root_ca_cert_file: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ApiKeySection {
    #[serde(rename = "UseHopsworksAPIKeys")]
    pub use_hopsworks_api_keys: Option<bool>,
    #[serde(rename = "CacheRefreshIntervalMS")]
    pub cache_refresh_interval_ms: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SecuritySection {
    #[serde(rename = "TLS")]
    pub tls: Option<TlsSection>,
    #[serde(rename = "APIKey")]
    pub api_key: Option<ApiKeySection>,
    #[serde(rename = "InsecureAllowAll")]
    pub insecure_allow_all: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RondisDatabase {
    #[serde(rename = "Index")]
    pub index: u32,
    #[serde(rename = "DirtyINCRDECR")]
    pub dirty_incr_decr: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RondisSection {
    #[serde(rename = "Enable")]
    pub enable: Option<bool>,
    #[serde(rename = "ServerPort")]
    pub server_port: Option<u16>,
    #[serde(rename = "NumThreads")]
    pub num_threads: Option<usize>,
    #[serde(rename = "NumDatabases")]
    pub num_databases: Option<u32>,
    #[serde(rename = "Databases")]
    pub databases: Option<Vec<RondisDatabase>>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct InternalSection {
    #[serde(rename = "BatchMaxSize")]
    pub batch_max_size: Option<usize>,
    #[serde(rename = "ReqBufferSize")]
    pub req_buffer_size: Option<usize>,
    #[serde(rename = "OperationIDMaxSize")]
    pub operation_id_max_size: Option<usize>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct LogSection {
    #[serde(rename = "Level")]
    pub level: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RonDbConfig {
    #[serde(rename = "REST")]
    pub rest: Option<RestSection>,
    #[serde(rename = "RonDB")]
    pub rondb: Option<RonDbSection>,
    #[serde(rename = "Security")]
    pub security: Option<SecuritySection>,
    #[serde(rename = "Rondis")]
    pub rondis: Option<RondisSection>,
    #[serde(rename = "Internal")]
    pub internal: Option<InternalSection>,
    #[serde(rename = "Log")]
    pub log: Option<LogSection>,
    #[serde(rename = "Testing")]
    pub testing: Option<Json>,
}

/// Removes every object key starting with `#` (comments), at any depth.
fn strip_comments(v: &mut Json) {
    match v {
        Json::Object(m) => {
            m.retain(|k, _| !k.starts_with('#'));
            m.values_mut().for_each(strip_comments);
        }
        Json::Array(a) => a.iter_mut().for_each(strip_comments),
        _ => {}
    }
}

impl RonDbConfig {
    pub fn parse(text: &str) -> Result<RonDbConfig, String> {
        let mut v: Json = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
        strip_comments(&mut v);
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    pub fn load(path: &std::path::Path) -> Result<RonDbConfig, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        RonDbConfig::parse(&text).map_err(|e| format!("config file {}: {e}", path.display()))
    }
}

/// The REST front end's settings, with RonDB's defaults.
#[derive(Debug, Clone)]
pub struct RestOptions {
    pub listen: std::net::SocketAddr,
    pub threads: usize,
    pub batch_max_size: usize,
    pub req_buffer_size: usize,
    pub operation_id_max_size: usize,
    /// Require `X-API-KEY` on data endpoints.
    pub api_keys: bool,
    pub api_key_refresh: std::time::Duration,
    /// How long an idle worker polls its sockets before it sleeps (0: never; see
    /// `tern_client::spinwatch`).
    pub spin: std::time::Duration,
    /// TLS on the REST port (`Security.TLS.EnableTLS`).
    pub tls: Option<crate::tls::TlsFiles>,
    /// Open connections at most; one more is answered 503 and closed.
    pub max_connections: usize,
    /// A connection with no request in progress and nothing received for this long is closed.
    pub idle_timeout: std::time::Duration,
    /// Time allowed to receive a request's head (from its first byte), and again its body.
    pub header_read_timeout: std::time::Duration,
    /// Bytes of request bodies all connections may hold at once; a request beyond it is 503.
    pub body_memory_max: usize,
    /// Requests per second each API key may make (when keys are on); beyond it 429.
    pub key_rate_limit: Option<crate::apikey::RateLimit>,
}

/// Default cap on open REST connections.
pub const MAX_CONNECTIONS_DEFAULT: usize = 10_000;
/// Default keep-alive idle timeout.
pub const IDLE_TIMEOUT_DEFAULT: std::time::Duration = std::time::Duration::from_secs(60);
/// Default memory for request bodies in flight (256 MiB: 256 bodies of the default 1 MiB limit).
pub const BODY_MEMORY_MAX_DEFAULT: usize = 256 << 20;
/// Default time to receive a request's head (and, separately, its body).
pub const HEADER_READ_TIMEOUT_DEFAULT: std::time::Duration = std::time::Duration::from_secs(30);

impl Default for RestOptions {
    fn default() -> Self {
        RestOptions {
            listen: "127.0.0.1:4406".parse().expect("address"),
            // One worker that spins before it sleeps gives the lowest latency and, on small
            // machines, the most rows/s (BENCHMARKS.md); raise REST.NumThreads where cores spare.
            threads: 1,
            batch_max_size: 256,
            req_buffer_size: 1 << 20,
            operation_id_max_size: 256,
            api_keys: false,
            api_key_refresh: std::time::Duration::from_secs(10),
            spin: std::time::Duration::from_micros(50),
            tls: None,
            max_connections: MAX_CONNECTIONS_DEFAULT,
            idle_timeout: IDLE_TIMEOUT_DEFAULT,
            header_read_timeout: HEADER_READ_TIMEOUT_DEFAULT,
            body_memory_max: BODY_MEMORY_MAX_DEFAULT,
            key_rate_limit: None,
        }
    }
}

impl RestOptions {
    /// Applies a RonDB config on top of the defaults.
    pub fn from_config(c: &RonDbConfig) -> Result<RestOptions, String> {
        let mut o = RestOptions::default();
        if let Some(r) = &c.rest {
            let ip = r.server_ip.clone().unwrap_or_else(|| "127.0.0.1".into());
            let port = r.server_port.unwrap_or(4406);
            o.listen =
                format!("{ip}:{port}").parse().map_err(|_| format!("REST.ServerIP '{ip}' is not an IP address"))?;
            if let Some(n) = r.num_threads {
                o.threads = n.clamp(1, 64);
            }
        }
        if let Some(sec) = &c.security {
            // Keys are required when asked for, or when insecure access is switched off.
            let use_keys = sec.api_key.as_ref().and_then(|k| k.use_hopsworks_api_keys).unwrap_or(false);
            o.api_keys = use_keys || sec.insecure_allow_all == Some(false);
            if let Some(ms) = sec.api_key.as_ref().and_then(|k| k.cache_refresh_interval_ms) {
                o.api_key_refresh = std::time::Duration::from_millis(ms.max(1));
            }
            if let Some(t) = sec.tls.as_ref().filter(|t| t.enable_tls.unwrap_or(false)) {
                let file = |v: &Option<String>, key: &str| -> Result<String, String> {
                    match v.as_deref() {
                        Some(f) if !f.is_empty() => Ok(f.to_string()),
                        _ => Err(format!("Security.TLS.EnableTLS is true but Security.TLS.{key} is not set")),
                    }
                };
                let verify_client = t.require_and_verify_client_cert.unwrap_or(false);
                o.tls = Some(crate::tls::TlsFiles {
                    certificate_file: file(&t.certificate_file, "CertificateFile")?,
                    private_key_file: file(&t.private_key_file, "PrivateKeyFile")?,
                    root_ca_cert_file: if verify_client {
                        Some(file(&t.root_ca_cert_file, "RootCACertFile")?)
                    } else {
                        None
                    },
                    verify_client,
                    names: crate::tls::NAMES,
                });
            }
        }
        if let Some(i) = &c.internal {
            if let Some(n) = i.batch_max_size {
                o.batch_max_size = n.max(1);
            }
            if let Some(n) = i.req_buffer_size {
                o.req_buffer_size = n.max(1024);
            }
            if let Some(n) = i.operation_id_max_size {
                o.operation_id_max_size = n;
            }
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rondb_sample_config_parses() {
        let text = r##"{ "REST":  {"ServerIP": "0.0.0.0", "ServerPort": 4406, "NumThreads": 64},
          "RonDB": {"Mgmds": [{"IP": "localhost", "Port": 1186}], "ConnectionPoolSize": 1},
          "Security": {"TLS": {"EnableTLS": false, "RequireAndVerifyClientCert": false,
                                "CertificateFile": "", "PrivateKeyFile": "", "RootCACertFile": ""},
                       "APIKey": {"UseHopsworksAPIKeys": false}, "InsecureAllowAll": true},
          "Rondis": {"Enable": true, "ServerPort": 6379, "NumThreads": 64, "NumDatabases": 2,
                     "Databases": [{"Index": 0, "DirtyINCRDECR": true}, {"Index": 1, "DirtyINCRDECR": true}]},
          "Internal": {"BatchMaxSize": 256, "ReqBufferSize": 1048576, "OperationIDMaxSize": 256},
          "Log": {"Level": "INFO", "#comment": "ignored"},
          "Testing": {"MySQL": {"Servers": [{"IP": "localhost", "Port": 3306}], "User": "root", "Password": ""}} }"##;
        let c = RonDbConfig::parse(text).unwrap();
        let o = RestOptions::from_config(&c).unwrap();
        assert_eq!(o.listen.port(), 4406);
        assert_eq!(o.batch_max_size, 256);
        assert_eq!(c.rondis.unwrap().databases.unwrap().len(), 2);
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = RonDbConfig::parse(r#"{"REST": {"ServerPrt": 1}}"#).unwrap_err();
        assert!(e.contains("ServerPrt"), "{e}");
        let e = RonDbConfig::parse(r#"{"Bogus": {}}"#).unwrap_err();
        assert!(e.contains("Bogus"), "{e}");
    }
}
