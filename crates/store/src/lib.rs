//! Storage of one partition replica: a row heap addressed by row id, a primary hash index, ordered
//! secondary indexes, and accounting against the node's data memory. Performance-critical: every
//! key operation lands here.
//!
//! This crate knows nothing of transactions: it stores *committed* rows. Locks and uncommitted
//! versions live in the kernel's `ldm` block, which applies a transaction's changes here only at
//! commit. A partition is owned by exactly one ldm thread, so nothing here is synchronised except
//! the shared memory budget.
//!
//! Invariants (checked by the model-based test): the hash index holds exactly the live row ids;
//! every ordered index holds exactly one entry per live row; accounted memory equals the sum of
//! the live rows' charges.

mod counted;
mod hash_index;
mod heap;
mod memory;
mod partition;

pub use heap::RowId;
pub use memory::MemoryBudget;
pub use partition::{IndexBound, Partition, ROW_OVERHEAD_BYTES};
