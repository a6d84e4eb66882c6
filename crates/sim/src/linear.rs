//! Linearizability of single-key histories, checked after every simulated cluster life.
//!
//! The order of a key's versions is known: writes to one key take their row lock in turn, so
//! their commit points (the first `Commit` a replica handles) come in the order the versions
//! were installed; the simulator's oracle records them. What is left to check are the reads
//! (committed reads of read-only transactions, answered by a primary) against real time, with
//! the simulator's clock as the clients see it:
//! * no stale read: a read invoked after the commit of a later version was acknowledged to its
//!   client must not return an earlier version;
//! * monotonic reads: a read invoked after another read of the same key was answered must not
//!   return an earlier version than that one.
//!
//! With the version order fixed these are what a linearization needs of each read: its point
//! lies after its version's write and before the next version's write, within its own interval
//! (Herlihy and Wing 1990; Gibbons and Korach 1997 on checking with a known write order).
//! Reads of versions the oracle does not know (a commit lost with its nodes) are skipped: the
//! committed-read check at read time covers them.

use std::collections::{BTreeMap, HashMap};

/// Each key's versions in commit order: the stamp written (`None`: deleted).
pub type Versions = BTreeMap<i64, Vec<Option<i64>>>;

/// A read of `key` that returned the version with `stamp`, invoked and answered at these times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    pub key: i64,
    pub stamp: i64,
    pub invoked: u64,
    pub answered: u64,
}

/// Checks `reads` against each key's versions in commit order (`None`: deleted) and the times
/// their commits were acknowledged (`acks`, by stamp). Returns how many reads were checked.
pub fn check(
    versions: &BTreeMap<i64, Vec<Option<i64>>>,
    acks: &HashMap<i64, u64>,
    reads: &[Read],
) -> Result<usize, String> {
    let mut by_key: BTreeMap<i64, Vec<(Read, usize)>> = BTreeMap::new();
    let mut checked = 0;
    for r in reads {
        let Some(vs) = versions.get(&r.key) else { continue };
        let Some(pos) = vs.iter().rposition(|v| *v == Some(r.stamp)) else { continue };
        by_key.entry(r.key).or_default().push((*r, pos));
    }
    for (key, rs) in &by_key {
        let vs = &versions[key];
        // Earliest acknowledgement of any version after each position.
        let mut ack_after = vec![u64::MAX; vs.len() + 1];
        for j in (0..vs.len()).rev() {
            let ack = vs[j].and_then(|s| acks.get(&s).copied()).unwrap_or(u64::MAX);
            ack_after[j] = ack_after[j + 1].min(ack);
        }
        for &(r, pos) in rs {
            checked += 1;
            if ack_after[pos + 1] < r.invoked {
                let (j, s) = (pos + 1..vs.len())
                    .find_map(|j| vs[j].filter(|s| acks.get(s).is_some_and(|&a| a < r.invoked)).map(|s| (j, s)))
                    .expect("an acknowledged later version");
                return Err(format!(
                    "stale read of key {key}: {r:?} returned version {pos} (stamp {}), but version {j} (stamp {s}) \
                     was acknowledged at t={} before the read began",
                    r.stamp, acks[&s]
                ));
            }
        }
        for &(r2, pos2) in rs {
            if let Some(&(r1, pos1)) = rs.iter().find(|(r1, pos1)| r1.answered < r2.invoked && *pos1 > pos2) {
                return Err(format!(
                    "non-monotonic reads of key {key}: {r1:?} returned version {pos1}, then {r2:?}, which began \
                     after it was answered, returned the older version {pos2}"
                ));
            }
        }
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(key: i64, stamp: i64, invoked: u64, answered: u64) -> Read {
        Read { key, stamp, invoked, answered }
    }

    fn history() -> (Versions, HashMap<i64, u64>) {
        // Key 1: versions 10, 20, deleted, 30; acknowledged at 5, 15, -, 40.
        let versions = [(1, vec![Some(10), Some(20), None, Some(30)])].into_iter().collect();
        let acks = [(10, 5), (20, 15), (30, 40)].into_iter().collect();
        (versions, acks)
    }

    #[test]
    fn a_linearizable_history_passes() {
        let (v, a) = history();
        let reads =
            [read(1, 10, 0, 3), read(1, 10, 6, 14), read(1, 20, 10, 16), read(1, 20, 16, 39), read(1, 30, 39, 41)];
        assert_eq!(check(&v, &a, &reads), Ok(5));
        // Unknown stamps and keys are skipped.
        assert_eq!(check(&v, &a, &[read(1, 99, 0, 1), read(7, 10, 0, 1)]), Ok(0));
    }

    #[test]
    fn a_stale_read_is_found() {
        let (v, a) = history();
        let e = check(&v, &a, &[read(1, 10, 16, 17)]).unwrap_err();
        assert!(e.contains("stale read of key 1") && e.contains("stamp 20"), "{e}");
        // Concurrent with the acknowledgement: not stale.
        assert_eq!(check(&v, &a, &[read(1, 10, 15, 17)]), Ok(1));
    }

    #[test]
    fn reads_going_back_are_found() {
        let (v, a) = history();
        // Both overlap the write of 20 (acknowledged at 15), but the second began after the first
        // was answered.
        let e = check(&v, &a, &[read(1, 20, 8, 10), read(1, 10, 11, 12)]).unwrap_err();
        assert!(e.contains("non-monotonic"), "{e}");
        // Overlapping reads may disagree.
        assert_eq!(check(&v, &a, &[read(1, 20, 8, 12), read(1, 10, 11, 13)]), Ok(2));
    }
}
