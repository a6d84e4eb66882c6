//! A worker's inbox: other threads append batches; the worker drains everything at once. A push
//! wakes the worker only when it is parked in `epoll_wait`, so the hot path is a mutex and an
//! atomic, not a syscall.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::task::Waker;
use std::thread::ThreadId;

pub struct Mailbox<T> {
    items: Mutex<Vec<T>>,
    len: AtomicUsize,
    sleeping: AtomicBool,
    waker: mio::Waker,
    /// A worker hosted by an async runtime (`crate::HostedWorker`): its thread, and the task
    /// waker it parked with. Pushes made on that thread (its front-end tasks) wake the task
    /// directly, with no system call; pushes from other threads write the eventfd, which the
    /// runtime's reactor (and its spin-before-park) sees as the worker's epoll descriptor
    /// turning readable.
    host: OnceLock<ThreadId>,
    host_waker: Mutex<Option<Waker>>,
}

impl<T> Mailbox<T> {
    pub fn new(waker: mio::Waker) -> Mailbox<T> {
        Mailbox {
            items: Mutex::new(Vec::new()),
            len: AtomicUsize::new(0),
            sleeping: AtomicBool::new(false),
            waker,
            host: OnceLock::new(),
            host_waker: Mutex::new(None),
        }
    }

    pub fn push(&self, item: T) {
        {
            let mut q = self.items.lock().expect("mailbox lock");
            q.push(item);
            self.len.store(q.len(), Ordering::Release);
        }
        self.wake_if_sleeping();
    }

    /// Moves all of `items` in with one lock.
    pub fn push_all(&self, items: &mut Vec<T>) {
        if items.is_empty() {
            return;
        }
        {
            let mut q = self.items.lock().expect("mailbox lock");
            q.append(items);
            self.len.store(q.len(), Ordering::Release);
        }
        self.wake_if_sleeping();
    }

    fn wake_if_sleeping(&self) {
        if self.sleeping.swap(false, Ordering::AcqRel) {
            if self.host.get().is_some_and(|&t| t == std::thread::current().id())
                && let Some(w) = self.host_waker.lock().expect("mailbox lock").take()
            {
                w.wake();
                return;
            }
            // A failed wake leaves the worker to its poll timeout; nothing is lost.
            let _ = self.waker.wake();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    pub fn drain_into(&self, out: &mut Vec<T>) {
        if self.is_empty() {
            return;
        }
        let mut q = self.items.lock().expect("mailbox lock");
        out.append(&mut q);
        self.len.store(0, Ordering::Release);
    }

    /// Marks the worker as about to park. Returns false if items arrived meanwhile (do not park).
    pub fn prepare_sleep(&self) -> bool {
        self.sleeping.store(true, Ordering::SeqCst);
        if !self.is_empty() {
            self.sleeping.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// The worker is driven by an async runtime on this thread from now on.
    pub fn set_host_thread(&self) {
        let _ = self.host.set(std::thread::current().id());
    }

    /// A hosted worker parks its task: `waker` is what a push wakes (see `kick_hosted`,
    /// `arm_hosted`). The sleeping flag stays down: while its thread runs other tasks or spins,
    /// pushes need no wake-up at all.
    pub fn park_hosted(&self, waker: &Waker) {
        let mut w = self.host_waker.lock().expect("mailbox lock");
        if !w.as_ref().is_some_and(|o| o.will_wake(waker)) {
            *w = Some(waker.clone());
        }
    }

    /// Wakes the parked hosted worker's task if items wait; true if so.
    pub fn kick_hosted(&self) -> bool {
        if self.is_empty() {
            return false;
        }
        if let Some(w) = self.host_waker.lock().expect("mailbox lock").take() {
            w.wake();
        }
        true
    }

    /// The hosted worker's thread is about to sleep: from now on pushes wake it (the eventfd).
    /// False (and the task woken) if items arrived meanwhile.
    pub fn arm_hosted(&self) -> bool {
        if self.prepare_sleep() {
            return true;
        }
        self.kick_hosted();
        false
    }

    pub fn woke(&self) {
        self.sleeping.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;
    use std::time::Duration;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    const WAKER: mio::Token = mio::Token(1);

    /// Whether the mailbox's eventfd fired (the worker's epoll descriptor turned readable).
    fn eventfd_fired(poll: &mut mio::Poll) -> bool {
        let mut ev = mio::Events::with_capacity(4);
        poll.poll(&mut ev, Some(Duration::ZERO)).unwrap();
        ev.iter().any(|e| e.token() == WAKER)
    }

    #[test]
    fn a_hosted_worker_is_woken_without_a_syscall_from_its_thread_and_by_eventfd_from_others() {
        let mut poll = mio::Poll::new().unwrap();
        let mb = Arc::new(Mailbox::<u32>::new(mio::Waker::new(poll.registry(), WAKER).unwrap()));
        mb.set_host_thread();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = std::task::Waker::from(count.clone());
        let woken = || count.0.load(Ordering::SeqCst);

        // Parked but not armed (its thread runs other tasks or spins): a push wakes nothing; the
        // park hook's kick does.
        mb.park_hosted(&waker);
        assert!(!mb.kick_hosted(), "nothing waits");
        mb.push(1);
        assert_eq!(woken(), 0);
        assert!(!eventfd_fired(&mut poll));
        assert!(mb.kick_hosted());
        assert_eq!(woken(), 1);
        // Arming with items waiting wakes the task instead of sleeping.
        mb.park_hosted(&waker);
        assert!(!mb.arm_hosted());
        assert_eq!(woken(), 2);
        let mut out = Vec::new();
        mb.drain_into(&mut out);
        mb.woke();
        assert_eq!(out, vec![1]);

        // Armed: a push from this thread wakes the task directly (no eventfd).
        mb.park_hosted(&waker);
        assert!(mb.arm_hosted());
        mb.push(2);
        assert_eq!(woken(), 3);
        assert!(!eventfd_fired(&mut poll));
        mb.drain_into(&mut out);
        mb.woke();

        // Armed: a push from another thread writes the eventfd (the reactor sees the descriptor).
        mb.park_hosted(&waker);
        assert!(mb.arm_hosted());
        let m2 = mb.clone();
        std::thread::spawn(move || m2.push(3)).join().unwrap();
        assert!(eventfd_fired(&mut poll));
        assert_eq!(woken(), 3, "the task waker is this thread's only");
        mb.drain_into(&mut out);
        assert_eq!(out, vec![1, 2, 3]);
    }
}
