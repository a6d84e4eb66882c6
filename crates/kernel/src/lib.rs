//! The data node kernel: blocks that react to signals and return effects, and never do I/O.
//!
//! Blocks: `tc` (transaction coordinator), `ldm` (partitions, locks, redo, checkpoints, scans),
//! `dict` (schema catalog), `dist` (start-up and the epoch protocol). The same block code runs in
//! the threaded runtime (`tern-runtime`) and in the deterministic simulator (`tern-sim`).
//!
//! Rules for everything in this crate: no OS I/O, no clock (time arrives as `now_ms`), no
//! threads, no global randomness; iteration that affects outputs is over ordered collections.

pub mod checkpoint;
pub mod codec;
pub mod dict;
pub mod dist;
pub mod io;
pub mod ldm;
pub mod node;
pub mod recovery;
pub mod redo;
pub mod signal;
pub mod sysfile;
pub mod tc;

pub use node::{Node, NodeConfig};
pub use signal::{Addr, Block, ClientId, IoReq, Out, Signal};
