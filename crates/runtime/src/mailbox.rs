//! A worker's inbox: other threads append batches; the worker drains everything at once. A push
//! wakes the worker only when it is parked in `epoll_wait`, so the hot path is a mutex and an
//! atomic, not a syscall.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

pub struct Mailbox<T> {
    items: Mutex<Vec<T>>,
    len: AtomicUsize,
    sleeping: AtomicBool,
    waker: mio::Waker,
}

impl<T> Mailbox<T> {
    pub fn new(waker: mio::Waker) -> Mailbox<T> {
        Mailbox { items: Mutex::new(Vec::new()), len: AtomicUsize::new(0), sleeping: AtomicBool::new(false), waker }
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

    pub fn woke(&self) {
        self.sleeping.store(false, Ordering::SeqCst);
    }
}
