//! One HTTP connection's life around hyper: the read deadlines, the answer to a connection over
//! the cap, and panics in request handlers.
//!
//! Deadlines (`ConnClock`, checked by the `Watched` socket wrapper whenever hyper waits on it):
//! - idle: no request in progress and nothing received since the last response (or since
//!   connect) for `idle_timeout` closes the connection (keep-alive expiry);
//! - head: from the first byte of a request until hyper has parsed its head, at most
//!   `header_read_timeout` (slowloris clients sending a byte now and then are cut off);
//! - write stall: a response that cannot be written for `idle_timeout` (a client that never
//!   reads) closes the connection.
//!
//! While a handler runs no deadline applies here; the handler bounds its own body read. The
//! socket is polled by hyper on the connection's task, so the clock needs no locks (atomics only
//! make it `Sync`). hyper's own `header_read_timeout` is not used: its clock starts when hyper
//! begins waiting for a head, so it cannot tell a quiet keep-alive connection from a slow head.
//!
//! Request bodies in flight share one memory budget (`BodyBudget`): a request whose body would
//! exceed it is answered 503 at once, so the open connections cannot together hold more than the
//! budget in bodies (without it: `max_connections` × `ReqBufferSize`).
//!
//! A connection over the cap gets `503 Service Unavailable` with a short text and is closed
//! after its input is drained (closing with unread input would reset the connection and could
//! destroy the answer). At most `REJECTING_MAX` such answers linger at once; beyond that the
//! answer is written without waiting.

use crate::metrics::Metrics;
use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Rejected connections whose 503 may linger (drain input) at once.
pub const REJECTING_MAX: usize = 256;
/// How long a rejected connection may linger.
const REJECT_LINGER: Duration = Duration::from_secs(2);
/// Input drained from a rejected connection at most.
const REJECT_DRAIN_MAX: usize = 1 << 20;

const NONE: u64 = u64::MAX;

/// The read and write deadlines of one connection.
pub struct ConnClock {
    start: Instant,
    idle_ms: u64,
    header_ms: u64,
    in_flight: AtomicU32,
    /// Last progress: connect, a request's head parsed, a response produced (ms since start).
    mark_ms: AtomicU64,
    /// First byte received since the last progress, or NONE.
    first_byte_ms: AtomicU64,
    /// Since when a write has been waiting, or NONE.
    write_stall_ms: AtomicU64,
}

impl ConnClock {
    pub fn new(idle: Duration, header: Duration) -> ConnClock {
        ConnClock {
            start: Instant::now(),
            idle_ms: idle.as_millis().max(1) as u64,
            header_ms: header.as_millis().max(1) as u64,
            in_flight: AtomicU32::new(0),
            mark_ms: AtomicU64::new(0),
            first_byte_ms: AtomicU64::new(NONE),
            write_stall_ms: AtomicU64::new(NONE),
        }
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn progress(&self) {
        self.mark_ms.store(self.now_ms(), Ordering::Relaxed);
        self.first_byte_ms.store(NONE, Ordering::Relaxed);
    }

    /// A request's head was parsed; its handler runs until the guard is dropped.
    pub fn request(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.progress();
        InFlight(self.clone())
    }

    fn on_read(&self, n: usize) {
        if n > 0 && self.first_byte_ms.load(Ordering::Relaxed) == NONE {
            self.first_byte_ms.store(self.now_ms(), Ordering::Relaxed);
        }
    }

    fn on_write(&self, pending: bool) {
        let stalled = self.write_stall_ms.load(Ordering::Relaxed);
        if pending && stalled == NONE {
            self.write_stall_ms.store(self.now_ms(), Ordering::Relaxed);
        } else if !pending && stalled != NONE {
            self.write_stall_ms.store(NONE, Ordering::Relaxed);
        }
    }

    /// When the connection must be closed (ms since start), if a deadline applies now.
    pub fn deadline_ms(&self) -> Option<u64> {
        let stall = self.write_stall_ms.load(Ordering::Relaxed);
        if stall != NONE {
            return Some(stall + self.idle_ms);
        }
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return None;
        }
        match self.first_byte_ms.load(Ordering::Relaxed) {
            NONE => Some(self.mark_ms.load(Ordering::Relaxed) + self.idle_ms),
            first => Some(first + self.header_ms),
        }
    }
}

/// A request in progress; dropping it (response produced, or the connection gone) ends it.
pub struct InFlight(Arc<ConnClock>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.progress();
    }
}

/// The socket as hyper sees it: reads and writes pass through, and a wait past the clock's
/// deadline fails with `TimedOut`, which makes hyper close the connection.
pub struct Watched<S> {
    inner: S,
    clock: Arc<ConnClock>,
    metrics: Arc<Metrics>,
    timer: Option<(u64, Pin<Box<tokio::time::Sleep>>)>,
}

impl<S> Watched<S> {
    pub fn new(inner: S, clock: Arc<ConnClock>, metrics: Arc<Metrics>) -> Watched<S> {
        Watched { inner, clock, metrics, timer: None }
    }

    /// Called when the socket is not ready: Err once the deadline has passed, else the timer is
    /// armed for it (waking the connection's task).
    fn check_deadline(&mut self, cx: &mut Context<'_>) -> std::io::Result<()> {
        let Some(deadline) = self.clock.deadline_ms() else { return Ok(()) };
        if self.clock.now_ms() >= deadline {
            return Err(self.timed_out());
        }
        let at = self.clock.start + Duration::from_millis(deadline);
        match &mut self.timer {
            Some((d, sleep)) if *d == deadline => {
                if sleep.as_mut().poll(cx).is_ready() {
                    return Err(self.timed_out());
                }
            }
            Some((d, sleep)) => {
                *d = deadline;
                sleep.as_mut().reset(at.into());
                let _ = sleep.as_mut().poll(cx);
            }
            None => {
                let mut sleep = Box::pin(tokio::time::sleep_until(at.into()));
                let _ = sleep.as_mut().poll(cx);
                self.timer = Some((deadline, sleep));
            }
        }
        Ok(())
    }

    fn timed_out(&self) -> std::io::Error {
        self.metrics.conn_timed_out();
        std::io::Error::new(std::io::ErrorKind::TimedOut, "REST connection deadline passed")
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                self.clock.on_read(buf.filled().len() - before);
                Poll::Ready(r)
            }
            Poll::Pending => match self.check_deadline(cx) {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
        }
    }
}

impl<S: AsyncWrite + Unpin> Watched<S> {
    fn after_write<T>(&mut self, r: Poll<std::io::Result<T>>, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        self.clock.on_write(r.is_pending());
        match r {
            Poll::Pending => match self.check_deadline(cx) {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
            ready => ready,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, b);
        self.after_write(r, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.after_write(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.after_write(r, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Bytes of request bodies in flight, against a budget.
pub struct BodyBudget {
    used: AtomicU64,
    max: u64,
}

/// One request's share of the body budget, given back when dropped.
pub struct BodyShare<'a> {
    budget: &'a BodyBudget,
    n: u64,
}

impl Drop for BodyShare<'_> {
    fn drop(&mut self) {
        if self.n > 0 {
            self.budget.used.fetch_sub(self.n, Ordering::AcqRel);
        }
    }
}

impl BodyBudget {
    pub fn new(max: usize) -> BodyBudget {
        BodyBudget { used: AtomicU64::new(0), max: max as u64 }
    }

    /// Reserves `n` bytes, or `None` when that would pass the budget.
    pub fn reserve(&self, n: usize) -> Option<BodyShare<'_>> {
        let n = n as u64;
        if n == 0 {
            return Some(BodyShare { budget: self, n });
        }
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            if cur + n > self.max {
                return None;
            }
            match self.used.compare_exchange_weak(cur, cur + n, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Some(BodyShare { budget: self, n }),
                Err(now) => cur = now,
            }
        }
    }
}

/// The answer to a connection over the cap.
pub fn over_cap_response(max: usize) -> Vec<u8> {
    let body = format!("Too many connections: the REST server serves at most {max} at once\n");
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\n\
         connection: close\r\nretry-after: 1\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Writes the 503, closes the write side and drains input until the client closes (bounded in
/// time and bytes), so the answer is not destroyed by a reset.
pub async fn reject<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, answer: Arc<Vec<u8>>) {
    let _ = tokio::time::timeout(REJECT_LINGER, async {
        let mut written = 0;
        while written < answer.len() {
            match std::future::poll_fn(|cx| Pin::new(&mut s).poll_write(cx, &answer[written..])).await? {
                0 => return Ok(()),
                n => written += n,
            }
        }
        std::future::poll_fn(|cx| Pin::new(&mut s).poll_shutdown(cx)).await?;
        let mut scratch = [0u8; 4096];
        let mut drained = 0;
        while drained < REJECT_DRAIN_MAX {
            let mut buf = ReadBuf::new(&mut scratch);
            std::future::poll_fn(|cx| Pin::new(&mut s).poll_read(cx, &mut buf)).await?;
            match buf.filled().len() {
                0 => break,
                n => drained += n,
            }
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// Polls a future, turning a panic into `Err` with the panic's message.
pub struct CatchPanic<F: Future> {
    inner: Pin<Box<F>>,
}

impl<F: Future> CatchPanic<F> {
    pub fn new(f: F) -> CatchPanic<F> {
        CatchPanic { inner: Box::pin(f) }
    }
}

impl<F: Future> Future for CatchPanic<F> {
    type Output = Result<F::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.inner.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(p) => {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".to_string());
                Poll::Ready(Err(msg))
            }
        }
    }
}

/// The answer when a handler panicked.
pub fn panic_response() -> Response<Full<Bytes>> {
    Response::builder()
        .status(500)
        .header("content-type", "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from_static(b"Internal Server Error: the request failed")))
        .expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_follow_the_connection_state() {
        let c = Arc::new(ConnClock::new(Duration::from_millis(60_000), Duration::from_millis(30_000)));
        let d0 = c.deadline_ms().unwrap();
        assert!((60_000..60_100).contains(&d0), "{d0}");
        c.on_read(1);
        let d1 = c.deadline_ms().unwrap();
        assert!((30_000..30_100).contains(&d1), "{d1}");
        let g = c.request();
        assert_eq!(c.deadline_ms(), None);
        c.on_write(true);
        assert!(c.deadline_ms().is_some());
        c.on_write(false);
        assert_eq!(c.deadline_ms(), None);
        drop(g);
        assert!(c.deadline_ms().unwrap() >= 60_000);
    }

    #[test]
    fn panics_become_errors() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let r = rt.block_on(CatchPanic::new(async {
            tokio::task::yield_now().await;
            panic!("boom");
        }));
        assert_eq!(r, Err::<(), _>("boom".to_string()));
        assert_eq!(rt.block_on(CatchPanic::new(async { 7 })), Ok(7));
    }

    #[test]
    fn body_budget_reserves_and_frees() {
        let b = BodyBudget::new(10);
        let a = b.reserve(6).expect("room");
        assert!(b.reserve(5).is_none());
        let c = b.reserve(4).expect("room");
        assert!(b.reserve(0).is_some());
        drop(a);
        assert!(b.reserve(6).is_some());
        drop(c);
        assert!(b.reserve(10).is_some());
    }

    #[test]
    fn over_cap_answer_is_well_formed() {
        let a = String::from_utf8(over_cap_response(10)).unwrap();
        let (head, body) = a.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 Service Unavailable"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
    }
}
