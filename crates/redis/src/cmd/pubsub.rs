//! SUBSCRIBE PSUBSCRIBE UNSUBSCRIBE PUNSUBSCRIBE PUBLISH PUBSUB with redis-server 7's replies
//! (see `crate::pubsub` for how messages cross API servers). A RESP2 connection with a
//! subscription runs only the commands `SUBSCRIBED_ONLY` names, as redis-server.

use super::*;
use crate::pubsub::MESSAGE_MAX;

/// What a RESP2 connection with subscriptions may run.
const SUBSCRIBED_ONLY: &[&str] =
    &["subscribe", "psubscribe", "unsubscribe", "punsubscribe", "ssubscribe", "sunsubscribe", "ping", "quit", "reset"];

/// How long SUBSCRIBE waits for the change log to start before it answers anyway.
const START_WAIT: Duration = Duration::from_secs(5);

use std::time::Duration;

const PUBSUB_HELP: &[&str] = &[
    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CHANNELS [<pattern>]",
    "    Return the currently active channels matching a <pattern> (default: '*').",
    "NUMPAT",
    "    Return number of subscriptions to patterns.",
    "NUMSUB [<channel> ...]",
    "    Return the number of subscribers for the specified channels, excluding",
    "    pattern subscriptions(default: no channels).",
    "SHARDCHANNELS [<pattern>]",
    "    Return the currently active shard level channels matching a <pattern> (default: '*').",
    "SHARDNUMSUB [<shardchannel> ...]",
    "    Return the number of subscribers for the specified shard level channel(s)",
    "HELP",
    "    Prints this help.",
];

/// The refusal of a command a subscribed RESP2 connection may not run (None: it may).
pub(crate) fn subscribed_refusal(sess: &Session, name: &str) -> Option<RErr> {
    let subscribed = sess.subs.as_ref().is_some_and(|s| s.count() > 0);
    (subscribed && !sess.resp3 && !SUBSCRIBED_ONLY.contains(&name)).then(|| {
        err(format!(
            "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
        ))
    })
}

/// `*3 kind name count` (a null name: UNSUBSCRIBE with nothing subscribed).
fn confirm(out: &mut Vec<u8>, kind: &str, name: Option<&[u8]>, count: usize) {
    resp::array_len(out, 3);
    resp::bulk(out, kind.as_bytes());
    match name {
        Some(n) => resp::bulk(out, n),
        None => resp::null(out),
    }
    resp::integer(out, count as i64);
}

impl Server {
    /// SUBSCRIBE, PSUBSCRIBE, UNSUBSCRIBE, PUNSUBSCRIBE, PUBSUB; PING of a subscribed RESP2
    /// connection. False: not one of these.
    pub(super) async fn pubsub_server_cmd(
        &self,
        sess: &mut Session,
        name: &str,
        a: &[Vec<u8>],
        out: &mut Vec<u8>,
    ) -> R<bool> {
        match name {
            "subscribe" | "psubscribe" => {
                let pattern = name == "psubscribe";
                if a[1..].iter().any(|c| !sess.user.channel_allowed(c, pattern)) {
                    return Err(err(
                        "NOPERM this user has no permissions to access one of the channels used as arguments",
                    ));
                }
                let info = sess.info.clone();
                let subs = sess.subs.get_or_insert_with(|| self.pubsub.subs(info));
                let args = &a[1..];
                // Counts as each confirmation goes: a name already subscribed (or repeated) adds none.
                let had = if pattern { &subs.patterns } else { &subs.channels };
                let mut fresh = std::collections::BTreeSet::new();
                let new: Vec<bool> = args.iter().map(|c| !had.contains(c) && fresh.insert(&c[..])).collect();
                let mut n = subs.count();
                let (channels, patterns): (&[Vec<u8>], &[Vec<u8>]) = if pattern { (&[], args) } else { (args, &[]) };
                self.pubsub.subscribe(subs, channels, patterns, START_WAIT).await;
                for (c, new) in args.iter().zip(new) {
                    n += new as usize;
                    confirm(out, name, Some(c), n);
                }
                self.note_subs(sess);
            }
            "unsubscribe" | "punsubscribe" => {
                let pattern = name == "punsubscribe";
                let names: Vec<Vec<u8>> = match (&sess.subs, a.len()) {
                    (_, n) if n > 1 => a[1..].to_vec(),
                    (Some(s), _) if pattern => s.patterns.iter().cloned().collect(),
                    (Some(s), _) => s.channels.iter().cloned().collect(),
                    (None, _) => Vec::new(),
                };
                if names.is_empty() {
                    let n = sess.subs.as_ref().map_or(0, |s| s.count());
                    confirm(out, name, None, n);
                }
                for c in &names {
                    let n = match sess.subs.as_mut() {
                        Some(s) => {
                            if pattern {
                                self.pubsub.unsubscribe_pattern(s, c);
                            } else {
                                self.pubsub.unsubscribe_channel(s, c);
                            }
                            s.count()
                        }
                        None => 0,
                    };
                    confirm(out, name, Some(c), n);
                }
                self.note_subs(sess);
            }
            "pubsub" => self.pubsub_cmd(a, out)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// CLIENT LIST's `sub=` and `psub=`.
    fn note_subs(&self, sess: &Session) {
        let (c, p) = sess.subs.as_ref().map_or((0, 0), |s| (s.channels.len(), s.patterns.len()));
        sess.info.sub.store(c as u32, Ordering::Relaxed);
        sess.info.psub.store(p as u32, Ordering::Relaxed);
    }

    fn pubsub_cmd(&self, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let sub = String::from_utf8_lossy(&a[1]).to_lowercase();
        match sub.as_str() {
            "channels" => {
                let v = self.pubsub.channels(a.get(2).map(|p| &p[..]));
                resp::array_len(out, v.len());
                v.iter().for_each(|c| resp::bulk(out, c));
            }
            "numsub" => {
                resp::array_len(out, (a.len() - 2) * 2);
                for c in &a[2..] {
                    resp::bulk(out, c);
                    resp::integer(out, self.pubsub.numsub(c) as i64);
                }
            }
            "numpat" => resp::integer(out, self.pubsub.numpat() as i64),
            // Sharded pub/sub (SSUBSCRIBE) is not served: no shard channel has a subscriber.
            "shardchannels" => resp::array_len(out, 0),
            "shardnumsub" => {
                resp::array_len(out, (a.len() - 2) * 2);
                for c in &a[2..] {
                    resp::bulk(out, c);
                    resp::integer(out, 0);
                }
            }
            _ => {
                resp::array_len(out, PUBSUB_HELP.len());
                PUBSUB_HELP.iter().for_each(|l| resp::simple(out, l));
            }
        }
        Ok(())
    }

    /// PUBLISH channel message: queued in `cx`, written with its commit into the row of its slot
    /// of `redis_pubsub.messages` (with the transaction's other messages of that slot); answers
    /// the subscribers here.
    pub(super) async fn publish(&self, cx: &mut Cx, sess: &Session, a: &[Vec<u8>], out: &mut Vec<u8>) -> CR {
        let (channel, message) = (&a[1], &a[2]);
        if !sess.user.channel_allowed(channel, false) {
            return fail("NOPERM this user has no permissions to access one of the channels used as arguments");
        }
        if !cx.add_message(channel.clone(), message.clone()) {
            return fail(format!(
                "ERR Tern's pub/sub messages are limited to {MESSAGE_MAX} bytes (channel and message, of one channel in one transaction)"
            ));
        }
        resp::integer(out, self.pubsub.receivers(channel) as i64);
        Ok(())
    }
}
