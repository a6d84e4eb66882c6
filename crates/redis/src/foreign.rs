//! Keyspace events of writes that did not come through a Redis command (SQL, REST, the native
//! client) to the tables of the `redis_N` databases, found in the change log by the pub/sub
//! poller (`crate::pubsub`) and handed to this API server's subscribers only (every API server
//! with subscribers derives them from its own log, so none is published twice).
//!
//! A change is held until every ldm has sent the epoch's mark (all of the epoch's changes and
//! marks are in then), so a key that a Redis command of the same epoch wrote — its mark came
//! with the command's messages — raises no second, generic event. Key rows come first: they
//! name the `rondb_key` of member rows, which are otherwise found by a scan of `string_keys`
//! (remembered, up to `IDS_MAX` of them).

use crate::db::{self, K_ID, K_KEY, K_TYPE};
use crate::keyspace::{self, Event, Part};
use std::collections::{BTreeMap, HashMap, HashSet};
use tern_client::{Client, CmpOp, Filter, ScanSpec, TableHandle, TableId, Value};

/// `rondb_key`s remembered (their key and type, or that no key has them).
const IDS_MAX: usize = 1 << 20;
/// Scans for unknown `rondb_key`s one epoch may make (further member rows of unknown keys in
/// that epoch raise no event).
const SCANS_PER_EPOCH: usize = 64;

/// A `redis_N` table whose changes raise events.
#[derive(Clone)]
pub struct Watched {
    pub db: u32,
    pub part: Part,
    pub table: TableHandle,
}

/// A key and its type (`db::TYPE_*`).
type Owner = (Vec<u8>, u8);

/// One change held until its epoch is complete.
struct Change {
    table: TableId,
    put: bool,
    expired: bool,
    bytes: Vec<u8>,
}

#[derive(Default)]
pub struct Deriver {
    /// The newest epoch mark of each ldm (node, ldm).
    marks: BTreeMap<(u16, u16), u64>,
    pending: BTreeMap<u64, Vec<Change>>,
    /// Keys Redis commands wrote, per epoch.
    marked: BTreeMap<u64, HashSet<(u32, Vec<u8>)>>,
    /// (database, rondb_key) -> its key and type; None: no key has it (any more).
    ids: HashMap<(u32, u64), Option<Owner>>,
    /// (database, key) -> the rondb_key its row had when last seen.
    key_ids: HashMap<(u32, Vec<u8>), u64>,
}

impl Deriver {
    pub fn mark(&mut self, node: u16, ldm: u16, epoch: u64) {
        let m = self.marks.entry((node, ldm)).or_insert(0);
        *m = (*m).max(epoch);
    }

    pub fn marked(&mut self, epoch: u64, keys: Vec<(u32, Vec<u8>)>) {
        self.marked.entry(epoch).or_default().extend(keys);
    }

    pub fn change(&mut self, epoch: u64, table: TableId, put: bool, expired: bool, bytes: Vec<u8>) {
        self.pending.entry(epoch).or_default().push(Change { table, put, expired, bytes });
    }

    /// Forgets what it held (the log starts again: what it missed is missed).
    pub fn reset(&mut self) {
        self.marks.clear();
        self.pending.clear();
        self.marked.clear();
    }

    /// The events of every epoch all ldms have completed, in epoch order.
    pub async fn complete(&mut self, client: &Client, watched: &HashMap<TableId, Watched>) -> Vec<Event> {
        let done = self.marks.values().copied().min().unwrap_or(0);
        let mut out = Vec::new();
        while let Some((&epoch, _)) = self.pending.first_key_value() {
            if epoch > done {
                break;
            }
            let changes = self.pending.remove(&epoch).unwrap_or_default();
            let marked = self.marked.remove(&epoch).unwrap_or_default();
            out.extend(self.epoch(client, watched, changes, &marked).await);
        }
        // Marks of epochs with no change of their own.
        while let Some((&epoch, _)) = self.marked.first_key_value() {
            if epoch > done {
                break;
            }
            self.marked.remove(&epoch);
        }
        if self.ids.len() > IDS_MAX {
            self.ids.clear();
            self.key_ids.clear();
        }
        out
    }

    async fn epoch(
        &mut self,
        client: &Client,
        watched: &HashMap<TableId, Watched>,
        changes: Vec<Change>,
        marked: &HashSet<(u32, Vec<u8>)>,
    ) -> Vec<Event> {
        let mut out: Vec<Event> = Vec::new();
        let mut seen: HashSet<(u32, Vec<u8>, &'static str)> = HashSet::new();
        let mut push = |out: &mut Vec<Event>, db: u32, key: Vec<u8>, ev: Option<(u32, &'static str)>| {
            if let Some((class, name)) = ev
                && !marked.contains(&(db, key.clone()))
                && seen.insert((db, key.clone(), name))
            {
                out.push(Event { class, name, db, key });
            }
        };
        // Key rows first: they name the rondb_keys of member rows.
        for c in changes.iter().filter(|c| watched.get(&c.table).is_some_and(|w| w.part == Part::Keys)) {
            let w = &watched[&c.table];
            if c.put {
                let Ok(v) = w.table.decode_row(&c.bytes) else { continue };
                let (Value::Bytes(key), Some(id), Some(kind)) = (
                    v[K_KEY as usize].clone(),
                    v[K_ID as usize].as_i128().map(|i| i as u64),
                    v[K_TYPE as usize].as_i128().map(|i| i as u8),
                ) else {
                    continue;
                };
                if let Some(old) = self.key_ids.insert((w.db, key.clone()), id)
                    && old != id
                {
                    self.ids.insert((w.db, old), None);
                }
                if id != 0 {
                    self.ids.insert((w.db, id), Some((key.clone(), kind)));
                }
                push(&mut out, w.db, key, keyspace::derived(Part::Keys, kind, true, false));
            } else {
                let Ok(mut k) = w.table.decode_key(&c.bytes) else { continue };
                let Value::Bytes(key) = k.remove(0) else { continue };
                if let Some(old) = self.key_ids.remove(&(w.db, key.clone())) {
                    self.ids.insert((w.db, old), None);
                }
                push(&mut out, w.db, key, keyspace::derived(Part::Keys, 0, false, c.expired));
            }
        }
        let mut scans = 0;
        for c in changes.iter().filter(|c| watched.get(&c.table).is_some_and(|w| w.part != Part::Keys)) {
            let w = &watched[&c.table];
            let id = if c.put {
                w.table.decode_row(&c.bytes).ok().and_then(|v| v.first().and_then(Value::as_i128))
            } else {
                w.table.decode_key(&c.bytes).ok().and_then(|v| v.first().and_then(Value::as_i128))
            };
            let Some(id) = id.map(|i| i as u64) else { continue };
            let known = match self.ids.get(&(w.db, id)) {
                Some(k) => k.clone(),
                None if scans < SCANS_PER_EPOCH => {
                    scans += 1;
                    let found = self.owner(client, watched, w.db, id).await;
                    self.ids.insert((w.db, id), found.clone());
                    found
                }
                None => None,
            };
            let Some((key, kind)) = known else { continue };
            push(&mut out, w.db, key, keyspace::derived(w.part, kind, c.put, c.expired));
        }
        out
    }

    /// The key (and type) whose row has `rondb_key` = `id` in database `db`: a scan of
    /// `string_keys` filtered in the data nodes.
    async fn owner(&self, client: &Client, watched: &HashMap<TableId, Watched>, db: u32, id: u64) -> Option<Owner> {
        let keys = watched.values().find(|w| w.db == db && w.part == Part::Keys)?;
        let mut spec = ScanSpec::table(keys.table.id());
        spec.filter = Filter::Cmp { col: K_ID, op: CmpOp::Eq, value: Value::UInt(id) };
        spec.projection = Some(vec![K_KEY, K_TYPE]);
        spec.limit = 1;
        let rows = client.scan(spec).collect().await.ok()?;
        let v = keys.table.decode_projection(&[K_KEY, K_TYPE], rows.first()?).ok()?;
        Some((db::bytes_of(v[0].clone()), v[1].as_i128()? as u8))
    }
}

/// The `redis_N` tables of the catalog, by id.
pub fn watched_tables(client: &Client) -> HashMap<TableId, Watched> {
    let mut out = HashMap::new();
    let cat = client.catalog();
    for t in cat.tables.values() {
        let Some(db) = t.database.strip_prefix("redis_").and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Some(part) = Part::of(&t.name) else { continue };
        if let Ok(table) = client.table(&t.database, &t.name) {
            out.insert(t.id, Watched { db, part, table });
        }
    }
    out
}
