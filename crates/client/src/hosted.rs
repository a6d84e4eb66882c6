//! Front ends on a data-node worker's thread (the single-host layout `front_ends = "worker"`):
//! worker 0 of the data node runs as a task of a current-thread tokio runtime on its own
//! thread, next to the connection tasks of the front ends placed there (Redis, REST). A request
//! goes from a connection task to the worker's mailbox and its reply comes back to the task
//! without crossing a thread: no futex, no eventfd, no cache line moving between cores —
//! redis-server's shape (one thread does all of a request), with Tern's blocks in between.
//!
//! The worker does not spin on this thread (its front-end tasks need the time); the runtime's
//! spin-before-park (`crate::spinwatch`) watches the worker's epoll descriptor with the
//! client sockets, so a push from another thread (worker 1, the disk thread) or a native
//! client's bytes end a spin as a client's request does.

use std::future::poll_fn;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use tern_wire::{HostedWorker, Turn};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// The worker's epoll descriptor, for tokio's reactor (owned by the worker, never closed here).
struct WorkerFd(RawFd);

impl AsRawFd for WorkerFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Worker 0's thread body: sends the runtime's handle (for the front ends) to `handle`, then
/// drives the worker until the node stops. The front-end tasks end with it.
pub fn host(
    handle: std::sync::mpsc::SyncSender<tokio::runtime::Handle>,
) -> Box<dyn FnOnce(Box<dyn HostedWorker>) + Send> {
    Box::new(move |w: Box<dyn HostedWorker>| {
        w.bind_thread();
        // Requests of this thread's tasks leave together: before each worker turn, and before the
        // thread parks.
        crate::set_defer_sends(true);
        crate::set_hosts_worker();
        // Its own spin set: the worker's descriptor and the connections its tasks accept.
        crate::spinwatch::enter(crate::spinwatch::new_set());
        let probe = w.probe();
        // An adaptive spin: doubled (up to the node's `spin_max_us`) when one of this thread's
        // own sockets (its front ends' connections, the worker's descriptor) turned readable
        // within it, kept when it ended on a push from another thread, shortened by an eighth when
        // it ran out. A fixed 50 µs spin after every request burnt ~40 % of a core under a
        // 1-client SQL load (the SQL front end's threads push) and halved that load's throughput
        // (sysbench point_select 1 thread ~19k -> ~9k/s); halving on every miss instead lost the
        // Redis single-client loop, which stays fast only while the spin catches its next
        // request (GET c1 1.4-1.7x -> 0.8x redis-server).
        let spin_max = w.spin_max_us();
        let spin_us = std::sync::atomic::AtomicU64::new(spin_max / 4);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .on_thread_park(move || {
                // Every task is waiting. Requests they queued go to the worker now; then spin for
                // a moment on the sockets and the mailbox (other threads' pushes cost no system
                // call while the flag is down), then let pushes wake the thread.
                crate::flush_deferred();
                if probe.kick() {
                    return;
                }
                if spin_max > 0 {
                    let us = spin_us.load(std::sync::atomic::Ordering::Relaxed);
                    let found = crate::spinwatch::park_spin_until(us, &|| probe.waiting());
                    let next = match (found, probe.waiting()) {
                        (true, false) => (us * 2).min(spin_max),
                        (true, true) => us,
                        (false, _) => (us - us / 8).max(1),
                    };
                    spin_us.store(next, std::sync::atomic::Ordering::Relaxed);
                }
                if !probe.kick() {
                    probe.arm();
                }
            })
            .build()
            .expect("a current-thread runtime for the hosted worker");
        let _ = handle.send(rt.handle().clone());
        // A spawned task (not the `block_on` future): waking it from this thread only queues it.
        let worker = rt.spawn(drive(w));
        if let Err(e) = rt.block_on(worker)
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
        }
    })
}

/// Takes the descriptor's readiness (true: it turned readable since the last look).
fn take_ready(fd: &AsyncFd<WorkerFd>, cx: &mut Context<'_>) -> bool {
    match fd.poll_read_ready(cx) {
        Poll::Ready(Ok(mut g)) => {
            g.clear_ready();
            true
        }
        Poll::Ready(Err(_)) => true,
        Poll::Pending => false,
    }
}

/// The most busy worker turns in a row before the driver yields to the front-end tasks anyway.
const YIELD_EVERY_TURNS: u32 = 8;

async fn drive(mut w: Box<dyn HostedWorker>) {
    // SAFETY: the descriptor is the worker's epoll instance, which `w` owns and keeps open until
    // `w.finish()` at the end, after `fd` is dropped.
    let fd = unsafe { AsyncFd::register_with_interest(WorkerFd(w.fd()), Interest::READABLE) }
        .map_err(|e| e.to_string())
        .expect("registering the worker's epoll descriptor with the runtime");
    crate::spinwatch::watch(w.fd());
    let probe = w.probe();
    let mut io = true;
    // Busy turns since the driver last yielded to the other tasks.
    let mut unyielded = 0u32;
    loop {
        crate::flush_deferred();
        match w.turn(io) {
            Turn::Stopped => break,
            Turn::Worked => {
                // Let the front-end tasks run when replies woke them (a yield costs the runtime
                // a wake-up of its own: not for a turn of timers or node signals), and at least
                // every `YIELD_EVERY_TURNS` so their sockets are served under any load.
                unyielded += 1;
                if w.replied_to_tasks() || unyielded >= YIELD_EVERY_TURNS {
                    unyielded = 0;
                    tokio::task::yield_now().await;
                }
                io = poll_fn(|cx| Poll::Ready(take_ready(&fd, cx))).await;
                continue;
            }
            Turn::Idle => {}
        }
        let mut sleep: Option<Pin<Box<tokio::time::Sleep>>> = None;
        let mut parked = false;
        io = poll_fn(|cx| {
            if !parked {
                match w.park(cx.waker()) {
                    None => return Poll::Ready(take_ready(&fd, cx)),
                    // The worker's descriptor wakes the task when its next timer is due.
                    Some(std::time::Duration::MAX) => {}
                    Some(t) => sleep = Some(Box::pin(tokio::time::sleep(t))),
                }
                parked = true;
            }
            let ready = take_ready(&fd, cx);
            if ready || probe.waiting() || sleep.as_mut().is_some_and(|s| s.as_mut().poll(cx).is_ready()) {
                w.unpark();
                return Poll::Ready(ready);
            }
            // (A push of this thread's tasks takes the waker and leaves mail: seen above.)
            Poll::Pending
        })
        .await;
    }
    drop(fd);
    w.finish();
}

/// Runtimes of in-process data nodes whose worker 0 hosts front ends, by the node's TCP address
/// (newest last): tests start their front ends there with `TERN_TEST_TRANSPORT=hosted`.
static HOSTS: std::sync::Mutex<Vec<(String, tokio::runtime::Handle)>> = std::sync::Mutex::new(Vec::new());

/// Names the runtime that hosts the worker of the in-process data node at `addr`.
pub fn register(addr: &str, rt: tokio::runtime::Handle) {
    HOSTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((addr.to_string(), rt));
}

/// The runtime registered for `addr`, when the environment says `TERN_TEST_TRANSPORT=hosted`.
pub fn registered(addr: &str) -> Option<tokio::runtime::Handle> {
    if !test_hosted() {
        return None;
    }
    let hosts = HOSTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    hosts.iter().rev().find(|(a, _)| a == addr).map(|(_, h)| h.clone())
}

/// Whether the front-end test suites run with their front end on the data node's worker
/// (`TERN_TEST_TRANSPORT=hosted`).
pub fn test_hosted() -> bool {
    std::env::var("TERN_TEST_TRANSPORT").as_deref() == Ok("hosted")
}

/// A host for worker 0 (`DataNode::start_hosted`) and where its runtime's handle arrives.
pub type Hosting =
    (Option<Box<dyn FnOnce(Box<dyn HostedWorker>) + Send>>, Option<std::sync::mpsc::Receiver<tokio::runtime::Handle>>);

/// For the front ends' test suites: hosting as `tern up` does when `test_hosted()`, none otherwise.
pub fn test_hosting() -> Hosting {
    if !test_hosted() {
        return (None, None);
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    (Some(host(tx)), Some(rx))
}
