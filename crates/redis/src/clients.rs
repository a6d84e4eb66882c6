//! The open connections of the Redis server: what CLIENT LIST / INFO show and CLIENT KILL acts
//! on, the `maxclients` cap and the idle `timeout`.
//!
//! Each connection registers a `ClientInfo` while it is open (a guard removes it, also when the
//! connection's task panics). The fields a command changes are atomics, so the hot path takes no
//! lock; only the name sits behind a mutex. A kill sets a flag and wakes the connection, which
//! closes once its current command has answered (redis-server closes after the reply too).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Locks a mutex whatever happened to an earlier holder: the data behind the front end's mutexes
/// stays consistent at every instruction, so a panic in one connection (its task fails alone)
/// must not poison the lock for every other connection.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One open connection.
#[derive(Debug)]
pub struct ClientInfo {
    pub id: u64,
    pub addr: SocketAddr,
    pub laddr: SocketAddr,
    pub created: Instant,
    name: Mutex<Option<Vec<u8>>>,
    /// The signed-in ACL user (CLIENT LIST `user=`, CLIENT KILL USER).
    user: Mutex<String>,
    pub db: AtomicU32,
    /// Milliseconds after `created` of the last bytes received.
    last_active_ms: AtomicU64,
    /// The last command's name (index into the command table; `u32::MAX`: none yet).
    pub last_cmd: AtomicU32,
    pub resp: AtomicU8,
    /// Commands queued since MULTI, -1 outside a transaction (CLIENT LIST `multi=`).
    pub multi: AtomicI64,
    pub watching: AtomicUsize,
    pub no_evict: AtomicBool,
    /// Channels and patterns it subscribed to (CLIENT LIST `sub=`, `psub=`).
    pub sub: AtomicU32,
    pub psub: AtomicU32,
    killed: AtomicBool,
    wake: tokio::sync::Notify,
}

impl ClientInfo {
    pub fn new(id: u64, addr: SocketAddr, laddr: SocketAddr) -> ClientInfo {
        ClientInfo {
            id,
            addr,
            laddr,
            created: Instant::now(),
            name: Mutex::new(None),
            user: Mutex::new("default".into()),
            db: AtomicU32::new(0),
            last_active_ms: AtomicU64::new(0),
            last_cmd: AtomicU32::new(u32::MAX),
            resp: AtomicU8::new(2),
            multi: AtomicI64::new(-1),
            watching: AtomicUsize::new(0),
            no_evict: AtomicBool::new(false),
            sub: AtomicU32::new(0),
            psub: AtomicU32::new(0),
            killed: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
        }
    }

    pub fn name(&self) -> Option<Vec<u8>> {
        lock(&self.name).clone()
    }

    pub fn set_name(&self, name: Option<Vec<u8>>) {
        *lock(&self.name) = name;
    }

    pub fn user(&self) -> String {
        lock(&self.user).clone()
    }

    pub fn set_user(&self, user: &str) {
        *lock(&self.user) = user.to_string();
    }

    /// Notes input from the client (the idle clock restarts).
    pub fn touch(&self) {
        self.last_active_ms.store(self.created.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    pub fn idle_ms(&self) -> u64 {
        (self.created.elapsed().as_millis() as u64).saturating_sub(self.last_active_ms.load(Ordering::Relaxed))
    }

    /// Asks the connection to close after its current command.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// Completes once `kill` was called (at once if it already was).
    pub async fn killed(&self) {
        while !self.is_killed() {
            self.wake.notified().await;
        }
    }
}

/// The open connections by id.
#[derive(Debug, Default)]
pub struct Registry {
    map: Mutex<BTreeMap<u64, Arc<ClientInfo>>>,
}

/// A connection's place in the registry, left when dropped.
pub struct Registered<'a> {
    reg: &'a Registry,
    pub info: Arc<ClientInfo>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        lock(&self.reg.map).remove(&self.info.id);
    }
}

impl Registry {
    pub fn add(&self, info: ClientInfo) -> Registered<'_> {
        let info = Arc::new(info);
        lock(&self.map).insert(info.id, info.clone());
        Registered { reg: self, info }
    }

    /// Every open connection, by id.
    pub fn all(&self) -> Vec<Arc<ClientInfo>> {
        lock(&self.map).values().cloned().collect()
    }

    pub fn get(&self, id: u64) -> Option<Arc<ClientInfo>> {
        lock(&self.map).get(&id).cloned()
    }

    pub fn len(&self) -> usize {
        lock(&self.map).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_serves() {
        let m = Arc::new(Mutex::new(5));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("a command panicked while holding the lock");
        })
        .join();
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 6);
    }

    #[test]
    fn registry_forgets_dropped_connections() {
        let reg = Registry::default();
        let a = "127.0.0.1:1".parse().unwrap();
        let r1 = reg.add(ClientInfo::new(1, a, a));
        let r2 = reg.add(ClientInfo::new(2, a, a));
        assert_eq!(reg.all().iter().map(|c| c.id).collect::<Vec<_>>(), vec![1, 2]);
        r1.info.kill();
        assert!(reg.get(1).unwrap().is_killed());
        drop(r1);
        assert!(reg.get(1).is_none());
        assert_eq!(reg.len(), 1);
        drop(r2);
        assert!(reg.is_empty());
    }
}
