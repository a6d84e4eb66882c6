//! The registry of MySQL's scalar functions: one row per name a statement may call, saying how
//! many arguments it needs, the type of its result, whether a BIT column reaches it as bytes,
//! and the function that computes it. Names are resolved once, when a statement is planned
//! (`lookup` → `FnId`, kept in the plan as `X::Call`), so evaluating a row calls through a
//! table index instead of matching names. The analytic engine (`tern-engine`) registers its
//! MySQL functions from the same rows, so both paths compute the same answer.
//!
//! The functions themselves are grouped by what they work on: `string` (text and bytes,
//! digests and encodings), `math`, `temporal` (dates and times), `control` (NULL handling,
//! IF, comparisons of their arguments) and `info` (the session and server).

mod control;
mod info;
mod math;
mod string;
mod temporal;

use crate::SqlError;
use crate::eval::{EResult, text, to_i128};
use tern_types::Value;

pub(crate) use math::round;
pub use temporal::date_add;

/// Session values some functions need.
pub trait FnCtx {
    fn now(&self) -> i64;
    fn database(&self) -> Option<String>;
    fn user(&self) -> String;
    fn connection_id(&self) -> u32;
    fn last_insert_id(&self) -> u64;
    fn set_last_insert_id(&self, v: u64);
    fn row_count(&self) -> i64;
    fn found_rows(&self) -> u64;
}

/// How a function's result type follows from its arguments (the planner's result-column
/// metadata; the analytic engine's result types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// Text (a VAR_STRING).
    Text,
    /// Bytes that need not be text (UNHEX); a VAR_STRING to the planner.
    Bytes,
    /// A BIGINT.
    Int,
    /// A DATETIME without a fraction (NOW and its synonyms).
    Now,
    /// A DATE.
    Date,
    /// A TIME without a fraction (CURTIME).
    Time,
    /// TIME(x): a TIME keeping x's fraction digits.
    TimeOf,
    /// FROM_UNIXTIME: a DATETIME, or text with a format argument.
    FromUnix,
    /// STR_TO_DATE: a DATE, TIME or DATETIME by the parts its (constant) format names.
    StrToDate,
    /// TIMESTAMPADD: a DATE for a DATE moved by days or more, else a DATETIME (to the planner,
    /// text).
    DateAdd,
    /// The type of the first argument (ABS, COALESCE, GREATEST...).
    FirstArg,
    /// The type of the second argument (IF's first branch).
    SecondArg,
    /// FLOOR / CEIL: an integer for integers and DECIMALs, the argument's type otherwise.
    Floor,
    /// ROUND / TRUNCATE: the digits the second argument (a constant) asks for.
    Rounded,
    /// A DOUBLE.
    Double,
}

type Eval = fn(&[Value], &dyn FnCtx) -> EResult<Value>;

/// One callable name.
pub struct Func {
    /// The name as MySQL spells it (upper case).
    pub name: &'static str,
    /// Fewer arguments fail with error 1582 (more are ignored, as they were before the
    /// registry; MySQL rejects them at parse time for most functions).
    pub min_args: usize,
    pub ty: Ty,
    /// A BIT(n) column argument arrives as its ceil(n/8) big-endian bytes (MariaDB reads BIT as
    /// a string for these), not as a number.
    pub bit_bytes: bool,
    /// Made by the planner only (ORDER BY of an ENUM, BIT as bytes): not callable from SQL.
    pub internal: bool,
    eval: Eval,
}

const fn f(name: &'static str, min_args: usize, ty: Ty, eval: Eval) -> Func {
    Func { name, min_args, ty, bit_bytes: false, internal: false, eval }
}

/// A function that reads a BIT argument as bytes.
const fn b(name: &'static str, min_args: usize, ty: Ty, eval: Eval) -> Func {
    Func { name, min_args, ty, bit_bytes: true, internal: false, eval }
}

const fn internal(name: &'static str, min_args: usize, ty: Ty, eval: Eval) -> Func {
    Func { name, min_args, ty, bit_bytes: false, internal: true, eval }
}

use Ty::*;

/// Every function, one row per name (synonyms are rows of their own with the same `eval`).
static FUNCS: &[Func] = &[
    internal("BIT_BYTES", 1, Bytes, string::bit_bytes),
    internal("MEMBER_INDEX", 2, Int, string::member_index),
    // Text.
    b("CONCAT", 0, Text, string::concat),
    b("CONCAT_WS", 1, Text, string::concat_ws),
    b("LENGTH", 1, Int, string::length),
    b("OCTET_LENGTH", 1, Int, string::length),
    f("CHAR_LENGTH", 1, Int, string::char_length),
    f("CHARACTER_LENGTH", 1, Int, string::char_length),
    f("UPPER", 1, Text, string::upper),
    f("UCASE", 1, Text, string::upper),
    f("LOWER", 1, Text, string::lower),
    f("LCASE", 1, Text, string::lower),
    b("SUBSTRING", 2, Text, string::substring),
    b("SUBSTR", 2, Text, string::substring),
    b("MID", 2, Text, string::substring),
    b("LEFT", 2, Text, string::left),
    b("RIGHT", 2, Text, string::right),
    b("REPEAT", 2, Text, string::repeat),
    f("SPACE", 0, Text, string::space),
    f("REPLACE", 3, Text, string::replace),
    b("REVERSE", 0, Text, string::reverse),
    f("TRIM", 0, Text, string::trim),
    f("LTRIM", 0, Text, string::ltrim),
    f("RTRIM", 0, Text, string::rtrim),
    b("LPAD", 3, Text, string::lpad),
    b("RPAD", 3, Text, string::rpad),
    b("LOCATE", 2, Int, string::locate),
    b("INSTR", 2, Int, string::instr),
    f("POSITION", 2, Int, string::position),
    f("ASCII", 0, Int, string::ascii),
    f("ORD", 0, Int, string::ascii),
    f("HEX", 1, Text, string::hex),
    f("UNHEX", 0, Bytes, string::unhex),
    b("MD5", 0, Text, string::md5),
    b("SHA1", 0, Text, string::sha1),
    b("SHA", 0, Text, string::sha1),
    b("SHA2", 2, Text, string::sha2),
    f("CRC32", 0, Int, string::crc32),
    b("TO_BASE64", 0, Text, string::to_base64),
    f("FROM_BASE64", 0, Text, string::from_base64),
    f("FORMAT", 2, Text, string::format),
    b("SUBSTRING_INDEX", 3, Text, string::substring_index),
    f("FIELD", 2, Int, string::field),
    f("ELT", 2, Text, string::elt),
    f("CHARSET", 0, Text, info::charset),
    f("COLLATION", 0, Text, info::collation),
    // NULLs and choices.
    f("COALESCE", 0, FirstArg, control::coalesce),
    f("IFNULL", 2, FirstArg, control::ifnull),
    f("NVL", 2, FirstArg, control::ifnull),
    f("NULLIF", 2, FirstArg, control::nullif),
    f("ISNULL", 1, Int, control::isnull),
    f("GREATEST", 2, FirstArg, control::greatest),
    f("LEAST", 2, FirstArg, control::least),
    f("IF", 3, SecondArg, control::if_),
    // Numbers.
    f("ABS", 1, FirstArg, math::abs),
    f("SIGN", 0, Int, math::sign),
    f("ROUND", 1, Rounded, math::round_fn),
    f("TRUNCATE", 1, Rounded, math::truncate),
    f("FLOOR", 1, Floor, math::floor),
    f("CEIL", 1, Floor, math::ceil),
    f("CEILING", 1, Floor, math::ceil),
    f("MOD", 2, FirstArg, math::mod_),
    f("POW", 2, Double, math::pow),
    f("POWER", 2, Double, math::pow),
    f("SQRT", 0, Double, math::sqrt),
    f("RAND", 0, Double, math::rand),
    // Dates and times.
    f("NOW", 0, Now, temporal::now),
    f("CURRENT_TIMESTAMP", 0, Now, temporal::now),
    f("SYSDATE", 0, Now, temporal::now),
    f("LOCALTIME", 0, Now, temporal::now),
    f("LOCALTIMESTAMP", 0, Now, temporal::now),
    f("UTC_TIMESTAMP", 0, Now, temporal::now),
    f("CURDATE", 0, Date, temporal::curdate),
    f("CURRENT_DATE", 0, Date, temporal::curdate),
    f("UTC_DATE", 0, Date, temporal::curdate),
    f("CURTIME", 0, Time, temporal::curtime),
    f("CURRENT_TIME", 0, Time, temporal::curtime),
    f("UNIX_TIMESTAMP", 0, Int, temporal::unix_timestamp),
    f("FROM_UNIXTIME", 1, FromUnix, temporal::from_unixtime),
    f("DATE", 0, Date, temporal::date),
    f("TIME", 0, TimeOf, temporal::time),
    f("DATE_FORMAT", 2, Text, temporal::date_format),
    f("DAYOFWEEK", 1, Int, temporal::dayofweek),
    f("WEEKDAY", 1, Int, temporal::weekday),
    f("DAYOFYEAR", 1, Int, temporal::dayofyear),
    f("WEEK", 1, Int, temporal::week),
    f("LAST_DAY", 1, Date, temporal::last_day),
    f("MONTHNAME", 1, Text, temporal::monthname),
    f("DAYNAME", 1, Text, temporal::dayname),
    f("TIMESTAMPADD", 3, DateAdd, temporal::timestampadd),
    f("TIMESTAMPDIFF", 3, Int, temporal::timestampdiff),
    f("STR_TO_DATE", 2, StrToDate, temporal::str_to_date),
    f("YEAR", 1, Int, temporal::year),
    f("MONTH", 1, Int, temporal::month),
    f("DAY", 1, Int, temporal::day),
    f("DAYOFMONTH", 1, Int, temporal::day),
    f("HOUR", 1, Int, temporal::hour),
    f("MINUTE", 1, Int, temporal::minute),
    f("SECOND", 1, Int, temporal::second),
    f("DATEDIFF", 2, Int, temporal::datediff),
    f("EXTRACT", 2, Text, temporal::extract),
    // The session and the server.
    f("DATABASE", 0, Text, info::database),
    f("SCHEMA", 0, Text, info::database),
    f("VERSION", 0, Text, info::version),
    f("USER", 0, Text, info::user),
    f("CURRENT_USER", 0, Text, info::user),
    f("SESSION_USER", 0, Text, info::user),
    f("SYSTEM_USER", 0, Text, info::user),
    f("CONNECTION_ID", 0, Int, info::connection_id),
    f("LAST_INSERT_ID", 0, Int, info::last_insert_id),
    f("ROW_COUNT", 0, Int, info::row_count),
    f("FOUND_ROWS", 0, Int, info::found_rows),
    f("SLEEP", 0, Int, info::sleep),
];

/// A resolved function: a row of the registry.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FnId(u16);

impl std::fmt::Debug for FnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FnId {
    pub fn func(self) -> &'static Func {
        &FUNCS[self.0 as usize]
    }

    pub fn name(self) -> &'static str {
        self.func().name
    }

    pub fn ty(self) -> Ty {
        self.func().ty
    }

    /// Computes the function of `args`: error 1582 for too few of them.
    pub fn call(self, args: &[Value], ctx: &dyn FnCtx) -> EResult<Value> {
        let func = self.func();
        arity(func, args.len())?;
        (func.eval)(args, ctx)
    }
}

fn arity(func: &Func, n: usize) -> EResult<()> {
    if n < func.min_args {
        return Err(SqlError::new(
            1582,
            "42000",
            format!("Incorrect parameter count in the call to native function '{}'", func.name),
        ));
    }
    Ok(())
}

/// The function a statement calls `name` (upper case), internal ones included.
fn find(name: &str) -> Option<FnId> {
    FUNCS.iter().position(|f| f.name == name).map(|i| FnId(i as u16))
}

/// The function SQL calls `name` (upper case): error 1305 for a name no function has.
pub fn lookup(name: &str) -> EResult<FnId> {
    match find(name) {
        Some(id) if !id.func().internal => Ok(id),
        _ => Err(SqlError::new(1305, "42000", format!("FUNCTION {name} does not exist"))),
    }
}

/// A function the planner makes itself (not callable from SQL).
pub fn planner_made(name: &str) -> FnId {
    let id = find(name).expect("a function of the registry");
    debug_assert!(id.func().internal || name == "CONCAT", "{name} is made by the planner");
    id
}

/// Resolves `name` and checks its argument count, as planning a call does.
pub fn resolve(name: &str, args: usize) -> EResult<FnId> {
    let id = lookup(name)?;
    arity(id.func(), args)?;
    Ok(id)
}

/// Calls the function named `name` (for callers without a plan: EXTRACT's unit).
pub fn call_by_name(name: &str, args: &[Value], ctx: &dyn FnCtx) -> EResult<Value> {
    lookup(name)?.call(args, ctx)
}

// Helpers shared by the groups of functions.

/// Longest string a function may return (MySQL's default max_allowed_packet).
pub const VALUE_BYTES_MAX: usize = 64 << 20;

/// Error 1301 when function `name` would return `n` bytes, more than `VALUE_BYTES_MAX`.
fn fits(name: &str, n: usize) -> EResult<()> {
    if n > VALUE_BYTES_MAX {
        return Err(SqlError::new(
            1301,
            "HY000",
            format!(
                "Result of {}() was larger than max_allowed_packet ({VALUE_BYTES_MAX}) - truncated",
                name.to_ascii_lowercase()
            ),
        ));
    }
    Ok(())
}

fn any_null(args: &[Value]) -> bool {
    args.iter().any(Value::is_null)
}

fn arg_text(args: &[Value], i: usize) -> Option<Vec<u8>> {
    args.get(i).and_then(text)
}

fn arg_int(args: &[Value], i: usize) -> Option<i64> {
    args.get(i).and_then(to_i128).map(|v| v.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
}

fn arg_string(args: &[Value], i: usize) -> Option<String> {
    arg_text(args, i).map(|u| String::from_utf8_lossy(&u).into_owned())
}

fn bytes(b: Vec<u8>) -> EResult<Value> {
    Ok(Value::Bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Ctx;
    impl FnCtx for Ctx {
        fn now(&self) -> i64 {
            1_700_000_000_000_000
        }
        fn database(&self) -> Option<String> {
            Some("db".into())
        }
        fn user(&self) -> String {
            "u@h".into()
        }
        fn connection_id(&self) -> u32 {
            7
        }
        fn last_insert_id(&self) -> u64 {
            0
        }
        fn set_last_insert_id(&self, _: u64) {}
        fn row_count(&self) -> i64 {
            -1
        }
        fn found_rows(&self) -> u64 {
            0
        }
    }

    #[test]
    fn names_are_unique_and_upper_case() {
        let mut seen = std::collections::HashSet::new();
        for f in FUNCS {
            assert!(seen.insert(f.name), "{} twice", f.name);
            assert_eq!(f.name, f.name.to_ascii_uppercase());
        }
        assert!(FUNCS.len() < u16::MAX as usize);
    }

    #[test]
    fn lookup_resolves_names_and_rejects_internal_and_unknown_ones() {
        assert_eq!(lookup("SUBSTR").unwrap().name(), "SUBSTR");
        assert_eq!(lookup("NO_SUCH").unwrap_err().errno, 1305);
        assert_eq!(lookup("BIT_BYTES").unwrap_err().message, "FUNCTION BIT_BYTES does not exist");
        assert_eq!(planner_made("MEMBER_INDEX").name(), "MEMBER_INDEX");
        let e = resolve("LEFT", 1).unwrap_err();
        assert_eq!(
            (e.errno, e.message.as_str()),
            (1582, "Incorrect parameter count in the call to native function 'LEFT'")
        );
    }

    #[test]
    fn calls_check_their_argument_count() {
        let id = lookup("REPEAT").unwrap();
        assert_eq!(id.call(&[Value::str("ab"), Value::Int(2)], &Ctx).unwrap(), Value::str("abab"));
        assert_eq!(id.call(&[Value::str("ab")], &Ctx).unwrap_err().errno, 1582);
        assert_eq!(
            call_by_name("EXTRACT", &[Value::str("YEAR"), Value::str("2024-05-06")], &Ctx).unwrap(),
            Value::Int(2024)
        );
        assert_eq!(call_by_name("DATABASE", &[], &Ctx).unwrap(), Value::str("db"));
        assert_eq!(call_by_name("CONNECTION_ID", &[], &Ctx).unwrap(), Value::UInt(7));
    }
}
