//! Running a command's key operations as Tern transactions: with the client's retries of
//! temporary errors, and multi-key writes in one global lock order so that the front end's
//! writers never deadlock one another.

use super::{R, RErr};
use crate::Server;
use tern_client::{AbortOption, Exec, KeyOp, OpResult, TernError, Transaction};

/// Runs a transaction body with the client's retries of temporary errors.
pub(super) async fn txn<T, F, Fut>(s: &Server, f: F) -> R<T>
where
    F: FnMut(Transaction) -> Fut,
    Fut: std::future::Future<Output = Result<Result<T, RErr>, TernError>>,
{
    match s.client.run(f).await {
        Ok(r) => r,
        Err(e) => Err(e.into()),
    }
}

/// The last batch of a transaction; an operation that failed is the transaction's error.
pub(super) async fn commit_checked(t: &mut Transaction, ops: Vec<KeyOp>) -> Result<Vec<OpResult>, TernError> {
    t.execute_with(ops, Exec::Commit, AbortOption::AbortOnError).await
}

/// Operations per data-node batch at most (the wire allows 16,384).
pub const BATCH_OPS_MAX: usize = 4096;
/// Row and key bytes per data-node batch at most.
pub const BATCH_BYTES_MAX: usize = 16 << 20;

/// Operations of a transaction with per-operation results (IgnoreError), in batches bounded by
/// `BATCH_OPS_MAX` and `BATCH_BYTES_MAX` (a command may carry any number of keys); `exec`
/// applies to the last batch, the others leave the transaction open.
pub(super) async fn exec(t: &mut Transaction, ops: Vec<KeyOp>, exec: Exec) -> Result<Vec<OpResult>, TernError> {
    exec_batched(t, ops, exec, AbortOption::IgnoreError).await
}

pub async fn exec_batched(
    t: &mut Transaction,
    mut ops: Vec<KeyOp>,
    exec: Exec,
    abort: AbortOption,
) -> Result<Vec<OpResult>, TernError> {
    let mut results = Vec::with_capacity(ops.len());
    loop {
        let (mut n, mut bytes) = (0, 0);
        while n < ops.len() && n < BATCH_OPS_MAX && (n == 0 || bytes < BATCH_BYTES_MAX) {
            bytes += ops[n].row.len() + ops[n].key.len();
            n += 1;
        }
        let rest = ops.split_off(n);
        let last = rest.is_empty();
        results.extend(t.execute_with(ops, if last { exec } else { Exec::NoCommit }, abort).await?);
        if last {
            return Ok(results);
        }
        ops = rest;
    }
}

/// Runs write operations as one transaction. First optimistically in one batch that fails at
/// once on a busy row lock (nobody waits, so no deadlock can form); after such a failure (or any
/// temporary one) at once again, locking in order with `exec_ordered` (with the client's retries).
pub async fn write_txn(client: &tern_client::Client, ops: Vec<KeyOp>) -> Result<Vec<OpResult>, TernError> {
    let bytes: usize = ops.iter().map(|o| o.row.len() + o.key.len()).sum();
    if bytes < BATCH_BYTES_MAX && ops.len() <= BATCH_OPS_MAX {
        let mut t = client.begin();
        t.set_nowait(true);
        match t.execute_with(ops.clone(), Exec::Commit, AbortOption::AbortOnError).await {
            Err(e) if e.is_temporary() => {}
            other => return other,
        }
    }
    client
        .run(|mut t| {
            let ops = ops.clone();
            async move { exec_ordered(client, &mut t, ops).await }
        })
        .await
}

/// Executes a transaction's write operations and commits: in (worker, table, key) order, one
/// worker's operations per batch (bounded in size), workers in increasing order. Every multi-key
/// writer of this front end locks this way, so they never deadlock one another. Results come back
/// in the order of `ops`.
pub async fn exec_ordered(
    client: &tern_client::Client,
    t: &mut Transaction,
    ops: Vec<KeyOp>,
) -> Result<Vec<OpResult>, TernError> {
    // Any failed write aborts the whole transaction: a value is never half written.
    exec_ordered_with(client, t, ops, AbortOption::AbortOnError).await
}

/// `exec_ordered` with a choice of abort option.
pub async fn exec_ordered_with(
    client: &tern_client::Client,
    t: &mut Transaction,
    ops: Vec<KeyOp>,
    abort: AbortOption,
) -> Result<Vec<OpResult>, TernError> {
    let workers: Vec<u16> = ops.iter().map(|o| client.worker_of(o)).collect();
    let mut order: Vec<usize> = (0..ops.len()).collect();
    order.sort_by(|&a, &b| (workers[a], ops[a].table, &ops[a].key).cmp(&(workers[b], ops[b].table, &ops[b].key)));
    let mut ops: Vec<Option<KeyOp>> = ops.into_iter().map(Some).collect();
    let mut results: Vec<Option<OpResult>> = (0..ops.len()).map(|_| None).collect();
    let mut i = 0;
    loop {
        let mut batch = Vec::new();
        let mut idx = Vec::new();
        let mut bytes = 0;
        while i < order.len() {
            let j = order[i];
            if !batch.is_empty()
                && (workers[j] != workers[idx[0]] || bytes >= BATCH_BYTES_MAX || batch.len() >= BATCH_OPS_MAX)
            {
                break;
            }
            let op = ops[j].take().expect("each op once");
            bytes += op.row.len() + op.key.len();
            batch.push(op);
            idx.push(j);
            i += 1;
        }
        let last = i >= order.len();
        let rs = t.execute_with(batch, if last { Exec::Commit } else { Exec::NoCommit }, abort).await?;
        for (j, r) in idx.into_iter().zip(rs) {
            results[j] = Some(r);
        }
        if last {
            break;
        }
    }
    Ok(results.into_iter().map(|r| r.unwrap_or(OpResult::Done)).collect())
}
