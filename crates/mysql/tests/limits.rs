//! No statement takes the MySQL front end down: nesting of every shape up to 1 MB of text hits a
//! limit with MySQL's error (1064 "memory exhausted", 1436 "Thread stack overrun", 1473 "Too high
//! level of nesting for select") or is answered, and the server keeps serving everyone.

mod common;

use common::{My, Res, rows, start};
use tern_mysql::proto;

/// `open` × n, then `mid`, then `close` × n.
fn nest(prefix: &str, open: &str, mid: &str, close: &str, n: usize) -> String {
    let mut s = String::with_capacity(prefix.len() + n * (open.len() + close.len()) + mid.len());
    s.push_str(prefix);
    for _ in 0..n {
        s.push_str(open);
    }
    s.push_str(mid);
    for _ in 0..n {
        s.push_str(close);
    }
    s
}

/// `first`, then `more` × n.
fn chain(prefix: &str, first: &str, more: &str, n: usize) -> String {
    let mut s = String::with_capacity(prefix.len() + first.len() + n * more.len());
    s.push_str(prefix);
    s.push_str(first);
    for _ in 0..n {
        s.push_str(more);
    }
    s
}

/// Counts of repetitions whose statement is about 1 KB, 10 KB, 100 KB and 1 MB long.
fn sizes(unit: usize) -> Vec<usize> {
    [1usize << 10, 10 << 10, 100 << 10, 1 << 20].iter().map(|b| (b / unit).max(1)).collect()
}

#[test]
fn nesting_of_every_shape_hits_a_limit_not_the_server() {
    let (_d, _n, port) = start(4 << 20);
    let (mut m, r) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    assert_eq!(r, Res::Ok);
    // Within the limits, deep expressions are answered (this runs the planner and evaluator
    // at depth, on the server's worker stack).
    let one = |v: &str| Res::Rows(vec![], rows(&[&[Some(v)]]));
    let answer = |m: &mut My, sql: &str| match m.query(sql) {
        Res::Rows(_, r) => Res::Rows(vec![], r),
        other => other,
    };
    assert_eq!(answer(&mut m, &chain("SELECT ", "1", "+1", 1999)), one("2000"));
    assert_eq!(answer(&mut m, &nest("SELECT ", "ABS(", "-7", ")", 250)), one("7"));
    assert_eq!(answer(&mut m, &nest("SELECT ", "(", "5", ")", 250)), one("5"));
    assert_eq!(answer(&mut m, &nest("SELECT ", "CASE WHEN 1 THEN ", "3", " END", 250)), one("3"));
    assert_eq!(answer(&mut m, &nest("SELECT ", "(SELECT ", "4", ")", 60)), one("4"));
    assert_eq!(answer(&mut m, &chain("SELECT ", "NOT 0", " = 1", 1990)), one("1"));
    // AND / OR / XOR chains of any length are shallow (balanced), as MariaDB takes them.
    for n in sizes(8) {
        assert_eq!(answer(&mut m, &chain("SELECT ", "1=0", " OR 1=0", n)), one("0"), "OR × {n}");
        assert_eq!(answer(&mut m, &chain("SELECT ", "1=1", " AND 1=1", n)), one("1"), "AND × {n}");
    }
    assert_eq!(answer(&mut m, &chain("SELECT ", "1", " XOR 1", 100_000)), one("1"));
    assert_eq!(answer(&mut m, &(chain("SELECT 1 IN (", "2", ",2", 100_000) + ",1)")), one("1"));

    // Long OR chains over a table become index ranges; long AND chains stay filters.
    assert_eq!(m.query("CREATE DATABASE lim"), Res::Ok);
    assert_eq!(m.query("CREATE TABLE lim.t (id INT PRIMARY KEY, v INT, KEY (v))"), Res::Ok);
    assert_eq!(m.query("INSERT INTO lim.t VALUES (1, 10), (2, 20), (3, 30), (4, 40)"), Res::Ok);
    let mut ors = String::from("SELECT COUNT(*) FROM lim.t WHERE v = 20");
    for i in 0..5_000 {
        ors.push_str(&format!(" OR v = {}", 1000 + i));
    }
    assert_eq!(answer(&mut m, &(ors.clone() + " OR v = 40")), one("2"));
    assert_eq!(answer(&mut m, &ors.replace("v = ", "id = ").replace("id = 20", "id = 3")), one("1"));
    assert_eq!(answer(&mut m, &chain("SELECT COUNT(*) FROM lim.t WHERE v > 0", "", " AND v > 15", 5_000)), one("3"));
    let ins = chain("SELECT COUNT(*) FROM lim.t WHERE v + 0 > 0 AND v IN (20", "", ", -1", 5_000);
    assert_eq!(answer(&mut m, &(ins + ")")), one("1"));

    // Beyond them: MySQL's errors, at every size up to 1 MB (the small sizes are answered).
    type Make = Box<dyn Fn(usize) -> String>;
    type Value = Box<dyn Fn(usize) -> String>;
    let always = |v: &'static str| -> Value { Box::new(move |_| v.to_string()) };
    let shapes: Vec<(&str, Make, usize, Value, &[u16])> = vec![
        ("parentheses", Box::new(|n| nest("SELECT ", "(", "1", ")", n)), 2, always("1"), &[1064, 1436]),
        ("subqueries", Box::new(|n| nest("SELECT ", "(SELECT ", "1", ")", n)), 9, always("1"), &[1473]),
        ("functions", Box::new(|n| nest("SELECT ", "ABS(", "1", ")", n)), 5, always("1"), &[1064, 1436]),
        ("case", Box::new(|n| nest("SELECT ", "CASE WHEN 1 THEN ", "1", " END", n)), 21, always("1"), &[1064, 1436]),
        ("plus", Box::new(|n| chain("SELECT ", "1", "+1", n)), 2, Box::new(|n| (n + 1).to_string()), &[1436]),
        ("comparisons", Box::new(|n| chain("SELECT ", "1", "=1", n)), 2, always("1"), &[1436]),
        (
            "not",
            Box::new(|n| chain("SELECT ", "", "NOT ", n) + "1"),
            4,
            Box::new(|n| ((n + 1) % 2).to_string()),
            &[1064, 1436],
        ),
        (
            "minus",
            Box::new(|n| chain("SELECT ", "", "-(", n) + "1" + &")".repeat(n)),
            3,
            Box::new(|n| if n % 2 == 0 { "1" } else { "-1" }.to_string()),
            &[1064, 1436],
        ),
        (
            "concat",
            Box::new(|n| nest("SELECT ", "CONCAT('a',", "'b'", ")", n)),
            13,
            Box::new(|n| "a".repeat(n) + "b"),
            &[1064, 1436],
        ),
        ("in", Box::new(|n| nest("SELECT ", "1 IN (", "1", ")", n)), 7, always("1"), &[1064, 1436]),
        ("union-parens", Box::new(|n| nest("", "(", "SELECT 1", ")", n)), 2, always("1"), &[1064, 1473]),
        ("where", Box::new(|n| nest("SELECT 1 FROM DUAL WHERE ", "(", "1", ")", n)), 2, always("1"), &[1064, 1436]),
    ];
    for (name, make, unit, value, errs) in &shapes {
        let all = sizes(*unit);
        for &n in &all {
            match answer(&mut m, &make(n)) {
                Res::Err(e, _, msg) => assert!(errs.contains(&e), "{name} × {n}: error {e} {msg}"),
                // Only statements below the limits are answered, and correctly.
                Res::Rows(_, r) if n < 2000 => assert_eq!(r, rows(&[&[Some(&value(n))]]), "{name} × {n}"),
                other => panic!("{name} × {n}: expected an error, got {other:?}"),
            }
            // The connection and the server still serve.
            assert_eq!(m.query("SELECT 1"), Res::Rows(vec!["1".into()], rows(&[&[Some("1")]])), "{name} × {n}");
        }
    }
    let Res::Err(1473, state, msg) = m.query(&nest("SELECT ", "(SELECT ", "1", ")", 64)) else { panic!("1473") };
    assert_eq!((state.as_str(), msg.as_str()), ("HY000", "Too high level of nesting for select"));
    let Res::Err(1436, state, msg) = m.query(&chain("SELECT ", "1", "+1", 5000)) else { panic!("1436") };
    assert_eq!(state, "HY000");
    assert!(msg.starts_with("Thread stack overrun"), "{msg}");
    let Res::Err(1064, _, msg) = m.query(&nest("SELECT ", "(", "1", ")", 5000)) else { panic!("1064") };
    assert!(msg.starts_with("memory exhausted near '"), "{msg}");
    // Another client was never disturbed.
    let (mut other, r) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    assert_eq!(r, Res::Ok);
    assert_eq!(other.command(proto::com::PING, b""), Res::Ok);
}
