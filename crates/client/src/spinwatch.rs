//! Spin-before-park for an async runtime's workers (used by the REST front end).
//!
//! A tokio worker with nothing to run sleeps in `epoll_wait`; on a virtual machine the wake-up when
//! a socket turns readable costs tens of microseconds, more than a whole primary-key read. The
//! data node's workers and the blocking client avoid that by spinning briefly before they sleep.
//! This module gives a tokio runtime the same behaviour without replacing its reactor: the sockets
//! whose readiness matters (HTTP connections, data-node connections) are also added to a private,
//! edge-triggered epoll set, and the runtime's `on_thread_park` hook calls [`park_spin`], which
//! polls that set without sleeping for a bounded time and returns as soon as one of them turns
//! readable. The runtime's own `epoll_wait` then returns at once instead of sleeping. Both epoll
//! sets keep their own edge state, so the runtime misses nothing; the spin only decides *when*
//! the worker goes to sleep, never what it sees.

//!
//! Each runtime has its own set (`new_set`, entered by its threads): with one set for the whole
//! process, one runtime's spinning thread took the edges of another runtime's sockets (edge-
//! triggered: reported once), and that runtime's thread slept through its own wake-up. Seen with
//! a data-node worker hosting Redis next to the MySQL front end: sysbench point_select at 1 thread
//! fell from ~18k to ~9k transactions/s.

use std::cell::Cell;
use std::os::fd::RawFd;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

thread_local! {
    /// The set of the runtime this thread belongs to (-1: the process-wide default set).
    static SET: Cell<RawFd> = const { Cell::new(-1) };
}

/// The calling thread's epoll set (-1 when the kernel refused one: no spinning).
fn epfd() -> RawFd {
    let own = SET.with(Cell::get);
    if own >= 0 {
        return own;
    }
    static EP: OnceLock<RawFd> = OnceLock::new();
    *EP.get_or_init(new_set)
}

/// A new watched set, for the threads of one runtime (each calls [`enter`]). It lives as long
/// as the process (a process makes a handful: one per front-end runtime).
pub fn new_set() -> RawFd {
    // SAFETY: plain syscall; -1 on failure (no spinning for the threads of that set).
    unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) }
}

/// Makes `set` the calling thread's: its `watch` adds there, its `park_spin` polls there.
pub fn enter(set: RawFd) {
    if set >= 0 {
        SET.with(|s| s.set(set));
    }
}

/// Spin budget in microseconds (0 turns spinning off).
static SPIN_US: AtomicU64 = AtomicU64::new(50);

/// Sets how long [`park_spin`] polls before letting the worker sleep (0: never spin).
pub fn set_spin(d: Duration) {
    SPIN_US.store(d.as_micros().min(10_000) as u64, Ordering::Relaxed);
}

/// Adds `fd` to the watched set (readable or closed by the peer). The kernel drops it from the set
/// by itself when the last descriptor of that socket is closed.
pub fn watch(fd: RawFd) {
    let ep = epfd();
    if ep < 0 {
        return;
    }
    let mut ev =
        libc::epoll_event { events: (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLET) as u32, u64: fd as u64 };
    // SAFETY: valid epoll descriptor and event struct; a failure only means no spinning for fd.
    unsafe {
        if libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) != 0 {
            libc::epoll_ctl(ep, libc::EPOLL_CTL_MOD, fd, &mut ev);
        }
    }
}

/// Polls the watched set without sleeping for up to the spin budget; returns true as soon as a
/// watched socket turned readable (the caller's runtime will then find it ready without sleeping).
pub fn park_spin() -> bool {
    park_spin_until(SPIN_US.load(Ordering::Relaxed), &|| false)
}

/// `park_spin` for up to `us` microseconds that also ends as soon as `done()` says so (checked
/// between polls).
///
/// The caller sends the requests this thread's tasks queued first (`flush_deferred`): a spin
/// waits for their answers.
pub fn park_spin_until(us: u64, done: &dyn Fn() -> bool) -> bool {
    let ep = epfd();
    if us == 0 || ep < 0 {
        return false;
    }
    let deadline = Instant::now() + Duration::from_micros(us);
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 16];
    loop {
        // SAFETY: valid epoll descriptor and an event buffer of the given length.
        let n = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), evs.len() as i32, 0) };
        if n > 0 || done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn spin_returns_when_a_watched_socket_turns_readable() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        watch(b.as_raw_fd());
        set_spin(Duration::from_millis(2));
        // Nothing to read: the whole budget passes.
        while park_spin() {} // drain edges left by other tests sharing the set
        let t = Instant::now();
        assert!(!park_spin());
        assert!(t.elapsed() >= Duration::from_millis(2));
        // Data arrived: reported (edge-triggered, once), without waiting out the budget.
        a.write_all(b"x").unwrap();
        set_spin(Duration::from_millis(10));
        assert!(park_spin());
        set_spin(Duration::from_micros(100));
        assert!(!park_spin(), "an edge is reported once");
        set_spin(Duration::from_micros(50));
    }
}
