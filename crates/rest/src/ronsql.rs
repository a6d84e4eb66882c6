//! `POST /0.1.0/ronsql`: aggregate queries over one table (RonDB's RonSQL), answered by the
//! shared SQL engine (`tern_sql::ronsql`), which pushes the aggregation into the data nodes.
//!
//! The request is validated in rdrs2's order and with its texts (facts from RonDB's public
//! rest-server2 sources): JSON keys `query`, `database`, `explainMode`, `outputFormat`,
//! `operationId` (all optional strings, `null` keeps the default, other keys are refused unless
//! they start with `#`); then the database name, the API key, the modes and the operation id.
//! Validation errors are plain 400s; errors of the query itself carry RonSQL's class in the
//! `X-RonSQL-Error-Class` header and a `[class] Caught exception: ...` body.

use crate::error::RestError;
use std::time::{Duration, Instant};
use tern_sql::ronsql::{ExplainMode, OutputFormat, Query};

/// Memory one RonSQL query may hold (groups and result rows; the scan itself streams).
pub const QUERY_MEMORY: u64 = 64 << 20;
/// Longest a RonSQL query may run.
pub const QUERY_TIME: Duration = Duration::from_secs(120);
/// RonSQL queries running at once; more are answered 503 (resource) at once.
pub const RUNNING_MAX: usize = 32;

/// A parsed and validated request.
pub struct Params {
    pub query: String,
    pub database: String,
    pub explain: ExplainMode,
    pub format: OutputFormat,
    pub operation_id: Option<String>,
}

/// Parses the body (JSON errors, unknown keys) and checks the database name.
pub fn parse(body: &str) -> Result<Params, RestError> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| {
        RestError::bad_request(format!(
            "{} before/at line {}, column {}",
            match e.classify() {
                serde_json::error::Category::Eof => "Unexpected end of input",
                _ => "Malformed JSON",
            },
            e.line(),
            e.column()
        ))
    })?;
    let serde_json::Value::Object(map) = v else {
        return Err(RestError::bad_request("The JSON element does not have the requested type."));
    };
    let get = |name: &str| -> Result<Option<String>, RestError> {
        match map.get(name) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(RestError::bad_request(format!(
                "The JSON element does not have the requested type. (key '{name}')"
            ))),
        }
    };
    let query = get("query")?.unwrap_or_default();
    let database = get("database")?.unwrap_or_default();
    let explain = get("explainMode")?;
    let format = get("outputFormat")?;
    let operation_id = get("operationId")?.filter(|s| !s.is_empty());
    if let Some(k) = map.keys().find(|k| {
        !k.starts_with('#')
            && !["query", "database", "explainMode", "outputFormat", "operationId"].contains(&k.as_str())
    }) {
        return Err(RestError::bad_request(format!("Unexpected key '{k}'")));
    }
    if database.is_empty() {
        return Err(RestError::bad_request("Field validation for 'DB' failed on the 'min' tag"));
    }
    if database.len() > 64 {
        return Err(RestError::bad_request("Field validation for 'DB' failed on the 'max' tag"));
    }
    if database.chars().any(|c| c == '\0' || c as u32 > 0xFFFF) {
        return Err(RestError::bad_request("db name is invalid"));
    }
    Ok(Params {
        query,
        database,
        explain: match explain {
            None => ExplainMode::Allow,
            Some(s) => ExplainMode::parse(&s).ok_or_else(|| RestError::bad_request("Invalid explainMode"))?,
        },
        format: match format {
            None => OutputFormat::Json,
            Some(s) => OutputFormat::parse(&s).ok_or_else(|| RestError::bad_request("Invalid outputFormat"))?,
        },
        operation_id,
    })
}

/// The checks after the API key: the operation id's length and format.
pub fn check_operation_id(p: &Params, max: usize) -> Result<(), RestError> {
    if let Some(id) = &p.operation_id {
        if id.len() > max {
            return Err(RestError::bad_request(format!("operationId is invalid; error: max allowed length is {max}")));
        }
        if matches!(p.format, OutputFormat::Text | OutputFormat::TextNoHeader) {
            return Err(RestError::bad_request(format!(
                "operationId not supported with output format {}",
                p.format.name()
            )));
        }
    }
    Ok(())
}

/// The query as the SQL engine takes it.
pub fn query(p: &Params) -> Query<'_> {
    Query {
        sql: &p.query,
        database: &p.database,
        explain: p.explain,
        format: p.format,
        operation_id: p.operation_id.as_deref(),
    }
}

/// The statement budget of one query.
pub fn budget() -> tern_sql::limits::Budget {
    tern_sql::limits::Budget::new(
        QUERY_MEMORY,
        Some((Instant::now() + QUERY_TIME, tern_sql::limits::DeadlineKind::ExecutionTime)),
        std::sync::Arc::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_validated_in_rdrs2_order() {
        let ok = parse(r##"{"query": "SELECT COUNT(*) FROM t", "database": "d", "#note": 1, "operationId": null}"##)
            .unwrap();
        assert_eq!((ok.explain, ok.format, ok.operation_id), (ExplainMode::Allow, OutputFormat::Json, None));
        let err = |b: &str| parse(b).err().map(|e| e.message).unwrap_or_default();
        assert_eq!(err(r#"{"query": "x"}"#), "Field validation for 'DB' failed on the 'min' tag");
        assert_eq!(
            err(&format!(r#"{{"database": "{}"}}"#, "d".repeat(65))),
            "Field validation for 'DB' failed on the 'max' tag"
        );
        assert_eq!(err(r#"{"database": "d", "explainMode": "allow"}"#), "Invalid explainMode");
        assert_eq!(err(r#"{"database": "d", "outputFormat": "CSV"}"#), "Invalid outputFormat");
        assert_eq!(err(r#"{"database": "d", "extra": 1}"#), "Unexpected key 'extra'");
        assert!(err(r#"{"database": "d", "query": 5}"#).contains("requested type"));
        assert!(err(r#"{"database": "d""#).contains("before/at line 1"));
        let p = parse(r#"{"database": "d", "outputFormat": "TEXT", "operationId": "op"}"#).unwrap();
        assert_eq!(
            check_operation_id(&p, 256).err().map(|e| e.message).as_deref(),
            Some("operationId not supported with output format TEXT")
        );
        let p = parse(&format!(r#"{{"database": "d", "operationId": "{}"}}"#, "x".repeat(257))).unwrap();
        assert_eq!(
            check_operation_id(&p, 256).err().map(|e| e.message).as_deref(),
            Some("operationId is invalid; error: max allowed length is 256")
        );
    }
}
