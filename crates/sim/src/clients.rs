//! Simulated clients: transactions of key reads and writes, scans, and the DDL client.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ClientState {
    Idle,
    Waiting,
    Scanning,
}

pub(super) struct SimClient {
    pub(crate) state: ClientState,
    pub(crate) seq: u64,
    pub(crate) next_txn: u64,
    /// Durable commits acknowledged: stamp -> epoch.
    pub(crate) pending: Option<(u64, bool)>,
    /// Which operations of the batch in flight write.
    pub(crate) write_ops: Vec<bool>,
    /// A write of the open transaction took effect (so its commit has something to make durable).
    pub(crate) wrote: bool,
    /// The tc coordinating the open transaction (every batch of it goes there).
    pub(crate) tc: Option<Addr>,
    /// Linearizability history: when the request in flight was sent, the key of each read op of
    /// a read-only batch, the stamps the batch in flight writes and those of the open
    /// transaction.
    pub(crate) sent_at: u64,
    pub(crate) read_keys: Vec<Option<i64>>,
    pub(crate) batch_stamps: Vec<i64>,
    pub(crate) txn_stamps: Vec<i64>,
}

impl Sim {
    /// The client that changes the schema (None without `ddl_every_ms`).
    pub(super) fn ddl_client(&self) -> Option<u64> {
        (self.cfg.ddl_every_ms > 0).then_some(self.cfg.clients as u64 + 1)
    }

    /// The DDL client: CREATE DATABASE through a random started node's tc (which forwards it to
    /// the master when it is not the master).
    pub(super) fn ddl_act(&mut self, client: u64) {
        let every = self.cfg.ddl_every_ms;
        let live: Vec<NodeId> =
            self.cluster.nodes.iter().filter(|(_, s)| s.state == NodeState::Started).map(|(&n, _)| n).collect();
        if !self.started() || self.table.is_none() || live.is_empty() {
            self.wake(client, every);
            return;
        }
        self.ddl_seq += 1;
        let name = format!("x{}_{}", self.incarnation, self.ddl_seq);
        let node = *self.rng.pick(&live);
        let tc = Addr::new(node, Block::Tc(self.rng.below(self.cfg.ldm_count as u64) as u16));
        let (inc, t) = (self.incarnation, self.now + self.rng.below(3));
        let c = &mut self.clients[client as usize - 1];
        c.seq += 1;
        c.sent_at = self.now;
        c.state = ClientState::Waiting;
        c.tc = Some(tc);
        let req = Request::Ddl(DdlReq::CreateDatabase { name: name.clone(), if_not_exists: false });
        let sig = Signal::ClientRequest { client, req_id: c.seq, req };
        self.log(|| format!("DDL client: CREATE DATABASE {name} via {tc:?}"));
        self.ddl_waiting = Some(name);
        self.push(t, Event::Deliver { from: None, to: tc, sig, incarnation: inc });
    }

    pub(super) fn ddl_reply(&mut self, client: u64, reply: Reply) {
        let name = self.ddl_waiting.take();
        self.log(|| format!("DDL client: {name:?} answered {reply:?}"));
        match reply {
            Reply::DdlDone { .. } => {
                self.ddl_acked.insert(name.expect("a DDL in flight"));
                self.stats.schema_changes += 1;
            }
            // Not done, or (the master failed) not known whether done.
            Reply::Error(e) if e.is_temporary() || e.code == tern_types::ErrorCode::UnknownResult => {}
            other => self.fail(&format!("DDL client: unexpected reply {other:?}")),
        }
        let c = &mut self.clients[client as usize - 1];
        c.state = ClientState::Idle;
        c.tc = None;
        let after = self.cfg.ddl_every_ms / 2 + self.rng.below(self.cfg.ddl_every_ms);
        self.wake(client, after);
    }

    pub(super) fn client_request(&mut self, client: u64, req: Request) {
        let inc = self.incarnation;
        let c = &mut self.clients[client as usize - 1];
        c.seq += 1;
        c.sent_at = self.now;
        let req_id = c.seq;
        c.state = ClientState::Waiting;
        let t = self.now + self.rng.below(3);
        // Any tc of any node coordinates (DDL and status go to node 1's first tc).
        let to = match &req {
            Request::Txn(_) => match c.tc {
                Some(tc) => tc,
                None => {
                    let live = self.cluster.live_nodes();
                    let node = *self.rng.pick(&live);
                    let tc = Addr::new(node, Block::Tc(self.rng.below(self.cfg.ldm_count as u64) as u16));
                    self.clients[client as usize - 1].tc = Some(tc);
                    tc
                }
            },
            _ => self.verify_tc(),
        };
        self.push(
            t,
            Event::Deliver { from: None, to, sig: Signal::ClientRequest { client, req_id, req }, incarnation: inc },
        );
    }

    pub(super) fn wake(&mut self, client: u64, after: u64) {
        let inc = self.incarnation;
        self.push(self.now + after, Event::ClientWake { client, incarnation: inc });
    }

    pub(super) fn client_act(&mut self, client: u64) {
        if Some(client) == self.ddl_client() && self.clients[client as usize - 1].state == ClientState::Idle {
            return self.ddl_act(client);
        }
        if !self.started() || self.clients[client as usize - 1].state != ClientState::Idle {
            self.wake(client, 5);
            return;
        }
        let Some(table) = self.table.clone() else {
            if client == 1 {
                self.create_schema();
            } else {
                self.wake(client, 10);
            }
            return;
        };
        let layout = self.layout.clone().expect("table");
        let stamp_base = ((self.incarnation as i64) << 40) | ((client as i64) << 32);
        let seq = self.clients[client as usize - 1].seq as i64;
        let nops = 1 + self.rng.below(4) as usize;
        let read_only = self.rng.chance(25);
        let mut ops = Vec::new();
        let (mut read_keys, mut stamps) = (Vec::new(), Vec::new());
        for i in 0..nops {
            let id = self.rng.below(self.cfg.keys) as i64;
            let mut key = Vec::new();
            layout.encode_key(&[Value::Int(id)], &mut key).expect("key");
            let stamp = stamp_base | (seq << 4) | i as i64;
            let b = if self.rng.chance(30) { Value::Null } else { Value::Int(self.rng.below(1000) as i64) };
            let mut row = Vec::new();
            layout.encode_row(&[Value::Int(id), Value::Int(stamp), b], &mut row).expect("row");
            let kind = if read_only {
                *self.rng.pick(&[OpKind::Read, OpKind::Read, OpKind::ReadShared, OpKind::ReadExclusive])
            } else {
                *self.rng.pick(&[
                    OpKind::Write,
                    OpKind::Write,
                    OpKind::Insert,
                    OpKind::Update,
                    OpKind::Delete,
                    OpKind::Read,
                ])
            };
            // Some writes return the previous row (as the Redis front end's do): a write that
            // inserts then answers NotFound, and must replicate all the same.
            let returning = if self.rng.chance(30) { Some(vec![1]) } else { None };
            let op = match kind {
                OpKind::Write | OpKind::Insert => {
                    KeyOp { table: table.id, kind, key, row, updates: vec![], projection: returning }
                }
                OpKind::Update => KeyOp {
                    table: table.id,
                    kind,
                    key,
                    row: vec![],
                    updates: vec![ColumnUpdate { col: 1, expr: UpdateExpr::Set(Value::Int(stamp)) }],
                    projection: None,
                },
                k => KeyOp { table: table.id, kind: k, key, row: vec![], updates: vec![], projection: None },
            };
            read_keys.push(read_only.then_some(id));
            if matches!(op.kind, OpKind::Write | OpKind::Insert | OpKind::Update) {
                stamps.push(stamp);
            }
            ops.push(op);
        }
        let exec = match self.rng.below(10) {
            0 => Exec::Rollback,
            1 => Exec::NoCommit,
            _ => Exec::Commit,
        };
        let durable = self.rng.chance(30);
        self.clients[client as usize - 1].next_txn += 1;
        let txn = self.clients[client as usize - 1].next_txn;
        // Only transactions that write need their epoch on disk before a durable acknowledgement.
        let writes = ops.iter().any(|o| o.kind.is_write());
        let c = &mut self.clients[client as usize - 1];
        c.pending = Some((txn, durable && writes));
        c.write_ops = ops.iter().map(|o| o.kind.is_write()).collect();
        c.wrote = false;
        c.tc = None;
        c.read_keys = read_keys;
        c.batch_stamps = stamps;
        c.txn_stamps.clear();
        self.client_request(
            client,
            Request::Txn(TxnReq { txn, ops, exec, abort: AbortOption::AbortOnError, durable, nowait: false }),
        );
    }

    pub(super) fn create_schema(&mut self) {
        let t = Table {
            id: 0,
            database: "sim".into(),
            name: "t".into(),
            columns: vec![
                Column::new("id", ColumnType::BigInt { unsigned: false }).not_null(),
                Column::new("a", ColumnType::BigInt { unsigned: false }).not_null(),
                Column::new("b", ColumnType::Int { unsigned: false }),
            ],
            primary_key: vec![0],
            partition_key: vec![0],
            // A unique index: writes that would duplicate `b` abort; its hidden index table is
            // checked against the base rows after every recovery.
            indexes: if self.cfg.unique_index {
                vec![tern_types::schema::Index { id: 0, name: "b_uq".into(), columns: vec![2], unique: true }]
            } else {
                vec![]
            },
            partition_count: 0,
            groups: 0,
            ttl: None,
            // Reads at the primary: the linearizability check holds them to the version order
            // (a committed read at a backup may see a commit before its primary does).
            comment: if self.cfg.read_backup { String::new() } else { "NDB_TABLE=READ_BACKUP=0".into() },
        };
        self.client_request(1, Request::Ddl(DdlReq::CreateDatabase { name: "sim".into(), if_not_exists: true }));
        self.clients[0].state = ClientState::Scanning;
        self.pending_table = Some(t);
    }

    pub(super) fn client_reply(&mut self, client: u64, _req_id: u64, reply: Reply) {
        if Some(client) == self.ddl_client() {
            return self.ddl_reply(client, reply);
        }
        let idx = client as usize - 1;
        match reply {
            Reply::DdlDone { .. } if self.table.is_none() => {
                if let Some(t) = self.pending_table.take() {
                    self.client_request(client, Request::Ddl(DdlReq::CreateTable { table: t, if_not_exists: true }));
                    self.clients[idx].state = ClientState::Scanning;
                    return;
                }
                self.client_request(client, Request::GetCatalog);
                return;
            }
            Reply::Catalog(c) => {
                let t = c.find_table("sim", "t").cloned();
                if let Some(t) = t {
                    let idx = t.indexes.first().map(|i| i.id);
                    self.index_table = idx.and_then(|i| c.index_tables.get(&i)).and_then(|it| c.table(*it)).cloned();
                    self.layout = Some(RowLayout::new(&t));
                    self.table = Some(t);
                }
            }
            Reply::Txn(resp) => {
                if self.txn_reply(client, resp) {
                    return;
                }
            }
            Reply::Error(e) if e.is_temporary() => {}
            // The schema set-up's master failed: tried again.
            Reply::Error(e) if e.code == tern_types::ErrorCode::UnknownResult && self.table.is_none() => {}
            other => self.fail(&format!("client {client}: unexpected reply {other:?}")),
        }
        self.clients[idx].state = ClientState::Idle;
        let think = self.rng.below(8);
        self.wake(client, think);
    }

    /// Handles a transaction answer; true when it sent a follow-up request.
    pub(super) fn txn_reply(&mut self, client: u64, resp: tern_wire::TxnResp) -> bool {
        let idx = client as usize - 1;
        let (_, durable) = self.clients[idx].pending.take().unwrap_or((0, false));
        // Only a write that found its row (or inserted one) leaves something to commit; a
        // transaction without any commits nothing and is answered at once, durable or not.
        let c = &mut self.clients[idx];
        let wrote_now = resp.results.iter().enumerate().any(|(i, r)| {
            c.write_ops.get(i).copied().unwrap_or(false) && !matches!(r, OpResult::NotFound | OpResult::Error(_))
        });
        c.wrote |= wrote_now;
        let write_ops = std::mem::take(&mut c.write_ops);
        let durable = durable && c.wrote;
        let read_keys = std::mem::take(&mut c.read_keys);
        let stamps = std::mem::take(&mut c.batch_stamps);
        c.txn_stamps.extend(stamps);
        let invoked = c.sent_at;
        // Committed reads: every value read was written by a transaction past its commit point.
        let layout = self.layout.clone().expect("table");
        for (i, r) in resp.results.iter().enumerate() {
            if write_ops.get(i).copied().unwrap_or(false) {
                continue; // the previous row a write returned (projected)
            }
            if let OpResult::Row(bytes) = r {
                self.stats.reads += 1;
                let v = layout.decode_row(bytes).expect("row");
                let a = v[1].as_i128().expect("int") as i64;
                let own = ((a >> 32) & 0xFF) as u64 == client && (a >> 40) as u32 == self.incarnation;
                if !own && !self.oracle.committed_stamps.contains(&a) && !self.base.values().any(|r| r.0 == a) {
                    self.fail(&format!("client {client} read value {a} that no committed transaction wrote"));
                }
                if let Some(&Some(key)) = read_keys.get(i)
                    && !self.cfg.read_backup
                {
                    self.lin_reads.push(linear::Read { key, stamp: a, invoked, answered: self.now });
                }
            }
        }
        match resp.outcome {
            Outcome::Committed { epoch } => {
                self.stats.commits += 1;
                for s in std::mem::take(&mut self.clients[idx].txn_stamps) {
                    self.lin_acks.insert(s, self.now);
                }
                if durable {
                    self.durable_acks.push((resp.txn as i64, epoch));
                    let tc = self.clients[idx].tc;
                    self.log(|| format!("durable ack of client {client} txn {} epoch {epoch} via {tc:?}", resp.txn));
                }
            }
            Outcome::Open => {
                // Finish the transaction: commit it (or roll it back) in a second batch.
                let exec = if self.rng.chance(70) { Exec::Commit } else { Exec::Rollback };
                self.clients[idx].pending = Some((resp.txn, durable));
                self.client_request(
                    client,
                    Request::Txn(TxnReq {
                        txn: resp.txn,
                        ops: vec![],
                        exec,
                        abort: AbortOption::AbortOnError,
                        durable,
                        nowait: false,
                    }),
                );
                return true;
            }
            Outcome::Aborted(e) => {
                self.stats.aborts += 1;
                if e.code == tern_types::ErrorCode::LockWaitTimeout {
                    self.stats.lock_timeouts += 1;
                }
                if e.code == tern_types::ErrorCode::Deadlock {
                    self.stats.deadlocks += 1;
                }
            }
            Outcome::RolledBack => self.stats.aborts += 1,
        }
        false
    }

    pub(super) fn wake_all(&mut self) {
        for c in 1..=self.clients.len() as u64 {
            let t = self.rng.below(5);
            self.wake(c, t);
        }
    }
}
