//! Tern-specific behaviour of the Redis front end: atomic in-node increments under concurrency,
//! the data node's purge of expired keys with their overflow rows and hash fields, pipelining, many connections,
//! bounded per-connection memory, key limits, SQL visibility, databases, a data node that goes
//! away, `maxclients`, the idle `timeout`, hostile input up to 1 MB and long commands that must
//! not starve other connections.

mod common;

use common::{Conn, Reply, hosted, start_node, start_tern};
use std::time::{Duration, Instant};
use tern_client::{Client, OpResult, ScanSpec, Value};
use tern_redis::RedisOptions;

fn opts() -> RedisOptions {
    RedisOptions::default()
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

/// `[redis] durable_databases` / `CONFIG SET tern-durable-databases`: writes to those databases
/// are answered only once their epoch is on disk (a commit made after epoch E was current is in
/// an epoch >= E, so the durable epoch has reached E when the reply comes); the others are not
/// changed. Bad lists are refused with redis-server's CONFIG SET error; `CONFIG GET *` does not
/// list the Tern-only parameter.
#[test]
fn durable_databases_answer_writes_once_on_disk() {
    let (_d, _n, addr) = start_node(128 << 20);
    let port = start_tern(&addr, RedisOptions { durable_databases: vec![2], ..opts() });
    let client = Client::connect(&addr).unwrap();
    let mut c = Conn::open(port);
    let durable_after_write = |c: &mut Conn, cmd: &str| {
        let current = client.status().unwrap().current_epoch;
        assert_eq!(c.q(cmd), Reply::Simple("OK".into()));
        let durable = client.status().unwrap().durable_epoch;
        assert!(durable >= current, "{cmd}: durable epoch {durable} < {current} current before it");
    };
    assert_eq!(c.q("SELECT 2"), Reply::Simple("OK".into()));
    for i in 0..5 {
        durable_after_write(&mut c, &format!("SET k{i} v"));
    }
    // MULTI/EXEC writing database 2 too.
    assert_eq!(c.q("MULTI"), Reply::Simple("OK".into()));
    assert_eq!(c.q("SET m v"), Reply::Simple("QUEUED".into()));
    let current = client.status().unwrap().current_epoch;
    assert!(matches!(c.q("EXEC"), Reply::Array(Some(_))));
    assert!(client.status().unwrap().durable_epoch >= current);
    let get = |c: &mut Conn| c.q("CONFIG GET tern-durable-databases");
    assert_eq!(get(&mut c), Reply::Array(Some(vec![Reply::bulk("tern-durable-databases"), Reply::bulk("2")])));
    assert_eq!(c.q("CONFIG SET tern-durable-databases 0,3"), Reply::Simple("OK".into()));
    assert_eq!(get(&mut c), Reply::Array(Some(vec![Reply::bulk("tern-durable-databases"), Reply::bulk("0 3")])));
    assert_eq!(c.q("SELECT 3"), Reply::Simple("OK".into()));
    durable_after_write(&mut c, "SET k v");
    for bad in ["16", "x", "-1"] {
        let r = c.q(&format!("CONFIG SET tern-durable-databases {bad}"));
        assert!(
            matches!(&r, Reply::Error(e) if e.starts_with("ERR CONFIG SET failed (possibly related to argument 'tern-durable-databases')")),
            "{bad}: {r:?}"
        );
    }
    assert_eq!(get(&mut c), Reply::Array(Some(vec![Reply::bulk("tern-durable-databases"), Reply::bulk("0 3")])));
    let Reply::Array(Some(all)) = c.q("CONFIG GET *") else { panic!("CONFIG GET *") };
    assert!(!all.contains(&Reply::bulk("tern-durable-databases")));
    assert_eq!(c.cmd(&[b"CONFIG", b"SET", b"tern-durable-databases", b""]), Reply::Simple("OK".into()));
    assert_eq!(get(&mut c), Reply::Array(Some(vec![Reply::bulk("tern-durable-databases"), Reply::bulk("")])));
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
    for (add, key) in [("RPUSH l a b c", "l"), ("SADD s a b c", "s"), ("ZADD z 1 a 2 b 3 c", "z")] {
        assert_eq!(c.q(add), Reply::Int(3));
        assert_eq!(c.q(&format!("PEXPIRE {key} 1500")), Reply::Int(1));
    }
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
    for t in ["list_values", "set_members", "zset_members"] {
        assert_eq!(rows(t, false), 3, "{t}");
    }
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let left: usize = ["string_values", "hset_keys", "list_values", "set_members", "zset_members"]
            .iter()
            .map(|t| rows(t, false))
            .sum::<usize>()
            + rows("string_keys", true);
        if left == 0 {
            break;
        }
        assert!(Instant::now() < until, "{left} rows of expired keys were not purged");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(c.q("GET keep"), Reply::bulk("v"));
    assert_eq!(c.q("DBSIZE"), Reply::Int(1));
    // The data node's purge counted the two keys.
    let Reply::Bulk(Some(info)) = c.q("INFO stats") else { panic!("INFO") };
    assert!(String::from_utf8(info).unwrap().contains("expired_keys:5\r\n"));
    // CONFIG RESETSTAT starts the count again, as redis-server's does.
    assert_eq!(c.q("CONFIG RESETSTAT"), Reply::Simple("OK".into()));
    let Reply::Bulk(Some(info)) = c.q("INFO stats") else { panic!("INFO") };
    assert!(String::from_utf8(info).unwrap().contains("expired_keys:0\r\n"));
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
    // More commands in one write than one read parses at once (1,024): all are answered
    // without more input.
    c.send_raw(&b"PING\r\n".repeat(5000));
    for i in 0..5000 {
        assert_eq!(c.read(), Reply::Simple("PONG".into()), "PING {i} of one write");
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
    // The data node goes away: errors, and the server keeps answering. (Not when the front end
    // runs on the node's worker: it stops with the node.)
    if hosted() {
        return;
    }
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
    use tern_types::rng::Rng;
    let seed = tern_testkit::seed();
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
        "GETEX",
        "INCRBYFLOAT",
        "HINCRBYFLOAT",
        "HSETNX",
        "HSTRLEN",
        "HKEYS",
        "HVALS",
        "HRANDFIELD",
        "HSCAN",
        "RENAME",
        "RENAMENX",
        "COPY",
        "MOVE",
        "RANDOMKEY",
        "EXPIRETIME",
        "PEXPIRETIME",
        "TIME",
        "SETBIT",
        "GETBIT",
        "BITCOUNT",
        "LCS",
        "MEMORY",
        "MULTI",
        "EXEC",
        "DISCARD",
        "WATCH",
        "UNWATCH",
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
        "DB",
        "REPLACE",
        "BIT",
        "BYTE",
        "IDX",
        "LEN",
        "WITHVALUES",
        "USAGE",
        "1.5",
        "inf",
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
            if name == "SELECT" || name == "MOVE" {
                args.truncate(1 + (name == "MOVE") as usize);
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

/// `maxclients`: connections beyond the cap get redis-server's error and are closed (checked
/// against redis-server too); closing one makes room; CONFIG SET changes the cap at once.
#[test]
fn max_clients_refuses_beyond_the_cap() {
    let (_d, _n, addr) = start_node(64 << 20);
    let port = start_tern(&addr, RedisOptions { max_clients: 3, ..opts() });
    let mut conns: Vec<Conn> = (0..3).map(|_| Conn::open(port)).collect();
    for c in &mut conns {
        assert_eq!(c.q("PING"), Reply::Simple("PONG".into()));
    }
    let refused = |port: u16| {
        let mut c = Conn::open(port);
        let r = c.read();
        assert!(c.closed(), "a refused connection is closed");
        r
    };
    let want = Reply::Error("ERR max number of clients reached".into());
    assert_eq!(refused(port), want);
    let peer = common::start_peer();
    let mut p = Conn::open(peer.port);
    assert_eq!(p.q("CONFIG SET maxclients 1"), Reply::Simple("OK".into()));
    assert_eq!(refused(peer.port), want, "redis-server's text");
    drop(conns.pop());
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = Conn::open(port);
        c.send(&[b"PING"]);
        if c.read() == Reply::Simple("PONG".into()) {
            conns.push(c);
            break;
        }
        assert!(Instant::now() < until, "a closed connection's place was not given back");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        conns[0].q("CONFIG GET maxclients"),
        Reply::Array(Some(vec![Reply::bulk("maxclients"), Reply::bulk("3")]))
    );
    assert_eq!(conns[0].q("CONFIG SET maxclients 5"), Reply::Simple("OK".into()));
    let mut more: Vec<Conn> = (0..2).map(|_| Conn::open(port)).collect();
    for c in &mut more {
        assert_eq!(c.q("PING"), Reply::Simple("PONG".into()));
    }
    assert_eq!(refused(port), want);
    let Reply::Bulk(Some(info)) = conns[0].q("INFO clients") else { panic!("INFO") };
    let info = String::from_utf8(info).unwrap();
    assert!(info.contains("connected_clients:5\r\n") && info.contains("maxclients:5\r\n"), "{info}");
}

/// `timeout`: an idle connection is closed (without a reply), a busy one stays; CONFIG SET
/// reaches connections already waiting.
#[test]
fn idle_connections_are_closed_after_timeout() {
    let (_d, _n, addr) = start_node(64 << 20);
    let port = start_tern(&addr, RedisOptions { timeout: Duration::from_secs(1), ..opts() });
    let mut idle = Conn::open(port);
    assert_eq!(idle.q("PING"), Reply::Simple("PONG".into()));
    let mut busy = Conn::open(port);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(2500) {
        assert_eq!(busy.q("PING"), Reply::Simple("PONG".into()));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(idle.closed(), "an idle connection outlived the timeout");
    assert_eq!(busy.q("CONFIG GET timeout"), Reply::Array(Some(vec![Reply::bulk("timeout"), Reply::bulk("1")])));
    // Timeout 0 = never; a connection waiting under it is closed once the timeout is set again.
    assert_eq!(busy.q("CONFIG SET timeout 0"), Reply::Simple("OK".into()));
    let mut waiting = Conn::open(port);
    assert_eq!(waiting.q("PING"), Reply::Simple("PONG".into()));
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(waiting.q("PING"), Reply::Simple("PONG".into()), "timeout 0 closes nothing");
    assert_eq!(busy.q("CONFIG SET timeout 1"), Reply::Simple("OK".into()));
    assert!(waiting.closed(), "the new timeout reached a waiting connection");
    assert!(busy.closed());
}

/// A long KEYS (100,000 keys and a pattern that costs each key ~5,000 steps) does not starve
/// other connections: PINGs on a second connection are answered while it runs, and it finishes
/// with the right answer.
#[test]
fn a_long_keys_does_not_starve_other_connections() {
    let (_d, _n, addr) = start_node(256 << 20);
    let port = start_tern(&addr, opts());
    let mut c = Conn::open(port);
    let body = "a".repeat(100);
    for chunk in 0..100 {
        let mut args: Vec<Vec<u8>> = vec![b"MSET".to_vec()];
        for i in 0..1000 {
            args.push(format!("{body}{:06}", chunk * 1000 + i).into_bytes());
            args.push(b"v".to_vec());
        }
        let refs: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
        assert_eq!(c.cmd(&refs), Reply::Simple("OK".into()));
    }
    // Every key ends in digits: `*` then 100 `a` then `b` never matches, after ~100 x 100 / 2
    // steps per key (the most a star can cost: no backtracking beyond it).
    let pattern = format!("*{body}b");
    c.send(&[b"KEYS", pattern.as_bytes()]);
    let mut other = Conn::open(port);
    for _ in 0..20 {
        assert_eq!(other.q("PING"), Reply::Simple("PONG".into()));
    }
    assert!(!c.has_reply(), "KEYS finished before 20 PINGs: the test needs a longer KEYS");
    assert_eq!(c.read(), Reply::Array(Some(vec![])));
    assert_eq!(c.q("DBSIZE"), Reply::Int(100_000));
}

/// Hostile input of every shape at sizes up to 1 MB: each connection gets replies or a clean
/// close, and the server answers PING on another connection after each. Rerun a failure with
/// `TERN_SEED=<n>`.
#[test]
fn hostile_input_up_to_1_mb_does_not_take_the_server_down() {
    use tern_types::rng::Rng;
    let seed = tern_testkit::seed();
    println!("seed {seed} (rerun with TERN_SEED={seed})");
    let (_d, _n, addr) = start_node(512 << 20);
    let port = start_tern(&addr, opts());
    let mut rng = Rng::new(seed);
    let mut watcher = Conn::open(port);
    let started = Instant::now();
    for size in [1usize << 10, 64 << 10, 1 << 20] {
        for shape in 0..SHAPES {
            let bytes = hostile(shape, size, &mut rng);
            let mut c = Conn::open(port);
            c.send_raw(&bytes);
            c.shutdown_write();
            // Every reply is well-formed RESP (no half-written array), then the server closes.
            let t0 = Instant::now();
            let mut replies = Vec::new();
            while let Some(r) = c.read_or_closed() {
                replies.push(r);
            }
            let first = replies.first().map(|r| format!("{r:?}").chars().take(80).collect::<String>());
            println!("shape {shape} size {size}: {} replies, first {first:?}, in {:?}", replies.len(), t0.elapsed());
            assert_eq!(watcher.q("PING"), Reply::Simple("PONG".into()), "shape {shape} size {size}");
        }
    }
    assert_eq!(Conn::open(port).q("PING"), Reply::Simple("PONG".into()));
    assert!(started.elapsed() < Duration::from_secs(120), "hostile shapes took {:?}", started.elapsed());
}

const SHAPES: usize = 18;

fn multibulk(args: &[Vec<u8>]) -> Vec<u8> {
    let mut b = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        b.extend(format!("${}\r\n", a.len()).bytes());
        b.extend_from_slice(a);
        b.extend_from_slice(b"\r\n");
    }
    b
}

/// A command (its name and first arguments in `head`) with as many short random-ish arguments
/// as fit in `size` bytes, an even number of them.
fn many_args(head: &str, size: usize, rng: &mut tern_types::rng::Rng) -> Vec<u8> {
    let mut args: Vec<Vec<u8>> = head.split(' ').map(|w| w.as_bytes().to_vec()).collect();
    let mut total = 0;
    while total < size {
        let a = format!("k{}", rng.below(1000)).into_bytes();
        total += a.len() + 15;
        args.push(a);
        args.push(b"v".to_vec());
    }
    multibulk(&args)
}

/// Shape `shape` of hostile input, about `size` bytes.
fn hostile(shape: usize, size: usize, rng: &mut tern_types::rng::Rng) -> Vec<u8> {
    let filler = |n: usize| vec![b'x'; n];
    match shape {
        // A single inline line of `size` bytes.
        0 => [b"GET ".to_vec(), filler(size), b"\r\n".to_vec()].concat(),
        // Nested multibulk headers.
        1 => b"*1\r\n".repeat(size / 4),
        // Random bytes.
        2 => (0..size).map(|_| rng.below(256) as u8).collect(),
        // Many small arguments to multi-key commands (even counts for MSET/HSET shapes).
        3 => many_args("MGET", size, rng),
        4 => many_args("DEL", size, rng),
        5 => {
            let mut b = many_args("MSET", size, rng);
            b.extend(many_args("EXISTS", size, rng));
            b
        }
        6 => {
            let mut b = many_args("HSET hostile-hash", size, rng);
            b.extend(many_args("HMGET hostile-hash", size, rng));
            b.extend(many_args("HDEL hostile-hash", size, rng));
            b
        }
        7 => many_args("NOSUCHCOMMAND", size, rng),
        // A pipeline of inline PINGs (more commands than one read parses).
        8 => b"PING\r\n".repeat(size / 6),
        // A huge declared count, then a few arguments and the close.
        9 => [b"*2147483647\r\n".to_vec(), b"$1\r\na\r\n".repeat(size / 7)].concat(),
        // A declared bulk far bigger than what comes.
        10 => [b"*2\r\n$3\r\nSET\r\n$536870912\r\n".to_vec(), filler(size)].concat(),
        // Patterns of `size` bytes.
        11 => multibulk(&[b"KEYS".to_vec(), b"*a".repeat(size / 2)]),
        12 => multibulk(&[b"SCAN".to_vec(), b"0".to_vec(), b"MATCH".to_vec(), b"[^a-".repeat(size / 4)]),
        13 => multibulk(&[b"CONFIG".to_vec(), b"GET".to_vec(), b"*?".repeat(size / 2)]),
        // A key and a name of `size` bytes.
        14 => [
            multibulk(&[b"SET".to_vec(), filler(size), b"v".to_vec()]),
            multibulk(&[b"CLIENT".to_vec(), b"SETNAME".to_vec(), filler(size)]),
        ]
        .concat(),
        // A transaction of many queued commands, then one watching many keys.
        15 => {
            let mut b = b"MULTI\r\n".to_vec();
            // Each queued command is a data-node round trip inside EXEC: at most 5,000 of them.
            b.extend(b"INCR hostile-counter\r\n".repeat((size / 22).min(5000)));
            b.extend(b"EXEC\r\n");
            b
        }
        16 => [many_args("WATCH", size, rng), b"MULTI\r\nDEL k1 k2\r\nEXEC\r\n".to_vec()].concat(),
        // Empty commands and blank lines.
        _ => b"*0\r\n\r\n*-1\r\n".repeat(size / 11),
    }
}

/// MULTI/EXEC is one Tern transaction: concurrent transfers between four keys keep their total,
/// and every EXEC that reads all four (under the same locks) sees that total.
#[test]
fn concurrent_transfers_in_exec_keep_the_total() {
    let (_d, _n, addr) = start_node(128 << 20);
    let port = start_tern(&addr, opts());
    let mut c = Conn::open(port);
    assert_eq!(c.q("MSET k0 100 k1 100 k2 100 k3 100"), Reply::Simple("OK".into()));
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            std::thread::spawn(move || {
                let mut c = Conn::open(port);
                for i in 0..60u64 {
                    let (from, to) = ((w + i) % 4, (w + 2 * i + 1) % 4);
                    if from == to {
                        continue;
                    }
                    assert_eq!(c.q("MULTI"), Reply::Simple("OK".into()));
                    assert_eq!(c.q(&format!("DECRBY k{from} 3")), Reply::Simple("QUEUED".into()));
                    assert_eq!(c.q(&format!("INCRBY k{to} 3")), Reply::Simple("QUEUED".into()));
                    let Reply::Array(Some(r)) = c.q("EXEC") else { panic!("EXEC failed") };
                    assert!(matches!(r[..], [Reply::Int(_), Reply::Int(_)]), "{r:?}");
                }
            })
        })
        .collect();
    let reader = std::thread::spawn(move || {
        let mut c = Conn::open(port);
        for _ in 0..60 {
            c.q("MULTI");
            for k in 0..4 {
                c.q(&format!("GET k{k}"));
            }
            let Reply::Array(Some(vals)) = c.q("EXEC") else { panic!("EXEC failed") };
            let sum: i64 = vals
                .iter()
                .map(|v| match v {
                    Reply::Bulk(Some(b)) => String::from_utf8_lossy(b).parse::<i64>().unwrap(),
                    other => panic!("{other:?}"),
                })
                .sum();
            assert_eq!(sum, 400, "an EXEC saw a transfer half done: {vals:?}");
        }
    });
    writers.into_iter().for_each(|w| w.join().unwrap());
    reader.join().unwrap();
    let Reply::Array(Some(vals)) = c.q("MGET k0 k1 k2 k3") else { panic!("MGET") };
    let sum: i64 = vals
        .iter()
        .map(|v| if let Reply::Bulk(Some(b)) = v { String::from_utf8_lossy(b).parse::<i64>().unwrap() } else { 0 })
        .sum();
    assert_eq!(sum, 400);
}

/// WATCH-based optimistic increments from several connections: conflicts answer null, the
/// retries make every increment count exactly once.
#[test]
fn watch_conflicts_retry_to_an_exact_count() {
    let (_d, _n, addr) = start_node(128 << 20);
    let port = start_tern(&addr, opts());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Conn::open(port);
                let mut conflicts = 0;
                for _ in 0..40 {
                    for attempt in 0.. {
                        assert!(attempt < 1000, "no progress");
                        c.q("WATCH counter");
                        let n = match c.q("GET counter") {
                            Reply::Bulk(Some(b)) => String::from_utf8_lossy(&b).parse::<i64>().unwrap(),
                            _ => 0,
                        };
                        c.q("MULTI");
                        c.q(&format!("SET counter {}", n + 1));
                        match c.q("EXEC") {
                            Reply::Array(Some(_)) => break,
                            Reply::Array(None) => conflicts += 1,
                            other => panic!("EXEC answered {other:?}"),
                        }
                    }
                }
                conflicts
            })
        })
        .collect();
    let conflicts: i32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    println!("{conflicts} WATCH conflicts");
    assert_eq!(Conn::open(port).q("GET counter"), Reply::bulk("160"));
}

/// A transaction that fails in the data node (memory full in the middle) leaves nothing: the
/// writes queued before the failing one are not applied either.
#[test]
fn a_failed_exec_leaves_nothing() {
    let (_d, _n, addr) = start_node(24 << 20);
    let port = start_tern(&addr, opts());
    let mut c = Conn::open(port);
    assert_eq!(c.q("SET keep old"), Reply::Simple("OK".into()));
    let big = vec![b'x'; 40 << 20];
    c.q("MULTI");
    c.q("SET a 1");
    c.q("SET keep new");
    assert_eq!(c.cmd(&[b"SET", b"big", &big]), Reply::Simple("QUEUED".into()));
    c.q("INCR counter");
    let Reply::Error(e) = c.q("EXEC") else { panic!("a 40 MB value fit in 24 MB") };
    assert!(e.starts_with("EXECABORT Transaction discarded because of: OOM"), "{e}");
    assert_eq!(c.q("EXISTS a big counter"), Reply::Int(0));
    assert_eq!(c.q("GET keep"), Reply::bulk("old"));
    // The connection and the server go on.
    c.q("MULTI");
    c.q("SET a 1");
    assert_eq!(c.q("EXEC"), Reply::Array(Some(vec![Reply::Simple("OK".into())])));
}

/// WATCH sees changes made through another Tern API server and through the native client (it
/// compares the key row under lock at EXEC): a hash field changed elsewhere (its key row's
/// change counter moves), a string set to another value.
#[test]
fn watch_sees_writes_through_other_servers() {
    let (_d, _n, addr) = start_node(128 << 20);
    let (a, b) = (start_tern(&addr, opts()), start_tern(&addr, opts()));
    let (mut ca, mut cb) = (Conn::open(a), Conn::open(b));
    let exec_after = |ca: &mut Conn, cb: &mut Conn, key: &str, other: &str| {
        ca.q(&format!("WATCH {key}"));
        cb.q(other);
        ca.q("MULTI");
        ca.q("PING");
        ca.q("EXEC")
    };
    ca.q("HSET h f 1");
    assert_eq!(exec_after(&mut ca, &mut cb, "h", "HSET h f 2"), Reply::Array(None), "a field changed elsewhere");
    assert_eq!(exec_after(&mut ca, &mut cb, "h", "HGET h f"), Reply::Array(Some(vec![Reply::Simple("PONG".into())])));
    ca.q("SET s 1");
    assert_eq!(exec_after(&mut ca, &mut cb, "s", "SET s 2"), Reply::Array(None));
    assert_eq!(exec_after(&mut ca, &mut cb, "nokey", "SET nokey 1"), Reply::Array(None), "created elsewhere");
    // The native client writes the key row directly.
    let client = Client::connect(&addr).unwrap();
    let t = client.table("redis_0", "string_keys").unwrap();
    ca.q("WATCH s");
    let mut row = client.blocking().execute(vec![t.read(&[Value::Bytes(b"s".to_vec())]).unwrap()]).unwrap();
    let OpResult::Row(bytes) = row.remove(0) else { panic!("no row") };
    let mut values = t.decode_row(&bytes).unwrap();
    values[5] = Value::Bytes(b"3".to_vec());
    client.blocking().execute(vec![t.write(&values).unwrap()]).unwrap();
    ca.q("MULTI");
    ca.q("GET s");
    assert_eq!(ca.q("EXEC"), Reply::Array(None), "a native-client write");
}
