//! Redo damage: a torn tail (bytes past what was made durable) ends the log quietly; damage inside
//! the durable part stops recovery with a message naming the file and offset.

use tern_kernel::io::{Storage, list_segments};
use tern_kernel::recovery::recover;
use tern_kernel::sysfile::{SYSFILE_NAME, Sysfile};
use tern_sim::{Sim, SimConfig};
use tern_store::MemoryBudget;

fn disk() -> tern_sim::SimDisk {
    let cfg = SimConfig { duration_ms: 1500, crash_every_ms: u64::MAX / 4, ..SimConfig::default() };
    Sim::run_and_take_disk(7, cfg)
}

fn one_node() -> tern_types::cluster::ClusterState {
    (*tern_kernel::NodeConfig::new(1, 3, 1 << 30).cluster).clone()
}

fn budget() -> MemoryBudget {
    MemoryBudget::new(1 << 30)
}

#[test]
fn torn_tail_is_the_end_of_the_log() {
    let d = disk();
    let clean = recover(&d, 3, &one_node(), None, &budget()).expect("clean recovery");
    let mut torn = d.clone();
    for ldm in 0..3 {
        if let Some(last) = list_segments(&torn, ldm).unwrap().into_values().last() {
            torn.append_garbage(&last, b"TRDO\x10\x00\x00\x00garbage-of-a-torn-write");
        }
    }
    let r = recover(&torn, 3, &one_node(), None, &budget()).expect("a torn tail is not an error");
    assert_eq!(r.rows, clean.rows);
    assert_eq!(r.durable_epoch, clean.durable_epoch);
}

/// A redo position that recovery must replay: inside [usable checkpoint start, synced LSN).
fn replayed_position(d: &tern_sim::SimDisk) -> (String, usize) {
    let sys = Sysfile::decode(&d.read(SYSFILE_NAME).unwrap().unwrap()).unwrap();
    for ldm in 0..sys.synced_lsn.len() as u16 {
        let synced = sys.synced_lsn[ldm as usize];
        let mut cks: Vec<String> =
            d.list(&format!("ldm-{ldm}")).unwrap().into_iter().filter(|n| n.contains("ckpt-")).collect();
        cks.sort();
        let start = cks
            .iter()
            .rev()
            .map(|n| tern_kernel::checkpoint::decode(&d.read(n).unwrap().unwrap()).unwrap().header)
            .find(|h| h.max_epoch <= sys.durable_epoch)
            .expect("a usable checkpoint")
            .start_lsn;
        if start + 16 < synced {
            let lsn = start + 5;
            let (seg_start, name) = list_segments(d, ldm).unwrap().into_iter().rev().find(|(s, _)| *s <= lsn).unwrap();
            return (name, (lsn - seg_start) as usize);
        }
    }
    panic!("the simulation left no redo to replay; lengthen it");
}

#[test]
fn damage_inside_the_durable_log_names_file_and_offset() {
    let mut d = disk();
    let (seg, off) = replayed_position(&d);
    d.damage(&seg, off);
    let e = recover(&d, 3, &one_node(), None, &budget()).err().expect("damage in the durable log must stop recovery");
    assert!(e.contains(&seg), "message names the file: {e}");
    assert!(e.contains(&format!("offset {}", off - 5)), "message names the record's offset: {e}");
}

#[test]
fn damaged_checkpoint_or_sysfile_is_reported() {
    let d = disk();
    let mut bad = d.clone();
    bad.damage(SYSFILE_NAME, 3);
    let e = recover(&bad, 3, &one_node(), None, &budget()).err().expect("corrupt sysfile refused");
    assert!(e.contains("sysfile"), "{e}");
    let mut bad = d.clone();
    bad.damage("catalog", 12);
    let e = recover(&bad, 3, &one_node(), None, &budget()).err().expect("corrupt catalog refused");
    assert!(e.contains("catalog"), "{e}");
    let mut bad = d.clone();
    let ck = bad.file_names().into_iter().find(|n| n.contains("ckpt-")).unwrap();
    bad.damage(&ck, 10);
    let e = recover(&bad, 3, &one_node(), None, &budget()).err().expect("corrupt checkpoint refused");
    assert!(e.contains(&ck), "{e}");
}
