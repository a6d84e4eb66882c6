//! Running commands in Tern transactions. A data command runs against a `Cx`: its own
//! transaction (standalone: retried as a whole on temporary errors, committed with its last
//! batch) or the one transaction of an EXEC (nothing commits until every queued command ran). A
//! command reports a Redis error (`Fail::Reply`) only before it has written anything, so inside
//! EXEC the other commands go on; a failed Tern transaction (`Fail::Txn`) fails the whole.
//! Multi-key writes lock in one global order, so the front end's writers never deadlock one
//! another.

use super::{Kind, R, RErr, Spec};
use crate::clients::lock;
use crate::db::{Db, Meta};
use crate::resp::{self, parse_int};
use crate::{Server, Session};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tern_client::{AbortOption, Client, Exec, KeyOp, OpResult, TernError, Transaction, Value};

/// Why a command did not complete.
#[derive(Debug)]
pub(crate) enum Fail {
    /// The command's error reply; it changed nothing, the transaction goes on.
    Reply(RErr),
    /// The transaction failed (temporary errors are retried by the caller).
    Txn(TernError),
}

impl From<RErr> for Fail {
    fn from(e: RErr) -> Fail {
        Fail::Reply(e)
    }
}

impl From<TernError> for Fail {
    fn from(e: TernError) -> Fail {
        Fail::Txn(e)
    }
}

/// A command's result inside a transaction.
pub(crate) type CR<T = ()> = Result<T, Fail>;

/// Attempts of a standalone command or an EXEC on temporary errors, and their back-off (as the
/// client's `run`).
const RETRIES_MAX: u32 = 10;
const BACKOFF_FIRST: Duration = Duration::from_millis(2);
const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// Hash field changes this transaction made, per (database, `rondb_key`): scans of `hset_keys`
/// see only committed rows, so a command reading a hash it changed earlier in the same EXEC
/// merges these. `None` is a deleted field.
pub(crate) type FieldChanges = HashMap<(u32, u64), BTreeMap<Vec<u8>, Option<Vec<u8>>>>;

/// Where a data command's operations go.
pub(crate) struct Cx {
    t: Transaction,
    client: Client,
    /// Inside EXEC: keys named by the queued commands are locked already; nothing commits.
    pub(crate) multi: bool,
    /// A standalone command's first attempt (multi-key writes try one no-wait batch first).
    pub(crate) first_try: bool,
    started: bool,
    /// An operation took a lock or wrote: the transaction must commit. One of read-committed
    /// reads only is just dropped (its rollback goes without waiting for an answer).
    locking: bool,
    committed: bool,
    pub(crate) fields: FieldChanges,
    /// Messages PUBLISHed and keyspace events raised in this transaction, per slot of
    /// `redis_pubsub.messages` with its encoded size (a slot's row holds them all); the rows
    /// are written with the commit (`Server::pubsub_ops`).
    pubs: HashMap<u64, (crate::pubsub::SlotBatch, usize)>,
    /// Inside EXEC: the (database, key) pairs the queued commands name (locked first).
    pub(crate) named: Vec<(u32, Vec<u8>)>,
    /// Key rows replaced or deleted: their parts or fields go once the transaction committed.
    garbage: Vec<(Arc<Db>, Meta)>,
    /// `notify-keyspace-events` when the transaction began (`crate::keyspace` flags; 0: off).
    /// While on, a standalone command commits only in `commit_with`, with its events.
    pub(crate) notify: u32,
    /// Keys the current command wrote (`Server::touched`), while notifications are on.
    pub(crate) touched: Vec<crate::keyspace::Touched>,
    /// Events of the commands so far, and the keys they wrote (marks).
    pub(crate) events: Vec<crate::keyspace::Event>,
    pub(crate) marks: Vec<(u32, Vec<u8>)>,
}

impl Cx {
    pub(crate) fn new(client: &Client, multi: bool, first_try: bool) -> Cx {
        Cx {
            t: client.begin(),
            client: client.clone(),
            multi,
            first_try,
            started: false,
            locking: false,
            committed: false,
            fields: HashMap::new(),
            pubs: HashMap::new(),
            named: Vec::new(),
            garbage: Vec::new(),
            notify: 0,
            touched: Vec::new(),
            events: Vec::new(),
            marks: Vec::new(),
        }
    }

    /// Queues a message for the commit; false (nothing queued) when its slot's row would pass
    /// `MESSAGE_MAX`.
    pub(crate) fn add_message(&mut self, channel: Vec<u8>, msg: Vec<u8>) -> bool {
        let (b, bytes) = self.pubs.entry(crate::pubsub::slot_of(&channel)).or_default();
        let n = 9 + channel.len() + msg.len();
        if *bytes + n > crate::pubsub::MESSAGE_MAX {
            return false;
        }
        *bytes += n;
        b.msgs.push((channel, msg));
        true
    }

    /// A read that found no `key`: its `keymiss` event, when that class is on.
    pub(crate) fn key_miss(&mut self, db: u32, key: &[u8]) {
        if self.notify & crate::keyspace::KEY_MISS != 0 {
            let class = crate::keyspace::KEY_MISS;
            self.events.push(crate::keyspace::Event { class, name: "keymiss", db, key: key.to_vec() });
        }
    }

    /// Queues a mark of a key a Redis command wrote (in its keyspace channel's slot).
    fn add_mark(&mut self, db: u32, key: Vec<u8>) {
        let slot = crate::pubsub::slot_of(&crate::keyspace::keyspace_channel(db, &key));
        let (b, bytes) = self.pubs.entry(slot).or_default();
        let n = 9 + key.len();
        if *bytes + n <= crate::pubsub::MESSAGE_MAX {
            *bytes += n;
            b.marks.push((db, key));
        }
    }

    /// Whether a command's last operations commit with them (not inside EXEC, nor while
    /// keyspace events are to be written with the commit).
    fn commits(&self, last: bool) -> bool {
        last && !self.multi && self.notify == 0
    }

    async fn exec(&mut self, ops: Vec<KeyOp>, last: bool, abort: AbortOption) -> Result<Vec<OpResult>, TernError> {
        if ops.is_empty() && !(last && self.started && self.locking && !self.multi) {
            return Ok(Vec::new());
        }
        self.started = true;
        self.locking |= ops.iter().any(|o| o.kind != tern_client::OpKind::Read);
        let commit = self.commits(last);
        let rs = exec_batched(&mut self.t, ops, if commit { Exec::Commit } else { Exec::NoCommit }, abort).await?;
        self.committed |= commit;
        Ok(rs)
    }

    /// Operations with per-operation results (missing rows, failed guards reported each); the
    /// transaction stays open.
    pub(crate) async fn run(&mut self, ops: Vec<KeyOp>) -> Result<Vec<OpResult>, TernError> {
        self.exec(ops, false, AbortOption::IgnoreError).await
    }

    /// A command's last operations: a standalone command commits with them (one round trip).
    pub(crate) async fn last(&mut self, ops: Vec<KeyOp>) -> Result<Vec<OpResult>, TernError> {
        self.exec(ops, true, AbortOption::IgnoreError).await
    }

    /// Writes where any failure (a missing row included) fails the transaction: a value is never
    /// half written.
    pub(crate) async fn write(&mut self, ops: Vec<KeyOp>, last: bool) -> Result<Vec<OpResult>, TernError> {
        self.exec(ops, last, AbortOption::AbortOnError).await
    }

    /// `write` of rows read under the key row's lock in this transaction (members picked, found
    /// by rank): a missing one means the collection changed without that lock (an SQL or REST
    /// write, the TTL purge), and the command is tried again as for a changed value.
    pub(crate) async fn write_found(&mut self, ops: Vec<KeyOp>, last: bool) -> Result<Vec<OpResult>, Fail> {
        match self.write(ops, last).await {
            Err(e) if e.code == tern_client::ErrorCode::NotFound => Err(changed()),
            r => Ok(r?),
        }
    }

    /// Writes to several keys, locking in the front end's global order (`exec_ordered`); inside
    /// EXEC the keys are locked already and the operations go as they are. A standalone first try
    /// of a small set goes as one no-wait batch instead: a busy lock fails it at once and the
    /// retry locks in order.
    pub(crate) async fn write_ordered(
        &mut self,
        ops: Vec<KeyOp>,
        abort: AbortOption,
        last: bool,
    ) -> Result<Vec<OpResult>, TernError> {
        if self.multi || ops.len() <= 1 {
            return self.exec(ops, last, abort).await;
        }
        let bytes: usize = ops.iter().map(|o| o.row.len() + o.key.len()).sum();
        if self.first_try && !self.started && bytes < BATCH_BYTES_MAX && ops.len() <= BATCH_OPS_MAX {
            self.t.set_nowait(true);
            let r = self.exec(ops, last, abort).await;
            self.t.set_nowait(false);
            return r;
        }
        self.started = true;
        self.locking = true;
        let commit = self.commits(last);
        let rs = exec_ordered_with(&self.client, &mut self.t, ops, abort, commit).await?;
        self.committed |= commit;
        Ok(rs)
    }

    /// Notes a replaced or deleted key row whose parts or fields are to go after the commit.
    pub(crate) fn garbage(&mut self, db: &Arc<Db>, old: Meta) {
        if old.id != 0 {
            self.garbage.push((db.clone(), old));
        }
    }

    /// Commits what is not committed yet; returns the rows to clean up.
    /// Commits with `ops` (the rows of its messages and keyspace events) what is not committed
    /// yet.
    pub(crate) async fn commit_with(mut self, ops: Vec<KeyOp>) -> Result<Vec<(Arc<Db>, Meta)>, TernError> {
        // A transaction with messages commits only here (nothing else commits it early).
        debug_assert!(ops.is_empty() || !self.committed, "messages after the commit");
        if (self.started && self.locking || !ops.is_empty()) && !self.committed {
            self.t.execute_with(ops, Exec::Commit, AbortOption::AbortOnError).await?;
        }
        Ok(std::mem::take(&mut self.garbage))
    }
}

/// Runs `$body` (an expression that uses `$cx: &mut Cx` and evaluates to `CR<T>`) as a data
/// command in its own transaction: retried as a whole on temporary errors, then committed; the
/// rows it left behind are cleaned up in the background. Evaluates to `R<T>`. (A macro rather
/// than a function taking an async closure: the futures of such closures are not provably `Send`
/// for every lifetime, which tokio's tasks need.)
macro_rules! standalone {
    ($server:expr, |$cx:ident| $body:expr) => {{
        let server: &$crate::Server = $server;
        let mut retry = $crate::cmd::Retry::default();
        loop {
            let mut owned = $crate::cmd::Cx::new(&server.client, false, retry.first());
            owned.notify = server.pubsub.notify_flags();
            let $cx = &mut owned;
            let r = $body;
            match server.finish_standalone(owned, r).await {
                Ok(v) => break Ok(v),
                Err(f) => match retry.failed(f).await {
                    Some(e) => break Err(e),
                    None => continue,
                },
            }
        }
    }};
}

/// Attempts of a standalone command and their back-off.
#[derive(Debug, Default)]
pub(crate) struct Retry {
    attempt: u32,
}

impl Retry {
    pub(crate) fn first(&self) -> bool {
        self.attempt == 0
    }

    /// After a failed attempt: the error to answer, or None after waiting to try again.
    pub(crate) async fn failed(&mut self, f: Fail) -> Option<RErr> {
        match f {
            Fail::Reply(e) => Some(e),
            Fail::Txn(e) if e.is_temporary() && self.attempt < RETRIES_MAX => {
                let backoff = (BACKOFF_FIRST * 2u32.pow(self.attempt.min(16))).min(BACKOFF_MAX);
                self.attempt += 1;
                tokio::time::sleep(backoff).await;
                None
            }
            Fail::Txn(e) => Some(e.into()),
        }
    }
}

impl Server {
    /// Commits a standalone command's transaction when it succeeded.
    pub(crate) async fn finish_standalone<T>(&self, mut cx: Cx, r: CR<T>) -> CR<T> {
        let v = r?;
        let (ops, published) = self.pubsub_ops(&mut cx).await?;
        let garbage = cx.commit_with(ops).await?;
        if published {
            self.pubsub.kick();
        }
        self.collect(garbage);
        Ok(v)
    }

    /// A write of a key by the current command (WATCH, blocked pops, keyspace events): `gone`,
    /// the key no longer exists after it.
    pub(crate) fn touched(&self, cx: &mut Cx, db: u32, key: &[u8], gone: bool) {
        self.touch(db, key);
        if cx.notify != 0 {
            cx.touched.push((db, key.to_vec(), gone));
        }
    }

    /// A `new` event before the first event of each key the transaction wrote that did not
    /// exist before it (redis's dbAdd). The key rows' committed versions are read in a
    /// transaction of their own: the transaction's writes hold their locks and are not seen.
    async fn new_key_events(&self, cx: &mut Cx) -> Result<(), TernError> {
        use crate::keyspace::{Event, GENERIC, KEY_MISS, NEW};
        use std::collections::HashSet;
        // The keys written, each once, in the order of their first event.
        let mut seen: HashSet<(u32, &[u8])> = HashSet::new();
        let mut keys: Vec<(u32, &[u8])> = Vec::new();
        for ev in &cx.events {
            let written = ev.class & (KEY_MISS | NEW) == 0 && !(ev.class == GENERIC && ev.name == "del");
            if written && seen.insert((ev.db, &ev.key)) {
                keys.push((ev.db, &ev.key));
            }
        }
        if keys.is_empty() {
            return Ok(());
        }
        let mut ops = Vec::with_capacity(keys.len());
        for (d, k) in &keys {
            let db = self.db(*d).await.map_err(|e| TernError::new(tern_client::ErrorCode::Internal, e.0))?;
            ops.push(db.keys.read_columns(&[Value::Bytes(k.to_vec())], &[crate::db::K_TYPE])?);
        }
        let mut t = self.client.begin();
        let rs = exec_batched(&mut t, ops, Exec::Commit, AbortOption::IgnoreError).await?;
        let mut created: HashSet<(u32, Vec<u8>)> = keys
            .iter()
            .zip(&rs)
            .filter(|(_, r)| matches!(r, OpResult::NotFound))
            .map(|((d, k), _)| (*d, k.to_vec()))
            .collect();
        let mut out = Vec::with_capacity(cx.events.len() + created.len());
        for ev in std::mem::take(&mut cx.events) {
            // (`remove`: a key's `new` comes once, before its first event.)
            if ev.class & KEY_MISS == 0 && created.remove(&(ev.db, ev.key.clone())) {
                out.push(Event { class: NEW, name: "new", db: ev.db, key: ev.key.clone() });
            }
            out.push(ev);
        }
        cx.events = out;
        Ok(())
    }

    /// The rows of `redis_pubsub.messages` that carry the transaction's PUBLISHed messages, its
    /// keyspace events and marks (one row per slot, in slot order); whether there are any.
    pub(crate) async fn pubsub_ops(&self, cx: &mut Cx) -> Result<(Vec<KeyOp>, bool), TernError> {
        if cx.notify & crate::keyspace::NEW != 0 {
            self.new_key_events(cx).await?;
        }
        // (Events past a row's `MESSAGE_MAX` are dropped: delivery is at most once.)
        for ev in std::mem::take(&mut cx.events) {
            for (c, m) in crate::keyspace::messages(cx.notify, &ev) {
                cx.add_message(c, m);
            }
        }
        for (db, k) in std::mem::take(&mut cx.marks) {
            cx.add_mark(db, k);
        }
        if cx.pubs.is_empty() {
            return Ok((Vec::new(), false));
        }
        let mut slots: Vec<u64> = cx.pubs.keys().copied().collect();
        slots.sort_unstable();
        let mut ops = Vec::with_capacity(slots.len());
        for slot in slots {
            ops.push(self.pubsub.publish_op(slot, &cx.pubs[&slot].0).await?);
        }
        Ok((ops, true))
    }

    /// Deletes the rows replaced values left behind, in the background.
    pub(crate) fn collect(&self, garbage: Vec<(Arc<Db>, Meta)>) {
        if garbage.is_empty() {
            return;
        }
        let Some(me) = self.me() else { return };
        tokio::spawn(async move {
            for (db, old) in garbage {
                if let Err(e) = me.cleanup_now(&db, &old).await {
                    tracing::warn!("cleaning up rows of an old value failed: {}", e.0);
                }
            }
        });
    }
}

/// Operations per data-node batch at most (the wire allows 16,384).
pub const BATCH_OPS_MAX: usize = 4096;
/// Row and key bytes per data-node batch at most.
pub const BATCH_BYTES_MAX: usize = 16 << 20;

/// Operations of a transaction in batches bounded by `BATCH_OPS_MAX` and `BATCH_BYTES_MAX` (a
/// command may carry any number of keys); `exec` applies to the last batch, the others leave the
/// transaction open.
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
    exec_ordered_with(client, t, ops, AbortOption::AbortOnError, true).await
}

/// `exec_ordered` with a choice of abort option, committing with the last batch when `commit`.
pub async fn exec_ordered_with(
    client: &tern_client::Client,
    t: &mut Transaction,
    ops: Vec<KeyOp>,
    abort: AbortOption,
    commit: bool,
) -> Result<Vec<OpResult>, TernError> {
    if ops.is_empty() {
        return Ok(Vec::new());
    }
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
        let exec = if last && commit { Exec::Commit } else { Exec::NoCommit };
        let rs = t.execute_with(batch, exec, abort).await?;
        for (j, r) in idx.into_iter().zip(rs) {
            results[j] = Some(r);
        }
        if last {
            break;
        }
    }
    Ok(results.into_iter().map(|r| r.unwrap_or(OpResult::Done)).collect())
}

/// A concurrent writer replaced a value between two reads of one transaction: retry it.
pub(crate) fn changed() -> Fail {
    Fail::Txn(TernError::new(tern_client::ErrorCode::Deadlock, "the value changed while it was read"))
}

// ------------------------------------------------------------------ MULTI / EXEC / WATCH

/// A connection between MULTI and EXEC: the commands queued, and whether one was refused (EXEC
/// then discards the transaction, as redis-server does).
#[derive(Debug, Default)]
pub struct Multi {
    pub queued: Vec<Vec<Vec<u8>>>,
    bytes: usize,
    pub failed: bool,
}

/// (database, key) -> the flags of its watchers.
type WatchMap = HashMap<(u32, Vec<u8>), Vec<Arc<AtomicBool>>>;

/// The keys some connection watches, each with the flags of its watchers. A write marks the
/// flags of its keys as soon as it has locked them (before its commit), so an EXEC that locks
/// a watched key after that write sees the mark; a write that then fails marks them needlessly
/// (EXEC answers null when it need not, which WATCH allows).
#[derive(Debug, Default)]
pub struct Watches {
    map: std::sync::Mutex<WatchMap>,
    /// Entries of `map`: writes skip the lock while nobody watches.
    count: AtomicUsize,
}

impl Watches {
    /// A write to `key` of database `db`.
    pub fn touch(&self, db: u32, key: &[u8]) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        if let Some(flags) = lock(&self.map).get(&(db, key.to_vec())) {
            flags.iter().for_each(|f| f.store(true, Ordering::Release));
        }
    }

    fn add(&self, db: u32, key: &[u8], flag: &Arc<AtomicBool>) {
        let mut m = lock(&self.map);
        let v = m.entry((db, key.to_vec())).or_default();
        if !v.iter().any(|f| Arc::ptr_eq(f, flag)) {
            v.push(flag.clone());
        }
        self.count.store(m.len(), Ordering::Release);
    }

    fn remove(&self, db: u32, key: &[u8], flag: &Arc<AtomicBool>) {
        let mut m = lock(&self.map);
        if let Some(v) = m.get_mut(&(db, key.to_vec())) {
            v.retain(|f| !Arc::ptr_eq(f, flag));
            if v.is_empty() {
                m.remove(&(db, key.to_vec()));
            }
        }
        self.count.store(m.len(), Ordering::Release);
    }
}

/// A connection's watched keys with a digest of their key rows as WATCH read them (None:
/// absent; a digest keeps the memory of WATCH small whatever the rows hold); leaves the registry
/// when dropped (UNWATCH, EXEC, DISCARD, RESET, a closed connection).
#[derive(Debug)]
pub struct Watched {
    reg: Arc<Watches>,
    flag: Arc<AtomicBool>,
    keys: Vec<(u32, Vec<u8>, Option<[u8; 32]>)>,
}

/// EXEC's null reply: `*-1`, or RESP3's null.
fn null_reply(out: &mut Vec<u8>, resp3: bool) {
    if resp3 {
        out.extend_from_slice(b"_\r\n");
    } else {
        resp::null_array(out);
    }
}

fn row_digest(r: &OpResult) -> Option<[u8; 32]> {
    match r {
        OpResult::Row(b) => Some(tern_types::digest::sha256(b)),
        _ => None,
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        for (db, k, _) in &self.keys {
            self.reg.remove(*db, k, &self.flag);
        }
    }
}

impl Watched {
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

impl Cx {
    /// Locks rows in the front end's global order (EXEC's first batches), whatever the mode.
    async fn lock_ordered(&mut self, ops: Vec<KeyOp>) -> Result<Vec<OpResult>, TernError> {
        self.started = true;
        self.locking = true;
        exec_ordered_with(&self.client, &mut self.t, ops, AbortOption::IgnoreError, false).await
    }
}

/// The (database, key) pairs the queued commands name, following SELECT, COPY ... DB and MOVE
/// into other databases.
fn named_keys(queued: &[Vec<Vec<u8>>], mut db: u32, databases: u32) -> Vec<(u32, Vec<u8>)> {
    let mut keys = Vec::new();
    let index = |a: &[u8]| parse_int(a).filter(|&n| n >= 0 && n < databases as i64).map(|n| n as u32);
    for args in queued {
        let Ok(spec) = super::lookup(args) else { continue };
        match spec.name {
            "select" => db = index(&args[1]).unwrap_or(db),
            "move" => {
                keys.push((db, args[1].clone()));
                if let Some(to) = index(&args[2]) {
                    keys.push((to, args[1].clone()));
                }
            }
            "copy" => {
                let to = args.iter().position(|x| x.eq_ignore_ascii_case(b"db")).and_then(|i| args.get(i + 1));
                keys.push((db, args[1].clone()));
                keys.push((to.and_then(|t| index(t)).unwrap_or(db), args[2].clone()));
            }
            _ => keys.extend(super::keys_of(spec, args).into_iter().map(|k| (db, k.to_vec()))),
        }
    }
    keys.retain(|(_, k)| k.len() <= crate::db::KEY_MAX);
    keys.sort();
    keys.dedup();
    keys
}

impl Server {
    /// MULTI, EXEC, DISCARD, WATCH, UNWATCH, RESET and QUIT: never queued. False: close.
    pub(crate) async fn control(&self, sess: &mut Session, spec: &Spec, args: Vec<Vec<u8>>, out: &mut Vec<u8>) -> bool {
        let in_multi = sess.multi.is_some();
        match spec.name {
            "quit" => {
                resp::simple(out, "OK");
                return false;
            }
            "multi" if in_multi => resp::error(out, "ERR MULTI calls can not be nested"),
            "multi" => {
                sess.multi = Some(Multi::default());
                sess.info.multi.store(0, Ordering::Relaxed);
                resp::simple(out, "OK");
            }
            "exec" if !in_multi => resp::error(out, "ERR EXEC without MULTI"),
            "exec" => self.exec(sess, out).await,
            "discard" if !in_multi => resp::error(out, "ERR DISCARD without MULTI"),
            "discard" => {
                self.end_multi(sess);
                resp::simple(out, "OK");
            }
            "watch" if in_multi => resp::error(out, "ERR WATCH inside MULTI is not allowed"),
            "watch" => match self.watch(sess, &args[1..]).await {
                Ok(()) => resp::simple(out, "OK"),
                Err(e) => resp::error(out, &e.0),
            },
            "unwatch" => {
                self.unwatch(sess);
                resp::simple(out, "OK");
            }
            _ => {
                self.end_multi(sess);
                sess.db = 0;
                sess.resp3 = false;
                sess.info.db.store(0, Ordering::Relaxed);
                sess.info.resp.store(2, Ordering::Relaxed);
                sess.info.set_name(None);
                sess.info.no_evict.store(false, Ordering::Relaxed);
                sess.subs = None;
                sess.info.sub.store(0, Ordering::Relaxed);
                sess.info.psub.store(0, Ordering::Relaxed);
                // Back to the default user, signed in only when it needs no password.
                if let Some(u) = self.acl.user("default") {
                    sess.authed = u.enabled && u.nopass;
                    sess.user = u;
                    sess.info.set_user("default");
                }
                resp::simple(out, "RESET");
            }
        }
        true
    }

    /// Leaves MULTI (the queue goes) and forgets the watched keys.
    fn end_multi(&self, sess: &mut Session) {
        sess.multi = None;
        sess.info.multi.store(-1, Ordering::Relaxed);
        self.unwatch(sess);
    }

    pub(crate) fn unwatch(&self, sess: &mut Session) {
        sess.watch = None;
        sess.info.watching.store(0, Ordering::Relaxed);
    }

    /// Queues a command between MULTI and EXEC (its arity was checked already). The queue counts
    /// against the connection's pending limit.
    pub(crate) fn queue(&self, sess: &mut Session, args: Vec<Vec<u8>>, out: &mut Vec<u8>) {
        let max = self.live.max_pending.load(Ordering::Relaxed);
        let Some(m) = sess.multi.as_mut() else { return };
        m.bytes += args.iter().map(|a| a.len() + crate::resp::ARG_OVERHEAD).sum::<usize>();
        if m.bytes > max {
            m.failed = true;
            m.queued.clear();
            resp::error(out, "ERR the transaction's queued commands are over the query buffer limit");
            return;
        }
        m.queued.push(args);
        sess.info.multi.store(m.queued.len() as i64, Ordering::Relaxed);
        resp::simple(out, "QUEUED");
    }

    /// WATCH: notes each key's row as it is now, and registers for writes through this server.
    async fn watch(&self, sess: &mut Session, keys: &[Vec<u8>]) -> R {
        let db = self.db(sess.db).await?;
        let keys: Vec<&Vec<u8>> = keys.iter().filter(|k| k.len() <= crate::db::KEY_MAX).collect();
        let ops = keys.iter().map(|k| db.keys.read(&[Value::Bytes(k.to_vec())])).collect::<Result<Vec<_>, _>>()?;
        let rows = standalone!(self, |cx| cx.last(ops.clone()).await.map_err(Fail::Txn))?;
        let w = sess.watch.get_or_insert_with(|| Watched {
            reg: self.watches.clone(),
            flag: Arc::new(AtomicBool::new(false)),
            keys: Vec::new(),
        });
        for (k, r) in keys.into_iter().zip(rows) {
            if w.keys.iter().any(|(d, x, _)| *d == db.index && x == k) {
                continue;
            }
            self.watches.add(db.index, k, &w.flag);
            w.keys.push((db.index, k.clone(), row_digest(&r)));
        }
        sess.info.watching.store(w.keys.len(), Ordering::Relaxed);
        Ok(())
    }

    /// EXEC: every queued command in one Tern transaction. The keys the commands name and the
    /// watched keys are locked first (in the global lock order); a watched key whose row differs
    /// from what WATCH read, or that a write through this server marked, makes EXEC answer a null
    /// array with nothing done. A command's error is its reply in the array, the others run; a
    /// failed Tern transaction fails the whole EXEC (nothing is applied), and temporary failures
    /// run it again.
    async fn exec(&self, sess: &mut Session, out: &mut Vec<u8>) {
        let m = sess.multi.take().unwrap_or_default();
        sess.info.multi.store(-1, Ordering::Relaxed);
        let watched = sess.watch.take();
        sess.info.watching.store(0, Ordering::Relaxed);
        if m.failed {
            resp::error(out, "EXECABORT Transaction discarded because of previous errors.");
            return;
        }
        if watched.as_ref().is_some_and(|w| w.flag.load(Ordering::Acquire)) {
            return null_reply(out, sess.resp3);
        }
        let start = out.len();
        let (db0, resp0) = (sess.db, sess.resp3);
        let mut backoff = BACKOFF_FIRST;
        let mut attempt = 0;
        loop {
            let mut cx = Cx::new(&self.client, true, attempt == 0);
            cx.notify = self.pubsub.notify_flags();
            cx.named = named_keys(&m.queued, sess.db, self.opts.databases);
            let r = match self.exec_once(&mut cx, sess, &m.queued, watched.as_ref(), out).await {
                Ok(true) => match self.pubsub_ops(&mut cx).await {
                    Ok((ops, published)) => {
                        let r = cx.commit_with(ops).await.map(Some);
                        if published {
                            self.pubsub.kick();
                        }
                        r
                    }
                    Err(e) => Err(e),
                },
                Ok(false) => Ok(None),
                Err(e) => Err(e),
            };
            match r {
                Ok(Some(garbage)) => return self.collect(garbage),
                Ok(None) => {
                    out.truncate(start);
                    return null_reply(out, sess.resp3);
                }
                Err(e) => {
                    out.truncate(start);
                    (sess.db, sess.resp3) = (db0, resp0);
                    sess.info.db.store(db0, Ordering::Relaxed);
                    if e.is_temporary() && attempt < RETRIES_MAX {
                        attempt += 1;
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(BACKOFF_MAX);
                        continue;
                    }
                    let why = RErr::from(e).0;
                    let why = why.strip_prefix("ERR ").unwrap_or(&why);
                    return resp::error(out, &format!("EXECABORT Transaction discarded because of: {why}"));
                }
            }
        }
    }

    /// One attempt of EXEC; false: a watched key changed.
    async fn exec_once(
        &self,
        cx: &mut Cx,
        sess: &mut Session,
        queued: &[Vec<Vec<u8>>],
        watched: Option<&Watched>,
        out: &mut Vec<u8>,
    ) -> Result<bool, TernError> {
        let mut locks: Vec<(u32, Vec<u8>)> = cx.named.clone();
        if let Some(w) = watched {
            locks.extend(w.keys.iter().map(|(d, k, _)| (*d, k.clone())));
        }
        locks.sort();
        locks.dedup();
        let mut ops = Vec::with_capacity(locks.len());
        for (d, k) in &locks {
            let db = self.db(*d).await.map_err(|e| TernError::new(tern_client::ErrorCode::InvalidRequest, e.0))?;
            let mut op = db.keys.read(&[Value::Bytes(k.clone())])?;
            op.kind = tern_client::OpKind::ReadExclusive;
            ops.push(op);
        }
        let rows = cx.lock_ordered(ops).await?;
        if let Some(w) = watched {
            if w.flag.load(Ordering::Acquire) {
                return Ok(false);
            }
            for (d, k, before) in &w.keys {
                let i = locks.binary_search(&(*d, k.clone())).expect("watched keys are locked");
                if row_digest(&rows[i]) != *before {
                    return Ok(false);
                }
            }
        }
        resp::array_len(out, queued.len());
        for args in queued {
            self.exec_one(cx, sess, args, out).await?;
        }
        Ok(true)
    }

    /// One queued command inside EXEC: its reply (an error reply when it failed alone).
    async fn exec_one(
        &self,
        cx: &mut Cx,
        sess: &mut Session,
        args: &[Vec<u8>],
        out: &mut Vec<u8>,
    ) -> Result<(), TernError> {
        let Ok(spec) = super::lookup(args) else {
            resp::error(out, "ERR unknown command");
            return Ok(());
        };
        let t0 = std::time::Instant::now();
        let start = out.len();
        let r = match spec.kind {
            Kind::Read | Kind::Write => match self.db(sess.db).await {
                Ok(db) => match self.data_command(cx, sess, &db, spec.name, args, out).await {
                    Ok(()) => Ok(()),
                    Err(Fail::Reply(e)) => Err(e),
                    Err(Fail::Txn(e)) => return Err(e),
                },
                Err(e) => Err(e),
            },
            _ => self.dispatch(sess, spec.name, args, out).await,
        };
        if let Err(e) = r {
            out.truncate(start);
            resp::error(out, &e.0);
        }
        self.resp3(sess, spec, args, out, start);
        self.stats.record(spec, t0.elapsed(), out.get(start..).unwrap_or(&[]));
        if self.monitoring.load(Ordering::Relaxed) > 0 {
            self.feed_monitors(sess, spec, args);
        }
        Ok(())
    }
}
