//! `POST /0.1.0/ronsql` through real HTTP on 127.0.0.1: aggregate queries over a TPC-H-shaped
//! table answered in every output format, EXPLAIN showing the aggregation program pushed to the
//! data node, rdrs2's validation texts, and the error classes with their headers.

use std::io::{Read, Write};
use std::time::Duration;
use tern_client::{Client, Column, ColumnType, DdlReq, Index, Table, Value};
use tern_rest::config::RestOptions;

mod common;
use common::{start_node, start_rest};

/// One request on a fresh connection: (status, lower-cased head, body).
fn post(port: u16, body: &str) -> (u16, String, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST /0.1.0/ronsql HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = Vec::new();
    s.read_to_end(&mut r).unwrap();
    let r = String::from_utf8(r).unwrap();
    let status: u16 = r[9..12].parse().unwrap();
    let (head, body) = r.split_once("\r\n\r\n").unwrap();
    (status, head.to_ascii_lowercase(), body.to_string())
}

fn req(query: &str, extra: &str) -> String {
    format!(r#"{{"query": {}, "database": "tpch"{extra}}}"#, serde_json::Value::String(query.into()))
}

/// A lineitem row: (orderkey, linenumber, quantity in cents, price in cents, discount in
/// hundredths, flag, status, ship day, comment).
type Row = (i64, i64, i64, i64, i64, &'static str, &'static str, i32, Option<String>);

fn rows() -> Vec<Row> {
    (0..600i64)
        .map(|i| {
            let flag = ["A", "N", "R"][(i % 3) as usize];
            let status = ["F", "O"][(i % 2) as usize];
            let comment = if i % 10 == 0 { None } else { Some(format!("cmt \"{i}\"\té")) };
            (
                i / 7,
                i % 7,
                100 * (1 + i % 50),
                90_000 + (i * 37 % 1000) * 100,
                i % 11,
                flag,
                status,
                8000 + (i % 700) as i32,
                comment,
            )
        })
        .collect()
}

fn setup(c: &Client) {
    c.ddl(DdlReq::CreateDatabase { name: "tpch".into(), if_not_exists: true }).unwrap();
    let dec = ColumnType::Decimal { precision: 15, scale: 2, unsigned: false };
    let t = Table {
        id: 0,
        database: "tpch".into(),
        name: "lineitem".into(),
        columns: vec![
            Column::new("l_orderkey", ColumnType::Int { unsigned: false }).not_null(),
            Column::new("l_linenumber", ColumnType::Int { unsigned: false }).not_null(),
            Column::new("l_quantity", dec).not_null(),
            Column::new("l_extendedprice", dec).not_null(),
            Column::new("l_discount", dec).not_null(),
            Column::new("l_returnflag", ColumnType::Char { len: 1 }).not_null(),
            Column::new("l_linestatus", ColumnType::Char { len: 1 }).not_null(),
            Column::new("l_shipdate", ColumnType::Date).not_null(),
            Column::new("l_comment", ColumnType::VarChar { len: 44 }),
        ],
        primary_key: vec![0, 1],
        partition_key: vec![0, 1],
        indexes: vec![Index { id: 0, name: "by_ship".into(), columns: vec![7], unique: false }],
        partition_count: 0,
        groups: 0,
        ttl: None,
        comment: String::new(),
    };
    c.ddl(DdlReq::CreateTable { table: t, if_not_exists: false }).unwrap();
    let h = c.table("tpch", "lineitem").unwrap();
    let ops = rows()
        .into_iter()
        .map(|(o, l, q, p, d, f, s, day, cm)| {
            h.write(&[
                Value::Int(o),
                Value::Int(l),
                Value::Decimal { v: q as i128, scale: 2 },
                Value::Decimal { v: p as i128, scale: 2 },
                Value::Decimal { v: d as i128, scale: 2 },
                Value::str(f),
                Value::str(s),
                Value::Date(day),
                cm.map(|c| Value::str(&c)).unwrap_or(Value::Null),
            ])
            .unwrap()
        })
        .collect();
    c.blocking().execute(ops).unwrap();
}

/// A scaled decimal as MySQL prints it.
fn dec(v: i128, scale: u32) -> String {
    let p = 10i128.pow(scale);
    let sign = if v < 0 { "-" } else { "" };
    format!("{sign}{}.{:0w$}", v.abs() / p, v.abs() % p, w = scale as usize)
}

#[test]
fn ronsql_answers_explains_and_refuses_like_rdrs2() {
    let (_dir, _node, addr) = start_node();
    let c = Client::connect(&addr).unwrap();
    setup(&c);
    let port = start_rest(&addr, RestOptions::default());
    let data = rows();

    // Per flag: COUNT(*), SUM(quantity), SUM(price * (1 - discount)) exactly, AVG(quantity).
    let q1 = "SELECT l_returnflag, COUNT(*) AS n, SUM(l_quantity), SUM(l_extendedprice * (1 - l_discount)) AS rev, AVG(l_quantity) FROM lineitem WHERE l_shipdate <= DATE '1992-01-01' GROUP BY l_returnflag ORDER BY l_returnflag;";
    let cutoff = 8035; // 1992-01-01 in days since 1970-01-01
    let mut expect_text = "l_returnflag\tn\tSUM(l_quantity)\trev\tAVG(l_quantity)\n".to_string();
    let mut expect_json = Vec::new();
    for flag in ["A", "N", "R"] {
        let sel: Vec<_> = data.iter().filter(|r| r.5 == flag && r.7 <= cutoff).collect();
        let n = sel.len() as i128;
        let qty: i128 = sel.iter().map(|r| r.2 as i128).sum();
        let rev: i128 = sel.iter().map(|r| r.3 as i128 * (100 - r.4 as i128)).sum();
        // AVG of DECIMAL(15,2): 6 fraction digits, rounded half away from zero.
        let avg = (qty * 10_000 * 10 / n + 5) / 10;
        expect_text.push_str(&format!("{flag}\t{n}\t{}\t{}\t{}\n", dec(qty, 2), dec(rev, 4), dec(avg, 6)));
        expect_json.push(format!(
            r#"{{"l_returnflag":"{flag}","n":{n},"SUM(l_quantity)":{},"rev":{},"AVG(l_quantity)":{}}}"#,
            dec(qty, 2),
            dec(rev, 4),
            dec(avg, 6)
        ));
    }
    let (st, head, body) = post(port, &req(q1, r#", "outputFormat": "TEXT""#));
    assert_eq!(st, 200, "{body}");
    assert!(head.contains("content-type: text/tab-separated-values; charset=utf-8; header=present"), "{head}");
    assert_eq!(body, expect_text);
    let (st, _, body) = post(port, &req(q1, r#", "outputFormat": "TEXT_NOHEADER""#));
    assert_eq!((st, body.as_str()), (200, expect_text.split_once('\n').unwrap().1));
    let (st, head, body) = post(port, &req(q1, r#", "operationId": "q1""#));
    assert_eq!(st, 200, "{body}");
    assert!(head.contains("content-type: application/json"), "{head}");
    assert_eq!(body, format!("{{\"operationId\": \"q1\",\n\"data\":\n[{}\n]\n}}\n", expect_json.join("\n,")));
    serde_json::from_str::<serde_json::Value>(&body).expect("valid JSON");

    // EXPLAIN: the index range, the program pushed to the data node, AVG merged by the API server.
    let (st, head, body) = post(port, &req(&format!("EXPLAIN {q1}"), r#", "outputFormat": "TEXT""#));
    assert_eq!(st, 200, "{body}");
    assert!(head.contains("content-type: text/plain"), "{head}");
    for want in [
        "Table: `tpch`.`lineitem`",
        "Execute as index scan.",
        "Index: `by_ship`(`l_shipdate`)",
        "`l_shipdate` <= '1992-01-01'",
        "Aggregation program pushed to every ldm",
        "G0 = `l_returnflag`",
        "SUM((`l_extendedprice` * (1 - `l_discount`)))",
        "`AVG(l_quantity)` = CLIENT-SIDE CALCULATION: A",
        "Output in mysql-style tab separated format.",
    ] {
        assert!(body.contains(want), "EXPLAIN lacks {want:?}:\n{body}");
    }
    // A function the data node cannot evaluate: aggregated by the API server, same answer shape.
    let (st, _, body) =
        post(port, &req("EXPLAIN SELECT SUM(ABS(l_discount)) FROM lineitem", r#", "outputFormat": "TEXT""#));
    assert_eq!(st, 200);
    assert!(body.contains("Aggregation by the API server"), "{body}");

    // Explain modes.
    let (st, _, body) =
        post(port, &req("SELECT COUNT(*) FROM lineitem", r#", "explainMode": "FORCE", "outputFormat": "TEXT""#));
    assert!(st == 200 && body.contains("Execute as table scan."), "{st} {body}");
    let (st, _, body) = post(
        port,
        &req("EXPLAIN SELECT COUNT(*) FROM lineitem", r#", "explainMode": "REMOVE", "outputFormat": "TEXT""#),
    );
    assert_eq!((st, body.as_str()), (200, "COUNT(*)\n600\n"));
    let (st, head, body) = post(port, &req("EXPLAIN SELECT COUNT(*) FROM lineitem", r#", "explainMode": "FORBID""#));
    assert_eq!(st, 400);
    assert!(head.contains("x-ronsql-error-class: semantic"), "{head}");
    assert_eq!(body, "[semantic] Caught exception: Tried to EXPLAIN with explain mode set to FORBID.\n");
    let (st, _, body) = post(port, &req("SELECT COUNT(*) FROM lineitem", r#", "explainMode": "REQUIRE""#));
    assert_eq!(
        (st, body.as_str()),
        (400, "[semantic] Caught exception: Tried to query with explain mode set to REQUIRE.\n")
    );
    let (st, _, body) = post(port, &req("EXPLAIN SELECT COUNT(*) FROM lineitem", ""));
    assert!(st == 400 && body.contains("JSON format for EXPLAIN output"), "{st} {body}");

    // Strings: JSON escapes, JSON_ASCII, TEXT's batch-mode escapes; an empty result.
    let q = "SELECT MAX(l_comment) FROM lineitem WHERE l_orderkey = 1";
    let (_, _, body) = post(port, &req(q, ""));
    assert_eq!(body, "{\"data\":\n[{\"MAX(l_comment)\":\"cmt \\\"9\\\"\\té\"}\n]\n}\n");
    let (_, head, body) = post(port, &req(q, r#", "outputFormat": "JSON_ASCII""#));
    assert!(head.contains("charset=us-ascii"), "{head}");
    assert_eq!(body, "{\"data\":\n[{\"MAX(l_comment)\":\"cmt \\\"9\\\"\\t\\u00e9\"}\n]\n}\n");
    let (_, _, body) = post(port, &req(q, r#", "outputFormat": "TEXT""#));
    assert_eq!(body, "MAX(l_comment)\ncmt \"9\"\\té\n");
    let empty = "SELECT l_linestatus, COUNT(*) FROM lineitem WHERE l_orderkey > 1000 GROUP BY l_linestatus";
    assert_eq!(post(port, &req(empty, r#", "outputFormat": "TEXT""#)).2, "");
    assert_eq!(post(port, &req(empty, "")).2, "{\"data\":\n[]\n}\n");
    // No GROUP BY over no rows: one row, as MySQL.
    let (_, _, body) = post(port, &req("SELECT COUNT(*), SUM(l_quantity) FROM lineitem WHERE l_orderkey > 1000", ""));
    assert_eq!(body, "{\"data\":\n[{\"COUNT(*)\":0,\"SUM(l_quantity)\":null}\n]\n}\n");

    // Error classes and statuses.
    for (q, status, class, text) in [
        ("SELEC COUNT(*) FROM lineitem", 400, "syntax", "Syntax error"),
        ("SELECT COUNT(*) FROM no_such_table", 400, "semantic", "Failed to get table"),
        ("SELECT COUNT(no_such_column) FROM lineitem", 400, "semantic", "Could not find column"),
        ("SELECT l_comment FROM lineitem", 400, "unsupported", "Not an aggregate query"),
        ("SELECT COUNT(*) FROM lineitem a, lineitem b", 400, "unsupported", "more than one table"),
        ("", 400, "syntax", "Empty input"),
    ] {
        let (st, head, body) = post(port, &req(q, ""));
        assert_eq!(st, status, "{q}: {body}");
        assert!(head.contains(&format!("x-ronsql-error-class: {class}")), "{q}: {head}");
        assert!(body.starts_with(&format!("[{class}] Caught exception: ")) && body.contains(text), "{q}: {body}");
    }
    // Validation (plain 400s, no class).
    for (body, text) in [
        (r#"{"query": "SELECT 1"}"#.to_string(), "Field validation for 'DB' failed on the 'min' tag"),
        (req("SELECT COUNT(*) FROM lineitem", r#", "explainMode": "allow""#), "Invalid explainMode"),
        (req("SELECT COUNT(*) FROM lineitem", r#", "outputFormat": "CSV""#), "Invalid outputFormat"),
        (
            req("SELECT COUNT(*) FROM lineitem", r#", "operationId": "x", "outputFormat": "TEXT""#),
            "operationId not supported with output format TEXT",
        ),
        (req("SELECT COUNT(*) FROM lineitem", r#", "bogus": 1"#), "Unexpected key 'bogus'"),
    ] {
        let (st, head, b) = post(port, &body);
        assert_eq!((st, b.as_str()), (400, text), "{body}");
        assert!(!head.contains("x-ronsql-error-class"), "{head}");
    }
    // Hostile input: deep nesting is a syntax error, the server answers the next request.
    let deep = format!("SELECT SUM({}l_quantity{}) FROM lineitem", "(".repeat(5000), ")".repeat(5000));
    let (st, _, _) = post(port, &req(&deep, ""));
    assert_eq!(st, 400);
    assert_eq!(post(port, &req("SELECT COUNT(*) FROM lineitem", "")).0, 200);
}
