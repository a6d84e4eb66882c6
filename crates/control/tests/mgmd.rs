//! Management nodes over real TCP on 127.0.0.1: registration, heartbeats and leases, proposals,
//! failure detection, Raft failover and restart from the data directory, and bad input.
//! Every wait is bounded; timings use small timeouts and assert orderings, not durations.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tern_control::proto::{self, Reply, Request, Role};
use tern_control::{Command, ControlError, MgmClient, MgmdHandle, MgmdOptions, spawn_mgmd};
use tern_types::cluster::{ClusterConfig, DataNodeSpec, MgmdSpec, NodeId, NodeState};

fn free_ports(n: usize) -> Vec<u16> {
    let first = tern_testkit::ports::ports_in_a_row(n as u16);
    (first..first + n as u16).collect()
}

fn config(mgmd_ports: &[u16], data_nodes: u16, replicas: u8, heartbeat_ms: u64, failure_ms: u64) -> ClusterConfig {
    ClusterConfig {
        replicas,
        data_nodes: (1..=data_nodes)
            .map(|id| DataNodeSpec { id, host: "127.0.0.1".into(), port: 1 + id, location_domain: 0 })
            .collect(),
        mgmds: mgmd_ports
            .iter()
            .enumerate()
            .map(|(i, p)| MgmdSpec { id: 65 + i as NodeId, host: "127.0.0.1".into(), port: *p })
            .collect(),
        ldm_workers: 2,
        epoch_interval_ms: 100,
        heartbeat_interval_ms: heartbeat_ms,
        failure_timeout_ms: failure_ms,
    }
}

fn start(config: &ClusterConfig, id: NodeId, dir: &Path) -> MgmdHandle {
    let opts = MgmdOptions {
        config: config.clone(),
        node_id: id,
        data_dir: dir.join(format!("mgmd-{id}")),
        bind: None,
        secret: None,
    };
    spawn_mgmd(opts).unwrap()
}

fn addrs(config: &ClusterConfig) -> Vec<String> {
    config.mgmds.iter().map(|m| format!("{}:{}", m.host, m.port)).collect()
}

/// Polls `f` every 10 ms until it returns `Some`, at most `limit`.
fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Registers and starts a data node; returns its incarnation.
fn join(client: &mut MgmClient, node: NodeId) -> u32 {
    let inc = client.register(node, 0, 0).unwrap();
    client.propose(Command::SetState { node, incarnation: inc, state: NodeState::Copying }).unwrap();
    client.propose(Command::SetState { node, incarnation: inc, state: NodeState::Started }).unwrap();
    inc
}

/// Heartbeats `node` every `every` until `stop` is set, from its own client.
fn heartbeater(
    addrs: Vec<String>,
    node: NodeId,
    inc: u32,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut c = MgmClient::new(addrs).with_role(Role::DataNode);
        while !stop.load(Ordering::SeqCst) {
            let _ = c.heartbeat(node, inc, 0, &[]);
            std::thread::sleep(every);
        }
    })
}

#[test]
fn single_mgmd_registers_heartbeats_and_applies_proposals() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&free_ports(1), 2, 2, 100, 600);
    let _mgmd = start(&cfg, 65, dir.path());
    let mut c = MgmClient::new(addrs(&cfg)).with_role(Role::DataNode);

    let inc = c.register(1, 0, 0).unwrap();
    assert_eq!(inc, 1);
    // The first heartbeats may come before the leadership is confirmed: no lease yet.
    let hb = wait_for(Duration::from_secs(5), "a lease", || {
        let h = c.heartbeat(1, inc, 0, &[]).unwrap();
        h.lease_until.is_some().then_some(h)
    });
    assert_eq!(hb.lease_ms, 500);
    let state = hb.state.expect("newer than version 0");
    assert_eq!(state.state_of(1), NodeState::Starting);
    // Nothing newer: no state in the reply.
    assert!(c.heartbeat(1, inc, hb.version, &[]).unwrap().state.is_none());

    // A system start needs every node of a cluster that never ran.
    let e = c.propose(Command::StartCluster { nodes: vec![(1, inc)] }).unwrap_err();
    assert!(matches!(&e, ControlError::Rejected(r) if r.contains("[2]")), "{e}");
    let inc2 = c.register(2, 0, 0).unwrap();
    let applied = c.propose(Command::StartCluster { nodes: vec![(1, inc), (2, inc2)] }).unwrap();
    assert!(applied.version > hb.version);
    c.propose(Command::SetDurableEpoch { epoch: 42 }).unwrap();
    c.propose(Command::SetCatalog { version: 1, bytes: b"tables".to_vec() }).unwrap();
    let info = c.get_state().unwrap();
    assert_eq!(info.state.state_of(1), NodeState::Started);
    assert_eq!(info.state.durable_epoch, 42);
    assert_eq!(info.catalog_version, 1);
    assert_eq!(c.get_catalog().unwrap(), (1, b"tables".to_vec()));

    let e = c.propose(Command::SetState { node: 1, incarnation: 7, state: NodeState::Started }).unwrap_err();
    assert!(matches!(&e, ControlError::Rejected(r) if r.contains("stale incarnation")), "{e}");
    let e = c.propose(Command::NodesFailed { nodes: vec![(1, inc)] }).unwrap_err();
    assert!(matches!(e, ControlError::Rejected(_)), "{e}");

    // An operator's stop request reaches the node in its heartbeat reply.
    let mut admin = MgmClient::new(addrs(&cfg));
    admin.stop_node(1).unwrap();
    assert!(c.heartbeat(1, inc, 0, &[]).unwrap().stop);
    admin.start_node(1).unwrap();
    assert!(!c.heartbeat(1, inc, 0, &[]).unwrap().stop);

    // A long poll returns as soon as the state changes.
    let known = c.get_state().unwrap().state.version;
    let proposer = std::thread::spawn({
        let a = addrs(&cfg);
        move || {
            std::thread::sleep(Duration::from_millis(100));
            MgmClient::new(a).propose(Command::StopNode { node: 2 }).unwrap();
        }
    });
    let newer = admin.watch(known, 10_000).unwrap().expect("a newer state");
    assert!(newer.state.version > known);
    proposer.join().unwrap();
    let v = newer.state.version;
    assert_eq!(admin.watch(v, 50).unwrap(), None);

    let status = admin.status().unwrap();
    assert_eq!((status.mgmd, status.leader), (65, Some(65)));
    assert_eq!(status.members.len(), 1);
    assert_eq!(status.state.state.durable_epoch, 42);
    assert_eq!(status.state.stop_requested, vec![2]);
}

/// One mgmd (heartbeat 50 ms, failure timeout 300 ms), data nodes 1 and 2 started, node 1
/// heartbeating from its own thread until `stop`.
struct Pair {
    cfg: ClusterConfig,
    _mgmd: MgmdHandle,
    c: MgmClient,
    i2: u32,
    stop: Arc<AtomicBool>,
    beat1: std::thread::JoinHandle<()>,
}

fn pair(dir: &Path) -> Pair {
    let cfg = config(&free_ports(1), 2, 2, 50, 300);
    let _mgmd = start(&cfg, 65, dir);
    let mut c = MgmClient::new(addrs(&cfg)).with_role(Role::DataNode);
    let i1 = join(&mut c, 1);
    let i2 = join(&mut c, 2);
    let stop = Arc::new(AtomicBool::new(false));
    let beat1 = heartbeater(addrs(&cfg), 1, i1, Duration::from_millis(25), stop.clone());
    Pair { cfg, _mgmd, c, i2, stop, beat1 }
}

#[test]
fn a_silent_node_is_declared_down_only_after_its_lease_ran_out() {
    let dir = tempfile::tempdir().unwrap();
    let Pair { cfg, _mgmd, mut c, i2, stop, beat1 } = pair(dir.path());

    // Node 2 heartbeats until it holds a lease, a few times more, then falls silent.
    let mut lease_end = None;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut granted = 0;
    while granted < 5 {
        assert!(Instant::now() < deadline, "node 2 never got a lease");
        if let Some(until) = c.heartbeat(2, i2, 0, &[]).unwrap().lease_until {
            lease_end = Some(until);
            granted += 1;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let lease_end = lease_end.unwrap();

    // Whenever a reply says node 2 is down, that reply arrived after node 2's lease ended.
    let mut admin = MgmClient::new(addrs(&cfg));
    let down_seen = wait_for(Duration::from_secs(10), "node 2 declared down", || {
        let s = admin.get_state().unwrap();
        let received = Instant::now();
        (s.state.state_of(2) == NodeState::Down).then_some((received, s))
    });
    assert!(down_seen.0 >= lease_end, "declared down before the lease ran out");
    let state = down_seen.1.state;
    assert_eq!(state.state_of(1), NodeState::Started, "the heartbeating node stays");
    assert!(!state.cluster_down);
    // The declared node gets no lease any more and learns it is down.
    let hb = c.heartbeat(2, i2, 0, &[]).unwrap();
    assert_eq!(hb.lease_until, None);
    assert_eq!(hb.state.unwrap().state_of(2), NodeState::Down);
    stop.store(true, Ordering::SeqCst);
    beat1.join().unwrap();
}

/// `watch_down_nodes` (what a native client application runs to leave failed data nodes at
/// once): first every not-started node, then the change when a silent node is declared failed.
#[test]
fn watch_down_nodes_reports_the_data_nodes_that_do_not_serve() {
    let dir = tempfile::tempdir().unwrap();
    let Pair { cfg, _mgmd, i2, stop, beat1, .. } = pair(dir.path());
    let beat2_stop = Arc::new(AtomicBool::new(false));
    let beat2 = heartbeater(addrs(&cfg), 2, i2, Duration::from_millis(25), beat2_stop.clone());
    let seen: Arc<std::sync::Mutex<Vec<Vec<String>>>> = Arc::default();
    let watcher = {
        let (seen, stop, mgmds) = (seen.clone(), stop.clone(), addrs(&cfg));
        std::thread::spawn(move || {
            let on_down = |d: Vec<String>| seen.lock().unwrap().push(d);
            tern_control::watch_down_nodes(mgmds, None, &on_down, &|| stop.load(Ordering::SeqCst));
        })
    };
    wait_for(Duration::from_secs(10), "the first report", || (!seen.lock().unwrap().is_empty()).then_some(()));
    assert_eq!(seen.lock().unwrap()[0], Vec::<String>::new(), "both nodes serve");
    beat2_stop.store(true, Ordering::SeqCst);
    beat2.join().unwrap();
    let node2 = cfg.data_nodes[1].addr();
    wait_for(Duration::from_secs(10), "node 2 reported down", || {
        seen.lock().unwrap().last().is_some_and(|d| *d == [node2.clone()]).then_some(())
    });
    stop.store(true, Ordering::SeqCst);
    watcher.join().unwrap();
    beat1.join().unwrap();
}

#[test]
fn losing_a_whole_node_group_declares_the_cluster_down() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&free_ports(1), 4, 2, 50, 300); // groups [1,2] [3,4]
    let _mgmd = start(&cfg, 65, dir.path());
    let mut c = MgmClient::new(addrs(&cfg)).with_role(Role::DataNode);
    let incs: Vec<u32> = (1..=4).map(|n| join(&mut c, n)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    // Only group [1,2] heartbeats; group [3,4] is silent.
    let beats: Vec<_> = (1..=2)
        .map(|n| heartbeater(addrs(&cfg), n, incs[n as usize - 1], Duration::from_millis(25), stop.clone()))
        .collect();
    let state = wait_for(Duration::from_secs(10), "cluster down", || {
        let s = c.get_state().unwrap().state;
        s.cluster_down.then_some(s)
    });
    assert!(state.live_nodes().is_empty(), "no partial set: every node is down");
    let hb = c.heartbeat(1, incs[0], 0, &[]).unwrap();
    assert_eq!(hb.lease_until, None);
    stop.store(true, Ordering::SeqCst);
    for b in beats {
        b.join().unwrap();
    }
}

#[test]
fn a_suspicion_fails_one_of_the_two_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&free_ports(1), 2, 2, 50, 300);
    let _mgmd = start(&cfg, 65, dir.path());
    let mut c = MgmClient::new(addrs(&cfg)).with_role(Role::DataNode);
    let i1 = join(&mut c, 1); // joined first: the master
    let i2 = join(&mut c, 2);
    let stop = Arc::new(AtomicBool::new(false));
    let beat1 = heartbeater(addrs(&cfg), 1, i1, Duration::from_millis(25), stop.clone());
    let beat2 = heartbeater(addrs(&cfg), 2, i2, Duration::from_millis(25), stop.clone());
    // Node 2 reports it cannot reach node 1 (wait until the leader's detector is armed).
    let state = wait_for(Duration::from_secs(10), "arbitration", || {
        let _ = c.heartbeat(2, i2, 0, &[1]);
        let s = c.get_state().unwrap().state;
        (s.state_of(2) == NodeState::Down).then_some(s)
    });
    assert_eq!(state.state_of(1), NodeState::Started, "the master is kept");
    stop.store(true, Ordering::SeqCst);
    beat1.join().unwrap();
    beat2.join().unwrap();
}

#[test]
fn three_mgmds_elect_replicate_and_fail_over() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&free_ports(3), 2, 2, 100, 600);
    let mut mgmds: Vec<Option<MgmdHandle>> = (0..3).map(|i| Some(start(&cfg, 65 + i, dir.path()))).collect();
    let mut c = MgmClient::new(addrs(&cfg));
    let leader = wait_for(Duration::from_secs(15), "a leader", || c.status().ok().and_then(|s| s.leader));
    c.propose(Command::SetDurableEpoch { epoch: 5 }).unwrap();
    // Every mgmd applies it (a follower answers Status from its own state).
    for a in addrs(&cfg) {
        let mut one = MgmClient::new(vec![a.clone()]);
        wait_for(Duration::from_secs(5), "replication", || {
            (one.status().ok()?.state.state.durable_epoch == 5).then_some(())
        });
    }

    // Stop the leader: a new one is elected and the client follows it.
    let old = mgmds[(leader - 65) as usize].take().unwrap();
    old.stop().unwrap();
    let t0 = Instant::now();
    let applied = wait_for(Duration::from_secs(15), "a proposal after failover", || {
        c.propose(Command::SetDurableEpoch { epoch: 6 }).ok()
    });
    assert!(applied.version > 0);
    assert!(t0.elapsed() < Duration::from_secs(10), "failover took {:?}", t0.elapsed());
    let status = c.status().unwrap();
    assert!(status.leader.is_some_and(|l| l != leader), "{status:?}");
    assert_eq!(c.get_state().unwrap().state.durable_epoch, 6);
}

#[test]
fn state_survives_a_restart_of_all_mgmds() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&free_ports(3), 2, 2, 100, 600);
    let mgmds: Vec<MgmdHandle> = (0..3).map(|i| start(&cfg, 65 + i, dir.path())).collect();
    let mut c = MgmClient::new(addrs(&cfg));
    let inc = wait_for(Duration::from_secs(15), "a leader", || c.register(2, 0, 0).ok());
    c.propose(Command::SetCatalog { version: 7, bytes: vec![7; 1000] }).unwrap();
    c.propose(Command::SetDurableEpoch { epoch: 99 }).unwrap();
    let before = c.get_state().unwrap();
    for m in mgmds {
        m.stop().unwrap();
    }
    let _mgmds: Vec<MgmdHandle> = (0..3).map(|i| start(&cfg, 65 + i, dir.path())).collect();
    let after = wait_for(Duration::from_secs(15), "the restarted cluster", || c.get_state().ok());
    assert_eq!(after.state.durable_epoch, 99);
    assert_eq!(after.catalog_version, 7);
    assert_eq!(after.state.nodes, before.state.nodes);
    assert_eq!(c.get_catalog().unwrap(), (7, vec![7; 1000]));
    assert_eq!(c.register(2, 0, 0).unwrap(), inc + 1);
}

#[test]
fn a_single_mgmd_restarts_from_its_snapshot_and_log() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&free_ports(1), 2, 2, 100, 600);
    let mgmd = start(&cfg, 65, dir.path());
    let mut c = MgmClient::new(addrs(&cfg));
    // More entries than the snapshot interval (1000): a snapshot is built and the log purged.
    for epoch in 1..=1100 {
        c.propose(Command::SetDurableEpoch { epoch }).unwrap();
    }
    mgmd.stop().unwrap();
    assert!(dir.path().join("mgmd-65/snapshot").exists());
    let _mgmd = start(&cfg, 65, dir.path());
    let after = wait_for(Duration::from_secs(15), "the restarted mgmd", || c.get_state().ok());
    assert_eq!(after.state.durable_epoch, 1100);
}

/// Management nodes with a cluster secret: Raft traffic between them proves it (a leader is
/// elected), clients without it or with another are refused at once with "access denied", and
/// without a secret an mgmd refuses to listen beyond loopback.
#[test]
fn the_cluster_secret_is_required_of_every_connection() {
    use tern_types::secret::ClusterSecret;
    let secret = ClusterSecret::new(b"management secret, 32 bytes long").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&free_ports(3), 2, 2, 100, 600);
    let _mgmds: Vec<MgmdHandle> = (0..3)
        .map(|i| {
            let id = 65 + i;
            let data_dir = dir.path().join(format!("mgmd-{id}"));
            let opts =
                MgmdOptions { config: cfg.clone(), node_id: id, data_dir, bind: None, secret: Some(secret.clone()) };
            spawn_mgmd(opts).unwrap()
        })
        .collect();
    let mut c = MgmClient::new(addrs(&cfg)).with_secret(Some(&secret));
    wait_for(Duration::from_secs(15), "a leader", || c.status().ok().and_then(|s| s.leader));
    c.propose(Command::SetDurableEpoch { epoch: 5 }).unwrap();
    let other = ClusterSecret::new(b"not the management secret at all").unwrap();
    for (mut client, why) in [
        (MgmClient::new(addrs(&cfg)), "no cluster secret"),
        (MgmClient::new(addrs(&cfg)).with_secret(Some(&other)), "a wrong cluster secret"),
    ] {
        let t0 = Instant::now();
        match client.status() {
            Err(ControlError::Protocol(e)) => assert!(e.contains("access denied") && e.contains(why), "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "refused at once, not retried");
    }
    let opts = MgmdOptions {
        config: cfg.clone(),
        node_id: 65,
        data_dir: dir.path().join("public"),
        bind: Some("0.0.0.0:0".into()),
        secret: None,
    };
    let e = spawn_mgmd(opts).err().expect("refused").to_string();
    assert!(e.contains("without a cluster secret") && e.contains("TERN_CLUSTER_SECRET_FILE"), "{e}");
}

#[test]
fn a_foreign_data_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&free_ports(1), 2, 2, 100, 600);
    let data = dir.path().join("mgmd-65");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("sysfile"), b"a data node's file").unwrap();
    let opts = MgmdOptions { config: cfg, node_id: 65, data_dir: data, bind: None, secret: None };
    let e = spawn_mgmd(opts).err().expect("must fail").to_string();
    assert!(e.contains("not a Tern management node directory"), "{e}");
}

/// Sends raw bytes on a fresh connection (optionally after a good Hello) and returns the error
/// text the mgmd answers; checks that it then closes the connection.
fn raw_error(addr: &str, hello: bool, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    if hello {
        let h = Request::Hello {
            magic: proto::PROTOCOL_MAGIC,
            version: proto::PROTOCOL_VERSION,
            role: Role::Admin,
            proof: None,
        };
        s.write_all(&proto::encode(&h)).unwrap();
        let reply = proto::read_frame_sync(&mut s).unwrap();
        assert!(matches!(proto::decode_reply(&reply).unwrap(), Reply::Hello { mgmd: 65, .. }));
    }
    s.write_all(bytes).unwrap();
    let reply = proto::read_frame_sync(&mut s).unwrap();
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0, "connection closed after the error");
    match proto::decode_reply(&reply).unwrap() {
        Reply::Error(text) => text,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn bad_input_gets_an_error_and_the_mgmd_stays_up() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&free_ports(1), 2, 2, 100, 600);
    let _mgmd = start(&cfg, 65, dir.path());
    let addr = &addrs(&cfg)[0];
    let e = raw_error(addr, false, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(e.contains("limit"), "{e}");
    let e = raw_error(addr, true, &u32::MAX.to_le_bytes());
    assert!(e.contains("4294967295") && e.contains("limit"), "{e}");
    let e = raw_error(addr, true, &[1, 0, 0, 0, 200]);
    assert!(e.contains("unknown request kind 200"), "{e}");
    let e = raw_error(addr, true, &[3, 0, 0, 0, 1, 0xff, 0xff]);
    assert!(e.contains("malformed"), "{e}");
    let e = raw_error(addr, false, &proto::encode(&Request::GetState));
    assert!(e.contains("first request must be Hello"), "{e}");
    let bad_hello = Request::Hello { magic: 1, version: proto::PROTOCOL_VERSION, role: Role::Admin, proof: None };
    assert!(raw_error(addr, false, &proto::encode(&bad_hello)).contains("magic"));
    let e = raw_error(addr, true, &proto::encode(&Request::RaftVote(vec![1, 2, 3])));
    assert!(e.contains("role Peer"), "{e}");
    // A well-behaved client is still served.
    let mut c = MgmClient::new(addrs(&cfg));
    assert_eq!(c.get_state().unwrap().state.version, 1);
}

#[test]
fn a_follower_that_missed_a_snapshot_interval_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&free_ports(3), 2, 2, 100, 600);
    let mut mgmds: Vec<Option<MgmdHandle>> = (0..3).map(|i| Some(start(&cfg, 65 + i, dir.path()))).collect();
    let mut c = MgmClient::new(addrs(&cfg));
    let leader = wait_for(Duration::from_secs(15), "a leader", || {
        c.propose(Command::SetDurableEpoch { epoch: 1 }).ok()?;
        c.status().ok()?.leader
    });
    let follower = (65..68).find(|&id| id != leader).unwrap();
    mgmds[(follower - 65) as usize].take().unwrap().stop().unwrap();
    // Past the snapshot interval: the leader snapshots and purges its log.
    for epoch in 2..=1200 {
        c.propose(Command::SetDurableEpoch { epoch }).unwrap();
    }
    mgmds[(follower - 65) as usize] = Some(start(&cfg, follower as NodeId, dir.path()));
    let addr = cfg.mgmds.iter().find(|m| m.id as u64 == follower).map(|m| format!("{}:{}", m.host, m.port)).unwrap();
    let mut one = MgmClient::new(vec![addr]);
    wait_for(Duration::from_secs(20), "the follower to catch up", || {
        (one.status().ok()?.state.state.durable_epoch == 1200).then_some(())
    });
}
