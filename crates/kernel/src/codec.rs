//! The node-to-node codec: a kernel `Signal` and the address it goes to, as the payload of one
//! `tern_wire` frame on a peer connection. Performance-critical: it runs for every signal that
//! crosses data nodes, so encoding appends straight into the link's buffer without temporaries.
//!
//! Byte layout of a payload: `[SIGNAL_FORMAT u8][to: Addr][signal tag u8][body]`, where
//! * integers are fixed width, little endian (`tern_types::bin`); a bool is one byte, 0 or 1;
//! * byte and UTF-8 strings are `[len u32][bytes]`, lists are `[count u32][item]*`;
//! * every enum value starts with one tag byte: the `tag` table below for signals, and for
//!   `Option`/`Result` `0` = `None`/`Ok`, `1` = `Some`/`Err`;
//! * an `Addr` is `[node u16][block tag u8]` followed by `[instance u16]` for tc and ldm;
//! * parts that have a codec of their own are written with it: client requests and replies, key
//!   operations, DDL requests, op results and errors (`tern_wire`), filters, aggregations, tables
//!   and cluster states (`tern_types`). A request, reply or catalog is nested as
//!   `[len u32][its encoding]`, because its decoder takes exactly its own bytes.
//!
//! Versioning: `SIGNAL_FORMAT` changes with any layout change; signal tags are never renumbered
//! or reused (a new variant takes the next free tag). A payload of another format is refused,
//! which drops the link: data nodes of different formats do not talk (no rolling upgrade yet).
//!
//! Decoding never panics and allocates no more than the payload justifies: unknown tags, bad
//! bools and trailing bytes are errors; every count is checked against a named limit and against
//! the bytes left (each item takes at least a known number of bytes) before anything is reserved;
//! filters nest at most `FILTER_DEPTH_MAX` deep. Decoded `Arc`s are fresh (nothing is shared with
//! the sender). Known losses, inherited from the client codecs: a `CreateIndex` request carries no
//! index id (the dict assigns it) and an error code this build does not know becomes `Internal`.
//!
//! Every variant is encodable, including those that today stay inside one node (a client's
//! request, disk completions, timers): they are plain data, and one exhaustive `match` means a
//! new variant cannot be forgotten.

use crate::signal::{
    Addr, Block, DeadlockProbe, PrepOp, PrepareBatch, ScanFrag, ScanFragRows, ScanPos, Signal, TakeoverState, TxnRef,
};
use std::sync::Arc;
use tern_agg::Aggregation;
use tern_types::Catalog;
use tern_types::bin::{Dec, DecodeError, DecodeResult, Enc};
use tern_types::cluster::{ClusterState, DATA_NODES_MAX, NodeId};
use tern_types::filter::Filter;
use tern_wire::{KeyOp, LogOp, Reply, Request};

/// The layout version written first in every payload.
pub const SIGNAL_FORMAT: u8 = 2;

/// Members of a replica chain (at most one per data node).
pub const CHAIN_MAX: usize = DATA_NODES_MAX;
/// Node ids in a list (failed nodes).
pub const NODES_MAX: usize = DATA_NODES_MAX;
/// Per-ldm entries (synced LSNs): ldm instances are numbered by a u16.
pub const LDMS_MAX: usize = 1 << 16;
/// Items of any other list: ops, results and triggers of a batch, rows and keys of a scan or
/// copy batch, transactions of a takeover report. Far above what blocks send (a client batch
/// holds at most `OPS_PER_BATCH_MAX` ops, a scan batch at most `GROUPS_MAX` rows); the frame
/// limit (64 MiB) and the bytes-left check bind first in practice.
pub const ITEMS_MAX: usize = 1 << 22;

/// Smallest encodings of list items, for the bytes-left check before a list is reserved.
const ADDR_BYTES_MIN: usize = 3;
const TXN_REF_BYTES_MIN: usize = ADDR_BYTES_MIN + 8;
/// table, kind, key len, row len, update count, projection tag.
const KEY_OP_BYTES_MIN: usize = 4 + 1 + 4 + 4 + 4 + 1;
/// The smaller of `Exec` (tag, idx, partition, op) and `Replica` (tag, table, partition, key
/// len, row tag).
const PREP_OP_BYTES_MIN: usize = 1 + 4 + 4 + 4 + 1;
const BYTES_BYTES_MIN: usize = 4;

/// Generates the signal tag constants and `ALL`, the list every test checks coverage against.
macro_rules! signal_tags {
    ($($name:ident = $value:literal,)*) => {
        /// One tag byte per `Signal` variant. Wire format: never renumber, never reuse.
        pub mod tag {
            $(pub const $name: u8 = $value;)*
            /// Every tag, in table order.
            pub const ALL: &[u8] = &[$($name),*];
        }
    };
}

signal_tags! {
    CLIENT_REQUEST = 1,
    CLIENT_GONE = 2,
    PREPARE = 3,
    PREPARED = 4,
    COMMIT = 5,
    COMMITTED = 6,
    COMPLETE = 7,
    ABORT = 8,
    ABORTED = 9,
    SCAN_FRAG = 10,
    SCAN_FRAG_ROWS = 11,
    CLUSTER_MAP = 12,
    EPOCH_PREPARE = 13,
    EPOCH_PREPARED = 14,
    EPOCH_COMMIT = 15,
    EPOCH_TC_FINISHED = 16,
    EPOCH_FLUSH = 17,
    EPOCH_FLUSHED = 18,
    EPOCH_SAVE = 19,
    EPOCH_SAVED = 20,
    TAKEOVER_REQ = 21,
    TAKEOVER_CONF = 22,
    TAKEOVER_DONE = 23,
    START_COPY = 24,
    COPY_FRAG_REQ = 25,
    COPY_ROWS = 26,
    COPY_ACK = 27,
    COPY_DONE = 28,
    CATALOG_REQ = 29,
    DIST_STARTED = 30,
    EPOCH_DURABLE = 31,
    DDL = 32,
    DDL_REPLY = 33,
    AUTO_INC = 34,
    SCHEMA = 35,
    SCHEMA_WRITE = 36,
    SCHEMA_WRITTEN = 37,
    SCHEMA_ACK = 38,
    INDEX_BUILD = 39,
    INDEX_BUILT = 40,
    START = 41,
    LDM_READY = 42,
    NODE_STARTED = 43,
    IO_DONE = 44,
    TICK = 45,
    CHECKPOINT_STEP = 46,
    DEADLOCK_PROBE = 47,
    DEADLOCK_VICTIM = 48,
    NODE_HEARTBEAT = 49,
    CATALOG_STORED = 50,
    MGM_CATALOG = 51,
    LOG_REQ = 52,
    LOG_CHUNK = 53,
    LEASE = 54,
    STOP_SERVING = 55,
    EPOCH_WANTED = 56,
    EPOCH_BUSY = 57,
    FAST_OFF = 58,
    RESOLVE = 59,
    COMPLETE_REQ = 60,
}

/// Appends the payload for `sig` addressed to `to`.
pub fn encode_signal(to: Addr, sig: &Signal, out: &mut Vec<u8>) {
    let mut e = Enc::new(out);
    e.u8(SIGNAL_FORMAT);
    enc_addr(&mut e, to);
    enc_signal(&mut e, sig);
}

/// Reads one payload written by `encode_signal`; it must hold exactly one signal.
pub fn decode_signal(payload: &[u8]) -> Result<(Addr, Signal), DecodeError> {
    let mut d = Dec::new(payload);
    if d.u8()? != SIGNAL_FORMAT {
        return Err(DecodeError("unknown signal format"));
    }
    let to = dec_addr(&mut d)?;
    let sig = dec_signal(&mut d)?;
    if !d.is_empty() {
        return Err(DecodeError("trailing bytes after a signal"));
    }
    Ok((to, sig))
}

/// The tag and body of a signal. No wildcard arm: a new variant must be given a layout here.
fn enc_signal(e: &mut Enc, sig: &Signal) {
    match sig {
        Signal::ClientRequest { client, req_id, req } => {
            e.u8(tag::CLIENT_REQUEST);
            e.u64(*client);
            enc_nested(e, |buf| req.encode(*req_id, buf));
        }
        Signal::ClientGone { client } => {
            e.u8(tag::CLIENT_GONE);
            e.u64(*client);
        }
        Signal::Prepare(_)
        | Signal::Prepared(_)
        | Signal::Commit { .. }
        | Signal::Committed { .. }
        | Signal::FastOff { .. }
        | Signal::Resolve { .. }
        | Signal::Complete { .. }
        | Signal::CompleteReq { .. }
        | Signal::Abort { .. }
        | Signal::Aborted { .. } => enc_txn_signal(e, sig),
        Signal::ScanFrag(frag) => {
            e.u8(tag::SCAN_FRAG);
            enc_scan_frag(e, frag);
        }
        Signal::ScanFragRows(rows) => {
            e.u8(tag::SCAN_FRAG_ROWS);
            enc_scan_frag_rows(e, rows);
        }
        Signal::ClusterMap { state } => {
            e.u8(tag::CLUSTER_MAP);
            state.encode(e.buf);
        }
        Signal::Start => e.u8(tag::START),
        Signal::LdmReady { from, synced_lsn } => enc_from_epoch(e, tag::LDM_READY, *from, *synced_lsn),
        Signal::NodeStarted { epoch, durable_epoch } => {
            e.u8(tag::NODE_STARTED);
            e.u64(*epoch);
            e.u64(*durable_epoch);
        }
        Signal::IoDone { token, result } => {
            e.u8(tag::IO_DONE);
            e.u64(*token);
            match result {
                Ok(()) => e.u8(0),
                Err(message) => {
                    e.u8(1);
                    e.str(message);
                }
            }
        }
        Signal::Tick => e.u8(tag::TICK),
        Signal::CheckpointStep => e.u8(tag::CHECKPOINT_STEP),
        Signal::Lease { until_ms } => {
            e.u8(tag::LEASE);
            e.u64(*until_ms);
        }
        Signal::StopServing => e.u8(tag::STOP_SERVING),
        Signal::LogReq { from, sub, call, op, max_bytes, tables } => {
            e.u8(tag::LOG_REQ);
            enc_addr(e, *from);
            e.u64(*sub);
            e.u64(*call);
            e.u8(op.to_u8());
            e.u32(*max_bytes);
            tern_wire::enc_tables(e, tables);
        }
        Signal::LogChunk { from, call, entries, error } => {
            e.u8(tag::LOG_CHUNK);
            enc_addr(e, *from);
            e.u64(*call);
            e.u32(entries.len() as u32);
            entries.iter().for_each(|x| tern_wire::enc_log_entry(e, x));
            match error {
                None => e.u8(0),
                Some(err) => {
                    e.u8(1);
                    tern_wire::enc_err(e, err);
                }
            }
        }
        Signal::DeadlockProbe(p) => {
            e.u8(tag::DEADLOCK_PROBE);
            enc_txn(e, &p.initiator);
            enc_txn(e, &p.target);
            e.u8(p.hops);
            enc_txn(e, &p.victim);
            e.u32(p.victim_batch);
            enc_addr(e, p.victim_at);
        }
        Signal::NodeHeartbeat { from, incarnation } => {
            e.u8(tag::NODE_HEARTBEAT);
            e.u16(*from);
            e.u32(*incarnation);
        }
        Signal::DeadlockVictim { txn, batch } => {
            e.u8(tag::DEADLOCK_VICTIM);
            enc_txn(e, txn);
            e.u32(*batch);
        }
        Signal::EpochPrepare { .. }
        | Signal::EpochWanted { .. }
        | Signal::EpochPrepared { .. }
        | Signal::EpochCommit { .. }
        | Signal::EpochBusy { .. }
        | Signal::EpochTcFinished { .. }
        | Signal::EpochFlush { .. }
        | Signal::EpochFlushed { .. }
        | Signal::EpochSave { .. }
        | Signal::EpochSaved { .. }
        | Signal::EpochDurable { .. } => enc_epoch_signal(e, sig),
        Signal::TakeoverReq { .. }
        | Signal::TakeoverConf { .. }
        | Signal::TakeoverDone { .. }
        | Signal::StartCopy
        | Signal::CopyFragReq { .. }
        | Signal::CopyRows { .. }
        | Signal::CopyAck { .. }
        | Signal::CopyDone { .. }
        | Signal::CatalogReq { .. }
        | Signal::DistStarted { .. } => enc_restart_signal(e, sig),
        Signal::Ddl { .. }
        | Signal::DdlReply { .. }
        | Signal::AutoInc { .. }
        | Signal::Schema { .. }
        | Signal::SchemaWrite { .. }
        | Signal::SchemaWritten { .. }
        | Signal::CatalogStored { .. }
        | Signal::MgmCatalog { .. }
        | Signal::SchemaAck { .. }
        | Signal::IndexBuild { .. }
        | Signal::IndexBuilt { .. } => enc_schema_signal(e, sig),
    }
}

/// The epoch (global checkpoint) protocol signals of `enc_signal`.
fn enc_epoch_signal(e: &mut Enc, sig: &Signal) {
    match sig {
        Signal::EpochPrepare { from, epoch } => enc_from_epoch(e, tag::EPOCH_PREPARE, *from, *epoch),
        Signal::EpochWanted { from, epoch } => enc_from_epoch(e, tag::EPOCH_WANTED, *from, *epoch),
        Signal::EpochPrepared { from, epoch, current } => {
            enc_from_epoch(e, tag::EPOCH_PREPARED, *from, *epoch);
            e.u64(*current);
        }
        Signal::EpochCommit { from, epoch, quiet } => {
            enc_from_epoch(e, tag::EPOCH_COMMIT, *from, *epoch);
            e.bool(*quiet);
        }
        Signal::EpochBusy { from } => {
            e.u8(tag::EPOCH_BUSY);
            enc_addr(e, *from);
        }
        Signal::EpochTcFinished { from, epoch, newest_commit } => {
            enc_from_epoch(e, tag::EPOCH_TC_FINISHED, *from, *epoch);
            e.u64(*newest_commit);
        }
        Signal::EpochFlush { from, epoch, mark } => {
            enc_from_epoch(e, tag::EPOCH_FLUSH, *from, *epoch);
            e.bool(*mark);
        }
        Signal::EpochFlushed { from, epoch, synced_lsn, max_epoch } => {
            enc_from_epoch(e, tag::EPOCH_FLUSHED, *from, *epoch);
            e.u64(*synced_lsn);
            e.u64(*max_epoch);
        }
        Signal::EpochSave { from, epoch, synced_lsn } => {
            enc_from_epoch(e, tag::EPOCH_SAVE, *from, *epoch);
            enc_list(e, synced_lsn, LDMS_MAX, |e, lsn| e.u64(*lsn));
        }
        Signal::EpochSaved { from, epoch } => enc_from_epoch(e, tag::EPOCH_SAVED, *from, *epoch),
        Signal::EpochDurable { epoch } => {
            e.u8(tag::EPOCH_DURABLE);
            e.u64(*epoch);
        }
        _ => unreachable!("enc_signal sends only epoch (global checkpoint) protocol signals here"),
    }
}

/// The takeover and node-restart copy signals of `enc_signal`.
fn enc_restart_signal(e: &mut Enc, sig: &Signal) {
    match sig {
        Signal::TakeoverReq { from, failed, map_version } => {
            e.u8(tag::TAKEOVER_REQ);
            enc_addr(e, *from);
            enc_nodes(e, failed);
            e.u64(*map_version);
        }
        Signal::TakeoverConf { from, txns } => {
            e.u8(tag::TAKEOVER_CONF);
            enc_addr(e, *from);
            enc_list(e, txns, ITEMS_MAX, |e, (txn, state)| {
                enc_txn(e, txn);
                enc_takeover_state(e, *state);
            });
        }
        Signal::TakeoverDone { from, failed, map_version } => {
            e.u8(tag::TAKEOVER_DONE);
            enc_addr(e, *from);
            enc_nodes(e, failed);
            e.u64(*map_version);
        }
        Signal::StartCopy => e.u8(tag::START_COPY),
        Signal::CopyFragReq { from, table, partition, map_version } => {
            e.u8(tag::COPY_FRAG_REQ);
            enc_addr(e, *from);
            e.u32(*table);
            e.u32(*partition);
            e.u64(*map_version);
        }
        Signal::CopyRows { from, table, partition, rows, done, max_epoch } => {
            e.u8(tag::COPY_ROWS);
            enc_addr(e, *from);
            e.u32(*table);
            e.u32(*partition);
            enc_byte_list(e, rows);
            e.bool(*done);
            e.u64(*max_epoch);
        }
        Signal::CopyAck { from, table, partition } => {
            e.u8(tag::COPY_ACK);
            enc_addr(e, *from);
            e.u32(*table);
            e.u32(*partition);
        }
        Signal::CopyDone { from, rows } => {
            e.u8(tag::COPY_DONE);
            enc_addr(e, *from);
            e.u64(*rows);
        }
        Signal::CatalogReq { from, incarnation } => {
            e.u8(tag::CATALOG_REQ);
            enc_addr(e, *from);
            e.u32(*incarnation);
        }
        Signal::DistStarted { from, durable_epoch } => {
            e.u8(tag::DIST_STARTED);
            enc_addr(e, *from);
            e.u64(*durable_epoch);
        }
        _ => unreachable!("enc_signal sends only takeover and node-restart copy signals here"),
    }
}

/// The schema and DDL signals of `enc_signal`.
fn enc_schema_signal(e: &mut Enc, sig: &Signal) {
    match sig {
        Signal::Ddl { client, req_id, reply_to, req } => {
            e.u8(tag::DDL);
            e.u64(*client);
            e.u64(*req_id);
            enc_addr(e, *reply_to);
            tern_wire::encode_ddl(e, req);
        }
        Signal::DdlReply { client, req_id, reply } => {
            e.u8(tag::DDL_REPLY);
            e.u64(*client);
            enc_nested(e, |buf| reply.encode(*req_id, buf));
        }
        Signal::AutoInc { client, req_id, reply_to, table, count } => {
            e.u8(tag::AUTO_INC);
            e.u64(*client);
            e.u64(*req_id);
            enc_addr(e, *reply_to);
            e.u32(*table);
            e.u32(*count);
        }
        Signal::Schema { catalog, dict } => {
            e.u8(tag::SCHEMA);
            enc_catalog(e, catalog);
            enc_addr(e, *dict);
        }
        Signal::SchemaWrite { from, catalog, broadcast } => {
            e.u8(tag::SCHEMA_WRITE);
            enc_addr(e, *from);
            enc_catalog(e, catalog);
            e.bool(*broadcast);
        }
        Signal::SchemaWritten { from, version } => enc_from_epoch(e, tag::SCHEMA_WRITTEN, *from, *version),
        Signal::CatalogStored { version } => {
            e.u8(tag::CATALOG_STORED);
            e.u64(*version);
        }
        Signal::MgmCatalog { catalog, refused } => {
            e.u8(tag::MGM_CATALOG);
            enc_catalog(e, catalog);
            e.bool(refused.is_some());
            e.u64(refused.unwrap_or(0));
        }
        Signal::SchemaAck { from, version } => enc_from_epoch(e, tag::SCHEMA_ACK, *from, *version),
        Signal::IndexBuild { dict, table, index, catalog } => {
            e.u8(tag::INDEX_BUILD);
            enc_addr(e, *dict);
            e.u32(*table);
            e.u32(*index);
            enc_catalog(e, catalog);
        }
        Signal::IndexBuilt { from, index, result } => {
            e.u8(tag::INDEX_BUILT);
            enc_addr(e, *from);
            e.u32(*index);
            match result {
                Ok(()) => e.u8(0),
                Err(err) => {
                    e.u8(1);
                    tern_wire::enc_err(e, err);
                }
            }
        }
        _ => unreachable!("enc_signal sends only schema and DDL signals here"),
    }
}

/// The transaction protocol's signals (prepare, commit, complete, abort and the one-round
/// commit's), the part of `enc_signal` for the tc and ldm rounds.
fn enc_txn_signal(e: &mut Enc, sig: &Signal) {
    match sig {
        Signal::Prepare(batch) => {
            e.u8(tag::PREPARE);
            enc_prepare_batch(e, batch);
        }
        Signal::Prepared(batch) => {
            e.u8(tag::PREPARED);
            enc_prepare_batch(e, batch);
        }
        Signal::Commit { txn, epoch, chain, pos, results } => {
            e.u8(tag::COMMIT);
            enc_txn(e, txn);
            e.u64(*epoch);
            enc_chain(e, chain);
            e.u8(*pos);
            enc_results(e, results);
        }
        Signal::Committed { txn, chain, results } => {
            e.u8(tag::COMMITTED);
            enc_txn(e, txn);
            enc_chain(e, chain);
            enc_results(e, results);
        }
        Signal::FastOff { txn } => {
            e.u8(tag::FAST_OFF);
            enc_txn(e, txn);
        }
        Signal::Resolve { txn, map_version } => {
            e.u8(tag::RESOLVE);
            enc_txn(e, txn);
            e.u64(*map_version);
        }
        Signal::Complete { txn, chain, pos } => {
            e.u8(tag::COMPLETE);
            enc_txn(e, txn);
            enc_chain(e, chain);
            e.u8(*pos);
        }
        Signal::CompleteReq { txn, from } => {
            e.u8(tag::COMPLETE_REQ);
            enc_txn(e, txn);
            enc_addr(e, *from);
        }
        Signal::Abort { txn, chain, pos, map_version } => {
            e.u8(tag::ABORT);
            enc_txn(e, txn);
            enc_chain(e, chain);
            e.u8(*pos);
            e.u64(*map_version);
        }
        Signal::Aborted { txn, chain } => {
            e.u8(tag::ABORTED);
            enc_txn(e, txn);
            enc_chain(e, chain);
        }
        _ => unreachable!("enc_signal sends only transaction signals here"),
    }
}

/// Reads a signal's tag and body (the inverse of `enc_signal`, arm for arm).
fn dec_signal(d: &mut Dec) -> DecodeResult<Signal> {
    Ok(match d.u8()? {
        tag::CLIENT_REQUEST => {
            let client = d.u64()?;
            let (req_id, req) = Request::decode(d.bytes()?)?;
            Signal::ClientRequest { client, req_id, req }
        }
        tag::CLIENT_GONE => Signal::ClientGone { client: d.u64()? },
        t @ (tag::PREPARE
        | tag::PREPARED
        | tag::COMMIT
        | tag::COMMITTED
        | tag::FAST_OFF
        | tag::RESOLVE
        | tag::COMPLETE
        | tag::COMPLETE_REQ
        | tag::ABORT
        | tag::ABORTED) => dec_txn_signal(t, d)?,
        tag::SCAN_FRAG => Signal::ScanFrag(Box::new(dec_scan_frag(d)?)),
        tag::SCAN_FRAG_ROWS => Signal::ScanFragRows(Box::new(dec_scan_frag_rows(d)?)),
        tag::CLUSTER_MAP => Signal::ClusterMap { state: Arc::new(ClusterState::decode_from(d)?) },
        tag::EPOCH_PREPARE => Signal::EpochPrepare { from: dec_addr(d)?, epoch: d.u64()? },
        tag::EPOCH_WANTED => Signal::EpochWanted { from: dec_addr(d)?, epoch: d.u64()? },
        tag::EPOCH_PREPARED => Signal::EpochPrepared { from: dec_addr(d)?, epoch: d.u64()?, current: d.u64()? },
        tag::EPOCH_COMMIT => Signal::EpochCommit { from: dec_addr(d)?, epoch: d.u64()?, quiet: d.bool()? },
        tag::EPOCH_BUSY => Signal::EpochBusy { from: dec_addr(d)? },
        tag::EPOCH_TC_FINISHED => {
            Signal::EpochTcFinished { from: dec_addr(d)?, epoch: d.u64()?, newest_commit: d.u64()? }
        }
        tag::EPOCH_FLUSH => Signal::EpochFlush { from: dec_addr(d)?, epoch: d.u64()?, mark: d.bool()? },
        tag::EPOCH_FLUSHED => {
            Signal::EpochFlushed { from: dec_addr(d)?, epoch: d.u64()?, synced_lsn: d.u64()?, max_epoch: d.u64()? }
        }
        tag::EPOCH_SAVE => Signal::EpochSave {
            from: dec_addr(d)?,
            epoch: d.u64()?,
            synced_lsn: dec_list(d, LDMS_MAX, 8, |d| d.u64())?,
        },
        tag::EPOCH_SAVED => Signal::EpochSaved { from: dec_addr(d)?, epoch: d.u64()? },
        tag::TAKEOVER_REQ => Signal::TakeoverReq { from: dec_addr(d)?, failed: dec_nodes(d)?, map_version: d.u64()? },
        tag::TAKEOVER_CONF => Signal::TakeoverConf {
            from: dec_addr(d)?,
            txns: dec_list(d, ITEMS_MAX, TXN_REF_BYTES_MIN + 1, |d| Ok((dec_txn(d)?, dec_takeover_state(d)?)))?,
        },
        tag::TAKEOVER_DONE => Signal::TakeoverDone { from: dec_addr(d)?, failed: dec_nodes(d)?, map_version: d.u64()? },
        tag::START_COPY => Signal::StartCopy,
        tag::COPY_FRAG_REQ => {
            Signal::CopyFragReq { from: dec_addr(d)?, table: d.u32()?, partition: d.u32()?, map_version: d.u64()? }
        }
        tag::COPY_ROWS => Signal::CopyRows {
            from: dec_addr(d)?,
            table: d.u32()?,
            partition: d.u32()?,
            rows: dec_byte_list(d)?,
            done: d.bool()?,
            max_epoch: d.u64()?,
        },
        tag::COPY_ACK => Signal::CopyAck { from: dec_addr(d)?, table: d.u32()?, partition: d.u32()? },
        tag::COPY_DONE => Signal::CopyDone { from: dec_addr(d)?, rows: d.u64()? },
        tag::CATALOG_REQ => Signal::CatalogReq { from: dec_addr(d)?, incarnation: d.u32()? },
        tag::DIST_STARTED => Signal::DistStarted { from: dec_addr(d)?, durable_epoch: d.u64()? },
        tag::EPOCH_DURABLE => Signal::EpochDurable { epoch: d.u64()? },
        tag::DDL => {
            Signal::Ddl { client: d.u64()?, req_id: d.u64()?, reply_to: dec_addr(d)?, req: tern_wire::decode_ddl(d)? }
        }
        tag::DDL_REPLY => {
            let client = d.u64()?;
            let (req_id, reply) = Reply::decode(d.bytes()?)?;
            Signal::DdlReply { client, req_id, reply }
        }
        tag::AUTO_INC => Signal::AutoInc {
            client: d.u64()?,
            req_id: d.u64()?,
            reply_to: dec_addr(d)?,
            table: d.u32()?,
            count: d.u32()?,
        },
        tag::SCHEMA => Signal::Schema { catalog: dec_catalog(d)?, dict: dec_addr(d)? },
        tag::SCHEMA_WRITE => Signal::SchemaWrite { from: dec_addr(d)?, catalog: dec_catalog(d)?, broadcast: d.bool()? },
        tag::SCHEMA_WRITTEN => Signal::SchemaWritten { from: dec_addr(d)?, version: d.u64()? },
        tag::CATALOG_STORED => Signal::CatalogStored { version: d.u64()? },
        tag::MGM_CATALOG => {
            let catalog = dec_catalog(d)?;
            let (some, v) = (d.bool()?, d.u64()?);
            Signal::MgmCatalog { catalog, refused: some.then_some(v) }
        }
        tag::SCHEMA_ACK => Signal::SchemaAck { from: dec_addr(d)?, version: d.u64()? },
        tag::INDEX_BUILD => {
            Signal::IndexBuild { dict: dec_addr(d)?, table: d.u32()?, index: d.u32()?, catalog: dec_catalog(d)? }
        }
        tag::INDEX_BUILT => Signal::IndexBuilt {
            from: dec_addr(d)?,
            index: d.u32()?,
            result: match d.u8()? {
                0 => Ok(()),
                1 => Err(tern_wire::dec_err(d)?),
                _ => return Err(DecodeError("bad result tag")),
            },
        },
        tag::START => Signal::Start,
        tag::LDM_READY => Signal::LdmReady { from: dec_addr(d)?, synced_lsn: d.u64()? },
        tag::NODE_STARTED => Signal::NodeStarted { epoch: d.u64()?, durable_epoch: d.u64()? },
        tag::IO_DONE => Signal::IoDone {
            token: d.u64()?,
            result: match d.u8()? {
                0 => Ok(()),
                1 => Err(d.string()?),
                _ => return Err(DecodeError("bad result tag")),
            },
        },
        tag::TICK => Signal::Tick,
        tag::CHECKPOINT_STEP => Signal::CheckpointStep,
        tag::LEASE => Signal::Lease { until_ms: d.u64()? },
        tag::STOP_SERVING => Signal::StopServing,
        tag::LOG_REQ => Signal::LogReq {
            from: dec_addr(d)?,
            sub: d.u64()?,
            call: d.u64()?,
            op: LogOp::from_u8(d.u8()?)?,
            max_bytes: d.u32()?,
            tables: tern_wire::dec_tables(d)?,
        },
        tag::LOG_CHUNK => Signal::LogChunk {
            from: dec_addr(d)?,
            call: d.u64()?,
            // An epoch mark, the smallest entry, takes 9 bytes.
            entries: dec_list(d, ITEMS_MAX, 9, tern_wire::dec_log_entry)?,
            error: match d.u8()? {
                0 => None,
                1 => Some(tern_wire::dec_err(d)?),
                _ => return Err(DecodeError("bad error tag")),
            },
        },
        tag::DEADLOCK_PROBE => Signal::DeadlockProbe(Box::new(DeadlockProbe {
            initiator: dec_txn(d)?,
            target: dec_txn(d)?,
            hops: d.u8()?,
            victim: dec_txn(d)?,
            victim_batch: d.u32()?,
            victim_at: dec_addr(d)?,
        })),
        tag::NODE_HEARTBEAT => Signal::NodeHeartbeat { from: d.u16()?, incarnation: d.u32()? },
        tag::DEADLOCK_VICTIM => Signal::DeadlockVictim { txn: dec_txn(d)?, batch: d.u32()? },
        _ => return Err(DecodeError("unknown signal tag")),
    })
}

/// The inverse of `enc_txn_signal`, for the tag `t` already read.
fn dec_txn_signal(t: u8, d: &mut Dec) -> DecodeResult<Signal> {
    Ok(match t {
        tag::PREPARE => Signal::Prepare(Box::new(dec_prepare_batch(d)?)),
        tag::PREPARED => Signal::Prepared(Box::new(dec_prepare_batch(d)?)),
        tag::COMMIT => {
            let (txn, epoch, chain, pos) = (dec_txn(d)?, d.u64()?, dec_chain(d)?, d.u8()?);
            check_pos(&chain, pos)?;
            Signal::Commit { txn, epoch, chain, pos, results: dec_results(d)? }
        }
        tag::COMMITTED => Signal::Committed { txn: dec_txn(d)?, chain: dec_chain(d)?, results: dec_results(d)? },
        tag::FAST_OFF => Signal::FastOff { txn: dec_txn(d)? },
        tag::RESOLVE => Signal::Resolve { txn: dec_txn(d)?, map_version: d.u64()? },
        tag::COMPLETE => {
            let (txn, chain, pos) = (dec_txn(d)?, dec_chain(d)?, d.u8()?);
            check_pos(&chain, pos)?;
            Signal::Complete { txn, chain, pos }
        }
        tag::COMPLETE_REQ => Signal::CompleteReq { txn: dec_txn(d)?, from: dec_addr(d)? },
        tag::ABORT => Signal::Abort { txn: dec_txn(d)?, chain: dec_chain(d)?, pos: d.u8()?, map_version: d.u64()? },
        tag::ABORTED => Signal::Aborted { txn: dec_txn(d)?, chain: dec_chain(d)? },
        _ => return Err(DecodeError("unknown signal tag")),
    })
}

/// The shape many signals share: `[tag][from: Addr][u64]` (an epoch, a version or an LSN).
fn enc_from_epoch(e: &mut Enc, tag: u8, from: Addr, value: u64) {
    e.u8(tag);
    enc_addr(e, from);
    e.u64(value);
}

/// `Commit` and `Complete` travel from the last replica towards the primary: the receiving ldm
/// sends on to `chain[pos - 1]`, so a position beyond the chain is refused here.
fn check_pos(chain: &[Addr], pos: u8) -> DecodeResult<()> {
    if (pos as usize) < chain.len() { Ok(()) } else { Err(DecodeError("chain position beyond the chain")) }
}

fn enc_addr(e: &mut Enc, addr: Addr) {
    e.u16(addr.node);
    match addr.block {
        Block::Tc(i) => {
            e.u8(0);
            e.u16(i);
        }
        Block::Ldm(i) => {
            e.u8(1);
            e.u16(i);
        }
        Block::Dict => e.u8(2),
        Block::Dist => e.u8(3),
    }
}

fn dec_addr(d: &mut Dec) -> DecodeResult<Addr> {
    let node = d.u16()?;
    let block = match d.u8()? {
        0 => Block::Tc(d.u16()?),
        1 => Block::Ldm(d.u16()?),
        2 => Block::Dict,
        3 => Block::Dist,
        _ => return Err(DecodeError("bad block tag")),
    };
    Ok(Addr { node, block })
}

fn enc_txn(e: &mut Enc, txn: &TxnRef) {
    enc_addr(e, txn.tc);
    e.u64(txn.id);
}

fn dec_txn(d: &mut Dec) -> DecodeResult<TxnRef> {
    Ok(TxnRef { tc: dec_addr(d)?, id: d.u64()? })
}

fn enc_chain(e: &mut Enc, chain: &[Addr]) {
    enc_list(e, chain, CHAIN_MAX, |e, a| enc_addr(e, *a));
}

fn dec_chain(d: &mut Dec) -> DecodeResult<Vec<Addr>> {
    dec_list(d, CHAIN_MAX, ADDR_BYTES_MIN, dec_addr)
}

fn enc_nodes(e: &mut Enc, nodes: &[NodeId]) {
    enc_list(e, nodes, NODES_MAX, |e, n| e.u16(*n));
}

fn dec_nodes(d: &mut Dec) -> DecodeResult<Vec<NodeId>> {
    dec_list(d, NODES_MAX, 2, |d| d.u16())
}

fn enc_byte_list(e: &mut Enc, items: &[Vec<u8>]) {
    enc_list(e, items, ITEMS_MAX, |e, b| e.bytes(b));
}

fn dec_byte_list(d: &mut Dec) -> DecodeResult<Vec<Vec<u8>>> {
    dec_list(d, ITEMS_MAX, BYTES_BYTES_MIN, |d| Ok(d.bytes()?.to_vec()))
}

/// `[count u32][item]*`. A list over `max` would be refused by the receiver, so it is a bug of
/// the sender (caught in debug builds and the simulator).
fn enc_list<T>(e: &mut Enc, items: &[T], max: usize, mut item: impl FnMut(&mut Enc, &T)) {
    debug_assert!(items.len() <= max, "a signal list of {} items is over its limit {max}", items.len());
    e.u32(items.len() as u32);
    for x in items {
        item(e, x);
    }
}

/// Reads `[count u32][item]*`, refusing counts over `max` or over what the bytes left can hold
/// at `item_bytes_min` each, so a corrupt count never reserves memory the payload does not back.
fn dec_list<T>(
    d: &mut Dec,
    max: usize,
    item_bytes_min: usize,
    mut item: impl FnMut(&mut Dec) -> DecodeResult<T>,
) -> DecodeResult<Vec<T>> {
    let n = d.len(max)?;
    if n.saturating_mul(item_bytes_min) > d.remaining() {
        return Err(DecodeError("list longer than its bytes"));
    }
    let mut items = Vec::with_capacity(n);
    for _ in 0..n {
        items.push(item(d)?);
    }
    Ok(items)
}

/// Writes `[len u32]` and then whatever `write` appends, patching the length afterwards, so a
/// nested encoding goes straight into the output without a temporary buffer.
fn enc_nested(e: &mut Enc, write: impl FnOnce(&mut Vec<u8>)) {
    let at = e.buf.len();
    e.u32(0);
    write(e.buf);
    let len = u32::try_from(e.buf.len() - at - 4).expect("a signal part is below 4 GiB (frames hold 64 MiB)");
    e.buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

fn enc_catalog(e: &mut Enc, catalog: &Catalog) {
    enc_nested(e, |buf| catalog.encode(buf));
}

fn dec_catalog(d: &mut Dec) -> DecodeResult<Arc<Catalog>> {
    Ok(Arc::new(Catalog::decode(d.bytes()?)?))
}

fn enc_takeover_state(e: &mut Enc, state: TakeoverState) {
    match state {
        TakeoverState::Prepared => e.u8(0),
        TakeoverState::Committed { epoch } => {
            e.u8(1);
            e.u64(epoch);
        }
    }
}

fn dec_takeover_state(d: &mut Dec) -> DecodeResult<TakeoverState> {
    Ok(match d.u8()? {
        0 => TakeoverState::Prepared,
        1 => TakeoverState::Committed { epoch: d.u64()? },
        _ => return Err(DecodeError("bad takeover state")),
    })
}

fn enc_prepare_batch(e: &mut Enc, b: &PrepareBatch) {
    enc_txn(e, &b.txn);
    e.u32(b.batch);
    enc_chain(e, &b.chain);
    e.u8(b.pos);
    enc_list(e, &b.ops, ITEMS_MAX, enc_prep_op);
    enc_results(e, &b.results);
    e.bool(b.holds_state);
    enc_list(e, &b.triggers, ITEMS_MAX, |e, (origin, op)| {
        e.u32(*origin);
        op.encode(e);
    });
    e.bool(b.nowait);
    // 0: no one-round commit (epochs start at 1).
    e.u64(b.commit_epoch.unwrap_or(0));
    e.u64(b.map_version);
}

/// Op results by op index (a batch's, or a one-round commit's).
fn enc_results(e: &mut Enc, results: &[(u32, tern_wire::OpResult)]) {
    enc_list(e, results, ITEMS_MAX, |e, (idx, r)| {
        e.u32(*idx);
        tern_wire::enc_op_result(e, r);
    });
}

fn dec_results(d: &mut Dec) -> DecodeResult<Vec<(u32, tern_wire::OpResult)>> {
    dec_list(d, ITEMS_MAX, 4 + 1, |d| Ok((d.u32()?, tern_wire::dec_op_result(d)?)))
}

fn dec_prepare_batch(d: &mut Dec) -> DecodeResult<PrepareBatch> {
    Ok(PrepareBatch {
        txn: dec_txn(d)?,
        batch: d.u32()?,
        chain: dec_chain(d)?,
        pos: d.u8()?,
        ops: dec_list(d, ITEMS_MAX, PREP_OP_BYTES_MIN, dec_prep_op)?,
        results: dec_results(d)?,
        holds_state: d.bool()?,
        triggers: dec_list(d, ITEMS_MAX, 4 + KEY_OP_BYTES_MIN, |d| Ok((d.u32()?, KeyOp::decode(d)?)))?,
        nowait: d.bool()?,
        commit_epoch: Some(d.u64()?).filter(|&e| e > 0),
        map_version: d.u64()?,
    })
}

fn enc_prep_op(e: &mut Enc, op: &PrepOp) {
    match op {
        PrepOp::Exec { idx, partition, op } => {
            e.u8(0);
            e.u32(*idx);
            e.u32(*partition);
            op.encode(e);
        }
        PrepOp::Replica { table, partition, key, row } => {
            e.u8(1);
            e.u32(*table);
            e.u32(*partition);
            e.bytes(key);
            match row {
                None => e.u8(0),
                Some(row) => {
                    e.u8(1);
                    e.bytes(row);
                }
            }
        }
    }
}

fn dec_prep_op(d: &mut Dec) -> DecodeResult<PrepOp> {
    Ok(match d.u8()? {
        0 => PrepOp::Exec { idx: d.u32()?, partition: d.u32()?, op: KeyOp::decode(d)? },
        1 => PrepOp::Replica {
            table: d.u32()?,
            partition: d.u32()?,
            key: d.bytes()?.to_vec(),
            row: match d.u8()? {
                0 => None,
                1 => Some(d.bytes()?.to_vec()),
                _ => return Err(DecodeError("bad replica row tag")),
            },
        },
        _ => return Err(DecodeError("bad prepare op tag")),
    })
}

fn enc_scan_frag(e: &mut Enc, f: &ScanFrag) {
    e.u64(f.scan);
    enc_addr(e, f.reply_to);
    e.u32(f.table);
    e.u32(f.partition);
    match f.index {
        None => e.u8(0),
        Some(index) => {
            e.u8(1);
            e.u32(index);
        }
    }
    tern_wire::enc_ranges(e, &f.ranges);
    f.filter.encode(e);
    tern_wire::enc_opt_cols(e, f.projection.as_deref().map(|cols| cols.as_slice()));
    e.bool(f.descending);
    e.u32(f.max_rows);
    enc_scan_pos(e, &f.resume);
    e.bool(f.with_keys);
    e.bool(f.expired);
    match &f.aggregate {
        None => e.u8(0),
        Some(a) => {
            e.u8(1);
            a.encode(e);
        }
    }
    e.u32(f.steps);
    e.u64(f.offset);
}

fn dec_scan_frag(d: &mut Dec) -> DecodeResult<ScanFrag> {
    Ok(ScanFrag {
        scan: d.u64()?,
        reply_to: dec_addr(d)?,
        table: d.u32()?,
        partition: d.u32()?,
        index: match d.u8()? {
            0 => None,
            1 => Some(d.u32()?),
            _ => return Err(DecodeError("bad index tag")),
        },
        ranges: Arc::new(tern_wire::dec_ranges(d)?),
        filter: Arc::new(Filter::decode(d)?),
        projection: tern_wire::dec_opt_cols(d)?.map(Arc::new),
        descending: d.bool()?,
        max_rows: d.u32()?,
        resume: dec_scan_pos(d)?,
        with_keys: d.bool()?,
        expired: d.bool()?,
        aggregate: match d.u8()? {
            0 => None,
            1 => Some(Arc::new(Aggregation::decode(d)?)),
            _ => return Err(DecodeError("bad aggregate tag")),
        },
        steps: d.u32()?,
        offset: d.u64()?,
    })
}

fn enc_scan_frag_rows(e: &mut Enc, r: &ScanFragRows) {
    e.u64(r.scan);
    e.u32(r.partition);
    enc_byte_list(e, &r.rows);
    enc_byte_list(e, &r.keys);
    enc_scan_pos(e, &r.next);
    match &r.error {
        None => e.u8(0),
        Some(err) => {
            e.u8(1);
            tern_wire::enc_err(e, err);
        }
    }
    e.bool(r.more);
}

fn dec_scan_frag_rows(d: &mut Dec) -> DecodeResult<ScanFragRows> {
    Ok(ScanFragRows {
        scan: d.u64()?,
        partition: d.u32()?,
        rows: dec_byte_list(d)?,
        keys: dec_byte_list(d)?,
        next: dec_scan_pos(d)?,
        error: match d.u8()? {
            0 => None,
            1 => Some(tern_wire::dec_err(d)?),
            _ => return Err(DecodeError("bad error tag")),
        },
        more: d.bool()?,
    })
}

fn enc_scan_pos(e: &mut Enc, pos: &ScanPos) {
    match pos {
        ScanPos::Start => e.u8(0),
        ScanPos::RowId(row) => {
            e.u8(1);
            e.u32(*row);
        }
        ScanPos::After(key) => {
            e.u8(2);
            e.bytes(key);
        }
        ScanPos::Done => e.u8(3),
        ScanPos::Ranged(range, after) => {
            e.u8(4);
            e.u32(*range);
            match after {
                None => e.u8(0),
                Some(key) => {
                    e.u8(1);
                    e.bytes(key);
                }
            }
        }
    }
}

fn dec_scan_pos(d: &mut Dec) -> DecodeResult<ScanPos> {
    Ok(match d.u8()? {
        0 => ScanPos::Start,
        1 => ScanPos::RowId(d.u32()?),
        2 => ScanPos::After(d.bytes()?.to_vec()),
        3 => ScanPos::Done,
        4 => ScanPos::Ranged(
            d.u32()?,
            match d.u8()? {
                0 => None,
                1 => Some(d.bytes()?.to_vec()),
                _ => return Err(DecodeError("bad scan position tag")),
            },
        ),
        _ => return Err(DecodeError("bad scan position tag")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use tern_agg::{AggExpr, AggOp, Arith};
    use tern_types::cluster::{ClusterConfig, DataNodeSpec, MgmdSpec, NodeState};
    use tern_types::filter::CmpOp;
    use tern_types::rng::Rng;
    use tern_types::schema::{Column, ColumnType, Index, Table, Ttl};
    use tern_types::{Database, ErrorCode, TernError, Value};
    use tern_wire::{
        AbortOption, Bound, ColumnUpdate, DdlReq, Exec, OpKind, OpResult, Outcome, ScanReq, TxnReq, TxnResp, UpdateExpr,
    };

    fn tc(node: NodeId, i: u16) -> Addr {
        Addr::new(node, Block::Tc(i))
    }
    fn ldm(node: NodeId, i: u16) -> Addr {
        Addr::new(node, Block::Ldm(i))
    }
    fn dict(node: NodeId) -> Addr {
        Addr::new(node, Block::Dict)
    }
    fn dist(node: NodeId) -> Addr {
        Addr::new(node, Block::Dist)
    }
    fn txn(id: u64) -> TxnRef {
        TxnRef { tc: tc(2, 1), id }
    }

    fn table() -> Table {
        let mut status = Column::new("status", ColumnType::VarChar { len: 16 });
        status.default = Some(Value::str("new"));
        status.members = Some(tern_types::schema::Members { set: false, values: vec!["new".into(), "done".into()] });
        Table {
            id: 7,
            database: "shop".into(),
            name: "orders".into(),
            columns: vec![
                Column::new("id", ColumnType::BigInt { unsigned: true }).not_null(),
                Column::new("email", ColumnType::VarChar { len: 255 }),
                Column::new("total", ColumnType::Decimal { precision: 12, scale: 2, unsigned: false }),
                status,
                Column::new("created", ColumnType::BigInt { unsigned: false }),
            ],
            primary_key: vec![0],
            partition_key: vec![0],
            indexes: vec![Index { id: 3, name: "by_email".into(), columns: vec![1], unique: true }],
            partition_count: 8,
            groups: 0,
            ttl: Some(Ttl {
                column: 4,
                seconds: 3600,
                cascade: vec![tern_types::schema::TtlCascade { child: "order_lines".into(), column: 0 }],
            }),
            comment: "NDB_TABLE=READ_BACKUP=1".into(),
        }
    }

    fn catalog() -> Arc<Catalog> {
        let mut c = Catalog::new();
        c.version = 12;
        c.next_table_id = 9;
        c.next_index_id = 4;
        c.databases.insert("shop".into(), Database { name: "shop".into() });
        let t = table();
        let index_table = Catalog::index_table_def(&t, &t.indexes[0]);
        c.tables.insert(t.id, t);
        c.tables.insert(8, Table { id: 8, ..index_table });
        c.auto_inc_high.insert(7, 1_000);
        c.index_tables.insert(3, 8);
        Arc::new(c)
    }

    fn cluster() -> Arc<ClusterState> {
        let config = ClusterConfig {
            replicas: 2,
            data_nodes: vec![
                DataNodeSpec { id: 1, host: "10.0.0.1".into(), port: 6001, location_domain: 0 },
                DataNodeSpec { id: 2, host: "10.0.0.2".into(), port: 6001, location_domain: 0 },
            ],
            mgmds: vec![MgmdSpec { id: 65, host: "10.0.0.9".into(), port: 1186 }],
            ldm_workers: 4,
            epoch_interval_ms: 100,
            heartbeat_interval_ms: 100,
            failure_timeout_ms: 1_000,
        };
        let mut state = ClusterState::all_started(config);
        state.version = 5;
        state.durable_epoch = 41;
        Arc::new(state)
    }

    fn update_op() -> KeyOp {
        KeyOp {
            table: 7,
            kind: OpKind::Update,
            key: vec![0x80, 0, 0, 0, 0, 0, 0, 42],
            row: vec![],
            updates: vec![
                ColumnUpdate { col: 2, expr: UpdateExpr::Add(Value::Decimal { v: 1999, scale: 2 }) },
                ColumnUpdate { col: 3, expr: UpdateExpr::Expect(Value::str("new")) },
                ColumnUpdate { col: 1, expr: UpdateExpr::Set(Value::Null) },
            ],
            projection: Some(vec![0, 2]),
        }
    }

    fn batch(pos: u8) -> Box<PrepareBatch> {
        Box::new(PrepareBatch {
            txn: txn(900),
            batch: 3,
            chain: vec![ldm(1, 2), ldm(2, 2)],
            pos,
            ops: vec![
                PrepOp::Exec { idx: 0, partition: 6, op: update_op() },
                PrepOp::Exec { idx: 1, partition: 6, op: KeyOp::read(7, vec![]) },
                PrepOp::Replica { table: 7, partition: 6, key: vec![1, 2, 3], row: Some(vec![9; 40]) },
                PrepOp::Replica { table: 7, partition: 6, key: vec![], row: None },
            ],
            results: vec![
                (0, OpResult::Row(vec![1, 2, 3])),
                (1, OpResult::NotFound),
                (2, OpResult::Done),
                (u32::MAX, OpResult::Error(TernError::new(ErrorCode::Deadlock, "busy row"))),
            ],
            holds_state: true,
            triggers: vec![(0, KeyOp { kind: OpKind::Insert, row: vec![5; 12], ..KeyOp::read(8, vec![4, 4]) })],
            nowait: pos == 0,
            commit_epoch: (pos == 1).then_some(1 << 34),
            map_version: 9,
        })
    }

    fn scan_frag() -> Box<ScanFrag> {
        let filter = Filter::And(vec![
            Filter::Cmp { col: 2, op: CmpOp::Ge, value: Value::Double(10.5) },
            Filter::Not(Box::new(Filter::In { col: 3, values: vec![Value::str("done"), Value::Null] })),
            Filter::Or(vec![Filter::IsNull(1), Filter::IsNotNull(4)]),
        ]);
        Box::new(ScanFrag {
            scan: 77,
            reply_to: tc(2, 0),
            table: 7,
            partition: 3,
            index: Some(3),
            ranges: Arc::new(vec![
                (
                    Some(Bound { key: vec![1, b'a'], inclusive: true }),
                    Some(Bound { key: vec![1, b'm'], inclusive: false }),
                ),
                (None, Some(Bound { key: vec![1, b'z'], inclusive: true })),
            ]),
            filter: Arc::new(filter),
            projection: Some(Arc::new(vec![0, 1, 2])),
            descending: true,
            max_rows: 256,
            resume: ScanPos::After(vec![1, b'c', 0]),
            with_keys: true,
            expired: false,
            aggregate: Some(Arc::new(Aggregation {
                group_by: vec![AggExpr::Col(3), AggExpr::Neg(Box::new(AggExpr::Col(1)))],
                aggs: vec![
                    (AggOp::Count, None),
                    (AggOp::Sum, Some(AggExpr::Col(2))),
                    (AggOp::Max, Some(AggExpr::Col(4))),
                    (
                        AggOp::Var,
                        Some(AggExpr::Bin(
                            Arith::Mul,
                            Box::new(AggExpr::Col(2)),
                            Box::new(AggExpr::Lit(Value::Decimal { v: 15, scale: 1 })),
                        )),
                    ),
                ],
            })),
            steps: 31,
            offset: 3,
        })
    }

    fn client_requests() -> Vec<Signal> {
        let txn_req = Request::Txn(TxnReq {
            txn: 31,
            ops: vec![update_op(), KeyOp::read(7, vec![1])],
            exec: Exec::Commit,
            abort: AbortOption::IgnoreError,
            durable: true,
            nowait: false,
        });
        let scan_req = Request::Scan(ScanReq {
            filter: Filter::Cmp { col: 0, op: CmpOp::Lt, value: Value::UInt(10) },
            partition: Some(2),
            ..ScanReq::table(7)
        });
        [txn_req, scan_req, Request::Hello { client_name: "rest-1".into(), worker: Some(3), proof: Some([9; 32]) }]
            .into_iter()
            .enumerate()
            .map(|(i, req)| Signal::ClientRequest { client: 5, req_id: 100 + i as u64, req })
            .collect()
    }

    /// Every variant at least once, with realistic contents; lists hold items of the smallest
    /// encodings too, so the bytes-left check is exercised at its edge.
    fn samples() -> Vec<(Addr, Signal)> {
        let err = TernError::new(ErrorCode::DuplicateKey, "Duplicate entry 'a@b' for key 'by_email'");
        let mut v: Vec<(Addr, Signal)> = client_requests().into_iter().map(|s| (tc(1, 0), s)).collect();
        v.extend([
            (tc(1, 1), Signal::ClientGone { client: 5 }),
            (ldm(1, 2), Signal::Prepare(batch(0))),
            (tc(2, 1), Signal::Prepared(batch(1))),
            (
                ldm(2, 2),
                Signal::Commit {
                    txn: txn(900),
                    epoch: 1 << 33,
                    chain: vec![ldm(1, 2), ldm(2, 2)],
                    pos: 1,
                    results: Vec::new(),
                },
            ),
            (
                ldm(1, 2),
                Signal::Commit {
                    txn: txn(900),
                    epoch: 1 << 33,
                    chain: vec![ldm(1, 2), ldm(2, 2)],
                    pos: 0,
                    results: vec![(0, OpResult::Done), (1, OpResult::Row(vec![7; 9]))],
                },
            ),
            (tc(2, 1), Signal::Committed { txn: txn(900), chain: vec![ldm(1, 2), ldm(2, 2)], results: Vec::new() }),
            (
                tc(2, 1),
                Signal::Committed { txn: txn(901), chain: vec![ldm(1, 2)], results: vec![(3, OpResult::NotFound)] },
            ),
            (tc(2, 1), Signal::FastOff { txn: txn(902) }),
            (ldm(2, 0), Signal::Resolve { txn: txn(902), map_version: 7 }),
            (ldm(2, 2), Signal::Complete { txn: txn(900), chain: vec![ldm(1, 2), ldm(2, 2)], pos: 1 }),
            (tc(1, 0), Signal::CompleteReq { txn: txn(900), from: ldm(2, 2) }),
            (ldm(1, 0), Signal::Abort { txn: txn(901), chain: vec![ldm(1, 0)], pos: 0, map_version: 6 }),
            (tc(2, 1), Signal::Aborted { txn: txn(901), chain: vec![] }),
            (
                tc(2, 0),
                Signal::DeadlockProbe(Box::new(DeadlockProbe {
                    initiator: txn(902),
                    target: txn(17),
                    hops: 4,
                    victim: txn(903),
                    victim_batch: 3,
                    victim_at: ldm(1, 1),
                })),
            ),
            (ldm(1, 1), Signal::DeadlockVictim { txn: txn(902), batch: 3 }),
            (dist(2), Signal::NodeHeartbeat { from: 1, incarnation: 7 }),
            (ldm(1, 3), Signal::ScanFrag(scan_frag())),
            (ldm(1, 3), Signal::ScanFrag(Box::new(ScanFrag { resume: ScanPos::Ranged(1, None), ..*scan_frag() }))),
            (
                ldm(1, 3),
                Signal::ScanFrag(Box::new(ScanFrag {
                    resume: ScanPos::Ranged(7, Some(vec![1, b'q'])),
                    ..*scan_frag()
                })),
            ),
            (
                tc(2, 0),
                Signal::ScanFragRows(Box::new(ScanFragRows {
                    scan: 77,
                    partition: 3,
                    rows: vec![vec![1, 2, 3], vec![], vec![0xff; 300]],
                    keys: vec![vec![1, b'a'], vec![1, b'b'], vec![1, b'c']],
                    next: ScanPos::RowId(1234),
                    error: None,
                    more: true,
                })),
            ),
            (
                tc(2, 0),
                Signal::ScanFragRows(Box::new(ScanFragRows {
                    scan: 78,
                    partition: 4,
                    rows: vec![],
                    keys: vec![],
                    next: ScanPos::Done,
                    error: Some(TernError::new(ErrorCode::SchemaChanged, "schema changed")),
                    more: false,
                })),
            ),
            (dist(2), Signal::ClusterMap { state: cluster() }),
            (tc(2, 0), Signal::EpochPrepare { from: dist(1), epoch: 88 }),
            (dist(1), Signal::EpochWanted { from: tc(2, 0), epoch: 88 }),
            (dist(1), Signal::EpochPrepared { from: tc(2, 0), epoch: 88, current: 87 }),
            (tc(2, 0), Signal::EpochCommit { from: dist(1), epoch: 88, quiet: false }),
            (tc(2, 1), Signal::EpochCommit { from: dist(1), epoch: 89, quiet: true }),
            (dist(1), Signal::EpochBusy { from: tc(2, 1) }),
            (dist(1), Signal::EpochTcFinished { from: tc(2, 0), epoch: 87, newest_commit: 86 }),
            (ldm(2, 1), Signal::EpochFlush { from: dist(1), epoch: 87, mark: true }),
            (dist(1), Signal::EpochFlushed { from: ldm(2, 1), epoch: 87, synced_lsn: 1 << 40, max_epoch: 87 }),
            (dist(2), Signal::EpochSave { from: dist(1), epoch: 87, synced_lsn: vec![10, 20, 30, u64::MAX] }),
            (dist(1), Signal::EpochSaved { from: dist(2), epoch: 87 }),
            (ldm(2, 0), Signal::TakeoverReq { from: tc(1, 0), failed: vec![3, 4], map_version: 9 }),
            (
                tc(1, 0),
                Signal::TakeoverConf {
                    from: ldm(2, 0),
                    txns: vec![
                        (TxnRef { tc: tc(3, 0), id: 1 }, TakeoverState::Committed { epoch: 86 }),
                        (TxnRef { tc: tc(3, 1), id: 2 }, TakeoverState::Prepared),
                        (TxnRef { tc: tc(4, 0), id: 3 }, TakeoverState::Prepared),
                    ],
                },
            ),
            (dist(1), Signal::TakeoverDone { from: tc(1, 0), failed: vec![3], map_version: 9 }),
            (ldm(2, 0), Signal::StartCopy),
            (ldm(1, 0), Signal::CopyFragReq { from: ldm(2, 0), table: 7, partition: 4, map_version: 10 }),
            (
                ldm(2, 0),
                Signal::CopyRows {
                    from: ldm(1, 0),
                    table: 7,
                    partition: 4,
                    rows: vec![vec![7; 20], vec![]],
                    done: true,
                    max_epoch: 91,
                },
            ),
            (ldm(1, 0), Signal::CopyAck { from: ldm(2, 0), table: 7, partition: 4 }),
            (dist(2), Signal::CopyDone { from: ldm(2, 0), rows: 123_456 }),
            (dict(1), Signal::CatalogReq { from: dict(2), incarnation: 3 }),
            (dist(1), Signal::DistStarted { from: dist(2), durable_epoch: 85 }),
            (tc(2, 3), Signal::EpochDurable { epoch: 87 }),
            (
                dict(1),
                Signal::Ddl {
                    client: 5,
                    req_id: 200,
                    reply_to: tc(2, 1),
                    req: DdlReq::CreateTable { table: table(), if_not_exists: true },
                },
            ),
            (
                dict(1),
                Signal::Ddl {
                    client: 5,
                    req_id: 201,
                    reply_to: tc(2, 1),
                    req: DdlReq::CreateIndex {
                        database: "shop".into(),
                        table: "orders".into(),
                        index: Index { id: 0, name: "by_total".into(), columns: vec![2, 0], unique: false },
                    },
                },
            ),
            (tc(2, 1), Signal::DdlReply { client: 5, req_id: 200, reply: Reply::DdlDone { catalog_version: 13 } }),
            (tc(2, 1), Signal::DdlReply { client: 5, req_id: 201, reply: Reply::Error(err.clone()) }),
            (
                tc(2, 1),
                Signal::DdlReply {
                    client: 6,
                    req_id: 202,
                    reply: Reply::Txn(TxnResp {
                        txn: 1,
                        results: vec![OpResult::Done, OpResult::Error(err.clone())],
                        outcome: Outcome::Aborted(err.clone()),
                    }),
                },
            ),
            (dict(1), Signal::AutoInc { client: 5, req_id: 203, reply_to: tc(2, 1), table: 7, count: 100 }),
            (tc(2, 0), Signal::Schema { catalog: catalog(), dict: dict(2) }),
            (dict(2), Signal::SchemaWrite { from: dict(1), catalog: catalog(), broadcast: true }),
            (dict(1), Signal::SchemaWritten { from: dict(2), version: 12 }),
            (dict(1), Signal::CatalogStored { version: 12 }),
            (dict(1), Signal::MgmCatalog { catalog: catalog(), refused: Some(13) }),
            (dict(1), Signal::MgmCatalog { catalog: catalog(), refused: None }),
            (dict(2), Signal::SchemaAck { from: ldm(2, 1), version: 12 }),
            (ldm(2, 1), Signal::IndexBuild { dict: dict(1), table: 7, index: 3, catalog: catalog() }),
            (dict(1), Signal::IndexBuilt { from: ldm(2, 1), index: 3, result: Ok(()) }),
            (dict(1), Signal::IndexBuilt { from: ldm(2, 2), index: 3, result: Err(err) }),
            (dist(2), Signal::Start),
            (dist(2), Signal::LdmReady { from: ldm(2, 3), synced_lsn: 4096 }),
            (tc(2, 0), Signal::NodeStarted { epoch: 90, durable_epoch: 88 }),
            (ldm(2, 0), Signal::IoDone { token: 17, result: Ok(()) }),
            (ldm(2, 0), Signal::IoDone { token: 18, result: Err("No space left on device (os error 28)".into()) }),
            (tc(2, 0), Signal::Tick),
            (tc(2, 1), Signal::Lease { until_ms: 123_456 }),
            (tc(2, 1), Signal::StopServing),
            (ldm(2, 0), Signal::CheckpointStep),
            (
                ldm(2, 1),
                Signal::LogReq { from: tc(1, 0), sub: 3, call: 9, op: LogOp::Poll, max_bytes: 1 << 20, tables: vec![] },
            ),
            (
                ldm(2, 1),
                Signal::LogReq { from: tc(1, 0), sub: 3, call: 10, op: LogOp::Start, max_bytes: 0, tables: vec![4, 8] },
            ),
            (
                tc(1, 0),
                Signal::LogChunk {
                    from: ldm(2, 1),
                    call: 9,
                    entries: vec![
                        tern_wire::LogEntry::Put { epoch: 5, log_gen: 0, table: 7, row: vec![1; 9] },
                        tern_wire::LogEntry::Delete { epoch: 5, log_gen: 0, table: 7, key: vec![2], expired: false },
                        tern_wire::LogEntry::Put { epoch: 6, log_gen: 3, table: 7, row: vec![1; 9] },
                        tern_wire::LogEntry::Delete { epoch: 6, log_gen: 1, table: 7, key: vec![2], expired: true },
                        tern_wire::LogEntry::Epoch(5),
                    ],
                    error: None,
                },
            ),
            (
                tc(1, 0),
                Signal::LogChunk {
                    from: ldm(2, 1),
                    call: 10,
                    entries: vec![],
                    error: Some(TernError::new(ErrorCode::Internal, "log overflow")),
                },
            ),
        ]);
        v
    }

    fn encode(to: Addr, sig: &Signal) -> Vec<u8> {
        let mut out = Vec::new();
        encode_signal(to, sig, &mut out);
        out
    }

    fn tag_of(to: Addr, bytes: &[u8]) -> u8 {
        let mut addr = Vec::new();
        enc_addr(&mut Enc::new(&mut addr), to);
        bytes[1 + addr.len()]
    }

    #[test]
    fn tags_are_unique_and_samples_cover_every_variant() {
        let all: BTreeSet<u8> = tag::ALL.iter().copied().collect();
        assert_eq!(all.len(), tag::ALL.len(), "two signals share a tag");
        let covered: BTreeSet<u8> = samples().iter().map(|(to, s)| tag_of(*to, &encode(*to, s))).collect();
        assert_eq!(covered, all, "every signal variant needs a sample");
    }

    #[test]
    fn every_variant_round_trips() {
        for (to, sig) in samples() {
            let bytes = encode(to, &sig);
            let (to2, sig2) = decode_signal(&bytes).unwrap_or_else(|e| panic!("{sig:?}: {e}"));
            assert_eq!(to2, to);
            assert_eq!(format!("{sig2:?}"), format!("{sig:?}"));
            assert_eq!(encode(to2, &sig2), bytes, "re-encoding {sig:?} changed its bytes");
        }
    }

    #[test]
    fn encoding_appends() {
        let mut out = vec![0xAA, 0xBB];
        encode_signal(tc(1, 0), &Signal::Tick, &mut out);
        assert_eq!(&out[..2], &[0xAA, 0xBB]);
        assert_eq!(decode_signal(&out[2..]).unwrap().0, tc(1, 0));
    }

    #[test]
    fn every_prefix_fails_and_extra_bytes_fail() {
        for (to, sig) in samples() {
            let bytes = encode(to, &sig);
            for n in 0..bytes.len() {
                assert!(decode_signal(&bytes[..n]).is_err(), "{n}-byte prefix of {sig:?} decoded");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(decode_signal(&longer).unwrap_err(), DecodeError("trailing bytes after a signal"));
        }
    }

    #[test]
    fn bad_format_tag_block_and_position_fail() {
        let bytes = encode(ldm(1, 0), &Signal::StartCopy);
        let mut other_format = bytes.clone();
        other_format[0] = SIGNAL_FORMAT + 1;
        assert_eq!(decode_signal(&other_format).unwrap_err(), DecodeError("unknown signal format"));
        let mut bad_block = bytes.clone();
        bad_block[3] = 9;
        assert_eq!(decode_signal(&bad_block).unwrap_err(), DecodeError("bad block tag"));
        let mut unknown = bytes.clone();
        *unknown.last_mut().unwrap() = 0;
        assert_eq!(decode_signal(&unknown).unwrap_err(), DecodeError("unknown signal tag"));
        *unknown.last_mut().unwrap() = tag::ALL.len() as u8 + 1;
        assert_eq!(decode_signal(&unknown).unwrap_err(), DecodeError("unknown signal tag"));
        // A chain position the receiving ldm would index out of range.
        let commit = Signal::Complete { txn: txn(1), chain: vec![ldm(1, 0)], pos: 1 };
        assert_eq!(
            decode_signal(&encode(ldm(1, 0), &commit)).unwrap_err(),
            DecodeError("chain position beyond the chain")
        );
    }

    /// `[format][addr: node 1, ldm 0][COPY_ROWS][from: node 2, ldm 0][table][partition]`, the
    /// start of a `CopyRows` whose row count comes next.
    fn copy_rows_head() -> Vec<u8> {
        let mut b = vec![SIGNAL_FORMAT, 1, 0, 1, 0, 0, tag::COPY_ROWS, 2, 0, 1, 0, 0];
        b.extend_from_slice(&7u32.to_le_bytes());
        b.extend_from_slice(&4u32.to_le_bytes());
        b
    }

    #[test]
    fn huge_declared_lengths_fail_without_allocating() {
        let head = copy_rows_head();
        let mut ok = head.clone();
        ok.extend_from_slice(&0u32.to_le_bytes());
        ok.push(1);
        ok.extend_from_slice(&91u64.to_le_bytes());
        assert!(matches!(decode_signal(&ok), Ok((_, Signal::CopyRows { done: true, .. }))));
        // A count over the limit.
        let mut b = head.clone();
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode_signal(&b).unwrap_err(), DecodeError("length over limit"));
        // A count within the limit that the bytes left cannot hold: refused before reserving.
        let mut b = head.clone();
        b.extend_from_slice(&(ITEMS_MAX as u32).to_le_bytes());
        b.extend_from_slice(&[0; 64]);
        assert_eq!(decode_signal(&b).unwrap_err(), DecodeError("list longer than its bytes"));
        // One row whose declared length runs past the end.
        let mut b = head.clone();
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        b.extend_from_slice(&[0; 16]);
        assert_eq!(decode_signal(&b).unwrap_err(), DecodeError("truncated"));
        // A nested client request whose length runs past the end.
        let mut b = vec![SIGNAL_FORMAT, 1, 0, 0, 0, 0, tag::CLIENT_REQUEST];
        b.extend_from_slice(&5u64.to_le_bytes());
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode_signal(&b).unwrap_err(), DecodeError("truncated"));
        // A chain longer than any cluster.
        let mut b = encode(tc(2, 1), &Signal::Aborted { txn: txn(1), chain: vec![] });
        let count_at = b.len() - 4;
        b[count_at..].copy_from_slice(&(CHAIN_MAX as u32 + 1).to_le_bytes());
        assert_eq!(decode_signal(&b).unwrap_err(), DecodeError("length over limit"));
    }

    #[test]
    fn deep_filters_fail_cleanly() {
        let mut filter = Filter::True;
        for _ in 0..200 {
            filter = Filter::Not(Box::new(filter));
        }
        let frag = ScanFrag { filter: Arc::new(filter), ..*scan_frag() };
        let err = decode_signal(&encode(ldm(1, 3), &Signal::ScanFrag(Box::new(frag)))).unwrap_err();
        assert_eq!(err, DecodeError("filter nested too deeply"));
    }

    /// Seeded random damage to every sample (and random bytes after a valid head) must decode to
    /// an error or to a signal that itself round-trips, and never panic.
    #[test]
    fn random_mutations_never_panic() {
        let seed = std::env::var("TERN_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5167_c0de_u64);
        println!("TERN_SEED={seed}");
        let mut rng = Rng::new(seed);
        let encoded: Vec<Vec<u8>> = samples().iter().map(|(to, s)| encode(*to, s)).collect();
        let mut decoded = 0;
        for round in 0..6_000 {
            let mut b = rng.pick(&encoded).clone();
            for _ in 0..1 + rng.below(4) {
                mutate(&mut rng, &mut b);
            }
            if round % 4 == 0 {
                // Random body after a valid format, address and tag.
                let tag = *rng.pick(tag::ALL);
                b = vec![SIGNAL_FORMAT, 1, 0, 1, 0, 0, tag];
                b.extend((0..rng.below(64)).map(|_| rng.below(256) as u8));
            }
            if let Ok((to, sig)) = decode_signal(&b) {
                decoded += 1;
                let again = encode(to, &sig);
                let (to2, sig2) = decode_signal(&again).unwrap_or_else(|e| panic!("seed {seed}: {sig:?}: {e}"));
                assert_eq!((to2, format!("{sig2:?}")), (to, format!("{sig:?}")), "seed {seed}");
            }
        }
        assert!(decoded > 0, "seed {seed}: no mutation kept a valid signal; the test lost its teeth");
    }

    /// An in-memory disk for a whole node's blocks.
    #[derive(Default)]
    struct MemDisk(std::collections::BTreeMap<String, Vec<u8>>);

    impl crate::io::Storage for MemDisk {
        fn append(&mut self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
            self.0.entry(name.into()).or_default().extend_from_slice(bytes);
            Ok(())
        }
        fn sync(&mut self, _: &str) -> std::io::Result<()> {
            Ok(())
        }
        fn write_atomic(&mut self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
            self.0.insert(name.into(), bytes.to_vec());
            Ok(())
        }
        fn read(&self, name: &str) -> std::io::Result<Option<Vec<u8>>> {
            Ok(self.0.get(name).cloned())
        }
        fn list(&self, dir: &str) -> std::io::Result<Vec<String>> {
            let prefix = format!("{dir}/");
            Ok(self.0.keys().filter(|k| k.starts_with(&prefix)).cloned().collect())
        }
        fn delete(&mut self, name: &str) -> std::io::Result<()> {
            self.0.remove(name);
            Ok(())
        }
        fn rename(&mut self, from: &str, to: &str) -> std::io::Result<()> {
            if let Some(b) = self.0.remove(from) {
                self.0.insert(to.into(), b);
            }
            Ok(())
        }
    }

    /// A whole data node (every block, its disk requests carried out) is fed well-formed peer
    /// signals out of order, duplicated, misrouted to the wrong block, from nodes of the wrong
    /// incarnation, before and after it started, interleaved with cluster maps that fail and
    /// restart its peer: it must drop or defer what it cannot use and never panic (a node stops
    /// only for a breach of its own state). Its own follow-up signals to itself are delivered,
    /// those to the peer are dropped (the peer is gone or slow).
    #[test]
    fn stray_peer_signals_never_crash_a_node() {
        let seed = std::env::var("TERN_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x0dd5_19a1_u64);
        println!("TERN_SEED={seed}");
        // What the node-to-node port delivers (it drops the local-only kinds).
        let samples: Vec<(Addr, Signal)> = samples().into_iter().filter(|(_, s)| !s.is_local_only()).collect();
        let before = crate::signal::unexpected_signals();
        let mut ran_started = 0;
        for run in 0..40u64 {
            let mut rng = Rng::new(seed.wrapping_add(run));
            let mut state = (*cluster()).clone();
            let node_cfg = crate::node::NodeConfig::in_cluster(1, Arc::new(state.clone()), 64 << 20);
            let mut io = crate::io::IoExecutor::new(MemDisk::default(), 1 << 20);
            let mut node = crate::node::Node::recover(&node_cfg, &io.storage).expect("recover an empty disk");
            for l in 0..node_cfg.ldm_count {
                io.open_redo(l, node.redo_base[l as usize]).expect("open redo");
            }
            let blocks: Vec<Block> = (0..node_cfg.ldm_count)
                .flat_map(|i| [Block::Tc(i), Block::Ldm(i)])
                .chain([Block::Dict, Block::Dist])
                .collect();
            let mut queue: std::collections::VecDeque<(Block, Signal)> = std::collections::VecDeque::new();
            // Half the runs start the node at a random point, the others never do.
            let start_at = if run % 2 == 0 { rng.below(600) } else { u64::MAX };
            let mut now = 0u64;
            for step in 0..1_500u64 {
                now += rng.below(30);
                if step == start_at {
                    queue.push_back((Block::Dist, Signal::Start));
                }
                match rng.below(10) {
                    0 => {
                        // The peer fails, restarts (a new incarnation) or rejoins.
                        let peer = state.nodes.get_mut(&2).expect("node 2");
                        match rng.below(3) {
                            0 => peer.state = NodeState::Down,
                            1 => {
                                peer.incarnation += 1;
                                peer.state = NodeState::Starting;
                            }
                            _ => peer.state = NodeState::Started,
                        }
                        state.version += 1;
                        queue.push_back((*rng.pick(&blocks), Signal::ClusterMap { state: Arc::new(state.clone()) }));
                    }
                    1 => queue.push_back((*rng.pick(&blocks), Signal::Tick)),
                    _ => {
                        let (to, sig) = rng.pick(&samples).clone();
                        // Mostly to the block it names (when that block exists here), else anywhere.
                        let exists = blocks.contains(&to.block);
                        let block = if exists && rng.chance(60) { to.block } else { *rng.pick(&blocks) };
                        let copies = if rng.chance(20) { 2 } else { 1 };
                        for _ in 0..copies {
                            queue.push_back((block, sig.clone()));
                        }
                    }
                }
                // Deliver, with the node's own follow-ups, boundedly.
                let mut budget = 2_000;
                while let Some((block, sig)) = queue.pop_front() {
                    budget -= 1;
                    if budget == 0 {
                        queue.clear();
                        break;
                    }
                    let mut out = crate::signal::Out::default();
                    node.handle(now, block, sig, &mut out);
                    for (to, sig) in out.signals.into_iter().chain(out.later) {
                        if to.node == 1 {
                            queue.push_back((to.block, sig));
                        }
                    }
                    for (_, to, sig) in out.timers {
                        if to.node == 1 && rng.chance(50) {
                            queue.push_back((to.block, sig));
                        }
                    }
                    for (from, req) in out.io {
                        if let Some((to, sig)) = io.execute(from, req).expect("memory disk") {
                            queue.push_back((to.block, sig));
                        }
                    }
                }
            }
            ran_started += usize::from(node.dist.is_running());
        }
        assert!(ran_started >= 5, "seed {seed}: the node started in only {ran_started} runs");
        assert!(
            crate::signal::unexpected_signals() > before,
            "seed {seed}: no stray signal was dropped: the test lost its teeth"
        );
    }

    fn mutate(rng: &mut Rng, b: &mut Vec<u8>) {
        if b.is_empty() {
            b.push(rng.below(256) as u8);
            return;
        }
        let at = rng.below(b.len() as u64) as usize;
        match rng.below(6) {
            0 => b[at] = rng.below(256) as u8,
            1 => b[at] ^= 1 << rng.below(8),
            2 => b.insert(at, rng.below(256) as u8),
            3 => {
                b.remove(at);
            }
            4 => b.truncate(at),
            _ => {
                // A length-sized window set to a huge or off-by-a-little value.
                let value: u32 = if rng.chance(50) { u32::MAX - rng.below(4) as u32 } else { rng.below(300) as u32 };
                let end = (at + 4).min(b.len());
                let bytes = value.to_le_bytes();
                b[at..end].copy_from_slice(&bytes[..end - at]);
            }
        }
    }
}
