//! The engine's memory pool: one statement's `max_query_memory`, shared fairly among the
//! operators that spill (DataFusion's `FairSpillPool`, with its report of the largest
//! consumers), except that a repartition never takes its own spill path.
//!
//! DataFusion 55's `RepartitionExec` writes a batch it cannot reserve memory for to a spill
//! pool; when two of its input tasks spill at once the pool holds two open files, the reader
//! waits on the older one for a batch that is in the newer, and the statement stops with every
//! thread parked (apache/datafusion#24883, fixed upstream by #24891 after 55 was cut). Seen
//! here: a GROUP BY of 480 k distinct keys under 8 MB hung in about one run of ten. A
//! repartition's buffers are bounded anyway (it stops reading while every output has a batch
//! waiting), so its reservations are granted and counted apart: they neither take from the
//! limit the other operators share nor count as a spilling operator in the fair shares (when
//! they did, a repartition holding 3.5 MB of an 8 MB limit left a sort-merge join's merge
//! phases, which cannot spill, nothing: error 3170 where the statement should have spilled).
//! The same goes for a sort's merge (`ExternalSorterMerge`, which cannot spill): it merges what
//! its sort already holds within its share, or one batch per spill file of a pass (two files a
//! pass, `SPILL_MERGE_FAN_IN`), so it is bounded by the sort's share; when it was limited, a
//! sort-merge join under 8 MB failed 3170 in about one run of four, its merges refused 113 bytes
//! while the sorts held their shares. A statement may therefore hold its limit plus the batches
//! its repartitions have in flight and what its sorts' merges hold; `reserved` reports all.
use datafusion::common::Result;
use datafusion::execution::memory_pool::{
    FairSpillPool, MemoryLimit, MemoryPool, MemoryReservation, TrackConsumersPool,
};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Consumers whose reservations are always granted (see the module comment).
fn always_granted(consumer: &datafusion::execution::memory_pool::MemoryConsumer) -> bool {
    let name = consumer.name();
    name.starts_with("RepartitionExec") || name.starts_with("ExternalSorterMerge")
}

#[derive(Debug)]
pub(super) struct StatementPool {
    limited: TrackConsumersPool<FairSpillPool>,
    /// Bytes the repartitions and sort merges hold, outside `limited`.
    granted: AtomicUsize,
}

impl StatementPool {
    pub(super) fn new(bytes: usize) -> StatementPool {
        StatementPool {
            limited: TrackConsumersPool::new(FairSpillPool::new(bytes), NonZeroUsize::new(5).expect("5 > 0")),
            granted: AtomicUsize::new(0),
        }
    }
}

impl std::fmt::Display for StatementPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.limited.fmt(f)
    }
}

impl MemoryPool for StatementPool {
    fn name(&self) -> &str {
        self.limited.name()
    }

    fn register(&self, consumer: &datafusion::execution::memory_pool::MemoryConsumer) {
        if !always_granted(consumer) {
            self.limited.register(consumer)
        }
    }

    fn unregister(&self, consumer: &datafusion::execution::memory_pool::MemoryConsumer) {
        if !always_granted(consumer) {
            self.limited.unregister(consumer)
        }
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        if always_granted(reservation.consumer()) {
            self.granted.fetch_add(additional, Ordering::Relaxed);
        } else {
            self.limited.grow(reservation, additional)
        }
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        if always_granted(reservation.consumer()) {
            self.granted.fetch_sub(shrink, Ordering::Relaxed);
        } else {
            self.limited.shrink(reservation, shrink)
        }
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        if always_granted(reservation.consumer()) {
            self.granted.fetch_add(additional, Ordering::Relaxed);
            return Ok(());
        }
        self.limited.try_grow(reservation, additional)
    }

    fn reserved(&self) -> usize {
        self.limited.reserved() + self.granted.load(Ordering::Relaxed)
    }

    fn memory_limit(&self) -> MemoryLimit {
        self.limited.memory_limit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::memory_pool::MemoryConsumer;
    use std::sync::Arc;

    #[test]
    fn repartitions_and_merges_are_granted_apart_others_limited() {
        let pool: Arc<dyn MemoryPool> = Arc::new(StatementPool::new(1000));
        let repartition = MemoryConsumer::new("RepartitionExec[0]").with_can_spill(true).register(&pool);
        let sort = MemoryConsumer::new("ExternalSorter[0]").with_can_spill(true).register(&pool);
        let merge = MemoryConsumer::new("ExternalSorterMerge[0]").register(&pool);
        let hash = MemoryConsumer::new("HashJoinInput").register(&pool);
        repartition.try_grow(5000).unwrap();
        assert_eq!(pool.reserved(), 5000);
        // The repartition's and the merge's bytes take nothing from the others: an operator
        // that cannot spill gets the whole limit, and the sort (the only spilling operator the
        // limit knows) what is left of it.
        merge.try_grow(300).unwrap();
        hash.try_grow(1000).unwrap();
        assert!(hash.try_grow(1).is_err());
        hash.shrink(600);
        sort.try_grow(600).unwrap();
        assert!(sort.try_grow(1).is_err());
        assert_eq!(pool.reserved(), 6300);
        repartition.shrink(5000);
        sort.shrink(600);
        merge.shrink(300);
        assert_eq!(pool.reserved(), 400);
        hash.shrink(400);
        assert_eq!(pool.reserved(), 0);
    }
}
