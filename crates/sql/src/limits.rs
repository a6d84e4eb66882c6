//! What one statement may use, and how it is stopped. A statement's intermediate results (rows
//! read, joined, grouped, sorted, the result set) are charged to its `Budget`, whose memory
//! bound is the session variable `max_query_memory` (default `QUERY_MEMORY_DEFAULT`; beyond it
//! the statement fails with 3170, MySQL's "Memory capacity ... exceeded"); the same budget carries
//! the statement's deadline (`max_execution_time` for SELECT, MySQL's 3024; MariaDB's
//! `max_statement_time` for every statement, 1969) and the connection's `Interrupt`, which
//! `KILL QUERY` / `KILL CONNECTION` set (1317). Checks happen at every data-node round trip and
//! every `CHECK_EVERY` charged rows, so a statement stops within one batch of work.
//!
//! Values built while evaluating one expression are bounded too (`Live`): the argument values a
//! function call holds, summed over every call in progress on the thread, stay under
//! `EVAL_BYTES_MAX`, so nested string functions cannot multiply memory.

use crate::SqlError;
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;
use tern_types::Value;

/// Default of `max_query_memory`: bytes of intermediate results one statement may hold.
pub const QUERY_MEMORY_DEFAULT: u64 = 512 << 20;
/// Charged rows between two looks at the clock and the interrupt flag.
const CHECK_EVERY: u32 = 256;
/// Bytes of argument values all expression evaluations in progress on a thread may hold.
pub const EVAL_BYTES_MAX: usize = 256 << 20;

/// MySQL's 3170 for a statement past `max_query_memory` bytes.
pub fn memory_exceeded(max: u64) -> SqlError {
    SqlError::new(
        3170,
        "HY000",
        format!(
            "Memory capacity of {max} bytes for 'max_query_memory' exceeded. The statement's intermediate results (rows read, joined, grouped or sorted) did not fit; raise max_query_memory or narrow the query"
        ),
    )
}

/// What `KILL` asked of a connection.
#[derive(Debug, Default)]
pub struct Interrupt(AtomicU8);

const RUNNING: u8 = 0;
const KILL_QUERY: u8 = 1;
const KILL_CONNECTION: u8 = 2;

impl Interrupt {
    /// `KILL QUERY`: the running statement stops (the connection stays).
    pub fn kill_query(&self) {
        let _ = self.0.compare_exchange(RUNNING, KILL_QUERY, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// `KILL CONNECTION`: the running statement stops and the connection closes.
    pub fn kill_connection(&self) {
        self.0.store(KILL_CONNECTION, Ordering::Release);
    }

    pub fn killed(&self) -> bool {
        self.0.load(Ordering::Acquire) != RUNNING
    }

    pub fn connection_killed(&self) -> bool {
        self.0.load(Ordering::Acquire) == KILL_CONNECTION
    }

    /// A new statement starts: a `KILL QUERY` that found none running is forgotten (as in
    /// MySQL); a killed connection stays killed.
    pub fn statement_starts(&self) {
        let _ = self.0.compare_exchange(KILL_QUERY, RUNNING, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Why a statement's time ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadlineKind {
    /// MySQL's `max_execution_time` (SELECT only): 3024.
    ExecutionTime,
    /// MariaDB's `max_statement_time`: 1969.
    StatementTime,
}

/// One statement's allowance of memory and time, and the connection's kill switch.
#[derive(Debug)]
pub struct Budget {
    memory_max: u64,
    used: u64,
    deadline: Option<(Instant, DeadlineKind)>,
    interrupt: Arc<Interrupt>,
    ticks: u32,
}

impl Budget {
    pub fn new(memory_max: u64, deadline: Option<(Instant, DeadlineKind)>, interrupt: Arc<Interrupt>) -> Budget {
        Budget { memory_max, used: 0, deadline, interrupt, ticks: 0 }
    }

    /// No memory or time limit and nobody to kill it (internal statements).
    pub fn unlimited() -> Budget {
        Budget::new(u64::MAX, None, Arc::default())
    }

    /// Fails when the statement was killed or its time is up.
    /// The statement's memory bound in bytes.
    pub fn memory_max(&self) -> u64 {
        self.memory_max
    }

    pub fn check(&self) -> Result<(), SqlError> {
        if self.interrupt.killed() {
            return Err(SqlError::new(1317, "70100", "Query execution was interrupted"));
        }
        if let Some((at, kind)) = self.deadline
            && Instant::now() >= at
        {
            return Err(match kind {
                DeadlineKind::ExecutionTime => SqlError::new(
                    3024,
                    "HY000",
                    "Query execution was interrupted, maximum statement execution time exceeded",
                ),
                DeadlineKind::StatementTime => {
                    SqlError::new(1969, "70100", "Query execution was interrupted (max_statement_time exceeded)")
                }
            });
        }
        Ok(())
    }

    /// Charges `bytes` of intermediate results; fails beyond `max_query_memory`, and now and then
    /// looks at the clock and the interrupt.
    pub fn charge(&mut self, bytes: usize) -> Result<(), SqlError> {
        self.used = self.used.saturating_add(bytes as u64);
        if self.used > self.memory_max {
            return Err(memory_exceeded(self.memory_max));
        }
        self.ticks = self.ticks.wrapping_add(1);
        if self.ticks.is_multiple_of(CHECK_EVERY) {
            self.check()?;
        }
        Ok(())
    }

    /// Charges one row of values.
    pub fn charge_row(&mut self, row: &[Value]) -> Result<(), SqlError> {
        self.charge(row_bytes(row))
    }

    /// Bytes charged so far.
    pub fn used(&self) -> u64 {
        self.used
    }
}

/// Approximate bytes a value takes in memory (its slot and its heap part).
pub fn value_bytes(v: &Value) -> usize {
    std::mem::size_of::<Value>()
        + match v {
            Value::Bytes(b) => b.len(),
            _ => 0,
        }
}

/// Approximate bytes of a row of values.
pub fn row_bytes(r: &[Value]) -> usize {
    std::mem::size_of::<Vec<Value>>() + r.iter().map(value_bytes).sum::<usize>()
}

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
}

/// Argument values held by one function call being evaluated (see the module comment).
#[derive(Default)]
pub struct Live(usize);

impl Live {
    /// Counts `v` as held until this guard drops.
    pub fn hold(&mut self, v: &Value) -> Result<(), SqlError> {
        let n = match v {
            Value::Bytes(b) => b.len(),
            _ => return Ok(()),
        };
        self.0 += n;
        let total = LIVE.with(|l| {
            let t = l.get() + n;
            l.set(t);
            t
        });
        if total > EVAL_BYTES_MAX {
            return Err(SqlError::new(
                3170,
                "HY000",
                format!("Memory capacity of {EVAL_BYTES_MAX} bytes for the values of one expression exceeded"),
            ));
        }
        Ok(())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE.with(|l| l.set(l.get().saturating_sub(self.0)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_bound_and_interrupts() {
        let kill = Arc::new(Interrupt::default());
        let mut b = Budget::new(1000, None, kill.clone());
        assert!(b.charge(600).is_ok());
        assert_eq!(b.charge(600).unwrap_err().errno, 3170);
        let b = Budget::new(u64::MAX, None, kill.clone());
        kill.kill_query();
        assert_eq!(b.check().unwrap_err().errno, 1317);
        kill.statement_starts();
        assert!(b.check().is_ok());
        kill.kill_connection();
        kill.statement_starts();
        assert!(kill.connection_killed() && b.check().is_err());
        let past = Instant::now() - std::time::Duration::from_millis(1);
        let b = Budget::new(u64::MAX, Some((past, DeadlineKind::ExecutionTime)), Arc::default());
        assert_eq!(b.check().unwrap_err().errno, 3024);
    }

    #[test]
    fn live_values_are_bounded_and_released() {
        let big = Value::Bytes(vec![0; EVAL_BYTES_MAX / 2 + 1]);
        {
            let mut a = Live::default();
            a.hold(&big).unwrap();
            let mut b = Live::default();
            assert_eq!(b.hold(&big).unwrap_err().errno, 3170);
        }
        let mut c = Live::default();
        c.hold(&big).unwrap();
    }
}
