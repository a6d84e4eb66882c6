//! Helpers shared by the REST integration tests: a data node on 127.0.0.1 and a REST server for it.

use std::time::Duration;
use tern_rest::config::RestOptions;
use tern_runtime::{DataNode, DataNodeConfig};

pub fn start_node() -> (tempfile::TempDir, DataNode, String) {
    let dir = tempfile::tempdir().unwrap();
    // `TERN_TEST_TRANSPORT=hosted`: the layout of `tern up` on one host, the front end on worker 0.
    let (host, rt) = tern_client::hosted::test_hosting();
    let n = DataNode::start_hosted(DataNodeConfig::local(dir.path(), 64 << 20), host).unwrap();
    let rt = rt.map(|rx| rx.recv_timeout(Duration::from_secs(20)).unwrap());
    assert!(n.wait_started(Duration::from_secs(20)));
    let addr = n.local_addr().to_string();
    if let Some(rt) = rt {
        tern_client::hosted::register(&addr, rt);
    }
    let c = n.local_connector();
    tern_client::register_local_node(&addr, std::sync::Arc::new(move |w, s| Box::new(c.connect_to(w, s))));
    (dir, n, addr)
}

/// Starts a REST server for the data node at `addr`; returns its port.
pub fn start_rest(addr: &str, mut opts: RestOptions) -> u16 {
    opts.listen = "127.0.0.1:0".parse().unwrap();
    let addr = addr.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    let host = tern_client::hosted::registered(&addr);
    std::thread::spawn(move || {
        let connect = move || tern_client::connect_prefer_local(&addr).map_err(|e| e.to_string());
        tern_rest::run_on(host, connect, opts, |a| tx.send(a).unwrap()).unwrap()
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap().port()
}
