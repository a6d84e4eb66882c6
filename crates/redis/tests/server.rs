//! Tern-specific behaviour of the Redis front end: atomic in-node increments under concurrency,
//! background purge of expired keys with their overflow rows, pipelining, many connections,
//! bounded per-connection memory, key limits, SQL visibility, databases, and a data node that
//! goes away.

mod common;

use common::{Conn, Reply, start_node, start_tern};
use std::time::{Duration, Instant};
use tern_client::{Client, OpResult, ScanSpec, Value};
use tern_redis::RedisOptions;

fn opts() -> RedisOptions {
    RedisOptions { purge_interval: Duration::from_millis(100), ..RedisOptions::default() }
}

#[test]
fn concurrent_increments_are_atomic() {
    let (_d, _n, addr) = start_node(128 << 20);
    let port = start_tern(&addr, opts());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Conn::open(port);
                for _ in 0..250 {
                    assert!(matches!(c.q("INCR ctr"), Reply::Int(_)));
                    assert!(matches!(c.q("HINCRBY h f 2"), Reply::Int(_)));
                    assert!(matches!(c.q("DECRBY down 3"), Reply::Int(_)));
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let mut c = Conn::open(port);
    assert_eq!(c.q("GET ctr"), Reply::bulk("1000"));
    assert_eq!(c.q("HGET h f"), Reply::bulk("2000"));
    assert_eq!(c.q("GET down"), Reply::bulk("-3000"));
    assert_eq!(c.q("HLEN h"), Reply::Int(1));
}

#[test]
fn dirty_increments_lose_nothing() {
    let (_d, _n, addr) = start_node(128 << 20);
    let port = start_tern(&addr, RedisOptions { dirty_incr: vec![true], ..opts() });
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Conn::open(port);
                for _ in 0..250 {
                    assert!(matches!(c.q("INCR ctr"), Reply::Int(_)));
                    assert!(matches!(c.q("DECRBY down 2"), Reply::Int(_)));
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let mut c = Conn::open(port);
    assert_eq!(c.q("GET ctr"), Reply::bulk("1000"));
    assert_eq!(c.q("GET down"), Reply::bulk("-2000"));
    // Errors are still reported (checked at prepare).
    assert_eq!(c.q("SET s abc"), Reply::Simple("OK".into()));
    assert_eq!(c.q("INCR s"), Reply::Error("ERR value is not an integer or out of range".into()));
    assert_eq!(c.q("HSET h f 1"), Reply::Int(1));
    assert!(matches!(c.q("INCR h"), Reply::Error(e) if e.starts_with("WRONGTYPE")));
}

#[test]
fn expired_keys_are_purged_with_their_rows() {
    let (_d, _n, addr) = start_node(128 << 20);
    let port = start_tern(&addr, opts());
    let mut c = Conn::open(port);
    let big = vec![b'x'; 300_000];
    assert_eq!(c.cmd(&[b"SET", b"big", &big, b"PX", b"1500"]), Reply::Simple("OK".into()));
    assert_eq!(c.q("HSET h a 1 b 2"), Reply::Int(2));
    assert_eq!(c.q("PEXPIRE h 1500"), Reply::Int(1));
    assert_eq!(c.q("SET keep v"), Reply::Simple("OK".into()));
    let client = Client::connect(&addr).unwrap();
    let rows = |table: &str, expired: bool| {
        let t = client.table("redis_0", table).unwrap();
        let mut spec = ScanSpec::table(t.id());
        spec.expired = expired;
        client.blocking().scan_all(spec).unwrap().len()
    };
    assert!(rows("string_values", false) >= 4, "the big value has overflow rows");
    assert_eq!(rows("hset_keys", false), 2);
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let left = rows("string_keys", true) + rows("string_values", false) + rows("hset_keys", false);
        if left == 0 {
            break;
        }
        assert!(Instant::now() < until, "{left} rows of expired keys were not purged");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(c.q("GET keep"), Reply::bulk("v"));
    assert_eq!(c.q("DBSIZE"), Reply::Int(1));
    // A replaced big value's overflow rows go too.
    assert_eq!(c.cmd(&[b"SET", b"big2", &big]), Reply::Simple("OK".into()));
    assert_eq!(c.q("SET big2 small"), Reply::Simple("OK".into()));
    let until = Instant::now() + Duration::from_secs(20);
    while rows("string_values", false) > 0 {
        assert!(Instant::now() < until, "overflow rows of a replaced value were not removed");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn pipelines_and_many_connections() {
    let (_d, _n, addr) = start_node(128 << 20);
    let port = start_tern(&addr, opts());
    let mut c = Conn::open(port);
    let mut raw = Vec::new();
    for i in 0..1000 {
        raw.extend(format!("*3\r\n$3\r\nSET\r\n$2\r\np{}\r\n$1\r\n{}\r\n", i % 10, i % 10).bytes());
        raw.extend(format!("*2\r\n$3\r\nGET\r\n$2\r\np{}\r\n", i % 10).bytes());
        if i % 100 == 0 {
            raw.extend(b"*2\r\n$4\r\nINCR\r\n$3\r\ncnt\r\n");
        }
    }
    c.send_raw(&raw);
    let mut incrs = 0;
    for i in 0..1000 {
        assert_eq!(c.read(), Reply::Simple("OK".into()));
        assert_eq!(c.read(), Reply::bulk(&(i % 10).to_string()), "pipelined GET {i} sees the SET before it");
        if i % 100 == 0 {
            incrs += 1;
            assert_eq!(c.read(), Reply::Int(incrs));
        }
    }
    let threads: Vec<_> = (0..16)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = Conn::open(port);
                for i in 0..100 {
                    let k = format!("t{t}:{i}");
                    assert_eq!(c.q(&format!("SET {k} {i}")), Reply::Simple("OK".into()));
                    assert_eq!(c.q(&format!("GET {k}")), Reply::bulk(&i.to_string()));
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(c.q("DBSIZE"), Reply::Int(10 + 1 + 1600));
}

#[test]
fn limits_bad_input_and_sql_visibility() {
    let (_d, node, addr) = start_node(128 << 20);
    let port = start_tern(&addr, RedisOptions { max_pending: 1 << 20, databases: 2, ..opts() });
    let mut c = Conn::open(port);
    // Keys over 3000 bytes are refused; at the limit they work.
    let long = vec![b'k'; 3001];
    let Reply::Error(e) = c.cmd(&[b"SET", &long, b"v"]) else { panic!("long key accepted") };
    assert!(e.starts_with("ERR key is too long"), "{e}");
    let ok = vec![b'k'; 3000];
    assert_eq!(c.cmd(&[b"SET", &ok, b"v"]), Reply::Simple("OK".into()));
    assert_eq!(c.cmd(&[b"GET", &ok]), Reply::bulk("v"));
    assert_eq!(c.cmd(&[b"MGET", &long, &ok]), Reply::Array(Some(vec![Reply::Bulk(None), Reply::bulk("v")])));
    let Reply::Error(e) = c.cmd(&[b"HSET", b"h", b"f", &vec![b'v'; 70_000]]) else { panic!("big hash value") };
    assert!(e.contains("65535"), "{e}");
    // Databases: NumDatabases = 2.
    assert_eq!(c.q("SELECT 2"), Reply::Error("ERR DB index is out of range".into()));
    assert_eq!(c.q("SELECT 1"), Reply::Simple("OK".into()));
    assert_eq!(c.q("SET only1 x"), Reply::Simple("OK".into()));
    assert_eq!(c.q("SELECT 0"), Reply::Simple("OK".into()));
    assert_eq!(c.q("GET only1"), Reply::Bulk(None));
    // Rows are ordinary rows of redis_<n>, readable by any client.
    assert_eq!(c.q("SET sqlkey hello"), Reply::Simple("OK".into()));
    let client = Client::connect(&addr).unwrap();
    let t = client.table("redis_0", "string_keys").unwrap();
    let r = client.blocking().execute(vec![t.read(&[Value::Bytes(b"sqlkey".to_vec())]).unwrap()]).unwrap();
    let OpResult::Row(b) = &r[0] else { panic!("{r:?}") };
    assert_eq!(t.decode_row(b).unwrap()[5], Value::Bytes(b"hello".to_vec()));
    assert!(client.table("redis_1", "string_keys").is_ok());
    // More pending bytes than the limit: an error, the connection closes, the server stays up.
    let mut big = Conn::open(port);
    big.send_raw(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5000000\r\n");
    big.send_raw(&vec![b'x'; 2 << 20]);
    let Reply::Error(e) = big.read() else { panic!("no error") };
    assert!(e.contains("query buffer"), "{e}");
    assert!(big.closed());
    // Garbage, then a well-formed command on a new connection.
    let mut g = Conn::open(port);
    g.send_raw(b"*2\r\n$-7\r\n");
    assert!(matches!(g.read(), Reply::Error(_)));
    assert_eq!(Conn::open(port).q("PING"), Reply::Simple("PONG".into()));
    // The data node goes away: errors, and the server keeps answering.
    node.shutdown();
    let Reply::Error(e) = c.q("GET sqlkey") else { panic!("no error without a data node") };
    assert!(e.starts_with("ERR "), "{e}");
    assert_eq!(c.q("PING"), Reply::Simple("PONG".into()));
}

/// Hostile clients: random commands with random arguments (known names, wrong arities, huge
/// numbers, binary junk) and random bytes. Every connection gets replies or a clean close, and the
/// server keeps answering. Rerun a failure with `TERN_SEED=<n>`.
#[test]
fn random_commands_and_garbage_do_not_hurt_the_server() {
    use tern_types::rng::{Rng, test_seed};
    let seed = test_seed();
    println!("seed {seed} (rerun with TERN_SEED={seed})");
    let (_d, _n, addr) = start_node(256 << 20);
    let port = start_tern(&addr, opts());
    let mut rng = Rng::new(seed);
    let names = [
        "GET",
        "SET",
        "MGET",
        "MSET",
        "MSETNX",
        "SETNX",
        "SETEX",
        "PSETEX",
        "GETSET",
        "GETDEL",
        "INCR",
        "INCRBY",
        "DECR",
        "DECRBY",
        "STRLEN",
        "APPEND",
        "GETRANGE",
        "SETRANGE",
        "DEL",
        "UNLINK",
        "EXISTS",
        "TYPE",
        "EXPIRE",
        "PEXPIRE",
        "EXPIREAT",
        "PEXPIREAT",
        "TTL",
        "PTTL",
        "PERSIST",
        "SCAN",
        "KEYS",
        "HSET",
        "HGET",
        "HMGET",
        "HMSET",
        "HDEL",
        "HGETALL",
        "HLEN",
        "HEXISTS",
        "HINCRBY",
        "PING",
        "ECHO",
        "SELECT",
        "HELLO",
        "CLIENT",
        "CONFIG",
        "COMMAND",
        "INFO",
        "DBSIZE",
        "AUTH",
        "NOPE",
    ];
    let words = [
        "k1",
        "k2",
        "h",
        "0",
        "-1",
        "1",
        "9223372036854775807",
        "-9223372036854775808",
        "99999999999999999999",
        "NX",
        "XX",
        "GET",
        "EX",
        "PX",
        "EXAT",
        "KEEPTTL",
        "GT",
        "LT",
        "MATCH",
        "COUNT",
        "TYPE",
        "*",
        "[",
        "\\",
        "",
        " ",
    ];
    for round in 0..6 {
        let mut c = Conn::open(port);
        for _ in 0..150 {
            let name = *rng.pick(&names);
            let n = rng.below(6) as usize;
            let mut args: Vec<Vec<u8>> = vec![name.as_bytes().to_vec()];
            for _ in 0..n {
                args.push(if rng.chance(15) {
                    (0..rng.below(40)).map(|_| rng.below(256) as u8).collect()
                } else {
                    rng.pick(&words).as_bytes().to_vec()
                });
            }
            if name == "SELECT" {
                args.truncate(1);
                args.push(b"0".to_vec());
            }
            let refs: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
            c.send(&refs);
            let _ = c.read(); // any reply; a hang or a closed connection fails the test
        }
        // Raw garbage on a fresh connection: an error and a close, or nothing.
        let mut g = Conn::open(port);
        let junk: Vec<u8> = (0..rng.below(200) + 1).map(|_| rng.below(256) as u8).collect();
        g.send_raw(&junk);
        g.send_raw(b"\r\n");
        drop(g);
        assert_eq!(Conn::open(port).q("PING"), Reply::Simple("PONG".into()), "round {round}");
    }
}

/// Data memory runs out in the middle of a big value: the write fails with Redis's OOM error and
/// nothing of it lands (no half-written value, no partial MSET); the server keeps serving.
#[test]
fn full_memory_fails_whole_writes() {
    let (_d, _n, addr) = start_node(24 << 20);
    let port = start_tern(&addr, opts());
    let mut c = Conn::open(port);
    assert_eq!(c.q("SET k old"), Reply::Simple("OK".into()));
    let big = vec![b'x'; 40 << 20];
    let Reply::Error(e) = c.cmd(&[b"SET", b"k", &big]) else { panic!("a 40 MB value fit in 24 MB") };
    assert!(e.starts_with("OOM "), "{e}");
    assert_eq!(c.q("GET k"), Reply::bulk("old"));
    let Reply::Error(e) = c.cmd(&[b"MSET", b"a", b"1", b"b", &big]) else { panic!("MSET fit") };
    assert!(e.starts_with("OOM "), "{e}");
    assert_eq!(c.q("EXISTS a b"), Reply::Int(0));
    let Reply::Error(_) = c.cmd(&[b"APPEND", b"k", &big]) else { panic!("APPEND fit") };
    assert_eq!(c.q("GET k"), Reply::bulk("old"));
    assert_eq!(c.q("SET k new"), Reply::Simple("OK".into()));
    assert_eq!(c.q("GET k"), Reply::bulk("new"));
}
