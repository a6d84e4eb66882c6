//! REST errors: an HTTP status and a message (clients match the message text, so the texts of
//! rdrs2 are kept verbatim), plus the Tern error code when the error came from the data node.
//!
//! API version 0.1.0 answers errors as plain text; 0.2.0 as JSON (rdrs2's
//! `server/src/error_response.hpp`): `{"error": {"code": 400, "message": "...", "status": -1,
//! "classification": -1, "ndbCode": -1, "mysqlCode": -1}}`, the last four from the NDB error
//! (here: the Tern error code, numbered as NDB's where one exists) or -1.

use tern_client::TernError;
use tern_types::ErrorCode;
use tern_types::error::ErrorClass;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestError {
    pub status: u16,
    pub message: String,
    /// The data node's error, when there was one.
    pub code: Option<ErrorCode>,
}

impl RestError {
    pub fn new(status: u16, message: impl Into<String>) -> RestError {
        RestError { status, message: message.into(), code: None }
    }
    pub fn bad_request(message: impl Into<String>) -> RestError {
        RestError::new(400, message)
    }
    pub fn not_found(message: impl Into<String>) -> RestError {
        RestError::new(404, message)
    }

    /// The 0.2.0 JSON error body.
    pub fn to_json(&self) -> String {
        let (status, class, ndb, mysql) = match self.code {
            Some(c) => (ndb_status(c.class()), ndb_classification(c), c as u32 as i64, c.mysql_errno() as i64),
            None => (-1, -1, -1, -1),
        };
        let mut out = format!("{{\"error\":{{\"code\":{},\"message\":", self.status);
        push_json_str(&mut out, &self.message);
        out.push_str(&format!(
            ",\"status\":{status},\"classification\":{class},\"ndbCode\":{ndb},\"mysqlCode\":{mysql}}}}}"
        ));
        out
    }
}

impl From<TernError> for RestError {
    fn from(e: TernError) -> RestError {
        RestError { status: e.code.http_status(), message: e.message, code: Some(e.code) }
    }
}

/// `NdbError::Status`: temporary 1, permanent 2, unknown result 3.
fn ndb_status(c: ErrorClass) -> i64 {
    match c {
        ErrorClass::Temporary => 1,
        ErrorClass::Permanent => 2,
        ErrorClass::UnknownResult => 3,
    }
}

/// `NdbError::Classification` for the codes that have an obvious one; 12 (internal) otherwise.
fn ndb_classification(c: ErrorCode) -> i64 {
    use ErrorCode as E;
    match c {
        E::NotFound => 2,
        E::DuplicateKey | E::NotNull | E::ConditionFailed => 3,
        E::NoSuchTable | E::NoSuchDatabase | E::NoSuchIndex | E::NoSuchColumn | E::InvalidSchema => 4,
        E::DataMemoryFull => 6,
        E::Overloaded => 9,
        E::LockWaitTimeout | E::Deadlock | E::TransactionTimeout => 10,
        E::UnknownResult => 11,
        E::NodeFailure | E::ShuttingDown => 15,
        E::TableExists | E::DatabaseExists | E::IndexExists => 17,
        E::SchemaChanged => 18,
        E::Unsupported => 13,
        E::InvalidValue | E::ValueOutOfRange | E::DataTooLong | E::InvalidRequest | E::TooLarge => 1,
        _ => 12,
    }
}

/// Appends `s` as a JSON string.
pub fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    if !s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.push_str(s);
        out.push('"');
        return;
    }
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_errors() {
        assert_eq!(
            RestError::bad_request("a \"b\"").to_json(),
            r#"{"error":{"code":400,"message":"a \"b\"","status":-1,"classification":-1,"ndbCode":-1,"mysqlCode":-1}}"#
        );
        let e = RestError::from(TernError::new(ErrorCode::DuplicateKey, "dup"));
        assert_eq!(
            e.to_json(),
            r#"{"error":{"code":400,"message":"dup","status":2,"classification":3,"ndbCode":630,"mysqlCode":1062}}"#
        );
    }
}
