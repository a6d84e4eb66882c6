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

fn budget() -> MemoryBudget {
    MemoryBudget::new(1 << 30)
}

#[test]
fn torn_tail_is_the_end_of_the_log() {
    let d = disk();
    let clean = recover(&d, 3, None, &budget()).expect("clean recovery");
    let mut torn = d.clone();
    for ldm in 0..3 {
        if let Some(last) = list_segments(&torn, ldm).unwrap().into_values().last() {
            torn.append_garbage(&last, b"TRDO\x10\x00\x00\x00garbage-of-a-torn-write");
        }
    }
    let r = recover(&torn, 3, None, &budget()).expect("a torn tail is not an error");
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
    let e = recover(&d, 3, None, &budget()).err().expect("damage in the durable log must stop recovery");
    assert!(e.contains(&seg), "message names the file: {e}");
    assert!(e.contains(&format!("offset {}", off - 5)), "message names the record's offset: {e}");
}

#[test]
fn damaged_checkpoint_or_sysfile_is_reported() {
    let d = disk();
    let mut bad = d.clone();
    bad.damage(SYSFILE_NAME, 3);
    let e = recover(&bad, 3, None, &budget()).err().expect("corrupt sysfile refused");
    assert!(e.contains("sysfile"), "{e}");
    let mut bad = d.clone();
    bad.damage("catalog", 12);
    let e = recover(&bad, 3, None, &budget()).err().expect("corrupt catalog refused");
    assert!(e.contains("catalog"), "{e}");
    let mut bad = d.clone();
    let ck = bad.file_names().into_iter().find(|n| n.contains("ckpt-")).unwrap();
    bad.damage(&ck, 10);
    let e = recover(&bad, 3, None, &budget()).err().expect("corrupt checkpoint refused");
    assert!(e.contains(&ck), "{e}");
}

/// A node's epoch comes from the epoch marks of its redo logs past what its system file names:
/// an epoch every ldm marked is recovered (a durable commit needs that one sync per replica, the
/// system file is saved later), one that some ldm did not mark is not.
#[test]
fn an_epoch_marked_in_every_redo_log_is_recovered_without_a_system_file_save() {
    use tern_kernel::recovery::node_epoch;
    use tern_kernel::redo::{RedoOpRef, append_commit, append_epoch_mark};
    let d = disk();
    let clean = recover(&d, 3, None, &budget()).expect("clean recovery");
    assert_eq!(node_epoch(&d).unwrap(), clean.durable_epoch);
    // A key the clean recovery holds, and an epoch past every record in the logs.
    let p = &clean.partitions.iter().find(|p| !p.1.is_empty()).expect("rows").1;
    let mut key = None;
    p.scan(0, |_, row| {
        key = Some(p.layout().key_of(row).to_vec());
        false
    });
    let (table, partition, key) = (p.table, p.partition, key.expect("a row"));
    let mut newest = 0;
    for ldm in 0..3u16 {
        tern_kernel::io::read_redo_tail(&d, ldm, 0, |_, payload| {
            if let Ok(tern_kernel::redo::Record::Commit(c)) = tern_kernel::redo::decode(payload) {
                newest = newest.max(c.epoch);
            }
            Ok(())
        })
        .unwrap();
    }
    let epoch = newest.max(clean.durable_epoch) + 1;
    let with_marks = |marked: &[u16]| {
        let mut m = d.clone();
        for ldm in 0..3u16 {
            let last = list_segments(&m, ldm).unwrap().into_values().last().expect("a segment");
            let mut bytes = Vec::new();
            if ldm == 0 {
                append_commit(&mut bytes, epoch, 1, 0, 1 << 40, &[RedoOpRef::Delete { table, partition, key: &key }]);
            }
            if marked.contains(&ldm) {
                append_epoch_mark(&mut bytes, epoch);
            }
            m.append_garbage(&last, &bytes);
        }
        m
    };
    let has_key = |r: &tern_kernel::recovery::Recovered| {
        r.partitions.iter().any(|(_, q)| q.table == table && q.partition == partition && q.lookup(&key).is_some())
    };
    let all = with_marks(&[0, 1, 2]);
    assert_eq!(node_epoch(&all).unwrap(), epoch);
    let r = recover(&all, 3, None, &budget()).expect("recovery");
    assert_eq!(r.durable_epoch, epoch);
    assert!(!has_key(&r), "the delete of the marked epoch is recovered");
    // A system restart's cut below it still wins.
    let r = recover(&all, 3, Some(clean.durable_epoch), &budget()).expect("recovery");
    assert_eq!(r.durable_epoch, clean.durable_epoch);
    assert!(has_key(&r));
    let some = with_marks(&[0, 2]);
    assert!(node_epoch(&some).unwrap() < epoch, "ldm 1 did not mark it: not on this node's disk");
    let r = recover(&some, 3, None, &budget()).expect("recovery");
    assert!(r.durable_epoch < epoch);
    assert!(has_key(&r), "a commit of an epoch not marked everywhere is not recovered");
}
