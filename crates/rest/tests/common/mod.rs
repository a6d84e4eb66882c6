//! Helpers shared by the REST integration tests: a data node on 127.0.0.1 and a REST server for it.

use std::time::Duration;
use tern_client::Client;
use tern_kernel::NodeConfig;
use tern_rest::config::RestOptions;
use tern_runtime::{DataNode, DataNodeConfig};

pub fn start_node() -> (tempfile::TempDir, DataNode, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut node = NodeConfig::new(1, 2, 64 << 20);
    node.dist.epoch_interval_ms = 20;
    let cfg = DataNodeConfig {
        node,
        data_dir: dir.path().to_path_buf(),
        listen: "127.0.0.1:0".parse().unwrap(),
        spin_max_us: 10,
        redo_segment_bytes: 1 << 20,
        idle_hook: None,
    };
    let n = DataNode::start(cfg).unwrap();
    assert!(n.wait_started(Duration::from_secs(20)));
    let addr = n.local_addr().to_string();
    (dir, n, addr)
}

/// Starts a REST server for the data node at `addr`; returns its port.
pub fn start_rest(addr: &str, mut opts: RestOptions) -> u16 {
    opts.listen = "127.0.0.1:0".parse().unwrap();
    let addr = addr.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        tern_rest::run(move || Client::connect(&addr).map_err(|e| e.to_string()), opts, |a| tx.send(a).unwrap())
            .unwrap()
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap().port()
}
