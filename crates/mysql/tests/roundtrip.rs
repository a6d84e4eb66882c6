//! Type round trip: for every column type, values inserted through SQL read back identically
//! through SQL (text protocol), the native client, and the REST API (whose encoding of a value
//! equals the text-protocol output; binary columns are base64 there).

mod common;

use common::{My, Res, start};
use std::io::{Read, Write};
use std::time::Duration;
use tern_client::Client;
use tern_mysql::proto;
use tern_types::Value;

/// The `data` object of a pk-read answer, each value as its raw JSON text.
fn rest_pk_read(port: u16, db: &str, table: &str, id: i64) -> std::collections::HashMap<String, String> {
    let body = serde_json::json!({"filters": [{"column": "id", "value": id}]}).to_string();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "POST /0.1.0/{db}/{table}/pk-read HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let json = &r[r.find("\r\n\r\n").unwrap() + 4..];
    #[derive(serde::Deserialize)]
    struct Answer {
        data: std::collections::HashMap<String, Box<serde_json::value::RawValue>>,
    }
    let a: Answer = serde_json::from_str(json).unwrap();
    a.data.into_iter().map(|(k, v)| (k, v.get().to_string())).collect()
}

#[test]
fn every_type_reads_back_the_same_through_sql_rest_and_native() {
    let (_d, node, port) = start(64 << 20);
    let addr = node.local_addr().to_string();
    let rest_port = {
        let (tx, rx) = std::sync::mpsc::channel();
        let a = addr.clone();
        let opts = tern_rest::config::RestOptions { listen: "127.0.0.1:0".parse().unwrap(), ..Default::default() };
        std::thread::spawn(move || {
            tern_rest::run(move || Client::connect(&a).map_err(|e| e.to_string()), opts, |x| tx.send(x).unwrap())
                .unwrap()
        });
        rx.recv_timeout(Duration::from_secs(20)).unwrap().port()
    };
    // (column type, SQL literal, text the server prints, binary column?)
    let cases: &[(&str, &str, &str, bool)] = &[
        ("TINYINT", "-128", "-128", false),
        ("TINYINT UNSIGNED", "255", "255", false),
        ("SMALLINT", "-32768", "-32768", false),
        ("SMALLINT UNSIGNED", "65535", "65535", false),
        ("MEDIUMINT", "-8388608", "-8388608", false),
        ("INT", "2147483647", "2147483647", false),
        ("INT UNSIGNED", "4294967295", "4294967295", false),
        ("BIGINT", "-9223372036854775808", "-9223372036854775808", false),
        ("BIGINT UNSIGNED", "18446744073709551615", "18446744073709551615", false),
        ("FLOAT", "1.5", "1.5", false),
        ("DOUBLE", "-2.25", "-2.25", false),
        ("DECIMAL(12,3)", "-123456789.125", "-123456789.125", false),
        ("DECIMAL(5,2)", "7", "7.00", false),
        ("CHAR(5)", "'ab'", "ab", false),
        ("VARCHAR(20)", "'héllo wörld'", "héllo wörld", false),
        ("TEXT", "'some ''quoted'' text'", "some 'quoted' text", false),
        ("BINARY(4)", "X'0102'", "\u{1}\u{2}\0\0", true),
        ("VARBINARY(8)", "X'00FF10'", "\0\u{FF}\u{10}", true),
        ("BLOB", "X'DEADBEEF'", "\u{DE}\u{AD}\u{BE}\u{EF}", true),
        ("DATE", "'2024-02-29'", "2024-02-29", false),
        ("TIME", "'-12:34:56'", "-12:34:56", false),
        ("DATETIME", "'2024-02-29 23:59:58'", "2024-02-29 23:59:58", false),
        ("DATETIME(6)", "'1999-12-31 23:59:59.123456'", "1999-12-31 23:59:59.123456", false),
        ("TIMESTAMP(3)", "'2024-01-02 03:04:05.678'", "2024-01-02 03:04:05.678", false),
        ("YEAR", "2155", "2155", false),
        ("BIT(10)", "b'1010101010'", "\u{2}\u{AA}", true),
    ];
    let (mut m, _) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    assert_eq!(m.query("CREATE DATABASE rt"), Res::Ok);
    assert_eq!(m.query("USE rt"), Res::Ok);
    let cols: Vec<String> = cases.iter().enumerate().map(|(i, (t, ..))| format!("c{i} {t}")).collect();
    assert_eq!(m.query(&format!("CREATE TABLE t (id INT PRIMARY KEY, {})", cols.join(", "))), Res::Ok);
    let lits: Vec<&str> = cases.iter().map(|c| c.1).collect();
    assert_eq!(m.query(&format!("INSERT INTO t VALUES (1, {})", lits.join(", "))), Res::Ok);
    assert_eq!(m.query("INSERT INTO t (id) VALUES (2)"), Res::Ok);
    // 1. SQL, text protocol (raw bytes, so binary values compare exactly).
    let Res::Rows(_, rows) = m.query("SELECT * FROM t ORDER BY id") else { panic!("select") };
    let latin = |s: &str| -> Vec<u8> { s.chars().map(|c| c as u32 as u8).collect() };
    for (i, (t, _, text, binary)) in cases.iter().enumerate() {
        let got = rows[0][i + 1].clone().unwrap_or_default();
        let want = if *binary { String::from_utf8_lossy(&latin(text)).into_owned() } else { text.to_string() };
        assert_eq!(got, want, "SQL text of {t}");
        assert_eq!(rows[1][i + 1], None, "NULL {t}");
    }
    // 2. Native client: the stored values, and their text form equals SQL's.
    let client = Client::connect(&addr).unwrap();
    let h = client.table("rt", "t").unwrap();
    let op = h.read(&[Value::Int(1)]).unwrap();
    let res = client.blocking().execute(vec![op]).unwrap();
    let tern_client::OpResult::Row(b) = &res[0] else { panic!("native read") };
    let values = h.decode_row(b).unwrap();
    for (i, (t, _, text, binary)) in cases.iter().enumerate() {
        let v = &values[i + 1];
        if t.starts_with("BIT") {
            let bits = latin(text).iter().fold(0u64, |a, b| (a << 8) | *b as u64);
            assert_eq!(v, &Value::Bit(bits), "native {t}");
        } else if *binary {
            assert_eq!(v, &Value::Bytes(latin(text)), "native {t}");
        } else {
            let ty = h.table.columns[i + 1].ty;
            let shown = match v {
                Value::Double(d) => tern_mysql::sql::eval::double_text(*d),
                other => other.to_text(ty).unwrap(),
            };
            assert_eq!(shown, *text, "native {t}");
        }
    }
    // 3. REST: same values (strings as JSON strings, numbers as JSON numbers, binary base64).
    let data = rest_pk_read(rest_port, "rt", "t", 1);
    for (i, (t, _, text, binary)) in cases.iter().enumerate() {
        let raw = &data[&format!("c{i}")];
        let shown = if raw.starts_with('"') {
            let s: String = serde_json::from_str(raw).unwrap();
            if *binary {
                assert_eq!(tern_types::base64::base64_decode(&s).expect("base64"), latin(text), "REST {t}");
                continue;
            }
            s
        } else {
            raw.clone()
        };
        assert_eq!(shown, *text, "REST {t}");
    }
    let data = rest_pk_read(rest_port, "rt", "t", 2);
    for (i, (t, ..)) in cases.iter().enumerate() {
        assert_eq!(data[&format!("c{i}")], "null", "REST NULL {t}");
    }
}
