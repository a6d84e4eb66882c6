//! Pub/sub against a real redis-server (the same sequences, equal replies and messages, RESP2
//! and RESP3), and across two API servers of one cluster: every message reaches every
//! subscriber, in publish order per channel.

mod common;

use common::{Conn, Reply, start_node, start_peer, start_tern};
use std::time::{Duration, Instant};
use tern_redis::RedisOptions;

fn b(s: &str) -> Reply {
    Reply::bulk(s)
}

fn arr(v: Vec<Reply>) -> Reply {
    Reply::Array(Some(v))
}

fn message(ch: &str, m: &str) -> Reply {
    arr(vec![b("message"), b(ch), b(m)])
}

/// One step: on the subscriber (`S`) or the publisher (`P`) connection, a command whose reply
/// is read (`>` reads only, a message that must come).
fn run(port: u16, script: &[(&str, &str)]) -> Vec<Reply> {
    let (mut s, mut p) = (Conn::open(port), Conn::open(port));
    let mut got = Vec::new();
    for (who, line) in script {
        let c = if *who == "S" { &mut s } else { &mut p };
        // `~`: a step whose reply differs by design (HELLO's server fields): not compared.
        let r = match *line {
            ">" => c.read(),
            l if l.starts_with('~') => {
                c.q(&l[1..]);
                Reply::Null
            }
            l => c.q(l),
        };
        got.push(r);
    }
    got
}

fn compare(peer: u16, tern: u16, script: &[(&str, &str)]) {
    let want = run(peer, script);
    let got = run(tern, script);
    for ((step, w), g) in script.iter().zip(&want).zip(&got) {
        assert_eq!(g, w, "step {step:?}: Tern {g:?}, redis-server {w:?}");
    }
}

#[test]
fn pubsub_matches_redis() {
    let (_d, _n, addr) = start_node(256 << 20);
    let port = start_tern(&addr, RedisOptions::default());
    let peer = start_peer();
    compare(
        peer.port,
        port,
        &[
            ("P", "PUBLISH a nobody"),
            ("P", "PUBLISH a"),
            ("S", "SUBSCRIBE"),
            ("S", "SUBSCRIBE a b a"),
            ("S", ">"),
            ("S", ">"),
            ("P", "PUBLISH a hello"),
            ("S", ">"),
            ("P", "PUBLISH b world"),
            ("S", ">"),
            ("S", "PSUBSCRIBE h* a"),
            ("S", ">"),
            ("P", "PUBLISH a both"),
            ("S", ">"),
            ("S", ">"),
            ("P", "PUBLISH hat x"),
            ("S", ">"),
            ("P", "PUBSUB NUMSUB a b c"),
            ("P", "PUBSUB CHANNELS a*"),
            ("P", "PUBSUB NUMPAT"),
            ("P", "PUBSUB SHARDCHANNELS"),
            ("P", "PUBSUB FOO"),
            ("P", "PUBSUB HELP"),
            ("S", "GET x"),
            ("S", "PING"),
            ("S", "PING hi"),
            ("S", "UNSUBSCRIBE a q"),
            ("S", ">"),
            ("S", "PUNSUBSCRIBE a"),
            ("S", "PUNSUBSCRIBE"),
            ("S", "UNSUBSCRIBE"),
            ("S", "UNSUBSCRIBE"),
            ("S", "PUNSUBSCRIBE"),
            ("S", "GET x"),
            ("S", "PING"),
            // In a transaction: queued, messages go at EXEC in order.
            ("S", "SUBSCRIBE t"),
            ("P", "MULTI"),
            ("P", "PUBLISH t one"),
            ("P", "PUBLISH t two"),
            ("P", "PUBLISH u three"),
            ("P", "EXEC"),
            ("S", ">"),
            ("S", ">"),
            ("P", "MULTI"),
            ("P", "PUBLISH t"),
            ("P", "EXEC"),
            ("S", "RESET"),
            ("S", "GET x"),
            // RESP3: every command works while subscribed; pushes carry the messages.
            ("S", "~HELLO 3"),
            ("S", "SUBSCRIBE r"),
            ("S", "GET x"),
            ("S", "PING"),
            ("P", "PUBLISH r three"),
            ("S", ">"),
            ("S", "PSUBSCRIBE r*"),
            ("P", "PUBLISH r four"),
            ("S", ">"),
            ("S", ">"),
            ("S", "UNSUBSCRIBE r nope"),
            ("S", ">"),
            ("S", "PUNSUBSCRIBE"),
            ("S", "UNSUBSCRIBE"),
        ],
    );
}

#[test]
fn channel_permissions_follow_acl_rules() {
    let (_d, _n, addr) = start_node(256 << 20);
    let port = start_tern(&addr, RedisOptions::default());
    let peer = start_peer();
    let script = [
        ("P", "ACL SETUSER news on nopass +@all ~* resetchannels &news.* &fixed*"),
        ("S", "AUTH news x"),
        ("S", "SUBSCRIBE other"),
        ("S", "SUBSCRIBE news.today"),
        ("S", "PSUBSCRIBE news.*"),
        ("S", "PSUBSCRIBE fixed*"),
        ("S", "PSUBSCRIBE fix*"),
        ("S", "RESET"),
        ("S", "AUTH news x"),
        ("S", "PUBLISH other x"),
        ("S", "PUBLISH news.x y"),
    ];
    let want = run(peer.port, &script);
    let got = run(port, &script);
    for ((step, w), g) in script.iter().zip(&want).zip(&got) {
        assert_eq!(g, w, "step {step:?}");
    }
}

/// Many subscribers on two API servers, publishers on both: each subscriber gets every message
/// of its channel, in the order they were published, and PUBLISH counts the subscribers of the
/// API server it ran on.
#[test]
fn messages_cross_api_servers_in_publish_order() {
    let (_d, _n, addr) = start_node(256 << 20);
    let (a, b2) = (start_tern(&addr, RedisOptions::default()), start_tern(&addr, RedisOptions::default()));
    let mut on_a = Conn::open(a);
    let mut on_b = Conn::open(b2);
    let mut pat_b = Conn::open(b2);
    assert_eq!(on_a.q("SUBSCRIBE jobs"), arr(vec![b("subscribe"), b("jobs"), Reply::Int(1)]));
    assert_eq!(on_b.q("SUBSCRIBE jobs"), arr(vec![b("subscribe"), b("jobs"), Reply::Int(1)]));
    assert_eq!(pat_b.q("PSUBSCRIBE j*"), arr(vec![b("psubscribe"), b("j*"), Reply::Int(1)]));
    let (mut pa, mut pb) = (Conn::open(a), Conn::open(b2));
    // Alternating publishers on the two servers; each waits for its reply, so the order is fixed.
    let n = 200;
    for i in 0..n {
        let (c, here) = if i % 2 == 0 { (&mut pa, 1) } else { (&mut pb, 2) };
        assert_eq!(c.q(&format!("PUBLISH jobs m{i}")), Reply::Int(here), "message {i}");
    }
    for i in 0..n {
        let want = message("jobs", &format!("m{i}"));
        assert_eq!(on_a.read(), want, "on A, message {i}");
        assert_eq!(on_b.read(), want, "on B, message {i}");
        assert_eq!(pat_b.read(), arr(vec![b("pmessage"), b("j*"), b("jobs"), b(&format!("m{i}"))]));
    }
    assert_eq!(pa.q("PUBSUB NUMSUB jobs"), arr(vec![b("jobs"), Reply::Int(1)]));
    assert_eq!(pb.q("PUBSUB NUMPAT"), Reply::Int(1));
    let list = match pb.q("CLIENT LIST") {
        Reply::Bulk(Some(v)) => String::from_utf8(v).unwrap(),
        r => panic!("{r:?}"),
    };
    assert!(list.contains("flags=P db=0 sub=1 psub=0"), "{list}");
    assert!(list.contains("flags=P db=0 sub=0 psub=1"), "{list}");
    // A message published before a subscription is not delivered to it; one after it is.
    let mut late = Conn::open(a);
    late.q("SUBSCRIBE jobs");
    pb.q("PUBLISH jobs after");
    assert_eq!(late.read(), message("jobs", "after"));
    assert_eq!(on_a.read(), message("jobs", "after"));
}

/// A subscriber that reads nothing is disconnected once more than 32 MiB wait for it; the
/// others, and the server, go on.
#[test]
fn a_subscriber_that_does_not_read_is_disconnected() {
    let (_d, _n, addr) = start_node(512 << 20);
    let port = start_tern(&addr, RedisOptions::default());
    let mut slow = Conn::open(port);
    slow.q("SUBSCRIBE big");
    let mut fine = Conn::open(port);
    fine.q("SUBSCRIBE small");
    let mut p = Conn::open(port);
    let payload = vec![b'x'; 1 << 20];
    let t0 = Instant::now();
    let mut published = 0;
    while published < 256 && t0.elapsed() < Duration::from_secs(120) {
        match p.cmd(&[b"PUBLISH", b"big", &payload]) {
            Reply::Int(0) => break,
            Reply::Int(1) => published += 1,
            r => panic!("{r:?}"),
        }
    }
    assert!(published > 32, "the subscriber was disconnected after {published} MiB");
    assert!(slow.closed(), "the slow subscriber was disconnected");
    p.q("PUBLISH small still");
    assert_eq!(fine.read(), message("small", "still"));
    assert_eq!(p.q("PING"), Reply::Simple("PONG".into()));
    // Over what a message row holds: a clear error, and nothing published.
    match p.cmd(&[b"PUBLISH", b"small", &vec![b'y'; 9 << 20]]) {
        Reply::Error(e) => assert!(e.starts_with("ERR Tern's pub/sub messages are limited to"), "{e}"),
        r => panic!("{r:?}"),
    }
    p.q("PUBLISH small after");
    assert_eq!(fine.read(), message("small", "after"));
}
