//! The REST API through real HTTP on 127.0.0.1: a data node and the REST server in this process,
//! a minimal HTTP/1.1 client. Error texts are checked verbatim (interfaces.md §1.4).

use serde_json::{Value as Json, json};
use std::io::{Read, Write};
use std::time::Duration;
use tern_client::{Client, Column, ColumnType, DdlReq, Table, Value};
use tern_rest::config::RestOptions;

mod common;
use common::{start_node, start_rest};
use tern_runtime::DataNode;

/// Fields drop in this order: the data node stops before its directory is removed (a node
/// still writing into a removed directory stops the whole test process).
struct Env {
    client: Client,
    port: u16,
    _node: DataNode,
    _dir: tempfile::TempDir,
}

fn env() -> Env {
    let (dir, n, addr) = start_node();
    let client = Client::connect(&addr).unwrap();
    let port = start_rest(&addr, RestOptions { batch_max_size: 4, req_buffer_size: 4096, ..Default::default() });
    Env { _dir: dir, _node: n, client, port }
}

/// One request on a fresh connection; returns (status, body).
fn http(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    let mut r = Vec::new();
    s.read_to_end(&mut r).unwrap();
    let r = String::from_utf8(r).unwrap();
    let status: u16 = r[9..12].parse().unwrap();
    let body = r.split_once("\r\n\r\n").map(|x| x.1.to_string()).unwrap_or_default();
    (status, body)
}

fn post(port: u16, path: &str, body: Json) -> (u16, String) {
    http(port, "POST", path, &body.to_string())
}

fn setup_simple(e: &Env) {
    e.client.ddl(DdlReq::CreateDatabase { name: "db".into(), if_not_exists: true }).unwrap();
    let t = Table {
        id: 0,
        database: "db".into(),
        name: "t".into(),
        columns: vec![
            Column::new("id0", ColumnType::Int { unsigned: false }).not_null(),
            Column::new("id1", ColumnType::VarChar { len: 10 }).not_null(),
            Column::new("col0", ColumnType::VarChar { len: 100 }),
            Column::new("col1", ColumnType::Int { unsigned: false }),
        ],
        primary_key: vec![0, 1],
        partition_key: vec![0, 1],
        indexes: vec![],
        partition_count: 0,
        groups: 0,
        ttl: None,
        comment: String::new(),
    };
    e.client.ddl(DdlReq::CreateTable { table: t, if_not_exists: false }).unwrap();
    let h = e.client.table("db", "t").unwrap();
    let ops = (0..5)
        .map(|i| h.write(&[Value::Int(i), Value::str("k"), Value::str(&format!("v{i}")), Value::Int(i * 10)]).unwrap())
        .collect();
    e.client.blocking().execute(ops).unwrap();
}

fn key(id: i64) -> Json {
    json!([{"column": "id0", "value": id}, {"column": "id1", "value": "k"}])
}

#[test]
fn health_and_ping() {
    let e = env();
    assert_eq!(http(e.port, "GET", "/0.1.0/health", ""), (200, "1".into()));
    assert_eq!(http(e.port, "GET", "/0.1.0/ping", ""), (200, "".into()));
    let (st, body) = http(e.port, "GET", "/0.1.0/health", "x");
    assert_eq!(st, 400);
    assert!(body.contains("Health Request should be empty"), "{body}");
    let (st, body) = http(e.port, "GET", "/0.1.0/ping", "x");
    assert_eq!(st, 400);
    assert!(body.contains("Ping Request should be empty"), "{body}");
}

#[test]
fn pk_read_and_its_errors() {
    let e = env();
    setup_simple(&e);
    let p = e.port;
    let (st, body) = post(p, "/0.1.0/db/t/pk-read", json!({"filters": key(2), "operationId": "op7"}));
    assert_eq!(st, 200, "{body}");
    let v: Json = serde_json::from_str(&body).unwrap();
    assert_eq!(v, json!({"operationId": "op7", "data": {"col0": "v2", "col1": 20}}));
    let (st, body) = post(
        p,
        "/0.1.0/db/t/pk-read",
        json!({"filters": [{"column": "id0", "value": "3"}, {"column": "id1", "value": "k"}], "readColumns": [{"column": "col1", "dataReturnType": "default"}]}),
    );
    assert_eq!(st, 200);
    assert_eq!(serde_json::from_str::<Json>(&body).unwrap(), json!({"operationId": "", "data": {"col1": 30}}));
    let long_db = format!("/0.1.0/{}/t/pk-read", "d".repeat(65));
    let long_table = format!("/0.1.0/db/{}/pk-read", "t".repeat(65));
    let cases: Vec<(Json, &str, u16, &str)> = vec![
        (json!({"filters": key(99)}), "/0.1.0/db/t/pk-read", 404, "Not Found"),
        (
            json!({"filters": key(1)}),
            "/0.1.0/db/nope/pk-read",
            404,
            "Database/Table does not exist. Database: db Table: nope",
        ),
        (
            json!({"filters": key(1)}),
            "/0.1.0/nodb/t/pk-read",
            404,
            "Database/Table does not exist. Database: nodb Table: t",
        ),
        (
            json!({"filters": [{"column": "id0", "value": 1}]}),
            "/0.1.0/db/t/pk-read",
            400,
            "Wrong number of primary-key columns. Expecting: 2 Got: 1",
        ),
        (
            json!({"filters": [{"column": "id0", "value": 1}, {"column": "col0", "value": "x"}]}),
            "/0.1.0/db/t/pk-read",
            400,
            "Wrong primary-key column. Column: col0",
        ),
        (
            json!({"filters": key(1), "readColumns": [{"column": "nope"}]}),
            "/0.1.0/db/t/pk-read",
            400,
            "Column does not exist. Column: nope",
        ),
        (
            json!({"filters": [{"column": "id0", "value": "x"}, {"column": "id1", "value": "k"}]}),
            "/0.1.0/db/t/pk-read",
            400,
            "Wrong data type. Expecting INT. Column: id0",
        ),
        (
            json!({"filters": [{"column": "id0", "value": 1}, {"column": "id1", "value": "01234567890"}]}),
            "/0.1.0/db/t/pk-read",
            400,
            "Invalid column data. Data length is greater than column length",
        ),
        (json!({}), "/0.1.0/db/t/pk-read", 400, "The JSON field referenced does not exist in this object."),
        (json!({"filters": []}), "/0.1.0/db/t/pk-read", 400, "the Field section is empty"),
        (json!({"filters": null}), "/0.1.0/db/t/pk-read", 400, "the Field section is null"),
        (
            json!({"filters": [{"value": 1}]}),
            "/0.1.0/db/t/pk-read",
            400,
            "The JSON field referenced does not exist in this object.",
        ),
        (json!({"filters": [{"column": "id0"}]}), "/0.1.0/db/t/pk-read", 400, "a Column in the Field section is null"),
        (
            json!({"filters": [{"column": "id0", "value": null}]}),
            "/0.1.0/db/t/pk-read",
            400,
            "a Column in the Field section is null",
        ),
        (
            json!({"filters": [{"column": "x".repeat(65), "value": 1}]}),
            "/0.1.0/db/t/pk-read",
            400,
            "identifier is too large: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        ),
        (
            json!({"filters": [{"column": "id0", "value": 1}, {"column": "id0", "value": 2}]}),
            "/0.1.0/db/t/pk-read",
            400,
            "field validation for filter failed on the 'unique' tag: id0",
        ),
        (
            json!({"filters": key(1), "readColumns": [{"column": "id0"}]}),
            "/0.1.0/db/t/pk-read",
            400,
            "field validation for read columns failed. 'id0' already included in filter",
        ),
        (
            json!({"filters": key(1), "readColumns": [{"column": "col0"}, {"column": "col0"}]}),
            "/0.1.0/db/t/pk-read",
            400,
            "field validation for 'ReadColumns' failed on the 'unique' tag",
        ),
        (
            json!({"filters": key(1), "operationId": "x".repeat(257)}),
            "/0.1.0/db/t/pk-read",
            400,
            "operationId is invalid",
        ),
        (
            json!({"filters": key(1), "readColumns": [{"column": "col0", "dataReturnType": "other"}]}),
            "/0.1.0/db/t/pk-read",
            400,
            "default dataReturnType is the only supported",
        ),
        (json!({"filters": key(1)}), &long_db, 400, "Field validation for 'DB' failed on the 'max' tag"),
        (json!({"filters": key(1)}), &long_table, 400, "Field validation for 'Table' failed on the 'max' tag"),
    ];
    for (body, path, status, msg) in cases {
        let (st, got) = post(p, path, body.clone());
        assert_eq!(st, status, "{body} -> {got}");
        assert!(got.contains(msg), "{body}: expected '{msg}' in '{got}'");
    }
    // Malformed JSON and oversized bodies are client errors, not server errors.
    let (st, _) = http(p, "POST", "/0.1.0/db/t/pk-read", "{\"filters\": [");
    assert_eq!(st, 400);
    let (st, body) = http(p, "POST", "/0.1.0/db/t/pk-read", &"x".repeat(5000));
    assert_eq!(st, 400);
    assert!(body.contains("Request too large"), "{body}");
}

#[test]
fn batches_read_write_delete() {
    let e = env();
    setup_simple(&e);
    let p = e.port;
    let op = |db: &str, t: &str, id: i64, oid: &str| json!({"method": "POST", "relative-url": format!("{db}/{t}/pk-read"), "body": {"filters": key(id), "operationId": oid}});
    let (st, body) = post(
        p,
        "/0.1.0/batch",
        json!({"operations": [op("db", "t", 1, "a"), op("db", "t", 77, "b"), op("db", "missing", 1, "c"), op("db", "t", 4, "d")]}),
    );
    assert_eq!(st, 200, "{body}");
    let v: Json = serde_json::from_str(&body).unwrap();
    let r = v["result"].as_array().unwrap();
    assert_eq!(r.len(), 4);
    assert_eq!(r[0], json!({"code": 200, "body": {"operationId": "a", "data": {"col0": "v1", "col1": 10}}}));
    assert_eq!(r[1], json!({"code": 404, "message": "Not Found", "body": {"operationId": "b"}}));
    assert_eq!(r[2]["code"], 404);
    assert_eq!(r[3]["body"]["data"]["col1"], 40);
    let (st, body) = post(
        p,
        "/0.1.0/batch",
        json!({"operations": [op("db", "t", 1, "a"), op("db", "t", 1, "a"), op("db", "t", 1, "a"), op("db", "t", 1, "a"), op("db", "t", 1, "a")]}),
    );
    assert_eq!(st, 400);
    assert!(body.contains("Batch size exceeds maximum allowed size: 4"), "{body}");
    for (bad, msg) in [
        (
            json!({"method": null, "relative-url": "db/t/pk-read", "body": {"filters": key(1)}}),
            "the Method section should be POST",
        ),
        (json!({"method": "POST", "body": {"filters": key(1)}}), "the relativeUrl section is required"),
        (json!({"method": "POST", "relative-url": "db/t/pk-read"}), "Field validation for 'Body' failed"),
    ] {
        let (st, body) = post(p, "/0.1.0/batch", json!({"operations": [bad]}));
        assert_eq!(st, 400);
        assert!(body.contains(msg), "{body}");
    }
    // batchwrite: insert, update, write; then read back.
    let w = |kind: &str, id: i64, cols: Json| json!({"method": "POST", "relative-url": format!("db/t/{kind}"), "body": {"filters": key(id), "writeColumns": cols}});
    let (st, body) = post(
        p,
        "/0.1.0/batchwrite",
        json!({"operations": [
            w("pk-insert", 10, json!([{"column": "col0", "value": "ten"}, {"column": "col1", "value": 100}])),
            w("pk-update", 1, json!([{"column": "col1", "value": 11}])),
            w("pk-write", 2, json!([{"column": "col0", "value": null}])),
            w("pk-update", 55, json!([{"column": "col1", "value": 1}])),
        ]}),
    );
    assert_eq!(st, 200, "{body}");
    let v: Json = serde_json::from_str(&body).unwrap();
    let codes: Vec<i64> = v["result"].as_array().unwrap().iter().map(|r| r["code"].as_i64().unwrap()).collect();
    assert_eq!(codes, vec![200, 200, 200, 404]);
    let read =
        |id: i64| serde_json::from_str::<Json>(&post(p, "/0.1.0/db/t/pk-read", json!({"filters": key(id)})).1).unwrap();
    assert_eq!(read(10)["data"], json!({"col0": "ten", "col1": 100}));
    assert_eq!(read(1)["data"], json!({"col0": "v1", "col1": 11}));
    assert_eq!(read(2)["data"], json!({"col0": null, "col1": null}));
    // batchdelete: a missing row is 404 in its own sub-result; the others are deleted.
    let d = |id: i64| json!({"method": "POST", "relative-url": "db/t/pk-delete", "body": {"filters": key(id)}});
    let (st, body) = post(p, "/0.1.0/batchdelete", json!({"operations": [d(3), d(333)]}));
    assert_eq!(st, 200, "{body}");
    let v: Json = serde_json::from_str(&body).unwrap();
    assert_eq!(v["result"][0]["code"], 200);
    assert_eq!(v["result"][1]["code"], 404);
    assert_eq!(post(p, "/0.1.0/db/t/pk-read", json!({"filters": key(3)})).0, 404);
    // Metrics count what happened.
    let (st, m) = http(p, "GET", "/metrics", "");
    assert_eq!(st, 200);
    assert!(m.contains("tern_rest_requests_total{endpoint=\"pk-read\",status=\"200\"}"), "{m}");
    assert!(m.contains("tern_rest_request_duration_seconds_count{endpoint=\"batch\"}"), "{m}");
}

#[test]
fn every_type_encodes_as_mysql_prints_it() {
    let e = env();
    e.client.ddl(DdlReq::CreateDatabase { name: "types".into(), if_not_exists: true }).unwrap();
    use ColumnType as T;
    let cols = vec![
        ("k", T::Int { unsigned: false }),
        ("ti", T::TinyInt { unsigned: false }),
        ("tu", T::TinyInt { unsigned: true }),
        ("si", T::SmallInt { unsigned: false }),
        ("mi", T::MediumInt { unsigned: false }),
        ("bi", T::BigInt { unsigned: false }),
        ("bu", T::BigInt { unsigned: true }),
        ("f", T::Float),
        ("d", T::Double),
        ("de", T::Decimal { precision: 10, scale: 2, unsigned: false }),
        ("c", T::Char { len: 5 }),
        ("vc", T::VarChar { len: 20 }),
        ("b", T::Binary { len: 4 }),
        ("vb", T::VarBinary { len: 10 }),
        ("tx", T::Text),
        ("bl", T::Blob),
        ("dt", T::Date),
        ("tm", T::Time { fsp: 2 }),
        ("dtm", T::DateTime { fsp: 3 }),
        ("ts", T::Timestamp { fsp: 0 }),
        ("y", T::Year),
        ("bt", T::Bit { bits: 12 }),
        ("n", T::Int { unsigned: false }),
    ];
    let mut columns: Vec<Column> = cols.iter().map(|(n, t)| Column::new(n, *t)).collect();
    columns[0] = columns[0].clone().not_null();
    let t = Table {
        id: 0,
        database: "types".into(),
        name: "all".into(),
        columns,
        primary_key: vec![0],
        partition_key: vec![0],
        indexes: vec![],
        partition_count: 0,
        groups: 0,
        ttl: None,
        comment: String::new(),
    };
    e.client.ddl(DdlReq::CreateTable { table: t, if_not_exists: false }).unwrap();
    let h = e.client.table("types", "all").unwrap();
    let s = Value::str;
    let row = vec![
        Value::Int(1),
        Value::Int(-128),
        Value::UInt(255),
        Value::Int(-32768),
        Value::Int(8_388_607),
        Value::Int(i64::MIN),
        Value::UInt(u64::MAX),
        Value::Double(1234567.0),
        Value::Double(123.456789),
        s("123.4"),
        s("ab"),
        s("héllo  "),
        Value::Bytes(vec![1, 2]),
        Value::Bytes(vec![0xff, 0, 0xfe]),
        s(""),
        Value::Bytes(vec![]),
        s("2024-02-29"),
        s("-838:59:58.25"),
        s("1999-12-31 23:59:58.125"),
        s("2038-01-19 03:14:07"),
        Value::Int(2155),
        Value::UInt(0x0abc),
        Value::Null,
    ];
    e.client.blocking().execute(vec![h.write(&row).unwrap()]).unwrap();
    let (st, body) = post(e.port, "/0.1.0/types/all/pk-read", json!({"filters": [{"column": "k", "value": 1}]}));
    assert_eq!(st, 200, "{body}");
    // Compare raw text: number formats matter (123.40 stays 123.40, not 123.4).
    for frag in [
        r#""ti":-128"#,
        r#""tu":255"#,
        r#""si":-32768"#,
        r#""mi":8388607"#,
        r#""bi":-9223372036854775808"#,
        r#""bu":18446744073709551615"#,
        r#""f":1.23457e+06"#,
        r#""d":123.457"#,
        r#""de":123.40"#,
        r#""c":"ab""#,
        r#""vc":"héllo""#,
        r#""b":"AQIAAA==""#,
        r#""vb":"/wD+""#,
        r#""tx":"""#,
        r#""bl":"""#,
        r#""dt":"2024-02-29""#,
        r#""tm":"-838:59:58.25""#,
        r#""dtm":"1999-12-31 23:59:58.125""#,
        r#""ts":"2038-01-19 03:14:07""#,
        r#""y":2155"#,
        r#""bt":"Crw=""#,
        r#""n":null"#,
    ] {
        assert!(body.contains(frag), "missing {frag} in {body}");
    }
    // The same values work as keys where a key may have that type.
    e.client
        .ddl(DdlReq::CreateTable {
            table: Table {
                id: 0,
                database: "types".into(),
                name: "keys".into(),
                columns: vec![
                    Column::new("b", T::Binary { len: 4 }).not_null(),
                    Column::new("dtm", T::DateTime { fsp: 3 }).not_null(),
                    Column::new("de", T::Decimal { precision: 10, scale: 2, unsigned: false }).not_null(),
                    Column::new("bu", T::BigInt { unsigned: true }).not_null(),
                    Column::new("v", T::Int { unsigned: false }),
                ],
                primary_key: vec![0, 1, 2, 3],
                partition_key: vec![0, 1, 2, 3],
                indexes: vec![],
                partition_count: 0,
                groups: 0,
                ttl: None,
                comment: String::new(),
            },
            if_not_exists: false,
        })
        .unwrap();
    let k = e.client.table("types", "keys").unwrap();
    e.client
        .blocking()
        .execute(vec![
            k.write(&[
                Value::Bytes(vec![1, 2]),
                s("2000-01-01 00:00:00.5"),
                s("-0.5"),
                Value::UInt(u64::MAX),
                Value::Int(7),
            ])
            .unwrap(),
        ])
        .unwrap();
    let filters = json!([
        {"column": "b", "value": "AQI="},
        {"column": "dtm", "value": "2000-01-01 00:00:00.500"},
        {"column": "de", "value": "-0.50"},
        {"column": "bu", "value": "18446744073709551615"}
    ]);
    let (st, body) = post(e.port, "/0.1.0/types/keys/pk-read", json!({"filters": filters}));
    assert_eq!(st, 200, "{body}");
    assert_eq!(serde_json::from_str::<Json>(&body).unwrap()["data"], json!({"v": 7}));
}

#[test]
fn api_keys_when_switched_on() {
    let (dir, n, addr) = start_node();
    let client = Client::connect(&addr).unwrap();
    let e = Env { _dir: dir, _node: n, client: client.clone(), port: 0 };
    setup_simple(&e);
    let random: Vec<u8> = (0..64u8).collect();
    let api_key = tern_rest::apikey::create_key(&client, &["db".to_string()], &random).unwrap();
    let conf =
        tern_rest::config::RonDbConfig::parse(r#"{"Security": {"APIKey": {"UseHopsworksAPIKeys": true}}}"#).unwrap();
    let mut opts = RestOptions::from_config(&conf).unwrap();
    assert!(opts.api_keys);
    opts.listen = "127.0.0.1:0".parse().unwrap();
    // Four requests per key, then one per 100 s (the test ends long before).
    opts.key_rate_limit = Some(tern_rest::apikey::RateLimit { per_second: 0.01, burst: 4.0 });
    let (tx, rx) = std::sync::mpsc::channel();
    let rc = addr.clone();
    std::thread::spawn(move || {
        tern_rest::run(move || Client::connect(&rc).map_err(|e| e.to_string()), opts, |a| tx.send(a).unwrap()).unwrap()
    });
    let port = rx.recv_timeout(Duration::from_secs(10)).unwrap().port();
    let read = |k: Option<&str>, path: &str| {
        let body = json!({"filters": key(1)}).to_string();
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let header = k.map(|k| format!("X-API-KEY: {k}\r\n")).unwrap_or_default();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{header}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut r = String::new();
        s.read_to_string(&mut r).unwrap();
        (r[9..12].parse::<u16>().unwrap(), r)
    };
    let (st, r) = read(None, "/0.1.0/db/t/pk-read");
    assert_eq!(st, 400);
    assert!(r.contains("the apikey is nil"), "{r}");
    let (st, r) = read(Some("no-dot-here"), "/0.1.0/db/t/pk-read");
    assert_eq!(st, 400);
    assert!(r.contains("the apikey has an incorrect format"), "{r}");
    assert_eq!(read(Some(&api_key), "/0.1.0/db/t/pk-read").0, 200);
    let wrong_secret = format!("{}.wrong", api_key.split_once('.').unwrap().0);
    let (st, r) = read(Some(&wrong_secret), "/0.1.0/db/t/pk-read");
    assert_eq!(st, 401);
    assert!(r.contains("API key not authorized to access db"), "{r}");
    let (st, r) = read(Some(&api_key), "/0.1.0/other/t/pk-read");
    assert_eq!(st, 401);
    assert!(r.contains("API key not authorized to access other"), "{r}");
    // The rate limit per key: two of its four requests are left; a refused key spends none.
    assert_eq!(read(Some(&api_key), "/0.1.0/db/t/pk-read").0, 200);
    assert_eq!(read(Some(&api_key), "/0.1.0/db/t/pk-read").0, 200);
    let (st, r) = read(Some(&api_key), "/0.1.0/db/t/pk-read");
    assert_eq!(st, 429, "{r}");
    assert!(r.contains("API key rate limit exceeded"), "{r}");
    let random2: Vec<u8> = (100..164u8).collect();
    let other_key = tern_rest::apikey::create_key(&client, &["db".to_string()], &random2).unwrap();
    assert_eq!(read(Some(&other_key), "/0.1.0/db/t/pk-read").0, 200, "each key has its own bucket");
    // Health and ping need no key; Tern's own key table is not reachable.
    assert_eq!(http(port, "GET", "/0.1.0/health", ""), (200, "1".into()));
    // With keys off (the default) no header is needed.
    assert_eq!(post(e_port_default(&addr), "/0.1.0/db/t/pk-read", json!({"filters": key(1)})).0, 200);
}

fn e_port_default(addr: &str) -> u16 {
    let rc = addr.to_string();
    let opts = RestOptions { listen: "127.0.0.1:0".parse().unwrap(), ..Default::default() };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        tern_rest::run(move || Client::connect(&rc).map_err(|e| e.to_string()), opts, |a| tx.send(a).unwrap()).unwrap()
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap().port()
}

#[test]
fn every_key_type_and_edge_value_through_filters() {
    let e = env();
    e.client.ddl(DdlReq::CreateDatabase { name: "keys".into(), if_not_exists: true }).unwrap();
    use ColumnType as T;
    let s = Value::str;
    // (type, stored key, the filter value a client sends)
    let cases: Vec<(ColumnType, Value, Json)> = vec![
        (T::TinyInt { unsigned: false }, Value::Int(-128), json!(-128)),
        (T::TinyInt { unsigned: false }, Value::Int(127), json!("127")),
        (T::TinyInt { unsigned: true }, Value::UInt(255), json!(255)),
        (T::SmallInt { unsigned: false }, Value::Int(-32768), json!(-32768)),
        (T::SmallInt { unsigned: true }, Value::UInt(65535), json!(65535)),
        (T::MediumInt { unsigned: false }, Value::Int(-8_388_608), json!(-8388608)),
        (T::MediumInt { unsigned: true }, Value::UInt(16_777_215), json!(16777215)),
        (T::Int { unsigned: false }, Value::Int(i32::MIN as i64), json!(i32::MIN)),
        (T::Int { unsigned: true }, Value::UInt(u32::MAX as u64), json!(u32::MAX)),
        (T::BigInt { unsigned: false }, Value::Int(i64::MIN), json!(i64::MIN)),
        (T::BigInt { unsigned: false }, Value::Int(i64::MAX), json!(i64::MAX.to_string())),
        (T::BigInt { unsigned: true }, Value::UInt(u64::MAX), json!(u64::MAX)),
        (
            T::Decimal { precision: 38, scale: 5, unsigned: false },
            s("-123456789012345678901234567890123.12345"),
            json!("-123456789012345678901234567890123.12345"),
        ),
        (T::Char { len: 3 }, s("ab"), json!("ab")),
        (T::VarChar { len: 5 }, s(""), json!("")),
        (T::VarChar { len: 5 }, s("ééééé"), json!("ééééé")),
        (T::Binary { len: 3 }, Value::Bytes(vec![0, 0, 1]), json!("AAAB")),
        (T::VarBinary { len: 4 }, Value::Bytes(vec![0xff; 4]), json!("/////w==")),
        (T::Date, s("1000-01-01"), json!("1000-01-01")),
        (T::Date, s("9999-12-31"), json!("9999-12-31")),
        (T::DateTime { fsp: 6 }, s("9999-12-31 23:59:59.999999"), json!("9999-12-31 23:59:59.999999")),
        (T::Time { fsp: 0 }, s("-838:59:59"), json!("-838:59:59")),
        (T::Timestamp { fsp: 0 }, s("1970-01-01 00:00:01"), json!("1970-01-01 00:00:01")),
        (T::Timestamp { fsp: 0 }, s("2038-01-19 03:14:07"), json!("2038-01-19 03:14:07")),
        (T::Year, Value::Int(1901), json!(1901)),
    ];
    for (i, (ty, stored, filter)) in cases.into_iter().enumerate() {
        let name = format!("k{i}");
        let t = Table {
            id: 0,
            database: "keys".into(),
            name: name.clone(),
            columns: vec![Column::new("k", ty).not_null(), Column::new("v", ColumnType::Int { unsigned: false })],
            primary_key: vec![0],
            partition_key: vec![0],
            indexes: vec![],
            partition_count: 0,
            groups: 0,
            ttl: None,
            comment: String::new(),
        };
        e.client.ddl(DdlReq::CreateTable { table: t, if_not_exists: false }).unwrap();
        let h = e.client.table("keys", &name).unwrap();
        e.client.blocking().execute(vec![h.write(&[stored.clone(), Value::Int(i as i64)]).unwrap()]).unwrap();
        let (st, body) = post(
            e.port,
            &format!("/0.1.0/keys/{name}/pk-read"),
            json!({"filters": [{"column": "k", "value": filter}]}),
        );
        assert_eq!(st, 200, "{ty:?} {stored:?}: {body}");
        assert_eq!(serde_json::from_str::<Json>(&body).unwrap()["data"]["v"], json!(i), "{ty:?}");
    }
    // Out of range, wrong type, bad dates: 400 with RonDB's text, never a server error.
    let t0 = "/0.1.0/keys/k0/pk-read";
    for (v, msg) in [
        (json!(128), "Wrong data type. Expecting TINYINT. Column: k"),
        (json!("abc"), "Wrong data type. Expecting TINYINT. Column: k"),
        (json!(1.5), "Wrong data type. Expecting TINYINT. Column: k"),
        (json!("99999999999999999999999999"), "Wrong data type. Expecting TINYINT. Column: k"),
        (json!([1]), "Wrong data type. Expecting TINYINT. Column: k"),
    ] {
        let (st, body) = post(e.port, t0, json!({"filters": [{"column": "k", "value": v}]}));
        assert_eq!(st, 400, "{v}: {body}");
        assert!(body.contains(msg), "{v}: {body}");
    }
    let (st, body) =
        post(e.port, "/0.1.0/keys/k18/pk-read", json!({"filters": [{"column": "k", "value": "2023-02-29"}]}));
    assert_eq!((st, body.contains("Invalid Date/Time.")), (400, true), "{body}");
    let (st, body) =
        post(e.port, "/0.1.0/keys/k22/pk-read", json!({"filters": [{"column": "k", "value": "1960-01-01 00:00:00"}]}));
    assert_eq!((st, body.contains("Invalid Date/Time.")), (400, true), "{body}");
    let (st, body) =
        post(e.port, "/0.1.0/keys/k16/pk-read", json!({"filters": [{"column": "k", "value": "not base64!"}]}));
    assert_eq!((st, body.contains("Invalid column data.")), (400, true), "{body}");
    // Identifiers.
    let (st, body) = post(e.port, "/0.1.0//k0/pk-read", json!({"filters": [{"column": "k", "value": 1}]}));
    assert_eq!((st, body.contains("Field validation for 'DB' failed on the 'min' tag")), (400, true), "{body}");
    let (st, body) = post(e.port, "/0.1.0/keys/k%00/pk-read", json!({"filters": [{"column": "k", "value": 1}]}));
    assert_eq!((st, body.as_str()), (400, "table name contains invalid characters"));
    // 40 two-byte characters: within the 64-character field limit, over the 64-byte identifier limit.
    let wide = "\u{e9}".repeat(40);
    let (st, body) = post(e.port, "/0.1.0/keys/k0/pk-read", json!({"filters": [{"column": wide, "value": 1}]}));
    assert_eq!((st, body.contains("identifier is too large")), (400, true), "{body}");
    let (st, body) = post(
        e.port,
        "/0.1.0/keys/k0/pk-read",
        json!({"filters": [{"column": "k", "value": 1}], "readColumns": [{"column": "\u{e9}".repeat(65)}]}),
    );
    assert_eq!((st, body.contains("identifier is too large: \u{e9}")), (400, true), "{body}");
}

#[test]
fn keep_alive_pipelining_and_bad_bytes() {
    let e = env();
    setup_simple(&e);
    // Two requests in one write on one connection: two responses, in order.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", e.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = json!({"filters": key(1)}).to_string();
    let one = format!("POST /0.1.0/db/t/pk-read HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    let last = "GET /0.1.0/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    s.write_all(format!("{one}{one}{last}").as_bytes()).unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    assert_eq!(r.matches("HTTP/1.1 200").count(), 3, "{r}");
    assert_eq!(r.matches("\"col0\":\"v1\"").count(), 2, "{r}");
    // Invalid UTF-8, wrong JSON types: 400, and the server goes on.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", e.port)).unwrap();
    let bad = b"{\"filters\": [{\"column\": \"id0\", \"value\": \"\xff\xfe\"}]}";
    write!(
        s,
        "POST /0.1.0/db/t/pk-read HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        bad.len()
    )
    .unwrap();
    s.write_all(bad).unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    for body in [
        json!({"filters": "x"}),
        json!([1, 2]),
        json!({"filters": [1]}),
        json!({"filters": key(1), "readColumns": "x"}),
    ] {
        let (st, got) = post(e.port, "/0.1.0/db/t/pk-read", body.clone());
        assert_eq!(st, 400, "{body}: {got}");
    }
    let (st, _) = post(e.port, "/0.1.0/batch", json!({"operations": "x"}));
    assert_eq!(st, 400);
    assert_eq!(http(e.port, "GET", "/0.1.0/health", ""), (200, "1".into()));
}

#[test]
fn data_node_gone_is_a_server_error_not_a_crash() {
    // (Not when the front end runs on the node's worker: it stops with the node.)
    if tern_client::hosted::test_hosted() {
        return;
    }
    let e = env();
    setup_simple(&e);
    let Env { _dir, _node, client, port } = e;
    drop(client);
    _node.kill();
    let (st, body) = post(port, "/0.1.0/db/t/pk-read", json!({"filters": key(1)}));
    assert!(st == 500 || st == 503, "{st}: {body}");
    assert!(body.contains("data node"), "{body}");
    // The REST server itself still answers.
    assert_eq!(http(port, "GET", "/0.1.0/ping", ""), (200, "".into()));
}

/// One-key table `db.name` whose key column `k` has type `ty`, plus an INT column `v`.
fn key_table(e: &Env, db: &str, name: &str, ty: ColumnType) -> tern_client::TableHandle {
    e.client.ddl(DdlReq::CreateDatabase { name: db.into(), if_not_exists: true }).unwrap();
    let t = Table {
        id: 0,
        database: db.into(),
        name: name.into(),
        columns: vec![Column::new("k", ty).not_null(), Column::new("v", ColumnType::Int { unsigned: false })],
        primary_key: vec![0],
        partition_key: vec![0],
        indexes: vec![],
        partition_count: 0,
        groups: 0,
        ttl: None,
        comment: String::new(),
    };
    e.client.ddl(DdlReq::CreateTable { table: t, if_not_exists: false }).unwrap();
    e.client.table(db, name).unwrap()
}

/// Behaviours where RonDB's own REST test suite found Tern different from rdrs2 (issue 10); the
/// texts are rdrs2's (`json_parser.cpp`, `pk_data_structs.cpp`, `db_operations/pk/common.cpp`).
#[test]
fn rondb_compatibility() {
    let e = env();
    setup_simple(&e);
    let p = e.port;
    // An empty, null or missing operations list.
    for path in ["/0.1.0/batch", "/0.1.0/batchwrite", "/0.1.0/batchdelete"] {
        for body in [json!({"operations": []}), json!({"operations": null}), json!({})] {
            assert_eq!(post(p, path, body), (400, "No operations defined".into()), "{path}");
        }
    }
    // Missing and null sections.
    let w = |op: Json| json!({"operations": [op]});
    let cases: Vec<(&str, Json, &str)> = vec![
        ("/0.1.0/db/t/pk-read", json!({"filters": null}), "the Field section is null"),
        ("/0.1.0/db/t/pk-read", json!({"filters": []}), "the Field section is empty"),
        (
            "/0.1.0/batchwrite",
            w(json!({"method": null, "relative-url": "db/t/pk-write", "body": {}})),
            "the Method section should be POST",
        ),
        ("/0.1.0/batchdelete", w(json!({"method": "POST", "body": {}})), "the relativeUrl section is required"),
        (
            "/0.1.0/batch",
            w(json!({"method": "POST", "relative-url": null, "body": {}})),
            "the relativeUrl section is required",
        ),
        (
            "/0.1.0/batch",
            w(json!({"method": "POST", "relative-url": "db/t/pk-read"})),
            "Field validation for 'Body' failed",
        ),
        (
            "/0.1.0/batch",
            w(json!({"method": "POST", "relative-url": "db/t/pk-read", "body": {"filters": null}})),
            "the Field section is null",
        ),
        (
            "/0.1.0/batchwrite",
            w(json!({"method": "POST", "relative-url": "db/t/pk-write", "body": {"filters": null}})),
            "the filters section is null",
        ),
        (
            "/0.1.0/batchwrite",
            w(
                json!({"method": "POST", "relative-url": "db/t/pk-write", "body": {"filters": key(1), "writeColumns": null}}),
            ),
            "the writeColumns section is null",
        ),
        (
            "/0.1.0/batchdelete",
            w(json!({"method": "POST", "relative-url": "db/t/pk-delete", "body": {"filters": null}})),
            "the Field section is null",
        ),
        (
            "/0.1.0/batchdelete",
            w(json!({"method": "POST", "relative-url": "db/t/pk-read", "body": {"filters": key(1)}})),
            "Field validation for 'RelativeURL' failed",
        ),
        (
            "/0.1.0/batch",
            w(json!({"method": "POST", "relative-url": "t/pk-read", "body": {}})),
            "Field validation for 'RelativeURL' failed",
        ),
        (
            "/0.1.0/db/t/pk-read",
            json!({"filters": [{"column": format!("col{}", "1234567890".repeat(6) + "12"), "value": 1}]}),
            "identifier is too large: col12345678901234567890123456789012345678901234567890123456789012",
        ),
        (
            "/0.1.0/db/t/pk-read",
            json!({"filters": key(1), "readColumns": [{"column": "id1"}]}),
            "field validation for read columns failed. 'id1' already included in filter",
        ),
    ];
    for (path, body, msg) in cases {
        assert_eq!(post(p, path, body.clone()), (400, msg.to_string()), "{path} {body}");
    }
    // A wrong operation inside batchwrite names the allowed ones.
    let (st, body) = post(
        p,
        "/0.1.0/batchwrite",
        w(json!({"method": "POST", "relative-url": "db/t/pk-read", "body": {"filters": key(1), "writeColumns": []}})),
    );
    assert_eq!(st, 400);
    assert!(body.contains("pk-write, pk-update, or pk-insert"), "{body}");
    // A DATETIME string for a DATE key: 400 unless its time part is zero.
    let d = key_table(&e, "compat", "dates", ColumnType::Date);
    e.client.blocking().execute(vec![d.write(&[Value::str("1111-11-11"), Value::Int(1)]).unwrap()]).unwrap();
    let read = |table: &str, k: &str| {
        post(p, &format!("/0.1.0/compat/{table}/pk-read"), json!({"filters": [{"column": "k", "value": k}]}))
    };
    assert_eq!(read("dates", "1111-11-11 00:00:00").0, 200);
    assert_eq!(
        read("dates", "1111-11-11 11:11:11"),
        (400, "Invalid column data. Expecting only date data. Column: k".into())
    );
    // A '-' before the time part of a DATETIME(6) / TIMESTAMP(6) is skipped.
    for (name, ty, stored) in [
        ("dt6", ColumnType::DateTime { fsp: 6 }, "1111-11-11 11:11:11.123456"),
        ("ts6", ColumnType::Timestamp { fsp: 6 }, "2011-11-11 11:11:11.123456"),
    ] {
        let h = key_table(&e, "compat", name, ty);
        e.client.blocking().execute(vec![h.write(&[Value::str(stored), Value::Int(7)]).unwrap()]).unwrap();
        let dashed = stored.replacen(' ', " -", 1);
        let (st, body) = read(name, &dashed);
        assert_eq!(st, 200, "{name} {dashed}: {body}");
        assert_eq!(serde_json::from_str::<Json>(&body).unwrap()["data"]["v"], 7);
    }
    // A negative value for a DECIMAL UNSIGNED key is refused by name.
    key_table(&e, "compat", "udec", ColumnType::Decimal { precision: 10, scale: 2, unsigned: true });
    assert_eq!(read("udec", "-1.5"), (400, "Wrong data type. Expecting DECIMAL UNSIGNED. Column: k".into()));
    assert_eq!(read("udec", "1.5"), (404, "Not Found".into()));
    // A 3,000-byte VARBINARY key mostly of zero bytes is within the 4,096-byte key limit (zero
    // bytes once counted twice, in the key's sortable encoding).
    let vb = key_table(&e, "compat", "zeros", ColumnType::VarBinary { len: 3000 });
    let mut zeros = vec![0u8; 3000];
    zeros[2999] = 7;
    e.client.blocking().execute(vec![vb.write(&[Value::Bytes(zeros.clone()), Value::Int(3)]).unwrap()]).unwrap();
    let mut b64 = String::new();
    tern_types::base64::base64_encode(&zeros, &mut b64);
    let (st, body) = read("zeros", &b64);
    assert_eq!(st, 200, "{body}");
    assert_eq!(serde_json::from_str::<Json>(&body).unwrap()["data"]["v"], 3);
    // Failed sub-operations carry a message beside their code.
    let op = |t: &str, id: i64| json!({"method": "POST", "relative-url": format!("db/{t}/pk-read"), "body": {"filters": key(id)}});
    let (st, body) = post(p, "/0.1.0/batch", json!({"operations": [op("t", 1), op("t", 99), op("missing", 1)]}));
    assert_eq!(st, 200, "{body}");
    let v: Json = serde_json::from_str(&body).unwrap();
    assert!(v["result"][0].get("message").is_none(), "{body}");
    for r in &v["result"].as_array().unwrap()[1..] {
        assert!(r["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    }
    assert_eq!(v["result"][2]["message"], "Database/Table does not exist. Database: db Table: missing");
    let (_, body) = post(
        p,
        "/0.1.0/batchwrite",
        w(
            json!({"method": "POST", "relative-url": "db/t/pk-update", "body": {"filters": key(77), "writeColumns": [{"column": "col1", "value": 1}]}}),
        ),
    );
    let v: Json = serde_json::from_str(&body).unwrap();
    assert_eq!(v["result"][0]["code"], 404, "{body}");
    assert_eq!(v["result"][0]["message"], "Not Found", "{body}");
    // batchdelete with rdrs2's method, DELETE.
    let (st, body) = http(
        p,
        "DELETE",
        "/0.1.0/batchdelete",
        &w(json!({"method": "POST", "relative-url": "db/t/pk-delete", "body": {"filters": key(4)}})).to_string(),
    );
    assert_eq!(st, 200, "{body}");
    assert_eq!(serde_json::from_str::<Json>(&body).unwrap()["result"][0]["code"], 200);
    assert_eq!(http(p, "GET", "/0.1.0/batch", "").0, 405);
}

/// API version 0.2.0: the same endpoints, errors as JSON.
#[test]
fn api_version_0_2_0() {
    let e = env();
    setup_simple(&e);
    let p = e.port;
    assert_eq!(http(p, "GET", "/0.2.0/ping", ""), (200, "".into()));
    assert_eq!(http(p, "GET", "/0.2.0/health", ""), (200, "1".into()));
    let (st, body) = post(p, "/0.2.0/db/t/pk-read", json!({"filters": key(2)}));
    assert_eq!((st, serde_json::from_str::<Json>(&body).unwrap()["data"]["col1"].clone()), (200, json!(20)));
    let (st, body) = post(p, "/0.2.0/db/t/pk-read", json!({"filters": null}));
    assert_eq!(st, 400);
    assert_eq!(
        serde_json::from_str::<Json>(&body).unwrap(),
        json!({"error": {"code": 400, "message": "the Field section is null", "status": -1, "classification": -1, "ndbCode": -1, "mysqlCode": -1}})
    );
    let (st, body) = post(p, "/0.2.0/db/t/pk-read", json!({"filters": key(99)}));
    assert_eq!(st, 404);
    assert_eq!(serde_json::from_str::<Json>(&body).unwrap()["error"]["message"], "Not Found");
    let op = json!({"method": "POST", "relative-url": "db/t/pk-read", "body": {"filters": key(1)}});
    assert_eq!(
        serde_json::from_str::<Json>(&post(p, "/0.2.0/batch", json!({"operations": [op]})).1).unwrap()["result"][0]["code"],
        200
    );
    let (st, body) = post(p, "/0.2.0/batchwrite", json!({"operations": []}));
    assert_eq!(
        (st, serde_json::from_str::<Json>(&body).unwrap()["error"]["message"].clone()),
        (400, json!("No operations defined"))
    );
    let (st, body) = http(p, "DELETE", "/0.2.0/batchdelete", &json!({"operations": []}).to_string());
    assert_eq!((st, serde_json::from_str::<Json>(&body).unwrap()["error"]["code"].clone()), (400, json!(400)));
}
