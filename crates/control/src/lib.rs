//! Tern's management node (RonDB's ndb_mgmd plus its arbitrator): the control plane that holds the
//! cluster configuration, node states, the schema catalog and the durable epoch, replicated over
//! 1, 3 (any odd number of) mgmds with Raft (openraft, wrapped here so the rest of Tern never sees
//! it); the Raft leader detects data-node failures, grants leases and arbitrates.
//!
//! * `config`: the cluster file.
//! * `state`: the replicated state machine (pure).
//! * `detector`: failure detection, leases and arbitration on the leader (pure).
//! * `member`: a data node's side of membership — heartbeats, leases, fencing, its requests (pure).
//! * `proto`: the framed protocol on the mgmd port.
//! * `store`: the durable Raft log, vote and snapshot in the data directory.
//! * `raft`: openraft's type configuration and the network between mgmds.
//! * `server`: `run_mgmd` / `spawn_mgmd`.
//! * `client`: `MgmClient`, the blocking client of data nodes, API servers and `tern status`.

pub mod client;
pub mod config;
pub mod detector;
pub mod member;
pub mod proto;
mod raft;
mod server;
pub mod state;
mod store;

pub use client::{ControlError, HeartbeatInfo, MgmClient, StateInfo, StatusInfo, watch_cluster, watch_down_nodes};
pub use config::{ConfigError, load_cluster_config, parse_cluster_config};
pub use detector::Detector;
pub use proto::Role;
pub use server::{MgmdHandle, MgmdOptions, run_mgmd, spawn_mgmd};
pub use state::{Applied, Command, CommandResult, ControlState, NodeSpecWire};
