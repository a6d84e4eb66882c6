//! Change logs for backups (`Request::Log`, `tern backup`): NDB's backup logs every change a
//! fragment's primary commits while its scan runs, so a fuzzy scan plus the log replayed up to
//! one epoch is a consistent snapshot. Here the tc a client asks registers the log at every ldm
//! of the started data nodes; each ldm buffers what it commits as primary (after-images and
//! deletes with their epochs) and an epoch mark at every epoch flush, and hands its buffer out
//! when polled. The tc gathers one answer per ldm for each request and replies when all came.

use super::*;
use tern_wire::{LogEntry, LogOp, LogPart};

/// Change logs one tc runs at a time (a backup needs one).
const LOGS_MAX: usize = 4;
/// Each ldm's share of a poll is at least this many bytes.
const POLL_SHARE_MIN: u32 = 64 << 10;
/// A poll's byte budget at most, whatever the client asks: the reply (and each ldm's chunk to
/// another node) stays far below the 64 MiB frame limit, which an encoder must not exceed.
const POLL_BYTES_MAX: u32 = 16 << 20;

/// A change log a client of this tc started.
pub(super) struct LogSub {
    /// The number the ldms know it by (unique in this tc).
    id: u64,
    /// Every ldm it was registered at.
    targets: Vec<Addr>,
    /// A cluster map changed the data nodes' states since the start (`log_map_changed`).
    failed: bool,
}

/// A log failed because the data nodes' states changed while it ran (primaries may move, and a
/// partition's changes must come from one ldm in commit order); the ldms say the same.
pub(crate) fn cluster_changed() -> TernError {
    TernError::new(
        ErrorCode::NodeFailure,
        "the cluster changed during the backup (a data node failed, restarted or joined); take it again",
    )
}

/// A change-log request waiting for the ldms' answers.
pub(super) struct LogCall {
    client: ClientId,
    req_id: u64,
    waiting: BTreeSet<Addr>,
    parts: BTreeMap<Addr, Vec<LogEntry>>,
    error: Option<TernError>,
}

impl Tc {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn log_request(
        &mut self,
        client: ClientId,
        req_id: u64,
        sub: u64,
        op: LogOp,
        max_bytes: u32,
        tables: Vec<TableId>,
        out: &mut Out,
    ) {
        let key = (client, sub);
        let fail = |out: &mut Out, code: ErrorCode, msg: String| {
            out.reply(client, req_id, Reply::Error(TernError::new(code, msg)))
        };
        let (id, targets) = match op {
            LogOp::Start => {
                if self.logs.contains_key(&key) {
                    return fail(out, ErrorCode::InvalidRequest, format!("change log {sub} is already running"));
                }
                if self.logs.len() >= LOGS_MAX {
                    return fail(
                        out,
                        ErrorCode::Overloaded,
                        format!("at most {LOGS_MAX} change logs (backups) at a time per connection worker"),
                    );
                }
                // Every started node's ldms: primaries are only there (a copying node is never one).
                let nodes: Vec<NodeId> =
                    self.cluster.nodes.iter().filter(|(_, s)| s.state == NodeState::Started).map(|(&n, _)| n).collect();
                let targets: Vec<Addr> =
                    nodes.iter().flat_map(|&n| (0..self.ldm_count).map(move |i| Addr::new(n, Block::Ldm(i)))).collect();
                self.next_log += 1;
                let id = self.next_log;
                self.logs.insert(key, LogSub { id, targets: targets.clone(), failed: false });
                (id, targets)
            }
            LogOp::Poll | LogOp::Stop => {
                let Some(s) = self.logs.get(&key) else {
                    return fail(out, ErrorCode::InvalidRequest, format!("no change log {sub} on this connection"));
                };
                let r = (s.id, s.targets.clone());
                if s.failed && op == LogOp::Poll {
                    // The ldms it was started at may not be the primaries any more (an ldm that
                    // saw the new map before the start never fails it itself).
                    let s = self.logs.remove(&key).expect("looked up");
                    self.end_log(&s, out);
                    return out.reply(client, req_id, Reply::Error(cluster_changed()));
                }
                if op == LogOp::Stop {
                    self.logs.remove(&key);
                }
                r
            }
        };
        let share = (max_bytes.min(POLL_BYTES_MAX) / targets.len().max(1) as u32).max(POLL_SHARE_MIN);
        self.next_log += 1;
        let call = self.next_log;
        for &t in &targets {
            out.send(
                t,
                Signal::LogReq { from: self.addr, sub: id, call, op, max_bytes: share, tables: tables.clone() },
            );
        }
        let waiting = targets.into_iter().collect();
        debug_assert!(self.logs.len() <= LOGS_MAX, "invariant: at most LOGS_MAX change logs per tc");
        let fresh =
            self.log_calls.insert(call, LogCall { client, req_id, waiting, parts: BTreeMap::new(), error: None });
        debug_assert!(fresh.is_none(), "invariant: a change-log call id is used once");
    }

    /// A cluster map changed the data nodes' states: every running log fails at its next poll
    /// (the ldms do the same, but one that had the new map before a log's start never sees
    /// the change, while this tc registered the log at the started nodes of its older map).
    pub(super) fn log_map_changed(&mut self) {
        for s in self.logs.values_mut() {
            s.failed = true;
        }
    }

    pub(super) fn log_chunk(
        &mut self,
        from: Addr,
        call: u64,
        entries: Vec<LogEntry>,
        error: Option<TernError>,
        out: &mut Out,
    ) {
        let Some(c) = self.log_calls.get_mut(&call) else { return };
        if !c.waiting.remove(&from) {
            return;
        }
        match error {
            Some(e) => {
                c.error.get_or_insert(e);
            }
            None => {
                c.parts.insert(from, entries);
            }
        }
        if c.waiting.is_empty() {
            let c = self.log_calls.remove(&call).expect("listed");
            debug_assert!(
                c.error.is_some() || c.parts.keys().all(|a| matches!(a.block, Block::Ldm(_))),
                "invariant: a change log's parts come from ldms"
            );
            let reply = match c.error {
                Some(e) => Reply::Error(e),
                None => Reply::Log {
                    parts: c
                        .parts
                        .into_iter()
                        .map(|(a, entries)| LogPart {
                            node: a.node,
                            ldm: match a.block {
                                Block::Ldm(i) => i,
                                _ => 0,
                            },
                            entries,
                        })
                        .collect(),
                },
            };
            out.reply(c.client, c.req_id, reply);
        }
    }

    /// A client went away: its change logs end at every ldm, its requests are forgotten.
    pub(super) fn log_client_gone(&mut self, client: ClientId, out: &mut Out) {
        let gone: Vec<(ClientId, u64)> = self.logs.keys().filter(|(c, _)| *c == client).copied().collect();
        for k in gone {
            let s = self.logs.remove(&k).expect("listed");
            self.end_log(&s, out);
        }
        self.log_calls.retain(|_, c| c.client != client);
    }

    /// Stops a log at every ldm it was registered at (answered with a call number nobody waits
    /// for).
    fn end_log(&self, s: &LogSub, out: &mut Out) {
        for &t in &s.targets {
            let stop =
                Signal::LogReq { from: self.addr, sub: s.id, call: 0, op: LogOp::Stop, max_bytes: 0, tables: vec![] };
            out.send(t, stop);
        }
    }

    /// Data nodes failed: requests waiting for their ldms fail (the ldms that live fail the
    /// logs themselves when they see the new map).
    pub(super) fn log_nodes_failed(&mut self, failed: &[NodeId], out: &mut Out) {
        let broken: Vec<u64> = self
            .log_calls
            .iter()
            .filter(|(_, c)| c.waiting.iter().any(|a| failed.contains(&a.node)))
            .map(|(&id, _)| id)
            .collect();
        for id in broken {
            let c = self.log_calls.remove(&id).expect("listed");
            let e = TernError::new(ErrorCode::NodeFailure, "a data node failed during the backup; take it again");
            out.reply(c.client, c.req_id, Reply::Error(e));
        }
    }
}
