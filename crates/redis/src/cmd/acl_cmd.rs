//! AUTH and the ACL command (users and permissions live in `crate::acl`), with redis-server
//! 7.0's replies and error texts.

use super::{R, RErr, SYNTAX, Spec, err};
use crate::acl::{self, CATEGORIES};
use crate::resp::{self, parse_int};
use crate::{Server, Session};

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
const NOAUTH: &str = "NOAUTH Authentication required.";

const ACL_HELP: &[&str] = &[
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Print this help.",
];

impl Server {
    /// Signs the connection in as `user` when `pass` is one of its passwords (or it has
    /// `nopass`) and it is on.
    pub(crate) fn authenticate(&self, sess: &mut Session, user: &[u8], pass: &[u8]) -> R {
        let generation = self.acl.generation();
        match self.acl.user(&String::from_utf8_lossy(user)) {
            Some(u) if u.accepts(pass) => {
                sess.info.set_user(&u.name);
                sess.user = u;
                sess.authed = true;
                sess.acl_generation = generation;
                Ok(())
            }
            _ => Err(err(WRONGPASS)),
        }
    }

    /// Looks the connection's user up again after an ACL change. False when the user was
    /// deleted: the connection closes, as redis-server closes the connections of a deleted user.
    pub(crate) fn refresh_user(&self, sess: &mut Session) -> bool {
        let generation = self.acl.generation();
        if generation == sess.acl_generation {
            return true;
        }
        sess.acl_generation = generation;
        match self.acl.user(&sess.user.name) {
            Some(u) => {
                sess.user = u;
                true
            }
            None => {
                sess.info.kill();
                false
            }
        }
    }

    /// NOAUTH before AUTH, NOPERM for a command or key the user may not use.
    pub(crate) fn permit(&self, sess: &Session, spec: &Spec, args: &[Vec<u8>]) -> R {
        if !sess.authed && !acl::no_auth(spec.name) {
            return Err(err(NOAUTH));
        }
        sess.user.check(spec, args).map_err(RErr)
    }

    /// AUTH [user] password.
    pub(super) fn auth_cmd(&self, sess: &mut Session, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let (user, pass): (&[u8], &[u8]) = match a.len() {
            2 => (b"default", &a[1]),
            3 => (&a[1], &a[2]),
            _ => return Err(err(SYNTAX)),
        };
        if a.len() == 2 && self.acl.user("default").is_some_and(|u| u.nopass) {
            return Err(err(
                "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            ));
        }
        self.authenticate(sess, user, pass)?;
        resp::simple(out, "OK");
        Ok(())
    }

    /// ACL subcommands (their arities were checked by `lookup`).
    pub(super) fn acl_cmd(&self, sess: &mut Session, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let sub = String::from_utf8_lossy(&a[1]).to_lowercase();
        match sub.as_str() {
            "setuser" => {
                self.acl.set_user(&a[2], &a[3..]).map_err(RErr)?;
                resp::simple(out, "OK");
            }
            "getuser" => match self.acl.user(&String::from_utf8_lossy(&a[2])) {
                None => resp::null(out),
                Some(u) => {
                    let (flags, passwords, commands, keys, channels) = u.fields();
                    resp::array_len(out, 12);
                    resp::bulk(out, b"flags");
                    resp::array_len(out, flags.len());
                    for f in flags {
                        resp::bulk(out, f.as_bytes());
                    }
                    resp::bulk(out, b"passwords");
                    resp::array_len(out, passwords.len());
                    for p in passwords {
                        resp::bulk(out, p.as_bytes());
                    }
                    for (k, v) in [("commands", commands), ("keys", keys), ("channels", channels)] {
                        resp::bulk(out, k.as_bytes());
                        resp::bulk(out, v.as_bytes());
                    }
                    resp::bulk(out, b"selectors");
                    resp::array_len(out, 0);
                }
            },
            "list" => {
                let users = self.acl.users();
                resp::array_len(out, users.len());
                for u in users {
                    resp::bulk(out, format!("user {}", u.describe()).as_bytes());
                }
            }
            "users" => {
                let users = self.acl.users();
                resp::array_len(out, users.len());
                for u in users {
                    resp::bulk(out, u.name.as_bytes());
                }
            }
            "whoami" => resp::bulk(out, sess.user.name.as_bytes()),
            "deluser" => {
                let n = self.acl.del_users(&a[2..]).map_err(RErr)?;
                // Their connections close (this one too, after its reply, when it was one).
                let gone: Vec<String> = a[2..].iter().map(|n| String::from_utf8_lossy(n).into_owned()).collect();
                for c in self.clients.all() {
                    if gone.contains(&c.user()) {
                        c.kill();
                    }
                }
                resp::integer(out, n as i64);
            }
            "cat" if a.len() == 2 => {
                resp::array_len(out, CATEGORIES.len());
                for c in CATEGORIES {
                    resp::bulk(out, c.as_bytes());
                }
            }
            "cat" if a.len() == 3 => {
                let cat = String::from_utf8_lossy(&a[2]).to_lowercase();
                let cmds = acl::category_commands(&cat)
                    .ok_or_else(|| err(format!("ERR Unknown category '{}'", String::from_utf8_lossy(&a[2]))))?;
                resp::array_len(out, cmds.len());
                for c in cmds {
                    resp::bulk(out, c.as_bytes());
                }
            }
            "genpass" if a.len() <= 3 => {
                let bits = match a.get(2) {
                    None => 256,
                    Some(b) => match parse_int(b) {
                        Some(n) if (1..=4096).contains(&n) => n as usize,
                        _ => {
                            return Err(err(
                                "ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096",
                            ));
                        }
                    },
                };
                let p = acl::genpass(bits);
                resp::bulk(out, p.as_bytes());
            }
            "save" | "load" => {
                return Err(err(
                    "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.",
                ));
            }
            "help" => {
                resp::array_len(out, ACL_HELP.len());
                for l in ACL_HELP {
                    resp::simple(out, l);
                }
            }
            _ => return Err(err(format!("ERR wrong number of arguments for 'acl|{sub}' command"))),
        }
        Ok(())
    }
}
