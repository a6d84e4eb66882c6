//! Users and their permissions, as redis-server 7.0's ACL has them: `requirepass` (the default
//! user's password), `AUTH [user] password`, `HELLO … AUTH`, and `ACL SETUSER / GETUSER / LIST /
//! USERS / WHOAMI / DELUSER / CAT / GENPASS`. A user has an on/off flag, passwords (kept as
//! SHA-256 hex, as redis-server keeps them) or `nopass`, command rules (`+cmd`, `-cmd`,
//! `+cmd|sub`, `+@category`, `allcommands`, `nocommands`), key patterns (`~pattern`, `%R~`,
//! `%W~`, `allkeys`, `resetkeys`) and channel patterns (kept and shown; Tern has no pub/sub).
//!
//! The users live in the API server's memory, like redis-server's (which keeps them in its process
//! until `ACL SAVE`); every connection checks the current definition of its user at each command
//! (a generation counter tells it when to look again), and the connections of a deleted user are
//! closed, as redis-server closes them. Command categories and key access flags are redis-server
//! 7.0.15's (`COMMAND INFO`), so `+@read`, `%R~` and friends mean the same commands as there.
//!
//! How rules are described (`ACL LIST`, `ACL GETUSER`): the base (`+@all` or `-@all`) and then
//! the rules in the order given, where a new rule drops earlier rules it covers (the same
//! command, the subcommands of a command, the commands of a category) and is itself dropped when
//! it changes nothing. That is redis-server 7.0's text for the common cases (a base with
//! categories, or with commands, and their exceptions); for some mixes redis-server instead
//! describes a best fit of categories followed by single commands in its dictionary's order, so
//! the same permissions read differently there (the permissions themselves are the same).

use crate::commands::{COMMANDS, SUBCOMMANDS, Spec};
use crate::glob::Glob;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// redis-server 7.0's command categories, in `ACL CAT`'s order.
pub const CATEGORIES: &[&str] = &[
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// The categories of every command and subcommand Tern has (redis-server 7.0.15's `COMMAND
/// INFO`; `client|setinfo` is 7.2's).
const COMMAND_CATEGORIES: &[(&str, &str)] = &[
    ("get", "read string fast"),
    ("set", "write string slow"),
    ("setnx", "write string fast"),
    ("setex", "write string slow"),
    ("psetex", "write string slow"),
    ("getset", "write string fast"),
    ("getdel", "write string fast"),
    ("getex", "write string fast"),
    ("mget", "read string fast"),
    ("mset", "write string slow"),
    ("msetnx", "write string slow"),
    ("incr", "write string fast"),
    ("incrby", "write string fast"),
    ("decr", "write string fast"),
    ("decrby", "write string fast"),
    ("incrbyfloat", "write string fast"),
    ("strlen", "read string fast"),
    ("append", "write string fast"),
    ("getrange", "read string slow"),
    ("setrange", "write string slow"),
    ("setbit", "write bitmap slow"),
    ("getbit", "read bitmap fast"),
    ("bitcount", "read bitmap slow"),
    ("lcs", "read string slow"),
    ("del", "keyspace write slow"),
    ("unlink", "keyspace write fast"),
    ("exists", "keyspace read fast"),
    ("type", "keyspace read fast"),
    ("expire", "keyspace write fast"),
    ("pexpire", "keyspace write fast"),
    ("expireat", "keyspace write fast"),
    ("pexpireat", "keyspace write fast"),
    ("ttl", "keyspace read fast"),
    ("pttl", "keyspace read fast"),
    ("expiretime", "keyspace read fast"),
    ("pexpiretime", "keyspace read fast"),
    ("persist", "keyspace write fast"),
    ("keys", "keyspace read slow dangerous"),
    ("scan", "keyspace read slow"),
    ("randomkey", "keyspace read slow"),
    ("rename", "keyspace write slow"),
    ("renamenx", "keyspace write fast"),
    ("copy", "keyspace write slow"),
    ("move", "keyspace write fast"),
    ("dbsize", "keyspace read fast"),
    ("flushdb", "keyspace write slow dangerous"),
    ("flushall", "keyspace write slow dangerous"),
    ("hset", "write hash fast"),
    ("hmset", "write hash fast"),
    ("hsetnx", "write hash fast"),
    ("hget", "read hash fast"),
    ("hmget", "read hash fast"),
    ("hexists", "read hash fast"),
    ("hdel", "write hash fast"),
    ("hlen", "read hash fast"),
    ("hstrlen", "read hash fast"),
    ("hgetall", "read hash slow"),
    ("hkeys", "read hash slow"),
    ("hvals", "read hash slow"),
    ("hincrby", "write hash fast"),
    ("hincrbyfloat", "write hash fast"),
    ("hrandfield", "read hash slow"),
    ("hscan", "read hash slow"),
    ("lpush", "write list fast"),
    ("rpush", "write list fast"),
    ("lpushx", "write list fast"),
    ("rpushx", "write list fast"),
    ("lpop", "write list fast"),
    ("rpop", "write list fast"),
    ("llen", "read list fast"),
    ("lrange", "read list slow"),
    ("lindex", "read list slow"),
    ("lset", "write list slow"),
    ("linsert", "write list slow"),
    ("lrem", "write list slow"),
    ("ltrim", "write list slow"),
    ("lpos", "read list slow"),
    ("lmove", "write list slow"),
    ("rpoplpush", "write list slow"),
    ("lmpop", "write list slow"),
    ("blpop", "write list slow blocking"),
    ("brpop", "write list slow blocking"),
    ("blmove", "write list slow blocking"),
    ("brpoplpush", "write list slow blocking"),
    ("blmpop", "write list slow blocking"),
    ("sadd", "write set fast"),
    ("srem", "write set fast"),
    ("smembers", "read set slow"),
    ("sismember", "read set fast"),
    ("smismember", "read set fast"),
    ("scard", "read set fast"),
    ("spop", "write set fast"),
    ("srandmember", "read set slow"),
    ("smove", "write set fast"),
    ("sinter", "read set slow"),
    ("sunion", "read set slow"),
    ("sdiff", "read set slow"),
    ("sinterstore", "write set slow"),
    ("sunionstore", "write set slow"),
    ("sdiffstore", "write set slow"),
    ("sintercard", "read set slow"),
    ("sscan", "read set slow"),
    ("zadd", "write sortedset fast"),
    ("zrem", "write sortedset fast"),
    ("zscore", "read sortedset fast"),
    ("zmscore", "read sortedset fast"),
    ("zincrby", "write sortedset fast"),
    ("zcard", "read sortedset fast"),
    ("zcount", "read sortedset fast"),
    ("zlexcount", "read sortedset fast"),
    ("zrange", "read sortedset slow"),
    ("zrangestore", "write sortedset slow"),
    ("zrangebyscore", "read sortedset slow"),
    ("zrevrangebyscore", "read sortedset slow"),
    ("zrangebylex", "read sortedset slow"),
    ("zrevrangebylex", "read sortedset slow"),
    ("zrevrange", "read sortedset slow"),
    ("zrank", "read sortedset fast"),
    ("zrevrank", "read sortedset fast"),
    ("zremrangebyrank", "write sortedset slow"),
    ("zremrangebyscore", "write sortedset slow"),
    ("zremrangebylex", "write sortedset slow"),
    ("zpopmin", "write sortedset fast"),
    ("zpopmax", "write sortedset fast"),
    ("bzpopmin", "write sortedset fast blocking"),
    ("bzpopmax", "write sortedset fast blocking"),
    ("zmpop", "write sortedset slow"),
    ("bzmpop", "write sortedset slow blocking"),
    ("zunion", "read sortedset slow"),
    ("zinter", "read sortedset slow"),
    ("zdiff", "read sortedset slow"),
    ("zunionstore", "write sortedset slow"),
    ("zinterstore", "write sortedset slow"),
    ("zdiffstore", "write sortedset slow"),
    ("zintercard", "read sortedset slow"),
    ("zrandmember", "read sortedset slow"),
    ("zscan", "read sortedset slow"),
    ("ping", "fast connection"),
    ("echo", "fast connection"),
    ("select", "fast connection"),
    ("hello", "fast connection"),
    ("auth", "fast connection"),
    ("client", "slow"),
    ("config", "slow"),
    ("command", "slow connection"),
    ("info", "slow dangerous"),
    ("time", "fast"),
    ("memory", "slow"),
    ("acl", "slow"),
    ("multi", "fast transaction"),
    ("exec", "slow transaction"),
    ("discard", "fast transaction"),
    ("watch", "fast transaction"),
    ("unwatch", "fast transaction"),
    ("reset", "fast connection"),
    ("quit", "fast connection"),
    ("client|id", "slow connection"),
    ("client|info", "slow connection"),
    ("client|list", "admin slow dangerous connection"),
    ("client|kill", "admin slow dangerous connection"),
    ("client|setname", "slow connection"),
    ("client|getname", "slow connection"),
    ("client|setinfo", "slow connection"),
    ("client|no-evict", "admin slow dangerous connection"),
    ("client|help", "slow connection"),
    ("config|get", "admin slow dangerous"),
    ("config|set", "admin slow dangerous"),
    ("config|resetstat", "admin slow dangerous"),
    ("config|rewrite", "admin slow dangerous"),
    ("config|help", "slow"),
    ("command|count", "slow connection"),
    ("command|docs", "slow connection"),
    ("command|info", "slow connection"),
    ("command|list", "slow connection"),
    ("command|help", "slow connection"),
    ("memory|usage", "read slow"),
    ("object", "slow"),
    ("object|encoding", "keyspace read slow"),
    ("object|freq", "keyspace read slow"),
    ("object|idletime", "keyspace read slow"),
    ("object|refcount", "keyspace read slow"),
    ("object|help", "keyspace slow"),
    ("save", "admin slow dangerous"),
    ("bgsave", "admin slow dangerous"),
    ("lastsave", "admin fast dangerous"),
    ("shutdown", "admin slow dangerous"),
    ("swapdb", "keyspace write fast dangerous"),
    ("monitor", "admin slow dangerous"),
    ("dump", "keyspace read slow"),
    ("restore", "keyspace write slow dangerous"),
    ("client|reply", "slow connection"),
    ("memory|doctor", "slow"),
    ("memory|stats", "slow"),
    ("memory|malloc-stats", "slow"),
    ("memory|purge", "slow"),
    ("memory|help", "slow"),
    ("acl|cat", "slow"),
    ("acl|deluser", "admin slow dangerous"),
    ("acl|getuser", "admin slow dangerous"),
    ("acl|list", "admin slow dangerous"),
    ("acl|setuser", "admin slow dangerous"),
    ("acl|users", "admin slow dangerous"),
    ("acl|whoami", "slow"),
    ("acl|genpass", "slow"),
    ("acl|save", "admin slow dangerous"),
    ("acl|load", "admin slow dangerous"),
    ("acl|help", "slow"),
    ("subscribe", "pubsub slow"),
    ("psubscribe", "pubsub slow"),
    ("unsubscribe", "pubsub slow"),
    ("punsubscribe", "pubsub slow"),
    ("publish", "pubsub fast"),
    ("pubsub", "slow"),
    ("pubsub|channels", "pubsub slow"),
    ("pubsub|numsub", "pubsub slow"),
    ("pubsub|numpat", "pubsub slow"),
    ("pubsub|shardchannels", "pubsub slow"),
    ("pubsub|shardnumsub", "pubsub slow"),
    ("pubsub|help", "slow"),
];

/// Commands that run before AUTH and whatever the user's command rules (redis-server's
/// `no-auth` flag).
pub fn no_auth(name: &str) -> bool {
    matches!(name, "auth" | "hello" | "reset" | "quit")
}

/// Read and write permission bits of a key pattern or a key access.
const PERM_R: u8 = 1;
const PERM_W: u8 = 2;

/// What a command does to its keys (redis-server 7.0's key-spec flags: `access` needs read,
/// `insert`/`update`/`delete` need write); commands with two key specs have one entry per spec
/// (the first key, then the others). Commands not listed need neither (any pattern matching the
/// key will do).
fn key_access(spec: &Spec, args: &[Vec<u8>], index: usize) -> u8 {
    let rw = PERM_R | PERM_W;
    match spec.name {
        "get" | "mget" | "getrange" | "getbit" | "bitcount" | "lcs" | "ttl" | "pttl" | "expiretime" | "pexpiretime"
        | "hget" | "hmget" | "hgetall" | "hkeys" | "hvals" | "hrandfield" | "hscan" => PERM_R,
        "set" if args.iter().skip(3).any(|a| a.eq_ignore_ascii_case(b"get")) => rw,
        "set" | "setnx" | "setex" | "psetex" | "mset" | "msetnx" | "append" | "setrange" | "del" | "unlink"
        | "expire" | "pexpire" | "expireat" | "pexpireat" | "persist" | "hset" | "hmset" | "hsetnx" | "hdel" => PERM_W,
        "getset" | "getdel" | "getex" | "incr" | "incrby" | "decr" | "decrby" | "incrbyfloat" | "setbit" | "move"
        | "hincrby" | "hincrbyfloat" => rw,
        "rename" | "renamenx" => {
            if index == 0 {
                rw
            } else {
                PERM_W
            }
        }
        "copy" => {
            if index == 0 {
                PERM_R
            } else {
                PERM_W
            }
        }
        _ => 0,
    }
}

/// Command ids: `COMMANDS` indices, then `SUBCOMMANDS` indices after them.
fn id_count() -> usize {
    COMMANDS.len() + SUBCOMMANDS.len()
}

fn sub_ids(cmd: usize) -> impl Iterator<Item = usize> {
    let name = COMMANDS[cmd].name;
    SUBCOMMANDS.iter().enumerate().filter(move |(_, s)| s.0 == name).map(|(j, _)| COMMANDS.len() + j)
}

fn has_subs(cmd: usize) -> bool {
    sub_ids(cmd).next().is_some()
}

/// The `name` or `container|sub` of a command id.
fn id_name(id: usize) -> String {
    if id < COMMANDS.len() {
        COMMANDS[id].name.to_string()
    } else {
        let s = SUBCOMMANDS[id - COMMANDS.len()];
        format!("{}|{}", s.0, s.1)
    }
}

fn categories_of(id: usize) -> &'static str {
    let name = id_name(id);
    COMMAND_CATEGORIES.iter().find(|c| c.0 == name).map(|c| c.1).unwrap_or("")
}

fn in_category(id: usize, cat: &str) -> bool {
    categories_of(id).split(' ').any(|c| c == cat)
}

/// What a command rule names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// A command id (a command without subcommands, a command with all its subcommands, or one
    /// subcommand).
    Command(usize),
    Category(usize),
}

impl Target {
    fn ids(self) -> Vec<usize> {
        match self {
            Target::Command(id) if id < COMMANDS.len() => std::iter::once(id).chain(sub_ids(id)).collect(),
            Target::Command(id) => vec![id],
            Target::Category(c) => (0..id_count()).filter(|&id| in_category(id, CATEGORIES[c])).collect(),
        }
    }

    fn text(self) -> String {
        match self {
            Target::Command(id) => id_name(id),
            Target::Category(c) => format!("@{}", CATEGORIES[c]),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rule {
    allow: bool,
    target: Target,
}

/// One ACL user.
#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    pub enabled: bool,
    pub nopass: bool,
    /// SHA-256 hex of each password, in the order added.
    pub passwords: Vec<String>,
    skip_sanitize: Option<bool>,
    /// `+@all` (true) or `-@all` (false): where the rules start.
    base_all: bool,
    rules: Vec<Rule>,
    /// Per command id: may run.
    allowed: Vec<bool>,
    /// Every entry of `allowed` is true.
    all_commands: bool,
    allkeys: bool,
    /// Key patterns with their permissions, compiled once (checked at every command).
    keys: Vec<(u8, Vec<u8>, Glob)>,
    allchannels: bool,
    channels: Vec<Vec<u8>>,
}

fn sha256_hex(p: &[u8]) -> String {
    tern_types::digest::sha256_hex(p)
}

fn is_hash(h: &str) -> bool {
    h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl User {
    /// A new user as `ACL SETUSER` creates it: off, no passwords, no commands, no keys, no
    /// channels (`acl-pubsub-default resetchannels`).
    pub fn new(name: &str) -> User {
        User {
            name: name.to_string(),
            enabled: false,
            nopass: false,
            passwords: Vec::new(),
            skip_sanitize: None,
            base_all: false,
            rules: Vec::new(),
            allowed: vec![false; id_count()],
            all_commands: false,
            allkeys: false,
            keys: Vec::new(),
            allchannels: false,
            channels: Vec::new(),
        }
    }

    /// The default user of a fresh server: on, nopass, every key, channel and command.
    pub fn default_user() -> User {
        let mut u = User::new("default");
        for op in ["on", "nopass", "~*", "&*", "+@all"] {
            u.apply(op.as_bytes()).expect("default rules");
        }
        u
    }

    /// Whether this user may publish to or subscribe to `name` (`&pattern` rules). A pattern
    /// subscription (PSUBSCRIBE) needs a rule that is the same pattern, as redis-server.
    pub fn channel_allowed(&self, name: &[u8], pattern: bool) -> bool {
        self.allchannels || self.channels.iter().any(|c| if pattern { c == name } else { crate::glob::glob(c, name) })
    }

    /// Every command and every key: the pipeline's fast path may skip the checks.
    pub fn unrestricted(&self) -> bool {
        self.allkeys && self.all_commands
    }

    fn recompute(&mut self) {
        let mut bits = vec![self.base_all; id_count()];
        for r in &self.rules {
            for id in r.target.ids() {
                bits[id] = r.allow;
            }
        }
        self.all_commands = bits.iter().all(|&a| a);
        self.allowed = bits;
    }

    fn set_rule(&mut self, allow: bool, target: Target) {
        let ids = target.ids();
        self.rules.retain(|r| !r.target.ids().iter().all(|id| ids.contains(id)));
        self.recompute();
        if ids.iter().any(|&id| self.allowed[id] != allow) {
            self.rules.push(Rule { allow, target });
            self.recompute();
        }
    }

    /// Applies one `ACL SETUSER` modifier; Err is the reason redis-server gives.
    pub fn apply(&mut self, op: &[u8]) -> Result<(), String> {
        let text = String::from_utf8_lossy(op);
        let lower = text.to_lowercase();
        match lower.as_str() {
            "on" => self.enabled = true,
            "off" => self.enabled = false,
            "skip-sanitize-payload" => self.skip_sanitize = Some(true),
            "sanitize-payload" => self.skip_sanitize = Some(false),
            "nopass" => {
                self.nopass = true;
                self.passwords.clear();
            }
            "resetpass" => {
                self.nopass = false;
                self.passwords.clear();
            }
            "allkeys" => {
                self.allkeys = true;
                self.keys = vec![(PERM_R | PERM_W, b"*".to_vec(), Glob::new(b"*", false))];
            }
            "resetkeys" => {
                self.allkeys = false;
                self.keys.clear();
            }
            "allchannels" => {
                self.allchannels = true;
                self.channels = vec![b"*".to_vec()];
            }
            "resetchannels" => {
                self.allchannels = false;
                self.channels.clear();
            }
            "allcommands" | "+@all" => {
                self.base_all = true;
                self.rules.clear();
                self.recompute();
            }
            "nocommands" | "-@all" => {
                self.base_all = false;
                self.rules.clear();
                self.recompute();
            }
            "reset" => {
                for o in ["resetpass", "resetkeys", "resetchannels", "off", "-@all"] {
                    self.apply(o.as_bytes())?;
                }
                self.skip_sanitize = Some(false);
            }
            _ => return self.apply_other(op),
        }
        Ok(())
    }

    fn apply_other(&mut self, op: &[u8]) -> Result<(), String> {
        const BAD_HASH: &str =
            "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters";
        const NO_PASSWORD: &str = "The password you are trying to remove from the user does not exist";
        let Some((&first, rest)) = op.split_first() else {
            return Err("Syntax error".into());
        };
        match first {
            b'>' => {
                let h = sha256_hex(rest);
                if !self.passwords.contains(&h) {
                    self.passwords.push(h);
                }
                self.nopass = false;
            }
            b'#' => {
                let h = String::from_utf8_lossy(rest).into_owned();
                if !is_hash(&h) {
                    return Err(BAD_HASH.into());
                }
                if !self.passwords.contains(&h) {
                    self.passwords.push(h);
                }
                self.nopass = false;
            }
            b'<' | b'!' => {
                let h = if first == b'<' { sha256_hex(rest) } else { String::from_utf8_lossy(rest).into_owned() };
                if first == b'!' && !is_hash(&h) {
                    return Err(BAD_HASH.into());
                }
                let before = self.passwords.len();
                self.passwords.retain(|p| *p != h);
                if self.passwords.len() == before {
                    return Err(NO_PASSWORD.into());
                }
            }
            b'~' | b'%' => {
                let (perm, pattern) = if first == b'~' {
                    (PERM_R | PERM_W, rest)
                } else {
                    let tilde = rest.iter().position(|&b| b == b'~').ok_or("Syntax error")?;
                    let mut perm = 0;
                    for &b in &rest[..tilde] {
                        perm |= match b.to_ascii_uppercase() {
                            b'R' => PERM_R,
                            b'W' => PERM_W,
                            _ => return Err("Syntax error".into()),
                        };
                    }
                    if perm == 0 {
                        return Err("Syntax error".into());
                    }
                    (perm, &rest[tilde + 1..])
                };
                if self.allkeys {
                    return Err("Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns".into());
                }
                if perm == PERM_R | PERM_W && pattern == b"*" {
                    return self.apply(b"allkeys");
                }
                if !self.keys.iter().any(|(p, k, _)| *p == perm && k == pattern) {
                    self.keys.push((perm, pattern.to_vec(), Glob::new(pattern, false)));
                }
            }
            b'&' => {
                if self.allchannels {
                    return Err("Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels".into());
                }
                if rest == b"*" {
                    return self.apply(b"allchannels");
                }
                if !self.channels.iter().any(|c| c == rest) {
                    self.channels.push(rest.to_vec());
                }
            }
            b'+' | b'-' => {
                let allow = first == b'+';
                let name = String::from_utf8_lossy(rest).to_lowercase();
                let unknown = || "Unknown command or category name in ACL".to_string();
                let target = if let Some(cat) = name.strip_prefix('@') {
                    Target::Category(CATEGORIES.iter().position(|c| *c == cat).ok_or_else(unknown)?)
                } else if let Some((cmd, sub)) = name.split_once('|') {
                    let j = SUBCOMMANDS.iter().position(|s| s.0 == cmd && s.1 == sub).ok_or_else(unknown)?;
                    Target::Command(COMMANDS.len() + j)
                } else {
                    Target::Command(COMMANDS.iter().position(|s| s.name == name).ok_or_else(unknown)?)
                };
                self.set_rule(allow, target);
            }
            b'(' => return Err("Selectors are not supported by Tern".into()),
            _ => return Err("Syntax error".into()),
        }
        Ok(())
    }

    /// May this user run `spec` with `args` (its subcommand, its keys)? Err is the NOPERM reply.
    pub fn check(&self, spec: &Spec, args: &[Vec<u8>]) -> Result<(), String> {
        if self.unrestricted() || no_auth(spec.name) {
            return Ok(());
        }
        let cmd = crate::commands::index_of_spec(spec);
        let mut id = cmd;
        if has_subs(cmd) && args.len() > 1 {
            let sub = String::from_utf8_lossy(&args[1]).to_lowercase();
            if let Some(j) = SUBCOMMANDS.iter().position(|s| s.0 == spec.name && s.1 == sub) {
                id = COMMANDS.len() + j;
            }
        }
        if !self.allowed[id] {
            return Err(format!("NOPERM this user has no permissions to run the '{}' command", id_name(id)));
        }
        if self.allkeys {
            return Ok(());
        }
        for (i, key) in crate::commands::keys_of(spec, args).into_iter().enumerate() {
            if !self.key_allowed(key, key_access(spec, args, i)) {
                return Err("NOPERM this user has no permissions to access one of the keys used as arguments".into());
            }
        }
        Ok(())
    }

    fn key_allowed(&self, key: &[u8], need: u8) -> bool {
        self.keys.iter().any(|(perm, _, glob)| perm & need == need && glob.matches(key))
    }

    /// Does `password` sign this user in?
    pub fn accepts(&self, password: &[u8]) -> bool {
        self.enabled && (self.nopass || self.passwords.contains(&sha256_hex(password)))
    }

    fn describe_keys(&self) -> String {
        if self.allkeys {
            return "~*".into();
        }
        let parts: Vec<String> = self
            .keys
            .iter()
            .map(|(perm, k, _)| {
                let k = String::from_utf8_lossy(k);
                match *perm {
                    PERM_R => format!("%R~{k}"),
                    PERM_W => format!("%W~{k}"),
                    _ => format!("~{k}"),
                }
            })
            .collect();
        parts.join(" ")
    }

    fn describe_channels(&self) -> String {
        let parts: Vec<String> = self.channels.iter().map(|c| format!("&{}", String::from_utf8_lossy(c))).collect();
        parts.join(" ")
    }

    /// The command rules as `ACL GETUSER` shows them.
    pub fn describe_commands(&self) -> String {
        let mut s = String::from(if self.base_all { "+@all" } else { "-@all" });
        for r in &self.rules {
            s.push(' ');
            s.push(if r.allow { '+' } else { '-' });
            s.push_str(&r.target.text());
        }
        s
    }

    /// The user's line in `ACL LIST` (without the leading "user ").
    pub fn describe(&self) -> String {
        let mut parts = vec![self.name.clone(), if self.enabled { "on" } else { "off" }.to_string()];
        match self.skip_sanitize {
            Some(true) => parts.push("skip-sanitize-payload".into()),
            Some(false) => parts.push("sanitize-payload".into()),
            None => {}
        }
        if self.nopass {
            parts.push("nopass".into());
        }
        parts.extend(self.passwords.iter().map(|p| format!("#{p}")));
        let keys = self.describe_keys();
        if !keys.is_empty() {
            parts.push(keys);
        }
        if self.allchannels {
            parts.push("&*".into());
        } else {
            parts.push("resetchannels".into());
            let ch = self.describe_channels();
            if !ch.is_empty() {
                parts.push(ch);
            }
        }
        parts.push(self.describe_commands());
        parts.join(" ")
    }

    /// `ACL GETUSER`'s fields, in its order: (flags, passwords, commands, keys, channels).
    pub fn fields(&self) -> (Vec<&'static str>, Vec<String>, String, String, String) {
        let mut flags = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            flags.push("nopass");
        }
        match self.skip_sanitize {
            Some(true) => flags.push("skip-sanitize-payload"),
            Some(false) => flags.push("sanitize-payload"),
            None => {}
        }
        let channels = if self.allchannels { "&*".to_string() } else { self.describe_channels() };
        (flags, self.passwords.clone(), self.describe_commands(), self.describe_keys(), channels)
    }
}

/// Every user of one API server's Redis front end.
pub struct Acl {
    users: RwLock<BTreeMap<String, Arc<User>>>,
    /// Bumped by every change: connections look their user up again when it moved.
    generation: AtomicU64,
    /// `requirepass` as last set (CONFIG GET shows it).
    requirepass: RwLock<String>,
}

impl Acl {
    /// The default user, with `requirepass` when given.
    pub fn new(requirepass: Option<&str>) -> Acl {
        let acl = Acl {
            users: RwLock::new(BTreeMap::from([("default".to_string(), Arc::new(User::default_user()))])),
            generation: AtomicU64::new(1),
            requirepass: RwLock::new(String::new()),
        };
        if let Some(p) = requirepass {
            acl.set_requirepass(p);
        }
        acl
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn user(&self, name: &str) -> Option<Arc<User>> {
        self.users.read().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
    }

    /// Do new connections have to AUTH (the default user has a password or is off)?
    pub fn auth_required(&self) -> bool {
        self.user("default").is_none_or(|u| !(u.enabled && u.nopass))
    }

    /// `requirepass`: the default user's only password (empty: `nopass`).
    pub fn set_requirepass(&self, p: &str) {
        let mut users = self.users.write().unwrap_or_else(|e| e.into_inner());
        let mut d = users.get("default").map(|u| (**u).clone()).unwrap_or_else(User::default_user);
        if p.is_empty() {
            let _ = d.apply(b"nopass");
        } else {
            let _ = d.apply(b"resetpass");
            let _ = d.apply(format!(">{p}").as_bytes());
        }
        users.insert("default".into(), Arc::new(d));
        *self.requirepass.write().unwrap_or_else(|e| e.into_inner()) = p.to_string();
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    pub fn requirepass(&self) -> String {
        self.requirepass.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `ACL SETUSER name op...`: every modifier applies or none does.
    pub fn set_user(&self, name: &[u8], ops: &[Vec<u8>]) -> Result<(), String> {
        if name.iter().any(|&b| b == b' ' || b == 0) {
            return Err("ERR Usernames can't contain spaces or null characters".into());
        }
        let name = String::from_utf8_lossy(name).into_owned();
        let mut users = self.users.write().unwrap_or_else(|e| e.into_inner());
        let mut u = users.get(&name).map(|u| (**u).clone()).unwrap_or_else(|| User::new(&name));
        for op in ops {
            u.apply(op)
                .map_err(|why| format!("ERR Error in ACL SETUSER modifier '{}': {why}", String::from_utf8_lossy(op)))?;
        }
        users.insert(name, Arc::new(u));
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// `ACL DELUSER`: how many of `names` existed.
    pub fn del_users(&self, names: &[Vec<u8>]) -> Result<usize, String> {
        if names.iter().any(|n| n == b"default") {
            return Err("ERR The 'default' user cannot be removed".into());
        }
        let mut users = self.users.write().unwrap_or_else(|e| e.into_inner());
        let n = names.iter().filter(|n| users.remove(&*String::from_utf8_lossy(n)).is_some()).count();
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(n)
    }

    pub fn users(&self) -> Vec<Arc<User>> {
        self.users.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }
}

/// The commands of a category, for `ACL CAT category`.
pub fn category_commands(cat: &str) -> Option<Vec<String>> {
    CATEGORIES.iter().position(|c| *c == cat)?;
    Some((0..id_count()).filter(|&id| in_category(id, cat)).map(id_name).collect())
}

/// `ACL GENPASS [bits]`: random bits from the OS as hex (256 bits by default).
pub fn genpass(bits: usize) -> String {
    let chars = bits.div_ceil(4);
    let mut bytes = vec![0u8; chars.div_ceil(2)];
    tern_client::os_random(&mut bytes);
    let mut s: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    s.truncate(chars);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(ops: &str) -> User {
        let mut u = User::new("t");
        for op in ops.split_whitespace() {
            u.apply(op.as_bytes()).unwrap();
        }
        u
    }

    fn args(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    fn spec(name: &str) -> &'static Spec {
        &COMMANDS[crate::commands::index_of(name).unwrap()]
    }

    #[test]
    fn every_command_and_subcommand_has_categories() {
        for id in 0..id_count() {
            assert!(!categories_of(id).is_empty(), "{} has no categories", id_name(id));
            for c in categories_of(id).split(' ') {
                assert!(CATEGORIES.contains(&c), "{c}");
            }
        }
    }

    /// The describe cases checked against redis-server 7.0.15 (`ACL SETUSER t <rules>` then
    /// `ACL LIST`).
    #[test]
    fn rules_are_described_as_redis_server_describes_them() {
        for (rules, want) in [
            ("+@all -get", "+@all -get"),
            ("+get -get", "-@all"),
            ("+get +get", "-@all +get"),
            ("+@hash -@hash", "-@all"),
            ("+@hash +get -@all +set", "-@all +set"),
            ("+@all +get", "+@all"),
            ("allcommands -@hash +hget", "+@all -@hash +hget"),
            ("+config|get", "-@all +config|get"),
            ("+config", "-@all +config"),
            ("+config|get -config", "-@all"),
            ("+client|id +client", "-@all +client"),
            ("+@hash +hget", "-@all +@hash"),
            ("+hget +@hash", "-@all +@hash"),
            ("+@hash -hget +hget", "-@all +@hash"),
            ("+@all -@hash +@hash", "+@all"),
            ("+@all -get -@string", "+@all -@string"),
            ("-@string +get -@string", "-@all"),
            ("+@string -get +@string", "-@all +@string"),
            ("+@all -@all", "-@all"),
            ("+get +@all", "+@all"),
            ("-@hash +get", "-@all +get"),
            ("+@hash +get -hdel", "-@all +@hash +get -hdel"),
        ] {
            assert_eq!(user(rules).describe_commands(), want, "{rules}");
        }
        assert_eq!(user("~a* ~b %R~c %W~d %RW~e").describe(), "t off ~a* ~b %R~c %W~d ~e resetchannels -@all");
        assert_eq!(user("~a* allkeys").describe(), "t off ~* resetchannels -@all");
        assert_eq!(user("allkeys resetkeys ~x").describe(), "t off ~x resetchannels -@all");
        assert_eq!(user("&* resetchannels &c").describe(), "t off resetchannels &c -@all");
        assert_eq!(
            user(">p1 >p2 <p1").describe(),
            "t off #3946ca64ff78d93ca61090a437cbb6b3d2ca0d488f5f9ccf3059608368b27693 resetchannels -@all"
        );
        assert_eq!(user(">p nopass").describe(), "t off nopass resetchannels -@all");
        assert_eq!(User::default_user().describe(), "default on nopass ~* &* +@all");
    }

    #[test]
    fn bad_modifiers_name_redis_server_reasons() {
        let mut u = User::new("t");
        assert!(u.apply(b"#zz").unwrap_err().starts_with("The password hash must be exactly 64"));
        assert_eq!(u.apply(b"+nosuch").unwrap_err(), "Unknown command or category name in ACL");
        assert_eq!(u.apply(b"+@nosuch").unwrap_err(), "Unknown command or category name in ACL");
        assert_eq!(u.apply(b"%X~a").unwrap_err(), "Syntax error");
        assert_eq!(u.apply(b"foo").unwrap_err(), "Syntax error");
        assert!(u.apply(b"<nope").unwrap_err().contains("does not exist"));
        u.apply(b"allkeys").unwrap();
        assert!(u.apply(b"~x").unwrap_err().starts_with("Adding a pattern after the * pattern"));
        let acl = Acl::new(None);
        let e = acl.set_user(b"t", &args(&["on", "bad"])).unwrap_err();
        assert_eq!(e, "ERR Error in ACL SETUSER modifier 'bad': Syntax error");
        assert!(acl.user("t").is_none(), "a failed SETUSER changes nothing");
        assert_eq!(acl.set_user(b"a b", &[]).unwrap_err(), "ERR Usernames can't contain spaces or null characters");
        assert_eq!(acl.del_users(&args(&["default"])).unwrap_err(), "ERR The 'default' user cannot be removed");
    }

    #[test]
    fn commands_and_keys_are_checked() {
        let u = user("on >pw ~app:* %R~ro:* +@hash +get +set -hdel +config|get");
        assert!(u.check(spec("get"), &args(&["get", "app:1"])).is_ok());
        assert_eq!(
            u.check(spec("get"), &args(&["get", "other"])).unwrap_err(),
            "NOPERM this user has no permissions to access one of the keys used as arguments"
        );
        assert!(u.check(spec("get"), &args(&["get", "ro:1"])).is_ok());
        assert!(u.check(spec("set"), &args(&["set", "ro:1", "v"])).is_err(), "read-only pattern");
        assert!(u.check(spec("hset"), &args(&["hset", "app:h", "f", "v"])).is_ok());
        assert_eq!(
            u.check(spec("hdel"), &args(&["hdel", "app:h", "f"])).unwrap_err(),
            "NOPERM this user has no permissions to run the 'hdel' command"
        );
        assert!(u.check(spec("config"), &args(&["config", "get", "x"])).is_ok());
        assert_eq!(
            u.check(spec("config"), &args(&["config", "set", "x", "y"])).unwrap_err(),
            "NOPERM this user has no permissions to run the 'config|set' command"
        );
        assert!(u.check(spec("auth"), &args(&["auth", "x"])).is_ok(), "AUTH is never refused");
        assert!(u.accepts(b"pw") && !u.accepts(b"nope"));
        assert!(!user("off >pw").accepts(b"pw"), "a user that is off cannot sign in");
        assert!(user("on nopass").accepts(b"anything"));
        assert!(User::default_user().unrestricted() && !u.unrestricted());
    }

    #[test]
    fn requirepass_sets_the_default_users_only_password() {
        let acl = Acl::new(None);
        assert!(!acl.auth_required());
        acl.set_requirepass("s3cret");
        assert!(acl.auth_required());
        let d = acl.user("default").unwrap();
        assert!(d.accepts(b"s3cret") && !d.accepts(b"other"));
        assert_eq!(acl.requirepass(), "s3cret");
        acl.set_requirepass("");
        assert!(!acl.auth_required());
    }

    #[test]
    fn genpass_has_the_bits_asked_for() {
        assert_eq!(genpass(256).len(), 64);
        assert_eq!(genpass(32).len(), 8);
        assert_eq!(genpass(5).len(), 2);
        assert_ne!(genpass(256), genpass(256));
    }
}
