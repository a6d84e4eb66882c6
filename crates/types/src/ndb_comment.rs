//! RonDB's table comment options (interfaces.md §5): `COMMENT "NDB_TABLE=opt1=v1,opt2=v2"` with
//! `TTL=<seconds>@<column>`, `READ_BACKUP=1`, `FULLY_REPLICATED=1`, `PARTITION_BALANCE=<name>`,
//! `NOLOGGING=1`. The comment may hold other text before `NDB_TABLE=`; options are separated by
//! commas. The TTL column is resolved (and checked to be DATETIME or TIMESTAMP) by the caller.

use crate::error::{ErrorCode, TernError};

/// The largest TTL RonDB accepts, in seconds.
pub const TTL_MAX_SECONDS: u64 = 4_294_967_039;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NdbTableOptions {
    /// (seconds, column name).
    pub ttl: Option<(u32, String)>,
    pub read_backup: Option<bool>,
    pub fully_replicated: Option<bool>,
    pub partition_balance: Option<String>,
    pub nologging: Option<bool>,
}

fn bad(msg: impl Into<String>) -> TernError {
    TernError::new(ErrorCode::InvalidSchema, msg)
}

fn flag(name: &str, v: &str) -> Result<bool, TernError> {
    match v {
        "1" => Ok(true),
        "0" => Ok(false),
        _ => Err(bad(format!("Syntax error in COMMENT modifier: {name}={v} (use 0 or 1)"))),
    }
}

/// Parses the `NDB_TABLE=` part of a table comment (Ok(default) when there is none).
pub fn parse(comment: &str) -> Result<NdbTableOptions, TernError> {
    let mut o = NdbTableOptions::default();
    let Some(at) = comment.find("NDB_TABLE=") else { return Ok(o) };
    let opts = comment[at + "NDB_TABLE=".len()..].split_whitespace().next().unwrap_or("");
    for opt in opts.split(',').filter(|s| !s.is_empty()) {
        let (name, value) = opt
            .split_once('=')
            .ok_or_else(|| bad(format!("Syntax error in COMMENT modifier: '{opt}' has no value")))?;
        match name.to_ascii_uppercase().as_str() {
            "TTL" => {
                let (secs, col) = value.split_once('@').ok_or_else(|| {
                    bad(format!("Syntax error in COMMENT modifier: TTL={value} (use TTL=<seconds>@<column>)"))
                })?;
                let secs: u64 = secs.trim().parse().map_err(|_| {
                    bad(format!("Syntax error in COMMENT modifier: TTL seconds '{secs}' is not a number"))
                })?;
                if secs > TTL_MAX_SECONDS {
                    return Err(bad(format!("The maximum ttl is {TTL_MAX_SECONDS} seconds")));
                }
                let col = col.trim().trim_matches('`');
                if col.is_empty() {
                    return Err(bad("Syntax error in COMMENT modifier: TTL needs a column after '@'"));
                }
                o.ttl = Some((secs as u32, col.to_string()));
            }
            "READ_BACKUP" => o.read_backup = Some(flag(name, value)?),
            "FULLY_REPLICATED" => o.fully_replicated = Some(flag(name, value)?),
            "NOLOGGING" => o.nologging = Some(flag(name, value)?),
            "PARTITION_BALANCE" => o.partition_balance = Some(value.to_string()),
            _ => return Err(bad(format!("Syntax error in COMMENT modifier: unknown option '{name}'"))),
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_and_errors() {
        assert_eq!(parse("just a comment").unwrap(), NdbTableOptions::default());
        let o = parse("NDB_TABLE=TTL=3600@created,PARTITION_BALANCE=FOR_RP_BY_LDM,READ_BACKUP=1").unwrap();
        assert_eq!(o.ttl, Some((3600, "created".into())));
        assert_eq!(o.partition_balance.as_deref(), Some("FOR_RP_BY_LDM"));
        assert_eq!(o.read_backup, Some(true));
        assert_eq!(parse("keys NDB_TABLE=TTL=0@`expiry_date`").unwrap().ttl, Some((0, "expiry_date".into())));
        assert_eq!(parse("NDB_TABLE=TTL=4294967039@t").unwrap().ttl.unwrap().0, 4_294_967_039);
        assert_eq!(parse("NDB_TABLE=TTL=4294967040@t").unwrap_err().message, "The maximum ttl is 4294967039 seconds");
        assert!(parse("NDB_TABLE=TTL=10").is_err());
        assert!(parse("NDB_TABLE=TTL=x@t").is_err());
        assert!(parse("NDB_TABLE=TTL=10@").is_err());
        assert!(parse("NDB_TABLE=READ_BACKUP=2").is_err());
        assert!(parse("NDB_TABLE=BOGUS=1").is_err());
        assert!(parse("NDB_TABLE=NOVALUE").is_err());
    }
}
