//! The one catalogue of error codes. Each code has a class that callers act on (temporary: retry
//! the transaction; unknown result: verify; permanent), a stable numeric id carried on the wire,
//! and the MySQL errno / SQLSTATE and HTTP status that front ends report.
//!
//! Numeric ids follow NDB's error numbers where an NDB equivalent exists (e.g. 266 lock wait
//! timeout, 630 duplicate key, 626 tuple not found, 827 out of data memory, 723 no such table), so
//! that operators who know RonDB recognise them.

use std::fmt;

/// How a caller should react to an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Retry the whole transaction (lock timeouts, node failures, overload).
    Temporary,
    /// The commit may or may not have happened.
    UnknownResult,
    /// Retrying will not help.
    Permanent,
}

macro_rules! error_codes {
    ($( $name:ident = $id:expr, $class:ident, $mysql:expr, $sqlstate:expr, $http:expr; )*) => {
        /// Stable error codes; the numeric value is carried on the wire.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum ErrorCode { $( $name = $id, )* }

        impl ErrorCode {
            pub fn from_u32(v: u32) -> Option<ErrorCode> {
                match v { $( $id => Some(ErrorCode::$name), )* _ => None }
            }
            pub fn class(self) -> ErrorClass {
                match self { $( ErrorCode::$name => ErrorClass::$class, )* }
            }
            /// MySQL errno reported by the SQL front end.
            pub fn mysql_errno(self) -> u16 {
                match self { $( ErrorCode::$name => $mysql, )* }
            }
            /// SQLSTATE reported by the SQL front end.
            pub fn sqlstate(self) -> &'static str {
                match self { $( ErrorCode::$name => $sqlstate, )* }
            }
            /// HTTP status reported by the REST front end.
            pub fn http_status(self) -> u16 {
                match self { $( ErrorCode::$name => $http, )* }
            }
        }
    };
}

error_codes! {
    // Temporary errors: the client retries the transaction.
    LockWaitTimeout = 266, Temporary, 1205, "HY000", 500;
    Deadlock = 274, Temporary, 1213, "40001", 500;
    Overloaded = 410, Temporary, 1297, "HY000", 503;
    NodeFailure = 4025, Temporary, 1297, "HY000", 503;
    SchemaChanged = 1204, Temporary, 1297, "HY000", 503;
    TransactionTimeout = 237, Temporary, 1205, "HY000", 500;
    ShuttingDown = 270, Temporary, 1297, "HY000", 503;
    // The data node is in the cluster but not serving yet (a node restart copying its data):
    // clients go to another data node.
    NodeNotStarted = 4029, Temporary, 1297, "HY000", 503;
    // Unknown result: the commit may have happened.
    UnknownResult = 4012, UnknownResult, 1296, "HY000", 500;
    // Permanent errors.
    DuplicateKey = 630, Permanent, 1062, "23000", 400;
    NotFound = 626, Permanent, 1032, "HY000", 404;
    NoSuchTable = 723, Permanent, 1146, "42S02", 404;
    NoSuchDatabase = 709, Permanent, 1049, "42000", 404;
    NoSuchIndex = 4243, Permanent, 1091, "42000", 404;
    NoSuchColumn = 4004, Permanent, 1054, "42S22", 400;
    TableExists = 721, Permanent, 1050, "42S01", 400;
    DatabaseExists = 746, Permanent, 1007, "HY000", 400;
    IndexExists = 4244, Permanent, 1061, "42000", 400;
    DataMemoryFull = 827, Permanent, 1114, "HY000", 507;
    InvalidValue = 4256, Permanent, 1366, "HY000", 400;
    ValueOutOfRange = 4257, Permanent, 1264, "22003", 400;
    DataTooLong = 4258, Permanent, 1406, "22001", 400;
    NotNull = 839, Permanent, 1048, "23000", 400;
    InvalidSchema = 4259, Permanent, 1064, "42000", 400;
    InvalidRequest = 4260, Permanent, 1105, "HY000", 400;
    TransactionAborted = 4350, Permanent, 1180, "HY000", 500;
    Unsupported = 4261, Permanent, 1235, "42000", 400;
    TooLarge = 4262, Permanent, 1153, "08S01", 413;
    ConditionFailed = 4263, Permanent, 1105, "HY000", 409;
    // A connection to a data node without the cluster secret's proof.
    AccessDenied = 4264, Permanent, 1045, "28000", 401;
    Internal = 4000, Permanent, 1105, "HY000", 500;
    Corruption = 2310, Permanent, 1105, "HY000", 500;
}

impl ErrorCode {
    pub fn is_temporary(self) -> bool {
        self.class() == ErrorClass::Temporary
    }
}

/// An error with its code and a human-readable message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TernError {
    pub code: ErrorCode,
    pub message: String,
}

impl TernError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        TernError { code, message: message.into() }
    }
    pub fn is_temporary(&self) -> bool {
        self.code.is_temporary()
    }
}

impl fmt::Display for TernError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (error {})", self.message, self.code as u32)
    }
}

impl std::error::Error for TernError {}

impl From<crate::bin::DecodeError> for TernError {
    fn from(e: crate::bin::DecodeError) -> Self {
        TernError::new(ErrorCode::InvalidRequest, e.to_string())
    }
}

pub type TernResult<T> = Result<T, TernError>;

/// Shorthand constructor used throughout the code base.
pub fn err<T>(code: ErrorCode, message: impl Into<String>) -> TernResult<T> {
    Err(TernError::new(code, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_classify() {
        for c in [ErrorCode::LockWaitTimeout, ErrorCode::DuplicateKey, ErrorCode::DataMemoryFull] {
            assert_eq!(ErrorCode::from_u32(c as u32), Some(c));
        }
        assert!(ErrorCode::LockWaitTimeout.is_temporary());
        assert!(!ErrorCode::DuplicateKey.is_temporary());
        assert_eq!(ErrorCode::DuplicateKey.mysql_errno(), 1062);
        assert_eq!(ErrorCode::NoSuchTable.mysql_errno(), 1146);
        assert_eq!(ErrorCode::from_u32(1), None);
    }
}
