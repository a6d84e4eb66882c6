//! The simulated network: signal delivery with random delays (FIFO per link), cut links, per-node
//! clocks, and the blocks' outputs turned into events.

use super::*;

impl Sim {
    /// A node's own clock: its offset plus the simulator's time at its rate (monotonic).
    pub(super) fn node_now(&self, node: NodeId) -> u64 {
        match self.clocks.get(&node) {
            Some(&(offset, rate)) => offset + self.now * rate / 1000,
            None => self.now,
        }
    }

    /// The simulator's time after a node's timer of `delay` ms (at the node's clock rate).
    pub(super) fn timer_at(&self, node: NodeId, delay: u64) -> u64 {
        match self.clocks.get(&node) {
            Some(&(_, rate)) => self.now + (delay * 1000).div_ceil(rate),
            None => self.now + delay,
        }
    }

    /// The `TERN_SIM_LOG` lines of a signal: restarts and copies, and the signals of the
    /// transaction (`TERN_SIM_TXN`) and epoch (`TERN_SIM_EPOCH`) asked for.
    pub(super) fn trace_send(&self, from: Addr, to: Addr, sig: &Signal) {
        let txn = match sig {
            Signal::Prepare(b) | Signal::Prepared(b) => Some(b.txn),
            Signal::Commit { txn, .. }
            | Signal::Committed { txn, .. }
            | Signal::Complete { txn, .. }
            | Signal::Abort { txn, .. } => Some(*txn),
            _ => None,
        };
        let epoch = match sig {
            Signal::EpochFlush { epoch, .. }
            | Signal::EpochTcFinished { epoch, .. }
            | Signal::EpochCommit { epoch, .. }
            | Signal::EpochFlushed { epoch, .. }
            | Signal::EpochSave { epoch, .. }
            | Signal::EpochDurable { epoch }
            | Signal::EpochPrepare { epoch, .. } => Some(*epoch),
            _ => None,
        };
        let wanted = txn.is_some_and(|t| self.log_txn == Some(t.id))
            || epoch.is_some_and(|e| self.log_epoch == Some(e))
            || matches!(
                sig,
                Signal::StartCopy | Signal::CopyFragReq { .. } | Signal::CopyDone { .. } | Signal::CatalogReq { .. }
            );
        if let Signal::SchemaWrite { catalog, broadcast, .. } = sig {
            self.log(|| format!("{from:?} -> {to:?}: SchemaWrite version {} broadcast {broadcast}", catalog.version));
        } else if matches!(sig, Signal::SchemaWritten { .. } | Signal::MgmCatalog { .. } | Signal::CatalogStored { .. })
        {
            self.log(|| match sig {
                Signal::MgmCatalog { catalog, refused } => {
                    format!("{from:?} -> {to:?}: MgmCatalog version {} refused {refused:?}", catalog.version)
                }
                other => format!("{from:?} -> {to:?}: {other:?}"),
            });
        } else if wanted {
            self.log(|| format!("{from:?} -> {to:?}: {sig:?}"));
        } else if let Signal::CopyRows { table, partition, rows, done, .. } = sig {
            self.log(|| {
                format!(
                    "{from:?} -> {to:?}: CopyRows table {table} partition {partition} rows {} done {done}",
                    rows.len()
                )
            });
        }
    }

    /// Sends a signal over the link from -> to, keeping per-link FIFO order.
    pub(super) fn send(&mut self, from: Addr, to: Addr, sig: Signal) {
        if self.log_enabled {
            self.trace_send(from, to, &sig);
        }
        if matches!(from.block, Block::Ldm(_)) {
            self.observe_ldm_send(from, &sig);
        }
        match sig {
            Signal::FastOff { .. } => self.stats.fast_offs += 1,
            Signal::Resolve { .. } => self.stats.resolves += 1,
            _ => {}
        }
        if from.node != to.node && self.cut.contains(&(from.node.min(to.node), from.node.max(to.node))) {
            return; // the link is cut: lost
        }
        let delay = self.rng.below(3);
        let t = (self.now + delay).max(*self.link_time.get(&(from, to)).unwrap_or(&0));
        self.link_time.insert((from, to), t);
        let inc = self.incarnation;
        self.push(t, Event::Deliver { from: Some(from.node), to, sig, incarnation: inc });
    }

    pub(super) fn deliver(&mut self, to: Addr, sig: Signal) {
        if self.nodes.get(&to.node).is_none_or(|n| n.node.is_none()) {
            return; // a failed node: the transporter drops it
        }
        if let Signal::Commit { txn, .. } = &sig
            && self.armed_since.is_some()
            && txn.tc.node != to.node
            && self.rng.chance(50)
        {
            // The coordinator dies right after a replica on another node committed: the
            // takeover must commit the rest.
            self.strike = Some(txn.tc.node);
        }
        self.observe_delivery(to.node, &sig);
        if let Signal::EpochSave { from, epoch, .. } = &sig
            && !self.nodes[&to.node].node.as_ref().is_some_and(|n| n.dist.is_running())
        {
            // The master may only count on nodes that told it they started (a real node
            // restarting slowly took this for an assert, dist.rs, before issue 32).
            self.fail(&format!(
                "master {from:?} sent an epoch save of {epoch} to node {}, which has not started",
                to.node
            ));
        }
        let mut out = Out::default();
        let now = self.node_now(to.node);
        let node = self.nodes.get_mut(&to.node).and_then(|n| n.node.as_mut()).expect("a running node");
        let what = if self.log_enabled { format!("{to:?} {sig:?}").chars().take(300).collect() } else { String::new() };
        node.handle(now, to.block, sig, &mut out);
        let seed = self.seed;
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| node.check_invariants())) {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            panic!("simulation failed (seed {seed}, t={now} ms): block invariant: {} {what}", msg.unwrap_or_default());
        }
        self.effects(to, out);
    }

    pub(super) fn effects(&mut self, from: Addr, out: Out) {
        let inc = self.incarnation;
        // A block's continuation of its own task travels as any signal does (the simulator's
        // delivery order already interleaves it with other work).
        for (to, sig) in out.signals.into_iter().chain(out.later) {
            self.observe(to, &sig);
            self.send(from, to, sig);
        }
        for (client, req_id, reply) in out.replies {
            let t = self.now + self.rng.below(3);
            self.push(t, Event::Reply { client, req_id, reply, incarnation: inc });
        }
        for (from_addr, req) in out.io {
            // Each node's disk executes requests in order, each after a random delay.
            let delay = self.rng.below(4);
            let sn = self.nodes.get_mut(&from_addr.node).expect("a node");
            sn.io_time = sn.io_time.max(self.now) + delay;
            let t = sn.io_time;
            self.push(t, Event::Io { from: from_addr, req, incarnation: inc });
        }
        for (delay, to, sig) in out.timers {
            let at = self.timer_at(to.node, delay);
            self.push(at, Event::Deliver { from: Some(to.node), to, sig, incarnation: inc });
        }
        // Requests to the control plane go to the node's membership threads (its control
        // inbox, in-process): their calls of the management nodes are `member`'s.
        let node_incarnation = self.cluster.nodes.get(&from.node).map_or(0, |s| s.incarnation);
        // Modelled membership: the requests travel like messages, delayed (heartbeat-sized)
        // and sometimes delivered twice (a retried proposal).
        let (copies_pct, delay) = if self.cfg.membership { (0, 3) } else { (10, 40) };
        for req in out.control {
            let copies = if self.rng.chance(copies_pct) { 2 } else { 1 };
            for _ in 0..copies {
                let at = self.now + 1 + self.rng.below(delay);
                let ev = Event::Control { node: from.node, node_incarnation, req: req.clone(), incarnation: inc };
                self.push(at, ev);
            }
        }
    }
}
