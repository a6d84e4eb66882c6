//! MySQL privileges as Tern enforces them: a bit set per level (global `*.*`, database `db.*`,
//! table `db.t`). A statement needs its privilege at one of the levels above the table it
//! touches (MySQL's rule: global, then database, then table grants are added up).

pub const SELECT: u16 = 1;
pub const INSERT: u16 = 1 << 1;
pub const UPDATE: u16 = 1 << 2;
pub const DELETE: u16 = 1 << 3;
pub const CREATE: u16 = 1 << 4;
pub const DROP: u16 = 1 << 5;
pub const ALTER: u16 = 1 << 6;
pub const INDEX: u16 = 1 << 7;
/// `GRANT OPTION`: may pass on the privileges held at that level.
pub const GRANT: u16 = 1 << 8;
/// `ALL [PRIVILEGES]` (without GRANT OPTION, as in MySQL).
pub const ALL: u16 = SELECT | INSERT | UPDATE | DELETE | CREATE | DROP | ALTER | INDEX;

const NAMES: [(u16, &str); 9] = [
    (SELECT, "SELECT"),
    (INSERT, "INSERT"),
    (UPDATE, "UPDATE"),
    (DELETE, "DELETE"),
    (CREATE, "CREATE"),
    (DROP, "DROP"),
    (ALTER, "ALTER"),
    (INDEX, "INDEX"),
    (GRANT, "GRANT OPTION"),
];

/// MySQL privileges Tern accepts and has nothing to enforce with (no views, routines, events,
/// triggers, temporary tables or replication): granted and revoked as no privilege at all.
const WITHOUT_EFFECT: &[&str] = &[
    "USAGE",
    "REFERENCES",
    "CREATE VIEW",
    "SHOW VIEW",
    "CREATE ROUTINE",
    "ALTER ROUTINE",
    "EXECUTE",
    "EVENT",
    "TRIGGER",
    "LOCK TABLES",
    "CREATE TEMPORARY TABLES",
    "SHOW DATABASES",
    "PROCESS",
    "RELOAD",
    "SHUTDOWN",
    "FILE",
    "SUPER",
    "REPLICATION CLIENT",
    "REPLICATION SLAVE",
    "CREATE USER",
    "CREATE TABLESPACE",
];

/// The bits of a privilege named as in GRANT (upper case, words separated by one space); None
/// for a name MySQL does not know either.
pub fn named(name: &str) -> Option<u16> {
    if name == "ALL" || name == "ALL PRIVILEGES" {
        return Some(ALL);
    }
    if let Some((b, _)) = NAMES.iter().find(|(_, n)| *n == name) {
        return Some(*b);
    }
    WITHOUT_EFFECT.contains(&name).then_some(0)
}

/// The privileges as SHOW GRANTS lists them ("ALL PRIVILEGES" for all of them; "USAGE" for
/// none); GRANT OPTION is not listed (it is a `WITH GRANT OPTION` suffix).
pub fn describe(p: u16) -> String {
    if p & ALL == ALL {
        return "ALL PRIVILEGES".into();
    }
    let names: Vec<&str> = NAMES.iter().filter(|(b, _)| *b != GRANT && p & b != 0).map(|(_, n)| *n).collect();
    if names.is_empty() { "USAGE".into() } else { names.join(", ") }
}

/// The privilege names of `p` (GRANT OPTION included), for storing.
pub fn to_text(p: u16) -> String {
    NAMES.iter().filter(|(b, _)| p & b != 0).map(|(_, n)| *n).collect::<Vec<_>>().join(",")
}

/// Reads `to_text`'s form (unknown names are ignored).
pub fn from_text(t: &str) -> u16 {
    t.split(',').filter_map(|n| named(n.trim())).fold(0, |a, b| a | b)
}

/// The name MySQL's "command denied" error uses for a privilege.
pub fn command(p: u16) -> &'static str {
    NAMES.iter().find(|(b, _)| p & b != 0).map_or("USAGE", |(_, n)| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(named("ALL PRIVILEGES"), Some(ALL));
        assert_eq!(named("LOCK TABLES"), Some(0));
        assert_eq!(named("FLY"), None);
        assert_eq!(from_text(&to_text(SELECT | DROP | GRANT)), SELECT | DROP | GRANT);
        assert_eq!(describe(SELECT | INSERT), "SELECT, INSERT");
        assert_eq!(describe(ALL | GRANT), "ALL PRIVILEGES");
        assert_eq!(describe(GRANT), "USAGE");
        assert_eq!(command(DELETE), "DELETE");
    }
}
