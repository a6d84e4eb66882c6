//! Blocking pops (BLPOP BRPOP BLMOVE BRPOPLPUSH BLMPOP BZPOPMIN BZPOPMAX BZMPOP). A blocked
//! connection tries its command, and while every key is empty it waits in a queue per key, in
//! arrival order: a write to a key (`Server::touch`) wakes the first waiter of that key's queue,
//! which tries again; a waiter that is served (or leaves) wakes the next, so clients are served
//! in the order they blocked. Writes through another API server (or SQL, REST) are seen by the
//! first waiter of each key trying again every `POLL` (only the first, so the order holds).
//! Inside MULTI these commands do not block (their one try answers), as in redis.

use super::{CR, Spec, fail};
use crate::clients::lock;
use crate::resp::parse_int;
use crate::{Server, Session};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How often the first waiter of a key tries again without a local wake-up.
const POLL: Duration = Duration::from_millis(50);
/// How often any waiter checks that its client is still connected.
const PEER_CHECK: Duration = Duration::from_millis(200);

/// Whether the client closed its side of the socket `fd` (a waiter that would pop for a gone
/// client would lose the element). Bytes it sent meanwhile (pipelined commands) are left for
/// the connection to read.
fn peer_gone(fd: i32) -> bool {
    if fd < 0 {
        return false;
    }
    let mut p = libc::pollfd { fd, events: libc::POLLIN | libc::POLLRDHUP, revents: 0 };
    // SAFETY: one pollfd on the stack, no wait.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    if n <= 0 {
        return false;
    }
    if p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 {
        return true;
    }
    let mut b = [0u8; 1];
    // SAFETY: peeks one byte into a stack buffer without blocking.
    let r = unsafe { libc::recv(fd, b.as_mut_ptr() as *mut libc::c_void, 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
    r == 0
}

/// A blocking command's timeout: None blocks for ever (0).
pub(crate) fn timeout_arg(a: &[u8]) -> CR<Option<Duration>> {
    let t = std::str::from_utf8(a).ok().and_then(|s| s.parse::<f64>().ok()).filter(|t| t.is_finite());
    let Some(t) = t else { return fail("ERR timeout is not a float or out of range") };
    if t < 0.0 {
        return fail("ERR timeout is negative");
    }
    if t * 1000.0 > i64::MAX as f64 / 2.0 {
        return fail("ERR timeout is out of range");
    }
    Ok((t > 0.0).then(|| Duration::from_secs_f64(t)))
}

/// The blocking commands: the keys they wait on, and the position of their timeout.
pub(crate) fn blocking_keys(name: &str, a: &[Vec<u8>]) -> Option<(Vec<Vec<u8>>, usize)> {
    match name {
        "blpop" | "brpop" | "bzpopmin" | "bzpopmax" => Some((a[1..a.len() - 1].to_vec(), a.len() - 1)),
        "blmove" | "brpoplpush" => Some((vec![a[1].clone()], a.len() - 1)),
        "blmpop" | "bzmpop" => {
            let n = parse_int(a.get(2)?).filter(|n| *n > 0)? as usize;
            Some((a.get(3..3 + n)?.to_vec(), 1))
        }
        _ => None,
    }
}

/// One waiter: its wake-up.
struct Waiter {
    id: u64,
    wake: Arc<Notify>,
}

type Queues = HashMap<(u32, Vec<u8>), VecDeque<Waiter>>;

/// The queues of blocked connections per (database, key).
#[derive(Default)]
pub struct Blockers {
    queues: Mutex<Queues>,
    next: AtomicU64,
    /// Connections blocked now (INFO `blocked_clients`).
    pub blocked: AtomicU64,
}

impl Blockers {
    /// Wakes the first waiter of a key.
    pub fn wake(&self, db: u32, key: &[u8]) {
        let q = lock(&self.queues);
        if q.is_empty() {
            return;
        }
        if let Some(w) = q.get(&(db, key.to_vec())).and_then(|q| q.front()) {
            w.wake.notify_one();
        }
    }

    fn join(&self, db: u32, keys: &[Vec<u8>], wake: &Arc<Notify>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut q = lock(&self.queues);
        for k in keys {
            q.entry((db, k.clone())).or_default().push_back(Waiter { id, wake: wake.clone() });
        }
        self.blocked.fetch_add(1, Ordering::Relaxed);
        id
    }

    /// Leaves every queue; the next waiter of each key gets its chance.
    fn leave(&self, db: u32, keys: &[Vec<u8>], id: u64) {
        let mut q = lock(&self.queues);
        for k in keys {
            let e = (db, k.clone());
            if let Some(v) = q.get_mut(&e) {
                v.retain(|w| w.id != id);
                match v.front() {
                    Some(w) => w.wake.notify_one(),
                    None => {
                        q.remove(&e);
                    }
                }
            }
        }
        self.blocked.fetch_sub(1, Ordering::Relaxed);
    }

    /// Whether waiter `id` is first in the queue of any of `keys`.
    fn first_anywhere(&self, db: u32, keys: &[Vec<u8>], id: u64) -> bool {
        let q = lock(&self.queues);
        keys.iter().any(|k| q.get(&(db, k.clone())).and_then(|v| v.front()).is_some_and(|w| w.id == id))
    }
}

impl Server {
    /// Runs a blocking command outside MULTI: tries it, and while it finds nothing waits for a
    /// write to one of its keys, the timeout, or CLIENT KILL. The reply (RESP2) is appended.
    pub(super) async fn blocking(self: &Arc<Self>, sess: &mut Session, spec: &Spec, a: &[Vec<u8>], out: &mut Vec<u8>) {
        let start = out.len();
        let null: &[u8] = if matches!(spec.name, "blmove" | "brpoplpush") { b"$-1\r\n" } else { b"*-1\r\n" };
        let keys = blocking_keys(spec.name, a);
        let timeout = match keys.as_ref().map(|(_, t)| timeout_arg(&a[*t])) {
            Some(Ok(t)) => t,
            _ => None,
        };
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut waiting: Option<(u64, Arc<Notify>)> = None;
        let db = sess.db;
        let mut try_now = true;
        loop {
            if try_now {
                out.truncate(start);
                self.try_once(sess, spec, a, out).await;
                if &out[start..] != null {
                    break;
                }
            }
            let Some((keys, _)) = keys.as_ref() else { break };
            if sess.info.is_killed() || deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            if peer_gone(sess.fd) {
                sess.info.kill();
                break;
            }
            let (id, wake) = match &waiting {
                Some(w) => w.clone(),
                None => {
                    let wake = Arc::new(Notify::new());
                    let id = self.blockers.join(db, keys, &wake);
                    waiting = Some((id, wake.clone()));
                    (id, wake)
                }
            };
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let first = self.blockers.first_anywhere(db, keys, id);
            let nap =
                left.map_or(if first { POLL } else { PEER_CHECK }, |l| l.min(if first { POLL } else { PEER_CHECK }));
            // Woken: try. A poll's tick: only the first waiter of a key tries (so the order
            // holds); the others only check their client. The deadline: one last try.
            try_now = match crate::first_of(wake.notified(), tokio::time::sleep(nap), sess.info.killed()).await {
                crate::First::A(()) => true,
                crate::First::B(()) => first || deadline.is_some_and(|d| Instant::now() >= d),
                crate::First::C(()) => false,
            };
            if !try_now && deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
        }
        if let (Some((id, _)), Some((keys, _))) = (waiting, keys.as_ref()) {
            self.blockers.leave(db, keys, id);
        }
        // A killed connection closes without a reply, as redis's does.
        if sess.info.is_killed() {
            out.truncate(start);
            return;
        }
        // A timed-out BLMOVE answers a null array, not LMOVE's null string.
        if keys.is_some() && &out[start..] == null {
            out.truncate(start);
            crate::resp::null_array(out);
        }
    }
}
