//! The same command sequences sent to a real redis-server and to Tern's Redis front end; replies
//! must be equal (after ordering where Redis leaves the order open, e.g. HGETALL and SCAN).

mod common;

use common::{Conn, Reply, start_node, start_peer, start_tern};
use std::time::Duration;
use tern_redis::RedisOptions;

/// Replies whose order Redis does not define, put in a canonical order.
fn canonical(cmd: &str, r: Reply) -> Reply {
    let name = cmd.split(' ').next().unwrap_or("").to_lowercase();
    match (name.as_str(), r) {
        ("hgetall", Reply::Array(Some(v))) => {
            let mut pairs: Vec<Vec<Reply>> = v.chunks(2).map(|c| c.to_vec()).collect();
            pairs.sort();
            Reply::Array(Some(pairs.concat()))
        }
        ("hgetall", Reply::Map(v)) => {
            let mut pairs: Vec<Vec<Reply>> = v.chunks(2).map(|c| c.to_vec()).collect();
            pairs.sort();
            Reply::Map(pairs.concat())
        }
        (_, r) => r,
    }
}

fn compare(peer: &mut Conn, tern: &mut Conn, script: &[&str]) {
    for line in script {
        let want = canonical(line, peer.q(line));
        let got = canonical(line, tern.q(line));
        assert_eq!(got, want, "command `{line}`: Tern {got:?}, redis-server {want:?}");
    }
}

fn both(peer: &mut Conn, tern: &mut Conn, args: &[&[u8]]) -> Reply {
    let want = peer.cmd(args);
    let got = tern.cmd(args);
    let shown: Vec<String> = args.iter().map(|a| String::from_utf8_lossy(&a[..a.len().min(40)]).into()).collect();
    assert_eq!(got, want, "command {shown:?}");
    got
}

fn setup() -> (tempfile::TempDir, tern_runtime::DataNode, common::Peer, u16) {
    let (dir, node, addr) = start_node(512 << 20);
    let opts = RedisOptions { purge_interval: Duration::from_millis(100), ..RedisOptions::default() };
    let port = start_tern(&addr, opts);
    (dir, node, start_peer(), port)
}

#[test]
fn strings_keys_and_errors_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    compare(
        &mut p,
        &mut t,
        &[
            "PING",
            "PING hello",
            "PING a b",
            "ECHO hi",
            "SELECT 1",
            "SET a 1",
            "GET a",
            "SELECT 0",
            "GET a",
            "SELECT 99",
            "SELECT x",
            "SELECT -1",
            "SET k v",
            "GET k",
            "GET missing",
            "SET k v2 NX",
            "SET k v3 XX",
            "GET k",
            "SET n1 v XX",
            "GET n1",
            "SET k v4 GET",
            "SET nk v GET",
            "SET nk2 v NX GET",
            "SET k v NX XX",
            "SET k v EX 0",
            "SET k v EX x",
            "SET k v PX -5",
            "SET k v EX 10 PX 100",
            "SET k v KEEPTTL EX 5",
            "SET k v FOO",
            "SET k v EX",
            "set k v ex 100",
            "TTL k",
            "SET k v2 KEEPTTL",
            "TTL k",
            "SET k v3",
            "TTL k",
            "SET k v3 PX 100000",
            "TTL k",
            "SET k v3 EXAT 1",
            "GET k",
            "EXISTS k",
            "SETNX k x",
            "SETNX k x2",
            "GET k",
            "SETNX k2",
            "GETDEL k",
            "GETDEL k",
            "INCR c",
            "INCR c",
            "INCRBY c 10",
            "DECR c",
            "DECRBY c 5",
            "GET c",
            "INCRBY c x",
            "INCRBY c 1.5",
            "SET s v3",
            "INCR s",
            "SET big 9223372036854775807",
            "INCR big",
            "INCRBY big -1",
            "SET small -9223372036854775808",
            "DECR small",
            "DECRBY c -9223372036854775808",
            "INCRBY c 9223372036854775808",
            "SET neg -5",
            "INCR neg",
            "SET z 007",
            "INCR z",
            "SET e \"\"",
            "SET plus +1",
            "INCR plus",
            "STRLEN s",
            "STRLEN missing",
            "APPEND s abc",
            "APPEND newk xyz",
            "GET s",
            "GET newk",
            "GETRANGE s 0 2",
            "GETRANGE s -3 -1",
            "GETRANGE s 5 1",
            "GETRANGE s 0 -1",
            "GETRANGE s -100 100",
            "GETRANGE missing 0 -1",
            "GETRANGE s x 1",
            "SETRANGE s 1 ZZ",
            "GET s",
            "SETRANGE sr 5 hi",
            "GET sr",
            "STRLEN sr",
            "SETRANGE sr -1 x",
            "SETRANGE sr x x",
            "MSET m1 a m2 b m3 c",
            "MGET m1 m2 nokey m3",
            "MSET m1",
            "MSET m1 a m2",
            "MSET m1 x m1 y",
            "GET m1",
            "MSETNX n1 a n2 b",
            "MSETNX n2 c n3 d",
            "MGET n1 n2 n3",
            "MSETNX n4 a n4 b",
            "GET n4",
            "MSETNX n5",
            "SETEX sx 100 v",
            "TTL sx",
            "SETEX sx 0 v",
            "SETEX sx x v",
            "PSETEX px 100000 v",
            "TTL px",
            "PSETEX px -1 v",
            "GETSET sx new",
            "GETSET nothing new",
            "TTL sx",
            "GETSET",
            "UNLINK n1 n2 nothing",
            "UNLINK",
            "DEL m1 m2 nokey",
            "EXISTS m1 m3 m3",
            "TYPE m3",
            "TYPE nokey",
            "EXPIRE m3 100",
            "TTL m3",
            "PTTL nokey",
            "PERSIST m3",
            "TTL m3",
            "PERSIST m3",
            "PERSIST nokey",
            "EXPIRE nokey 10",
            "EXPIRE m3 x",
            "EXPIRE m3 100 NX",
            "EXPIRE m3 100 NX",
            "EXPIRE m3 200 XX",
            "EXPIRE m3 50 GT",
            "EXPIRE m3 300 GT",
            "EXPIRE m3 50 LT",
            "TTL m3",
            "EXPIRE m3 10 NX XX",
            "EXPIRE m3 10 GT LT",
            "EXPIRE m3 10 FOO",
            "PEXPIRE m3 100000",
            "TTL m3",
            "EXPIREAT m3 1",
            "EXISTS m3",
            "SET q v",
            "PEXPIREAT q 1000",
            "GET q",
            "SET p v",
            "TTL p",
            "PTTL p",
            "TTL nokey",
            "EXPIRE p 9223372036854775807",
            "FOO a b",
            "FOO",
            "GET",
            "GET a b",
            "MGET",
            "DEL",
            "TTL",
            "INCR",
            "AUTH x",
            "HELLO 4",
            "HELLO x",
            "CLIENT SETNAME myname",
            "CLIENT GETNAME",
            "CLIENT SETNAME a\nb",
            "CLIENT FOO",
        ],
    );
    // Binary-safe keys and values, a value with spaces and an empty value.
    both(&mut p, &mut t, &[b"SET", b"bin\x00\xff", b"\x01\x02 \r\n\x00"]);
    both(&mut p, &mut t, &[b"GET", b"bin\x00\xff"]);
    both(&mut p, &mut t, &[b"SET", b"sp", b" 1"]);
    both(&mut p, &mut t, &[b"INCR", b"sp"]);
    both(&mut p, &mut t, &[b"SET", b"empty", b""]);
    both(&mut p, &mut t, &[b"GET", b"empty"]);
    both(&mut p, &mut t, &[b"STRLEN", b"empty"]);
    both(&mut p, &mut t, &[b"SETRANGE", b"nothing", b"0", b""]);
    both(&mut p, &mut t, &[b"EXISTS", b"nothing"]);
    both(&mut p, &mut t, &[b"DBSIZE"]);
    both(&mut p, &mut t, &[b"FLUSHDB"]);
    both(&mut p, &mut t, &[b"DBSIZE"]);
    both(&mut p, &mut t, &[b"GET", b"s"]);
    // QUIT answers +OK and closes.
    assert_eq!(both(&mut p, &mut t, &[b"QUIT"]), Reply::Simple("OK".into()));
    assert!(t.closed() && p.closed());
}

#[test]
fn hashes_and_wrong_types_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    compare(
        &mut p,
        &mut t,
        &[
            "HSET h f1 v1 f2 v2",
            "HSET h f1 x f3 y",
            "HSET h dup 1 dup 2",
            "HGET h dup",
            "HGET h f1",
            "HGET h nof",
            "HGET nokey f",
            "HMGET h f1 nof f3",
            "HMGET nokey a b",
            "HMSET h a 1 b 2",
            "HLEN h",
            "HLEN nokey",
            "HEXISTS h a",
            "HEXISTS h zz",
            "HEXISTS nokey a",
            "HDEL h a zz",
            "HDEL nokey a",
            "HLEN h",
            "HGETALL h",
            "HGETALL nokey",
            "HINCRBY h cnt 5",
            "HINCRBY h cnt -2",
            "HINCRBY h f1 1",
            "HINCRBY h cnt x",
            "HINCRBY h cnt 9223372036854775807",
            "HINCRBY newh c 3",
            "HGETALL newh",
            "HSET h f",
            "HMSET h f",
            "HSET h",
            "HGET h",
            "HDEL h f1 f2 f3 cnt b dup",
            "EXISTS h",
            "HLEN h",
            "TYPE newh",
            "HSET hh x 1",
            "GET hh",
            "SET hh str",
            "GET hh",
            "HGET hh x",
            "HSET hq a 1",
            "INCR hq",
            "DECRBY hq 2",
            "APPEND hq x",
            "STRLEN hq",
            "GETRANGE hq 0 1",
            "SETRANGE hq 0 x",
            "GETDEL hq",
            "SET hq v GET",
            "MGET hq hh",
            "HLEN hh",
            "HGETALL hh",
            "HINCRBY hh a 1",
            "HSET hh a 1",
            "TYPE hq",
            "EXPIRE hq 100",
            "TTL hq",
            "SET hq now-a-string",
            "TTL hq",
            "TYPE hq",
            "DEL hq hh newh",
            "DBSIZE",
        ],
    );
}

#[test]
fn scan_inline_protocol_and_protocol_errors_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    for i in 0..40 {
        both(&mut p, &mut t, &[b"SET", format!("s{i}").as_bytes(), b"v"]);
    }
    both(&mut p, &mut t, &[b"HSET", b"s-hash", b"f", b"v"]);
    let scan_all = |c: &mut Conn, extra: &[&str]| {
        let mut keys = Vec::new();
        let mut cursor = "0".to_string();
        for _ in 0..1000 {
            let mut args: Vec<&[u8]> = vec![b"SCAN", cursor.as_bytes()];
            args.extend(extra.iter().map(|s| s.as_bytes()));
            let Reply::Array(Some(v)) = c.cmd(&args) else { panic!("SCAN reply") };
            let Reply::Bulk(Some(next)) = &v[0] else { panic!("cursor") };
            let Reply::Array(Some(ks)) = &v[1] else { panic!("keys") };
            keys.extend(ks.iter().cloned());
            cursor = String::from_utf8(next.clone()).unwrap();
            if cursor == "0" {
                break;
            }
        }
        keys.sort();
        keys.dedup();
        keys
    };
    let keys = |c: &mut Conn, pattern: &str| {
        let Reply::Array(Some(mut v)) = c.cmd(&[b"KEYS", pattern.as_bytes()]) else { panic!("KEYS reply") };
        v.sort();
        v
    };
    for pattern in ["*", "s1?", "s[23]*", "nothing*", "s-*"] {
        assert_eq!(keys(&mut t, pattern), keys(&mut p, pattern), "KEYS {pattern}");
    }
    for extra in [&[][..], &["COUNT", "7"][..], &["MATCH", "s1*", "COUNT", "5"][..], &["TYPE", "hash"][..]] {
        assert_eq!(scan_all(&mut t, extra), scan_all(&mut p, extra), "SCAN {extra:?}");
    }
    compare(&mut p, &mut t, &["SCAN x", "SCAN 0 COUNT 0", "SCAN 0 MATCH", "SCAN 0 FOO bar"]);
    // Inline commands, with quoting.
    for raw in [&b"PING\r\n"[..], b"SET inl \"a b\\x41\"\r\n", b"GET inl\r\n", b"  \r\nECHO 'x y'\r\n"] {
        p.send_raw(raw);
        t.send_raw(raw);
        if raw.starts_with(b"  ") {
            // the blank line is skipped; ECHO answers.
        }
        assert_eq!(t.read(), p.read(), "inline {raw:?}");
    }
    // Protocol errors: the error text, then the connection closes.
    for raw in [&b"*1\r\n$x\r\n"[..], b"*abc\r\n", b"*1\r\nfoo\r\n", b"*1\r\n$600000000\r\n", b"SET a \"unbalanced\r\n"]
    {
        let (mut p2, mut t2) = (Conn::open(peer.port), Conn::open(port));
        p2.send_raw(raw);
        t2.send_raw(raw);
        assert_eq!(t2.read(), p2.read(), "protocol error for {raw:?}");
        assert!(t2.closed(), "Tern closes after {raw:?}");
    }
    // The server is still fine.
    assert_eq!(t.q("PING"), Reply::Simple("PONG".into()));
}

#[test]
fn large_values_and_expiry_timing_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    let big: Vec<u8> = (0..20_000_000u32).map(|i| (i % 251) as u8).collect();
    both(&mut p, &mut t, &[b"SET", b"big", &big]);
    let Reply::Bulk(Some(back)) = t.cmd(&[b"GET", b"big"]) else { panic!("GET big") };
    assert!(back == big, "20 MB value round trip");
    compare(
        &mut p,
        &mut t,
        &[
            "STRLEN big",
            "GETRANGE big 8000 8010",
            "GETRANGE big 262140 262150",
            "GETRANGE big -5 -1",
            "APPEND big tail",
            "STRLEN big",
            "GETRANGE big -8 -1",
            "SETRANGE big 8190 XYZ",
            "GETRANGE big 8185 8200",
            "MSET big2 x big3 y",
        ],
    );
    both(&mut p, &mut t, &[b"MSET", b"mbig", &big[..300_000], b"small", b"s"]);
    both(&mut p, &mut t, &[b"MGET", b"mbig", b"small", b"none"]);
    both(&mut p, &mut t, &[b"SET", b"big", b"now small"]);
    both(&mut p, &mut t, &[b"GET", b"big"]);
    // Expiry: gone at once when the time passes (no purge needed to hide it).
    compare(
        &mut p,
        &mut t,
        &["SET e1 v PX 1000", "SET e2 v EX 100", "HSET e3 f v", "PEXPIRE e3 1000", "GET e1", "HGET e3 f"],
    );
    std::thread::sleep(Duration::from_millis(1300));
    compare(
        &mut p,
        &mut t,
        &[
            "GET e1",
            "TTL e1",
            "EXISTS e1 e3",
            "HGET e3 f",
            "HLEN e3",
            "TYPE e3",
            "TTL e2",
            "SET e1 again",
            "GET e1",
            "TTL e1",
        ],
    );
}

#[test]
fn resp3_after_hello_3_matches_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    // HELLO 3 answers a map (server facts differ: compare its keys and the protocol).
    let shape = |r: Reply| match r {
        Reply::Map(v) => {
            let keys: Vec<Reply> = v.iter().step_by(2).cloned().collect();
            let proto = v.iter().position(|x| *x == Reply::bulk("proto")).map(|i| v[i + 1].clone());
            (keys, proto)
        }
        other => panic!("HELLO 3 answered {other:?}"),
    };
    assert_eq!(shape(t.q("HELLO 3")), shape(p.q("HELLO 3")));
    compare(
        &mut p,
        &mut t,
        &[
            "GET missing",
            "SET k v",
            "GET k",
            "MGET k missing",
            "HSET h a 1 b 2",
            "HGETALL h",
            "HGETALL missing",
            "HGET h zz",
            "HMGET h a zz",
            "SET k v2 GET",
            "SET new v NX GET",
            "GETDEL missing",
            "CLIENT GETNAME",
            "CONFIG GET save",
            "TTL k",
            "SCAN 0 MATCH nothing*",
            "INCR n",
            "FOO",
            "HELLO 4",
        ],
    );
    // INFO is a verbatim text string in RESP3.
    assert!(matches!(t.q("INFO keyspace"), Reply::Verbatim(v) if v.starts_with(b"txt:# Keyspace")));
    assert!(matches!(p.q("INFO keyspace"), Reply::Verbatim(v) if v.starts_with(b"txt:# Keyspace")));
    // Pipelined GETs (the merged path) answer RESP3 nulls too.
    for c in [&mut p, &mut t] {
        c.send_raw(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*2\r\n$3\r\nGET\r\n$2\r\nzz\r\n");
    }
    assert_eq!((t.read(), t.read()), (p.read(), p.read()));
    // Back to RESP2.
    assert_eq!(shape2(t.q("HELLO 2")), shape2(p.q("HELLO 2")));
    compare(&mut p, &mut t, &["GET missing", "HGETALL h"]);
}

fn shape2(r: Reply) -> usize {
    match r {
        Reply::Array(Some(v)) => v.len(),
        other => panic!("HELLO 2 answered {other:?}"),
    }
}

/// KEYS and SCAN MATCH with redis-server's glob quirks (`[a-]`, `[]`, trailing `\`, `[^...]`,
/// reversed ranges, high bytes), then seeded random patterns: the same keys come back. A pattern
/// of many stars against long keys answers promptly (a backtracking matcher never would).
/// Rerun a failure with `TERN_SEED=<n>`.
#[test]
fn glob_patterns_match_redis() {
    use tern_types::rng::{Rng, test_seed};
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    let mut names: Vec<Vec<u8>> = [
        "", "a", "b", "ab", "ba", "aab", "abc", "]", "^", "-", "\\", "*", "?", "[", "a]", "a-", "x\\", "z", "m", "A",
        "hello", "hallo", "hxllo", "h]llo", "a*b", "a?b",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    names.extend([b"\x80".to_vec(), b"\xff".to_vec(), b"a\x00b".to_vec()]);
    for k in &names {
        both(&mut p, &mut t, &[b"SET", k, b"v"]);
    }
    let keys = |c: &mut Conn, pattern: &[u8]| {
        let Reply::Array(Some(mut v)) = c.cmd(&[b"KEYS", pattern]) else { panic!("KEYS reply") };
        v.sort();
        v
    };
    let fixed: [&[u8]; 24] = [
        b"*",
        b"**",
        b"?",
        b"[a-]",
        b"[a-]x",
        b"[]",
        b"[]a]",
        b"[",
        b"[^",
        b"[^]",
        b"x\\",
        b"\\",
        b"[z-a]",
        b"[^a-c]*",
        b"[\\]]",
        b"[\\-]",
        b"a\\*b",
        b"h[^e]llo",
        b"[a-\xff]",
        b"[\x80-\xff]",
        b"a*",
        b"*b",
        b"?*",
        b"[]-a]",
    ];
    for pat in fixed {
        assert_eq!(keys(&mut t, pat), keys(&mut p, pat), "KEYS {:?}", String::from_utf8_lossy(pat));
    }
    let seed = test_seed();
    println!("seed {seed} (rerun with TERN_SEED={seed})");
    let mut rng = Rng::new(seed);
    let alphabet = b"ab*?[]^-\\";
    for _ in 0..300 {
        let pat: Vec<u8> = (0..rng.below(7) + 1).map(|_| alphabet[rng.below(alphabet.len() as u64) as usize]).collect();
        assert_eq!(keys(&mut t, &pat), keys(&mut p, &pat), "KEYS {:?} (seed {seed})", String::from_utf8_lossy(&pat));
    }
    // SCAN MATCH uses the same matcher.
    let scan = |c: &mut Conn, pat: &[u8]| {
        let Reply::Array(Some(v)) = c.cmd(&[b"SCAN", b"0", b"MATCH", pat, b"COUNT", b"1000"]) else { panic!("SCAN") };
        let Reply::Array(Some(mut ks)) = v[1].clone() else { panic!("SCAN keys") };
        ks.sort();
        ks
    };
    for pat in [&b"[a-]*"[..], b"*\\", b"[^ab]"] {
        assert_eq!(scan(&mut t, pat), scan(&mut p, pat), "SCAN MATCH {:?}", String::from_utf8_lossy(pat));
    }
    // Long keys and a pattern of 25 stars: prompt, and the same answer (redis's recursion bound
    // of 1,000 star groups included).
    for i in 0..20u8 {
        let mut k = vec![b'a'; 2990];
        k.push(b'0' + i % 10);
        both(&mut p, &mut t, &[b"SET", &k, b"v"]);
    }
    let start = std::time::Instant::now();
    for pat in
        [b"a*".repeat(25), [b"a*".repeat(25), b"b".to_vec()].concat(), [b"a*".repeat(1001), b"5".to_vec()].concat()]
    {
        assert_eq!(keys(&mut t, &pat), keys(&mut p, &pat), "KEYS of {} bytes", pat.len());
    }
    assert!(start.elapsed() < Duration::from_secs(30), "KEYS with many stars took {:?}", start.elapsed());
}
