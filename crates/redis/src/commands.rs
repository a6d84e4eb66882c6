//! The command table (interfaces.md §2): every command's name, arity, key positions and kind,
//! the subcommands' arities, and the lookup that answers redis-server's unknown-command and
//! arity errors. Below `cmd` (which runs the commands) and `acl` (which checks them against a
//! user's rules), which both read it.

use crate::resp::parse_int;

/// An error reply (the text after '-').
#[derive(Debug, Clone, PartialEq)]
pub struct RErr(pub String);

pub type R<T = ()> = Result<T, RErr>;

fn err(s: impl Into<String>) -> RErr {
    RErr(s.into())
}

/// What kind of command: how it runs and whether MULTI queues it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Reads keys: runs in a transaction (its own, or EXEC's).
    Read,
    /// Changes keys: runs in a transaction.
    Write,
    /// Connection and server commands: no transaction.
    Server,
    /// MULTI, EXEC, DISCARD, WATCH, UNWATCH, RESET, QUIT: never queued.
    Control,
}

/// A command: lower-case name, arity (redis-server's convention: n = exactly n arguments
/// including the name, -n = at least n), the positions of its keys (first, last — negative
/// counts from the end — and step; 0 = none) and its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    pub name: &'static str,
    pub arity: i32,
    pub first: i32,
    pub last: i32,
    pub step: i32,
    pub kind: Kind,
}

const fn c(name: &'static str, arity: i32, first: i32, last: i32, step: i32, kind: Kind) -> Spec {
    Spec { name, arity, first, last, step, kind }
}

use Kind::{Control, Read, Server as Srv, Write};

/// A `static`, not a `const`: `index_of_spec` needs one address for the table (each use of a
/// `const` slice may be its own copy in an optimised build).
pub static COMMANDS: &[Spec] = &[
    // strings
    c("get", 2, 1, 1, 1, Read),
    c("set", -3, 1, 1, 1, Write),
    c("setnx", 3, 1, 1, 1, Write),
    c("setex", 4, 1, 1, 1, Write),
    c("psetex", 4, 1, 1, 1, Write),
    c("getset", 3, 1, 1, 1, Write),
    c("getdel", 2, 1, 1, 1, Write),
    c("getex", -2, 1, 1, 1, Write),
    c("mget", -2, 1, -1, 1, Read),
    c("mset", -3, 1, -1, 2, Write),
    c("msetnx", -3, 1, -1, 2, Write),
    c("incr", 2, 1, 1, 1, Write),
    c("incrby", 3, 1, 1, 1, Write),
    c("decr", 2, 1, 1, 1, Write),
    c("decrby", 3, 1, 1, 1, Write),
    c("incrbyfloat", 3, 1, 1, 1, Write),
    c("strlen", 2, 1, 1, 1, Read),
    c("append", 3, 1, 1, 1, Write),
    c("getrange", 4, 1, 1, 1, Read),
    c("setrange", 4, 1, 1, 1, Write),
    c("setbit", 4, 1, 1, 1, Write),
    c("getbit", 3, 1, 1, 1, Read),
    c("bitcount", -2, 1, 1, 1, Read),
    c("lcs", -3, 1, 2, 1, Read),
    // keys
    c("del", -2, 1, -1, 1, Write),
    c("unlink", -2, 1, -1, 1, Write),
    c("exists", -2, 1, -1, 1, Read),
    c("type", 2, 1, 1, 1, Read),
    c("expire", -3, 1, 1, 1, Write),
    c("pexpire", -3, 1, 1, 1, Write),
    c("expireat", -3, 1, 1, 1, Write),
    c("pexpireat", -3, 1, 1, 1, Write),
    c("ttl", 2, 1, 1, 1, Read),
    c("pttl", 2, 1, 1, 1, Read),
    c("expiretime", 2, 1, 1, 1, Read),
    c("pexpiretime", 2, 1, 1, 1, Read),
    c("persist", 2, 1, 1, 1, Write),
    c("keys", 2, 0, 0, 0, Read),
    c("scan", -2, 0, 0, 0, Read),
    c("randomkey", 1, 0, 0, 0, Read),
    c("rename", 3, 1, 2, 1, Write),
    c("renamenx", 3, 1, 2, 1, Write),
    c("copy", -3, 1, 2, 1, Write),
    c("move", 3, 1, 1, 1, Write),
    c("dbsize", 1, 0, 0, 0, Read),
    c("flushdb", -1, 0, 0, 0, Write),
    c("flushall", -1, 0, 0, 0, Write),
    // hashes
    c("hset", -4, 1, 1, 1, Write),
    c("hmset", -4, 1, 1, 1, Write),
    c("hsetnx", 4, 1, 1, 1, Write),
    c("hget", 3, 1, 1, 1, Read),
    c("hmget", -3, 1, 1, 1, Read),
    c("hexists", 3, 1, 1, 1, Read),
    c("hdel", -3, 1, 1, 1, Write),
    c("hlen", 2, 1, 1, 1, Read),
    c("hstrlen", 3, 1, 1, 1, Read),
    c("hgetall", 2, 1, 1, 1, Read),
    c("hkeys", 2, 1, 1, 1, Read),
    c("hvals", 2, 1, 1, 1, Read),
    c("hincrby", 4, 1, 1, 1, Write),
    c("hincrbyfloat", 4, 1, 1, 1, Write),
    c("hrandfield", -2, 1, 1, 1, Read),
    c("hscan", -3, 1, 1, 1, Read),
    // lists
    c("lpush", -3, 1, 1, 1, Write),
    c("rpush", -3, 1, 1, 1, Write),
    c("lpushx", -3, 1, 1, 1, Write),
    c("rpushx", -3, 1, 1, 1, Write),
    c("lpop", -2, 1, 1, 1, Write),
    c("rpop", -2, 1, 1, 1, Write),
    c("llen", 2, 1, 1, 1, Read),
    c("lrange", 4, 1, 1, 1, Read),
    c("lindex", 3, 1, 1, 1, Read),
    c("lset", 4, 1, 1, 1, Write),
    c("linsert", 5, 1, 1, 1, Write),
    c("lrem", 4, 1, 1, 1, Write),
    c("ltrim", 4, 1, 1, 1, Write),
    c("lpos", -3, 1, 1, 1, Read),
    c("lmove", 5, 1, 2, 1, Write),
    c("rpoplpush", 3, 1, 2, 1, Write),
    c("lmpop", -4, 0, 0, 0, Write),
    c("blpop", -3, 1, -2, 1, Write),
    c("brpop", -3, 1, -2, 1, Write),
    c("blmove", 6, 1, 2, 1, Write),
    c("brpoplpush", 4, 1, 2, 1, Write),
    c("blmpop", -5, 0, 0, 0, Write),
    // sets
    c("sadd", -3, 1, 1, 1, Write),
    c("srem", -3, 1, 1, 1, Write),
    c("smembers", 2, 1, 1, 1, Read),
    c("sismember", 3, 1, 1, 1, Read),
    c("smismember", -3, 1, 1, 1, Read),
    c("scard", 2, 1, 1, 1, Read),
    c("spop", -2, 1, 1, 1, Write),
    c("srandmember", -2, 1, 1, 1, Read),
    c("smove", 4, 1, 2, 1, Write),
    c("sinter", -2, 1, -1, 1, Read),
    c("sunion", -2, 1, -1, 1, Read),
    c("sdiff", -2, 1, -1, 1, Read),
    c("sinterstore", -3, 1, -1, 1, Write),
    c("sunionstore", -3, 1, -1, 1, Write),
    c("sdiffstore", -3, 1, -1, 1, Write),
    c("sintercard", -3, 0, 0, 0, Read),
    c("sscan", -3, 1, 1, 1, Read),
    // sorted sets
    c("zadd", -4, 1, 1, 1, Write),
    c("zrem", -3, 1, 1, 1, Write),
    c("zscore", 3, 1, 1, 1, Read),
    c("zmscore", -3, 1, 1, 1, Read),
    c("zincrby", 4, 1, 1, 1, Write),
    c("zcard", 2, 1, 1, 1, Read),
    c("zcount", 4, 1, 1, 1, Read),
    c("zlexcount", 4, 1, 1, 1, Read),
    c("zrange", -4, 1, 1, 1, Read),
    c("zrangestore", -5, 1, 2, 1, Write),
    c("zrangebyscore", -4, 1, 1, 1, Read),
    c("zrevrangebyscore", -4, 1, 1, 1, Read),
    c("zrangebylex", -4, 1, 1, 1, Read),
    c("zrevrangebylex", -4, 1, 1, 1, Read),
    c("zrevrange", -4, 1, 1, 1, Read),
    c("zrank", 3, 1, 1, 1, Read),
    c("zrevrank", 3, 1, 1, 1, Read),
    c("zremrangebyrank", 4, 1, 1, 1, Write),
    c("zremrangebyscore", 4, 1, 1, 1, Write),
    c("zremrangebylex", 4, 1, 1, 1, Write),
    c("zpopmin", -2, 1, 1, 1, Write),
    c("zpopmax", -2, 1, 1, 1, Write),
    c("bzpopmin", -3, 1, -2, 1, Write),
    c("bzpopmax", -3, 1, -2, 1, Write),
    c("zmpop", -4, 0, 0, 0, Write),
    c("bzmpop", -5, 0, 0, 0, Write),
    c("zunion", -3, 0, 0, 0, Read),
    c("zinter", -3, 0, 0, 0, Read),
    c("zdiff", -3, 0, 0, 0, Read),
    c("zunionstore", -4, 1, 1, 1, Write),
    c("zinterstore", -4, 1, 1, 1, Write),
    c("zdiffstore", -4, 1, 1, 1, Write),
    c("zintercard", -3, 0, 0, 0, Read),
    c("zrandmember", -2, 1, 1, 1, Read),
    c("zscan", -3, 1, 1, 1, Read),
    // serialized values
    c("dump", 2, 1, 1, 1, Read),
    c("restore", -4, 1, 1, 1, Write),
    // connection and server
    c("ping", -1, 0, 0, 0, Srv),
    c("echo", 2, 0, 0, 0, Srv),
    c("select", 2, 0, 0, 0, Srv),
    c("hello", -1, 0, 0, 0, Srv),
    c("auth", -2, 0, 0, 0, Srv),
    c("client", -2, 0, 0, 0, Srv),
    c("config", -2, 0, 0, 0, Srv),
    c("command", -1, 0, 0, 0, Srv),
    c("info", -1, 0, 0, 0, Srv),
    c("time", 1, 0, 0, 0, Srv),
    c("memory", -2, 0, 0, 0, Srv),
    c("object", -2, 0, 0, 0, Srv),
    c("save", 1, 0, 0, 0, Srv),
    c("bgsave", -1, 0, 0, 0, Srv),
    c("lastsave", 1, 0, 0, 0, Srv),
    c("shutdown", -1, 0, 0, 0, Srv),
    c("swapdb", 3, 0, 0, 0, Srv),
    c("monitor", 1, 0, 0, 0, Srv),
    c("acl", -2, 0, 0, 0, Srv),
    // pub/sub
    c("subscribe", -2, 0, 0, 0, Srv),
    c("psubscribe", -2, 0, 0, 0, Srv),
    c("unsubscribe", -1, 0, 0, 0, Srv),
    c("punsubscribe", -1, 0, 0, 0, Srv),
    c("publish", 3, 0, 0, 0, Write),
    c("pubsub", -2, 0, 0, 0, Srv),
    // transactions and the connection's state
    c("multi", 1, 0, 0, 0, Control),
    c("exec", 1, 0, 0, 0, Control),
    c("discard", 1, 0, 0, 0, Control),
    c("watch", -2, 1, -1, 1, Control),
    c("unwatch", 1, 0, 0, 0, Control),
    c("reset", 1, 0, 0, 0, Control),
    c("quit", -1, 0, 0, 0, Control),
];

/// Subcommands of container commands with their arities (redis-server 7 checks these before
/// running or queueing, like a command's own arity).
pub(crate) static SUBCOMMANDS: &[(&str, &str, i32)] = &[
    ("client", "id", 2),
    ("client", "info", 2),
    ("client", "list", -2),
    ("client", "kill", -3),
    ("client", "setname", 3),
    ("client", "getname", 2),
    ("client", "setinfo", 4),
    ("client", "no-evict", 3),
    ("client", "help", 2),
    ("client", "reply", 3),
    ("object", "encoding", 3),
    ("object", "freq", 3),
    ("object", "idletime", 3),
    ("object", "refcount", 3),
    ("object", "help", 2),
    ("config", "get", -3),
    ("config", "set", -4),
    ("config", "resetstat", 2),
    ("config", "rewrite", 2),
    ("config", "help", 2),
    ("command", "count", 2),
    ("command", "docs", -2),
    ("command", "info", -2),
    ("command", "list", -2),
    ("command", "help", 2),
    ("memory", "usage", -3),
    ("memory", "doctor", 2),
    ("memory", "stats", 2),
    ("memory", "malloc-stats", 2),
    ("memory", "purge", 2),
    ("memory", "help", 2),
    ("acl", "cat", -2),
    ("acl", "deluser", -3),
    ("acl", "getuser", 3),
    ("acl", "list", 2),
    ("acl", "setuser", -3),
    ("acl", "users", 2),
    ("acl", "whoami", 2),
    ("acl", "genpass", -2),
    ("acl", "save", 2),
    ("acl", "load", 2),
    ("acl", "help", 2),
    ("pubsub", "channels", -2),
    ("pubsub", "numsub", -2),
    ("pubsub", "numpat", 2),
    ("pubsub", "shardchannels", -2),
    ("pubsub", "shardnumsub", -2),
    ("pubsub", "help", 2),
];

pub fn command_count() -> usize {
    COMMANDS.len()
}

/// The index of a command in `COMMANDS`.
pub fn index_of(name: &str) -> Option<usize> {
    COMMANDS.iter().position(|s| s.name == name)
}

/// The indexes of GET and SET in `COMMANDS` (the pipeline's merged path), found once.
pub fn get_set() -> (usize, usize) {
    static GET_SET: std::sync::OnceLock<(usize, usize)> = std::sync::OnceLock::new();
    *GET_SET.get_or_init(|| (index_of("get").expect("GET is a command"), index_of("set").expect("SET is a command")))
}

/// The index in `COMMANDS` of one of its entries.
pub fn index_of_spec(spec: &Spec) -> usize {
    let i = (spec as *const Spec as usize).wrapping_sub(COMMANDS.as_ptr() as usize) / std::mem::size_of::<Spec>();
    assert!(i < COMMANDS.len() && std::ptr::eq(&COMMANDS[i], spec), "a spec outside COMMANDS");
    i
}

fn arity_ok(arity: i32, n: usize) -> bool {
    if arity >= 0 { n == arity as usize } else { n >= (-arity) as usize }
}

/// The command's spec, or the unknown-command / arity / unknown-subcommand error.
pub fn lookup(args: &[Vec<u8>]) -> R<&'static Spec> {
    let name = String::from_utf8_lossy(&args[0]).to_lowercase();
    let Some(spec) = COMMANDS.iter().find(|s| s.name == name) else {
        let mut rest = String::new();
        for a in &args[1..] {
            if rest.len() >= 128 {
                break;
            }
            let a = String::from_utf8_lossy(a);
            let room = 128 - rest.len();
            rest.push('\'');
            rest.extend(a.chars().take(room));
            rest.push_str("' ");
        }
        let cmd: String = String::from_utf8_lossy(&args[0]).chars().take(128).collect();
        return Err(err(format!("ERR unknown command '{cmd}', with args beginning with: {rest}")));
    };
    if !arity_ok(spec.arity, args.len()) {
        return Err(err(format!("ERR wrong number of arguments for '{}' command", spec.name)));
    }
    if args.len() > 1 && SUBCOMMANDS.iter().any(|s| s.0 == spec.name) {
        let sub = String::from_utf8_lossy(&args[1]).to_lowercase();
        match SUBCOMMANDS.iter().find(|s| s.0 == spec.name && s.1 == sub) {
            None => {
                return Err(err(format!(
                    "ERR unknown subcommand '{}'. Try {} HELP.",
                    String::from_utf8_lossy(&args[1]).chars().take(128).collect::<String>(),
                    spec.name.to_uppercase()
                )));
            }
            Some(s) if !arity_ok(s.2, args.len()) => {
                return Err(err(format!("ERR wrong number of arguments for '{}|{}' command", s.0, s.1)));
            }
            Some(_) => {}
        }
    }
    Ok(spec)
}

/// The keys of commands that count them (`numkeys`): where the count is, and whether a
/// destination key comes before it.
fn movable_keys<'a>(name: &str, args: &'a [Vec<u8>]) -> Option<Vec<&'a [u8]>> {
    if name == "object" {
        return Some(args.get(2).map(|k| vec![&k[..]]).unwrap_or_default());
    }
    let (at, dst) = match name {
        "lmpop" | "zmpop" | "sintercard" | "zintercard" | "zunion" | "zinter" | "zdiff" => (1, false),
        "blmpop" | "bzmpop" => (2, false),
        "zunionstore" | "zinterstore" | "zdiffstore" => (2, true),
        _ => return None,
    };
    let n = args.get(at).and_then(|a| parse_int(a)).filter(|n| *n > 0).unwrap_or(0) as usize;
    let mut keys: Vec<&[u8]> = if dst { vec![&args[1][..]] } else { Vec::new() };
    keys.extend(args.iter().skip(at + 1).take(n).map(|a| &a[..]));
    Some(keys)
}

/// The keys a command names, by its spec's positions.
pub fn keys_of<'a>(spec: &Spec, args: &'a [Vec<u8>]) -> Vec<&'a [u8]> {
    if let Some(k) = movable_keys(spec.name, args) {
        return k;
    }
    if spec.first <= 0 || args.len() <= spec.first as usize {
        return Vec::new();
    }
    let last = if spec.last < 0 { args.len() as i32 + spec.last } else { spec.last.min(args.len() as i32 - 1) };
    (spec.first..=last).step_by(spec.step.max(1) as usize).map(|i| &args[i as usize][..]).collect()
}
