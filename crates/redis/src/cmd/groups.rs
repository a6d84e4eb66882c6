//! Concurrent writes of one collection key, run as one transaction. redis-benchmark's LPUSH,
//! SADD or ZPOPMIN tests (and a queue's producers and workers) send every command to one key:
//! run one by one, each would take the key row's lock for its two or three data-node round
//! trips and the rest would queue on it. Here the commands of one family (`Family`) that arrive
//! for a key while another of its commands runs wait in this API server instead, and the next
//! of them to run takes all that waited (in arrival order, up to `GROUP_CMDS_MAX` commands and
//! `GROUP_BYTES_MAX` argument bytes) and runs them in one transaction: the key row is locked
//! and read once, the member rows of all are written in one batch, the key row once, one
//! commit. Each command gets the reply, WATCH effect and keyspace events it would have had run
//! alone in that order, so the group is a serial history of its commands; an argument error
//! fails only its own command, a key's error (WRONGTYPE) or a failed transaction all of them.
//!
//! Inside MULTI the same family code runs with a group of one command (`one_of_family`).

use super::{CR, Cx, Fail, RErr};
use crate::clients::lock;
use crate::db::Db;
use crate::resp;
use crate::{Server, Session};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Commands that wait for a group per key, and argument bytes, at most in one group.
const GROUP_CMDS_MAX: usize = 256;
const GROUP_BYTES_MAX: usize = 1 << 20;

/// Commands that run together on one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// LPUSH RPUSH LPUSHX RPUSHX.
    Push,
    /// LPOP RPOP.
    Pop,
    Sadd,
    Spop,
    Zadd,
    Zpopmin,
    Zpopmax,
}

/// The family of a command, if it has one.
pub(crate) fn family(name: &str) -> Option<Family> {
    Some(match name {
        "lpush" | "rpush" | "lpushx" | "rpushx" => Family::Push,
        "lpop" | "rpop" => Family::Pop,
        "sadd" => Family::Sadd,
        "spop" => Family::Spop,
        "zadd" => Family::Zadd,
        "zpopmin" => Family::Zpopmin,
        "zpopmax" => Family::Zpopmax,
        _ => return None,
    })
}

/// One command of a group: its arguments (the name first) and its connection's protocol.
pub(crate) struct Cmd<'a> {
    pub a: &'a [Vec<u8>],
    pub resp3: bool,
}

/// What one command of a group did: its reply (RESP2, but for sorted sets' scores in RESP3,
/// as `zset_command` writes them) and, when it wrote the key, whether the key is gone after it.
#[derive(Debug)]
pub(crate) struct Done {
    pub reply: Result<Vec<u8>, RErr>,
    pub wrote: Option<bool>,
}

impl Done {
    pub(crate) fn ok(reply: Vec<u8>, wrote: Option<bool>) -> Done {
        Done { reply: Ok(reply), wrote }
    }

    pub(crate) fn int(n: i64, wrote: Option<bool>) -> Done {
        let mut b = Vec::new();
        resp::integer(&mut b, n);
        Done::ok(b, wrote)
    }

    pub(crate) fn err(e: RErr) -> Done {
        Done { reply: Err(e), wrote: None }
    }
}

/// A command's own error (an argument's) as its `Done`; a failed transaction goes on failing
/// the group.
pub(crate) fn own_error(f: Fail) -> CR<Done> {
    match f {
        Fail::Reply(e) => Ok(Done::err(e)),
        Fail::Txn(e) => Err(Fail::Txn(e)),
    }
}

/// Sorts a group's commands by `check` of their arguments from the third on: a slot per command
/// (the `Done` of one that failed, None for one that passed) and the arguments of those that
/// passed, in order.
pub(crate) fn checked<'c>(
    cmds: &'c [Cmd<'_>],
    check: impl Fn(&[u8]) -> CR,
) -> CR<(Vec<Option<Done>>, Vec<&'c Cmd<'c>>)> {
    let mut slots = Vec::with_capacity(cmds.len());
    let mut passed = Vec::with_capacity(cmds.len());
    for c in cmds {
        match c.a[2..].iter().try_for_each(|x| check(x)) {
            Err(f) => slots.push(Some(own_error(f)?)),
            Ok(()) => {
                passed.push(c);
                slots.push(None);
            }
        }
    }
    Ok((slots, passed))
}

/// The `Done`s of a group whose commands that passed `checked` answered the integers `n` in
/// order (one above 0 wrote the key, which is there after it).
pub(crate) fn counted(slots: Vec<Option<Done>>, n: Vec<i64>) -> Vec<Done> {
    let mut n = n.into_iter();
    slots
        .into_iter()
        .map(|d| {
            d.unwrap_or_else(|| {
                let n = n.next().expect("a count per command that ran");
                Done::int(n, (n > 0).then_some(false))
            })
        })
        .collect()
}

/// A pop's optional count, its third argument: more arguments are a syntax error, a count that
/// is no integer answers `not_int`, a negative one redis's "must be positive".
pub(crate) fn pop_count(a: &[Vec<u8>], not_int: &str) -> Result<Option<i64>, RErr> {
    match a.get(2) {
        _ if a.len() > 3 => Err(RErr(super::SYNTAX.into())),
        None => Ok(None),
        Some(n) => match crate::resp::parse_int(n) {
            Some(n) if n >= 0 => Ok(Some(n)),
            Some(_) => Err(RErr(super::lists::POSITIVE.into())),
            None => Err(RErr(not_int.into())),
        },
    }
}

/// A command waiting for its group.
struct Waiting {
    a: Vec<Vec<u8>>,
    resp3: bool,
    family: Family,
    tx: oneshot::Sender<Turn>,
}

enum Turn {
    /// The command ran in another's group: its reply (RESP2; errors as error replies).
    Reply(Vec<u8>),
    /// The command runs the group of these, which waited after it.
    Lead(Vec<Waiting>),
}

/// A group's (database, key).
type GroupKey = (u32, Vec<u8>);

/// Per (database, key): the commands waiting while a group of the key runs. A key is here
/// while one of its groups runs.
#[derive(Default)]
pub struct Groups {
    keys: Mutex<HashMap<GroupKey, VecDeque<Waiting>>>,
}

impl Groups {
    /// Ends a group of `key`: the first waiting command (with those of its family after it)
    /// leads the next one, or the key is forgotten when none waits.
    fn hand_off(&self, key: &GroupKey) {
        let mut keys = lock(&self.keys);
        let Some(q) = keys.get_mut(key) else { return };
        while let Some(first) = q.pop_front() {
            if first.tx.is_closed() {
                continue; // its connection is gone
            }
            let mut batch = Vec::new();
            take_from(q, first.family, &first.a, &mut batch);
            match first.tx.send(Turn::Lead(batch)) {
                Ok(()) => return,
                Err(Turn::Lead(batch)) => {
                    for w in batch.into_iter().rev() {
                        q.push_front(w);
                    }
                }
                Err(Turn::Reply(_)) => unreachable!("a lead was sent"),
            }
        }
        keys.remove(key);
    }

    /// Adds to the group of `lead` (of family `fam`) the commands of its family that wait at the
    /// front of its key's queue.
    fn take_more(&self, key: &GroupKey, fam: Family, lead: &[Vec<u8>], batch: &mut Vec<Waiting>) {
        if let Some(q) = lock(&self.keys).get_mut(key) {
            take_from(q, fam, lead, batch);
        }
    }
}

/// Moves the commands of family `fam` at the front of `q` into `batch` (a group led by `lead`),
/// as many as the group's bounds allow.
fn take_from(q: &mut VecDeque<Waiting>, fam: Family, lead: &[Vec<u8>], batch: &mut Vec<Waiting>) {
    let mut bytes = size(lead) + batch.iter().map(|w| size(&w.a)).sum::<usize>();
    while let Some(next) = q.front() {
        let b = size(&next.a);
        if next.family != fam || batch.len() + 1 >= GROUP_CMDS_MAX || bytes + b > GROUP_BYTES_MAX {
            break;
        }
        bytes += b;
        batch.push(q.pop_front().expect("a front"));
    }
}

fn size(a: &[Vec<u8>]) -> usize {
    a.iter().map(|x| x.len() + 16).sum()
}

/// Hands the key on when its group's leader ends, also when the leader's connection is
/// dropped midway (the commands it carried then get no reply and answer an error).
struct Leading<'a> {
    groups: &'a Groups,
    key: GroupKey,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.groups.hand_off(&self.key);
    }
}

/// A command waiting for its turn. Dropped before it took a lead handed to it (its connection's
/// task ended in between), it hands the key on, so the key's queue never stalls.
struct Waiter<'a> {
    rx: Option<oneshot::Receiver<Turn>>,
    groups: &'a Groups,
    key: &'a GroupKey,
}

impl std::future::Future for &mut Waiter<'_> {
    type Output = Result<Turn, oneshot::error::RecvError>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let w = self.get_mut();
        let rx = w.rx.as_mut().expect("polled after it finished");
        let r = std::task::ready!(std::pin::Pin::new(rx).poll(cx));
        w.rx = None;
        std::task::Poll::Ready(r)
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        // The commands of a lead not taken get no reply (their senders go with it).
        if let Some(mut rx) = self.rx.take()
            && let Ok(Turn::Lead(_)) = rx.try_recv()
        {
            self.groups.hand_off(self.key);
        }
    }
}

impl Server {
    /// A command of a family outside MULTI: run in a group with the commands of its key that
    /// wait with it (see the module's text); its RESP2 reply appended.
    pub(super) async fn grouped(self: &Arc<Self>, sess: &mut Session, fam: Family, a: &[Vec<u8>], out: &mut Vec<u8>) {
        if let Err(e) = super::check_key(&a[1]) {
            return resp::error(out, &e.0);
        }
        let key = (sess.db, a[1].clone());
        // Wait behind the group running for the key, or lead at once.
        let wait = {
            let mut keys = lock(&self.groups.keys);
            match keys.get_mut(&key) {
                Some(q) => {
                    let (tx, rx) = oneshot::channel();
                    q.push_back(Waiting { a: a.to_vec(), resp3: sess.resp3, family: fam, tx });
                    Some(rx)
                }
                None => {
                    keys.insert(key.clone(), VecDeque::new());
                    None
                }
            }
        };
        let mut others = match wait {
            None => Vec::new(),
            Some(rx) => {
                let mut w = Waiter { rx: Some(rx), groups: &self.groups, key: &key };
                match (&mut w).await {
                    Ok(Turn::Reply(r)) => return out.extend_from_slice(&r),
                    Ok(Turn::Lead(others)) => others,
                    Err(_) => return resp::error(out, "ERR the command's group ended with its connection; retry it"),
                }
            }
        };
        let leading = Leading { groups: &self.groups, key };
        // Let the connections that have a command ready come to the queue first (a group led at
        // once would often be of one, while the others wait for it).
        tokio::task::yield_now().await;
        self.groups.take_more(&leading.key, fam, a, &mut others);
        if !others.is_empty() {
            self.stats.groups.fetch_add(1, Ordering::Relaxed);
            self.stats.grouped.fetch_add(others.len() as u64, Ordering::Relaxed);
        }
        let mut cmds = vec![Cmd { a, resp3: sess.resp3 }];
        cmds.extend(others.iter().map(|w| Cmd { a: &w.a, resp3: w.resp3 }));
        let r = match self.db(sess.db).await {
            Ok(db) => standalone!(self, |cx| self.run_group(cx, &db, fam, &cmds).await),
            Err(e) => Err(e),
        };
        let mut replies: Vec<Vec<u8>> = match r {
            Ok(done) => done
                .into_iter()
                .map(|d| match d.reply {
                    Ok(b) => b,
                    Err(e) => error_reply(&e),
                })
                .collect(),
            Err(e) => vec![error_reply(&e); cmds.len()],
        };
        for (w, r) in others.into_iter().zip(replies.drain(1..)) {
            let _ = w.tx.send(Turn::Reply(r)); // a closed connection drops its reply
        }
        out.extend_from_slice(&replies[0]);
    }

    /// The commands of one group in `cx`, with the WATCH effect and keyspace events of each.
    async fn run_group(&self, cx: &mut Cx, db: &Arc<Db>, fam: Family, cmds: &[Cmd<'_>]) -> CR<Vec<Done>> {
        let done = self.run_family(cx, db, fam, cmds).await?;
        debug_assert_eq!(done.len(), cmds.len(), "one result per command of the group");
        for (c, d) in cmds.iter().zip(&done) {
            let from = cx.touched.len();
            if let Some(gone) = d.wrote {
                self.touched(cx, db.index, &c.a[1], gone);
            }
            if cx.notify != 0 {
                let name = String::from_utf8_lossy(&c.a[0]).to_lowercase();
                self.command_events(cx, &name, c.a, from, d.reply.is_ok());
            }
        }
        Ok(done)
    }

    /// One command of a family against `cx` (inside EXEC, or a group of one), its reply
    /// appended; an argument's error is the command's `Fail::Reply`.
    pub(super) async fn one_of_family(
        &self,
        cx: &mut Cx,
        sess: &Session,
        db: &Arc<Db>,
        fam: Family,
        a: &[Vec<u8>],
        out: &mut Vec<u8>,
    ) -> CR {
        let mut done = self.run_family(cx, db, fam, &[Cmd { a, resp3: sess.resp3 }]).await?;
        self.finish_one(cx, db, &a[1], done.pop().expect("one result"), out)
    }

    /// A command run alone: its write of `key` noted, its reply appended or its error returned.
    pub(super) fn finish_one(&self, cx: &mut Cx, db: &Db, key: &[u8], d: Done, out: &mut Vec<u8>) -> CR {
        if let Some(gone) = d.wrote {
            self.touched(cx, db.index, key, gone);
        }
        out.extend(d.reply.map_err(Fail::Reply)?);
        Ok(())
    }

    async fn run_family(&self, cx: &mut Cx, db: &Arc<Db>, fam: Family, cmds: &[Cmd<'_>]) -> CR<Vec<Done>> {
        let key = &cmds[0].a[1];
        debug_assert!(cmds.iter().all(|c| &c.a[1] == key), "a group is of one key");
        match fam {
            Family::Push => self.push_all(cx, db, key, cmds).await,
            Family::Pop => self.pop_all(cx, db, key, cmds).await,
            Family::Sadd => self.sadd_all(cx, db, key, cmds).await,
            Family::Spop => self.spop_all(cx, db, key, cmds).await,
            Family::Zadd => self.zadd_all(cx, db, key, cmds).await,
            Family::Zpopmin => self.zpop_all(cx, db, key, true, cmds).await,
            Family::Zpopmax => self.zpop_all(cx, db, key, false, cmds).await,
        }
    }
}

fn error_reply(e: &RErr) -> Vec<u8> {
    let mut b = Vec::new();
    resp::error(&mut b, &e.0);
    b
}
