//! Lists, sets and sorted sets against a real redis-server: the same command sequences, equal
//! replies (sets' replies sorted, as redis leaves their order open), RESP2 and RESP3; blocking
//! pops woken by another connection; the collections' rows through SQL's tables.

mod common;

use common::{Conn, Reply, start_node, start_peer, start_tern};
use std::time::{Duration, Instant};
use tern_redis::RedisOptions;

fn sorted(r: Reply) -> Reply {
    match r {
        Reply::Array(Some(mut v)) => {
            v.sort();
            Reply::Array(Some(v))
        }
        Reply::Set(mut v) => {
            v.sort();
            Reply::Set(v)
        }
        r => r,
    }
}

/// Replies whose order redis leaves open, put in order.
fn canonical(cmd: &str, r: Reply) -> Reply {
    let name = cmd.split(' ').next().unwrap_or("").to_lowercase();
    match name.as_str() {
        "smembers" | "sinter" | "sunion" | "sdiff" | "spop" | "srandmember" => sorted(r),
        "sscan" => match r {
            Reply::Array(Some(mut v)) if v.len() == 2 => {
                let m = sorted(v.pop().unwrap());
                Reply::Array(Some(vec![v.pop().unwrap(), m]))
            }
            r => r,
        },
        _ => r,
    }
}

fn compare(peer: &mut Conn, tern: &mut Conn, script: &[&str]) {
    for line in script {
        let want = canonical(line, peer.q(line));
        let got = canonical(line, tern.q(line));
        assert_eq!(got, want, "command `{line}`: Tern {got:?}, redis-server {want:?}");
    }
}

fn setup() -> (tempfile::TempDir, tern_runtime::DataNode, common::Peer, u16) {
    let (dir, node, addr) = start_node(512 << 20);
    let port = start_tern(&addr, RedisOptions::default());
    (dir, node, start_peer(), port)
}

#[test]
fn lists_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    compare(
        &mut p,
        &mut t,
        &[
            "RPUSH l a b c",
            "LPUSH l x y",
            "LRANGE l 0 -1",
            "LLEN l",
            "TYPE l",
            "LINDEX l 0",
            "LINDEX l -1",
            "LINDEX l 99",
            "LINDEX l x",
            "LRANGE l -100 100",
            "LRANGE l 2 1",
            "LRANGE l -2 -1",
            "LRANGE missing 0 -1",
            "LSET l 1 Y",
            "LSET l 10 z",
            "LSET missing 0 z",
            "LRANGE l 0 -1",
            "LPOP l",
            "RPOP l",
            "LPOP l 2",
            "LPOP l 0",
            "LPOP l -1",
            "LPOP missing",
            "LPOP missing 2",
            "RPUSH l a b a c a",
            "LREM l 2 a",
            "LRANGE l 0 -1",
            "LREM l -1 a",
            "LRANGE l 0 -1",
            "LREM l 0 zz",
            "RPUSH m 1 2 3 4 5 6 7 8",
            "LINSERT m BEFORE 2 x",
            "LINSERT m AFTER 7 y",
            "LINSERT m AFTER nope y",
            "LINSERT m MIDDLE 2 y",
            "LINSERT missing BEFORE a b",
            "LRANGE m 0 -1",
            "LTRIM m 1 -2",
            "LRANGE m 0 -1",
            "LTRIM m 5 2",
            "EXISTS m",
            "RPUSH p a b c a b c a",
            "LPOS p a",
            "LPOS p a RANK 2",
            "LPOS p a RANK -1",
            "LPOS p a COUNT 0",
            "LPOS p a COUNT 2 RANK -1",
            "LPOS p a MAXLEN 3 COUNT 0",
            "LPOS p zz",
            "LPOS p zz COUNT 1",
            "LPOS p a RANK 0",
            "LPOS p a COUNT -1",
            "LPOS p a MAXLEN -1",
            "LPOS p a FOO 1",
            "LPOS missing a COUNT 1",
            "LMOVE p q LEFT RIGHT",
            "LMOVE p q RIGHT LEFT",
            "LRANGE q 0 -1",
            "LMOVE p p LEFT RIGHT",
            "LRANGE p 0 -1",
            "LMOVE p q UP LEFT",
            "RPOPLPUSH p q",
            "RPOPLPUSH missing q",
            "LMPOP 2 missing p LEFT",
            "LMPOP 2 missing p RIGHT COUNT 10",
            "LMPOP 1 missing LEFT",
            "LMPOP 0 p LEFT",
            "LMPOP 1 p MIDDLE",
            "LMPOP 1 p LEFT COUNT 0",
            "LMPOP 5 p LEFT",
            "LPUSHX nolist a",
            "RPUSHX q z",
            "LRANGE q 0 -1",
            "SET s v",
            "LPUSH s a",
            "LRANGE s 0 -1",
            "LMOVE q s LEFT LEFT",
            "BLPOP q 0",
            "BRPOP q x",
            "BRPOP q -1",
            "BLPOP missing 0.01",
            "BLMOVE missing q LEFT LEFT 0.01",
            "BLMPOP 0.01 1 missing LEFT",
            "DEL q",
            "EXISTS q",
        ],
    );
}

#[test]
fn sets_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    compare(
        &mut p,
        &mut t,
        &[
            "SADD s a b c",
            "SADD s a d d",
            "SCARD s",
            "TYPE s",
            "SMEMBERS s",
            "SISMEMBER s a",
            "SISMEMBER s z",
            "SMISMEMBER s a z b",
            "SREM s a z",
            "SREM missing a",
            "SMEMBERS s",
            "SADD t c d e",
            "SINTER s t",
            "SUNION s t missing",
            "SDIFF s t",
            "SINTER s missing",
            "SINTERSTORE dst s t",
            "SMEMBERS dst",
            "SUNIONSTORE dst s t",
            "SCARD dst",
            "SDIFFSTORE dst s t",
            "SMEMBERS dst",
            "SINTERSTORE dst s missing",
            "EXISTS dst",
            "SINTERCARD 2 s t",
            "SINTERCARD 2 s t LIMIT 1",
            "SINTERCARD 0 s",
            "SINTERCARD 3 s t",
            "SINTERCARD 1 s LIMIT -1",
            "SMOVE s t b",
            "SMOVE s t nope",
            "SMOVE missing t a",
            "SMEMBERS s",
            "SMEMBERS t",
            "SPOP missing",
            "SPOP missing 3",
            "SPOP s -1",
            "SRANDMEMBER missing",
            "SRANDMEMBER missing 3",
            "SADD one x",
            "SRANDMEMBER one",
            "SRANDMEMBER one 3",
            "SRANDMEMBER one -3",
            "SPOP one",
            "EXISTS one",
            "SET str v",
            "SADD str a",
            "SINTER s str",
            "SSCAN t 0",
            "SSCAN t 0 MATCH c*",
        ],
    );
    // Random picks: members of the set, distinct for a positive count.
    for c in [&mut p, &mut t] {
        c.q("DEL r");
        for i in 0..50 {
            c.q(&format!("SADD r m{i}"));
        }
    }
    for c in [&mut p, &mut t] {
        let Reply::Array(Some(v)) = c.q("SRANDMEMBER r 10") else { panic!() };
        let mut d = v.clone();
        d.sort();
        d.dedup();
        assert_eq!(d.len(), 10);
        let Reply::Array(Some(v)) = c.q("SPOP r 45") else { panic!() };
        assert_eq!(v.len(), 45);
        assert_eq!(c.q("SCARD r"), Reply::Int(5));
        let Reply::Array(Some(v)) = c.q("SRANDMEMBER r -20") else { panic!() };
        assert_eq!(v.len(), 20);
    }
}

#[test]
fn sorted_sets_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    compare(
        &mut p,
        &mut t,
        &[
            "ZADD z 1.1 a 2 b 1e20 c 3.0e-5 d inf e -inf f",
            "ZRANGE z 0 -1 WITHSCORES",
            "ZCARD z",
            "TYPE z",
            "ZSCORE z a",
            "ZSCORE z nope",
            "ZMSCORE z a nope e",
            "ZINCRBY z 0.1 b",
            "ZINCRBY z 1 new",
            "ZADD z nan x",
            "ZADD z abc x",
            "ZADD z XX NX 1 a",
            "ZADD z GT LT 1 a",
            "ZADD z INCR 1 a 2 b",
            "ZADD z 1 a 2",
            "ZADD z NX 5 a 6 g",
            "ZADD z XX CH 5 a 7 h",
            "ZADD z GT CH 0 a 10 b",
            "ZADD z LT 0 a",
            "ZADD z INCR NX 1 a",
            "ZADD z INCR XX 1 a",
            "ZADD z INCR 1 nope2",
            "ZADD z INCR +inf e",
            "ZADD z INCR -inf e",
            "ZRANGE z 0 -1 WITHSCORES",
            "ZRANGE z 2 4",
            "ZRANGE z -2 -1 WITHSCORES",
            "ZRANGE z 0 1 REV",
            "ZREVRANGE z 0 2 WITHSCORES",
            "ZRANGE z (1 10 BYSCORE WITHSCORES",
            "ZRANGE z 10 (1 BYSCORE REV",
            "ZRANGE z -inf +inf BYSCORE LIMIT 1 2",
            "ZRANGE z 0 -1 LIMIT 1 2",
            "ZRANGE z a b BYLEX",
            "ZRANGEBYSCORE z -inf 2 WITHSCORES",
            "ZRANGEBYSCORE z (2 +inf LIMIT 0 1",
            "ZRANGEBYSCORE z x 1",
            "ZREVRANGEBYSCORE z +inf -inf LIMIT 2 3 WITHSCORES",
            "ZCOUNT z -inf +inf",
            "ZCOUNT z (1 2",
            "ZRANK z b",
            "ZREVRANK z b",
            "ZRANK z nope",
            "ZREM z a nope",
            "ZREM missing a",
            "ZPOPMIN z",
            "ZPOPMAX z 2",
            "ZPOPMIN z -1",
            "ZPOPMIN missing",
            "ZRANGE z 0 -1 WITHSCORES",
            "ZREMRANGEBYRANK z 0 0",
            "ZREMRANGEBYSCORE z -inf 2",
            "ZRANGE z 0 -1 WITHSCORES",
            "ZADD lex 0 a 0 b 0 c 0 d 0 e 0 f 0 ab",
            "ZRANGEBYLEX lex - +",
            "ZRANGEBYLEX lex [b (e",
            "ZRANGEBYLEX lex (a [c",
            "ZRANGEBYLEX lex - [b LIMIT 1 2",
            "ZREVRANGEBYLEX lex + -",
            "ZREVRANGEBYLEX lex [e (b",
            "ZRANGE lex [f - BYLEX REV",
            "ZLEXCOUNT lex [b +",
            "ZRANGEBYLEX lex a b",
            "ZRANGE lex - + BYLEX WITHSCORES",
            "ZREMRANGEBYLEX lex [a [b",
            "ZRANGE lex 0 -1",
            "ZADD u1 1 a 2 b 3 c",
            "ZADD u2 10 b 20 c 30 d",
            "SADD plain c d e",
            "ZUNION 2 u1 u2 WITHSCORES",
            "ZUNION 2 u1 u2 WEIGHTS 2 1 AGGREGATE MAX WITHSCORES",
            "ZINTER 2 u1 u2 WITHSCORES",
            "ZINTER 2 u1 u2 AGGREGATE MIN WITHSCORES",
            "ZINTER 3 u1 u2 plain WITHSCORES",
            "ZDIFF 2 u1 u2 WITHSCORES",
            "ZDIFF 2 u1 u2 WEIGHTS 1 1",
            "ZUNION 2 u1",
            "ZUNION 0 u1",
            "ZUNION 2 u1 u2 WEIGHTS 1 x",
            "ZUNIONSTORE out 2 u1 u2",
            "ZRANGE out 0 -1 WITHSCORES",
            "ZINTERSTORE out 2 u1 u2 WEIGHTS 1 0",
            "ZRANGE out 0 -1 WITHSCORES",
            "ZDIFFSTORE out 2 u1 u2",
            "ZRANGE out 0 -1 WITHSCORES",
            "ZINTERSTORE out 2 u1 missing",
            "EXISTS out",
            "ZINTERSTORE out 0 u1",
            "ZINTERCARD 2 u1 u2",
            "ZINTERCARD 2 u1 u2 LIMIT 1",
            "ZRANGESTORE out u2 0 1",
            "ZRANGE out 0 -1 WITHSCORES",
            "ZRANGESTORE out u2 (10 +inf BYSCORE",
            "ZRANGESTORE out u2 0 -1 WITHSCORES",
            "ZMPOP 2 missing u1 MIN",
            "ZMPOP 2 missing u2 MAX COUNT 5",
            "ZMPOP 1 u1 LEFT",
            "ZMPOP 1 u1 MIN COUNT 0",
            "BZPOPMIN u1 0",
            "BZPOPMAX missing 0.01",
            "BZMPOP 0.01 1 missing MIN",
            "BZPOPMIN u1 -1",
            "ZRANDMEMBER missing",
            "ZRANDMEMBER missing 2",
            "ZADD single 5 only",
            "ZRANDMEMBER single",
            "ZRANDMEMBER single 2 WITHSCORES",
            "ZRANDMEMBER single -2 WITHSCORES",
            "ZSCAN single 0",
            "SET str v",
            "ZADD str 1 a",
            "ZRANGE str 0 -1",
            "ZUNION 2 u1 str",
        ],
    );
}

#[test]
fn resp3_collection_replies_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    p.q("HELLO 3");
    t.q("HELLO 3");
    compare(
        &mut p,
        &mut t,
        &[
            "ZADD z 1.5 a 2 b inf c",
            "ZSCORE z a",
            "ZSCORE z nope",
            "ZMSCORE z a nope",
            "ZINCRBY z 1 a",
            "ZRANGE z 0 -1 WITHSCORES",
            "ZRANGE z 0 -1",
            "ZPOPMIN z",
            "ZPOPMAX z 1",
            "ZADD z 1 x",
            "BZPOPMIN z 0",
            "ZADD z 1 y 2 w",
            "ZMPOP 1 z MIN COUNT 2",
            "ZRANDMEMBER z 1 WITHSCORES",
            "LPOP missing",
            "LPOP missing 2",
            "BLPOP missing 0.01",
            "RPUSH l a b",
            "LRANGE l 0 -1",
            "SADD s a b",
            "SMEMBERS s",
            "SINTER s s",
            "SUNION s missing",
            "SDIFF s missing",
            "SRANDMEMBER s 5",
            "SRANDMEMBER s 0",
            "SPOP missing",
            "SPOP missing 2",
            "SPOP s 5",
        ],
    );
}

#[test]
fn collections_in_multi_and_key_commands_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    compare(
        &mut p,
        &mut t,
        &[
            "MULTI",
            "RPUSH l a b c",
            "LPOP l",
            "LRANGE l 0 -1",
            "SADD s a b",
            "SREM s a",
            "SMEMBERS s",
            "SCARD s",
            "ZADD z 1 a 2 b 3 c",
            "ZREM z b",
            "ZRANGE z 0 -1 WITHSCORES",
            "ZPOPMIN z",
            "ZRANK z c",
            "BLPOP nothing 0",
            "EXEC",
            "RENAME l l2",
            "LRANGE l2 0 -1",
            "COPY s s2",
            "SMEMBERS s2",
            "COPY z z2",
            "ZRANGE z2 0 -1 WITHSCORES",
            "COPY l2 l3",
            "LRANGE l3 0 -1",
            "MOVE z2 1",
            "SELECT 1",
            "ZRANGE z2 0 -1 WITHSCORES",
            "SELECT 0",
            "EXPIRE l2 100",
            "TTL l2",
            "DEL l2 s z",
            "EXISTS l2 s z",
            "SCAN 0 TYPE zset",
            "SCAN 0 TYPE list",
        ],
    );
    // An expired list is gone for every command, and a new one under its name starts empty.
    for c in [&mut p, &mut t] {
        c.q("RPUSH e a b c");
        c.q("PEXPIRE e 50");
    }
    std::thread::sleep(Duration::from_millis(200));
    compare(&mut p, &mut t, &["LLEN e", "LRANGE e 0 -1", "RPUSH e z", "LRANGE e 0 -1"]);
}

#[test]
fn blocking_pops_wake_in_arrival_order() {
    let (_d, _n, peer, port) = setup();
    drop(peer);
    // Three clients block on one key; pushes serve them in the order they blocked.
    let mut waiters = Vec::new();
    for i in 0..3 {
        let mut c = Conn::open(port);
        c.send(&[b"BLPOP", b"q", b"5"]);
        waiters.push(c);
        // Let each block before the next (arrival order).
        std::thread::sleep(Duration::from_millis(100 + i * 10));
    }
    let mut w = Conn::open(port);
    assert_eq!(w.q("RPUSH q one two three"), Reply::Int(3));
    let got: Vec<Reply> = waiters.iter_mut().map(|c| c.read()).collect();
    let want = |v: &str| Reply::Array(Some(vec![Reply::bulk("q"), Reply::bulk(v)]));
    assert_eq!(got, vec![want("one"), want("two"), want("three")]);
    // A timeout answers nil after about its time.
    let t0 = Instant::now();
    assert_eq!(w.q("BRPOP q 0.2"), Reply::Array(None));
    assert!(t0.elapsed() >= Duration::from_millis(190));
    // BLMOVE woken by a push; the element lands in the destination.
    let mut b = Conn::open(port);
    b.send(&[b"BLMOVE", b"src", b"dst", b"LEFT", b"RIGHT", b"5"]);
    std::thread::sleep(Duration::from_millis(100));
    w.q("LPUSH src x");
    assert_eq!(b.read(), Reply::bulk("x"));
    assert_eq!(w.q("LRANGE dst 0 -1"), Reply::Array(Some(vec![Reply::bulk("x")])));
    // BZPOPMIN woken by ZADD.
    b.send(&[b"BZPOPMIN", b"zq", b"5"]);
    std::thread::sleep(Duration::from_millis(100));
    w.q("ZADD zq 3 m");
    assert_eq!(b.read(), Reply::Array(Some(vec![Reply::bulk("zq"), Reply::bulk("m"), Reply::bulk("3")])));
    // A client that leaves while blocked is not served: the element stays for the others.
    let mut gone = Conn::open(port);
    gone.send(&[b"BLPOP", b"left", b"0"]);
    std::thread::sleep(Duration::from_millis(100));
    drop(gone);
    std::thread::sleep(Duration::from_millis(600));
    w.q("RPUSH left kept");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(w.q("LRANGE left 0 -1"), Reply::Array(Some(vec![Reply::bulk("kept")])));
    // CLIENT KILL ends a blocked connection.
    b.send(&[b"BLPOP", b"never", b"0"]);
    std::thread::sleep(Duration::from_millis(100));
    assert!(matches!(w.q("CLIENT KILL TYPE normal SKIPME yes"), Reply::Int(_)));
    assert!(b.read_or_closed().is_none());
}

#[test]
fn a_big_list_reaches_any_index_by_key() {
    let (_d, _n, peer, port) = setup();
    drop(peer);
    let mut c = Conn::open(port);
    // 20,000 elements pushed in batches of 1,000.
    for b in 0..20 {
        let mut args: Vec<Vec<u8>> = vec![b"RPUSH".to_vec(), b"big".to_vec()];
        args.extend((0..1000).map(|i| format!("e{}", b * 1000 + i).into_bytes()));
        let refs: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
        assert_eq!(c.cmd(&refs), Reply::Int((b + 1) * 1000));
    }
    assert_eq!(c.q("LINDEX big 12345"), Reply::bulk("e12345"));
    assert_eq!(c.q("LINDEX big -1"), Reply::bulk("e19999"));
    let Reply::Array(Some(v)) = c.q("LRANGE big 0 -1") else { panic!() };
    assert_eq!(v.len(), 20_000);
    assert_eq!(v[19_999], Reply::bulk("e19999"));
    assert_eq!(c.q("LINSERT big BEFORE e3 ins"), Reply::Int(20_001));
    assert_eq!(c.q("LINDEX big 3"), Reply::bulk("ins"));
    assert_eq!(c.q("LINDEX big 4"), Reply::bulk("e3"));
    assert_eq!(c.q("LREM big 0 ins"), Reply::Int(1));
    assert_eq!(c.q("LINDEX big 3"), Reply::bulk("e3"));
    assert_eq!(c.q("LLEN big"), Reply::Int(20_000));
    // A sorted set of 5,000 members: ranges by rank and score from either end.
    for b in 0..5 {
        let mut args: Vec<Vec<u8>> = vec![b"ZADD".to_vec(), b"bz".to_vec()];
        for i in 0..1000 {
            let n = b * 1000 + i;
            args.push(n.to_string().into_bytes());
            args.push(format!("m{n}").into_bytes());
        }
        let refs: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
        c.cmd(&refs);
    }
    assert_eq!(c.q("ZRANK bz m4321"), Reply::Int(4321));
    assert_eq!(c.q("ZREVRANK bz m4321"), Reply::Int(678));
    assert_eq!(c.q("ZRANGE bz -1 -1"), Reply::Array(Some(vec![Reply::bulk("m4999")])));
    assert_eq!(c.q("ZRANGEBYSCORE bz (2500 2501"), Reply::Array(Some(vec![Reply::bulk("m2501")])));
    assert_eq!(c.q("ZCOUNT bz 100 199"), Reply::Int(100));
}

/// Sends one command of many arguments to both servers.
fn both_cmd(p: &mut Conn, t: &mut Conn, args: &[Vec<u8>]) {
    let refs: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
    assert_eq!(t.cmd(&refs), p.cmd(&refs), "{:?}", String::from_utf8_lossy(&args[0]));
}

/// Ranks, counts, rank ranges and offsets of big sorted sets (found by the data node's counted
/// index, not read past) against redis-server: ties ordered by member, exclusive and infinite
/// bounds, both directions, LIMIT offsets deep into the set, removal by rank in the middle.
#[test]
fn big_sorted_sets_by_rank_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    for b in 0..6 {
        let mut args: Vec<Vec<u8>> = vec![b"ZADD".to_vec(), b"big".to_vec()];
        for i in 0..1000 {
            let n = b * 1000 + i;
            // Seven members a score: ties are ordered by member.
            args.push(((n * 7919) % 6000 / 7).to_string().into_bytes());
            args.push(format!("m{n}").into_bytes());
        }
        both_cmd(&mut p, &mut t, &args);
        // One score for all: lex ranges apply.
        let mut args: Vec<Vec<u8>> = vec![b"ZADD".to_vec(), b"lex".to_vec()];
        for i in 0..500 {
            args.push(b"0".to_vec());
            args.push(format!("w{:05}", (b * 500 + i) * 13 % 3000).into_bytes());
        }
        both_cmd(&mut p, &mut t, &args);
    }
    let mut script: Vec<String> = Vec::new();
    for n in (0..6000).step_by(433).chain([5999, 1, 0]) {
        script.push(format!("ZRANK big m{n}"));
        script.push(format!("ZREVRANK big m{n}"));
    }
    script.extend(
        [
            "ZRANK big nope",
            "ZCARD big",
            "ZCOUNT big -inf +inf",
            "ZCOUNT big 100 199",
            "ZCOUNT big (100 (199",
            "ZCOUNT big (100 100",
            "ZCOUNT big 500 400",
            "ZCOUNT big 857 +inf",
            "ZCOUNT big -inf (0",
            "ZCOUNT nokey 0 1",
            "ZLEXCOUNT lex - +",
            "ZLEXCOUNT lex [w01000 (w02000",
            "ZLEXCOUNT lex (w01000 [w02000",
            "ZLEXCOUNT lex + -",
            "ZLEXCOUNT big - +",
            "ZRANGE big 0 4 WITHSCORES",
            "ZRANGE big 2990 3004 WITHSCORES",
            "ZRANGE big -5 -1",
            "ZRANGE big 5990 7000",
            "ZRANGE big 7000 8000",
            "ZRANGE big -8000 2",
            "ZREVRANGE big 0 3 WITHSCORES",
            "ZREVRANGE big 4000 4005",
            "ZRANGE big 100 110 REV",
            "ZRANGEBYSCORE big 300 +inf LIMIT 1000 5 WITHSCORES",
            "ZRANGEBYSCORE big -inf +inf LIMIT 5995 10",
            "ZRANGEBYSCORE big (300 (305 LIMIT 3 4",
            "ZREVRANGEBYSCORE big +inf -inf LIMIT 2500 6 WITHSCORES",
            "ZREVRANGEBYSCORE big 500 (400 LIMIT 10 -1",
            "ZRANGE big 200 100 BYSCORE REV LIMIT 17 3",
            "ZRANGEBYSCORE big 0 10 LIMIT -1 3",
            "ZRANGEBYSCORE big 0 10 LIMIT 0 0",
            "ZRANGEBYLEX lex [w01000 + LIMIT 700 5",
            "ZREVRANGEBYLEX lex + - LIMIT 2990 20",
            "ZRANGE lex (w00100 [w00200 BYLEX LIMIT 10 3",
            "ZREMRANGEBYRANK big 2000 2999",
            "ZCARD big",
            "ZRANK big m4321",
            "ZRANGE big 1995 2005",
            "ZCOUNT big 100 600",
            "ZREMRANGEBYRANK big -10 -1",
            "ZRANGE big -3 -1 WITHSCORES",
            "ZPOPMIN big 3",
            "ZPOPMAX big 2",
            "ZRANGESTORE dst big 1000 1009",
            "ZRANGE dst 0 -1 WITHSCORES",
        ]
        .map(String::from),
    );
    let script: Vec<&str> = script.iter().map(|s| &s[..]).collect();
    compare(&mut p, &mut t, &script);
}

/// Random picks from sets and sorted sets bigger than what is read whole are uniform (a seek by
/// random rank each): members packed in a narrow corner of the byte space come up at their share.
#[test]
fn random_picks_from_big_collections_are_uniform() {
    let (_d, _n, peer, port) = setup();
    drop(peer);
    let mut t = Conn::open(port);
    // 1,000 members "a0000".."a0999" and 100 "zz…" members that differ only in their last bytes.
    let members: Vec<Vec<u8>> = (0..1000)
        .map(|i| format!("a{i:04}").into_bytes())
        .chain((0..100).map(|i| format!("zzzzzzzzzzzz{i:03}").into_bytes()))
        .collect();
    let mut sadd: Vec<&[u8]> = vec![b"SADD", b"s"];
    sadd.extend(members.iter().map(|m| &m[..]));
    assert_eq!(t.cmd(&sadd), Reply::Int(1100));
    let mut zadd: Vec<Vec<u8>> = vec![b"ZADD".to_vec(), b"z".to_vec()];
    for (i, m) in members.iter().enumerate() {
        zadd.push(i.to_string().into_bytes());
        zadd.push(m.clone());
    }
    let refs: Vec<&[u8]> = zadd.iter().map(|a| &a[..]).collect();
    assert_eq!(t.cmd(&refs), Reply::Int(1100));
    let all: std::collections::HashSet<Vec<u8>> = members.iter().cloned().collect();
    let bulk = |r: &Reply| match r {
        Reply::Bulk(Some(b)) => b.clone(),
        r => panic!("{r:?}"),
    };
    for cmd in ["SRANDMEMBER s -4000", "ZRANDMEMBER z -4000"] {
        let (mut picks, mut corner) = (0, 0);
        for _ in 0..3 {
            let Reply::Array(Some(v)) = t.q(cmd) else { panic!("{cmd}") };
            assert_eq!(v.len(), 4000, "{cmd}");
            for r in &v {
                let m = bulk(r);
                assert!(all.contains(&m), "{cmd}: {m:?} is a member");
                picks += 1;
                corner += m.starts_with(b"zz") as u32;
            }
        }
        // 100 of 1,100 members: 1,091 of 12,000 picks expected (a standard deviation of 31).
        assert!((700..1500).contains(&corner), "{cmd}: {corner} of {picks} picks in the corner");
    }
    // Distinct picks: as many as asked, all members, none twice.
    for cmd in ["SRANDMEMBER s 200", "ZRANDMEMBER z 200"] {
        let Reply::Array(Some(v)) = t.q(cmd) else { panic!("{cmd}") };
        let got: std::collections::HashSet<Vec<u8>> = v.iter().map(bulk).collect();
        assert_eq!(got.len(), 200, "{cmd}: distinct");
        assert!(got.is_subset(&all));
    }
    let Reply::Array(Some(v)) = t.q("ZRANDMEMBER z 3 WITHSCORES") else { panic!() };
    assert_eq!(v.len(), 6);
    assert!(all.contains(&bulk(&t.q("SRANDMEMBER s"))));
    assert!(all.contains(&bulk(&t.q("ZRANDMEMBER z"))));
    // SPOP by rank removes what it returns.
    let Reply::Array(Some(v)) = t.q("SPOP s 50") else { panic!() };
    assert_eq!(v.len(), 50);
    assert_eq!(t.q("SCARD s"), Reply::Int(1050));
    for r in &v {
        let m = bulk(r);
        assert_eq!(t.cmd(&[b"SISMEMBER", b"s", &m]), Reply::Int(0));
    }
}

#[test]
fn a_push_through_another_api_server_wakes_a_blocked_pop() {
    let (_d, _n, addr) = start_node(256 << 20);
    let (a, b) = (start_tern(&addr, RedisOptions::default()), start_tern(&addr, RedisOptions::default()));
    let mut blocked = Conn::open(a);
    blocked.send(&[b"BRPOP", b"jobs", b"10"]);
    std::thread::sleep(Duration::from_millis(150));
    let mut other = Conn::open(b);
    let t0 = Instant::now();
    assert_eq!(other.q("LPUSH jobs j1"), Reply::Int(1));
    assert_eq!(blocked.read(), Reply::Array(Some(vec![Reply::bulk("jobs"), Reply::bulk("j1")])));
    // Woken within a few polls, not at the timeout.
    assert!(t0.elapsed() < Duration::from_secs(5), "took {:?}", t0.elapsed());
    assert_eq!(other.q("LLEN jobs"), Reply::Int(0));
    // The same for a sorted set.
    blocked.send(&[b"BZPOPMAX", b"zjobs", b"10"]);
    std::thread::sleep(Duration::from_millis(150));
    other.q("ZADD zjobs 1 low 9 high");
    assert_eq!(blocked.read(), Reply::Array(Some(vec![Reply::bulk("zjobs"), Reply::bulk("high"), Reply::bulk("9")])));
}

#[test]
fn collections_are_rows_that_sql_reads() {
    let (_d, _n, addr) = start_node(256 << 20);
    let port = start_tern(&addr, RedisOptions::default());
    let mut c = Conn::open(port);
    c.q("RPUSH l a b");
    c.q("LPUSH l z");
    c.q("SADD s m1 m2");
    c.q("ZADD z 1.5 x -inf y");
    let client = tern_client::Client::connect(&addr).unwrap();
    let rows = |table: &str| {
        let t = client.table("redis_0", table).unwrap();
        let mut v: Vec<Vec<tern_client::Value>> = client
            .blocking()
            .scan_all(tern_client::ScanSpec::table(t.id()))
            .unwrap()
            .iter()
            .map(|r| t.decode_row(r).unwrap())
            .collect();
        v.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        v
    };
    use tern_client::Value as V;
    let l = rows("list_values");
    // Positions run from the first (LPUSH went below 0) in order.
    let mut by_pos: Vec<(i64, Vec<u8>)> = l
        .iter()
        .map(|r| match (&r[1], &r[2]) {
            (V::Int(p), V::Bytes(b)) => (*p, b.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    by_pos.sort();
    assert_eq!(
        by_pos.iter().map(|p| p.1.clone()).collect::<Vec<_>>(),
        vec![b"z".to_vec(), b"a".to_vec(), b"b".to_vec()]
    );
    let s = rows("set_members");
    assert_eq!(
        s.iter().map(|r| r[1].clone()).collect::<Vec<_>>(),
        vec![V::Bytes(b"m1".to_vec()), V::Bytes(b"m2".to_vec())]
    );
    let z = rows("zset_members");
    let mut scores: Vec<f64> = z.iter().map(|r| if let V::Double(d) = r[2] { d } else { panic!() }).collect();
    scores.sort_by(f64::total_cmp);
    assert_eq!(scores, vec![f64::NEG_INFINITY, 1.5]);
    // The key rows name the types.
    let keys = rows("string_keys");
    let types: Vec<(V, V)> = keys.iter().map(|r| (r[0].clone(), r[2].clone())).collect();
    assert!(types.contains(&(V::Bytes(b"l".to_vec()), V::UInt(2))));
    assert!(types.contains(&(V::Bytes(b"s".to_vec()), V::UInt(3))));
    assert!(types.contains(&(V::Bytes(b"z".to_vec()), V::UInt(4))));
}

/// INFO stats' count of commands that ran in a group another command of their key led.
fn grouped_commands(c: &mut Conn) -> i64 {
    let Reply::Bulk(Some(info)) = c.q("INFO stats") else { panic!("INFO") };
    let info = String::from_utf8(info).unwrap();
    let line = info.lines().find(|l| l.starts_with("tern_grouped_commands:")).expect("the grouped count");
    line["tern_grouped_commands:".len()..].trim().parse().unwrap()
}

/// Commands of one key that arrive while one of its commands waits for the key row's lock run
/// together once it is free: each gets the reply and keyspace event it would have had alone, in
/// one serial order, and an argument error fails only its own command.
#[test]
fn commands_waiting_on_one_key_run_as_one_group() {
    let (_d, _n, addr) = start_node(256 << 20);
    let port = start_tern(&addr, RedisOptions::default());
    let mut c = Conn::open(port);
    assert_eq!(c.q("RPUSH q seed"), Reply::Int(1));
    assert_eq!(c.q("CONFIG SET notify-keyspace-events Kl"), Reply::Simple("OK".into()));
    let mut sub = Conn::open(port);
    sub.q("SUBSCRIBE __keyspace@0__:q");
    let before = grouped_commands(&mut c);
    // Another transaction holds the key row's lock, so the first push waits in the data node
    // and the rest wait for its group in the API server.
    let client = tern_client::Client::connect(&addr).unwrap();
    let keys = client.table("redis_0", "string_keys").unwrap();
    let mut lock = keys.read(&[tern_client::Value::Bytes(b"q".to_vec())]).unwrap();
    lock.kind = tern_client::OpKind::ReadExclusive;
    let mut t = client.begin();
    client.blocking().execute_in(&mut t, vec![lock], tern_client::Exec::NoCommit).unwrap();
    const N: usize = 12;
    let pushers: Vec<_> = (0..N)
        .map(|i| {
            std::thread::spawn(move || {
                let mut p = Conn::open(port);
                let r = if i == 5 {
                    // An argument error inside the group (sent after the others, so it never
                    // leads): only this one fails.
                    std::thread::sleep(Duration::from_millis(100));
                    p.cmd(&[b"RPUSH", b"q", &vec![b'x'; 600 << 10]])
                } else {
                    p.q(&format!("RPUSH q v{i}"))
                };
                (i, r)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(400));
    client.blocking().execute_in(&mut t, Vec::new(), tern_client::Exec::Commit).unwrap();
    let mut lens = Vec::new();
    for h in pushers {
        match h.join().unwrap() {
            (5, Reply::Error(e)) => assert!(e.starts_with("ERR list elements are limited to"), "{e}"),
            (i, Reply::Int(n)) if i != 5 => lens.push(n),
            other => panic!("{other:?}"),
        }
    }
    lens.sort();
    // One serial history: the lengths after each push are 2..=N.
    assert_eq!(lens, (2..=N as i64).collect::<Vec<_>>());
    assert!(grouped_commands(&mut c) - before >= N as i64 - 2, "the waiting pushes ran as one group");
    // An event per push that pushed, none for the failed one.
    for _ in 0..N - 1 {
        match sub.read() {
            Reply::Array(Some(m)) => assert_eq!(m[2], Reply::bulk("rpush")),
            other => panic!("{other:?}"),
        }
    }
    // (Were there an event of the failed push, it would come before this one.)
    c.q("LPUSH q probe");
    match sub.read() {
        Reply::Array(Some(m)) => assert_eq!(m[2], Reply::bulk("lpush")),
        other => panic!("{other:?}"),
    }
    let Reply::Array(Some(all)) = c.q("LRANGE q 0 -1") else { panic!() };
    assert_eq!(all.len(), N + 1);
    assert_eq!(all[1], Reply::bulk("seed"));
}

/// Many connections writing and popping the same list, set and sorted set at once (so their
/// commands run in groups of any size): nothing is lost or returned twice, the replies add up to
/// the collections' sizes, and bad arguments fail alone.
#[test]
fn concurrent_writers_of_one_key_keep_a_serial_history() {
    let (_d, _n, addr) = start_node(256 << 20);
    let port = start_tern(&addr, RedisOptions::default());
    const THREADS: usize = 8;
    const ROUNDS: usize = 150;
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = Conn::open(port);
                let (mut pushed, mut popped, mut added, mut spopped, mut zadded, mut zpopped) =
                    (Vec::new(), Vec::new(), 0i64, Vec::new(), 0i64, Vec::new());
                for i in 0..ROUNDS {
                    let v = format!("t{t}-{i}");
                    let side = if i % 2 == 0 { "LPUSH" } else { "RPUSH" };
                    assert!(matches!(c.q(&format!("{side} l {v}")), Reply::Int(n) if n >= 1));
                    pushed.push(v.clone());
                    if i % 3 == 0 {
                        match c.q(if i % 2 == 0 { "LPOP l" } else { "RPOP l 2" }) {
                            Reply::Bulk(Some(b)) => popped.push(String::from_utf8(b).unwrap()),
                            Reply::Array(Some(v)) => popped.extend(v.into_iter().map(|r| match r {
                                Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
                                other => panic!("{other:?}"),
                            })),
                            Reply::Bulk(None) | Reply::Array(None) => {}
                            other => panic!("{other:?}"),
                        }
                    }
                    if i % 10 == 0 {
                        assert_eq!(
                            c.q("LPOP l -1"),
                            Reply::Error("ERR value is out of range, must be positive".into())
                        );
                        assert_eq!(c.q("ZADD z nan m"), Reply::Error("ERR value is not a valid float".into()));
                    }
                    // Members shared by all threads: each is new for one SADD only.
                    match c.q(&format!("SADD s m{} m{}", i, i + 1)) {
                        Reply::Int(n) => added += n,
                        other => panic!("{other:?}"),
                    }
                    if i % 4 == 0 {
                        match c.q("SPOP s") {
                            Reply::Bulk(Some(b)) => spopped.push(String::from_utf8(b).unwrap()),
                            Reply::Bulk(None) => {}
                            other => panic!("{other:?}"),
                        }
                    }
                    match c.q(&format!("ZADD z {i} {v}")) {
                        Reply::Int(n) => zadded += n,
                        other => panic!("{other:?}"),
                    }
                    if i % 5 == 0 {
                        match c.q("ZPOPMIN z") {
                            Reply::Array(Some(e)) if e.len() == 2 => zpopped.push(e[0].clone()),
                            Reply::Array(Some(e)) if e.is_empty() => {}
                            other => panic!("{other:?}"),
                        }
                    }
                }
                (pushed, popped, added, spopped, zadded, zpopped)
            })
        })
        .collect();
    let (mut pushed, mut popped, mut added, mut spopped, mut zadded, mut zpopped) =
        (Vec::new(), Vec::new(), 0, Vec::new(), 0, Vec::new());
    for w in workers {
        let r = w.join().unwrap();
        pushed.extend(r.0);
        popped.extend(r.1);
        added += r.2;
        spopped.extend(r.3);
        zadded += r.4;
        zpopped.extend(r.5);
    }
    let mut c = Conn::open(port);
    // The list: what is left and what was popped are what was pushed, each once.
    let Reply::Array(Some(rest)) = c.q("LRANGE l 0 -1") else { panic!() };
    let mut seen: Vec<String> = rest
        .into_iter()
        .map(|r| match r {
            Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
            other => panic!("{other:?}"),
        })
        .chain(popped)
        .collect();
    seen.sort();
    pushed.sort();
    assert_eq!(seen, pushed);
    // The set: what was new, less what was popped, is there (a popped member may be new again).
    assert_eq!(c.q("SCARD s"), Reply::Int(added - spopped.len() as i64));
    assert!(added > ROUNDS as i64);
    // The sorted set: every member added once, popped at most once.
    assert_eq!(zadded, (THREADS * ROUNDS) as i64);
    let mut distinct = zpopped.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), zpopped.len(), "an entry popped twice");
    assert_eq!(c.q("ZCARD z"), Reply::Int(zadded - zpopped.len() as i64));
}
