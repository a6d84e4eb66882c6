//! The data-memory budget shared by all partitions of a data node.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tern_types::{ErrorCode, TernError, TernResult};

/// Accounted data memory. Cloning shares the budget.
#[derive(Debug, Clone)]
pub struct MemoryBudget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    used: AtomicU64,
    limit: u64,
}

impl MemoryBudget {
    pub fn new(limit_bytes: u64) -> MemoryBudget {
        MemoryBudget { inner: Arc::new(Inner { used: AtomicU64::new(0), limit: limit_bytes }) }
    }

    pub fn limit(&self) -> u64 {
        self.inner.limit
    }

    pub fn used(&self) -> u64 {
        self.inner.used.load(Ordering::Relaxed)
    }

    /// Reserves `bytes`, or fails with "data memory is full" leaving the budget unchanged.
    pub fn reserve(&self, bytes: u64) -> TernResult<()> {
        let mut cur = self.inner.used.load(Ordering::Relaxed);
        loop {
            let next = cur + bytes;
            if next > self.inner.limit {
                return Err(TernError::new(
                    ErrorCode::DataMemoryFull,
                    format!("data memory is full ({} of {} bytes used)", cur, self.inner.limit),
                ));
            }
            match self.inner.used.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Ok(()),
                Err(v) => cur = v,
            }
        }
    }

    /// Reserves without a limit check: used for recovery, which must restore what was stored.
    pub fn force(&self, bytes: u64) {
        self.inner.used.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn release(&self, bytes: u64) {
        let prev = self.inner.used.fetch_sub(bytes, Ordering::Relaxed);
        assert!(prev >= bytes, "memory budget released more than reserved");
    }
}
