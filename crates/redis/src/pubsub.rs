//! Pub/sub across the cluster. A PUBLISH is a write of one row of the replicated table
//! `redis_pubsub.messages` in the publishing command's transaction (so a PUBLISH inside
//! MULTI/EXEC commits with the rest). Every Redis API server that has subscribers reads the
//! table's changes from the data nodes' change log (`Request::Log` limited to this table) and
//! hands each committed message to its own subscribers, so a message published on any API server
//! reaches subscribers on every one.
//!
//! Order: a channel's row is `slot` = a hash of the channel, so every message of a channel lives
//! in one partition, whose primary replica logs its commits in commit order; a poll returns each
//! ldm's entries in that order. Publishers of one channel serialise on the row lock. Two
//! PUBLISHes of one channel in one transaction share the row: it holds the transaction's messages
//! for the slot in order (`batch`).
//!
//! Delivery is at most once, as redis-server's: a subscriber that connects after a commit misses
//! it, and a change log that fails (a data node failed or restarted, so primaries move) is
//! started again, losing what was committed in between. Subscription state — which connection
//! listens to what, PUBSUB NUMSUB / CHANNELS / NUMPAT and PUBLISH's count — is per API server,
//! as per node in Redis Cluster. A subscriber that does not read its messages is disconnected
//! when more than `OUTPUT_MAX` bytes wait for it (redis-server's `client-output-buffer-limit
//! pubsub 32mb`).
//!
//! Rows expire (`TTL=0@expires`, `ROW_TTL_MS` after the last message) and the data node purges
//! them, so the table holds about one row per channel published to in the last minute.

use crate::clients::{ClientInfo, lock};
use crate::foreign::{Deriver, Watched};
use crate::glob::Glob;
use crate::keyspace;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tern_client::{
    Client, Column, ColumnType, DdlReq, ErrorCode, KeyOp, LogEntry, LogOp, Table, TableHandle, TableId, TernError,
    Value,
};
use tern_types::schema::Ttl;

/// The SQL database of pub/sub's tables.
pub const DATABASE: &str = "redis_pubsub";
pub const MESSAGES: &str = "messages";
/// A slot's messages of one transaction (channels, payloads and 8 bytes each) at most: what
/// the row's BLOBs hold.
pub const MESSAGE_MAX: usize = BATCH_PARTS * PART_MAX;
/// Bytes of messages that may wait for one subscriber before it is disconnected.
pub const OUTPUT_MAX: usize = 32 << 20;
/// How long a channel's row outlives its last message.
const ROW_TTL_MS: i64 = 60_000;
/// The change log's number on this API server's data-node connection.
const LOG_SUB: u64 = 0x5055_4253_5542;
/// Bytes a poll may return.
const POLL_BYTES: u32 = 4 << 20;
/// A poll that found nothing waits this long at most before the next (a local PUBLISH wakes
/// it at once).
const POLL_IDLE_MAX: Duration = Duration::from_millis(10);
/// With no subscriber for this long, the log stops.
const LOG_LINGER: Duration = Duration::from_secs(10);
/// How often the poller looks whether its log's tables are to change.
const RECHECK: Duration = Duration::from_secs(1);
/// Reads of the settings between two looks for a settings table that is not in this API server's
/// catalog yet (one made by another API server is seen within `LOOK_EVERY` × `keyspace::REFRESH`).
const LOOK_EVERY: u64 = 20;
/// The settings table (one row per setting) and the row of `notify-keyspace-events`.
pub const SETTINGS: &str = "settings";
const NOTIFY_SETTING: &str = "notify-keyspace-events";
/// Message ids remembered to drop a message a moving partition's two ldms both logged.
const SEEN_MAX: usize = 1 << 16;

// messages' columns: then `BATCH_PARTS` BLOBs (up to 65,535 bytes each) holding the batch.
const C_SLOT: u16 = 0;
const C_ID: u16 = 1;
const C_EXPIRES: u16 = 2;
const C_BATCH: usize = 3;
const BATCH_PARTS: usize = 128;
/// A BLOB holds at most this many bytes.
const PART_MAX: usize = 65_535;

/// The table definition.
pub fn definition() -> Table {
    Table {
        id: 0,
        database: DATABASE.into(),
        name: MESSAGES.into(),
        columns: vec![
            Column::new("slot", ColumnType::BigInt { unsigned: true }).not_null(),
            Column::new("id", ColumnType::BigInt { unsigned: true }).not_null(),
            Column::new("expires", ColumnType::DateTime { fsp: 3 }),
        ]
        .into_iter()
        .chain((0..BATCH_PARTS).map(|i| Column::new(&format!("batch_{i}"), ColumnType::Blob)))
        .collect(),
        primary_key: vec![C_SLOT],
        partition_key: vec![C_SLOT],
        indexes: vec![],
        partition_count: 0,
        groups: 0,
        ttl: Some(Ttl { column: C_EXPIRES, seconds: 0, cascade: vec![] }),
        comment: "NDB_TABLE=TTL=0@expires".into(),
    }
}

/// The settings table: cluster-wide Redis settings (`notify-keyspace-events`).
pub fn settings_definition() -> Table {
    Table {
        id: 0,
        database: DATABASE.into(),
        name: SETTINGS.into(),
        columns: vec![
            Column::new("name", ColumnType::VarBinary { len: 64 }).not_null(),
            Column::new("value", ColumnType::VarBinary { len: 1024 }).not_null(),
        ],
        primary_key: vec![0],
        partition_key: vec![0],
        indexes: vec![],
        partition_count: 0,
        groups: 0,
        ttl: None,
        comment: String::new(),
    }
}

/// The messages table, created when missing.
pub async fn open(client: &Client) -> Result<TableHandle, TernError> {
    if let Ok(t) = client.table(DATABASE, MESSAGES) {
        return Ok(t);
    }
    client.ddl_async(DdlReq::CreateDatabase { name: DATABASE.into(), if_not_exists: true }).await?;
    match client.ddl_async(DdlReq::CreateTable { table: definition(), if_not_exists: true }).await {
        Ok(_) => {}
        Err(e) if e.code == ErrorCode::TableExists => {}
        Err(e) => return Err(e),
    }
    client.refresh_catalog_async().await?;
    client.table(DATABASE, MESSAGES)
}

/// A channel's row: FNV-1a of its name (stable across processes and versions).
pub fn slot_of(channel: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in channel {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// What one transaction writes to one slot's row: its messages in publish order, and the keys
/// its Redis commands wrote whose keyspace channel is in this slot (`crate::keyspace`'s marks:
/// a key marked in an epoch raises no event derived from the change log).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SlotBatch {
    pub msgs: Batch,
    pub marks: Vec<(u32, Vec<u8>)>,
}

impl SlotBatch {
    /// Bytes of the encoded batch.
    pub fn size(&self) -> usize {
        self.msgs.iter().map(|(c, m)| 9 + c.len() + m.len()).sum::<usize>()
            + self.marks.iter().map(|(_, k)| 9 + k.len()).sum::<usize>()
    }
}

/// `[0][u32 channel length][channel][u32 message length][message]` for each message, then
/// `[1][u32 database][u32 key length][key]` for each mark.
pub fn encode_batch(b: &SlotBatch) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.size());
    for (c, m) in &b.msgs {
        out.push(0);
        out.extend_from_slice(&(c.len() as u32).to_le_bytes());
        out.extend_from_slice(c);
        out.extend_from_slice(&(m.len() as u32).to_le_bytes());
        out.extend_from_slice(m);
    }
    for (db, k) in &b.marks {
        out.push(1);
        out.extend_from_slice(&db.to_le_bytes());
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(k);
    }
    out
}

/// Reads what `encode_batch` wrote (None: not a batch, e.g. a row SQL wrote).
pub fn decode_batch(mut b: &[u8]) -> Option<SlotBatch> {
    let mut out = SlotBatch::default();
    let u32_of = |b: &mut &[u8]| -> Option<u32> {
        let n = u32::from_le_bytes(b.get(..4)?.try_into().ok()?);
        *b = &b[4..];
        Some(n)
    };
    let take = |b: &mut &[u8]| -> Option<Vec<u8>> {
        let n = u32_of(b)? as usize;
        let v = b.get(..n)?.to_vec();
        *b = &b[n..];
        Some(v)
    };
    while let Some((&kind, rest)) = b.split_first() {
        b = rest;
        match kind {
            0 => {
                let c = take(&mut b)?;
                let m = take(&mut b)?;
                out.msgs.push((c, m));
            }
            1 => {
                let db = u32_of(&mut b)?;
                out.marks.push((db, take(&mut b)?));
            }
            _ => return None,
        }
    }
    Some(out)
}

/// One message as delivered.
#[derive(Debug)]
pub struct Msg {
    pub channel: Vec<u8>,
    pub payload: Vec<u8>,
}

/// What waits for a subscriber: a message of a channel it subscribed to, or of one matching a
/// pattern it subscribed to.
#[derive(Debug, Clone)]
pub enum Delivery {
    Message(Arc<Msg>),
    PMessage(Arc<[u8]>, Arc<Msg>),
    /// Bytes sent as they are (a MONITOR line).
    Raw(Arc<[u8]>),
}

impl Delivery {
    fn size(&self) -> usize {
        match self {
            Delivery::Message(m) => m.channel.len() + m.payload.len() + 32,
            Delivery::PMessage(p, m) => p.len() + m.channel.len() + m.payload.len() + 48,
            Delivery::Raw(b) => b.len(),
        }
    }

    /// Appends the push (`*3 message channel payload` / `*4 pmessage pattern channel payload`,
    /// `>` for `*` in RESP3).
    pub fn encode(&self, resp3: bool, out: &mut Vec<u8>) {
        let head = |out: &mut Vec<u8>, n: usize| {
            out.push(if resp3 { b'>' } else { b'*' });
            out.extend_from_slice(format!("{n}\r\n").as_bytes());
        };
        match self {
            Delivery::Message(m) => {
                head(out, 3);
                crate::resp::bulk(out, b"message");
                crate::resp::bulk(out, &m.channel);
                crate::resp::bulk(out, &m.payload);
            }
            Delivery::PMessage(p, m) => {
                head(out, 4);
                crate::resp::bulk(out, b"pmessage");
                crate::resp::bulk(out, p);
                crate::resp::bulk(out, &m.channel);
                crate::resp::bulk(out, &m.payload);
            }
            Delivery::Raw(b) => out.extend_from_slice(b),
        }
    }
}

/// A subscribed connection's queue of messages, filled by the log's poller and emptied by the
/// connection's task.
pub struct Mailbox {
    q: Mutex<(VecDeque<Delivery>, usize)>,
    pub wake: tokio::sync::Notify,
    info: Arc<ClientInfo>,
}

impl Mailbox {
    fn push(&self, d: Delivery) {
        let mut q = lock(&self.q);
        if q.1 > OUTPUT_MAX {
            return;
        }
        q.1 += d.size();
        q.0.push_back(d);
        if q.1 > OUTPUT_MAX {
            // redis-server: "client ... scheduled to be closed ASAP for overcoming of output
            // buffer limits"; what waits is dropped with the connection.
            tracing::info!(
                id = self.info.id,
                "a subscriber is disconnected: over {} MiB of messages waited for it",
                OUTPUT_MAX >> 20
            );
            q.0.clear();
            self.info.kill();
        }
        drop(q);
        self.wake.notify_one();
    }

    /// Queues bytes to send as they are (MONITOR's lines).
    pub fn push_raw(&self, b: Arc<[u8]>) {
        self.push(Delivery::Raw(b));
    }

    /// Appends what waits (at most `max` bytes of it) to `out`; whether more waits.
    pub fn drain(&self, resp3: bool, out: &mut Vec<u8>, max: usize) -> bool {
        let mut q = lock(&self.q);
        let start = out.len();
        while out.len() - start < max {
            let Some(d) = q.0.pop_front() else { break };
            q.1 -= d.size();
            d.encode(resp3, out);
        }
        !q.0.is_empty()
    }
}

/// A connection's subscriptions. Dropping it (the connection ended) removes them.
pub struct Subs {
    pub mailbox: Arc<Mailbox>,
    pub channels: BTreeSet<Vec<u8>>,
    pub patterns: BTreeSet<Vec<u8>>,
    /// MONITOR's lines come to this mailbox too.
    pub monitor: bool,
    hub: Weak<PubSub>,
}

impl Subs {
    pub fn count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }
}

impl Drop for Subs {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            let id = self.mailbox.info.id;
            let mut r = lock(&hub.reg);
            for c in std::mem::take(&mut self.channels) {
                r.remove_channel(&c, id);
            }
            for p in std::mem::take(&mut self.patterns) {
                r.remove_pattern(&p, id);
            }
        }
    }
}

/// The mailboxes of one channel's or pattern's subscribers, by connection id.
type Boxes = BTreeMap<u64, Arc<Mailbox>>;
/// A slot's messages of one transaction: (channel, message) in publish order.
pub type Batch = Vec<(Vec<u8>, Vec<u8>)>;

#[derive(Default)]
struct Reg {
    channels: HashMap<Vec<u8>, Boxes>,
    patterns: BTreeMap<Vec<u8>, (Glob, Boxes)>,
    /// The log's poller runs.
    polling: bool,
}

impl Reg {
    fn remove_channel(&mut self, c: &[u8], id: u64) {
        if let Some(m) = self.channels.get_mut(c) {
            m.remove(&id);
            if m.is_empty() {
                self.channels.remove(c);
            }
        }
    }

    fn remove_pattern(&mut self, p: &[u8], id: u64) {
        if let Some((_, m)) = self.patterns.get_mut(p) {
            m.remove(&id);
            if m.is_empty() {
                self.patterns.remove(p);
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.channels.is_empty() && self.patterns.is_empty()
    }

    /// Receivers of a message on `channel` (PUBLISH's count).
    fn receivers(&self, channel: &[u8]) -> usize {
        self.channels.get(channel).map_or(0, |m| m.len())
            + self.patterns.values().filter(|(g, _)| g.matches(channel)).map(|(_, m)| m.len()).sum::<usize>()
    }
}

/// This API server's pub/sub: its subscribers and the change log that brings every API
/// server's messages.
pub struct PubSub {
    client: Client,
    reg: Mutex<Reg>,
    /// A local PUBLISH: poll now.
    kick: tokio::sync::Notify,
    /// True while a log runs that started after every subscription made so far.
    ready: tokio::sync::watch::Sender<bool>,
    table: Mutex<Option<TableHandle>>,
    /// Message ids: this process's random high half, a counter in the low half.
    next_id: AtomicU64,
    me: Weak<PubSub>,
    /// Messages delivered (INFO's `pubsub` figures, tests).
    pub delivered: AtomicU64,
    /// `notify-keyspace-events` (`crate::keyspace` flags), the cluster's as last read.
    notify: AtomicU32,
    settings: Mutex<Option<TableHandle>>,
    refreshing: AtomicBool,
}

impl PubSub {
    pub fn new(client: Client) -> Arc<PubSub> {
        let nonce = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(std::process::id() as u64);
            h.finish()
        };
        Arc::new_cyclic(|me| PubSub {
            client,
            reg: Mutex::default(),
            kick: tokio::sync::Notify::new(),
            ready: tokio::sync::watch::Sender::new(false),
            table: Mutex::new(None),
            next_id: AtomicU64::new(nonce << 32),
            me: me.clone(),
            delivered: AtomicU64::new(0),
            notify: AtomicU32::new(0),
            settings: Mutex::new(None),
            refreshing: AtomicBool::new(false),
        })
    }

    pub async fn table(&self) -> Result<TableHandle, TernError> {
        if let Some(t) = lock(&self.table).clone() {
            return Ok(t);
        }
        let t = open(&self.client).await?;
        *lock(&self.table) = Some(t.clone());
        Ok(t)
    }

    /// The write of a slot's messages of one transaction (all of them, in order).
    pub async fn publish_op(&self, slot: u64, b: &SlotBatch) -> Result<KeyOp, TernError> {
        let t = self.table().await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let batch = encode_batch(b);
        let mut row =
            vec![Value::UInt(slot), Value::UInt(id), crate::db::expiry_value(Some(crate::db::now_ms() + ROW_TTL_MS))];
        let mut parts = batch.chunks(PART_MAX).map(|c| Value::Bytes(c.to_vec()));
        row.extend((0..BATCH_PARTS).map(|_| parts.next().unwrap_or(Value::Null)));
        t.write_owned(row)
    }

    /// A local PUBLISH committed (or is about to): the poller looks now.
    pub fn kick(&self) {
        self.kick.notify_one();
    }

    /// Subscribers on this API server a message on `channel` reaches.
    pub fn receivers(&self, channel: &[u8]) -> usize {
        lock(&self.reg).receivers(channel)
    }

    /// A fresh, empty set of subscriptions for connection `info`.
    pub fn subs(&self, info: Arc<ClientInfo>) -> Subs {
        Subs {
            mailbox: Arc::new(Mailbox { q: Mutex::default(), wake: tokio::sync::Notify::new(), info }),
            channels: BTreeSet::new(),
            patterns: BTreeSet::new(),
            monitor: false,
            hub: self.me.clone(),
        }
    }

    /// Adds subscriptions; once this returns, every message committed afterwards reaches them
    /// (the log runs; waits for its start at most `wait`).
    pub async fn subscribe(&self, s: &mut Subs, channels: &[Vec<u8>], patterns: &[Vec<u8>], wait: Duration) {
        let start = {
            let mut r = lock(&self.reg);
            let id = s.mailbox.info.id;
            for c in channels {
                r.channels.entry(c.clone()).or_default().insert(id, s.mailbox.clone());
                s.channels.insert(c.clone());
            }
            for p in patterns {
                let e = r.patterns.entry(p.clone()).or_insert_with(|| (Glob::new(p, false), BTreeMap::new()));
                e.1.insert(id, s.mailbox.clone());
                s.patterns.insert(p.clone());
            }
            !std::mem::replace(&mut r.polling, true)
        };
        if start && let Some(me) = self.me.upgrade() {
            tokio::spawn(me.poll_loop());
        }
        let mut rx = self.ready.subscribe();
        let _ = tokio::time::timeout(wait, rx.wait_for(|r| *r)).await;
    }

    pub fn unsubscribe_channel(&self, s: &mut Subs, c: &[u8]) -> bool {
        let had = s.channels.remove(c);
        if had {
            lock(&self.reg).remove_channel(c, s.mailbox.info.id);
        }
        had
    }

    pub fn unsubscribe_pattern(&self, s: &mut Subs, p: &[u8]) -> bool {
        let had = s.patterns.remove(p);
        if had {
            lock(&self.reg).remove_pattern(p, s.mailbox.info.id);
        }
        had
    }

    /// PUBSUB CHANNELS: active channels (with a subscriber here) matching `pattern`, sorted.
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
        let g = pattern.map(|p| Glob::new(p, false));
        let mut v: Vec<Vec<u8>> =
            lock(&self.reg).channels.keys().filter(|c| g.as_ref().is_none_or(|g| g.matches(c))).cloned().collect();
        v.sort();
        v
    }

    /// PUBSUB NUMSUB's count of one channel.
    pub fn numsub(&self, channel: &[u8]) -> usize {
        lock(&self.reg).channels.get(channel).map_or(0, |m| m.len())
    }

    /// PUBSUB NUMPAT: patterns with a subscriber here.
    pub fn numpat(&self) -> usize {
        lock(&self.reg).patterns.len()
    }

    /// Hands a committed message to the subscribers here.
    fn deliver(&self, channel: Vec<u8>, payload: Vec<u8>) {
        let r = lock(&self.reg);
        let subs = r.channels.get(&channel);
        let pats: Vec<(&Vec<u8>, &Boxes)> =
            r.patterns.iter().filter(|(_, (g, _))| g.matches(&channel)).map(|(p, (_, m))| (p, m)).collect();
        if subs.is_none() && pats.is_empty() {
            return;
        }
        let msg = Arc::new(Msg { channel, payload });
        let mut n = 0;
        for mb in subs.into_iter().flat_map(|m| m.values()) {
            mb.push(Delivery::Message(msg.clone()));
            n += 1;
        }
        for (p, m) in pats {
            let p: Arc<[u8]> = Arc::from(&p[..]);
            for mb in m.values() {
                mb.push(Delivery::PMessage(p.clone(), msg.clone()));
                n += 1;
            }
        }
        self.delivered.fetch_add(n, Ordering::Relaxed);
    }

    /// The poller: starts the change log, polls it and delivers, starts it again after a
    /// failure, and ends once nobody has subscribed for `LOG_LINGER`. With keyspace
    /// notifications on, the log also has the `redis_N` tables, whose changes that no Redis
    /// command marked raise events here (`crate::foreign`).
    async fn poll_loop(self: Arc<Self>) {
        let mut seen = Seen::default();
        let mut derive = Deriver::default();
        // The log's number: LOG_SUB or the next, alternating when its tables change (the new
        // log starts before the old one stops, so nothing committed in between is missed).
        let mut sub = LOG_SUB;
        let mut handover: Option<u64> = None;
        'restart: loop {
            if handover.is_none() {
                self.ready.send_replace(false);
                derive.reset();
            }
            let table = match self.table().await {
                Ok(t) => t,
                Err(e) => {
                    tracing::debug!("pub/sub: no messages table yet: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    if self.linger_over(None) {
                        return;
                    }
                    continue;
                }
            };
            let watched = self.watched();
            let mut tables: Vec<TableId> = watched.keys().copied().chain([table.id()]).collect();
            tables.sort_unstable();
            if handover.is_none() {
                // Logs left on the data node by a failed poll go first.
                for s in [LOG_SUB, LOG_SUB + 1] {
                    let _ = self.client.change_log_async(s, LogOp::Stop, 0, vec![]).await;
                }
            }
            if let Err(e) = self.client.change_log_async(sub, LogOp::Start, 0, tables.clone()).await {
                tracing::debug!("pub/sub: the change log did not start: {e}");
                if let Some(old) = handover.take() {
                    let _ = self.client.change_log_async(old, LogOp::Stop, 0, vec![]).await;
                    self.ready.send_replace(false);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                if self.linger_over(None) {
                    return;
                }
                continue;
            }
            // The old log holds what committed before the new one started: read, then stop it.
            if let Some(old) = handover.take() {
                if let Ok(parts) = self.client.change_log_async(old, LogOp::Poll, POLL_BYTES, vec![]).await {
                    self.absorb(parts, &table, &watched, &mut derive, &mut seen);
                }
                let _ = self.client.change_log_async(old, LogOp::Stop, 0, vec![]).await;
            }
            self.ready.send_replace(true);
            let mut idle = Duration::from_millis(1);
            let mut empty_since: Option<std::time::Instant> = None;
            let mut checked = std::time::Instant::now();
            loop {
                let parts = match self.client.change_log_async(sub, LogOp::Poll, POLL_BYTES, vec![]).await {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::info!(
                            "pub/sub: the change log failed ({e}); starting it again (messages committed meanwhile are not delivered)"
                        );
                        continue 'restart;
                    }
                };
                let got = self.absorb(parts, &table, &watched, &mut derive, &mut seen);
                if !watched.is_empty() {
                    let flags = self.notify_flags();
                    for ev in derive.complete(&self.client, &watched).await {
                        for (c, m) in keyspace::messages(flags, &ev) {
                            self.deliver(c, m);
                        }
                    }
                }
                // Keyspace notifications turned on or off, or a database made: the log's tables
                // change (what commits while it starts again is missed).
                if checked.elapsed() >= RECHECK {
                    checked = std::time::Instant::now();
                    let mut now: Vec<TableId> = self.watched().keys().copied().chain([table.id()]).collect();
                    now.sort_unstable();
                    if now != tables {
                        handover = Some(sub);
                        sub = if sub == LOG_SUB { LOG_SUB + 1 } else { LOG_SUB };
                        continue 'restart;
                    }
                }
                if got {
                    idle = Duration::from_millis(1);
                    continue;
                }
                if lock(&self.reg).is_empty() {
                    let since = *empty_since.get_or_insert_with(std::time::Instant::now);
                    if self.linger_over(Some(since)) {
                        self.ready.send_replace(false);
                        let _ = self.client.change_log_async(sub, LogOp::Stop, 0, vec![]).await;
                        return;
                    }
                } else {
                    empty_since = None;
                }
                let kicked = tokio::time::timeout(idle, self.kick.notified()).await.is_ok();
                idle = if kicked { Duration::from_millis(1) } else { (idle * 2).min(POLL_IDLE_MAX) };
            }
        }
    }

    /// Takes a poll's entries: delivers messages, hands marks and changes of `redis_N` tables to
    /// the deriver; whether any came.
    fn absorb(
        &self,
        parts: Vec<tern_client::LogPart>,
        table: &TableHandle,
        watched: &HashMap<TableId, Watched>,
        derive: &mut Deriver,
        seen: &mut Seen,
    ) -> bool {
        let mut got = false;
        for p in parts {
            for e in p.entries {
                match e {
                    LogEntry::Epoch(x) => derive.mark(p.node, p.ldm, x),
                    LogEntry::Put { table: t, row, epoch, .. } if t == table.id() => {
                        got = true;
                        let marks = self.deliver_row(table, &row, seen);
                        if !watched.is_empty() && !marks.is_empty() {
                            derive.marked(epoch, marks);
                        }
                    }
                    LogEntry::Put { table: t, row, epoch, .. } if watched.contains_key(&t) => {
                        got = true;
                        derive.change(epoch, t, true, false, row);
                    }
                    LogEntry::Delete { table: t, key, epoch, expired, .. } if watched.contains_key(&t) => {
                        got = true;
                        derive.change(epoch, t, false, expired, key);
                    }
                    _ => {}
                }
            }
        }
        got
    }

    /// The `redis_N` tables whose changes raise keyspace events (none while notifications are
    /// off).
    fn watched(&self) -> HashMap<TableId, Watched> {
        if self.notify_flags() == 0 { HashMap::new() } else { crate::foreign::watched_tables(&self.client) }
    }

    /// The cluster's `notify-keyspace-events` (`crate::keyspace` flags) as last read.
    pub fn notify_flags(&self) -> u32 {
        self.notify.load(Ordering::Relaxed)
    }

    /// The settings table, created when `create` and missing.
    async fn settings(&self, create: bool) -> Result<Option<TableHandle>, TernError> {
        if let Some(t) = lock(&self.settings).clone() {
            return Ok(Some(t));
        }
        let t = match self.client.table(DATABASE, SETTINGS) {
            Ok(t) => t,
            Err(_) if !create => return Ok(None),
            Err(_) => {
                let _ = self.table().await?;
                match self
                    .client
                    .ddl_async(DdlReq::CreateTable { table: settings_definition(), if_not_exists: true })
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.code == ErrorCode::TableExists => {}
                    Err(e) => return Err(e),
                }
                self.client.refresh_catalog_async().await?;
                self.client.table(DATABASE, SETTINGS)?
            }
        };
        *lock(&self.settings) = Some(t.clone());
        Ok(Some(t))
    }

    /// CONFIG SET notify-keyspace-events: the cluster's setting, for every API server.
    pub async fn set_notify(&self, flags: u32) -> Result<(), TernError> {
        let t = self.settings(true).await?.expect("created");
        let row = vec![
            Value::Bytes(NOTIFY_SETTING.as_bytes().to_vec()),
            Value::Bytes(keyspace::stored_string(flags).into_bytes()),
        ];
        let mut tx = self.client.begin();
        tx.execute_with(vec![t.write_owned(row)?], tern_client::Exec::Commit, tern_client::AbortOption::AbortOnError)
            .await?;
        self.notify.store(flags, Ordering::Relaxed);
        self.kick();
        Ok(())
    }

    /// Reads the cluster's settings again.
    async fn refresh(&self, look: bool) -> Result<(), TernError> {
        if look && lock(&self.settings).is_none() && self.client.table(DATABASE, SETTINGS).is_err() {
            self.client.refresh_catalog_async().await?;
        }
        let Some(t) = self.settings(false).await? else { return Ok(()) };
        let mut tx = self.client.begin();
        let r = tx
            .execute_with(
                vec![t.read(&[Value::Bytes(NOTIFY_SETTING.as_bytes().to_vec())])?],
                tern_client::Exec::Commit,
                tern_client::AbortOption::IgnoreError,
            )
            .await?;
        let flags = match r.into_iter().next() {
            Some(tern_client::OpResult::Row(b)) => {
                let v = t.decode_row(&b)?;
                match &v[1] {
                    Value::Bytes(s) => keyspace::parse_flags(s).unwrap_or(0),
                    _ => 0,
                }
            }
            _ => 0,
        };
        self.notify.store(flags, Ordering::Relaxed);
        Ok(())
    }

    /// Starts reading the cluster's settings every `keyspace::REFRESH` (once per API server).
    pub fn start_refresh(&self) {
        if self.refreshing.swap(true, Ordering::Relaxed) {
            return;
        }
        let me = self.me.clone();
        tokio::spawn(async move {
            let mut tick: u64 = 0;
            loop {
                let Some(hub) = me.upgrade() else { return };
                // A settings table another API server made is looked for in the catalog every
                // `LOOK_EVERY` reads (a catalog read is the data node's whole schema).
                if let Err(e) = hub.refresh(tick.is_multiple_of(LOOK_EVERY)).await {
                    tracing::debug!("redis: reading the cluster's settings failed: {e}");
                }
                drop(hub);
                tick += 1;
                tokio::time::sleep(keyspace::REFRESH).await;
            }
        });
    }

    /// Whether the poller is to end: nobody has subscribed since `since` (None: now) for
    /// `LOG_LINGER`. Ending clears `polling` under the registry's lock, so a subscription made
    /// after that starts a new poller.
    fn linger_over(&self, since: Option<std::time::Instant>) -> bool {
        let mut r = lock(&self.reg);
        let over = r.is_empty() && since.is_none_or(|s| s.elapsed() >= LOG_LINGER);
        if over {
            r.polling = false;
        }
        over
    }

    /// Delivers a committed row's messages; returns its marks.
    fn deliver_row(&self, table: &TableHandle, row: &[u8], seen: &mut Seen) -> Vec<(u32, Vec<u8>)> {
        let Ok(mut v) = table.decode_row(row) else { return Vec::new() };
        if v.len() < C_BATCH {
            return Vec::new();
        }
        let id = v[C_ID as usize].as_i128().unwrap_or(0) as u64;
        if !seen.first(id) {
            return Vec::new();
        }
        let mut bytes = Vec::new();
        for p in v.drain(C_BATCH..) {
            match p {
                Value::Bytes(b) => bytes.extend(b),
                _ => break,
            }
        }
        let Some(batch) = decode_batch(&bytes) else { return Vec::new() };
        for (c, m) in batch.msgs {
            self.deliver(c, m);
        }
        batch.marks
    }
}

/// Recently delivered message ids.
#[derive(Default)]
struct Seen {
    set: HashSet<u64>,
    order: VecDeque<u64>,
}

impl Seen {
    /// True the first time `id` comes.
    fn first(&mut self, id: u64) -> bool {
        if !self.set.insert(id) {
            return false;
        }
        self.order.push_back(id);
        if self.order.len() > SEEN_MAX
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip_and_reject_garbage() {
        let b = SlotBatch {
            msgs: vec![(b"ch".to_vec(), b"hello".to_vec()), (b"".to_vec(), vec![0; 300])],
            marks: vec![(3, b"key".to_vec())],
        };
        assert_eq!(encode_batch(&b).len(), b.size());
        assert_eq!(decode_batch(&encode_batch(&b)).unwrap(), b);
        assert_eq!(decode_batch(&[]).unwrap(), SlotBatch::default());
        assert!(decode_batch(&[0, 5, 0, 0, 0, b'a']).is_none());
        assert!(decode_batch(&[0, 1, 0, 0]).is_none());
        assert!(decode_batch(&[2]).is_none());
    }

    #[test]
    fn slots_are_stable() {
        // FNV-1a's published test vectors.
        assert_eq!(slot_of(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(slot_of(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn seen_ids_are_dropped_once_and_forgotten_eventually() {
        let mut s = Seen::default();
        assert!(s.first(1));
        assert!(!s.first(1));
        for i in 2..(SEEN_MAX as u64 + 3) {
            assert!(s.first(i));
        }
        assert!(s.first(1), "forgotten after SEEN_MAX others");
    }

    #[test]
    fn pushes_in_resp2_and_resp3() {
        let m = Arc::new(Msg { channel: b"c".to_vec(), payload: b"hi".to_vec() });
        let mut out = Vec::new();
        Delivery::Message(m.clone()).encode(false, &mut out);
        assert_eq!(out, b"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$2\r\nhi\r\n");
        out.clear();
        Delivery::PMessage(Arc::from(&b"c*"[..]), m).encode(true, &mut out);
        assert_eq!(out, b">4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$1\r\nc\r\n$2\r\nhi\r\n");
    }
}
