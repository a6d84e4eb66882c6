//! Durability: the redo buffer, epoch flushes, fuzzy checkpoints and freeing old redo.

use super::*;

impl Ldm {
    pub(super) fn write_redo_buffer(&mut self, out: &mut Out) {
        if !self.redo_buf.is_empty() {
            // The next buffer is sized for what this one held (up to a full buffer), so a busy
            // ldm does not grow each buffer by doubling (copies and fresh page faults each time).
            let cap =
                (self.redo_buf.len() + (self.redo_buf.len() >> 3)).clamp(4096, self.cfg.redo_buffer_bytes + (64 << 10));
            let bytes = std::mem::replace(&mut self.redo_buf, Vec::with_capacity(cap));
            self.stats.redo_bytes.fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
            out.io(self.addr, IoReq::RedoAppend { ldm: self.instance(), bytes });
            self.appended_since_sync = true;
        }
    }

    /// An epoch flush: the buffer to disk and a sync. With `mark` (epoch `epoch` or one before
    /// it had commits somewhere) an epoch mark goes last before the sync, even when this ldm
    /// wrote nothing else: the node's disk then holds every epoch up to `epoch` (`redo`).
    pub(super) fn flush(&mut self, epoch: u64, mark: bool, out: &mut Out) {
        debug_assert!(self.synced_lsn <= self.lsn, "invariant: the synced redo position is a written one");
        if mark {
            let before = self.redo_buf.len();
            redo::append_epoch_mark(&mut self.redo_buf, epoch);
            self.lsn += (self.redo_buf.len() - before) as u64;
        }
        self.write_redo_buffer(out);
        let max_epoch = self.max_epoch_applied;
        if !self.appended_since_sync {
            out.send(
                self.flush_reply_to,
                Signal::EpochFlushed { from: self.addr, epoch, synced_lsn: self.synced_lsn, max_epoch },
            );
            return;
        }
        let token = self.token();
        out.io(self.addr, IoReq::RedoSync { ldm: self.instance(), token });
        self.appended_since_sync = false;
        debug_assert!(
            self.pending_flush.is_none_or(|(_, e, lsn, _)| e <= epoch && lsn <= self.lsn),
            "invariant: flushes follow each other in epoch and redo order"
        );
        self.pending_flush = Some((token, epoch, self.lsn, max_epoch));
    }

    pub(super) fn io_done(&mut self, token: u64, result: Result<(), String>, out: &mut Out) {
        if let Err(e) = result {
            panic!("ldm {}: disk request failed: {e}", self.instance());
        }
        if let Some((t, epoch, lsn, max_epoch)) = self.pending_flush
            && t == token
        {
            self.pending_flush = None;
            assert!(lsn >= self.synced_lsn, "invariant: the synced redo position only grows");
            self.synced_lsn = lsn;
            out.send(self.flush_reply_to, Signal::EpochFlushed { from: self.addr, epoch, synced_lsn: lsn, max_epoch });
            if self.phase == Phase::Ready && self.lsn - self.checkpoint_start_lsn >= self.cfg.checkpoint_redo_bytes {
                self.start_checkpoint(out);
            }
            return;
        }
        let Some(run) = self.checkpoint_run.as_mut() else { return };
        if let Some(i) = run.chunk_tokens.iter().position(|&t| t == token) {
            run.chunk_tokens.swap_remove(i);
            if !run.step_queued && run.finish.is_none() {
                self.checkpoint_step(out);
            }
            return;
        }
        if run.finish.as_ref().is_some_and(|(t, _)| *t == token) {
            let (_, ck) = self.checkpoint_run.take().expect("running").finish.expect("finishing");
            crate::tc::NodeStats::count(&self.stats.checkpoints);
            self.checkpoints_written.push(ck);
            if self.phase == Phase::StartCheckpoint {
                // The start-up checkpoint holds only durable data: usable at once. Old files are
                // removed only when the dist block says every ldm has written its own.
                self.phase = Phase::Ready;
                out.send(self.dist, Signal::LdmReady { from: self.addr, synced_lsn: self.synced_lsn });
            } else {
                self.on_durable(self.durable_epoch, out);
                self.fetch_checkpoint(out);
            }
        }
    }

    /// Starts a fuzzy checkpoint of every partition: it records the redo position now, then
    /// streams the partitions out a chunk per loop turn while transactions go on.
    pub(super) fn start_checkpoint(&mut self, out: &mut Out) {
        if self.checkpoint_run.is_some() {
            return;
        }
        self.write_redo_buffer(out);
        let id = self.next_checkpoint_id;
        self.next_checkpoint_id += 1;
        debug_assert!(self.lsn >= self.checkpoint_start_lsn, "invariant: checkpoints start in redo order");
        self.checkpoint_start_lsn = self.lsn;
        // A file of that name can only be debris; start from nothing.
        out.io(self.addr, IoReq::DeleteFile { name: checkpoint::part_name(self.instance(), id) });
        let mut stream = CheckpointStream::new(self.instance(), id, self.lsn);
        stream.set_chunk_capacity(self.cfg.checkpoint_chunk_bytes.max(1) + (64 << 10));
        self.checkpoint_run = Some(CheckpointRun {
            id,
            start_lsn: self.lsn,
            parts: self.parts.keys().copied().collect(),
            part_idx: 0,
            next_row: None,
            stream: Some(stream),
            chunk_tokens: Vec::new(),
            finish: None,
            step_queued: false,
        });
        self.checkpoint_step(out);
    }

    /// Produces the next chunk of the running checkpoint (or its end).
    pub(super) fn checkpoint_step(&mut self, out: &mut Out) {
        let Some(mut run) = self.checkpoint_run.take() else { return };
        run.step_queued = false;
        if run.finish.is_some() || run.chunk_tokens.len() >= CHECKPOINT_CHUNKS_IN_FLIGHT {
            self.checkpoint_run = Some(run);
            return;
        }
        let ldm = self.instance();
        let chunk_bytes = self.cfg.checkpoint_chunk_bytes.max(1);
        let stream = run.stream.as_mut().expect("stream until finished");
        while run.part_idx < run.parts.len() && stream.buffered() < chunk_bytes {
            let key = run.parts[run.part_idx];
            let Some(p) = self.parts.get(&key) else {
                run.part_idx += 1;
                run.next_row = None;
                continue;
            };
            let from = match run.next_row {
                Some(r) => r,
                None => {
                    stream.partition(key.0, key.1);
                    0
                }
            };
            let next = p.scan(from, |_, row| {
                stream.row(row);
                stream.buffered() < chunk_bytes
            });
            match next {
                Some(r) => run.next_row = Some(r),
                None => {
                    run.part_idx += 1;
                    run.next_row = None;
                }
            }
        }
        let part = checkpoint::part_name(ldm, run.id);
        if run.part_idx >= run.parts.len() {
            let last = run.stream.take().expect("stream").finish(self.max_epoch_applied);
            let token = self.token();
            out.io(self.addr, IoReq::FileAppend { name: part.clone(), bytes: last, token });
            run.chunk_tokens.push(token);
            let token = self.token();
            let name = checkpoint::file_name(ldm, run.id);
            out.io(self.addr, IoReq::FileFinish { from: part, to: name.clone(), token });
            let ck =
                WrittenCheckpoint { id: run.id, start_lsn: run.start_lsn, max_epoch: self.max_epoch_applied, name };
            run.finish = Some((token, ck));
        } else {
            let chunk = stream.take_chunk();
            let token = self.token();
            out.io(self.addr, IoReq::FileAppend { name: part, bytes: chunk, token });
            run.chunk_tokens.push(token);
            if run.chunk_tokens.len() < CHECKPOINT_CHUNKS_IN_FLIGHT {
                run.step_queued = true;
                out.send(self.addr, Signal::CheckpointStep);
            }
        }
        self.checkpoint_run = Some(run);
    }

    /// A newer epoch is durable: checkpoints whose data it covers become usable, which frees the
    /// redo before them and the older checkpoint files.
    pub(super) fn on_durable(&mut self, epoch: u64, out: &mut Out) {
        self.durable_epoch = self.durable_epoch.max(epoch);
        debug_assert!(
            self.checkpoints_written.windows(2).all(|w| w[0].id < w[1].id && w[0].start_lsn <= w[1].start_lsn),
            "invariant: written checkpoints are in id and redo order"
        );
        if self.phase != Phase::Ready {
            return;
        }
        let usable: Vec<usize> = (0..self.checkpoints_written.len())
            .filter(|&i| self.checkpoints_written[i].max_epoch <= self.durable_epoch)
            .collect();
        let Some(&newest) = usable.last() else { return };
        if !self.cleanup_allowed {
            return;
        }
        let ck = self.checkpoints_written.remove(newest);
        let mut stale: Vec<String> = std::mem::take(&mut self.old_checkpoints);
        for i in usable.iter().rev().skip(1) {
            stale.push(self.checkpoints_written.remove(*i).name);
        }
        if let Some(prev) = self.current_checkpoint.take() {
            stale.push(prev.name);
        }
        for name in stale {
            out.io(self.addr, IoReq::DeleteFile { name });
        }
        // Only redo a usable checkpoint covers may go: it began before the synced position.
        assert!(ck.start_lsn <= self.lsn, "invariant: a checkpoint starts at a written redo position");
        assert!(ck.max_epoch <= self.durable_epoch, "invariant: only a checkpoint of durable data frees redo");
        out.io(self.addr, IoReq::RedoDiscard { ldm: self.instance(), lsn: ck.start_lsn });
        let id = ck.id;
        self.current_checkpoint = Some(ck);
        self.fetch_checkpoint_usable(id, out);
    }
}
