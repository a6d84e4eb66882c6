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
//! waiting), so its reservations are granted and counted: an operator that cannot spill is
//! refused what would take the statement past its limit, while one that spills keeps its fair
//! share of what the others leave (the fair pool's rule) — so a statement may hold its limit
//! plus the batches its repartitions have in flight.

use datafusion::common::Result;
use datafusion::execution::memory_pool::{
    FairSpillPool, MemoryLimit, MemoryPool, MemoryReservation, TrackConsumersPool,
};
use std::num::NonZeroUsize;

/// Consumers whose reservations are always granted (see the module comment).
fn always_granted(reservation: &MemoryReservation) -> bool {
    reservation.consumer().name().starts_with("RepartitionExec")
}

#[derive(Debug)]
pub(super) struct StatementPool(TrackConsumersPool<FairSpillPool>);

impl StatementPool {
    pub(super) fn new(bytes: usize) -> StatementPool {
        StatementPool(TrackConsumersPool::new(FairSpillPool::new(bytes), NonZeroUsize::new(5).expect("5 > 0")))
    }
}

impl std::fmt::Display for StatementPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl MemoryPool for StatementPool {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn register(&self, consumer: &datafusion::execution::memory_pool::MemoryConsumer) {
        self.0.register(consumer)
    }

    fn unregister(&self, consumer: &datafusion::execution::memory_pool::MemoryConsumer) {
        self.0.unregister(consumer)
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.0.grow(reservation, additional)
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.0.shrink(reservation, shrink)
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        if always_granted(reservation) {
            self.0.grow(reservation, additional);
            return Ok(());
        }
        self.0.try_grow(reservation, additional)
    }

    fn reserved(&self) -> usize {
        self.0.reserved()
    }

    fn memory_limit(&self) -> MemoryLimit {
        self.0.memory_limit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::memory_pool::MemoryConsumer;
    use std::sync::Arc;

    #[test]
    fn repartitions_are_granted_and_counted_others_limited() {
        let pool: Arc<dyn MemoryPool> = Arc::new(StatementPool::new(1000));
        let repartition = MemoryConsumer::new("RepartitionExec[0]").with_can_spill(true).register(&pool);
        let sort = MemoryConsumer::new("ExternalSorter[0]").with_can_spill(true).register(&pool);
        let hash = MemoryConsumer::new("HashJoinInput").register(&pool);
        repartition.try_grow(5000).unwrap();
        assert_eq!(pool.reserved(), 5000);
        // The pool is past its limit: operators that cannot spill get nothing more; one that
        // spills keeps its fair share (1000 / 2: it and the repartition spill).
        assert!(hash.try_grow(10).is_err());
        sort.try_grow(400).unwrap();
        assert!(sort.try_grow(200).is_err());
        sort.shrink(400);
        repartition.shrink(5000);
        assert_eq!(pool.reserved(), 0);
        hash.try_grow(400).unwrap();
        assert!(hash.try_grow(700).is_err());
        // Spilling operators share what the others leave: (1000 - 400) / 2.
        sort.try_grow(300).unwrap();
        assert!(sort.try_grow(1).is_err());
        assert_eq!(pool.reserved(), 700);
    }
}
