//! The server's open connections: what `SHOW PROCESSLIST` and `information_schema.PROCESSLIST`
//! list, what `KILL` finds, and the cap on their number (`max_connections`, MySQL's default 151;
//! beyond it a new connection gets 1040 "Too many connections" instead of the handshake).
//!
//! Each connection registers on accept and leaves when its task ends (the `Registered` guard),
//! so the list never holds a closed connection. Locks here are held for a copy or an insert,
//! never across an await, and a poisoned lock is used as is: one panicking connection must not
//! stop the others from being listed or killed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tern_client::frontend::{ConnLimit, ConnSlot};
use tern_sql::limits::Interrupt;

/// MySQL's default `max_connections`.
pub const MAX_CONNECTIONS_DEFAULT: usize = 151;
/// Characters of the running statement `SHOW PROCESSLIST` shows (FULL shows all).
pub const INFO_SHORT: usize = 100;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What one connection is doing, as the process list shows it.
#[derive(Debug, Clone)]
pub struct Activity {
    pub user: String,
    pub host: String,
    pub db: Option<String>,
    /// "Connect", "Sleep", "Query", "Execute", ...
    pub command: &'static str,
    /// When the current command began.
    pub since: Instant,
    /// The statement running, if any.
    pub info: Option<String>,
}

/// One open connection.
#[derive(Debug)]
pub struct Conn {
    pub id: u32,
    pub interrupt: Arc<Interrupt>,
    /// Wakes the connection's task when it is killed while it waits for the client.
    pub wake: tokio::sync::Notify,
    activity: Mutex<Activity>,
}

impl Conn {
    pub fn activity(&self) -> Activity {
        lock(&self.activity).clone()
    }

    /// The connection starts `command` (with statement text `info`) now.
    pub fn begin(&self, command: &'static str, info: Option<String>) {
        let mut a = lock(&self.activity);
        a.command = command;
        a.info = info;
        a.since = Instant::now();
    }

    /// The connection waits for the client's next command, using database `db`.
    pub fn idle(&self, db: Option<&str>) {
        let mut a = lock(&self.activity);
        a.command = "Sleep";
        a.info = None;
        a.since = Instant::now();
        if a.db.as_deref() != db {
            a.db = db.map(str::to_string);
        }
    }

    pub fn set_user(&self, user: &str) {
        lock(&self.activity).user = user.to_string();
    }

    /// `KILL QUERY` (`connection` false) or `KILL CONNECTION`.
    pub fn kill(&self, connection: bool) {
        if connection {
            self.interrupt.kill_connection();
            self.wake.notify_one();
        } else {
            self.interrupt.kill_query();
        }
    }
}

/// The registry of open connections and their cap.
#[derive(Debug)]
pub struct Conns {
    map: Mutex<BTreeMap<u32, Arc<Conn>>>,
    pub limit: ConnLimit,
}

impl Default for Conns {
    fn default() -> Self {
        Conns::new(MAX_CONNECTIONS_DEFAULT)
    }
}

/// A connection's place in the registry (and under the cap), given back when dropped.
pub struct Registered {
    pub conn: Arc<Conn>,
    conns: Arc<Conns>,
    _slot: ConnSlot,
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.conns.map).remove(&self.conn.id);
    }
}

impl Conns {
    pub fn new(max_connections: usize) -> Conns {
        Conns { map: Mutex::default(), limit: ConnLimit::new(max_connections) }
    }

    /// Registers connection `id` from `host`, or None when `max_connections` are open.
    pub fn register(self: &Arc<Self>, id: u32, host: &str) -> Option<Registered> {
        let slot = self.limit.try_acquire()?;
        let activity = Activity {
            user: "unauthenticated user".into(),
            host: host.to_string(),
            db: None,
            command: "Connect",
            since: Instant::now(),
            info: None,
        };
        let conn = Arc::new(Conn {
            id,
            interrupt: Arc::default(),
            wake: tokio::sync::Notify::new(),
            activity: Mutex::new(activity),
        });
        lock(&self.map).insert(id, conn.clone());
        Some(Registered { conn, conns: self.clone(), _slot: slot })
    }

    pub fn get(&self, id: u32) -> Option<Arc<Conn>> {
        lock(&self.map).get(&id).cloned()
    }

    /// Every open connection, by id.
    pub fn list(&self) -> Vec<Arc<Conn>> {
        lock(&self.map).values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_follows_connections_and_the_cap() {
        let c = Arc::new(Conns::new(2));
        let a = c.register(1, "h").expect("first");
        let b = c.register(2, "h").expect("second");
        assert!(c.register(3, "h").is_none(), "over max_connections");
        assert_eq!(c.list().iter().map(|x| x.id).collect::<Vec<_>>(), vec![1, 2]);
        b.conn.kill(false);
        assert!(b.conn.interrupt.killed() && !b.conn.interrupt.connection_killed());
        drop(b);
        assert!(c.get(2).is_none());
        assert!(c.register(4, "h").is_some());
        a.conn.begin("Query", Some("SELECT 1".into()));
        assert_eq!(c.get(1).unwrap().activity().command, "Query");
    }
}
