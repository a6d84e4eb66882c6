//! Runs the deterministic simulation over many seeds. A failure prints the seed; rerun one seed
//! with `TERN_SEED=<seed> cargo test -p tern-sim`.

use tern_sim::{Sim, SimConfig};

fn seeds() -> Vec<u64> {
    match std::env::var("TERN_SEED") {
        Ok(s) => vec![s.parse().expect("TERN_SEED must be a u64")],
        Err(_) => {
            // `TERN_SIM_SEEDS=N` runs N seeds per test instead of the fixed 24 (soak runs).
            let n: u64 = std::env::var("TERN_SIM_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(24);
            let base = tern_testkit::seed();
            (0..n).map(|i| base.wrapping_add(i * 7919)).collect()
        }
    }
}

/// How many seeds a test runs: its default, or all of them in a soak run (`TERN_SIM_SEEDS`).
fn soak_or(default: usize) -> usize {
    if std::env::var_os("TERN_SIM_SEEDS").is_some() { usize::MAX } else { default }
}

#[test]
fn random_transactions_with_crashes_recover_consistently() {
    let mut total = tern_sim::SimStats::default();
    let seeds = seeds();
    let n = seeds.len() as u64;
    for seed in seeds {
        println!("seed {seed}");
        let s = Sim::run(seed, SimConfig::default());
        total.add(&s);
    }
    println!("{total:?}");
    // The workload must actually exercise the protocol, or the test proves nothing.
    assert!(total.commits > 50 * n, "too few commits: {total:?}");
    assert!(total.linearizable_reads > 10 * n, "too few reads checked for linearizability: {total:?}");
    assert!(total.crashes as u64 >= 2 * n, "too few crashes: {total:?}");
    assert!(total.verified_rows > 10 * n, "too little data verified: {total:?}");
    assert!(total.backups_checked as u64 >= n, "too few backups checked against the oracle: {total:?}");
}

#[test]
fn same_seed_same_run() {
    let a = Sim::run(12345, SimConfig { duration_ms: 3000, ..SimConfig::default() });
    let b = Sim::run(12345, SimConfig { duration_ms: 3000, ..SimConfig::default() });
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}

/// Two-replica clusters: every transaction's writes reach both replicas of each partition through
/// the chain (primary, then backup), commits run backup-first, epochs are a cut across nodes, and
/// after every whole-cluster crash all nodes recover to the same epoch with replicas agreeing.
#[test]
fn replicated_clusters_survive_whole_cluster_crashes_consistently() {
    let mut total = tern_sim::SimStats::default();
    let seeds = seeds();
    let seeds: Vec<u64> = seeds.into_iter().take(soak_or(8)).collect();
    let n = seeds.len() as u64;
    for seed in seeds {
        let (data_nodes, replicas) = if seed % 2 == 0 { (2, 2) } else { (4, 2) };
        println!("seed {seed} ({data_nodes} data nodes, {replicas} replicas)");
        let cfg = SimConfig { data_nodes, replicas, ldm_count: 2, duration_ms: 5_000, ..SimConfig::default() };
        let s = Sim::run(seed, cfg);
        total.add(&s);
    }
    println!("{total:?}");
    assert!(total.commits > 50 * n, "too few commits: {total:?}");
    assert!(total.crashes as u64 >= 2 * n, "too few crashes: {total:?}");
    assert!(total.verified_rows > 10 * n, "too little data verified: {total:?}");
    assert!(total.backups_checked as u64 >= n, "too few backups checked against the oracle: {total:?}");
}

/// Data nodes fail one at a time (never the last live member of a node group) while clients
/// run: transactions past their commit point finish on the surviving replicas, the others abort,
/// the master's tc takes over what a failed coordinator left, a failed master hands the epoch
/// protocol to the next node, and the live state equals exactly the committed transactions.
#[test]
fn node_failures_lose_no_committed_transaction() {
    let mut total = tern_sim::SimStats::default();
    let seeds = seeds();
    let n = seeds.len() as u64;
    for seed in seeds {
        let data_nodes = if seed % 2 == 0 { 2 } else { 4 };
        println!("seed {seed} ({data_nodes} data nodes, 2 replicas, node failures)");
        let cfg = SimConfig {
            data_nodes,
            replicas: 2,
            ldm_count: 2,
            clients: 8,
            duration_ms: 6_000,
            crash_every_ms: 3_000,
            fail_every_ms: 400,
            ..SimConfig::default()
        };
        let s = Sim::run(seed, cfg);
        total.add(&s);
    }
    println!("{total:?}");
    assert!(total.commits > 50 * n, "too few commits: {total:?}");
    assert!(total.node_failures as u64 >= n, "too few node failures: {total:?}");
    assert!(total.schema_changes >= 5 * n, "too few schema changes: {total:?}");
    // The killed nodes were declared failed by the detector, from their missing heartbeats.
    assert!(total.declared_failed as u64 >= n, "too few nodes declared failed: {total:?}");
}

/// One-round commits (single-chain autocommit writes: the last replica commits on staging and
/// its `Commit` to the primary is its acknowledgement) and READ_BACKUP reads, under node
/// failures, restarts, partitions and whole-cluster crashes: a read at a backup never returns a
/// one-round commit before its primary committed it (a failed primary could still undo it), a
/// survivor settles the commits of a failed replica (`Resolve`), and nothing acknowledged is lost.
#[test]
fn one_round_commits_and_backup_reads_survive_failures() {
    let mut total = tern_sim::SimStats::default();
    let seeds = seeds();
    let n = seeds.len() as u64;
    for seed in seeds {
        let data_nodes = if seed % 2 == 0 { 2 } else { 4 };
        println!("seed {seed} ({data_nodes} data nodes, 2 replicas, READ_BACKUP, no unique index)");
        let partitions = seed % 3 == 0;
        let cfg = SimConfig {
            // Modelled membership: with the real membership threads and failure detector this
            // configuration still finds failures under investigation (issue 36's notes).
            membership: false,
            data_nodes,
            replicas: 2,
            ldm_count: 2,
            clients: 8,
            keys: 24,
            duration_ms: 6_000,
            crash_every_ms: 3_000,
            // Partitions or kills, not both: with a node group's other node already down, the
            // control plane fails neither side of a cut (as in the partition test).
            fail_every_ms: if partitions { 0 } else { 500 },
            partition_every_ms: if partitions { 1_500 } else { 0 },
            restart_after_ms: 400,
            read_backup: true,
            unique_index: false,
            ..SimConfig::default()
        };
        let s = Sim::run(seed, cfg);
        total.add(&s);
    }
    println!("{total:?}");
    assert!(total.commits > 50 * n, "too few commits: {total:?}");
    assert!(total.fast_commits > 20 * n, "too few one-round commits: {total:?}");
    assert!(total.fast_offs > 0, "no one-round commit fell back after a lock wait: {total:?}");
    assert!(total.resolves > 0, "no one-round commit was settled by a survivor: {total:?}");
    assert!(total.node_failures as u64 >= n, "too few node failures: {total:?}");
}

/// Online scale-out: a node group that starts empty is put in service and every table is
/// reorganised over it (partitions move there: copy, switch, the old copies dropped), then it is
/// taken out again and they move back, while clients write and read, nodes of the source and
/// target groups fail and restart, links are cut and the whole cluster crashes. Nothing
/// acknowledged may be lost, replicas agree, scans see every row once, and the backups' rows
/// with their logs match the oracle.
#[test]
fn partitions_move_to_an_added_node_group_and_back_under_failures() {
    let mut total = tern_sim::SimStats::default();
    let seeds = seeds();
    let n = seeds.len() as u64;
    for seed in seeds {
        let partitions = seed % 3 == 0;
        let read_backup = seed % 2 == 0;
        println!("seed {seed} (4 data nodes in 2 groups, the second added; read_backup {read_backup})");
        let cfg = SimConfig {
            // Modelled membership: with the real membership threads and failure detector this
            // configuration still finds failures under investigation (issue 36's notes).
            membership: false,
            data_nodes: 4,
            replicas: 2,
            ldm_count: 2,
            clients: 8,
            keys: 32,
            duration_ms: 9_000,
            crash_every_ms: 4_000,
            fail_every_ms: if partitions { 0 } else { 700 },
            partition_every_ms: if partitions { 1_500 } else { 0 },
            restart_after_ms: 400,
            read_backup,
            unique_index: !read_backup,
            scale_out: true,
            ..SimConfig::default()
        };
        let s = Sim::run(seed, cfg);
        total.add(&s);
    }
    println!("{total:?}");
    assert!(total.commits > 50 * n, "too few commits: {total:?}");
    assert!(total.moves_begun >= 2 * n, "too few moves: {total:?}");
    assert!(total.moves_done >= n, "too few moves finished: {total:?}");
    assert!(total.node_failures as u64 >= n / 2, "too few node failures: {total:?}");
}

/// Backups while partitions move: a node group is added and taken out again while clients
/// write, with rare failures, so that change logs run across moves that begin, switch and end
/// (each moving partition logged by its source and, a generation up, by its target). Each
/// backup's rows with its log applied must be the committed state at its end epoch.
#[test]
fn backups_taken_while_partitions_move_match_the_committed_state() {
    let mut total = tern_sim::SimStats::default();
    let seeds = seeds();
    let seeds: Vec<u64> = seeds.into_iter().take(soak_or(12)).collect();
    let n = seeds.len() as u64;
    for seed in seeds {
        println!("seed {seed} (4 data nodes in 2 groups, the second added; backups across moves)");
        let cfg = SimConfig {
            // Modelled membership: with the real membership threads and failure detector this
            // configuration still finds failures under investigation (issue 36's notes).
            membership: false,
            data_nodes: 4,
            replicas: 2,
            ldm_count: 2,
            clients: 8,
            keys: 48,
            duration_ms: 9_000,
            crash_every_ms: 60_000, // none within the run
            fail_every_ms: if seed % 4 == 0 { 3_000 } else { 0 },
            restart_after_ms: 400,
            read_backup: seed % 2 == 0,
            scale_out: true,
            backup_every_ms: 50, // one after the other
            ..SimConfig::default()
        };
        let s = Sim::run(seed, cfg);
        total.add(&s);
    }
    println!("{total:?}");
    assert!(total.moves_done >= n, "too few moves finished: {total:?}");
    assert!(total.backups_across_moves as u64 >= n, "too few backups across moves: {total:?}");
}

/// The real start-up order, with nodes starting at different times: after every whole-cluster
/// crash the nodes recover from their disks one after another (their blocks already hear the
/// others meanwhile) and node failures keep coming, the master among them. The master counts
/// only the nodes that told it they started (no epoch save reaches a node still starting: the
/// simulator fails the run if one does), and the new master after a failure learns them again.
#[test]
fn staggered_restarts_with_master_failures_keep_the_epoch_protocol_to_started_nodes() {
    let mut total = tern_sim::SimStats::default();
    let seeds = seeds();
    let seeds: Vec<u64> = seeds.into_iter().take(soak_or(12)).collect();
    let n = seeds.len() as u64;
    for seed in seeds {
        println!("seed {seed} (4 data nodes, 2 replicas, staggered starts, failures, restarts)");
        let cfg = SimConfig {
            // Modelled membership: with the real membership threads and failure detector this
            // configuration still finds failures under investigation (issue 36's notes).
            membership: false,
            data_nodes: 4,
            replicas: 2,
            ldm_count: 2,
            clients: 6,
            duration_ms: 8_000,
            crash_every_ms: 1_500,
            fail_every_ms: 3_000,
            restart_after_ms: 200,
            boot_spread_ms: 800,
            ..SimConfig::default()
        };
        let s = Sim::run(seed, cfg);
        total.add(&s);
    }
    println!("{total:?}");
    assert!(total.commits > 20 * n, "too few commits: {total:?}");
    assert!(total.crashes as u64 >= 2 * n, "too few crashes: {total:?}");
    assert!(total.node_failures as u64 >= n, "too few node failures: {total:?}");
}

/// Failed nodes restart while clients run: each fetches the catalog, joins the write chains,
/// copies its partitions from the primaries, checkpoints and becomes a full replica (and a
/// primary again); replicas agree and the live state equals the committed transactions.
#[test]
fn failed_nodes_restart_copy_and_rejoin() {
    let mut total = tern_sim::SimStats::default();
    let seeds = seeds();
    let mut seeds: Vec<u64> = seeds.into_iter().take(soak_or(16)).collect();
    if std::env::var_os("TERN_SEED").is_none() {
        // Found by CI: a write batch that waited for a lock while a restarting node joined the
        // chains resumed on its old chain after the copy had sent the row it then wrote.
        seeds.push(1_796_418_077_609_264_360);
    }
    let n = seeds.len() as u64;
    for seed in seeds {
        let data_nodes = if seed % 2 == 0 { 2 } else { 4 };
        println!("seed {seed} ({data_nodes} data nodes, 2 replicas, failures and restarts)");
        let cfg = SimConfig {
            // Modelled membership: with the real membership threads and failure detector this
            // configuration still finds failures under investigation (issue 36's notes).
            membership: false,
            data_nodes,
            replicas: 2,
            ldm_count: 2,
            clients: 6,
            duration_ms: 6_000,
            crash_every_ms: 4_000,
            fail_every_ms: 500,
            restart_after_ms: 300,
            ..SimConfig::default()
        };
        let s = Sim::run(seed, cfg);
        total.add(&s);
    }
    println!("{total:?}");
    assert!(total.commits > 50 * n, "too few commits: {total:?}");
    assert!(total.node_restarts as u64 >= n, "too few completed node restarts: {total:?}");
}

/// Network partitions between data nodes, with every node's clock at its own rate and offset:
/// the links between two nodes are cut (what was in flight is lost), their heartbeats stop, one
/// suspects the other, the modelled control plane fails one of the two (NDB's arbitration), the
/// survivors take over its transactions, it restarts and copies back in — and the live state
/// still equals exactly the committed transactions.
#[test]
fn partitions_between_data_nodes_fail_one_side_and_lose_nothing() {
    let mut total = tern_sim::SimStats::default();
    let seeds = seeds();
    let seeds: Vec<u64> = seeds.into_iter().take(soak_or(12)).collect();
    let n = seeds.len() as u64;
    for seed in seeds {
        let data_nodes = if seed % 2 == 0 { 2 } else { 4 };
        println!("seed {seed} ({data_nodes} data nodes, 2 replicas, partitions, clock skew)");
        let cfg = SimConfig {
            // Modelled membership: with the real membership threads and failure detector this
            // configuration still finds failures under investigation (issue 36's notes).
            membership: false,
            data_nodes,
            replicas: 2,
            ldm_count: 2,
            clients: 6,
            duration_ms: 8_000,
            crash_every_ms: 6_000,
            partition_every_ms: 1_500,
            restart_after_ms: 500,
            clock_skew: true,
            ..SimConfig::default()
        };
        let s = Sim::run(seed, cfg);
        total.add(&s);
    }
    println!("{total:?}");
    assert!(total.commits > 50 * n, "too few commits: {total:?}");
    assert!(total.partitions as u64 >= n, "too few partitions: {total:?}");
    assert!(total.suspicion_failures as u64 >= n, "partitions must end in a node failure: {total:?}");
    assert!(total.node_restarts as u64 >= n / 2, "too few completed node restarts: {total:?}");
}
