//! The MySQL front end's session basics over real sockets: handshake (with a database, with an
//! auth switch), authentication errors, the statements clients send first, DDL of databases,
//! errors with MySQL's errno/SQLSTATE, and bad packets.

use std::io::Write;
mod common;

use common::{My, Res, rows, start};
use tern_mysql::proto;

#[test]
fn handshake_session_statements_and_errors() {
    let (_d, _n, port) = start(1 << 20);
    for eof_deprecated in [true, false] {
        let (mut m, r) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, eof_deprecated);
        assert_eq!(r, Res::Ok);
        assert_eq!(
            m.query("SELECT @@version_comment LIMIT 1"),
            Res::Rows(vec!["@@version_comment".into()], rows(&[&[Some("Tern")]]))
        );
        assert_eq!(m.query("select database()"), Res::Rows(vec!["database()".into()], rows(&[&[None]])));
        assert_eq!(m.command(proto::com::PING, b""), Res::Ok);
    }
    let (mut m, _) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    assert_eq!(m.query("CREATE DATABASE shop"), Res::Ok);
    assert!(matches!(m.query("CREATE DATABASE shop"), Res::Err(1007, ..)));
    assert_eq!(m.query("create database if not exists shop;"), Res::Ok);
    let Res::Rows(_, dbs) = m.query("SHOW DATABASES") else { panic!("SHOW DATABASES") };
    assert!(
        dbs.contains(&vec![Some("shop".to_string())]) && dbs.contains(&vec![Some("information_schema".to_string())])
    );
    assert!(matches!(m.query("SHOW TABLES"), Res::Err(1046, ..)));
    assert_eq!(m.query("USE `shop`"), Res::Ok);
    assert_eq!(m.query("SELECT DATABASE()"), Res::Rows(vec!["DATABASE()".into()], rows(&[&[Some("shop")]])));
    assert_eq!(m.query("SHOW TABLES"), Res::Rows(vec!["Tables_in_shop".into()], vec![]));
    assert_eq!(m.query("SET NAMES utf8mb4"), Res::Ok);
    assert_eq!(m.query("SET autocommit=1"), Res::Ok);
    assert_eq!(m.query("SELECT 42"), Res::Rows(vec!["42".into()], rows(&[&[Some("42")]])));
    let Res::Err(errno, state, msg) = m.query("SELECT * FROM items") else { panic!("unknown table") };
    assert_eq!((errno, state.as_str(), msg.as_str()), (1146, "42S02", "Table 'shop.items' doesn't exist"));
    let Res::Err(errno, state, msg) = m.query("CREATE TRIGGER t BEFORE INSERT ON x FOR EACH ROW SET @a = 1") else {
        panic!("unsupported statement")
    };
    assert_eq!(
        (errno, state.as_str(), msg.as_str()),
        (1235, "42000", "This version of Tern doesn't yet support 'CREATE TRIGGER'")
    );
    assert!(matches!(m.query(""), Res::Err(1065, ..)));
    assert!(matches!(m.command(proto::com::INIT_DB, b"nope"), Res::Err(1049, ..)));
    assert!(matches!(m.command(0x77, b""), Res::Err(1047, ..)));
    m.send(0, &[proto::com::FIELD_LIST, b'x', 0]);
    assert_eq!(m.packet().unwrap().1[0], 0xFE, "COM_FIELD_LIST ends with EOF");
    m.send(0, &[proto::com::SET_OPTION, 1, 0]);
    assert_eq!(m.packet().unwrap().1[0], 0xFE, "COM_SET_OPTION answers EOF");
    // Connecting with a database, unknown or known.
    let (_, r) = My::connect(port, "root", Some("nope"), proto::NATIVE_PASSWORD, true);
    assert_eq!(r, Res::Err(1049, "42000".into(), "Unknown database 'nope'".into()));
    let (mut m2, r) = My::connect(port, "root", Some("shop"), proto::NATIVE_PASSWORD, true);
    assert_eq!(r, Res::Ok);
    assert_eq!(m2.query("SELECT DATABASE()"), Res::Rows(vec!["DATABASE()".into()], rows(&[&[Some("shop")]])));
    // A client that starts with another plugin (MySQL 8's default) is switched to ours.
    let (_, r) = My::connect(port, "root", None, "caching_sha2_password", true);
    assert_eq!(r, Res::Ok);
    // Unknown user.
    let (_, r) = My::connect(port, "mallory", None, proto::NATIVE_PASSWORD, true);
    assert!(matches!(r, Res::Err(1045, ref s, _) if s == "28000"), "{r:?}");
    assert_eq!(m.query("DROP DATABASE shop"), Res::Ok);
    assert!(matches!(m.query("DROP DATABASE shop"), Res::Err(1008, ..)));
    assert_eq!(m.query("SELECT DATABASE()"), Res::Rows(vec!["DATABASE()".into()], rows(&[&[None]])));
    // A packet over max_allowed_packet: an error, then the connection closes.
    let mut big = vec![proto::com::QUERY];
    big.resize(2 << 20, b' ');
    m.send(0, &big);
    assert!(matches!(m.packet().map(|p| p.1[0]), Some(0xFF) | None));
    assert!(m.packet().is_none(), "closed after an oversized packet");
    // Garbage instead of a handshake response.
    let mut g = My::raw(port);
    g.packet().unwrap();
    let _ = g.s.write_all(b"\x05\x00\x00\x01hello");
    assert!(matches!(g.packet().map(|p| p.1[0]), Some(0xFF) | None));
    // The server still serves.
    let (mut m3, r) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    assert_eq!(r, Res::Ok);
    // QUIT gets no answer: the connection just closes.
    m3.send(0, &[proto::com::QUIT]);
    assert!(m3.packet().is_none());
}

/// Random commands and random queries after a good handshake, and random bytes instead of one:
/// each gets an answer or a clean close, and the server keeps serving. `TERN_SEED=<n>` reruns.
#[test]
fn random_packets_do_not_hurt_the_server() {
    use tern_types::rng::Rng;
    let seed = tern_testkit::seed();
    println!("seed {seed} (rerun with TERN_SEED={seed})");
    let (_d, _n, port) = start(1 << 20);
    let mut rng = Rng::new(seed);
    let words =
        ["SELECT", "SHOW", "USE", "CREATE", "DROP", "DATABASE", "TABLES", "@@version_comment", "x", "`", "'", ";", "1"];
    for _ in 0..4 {
        let (mut m, r) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, rng.chance(50));
        assert_eq!(r, Res::Ok);
        for _ in 0..100 {
            let cmd = if rng.chance(70) { proto::com::QUERY } else { rng.below(40) as u8 };
            if cmd == proto::com::QUIT || cmd == proto::com::STMT_CLOSE || cmd == proto::com::STMT_SEND_LONG_DATA {
                continue; // QUIT closes; CLOSE and SEND_LONG_DATA get no reply (as in MySQL)
            }
            let mut p = vec![cmd];
            if rng.chance(50) {
                let n = rng.below(6);
                let q: Vec<&str> = (0..n).map(|_| *rng.pick(&words)).collect();
                p.extend_from_slice(q.join(" ").as_bytes());
            } else {
                p.extend((0..rng.below(30)).map(|_| rng.below(256) as u8));
            }
            m.send(0, &p);
            let Some((_, first)) = m.packet() else { break };
            if cmd == proto::com::STMT_PREPARE && first[0] == 0x00 && first.len() >= 9 {
                // COM_STMT_PREPARE_OK: its parameter and column definitions follow, each list
                // ended by an EOF packet unless the client deprecated EOF.
                let columns = u16::from_le_bytes([first[5], first[6]]);
                let params = u16::from_le_bytes([first[7], first[8]]);
                for n in [params, columns] {
                    let eof = usize::from(n > 0 && !m.eof_deprecated());
                    for _ in 0..n as usize + eof {
                        m.packet().expect("a definition after COM_STMT_PREPARE_OK");
                    }
                }
                continue;
            }
            let _ = m.result_from(first);
        }
        let mut g = My::raw(port);
        g.packet().unwrap();
        let junk: Vec<u8> = (0..rng.below(100) + 1).map(|_| rng.below(256) as u8).collect();
        let _ = g.s.write_all(&junk);
        drop(g);
        let (mut ok, r) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
        assert_eq!(r, Res::Ok);
        assert_eq!(ok.command(proto::com::PING, b""), Res::Ok);
    }
}

/// COM_STMT_PREPARE / EXECUTE (types sent once, then re-executed without them) / RESET /
/// CLOSE, with binary result rows.
#[test]
fn binary_protocol_prepared_statements() {
    let (_d, _n, port) = start(1 << 20);
    let (mut m, _) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    assert_eq!(m.query("CREATE DATABASE shop"), Res::Ok);
    assert_eq!(m.query("USE shop"), Res::Ok);
    assert_eq!(m.query("CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR(10), d DATE, x DOUBLE)"), Res::Ok);
    assert_eq!(m.query("INSERT INTO t VALUES (1, 'one', '2024-02-29', 1.5), (2, NULL, NULL, NULL)"), Res::Ok);
    let mut p = vec![proto::com::STMT_PREPARE];
    p.extend_from_slice(b"SELECT id, name, d, x FROM t WHERE id = ?");
    m.send(0, &p);
    let (_, ok) = m.packet().unwrap();
    assert_eq!(ok[0], 0);
    let id = u32::from_le_bytes(ok[1..5].try_into().unwrap());
    assert_eq!(u16::from_le_bytes([ok[5], ok[6]]), 4, "columns");
    assert_eq!(u16::from_le_bytes([ok[7], ok[8]]), 1, "params");
    // One parameter definition and four columns (DEPRECATE_EOF: no EOF packets).
    for _ in 0..5 {
        m.packet().unwrap();
    }
    // Executes statement `id` with one BIGINT `key` (its type sent or not): the binary rows of
    // its `columns` columns.
    let exec_stmt = |m: &mut My, id: u32, key: i64, with_types: bool, columns: u8| -> Vec<Vec<u8>> {
        let mut e = vec![proto::com::STMT_EXECUTE];
        e.extend_from_slice(&id.to_le_bytes());
        e.push(0);
        e.extend_from_slice(&1u32.to_le_bytes());
        e.push(0); // null bitmap
        e.push(with_types as u8);
        if with_types {
            e.extend_from_slice(&[proto::ty::LONGLONG, 0]);
        }
        e.extend_from_slice(&key.to_le_bytes());
        m.send(0, &e);
        let (_, count) = m.packet().unwrap();
        assert_eq!(count, vec![columns], "column count");
        for _ in 0..columns {
            m.packet().unwrap();
        }
        let mut rows = Vec::new();
        loop {
            let (_, r) = m.packet().unwrap();
            if r[0] == 0xFE && r.len() < 0xFFFFFF {
                return rows;
            }
            rows.push(r);
        }
    };
    let exec = |m: &mut My, key: i64, with_types: bool| exec_stmt(m, id, key, with_types, 4);
    let r = exec(&mut m, 1, true);
    assert_eq!(r.len(), 1);
    // header, null bitmap (4 columns + 2 bits = 1 byte), id (8 bytes), name, date, double
    let row = &r[0];
    assert_eq!(row[0], 0);
    assert_eq!(row[1], 0, "no NULLs");
    assert_eq!(i64::from_le_bytes(row[2..10].try_into().unwrap()), 1);
    assert_eq!(&row[10..14], &[3, b'o', b'n', b'e']);
    assert_eq!(&row[14..19], &[4, 0xE8, 0x07, 2, 29]);
    assert_eq!(f64::from_le_bytes(row[19..27].try_into().unwrap()), 1.5);
    // Re-executed without the types: the previous ones apply.
    let r = exec(&mut m, 2, false);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0][1], 0b0011_1000, "name, d and x are NULL (bits 3..5)");
    assert!(exec(&mut m, 3, false).is_empty());
    let mut reset = vec![proto::com::STMT_RESET];
    reset.extend_from_slice(&id.to_le_bytes());
    assert_eq!(m.command(proto::com::STMT_RESET, &id.to_le_bytes()), Res::Ok);
    let _ = reset;
    let mut close = vec![proto::com::STMT_CLOSE];
    close.extend_from_slice(&id.to_le_bytes());
    m.send(0, &close);
    // No answer to CLOSE; the next command is answered normally, the closed id is unknown.
    assert!(matches!(m.command(proto::com::STMT_RESET, &id.to_le_bytes()), Res::Err(1243, ..)));
    // Writes through prepared statements.
    let mut p = vec![proto::com::STMT_PREPARE];
    p.extend_from_slice(b"UPDATE t SET name = ? WHERE id = ?");
    m.send(0, &p);
    let (_, ok) = m.packet().unwrap();
    let uid = u32::from_le_bytes(ok[1..5].try_into().unwrap());
    for _ in 0..2 {
        m.packet().unwrap();
    }
    let mut e = vec![proto::com::STMT_EXECUTE];
    e.extend_from_slice(&uid.to_le_bytes());
    e.push(0);
    e.extend_from_slice(&1u32.to_le_bytes());
    e.push(0);
    e.push(1);
    e.extend_from_slice(&[proto::ty::VAR_STRING, 0, proto::ty::LONG, 0]);
    e.extend_from_slice(&[3, b't', b'w', b'o']);
    e.extend_from_slice(&2i32.to_le_bytes());
    m.send(0, &e);
    let (_, ok) = m.packet().unwrap();
    assert_eq!(&ok[..2], &[0, 1], "one row changed");
    assert_eq!(m.query("SELECT name FROM t WHERE id = 2"), Res::Rows(vec!["name".into()], rows(&[&[Some("two")]])));
    // A query only the engine runs (a derived table) prepares too: its parameter is counted, its
    // columns come with the result; the value goes in as a literal.
    let engine_queries = |m: &mut My| -> u64 {
        match m.query("SHOW STATUS LIKE 'Tern_engine_queries'") {
            Res::Rows(_, r) => r[0][1].as_deref().unwrap().parse().unwrap(),
            other => panic!("{other:?}"),
        }
    };
    // Prepares `sql` (one parameter): its id and column count.
    let prepare = |m: &mut My, sql: &[u8]| -> (u32, u16) {
        m.send(0, &[&[proto::com::STMT_PREPARE][..], sql].concat());
        let (_, ok) = m.packet().unwrap();
        assert_eq!(ok[0], 0, "prepared: {ok:?}");
        assert_eq!(u16::from_le_bytes([ok[7], ok[8]]), 1, "params");
        let columns = u16::from_le_bytes([ok[5], ok[6]]);
        for _ in 0..1 + columns {
            m.packet().unwrap();
        }
        (u32::from_le_bytes(ok[1..5].try_into().unwrap()), columns)
    };
    let execute = |m: &mut My, id: u32, v: i64| exec_stmt(m, id, v, true, 2);
    let before = engine_queries(&mut m);
    let (did, columns) =
        prepare(&mut m, b"SELECT COUNT(*) AS n, MAX(name) AS top FROM (SELECT * FROM t WHERE id >= ?) AS d");
    assert_eq!(columns, 0, "known when it runs");
    let r = execute(&mut m, did, 1);
    assert_eq!(r.len(), 1);
    // Binary row: header, null bitmap, COUNT(*) as 8 bytes, then the name.
    assert_eq!(r[0][0], 0);
    assert_eq!(i64::from_le_bytes(r[0][2..10].try_into().unwrap()), 2);
    assert_eq!(&r[0][10..], &[3, b't', b'w', b'o']);
    assert_eq!(engine_queries(&mut m), before + 1, "the derived table ran in the engine");
    // A join the OLTP path plans but would run as nested loops over a scan goes to the engine
    // when executed, as its text would.
    let (jid, columns) =
        prepare(&mut m, b"SELECT a.id, b.id FROM t a JOIN t b ON a.name = b.name WHERE a.id >= ? ORDER BY a.id");
    assert_eq!(columns, 2);
    let r = execute(&mut m, jid, 2);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(i64::from_le_bytes(r[0][2..10].try_into().unwrap()), 2);
    assert_eq!(i64::from_le_bytes(r[0][10..18].try_into().unwrap()), 2);
    assert_eq!(engine_queries(&mut m), before + 2, "the join ran in the engine");
}

/// Random SQL from a vocabulary of keywords, names, literals and operators, over a database with
/// tables: every statement gets an answer (rows, OK or an error) and the server keeps serving.
/// `TERN_SEED=<n>` reruns a failure.
#[test]
fn random_sql_gets_answers() {
    use tern_types::rng::Rng;
    let seed = tern_testkit::seed();
    println!("seed {seed} (rerun with TERN_SEED={seed})");
    let (_d, _n, port) = start(1 << 20);
    let mut rng = Rng::new(seed);
    let (mut m, _) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    for s in [
        "CREATE DATABASE f",
        "USE f",
        "CREATE TABLE t (id INT PRIMARY KEY, k INT, s VARCHAR(20), d DECIMAL(8,2), KEY (k))",
        "CREATE TABLE u (a INT PRIMARY KEY, b VARCHAR(5))",
        "INSERT INTO t VALUES (1, 1, 'a', 1.5), (2, NULL, NULL, NULL), (3, 3, 'c', -2)",
        "INSERT INTO u VALUES (1, 'x'), (3, 'y')",
    ] {
        assert_eq!(m.query(s), Res::Ok, "{s}");
    }
    let words = [
        "SELECT",
        "FROM",
        "WHERE",
        "AND",
        "OR",
        "NOT",
        "IN",
        "BETWEEN",
        "LIKE",
        "IS",
        "NULL",
        "GROUP",
        "BY",
        "ORDER",
        "HAVING",
        "LIMIT",
        "OFFSET",
        "JOIN",
        "LEFT",
        "ON",
        "AS",
        "DISTINCT",
        "COUNT(*)",
        "SUM(k)",
        "MAX(s)",
        "t",
        "u",
        "t.id",
        "u.a",
        "id",
        "k",
        "s",
        "d",
        "a",
        "b",
        "*",
        ",",
        "(",
        ")",
        "=",
        "<",
        ">",
        "<=>",
        "+",
        "-",
        "/",
        "1",
        "0",
        "-1",
        "2.5",
        "'x'",
        "'%a%'",
        "NULL",
        "UPDATE",
        "SET",
        "DELETE",
        "INSERT",
        "INTO",
        "VALUES",
        "REPLACE",
        "UNION",
        "EXISTS",
        "CASE",
        "WHEN",
        "THEN",
        "ELSE",
        "END",
        "CAST",
        "CONCAT(",
        "IF(",
        "DATE_ADD(",
        "INTERVAL",
        "DAY",
        "FOR",
        "UPDATE",
        "BEGIN",
        "COMMIT",
        "ROLLBACK",
        "?",
        "@x",
        "@@autocommit",
        "9223372036854775807",
        "X'00'",
    ];
    let templates = [
        "SELECT {} FROM t WHERE {}",
        "SELECT {} FROM t JOIN u ON {} WHERE {}",
        "SELECT {} FROM t GROUP BY {} ORDER BY {}",
        "UPDATE t SET k = {} WHERE {}",
        "DELETE FROM t WHERE {}",
        "INSERT INTO t (id, k, s) VALUES ({}, {}, {})",
        "{} {} {} {}",
    ];
    for _ in 0..3000 {
        let tpl = *rng.pick(&templates);
        let mut sql = String::new();
        for (i, part) in tpl.split("{}").enumerate() {
            if i > 0 {
                let n = rng.below(4) as usize + 1;
                let fill: Vec<&str> = (0..n).map(|_| *rng.pick(&words)).collect();
                sql.push_str(&fill.join(" "));
            }
            sql.push_str(part);
        }
        // Any answer will do; a closed connection or no answer is the failure.
        let mut p = vec![proto::com::QUERY];
        p.extend_from_slice(sql.as_bytes());
        m.send(0, &p);
        let first = m.packet().unwrap_or_else(|| panic!("no answer to {sql:?} (seed {seed})")).1;
        let _ = m.result_from(first);
    }
    assert_eq!(m.query("ROLLBACK"), Res::Ok);
    let (mut m2, r) = My::connect(port, "root", Some("f"), proto::NATIVE_PASSWORD, true);
    assert_eq!(r, Res::Ok);
    assert!(matches!(m2.query("SELECT COUNT(*) FROM u"), Res::Rows(..)));
}
