//! The cluster file (`cluster.toml`, NDB's config.ini): parsed into a `ClusterConfig` and
//! validated. Unknown keys are errors that name the key, so a typo never silently falls back to a
//! default.
//!
//! ```toml
//! replicas = 2
//! ldm_workers = 2            # optional, default 2
//! epoch_interval_ms = 100    # optional
//! heartbeat_interval_ms = 250
//! failure_timeout_ms = 1500
//!
//! [[mgmd]]
//! id = 65
//! host = "127.0.0.1"
//! port = 1186
//!
//! [[datanode]]
//! id = 1
//! host = "127.0.0.1"
//! port = 11860
//! ```

use serde::Deserialize;
use std::path::Path;
use tern_types::cluster::{ClusterConfig, DataNodeSpec, MgmdSpec, NodeId};

/// Defaults of the optional settings.
pub const LDM_WORKERS_DEFAULT: u16 = 2;
pub const EPOCH_INTERVAL_MS_DEFAULT: u64 = 100;
pub const HEARTBEAT_INTERVAL_MS_DEFAULT: u64 = 250;
pub const FAILURE_TIMEOUT_MS_DEFAULT: u64 = 1500;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{0}")]
    Syntax(String),
    #[error("invalid cluster configuration: {0}")]
    Invalid(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    replicas: u8,
    ldm_workers: Option<u16>,
    epoch_interval_ms: Option<u64>,
    heartbeat_interval_ms: Option<u64>,
    failure_timeout_ms: Option<u64>,
    #[serde(default)]
    mgmd: Vec<FileNode>,
    #[serde(default)]
    datanode: Vec<FileNode>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileNode {
    id: NodeId,
    host: String,
    port: u16,
    /// Availability zone (RonDB's LocationDomainId), 1-255; data nodes only.
    location_domain: Option<u8>,
}

/// Parses and validates the text of a cluster file.
pub fn parse_cluster_config(text: &str) -> Result<ClusterConfig, ConfigError> {
    let file: FileConfig =
        toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string().trim_end().to_string()))?;
    let mut data_nodes: Vec<DataNodeSpec> = file
        .datanode
        .into_iter()
        .map(|n| DataNodeSpec { id: n.id, host: n.host, port: n.port, location_domain: n.location_domain.unwrap_or(0) })
        .collect();
    data_nodes.sort_by_key(|d| d.id);
    let mut mgmds: Vec<MgmdSpec> =
        file.mgmd.into_iter().map(|n| MgmdSpec { id: n.id, host: n.host, port: n.port }).collect();
    mgmds.sort_by_key(|m| m.id);
    let config = ClusterConfig {
        replicas: file.replicas,
        data_nodes,
        mgmds,
        ldm_workers: file.ldm_workers.unwrap_or(LDM_WORKERS_DEFAULT),
        epoch_interval_ms: file.epoch_interval_ms.unwrap_or(EPOCH_INTERVAL_MS_DEFAULT),
        heartbeat_interval_ms: file.heartbeat_interval_ms.unwrap_or(HEARTBEAT_INTERVAL_MS_DEFAULT),
        failure_timeout_ms: file.failure_timeout_ms.unwrap_or(FAILURE_TIMEOUT_MS_DEFAULT),
    };
    validate(&config)?;
    Ok(config)
}

/// Reads, parses and validates a cluster file.
pub fn load_cluster_config(path: &Path) -> Result<ClusterConfig, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
    parse_cluster_config(&text)
}

/// `ClusterConfig::validate` plus what the control plane needs: an odd number of management
/// nodes (a Raft majority must survive one failure per pair), distinct mgmd addresses.
pub fn validate(config: &ClusterConfig) -> Result<(), ConfigError> {
    config.validate().map_err(ConfigError::Invalid)?;
    if config.mgmds.len().is_multiple_of(2) {
        return Err(ConfigError::Invalid(format!(
            "the number of management nodes must be odd (1, 3, 5 or 7), got {}",
            config.mgmds.len()
        )));
    }
    let mut addrs = std::collections::BTreeSet::new();
    for m in &config.mgmds {
        if m.host.is_empty() {
            return Err(ConfigError::Invalid(format!("management node {} has an empty host", m.id)));
        }
        if !addrs.insert((m.host.as_str(), m.port)) {
            return Err(ConfigError::Invalid(format!("management node address {}:{} is used twice", m.host, m.port)));
        }
    }
    for d in &config.data_nodes {
        if d.host.is_empty() {
            return Err(ConfigError::Invalid(format!("data node {} has an empty host", d.id)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
replicas = 2
heartbeat_interval_ms = 250
failure_timeout_ms = 1500

[[mgmd]]
id = 65
host = "127.0.0.1"
port = 1186

[[datanode]]
id = 2
host = "127.0.0.1"
port = 11861

[[datanode]]
id = 1
host = "127.0.0.1"
port = 11860
"#;

    #[test]
    fn parses_with_defaults_and_sorts_nodes() {
        let c = parse_cluster_config(GOOD).unwrap();
        assert_eq!(c.replicas, 2);
        assert_eq!(c.ldm_workers, LDM_WORKERS_DEFAULT);
        assert_eq!(c.epoch_interval_ms, EPOCH_INTERVAL_MS_DEFAULT);
        assert_eq!((c.heartbeat_interval_ms, c.failure_timeout_ms), (250, 1500));
        assert_eq!(c.data_nodes.iter().map(|d| d.id).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(c.mgmds[0].port, 1186);
        assert_eq!(c.node_groups(), vec![vec![1, 2]]);
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = parse_cluster_config(&format!("replicaz = 3\n{GOOD}")).unwrap_err().to_string();
        assert!(e.contains("replicaz"), "{e}");
        let e =
            parse_cluster_config(&GOOD.replace("port = 11860", "port = 11860\nmemory = 5")).unwrap_err().to_string();
        assert!(e.contains("memory"), "{e}");
    }

    #[test]
    fn bad_values_are_explained() {
        let e = parse_cluster_config(&GOOD.replace("replicas = 2", "replicas = 3")).unwrap_err().to_string();
        assert!(e.contains("multiple of replicas"), "{e}");
        let e = parse_cluster_config(&GOOD.replace("failure_timeout_ms = 1500", "failure_timeout_ms = 300"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("heartbeat"), "{e}");
        let e = parse_cluster_config(&GOOD.replace("port = 11861", "port = 99999")).unwrap_err().to_string();
        assert!(e.contains("99999") || e.contains("port"), "{e}");
        let e = parse_cluster_config(&GOOD.replace("id = 2", "id = 1")).unwrap_err().to_string();
        assert!(e.contains("used twice"), "{e}");
        let two_mgmds =
            GOOD.replace("[[datanode]]\nid = 2", "[[mgmd]]\nid = 66\nhost = \"h\"\nport = 1\n[[datanode]]\nid = 2");
        let e = parse_cluster_config(&two_mgmds).unwrap_err().to_string();
        assert!(e.contains("odd"), "{e}");
        let e = parse_cluster_config("replicas = \"two\"").unwrap_err().to_string();
        assert!(e.contains("replicas"), "{e}");
    }
}
