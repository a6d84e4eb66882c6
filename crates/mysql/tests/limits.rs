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

/// A table `lim.t` of `n` rows `(id, v = id % 10, pad)` for the limit tests.
fn table(m: &mut My, n: usize) {
    assert_eq!(m.query("CREATE DATABASE IF NOT EXISTS lim"), Res::Ok);
    assert_eq!(m.query("CREATE TABLE lim.t (id INT PRIMARY KEY, v INT, pad VARCHAR(100))"), Res::Ok);
    let values: Vec<String> = (0..n).map(|i| format!("({i}, {}, '{}')", i % 10, "x".repeat(50))).collect();
    for chunk in values.chunks(500) {
        assert_eq!(m.query(&format!("INSERT INTO lim.t VALUES {}", chunk.join(","))), Res::Ok);
    }
}

/// A join the analytic engine runs (no index on `v`: the OLTP path would scan inner tables):
/// 8.1 billion combinations of 300 rows, little memory; far longer than any test waits.
const SLOW_JOIN: &str = "SELECT COUNT(*) FROM lim.t a, lim.t b, lim.t c, lim.t d WHERE a.v + b.v + c.v + d.v >= 0";
/// The OLTP path's slow statement: a locking join (locking reads stay on the OLTP path) that
/// reads the table once per row of the outer tables.
const SLOW_JOIN_OLTP: &str = "SELECT COUNT(*) FROM lim.t a JOIN lim.t b ON b.v = a.v JOIN lim.t c ON c.v = b.v JOIN lim.t d ON d.v = c.v LOCK IN SHARE MODE";

fn count(r: Res) -> String {
    match r {
        Res::Rows(_, rows) => rows[0][0].clone().unwrap_or_default(),
        other => panic!("expected a count, got {other:?}"),
    }
}

/// Statements over many held rows (a join of cached rows, its grouping, DISTINCT and a sort
/// large enough to run off the executor thread) answer as MySQL does, while another connection
/// is served meanwhile (with TERN_TEST_TRANSPORT=hosted the executor is the data node's worker).
#[test]
fn large_sorts_groups_and_distinct_answer_correctly_while_others_are_served() {
    let (_d, _n, port) = start(1 << 20);
    let (mut m, _) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    table(&mut m, 300);
    let runner = std::thread::spawn(move || {
        // 90,000 joined rows: sorted, grouped and made distinct.
        let top = m.query("SELECT a.id * 1000 + b.id AS k FROM lim.t a, lim.t b ORDER BY k DESC LIMIT 2");
        let groups = m.query("SELECT (a.id + b.id) % 5 AS g, COUNT(*) FROM lim.t a, lim.t b GROUP BY g ORDER BY g");
        let d2 = m.query("SELECT DISTINCT a.v + b.v AS s FROM lim.t a, lim.t b ORDER BY s DESC LIMIT 3");
        (top, groups, d2)
    });
    let (mut other, _) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    for i in 0..50 {
        assert_eq!(count(other.query(&format!("SELECT v FROM lim.t WHERE id = {i}"))), (i % 10).to_string());
    }
    let (top, groups, d2) = runner.join().unwrap();
    let rows = |r: Res| match r {
        Res::Rows(_, rows) => {
            rows.into_iter().map(|r| r.into_iter().map(Option::unwrap_or_default).collect()).collect()
        }
        other => panic!("expected rows, got {other:?}"),
    };
    let top: Vec<Vec<String>> = rows(top);
    assert_eq!(top, [["299299"], ["299298"]]);
    let groups: Vec<Vec<String>> = rows(groups);
    assert_eq!(groups, (0..5).map(|g| vec![g.to_string(), "18000".to_string()]).collect::<Vec<_>>());
    let d2: Vec<Vec<String>> = rows(d2);
    assert_eq!(d2, [["18"], ["17"], ["16"]]);
}

#[test]
fn memory_limit_and_huge_values_fail_the_statement_only() {
    let (_d, _n, port) = start(1 << 20);
    let (mut m, _) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    table(&mut m, 2000);
    // A cross join of 4 M rows does not fit in 4 MB of intermediate results.
    assert_eq!(m.query("SET max_query_memory = 4000000"), Res::Ok);
    let Res::Err(3170, state, msg) = m.query("SELECT a.id, b.id FROM lim.t a, lim.t b ORDER BY 1") else {
        panic!("memory limit")
    };
    assert_eq!(state, "HY000");
    assert!(msg.contains("max_query_memory"), "{msg}");
    let r = m.query("SELECT a.id, b.id, COUNT(*) FROM lim.t a, lim.t b GROUP BY a.id, b.id");
    let Res::Err(3170, ..) = r else { panic!("memory limit for groups: {r:?}") };
    // The session goes on; narrower queries run.
    assert_eq!(count(m.query("SELECT COUNT(*) FROM lim.t a JOIN lim.t b ON b.id = a.id")), "2000");
    assert_eq!(
        m.query("SELECT @@max_query_memory"),
        Res::Rows(vec!["@@max_query_memory".into()], rows(&[&[Some("4000000")]]))
    );
    // Values: one result is at most max_allowed_packet, and nested calls cannot multiply memory.
    for sql in [
        "SELECT REPEAT('a', 100000000)",
        "SELECT LPAD('a', 1000000000000, 'b')",
        "SELECT RPAD('a', 100000000, 'bc')",
        "SELECT REPLACE(REPEAT('a', 1000000), 'a', REPEAT('b', 100))",
        "SELECT CONCAT(REPEAT('a', 40000000), REPEAT('a', 40000000))",
    ] {
        let Res::Err(1301, ..) = m.query(sql) else { panic!("{sql}") };
    }
    let mut nested = String::from("SELECT LENGTH(");
    for _ in 0..10 {
        nested.push_str("CONCAT(REPEAT('a', 60000000), ");
    }
    nested.push_str("'b'");
    nested.push_str(&")".repeat(11));
    let Res::Err(e, ..) = m.query(&nested) else { panic!("nested values") };
    assert!(e == 3170 || e == 1301, "{e}");
    assert_eq!(
        m.query("SELECT LENGTH(REPEAT('a', 1000000))"),
        Res::Rows(vec!["LENGTH(REPEAT('a', 1000000))".into()], rows(&[&[Some("1000000")]]))
    );
}

/// Past `max_query_memory`, the engine's operators spill to disk instead of failing: a join
/// whose hash table does not fit runs again as a sort-merge join (both sides sorted on disk),
/// and a grouping of more groups than fit spills its groups. (Every read times out after 20 s:
/// a statement that hangs — DataFusion's repartition spill deadlock — fails the test.)
#[test]
fn joins_and_groups_past_the_memory_limit_spill_to_disk() {
    let (_d, _n, port) = start(1 << 20);
    let (mut m, _) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    assert_eq!(m.query("CREATE DATABASE IF NOT EXISTS lim"), Res::Ok);
    assert_eq!(m.query("CREATE TABLE lim.s (id INT PRIMARY KEY, pad VARCHAR(200))"), Res::Ok);
    let values: Vec<String> = (0..2000).map(|i| format!("({i}, CONCAT({i}, REPEAT('x', 100)))")).collect();
    for chunk in values.chunks(500) {
        assert_eq!(m.query(&format!("INSERT INTO lim.s VALUES {}", chunk.join(","))), Res::Ok);
    }
    // Doubled six times: 128,000 distinct pads, ~14 MB a side.
    let mut n: i64 = 2000;
    while n < 128_000 {
        let sql = format!("INSERT INTO lim.s SELECT id + {n}, CONCAT(id + {n}, REPEAT('x', 100)) FROM lim.s");
        assert_eq!(m.query(&sql), Res::Ok, "{sql}");
        n *= 2;
    }
    let lengths: usize = (0..n).map(|i| i.to_string().len() + 100).sum();
    let join = "SELECT COUNT(*), SUM(a.id - b.id), SUM(LENGTH(b.pad)) FROM lim.s a JOIN lim.s b ON b.pad = a.pad";
    let want = Res::Rows(vec![], rows(&[&[Some(&n.to_string()), Some("0"), Some(&lengths.to_string())]]));
    let answer = |m: &mut My, sql: &str| match m.query(sql) {
        Res::Rows(_, r) => Res::Rows(vec![], r),
        other => other,
    };
    let explain = |m: &mut My, sql: &str| match m.query(&format!("EXPLAIN ANALYZE {sql}")) {
        Res::Rows(_, r) => r.into_iter().flatten().flatten().collect::<Vec<_>>().join("\n"),
        other => panic!("EXPLAIN ANALYZE {sql}: {other:?}"),
    };
    // With room, a hash join.
    assert_eq!(answer(&mut m, join), want);
    assert!(explain(&mut m, join).contains("HashJoinExec"));
    // 8 MB: the hash table does not fit; the statement answers the same through a sort-merge
    // join whose sorts spilled.
    assert_eq!(m.query("SET max_query_memory = 8000000"), Res::Ok);
    for _ in 0..3 {
        assert_eq!(answer(&mut m, join), want);
    }
    let plan = explain(&mut m, join);
    assert!(plan.contains("SortMergeJoinExec") && !plan.contains("HashJoinExec"), "{plan}");
    let spilled = |plan: &str, op: &str| {
        plan.lines()
            .filter(|l| l.contains(op))
            .any(|l| l.split("spill_count=").nth(1).and_then(|v| v.split(',').next()).is_some_and(|v| v != "0"))
    };
    assert!(spilled(&plan, "SortExec"), "{plan}");
    let left =
        "SELECT COUNT(*), SUM(a.id) FROM lim.s a LEFT JOIN lim.s b ON b.pad = CONCAT(a.pad, 'y') WHERE b.id IS NULL";
    let all = (n * (n - 1) / 2).to_string();
    assert_eq!(answer(&mut m, left), Res::Rows(vec![], rows(&[&[Some(&n.to_string()), Some(&all)]])));
    // A grouping of 128,000 groups spills them.
    let groups = "SELECT COUNT(*), MAX(c), MIN(c) FROM (SELECT pad, COUNT(*) c FROM lim.s GROUP BY pad) x";
    for _ in 0..5 {
        assert_eq!(answer(&mut m, groups), Res::Rows(vec![], rows(&[&[Some(&n.to_string()), Some("1"), Some("1")]])));
    }
    assert!(spilled(&explain(&mut m, groups), "AggregateExec"));
    // Far too little memory even to spill: MySQL's error, and the session goes on.
    assert_eq!(m.query("SET max_query_memory = 300000"), Res::Ok);
    let Res::Err(3170, ..) = m.query(join) else { panic!("a join in 300 kB") };
    assert_eq!(m.query("SET max_query_memory = DEFAULT"), Res::Ok);
    assert_eq!(answer(&mut m, join), want);
}

#[test]
fn execution_time_limits_and_kill() {
    let (_d, _n, port) = start(1 << 20);
    let (mut m, _) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    table(&mut m, 300);
    let started = std::time::Instant::now();
    assert_eq!(m.query("SET max_execution_time = 300"), Res::Ok);
    for slow in [SLOW_JOIN, SLOW_JOIN_OLTP] {
        let r = m.query(slow);
        let Res::Err(3024, state, msg) = r else { panic!("max_execution_time: {slow}: {r:?}") };
        assert_eq!(
            (state.as_str(), msg.as_str()),
            ("HY000", "Query execution was interrupted, maximum statement execution time exceeded")
        );
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    // Only SELECTs (as MySQL); MariaDB's max_statement_time covers every statement.
    assert_eq!(m.query("UPDATE lim.t SET v = v WHERE id < 0"), Res::Ok);
    assert_eq!(m.query("SET max_execution_time = 0"), Res::Ok);
    assert_eq!(m.query("SET max_statement_time = 0.3"), Res::Ok);
    for slow in [SLOW_JOIN, SLOW_JOIN_OLTP] {
        let r = m.query(slow);
        let Res::Err(1969, ..) = r else { panic!("max_statement_time: {slow}: {r:?}") };
    }
    assert_eq!(m.query("SET max_statement_time = 0"), Res::Ok);

    // KILL QUERY from another connection stops the statement; the connection stays.
    let Res::Rows(_, me) = m.query("SELECT CONNECTION_ID()") else { panic!("id") };
    let id = me[0][0].clone().unwrap();
    let runner = std::thread::spawn(move || {
        let r = m.query(SLOW_JOIN);
        (m, r)
    });
    let (mut admin, _) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    wait_running(&mut admin, &id);
    assert_eq!(admin.query(&format!("KILL QUERY {id}")), Res::Ok);
    let (mut m, r) = runner.join().unwrap();
    let Res::Err(1317, state, msg) = r else { panic!("KILL QUERY: {r:?}") };
    assert_eq!((state.as_str(), msg.as_str()), ("70100", "Query execution was interrupted"));
    assert_eq!(count(m.query("SELECT COUNT(*) FROM lim.t")), "300");
    // A KILL QUERY that finds nothing running is forgotten.
    assert_eq!(admin.query(&format!("KILL QUERY {id}")), Res::Ok);
    assert_eq!(count(m.query("SELECT COUNT(*) FROM lim.t")), "300");

    // KILL [CONNECTION] stops the statement and closes the connection.
    let runner = std::thread::spawn(move || m.query(SLOW_JOIN));
    wait_running(&mut admin, &id);
    assert_eq!(admin.query(&format!("KILL {id}")), Res::Ok);
    let Res::Err(1927, ..) = runner.join().unwrap() else { panic!("KILL CONNECTION") };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while list(&mut admin).iter().any(|r| r[0].as_deref() == Some(&id)) {
        assert!(std::time::Instant::now() < until, "the killed connection stays listed");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // An idle connection killed gets the error, then the end.
    let (mut idle, _) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    let Res::Rows(_, r) = idle.query("SELECT CONNECTION_ID()") else { panic!("id") };
    assert_eq!(admin.query(&format!("KILL CONNECTION {}", r[0][0].as_deref().unwrap())), Res::Ok);
    assert!(idle.packet().is_none(), "an idle killed connection is closed");
    let Res::Err(1094, _, msg) = admin.query("KILL 999999") else { panic!("unknown id") };
    assert_eq!(msg, "Unknown thread id: 999999");
    // Another user may not kill root's connection.
    assert_eq!(admin.query("CREATE USER 'eve'@'%' IDENTIFIED BY ''"), Res::Ok);
    let (mut eve, r) = My::connect(port, "eve", None, proto::NATIVE_PASSWORD, true);
    assert_eq!(r, Res::Ok);
    let Res::Rows(_, r) = admin.query("SELECT CONNECTION_ID()") else { panic!("id") };
    let Res::Err(1095, ..) = eve.query(&format!("KILL {}", r[0][0].as_deref().unwrap())) else { panic!("owner") };
    assert_eq!(list(&mut eve).len(), 1, "eve sees only her own connection");
}

/// SHOW FULL PROCESSLIST rows.
fn list(m: &mut My) -> Vec<Vec<Option<String>>> {
    let Res::Rows(cols, r) = m.query("SHOW FULL PROCESSLIST") else { panic!("processlist") };
    assert_eq!(cols, ["Id", "User", "Host", "db", "Command", "Time", "State", "Info"]);
    r
}

/// Waits until connection `id` is running the slow join.
fn wait_running(admin: &mut My, id: &str) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let rows = list(admin);
        if rows.iter().any(|r| {
            r[0].as_deref() == Some(id) && r[4].as_deref() == Some("Query") && r[7].as_deref() == Some(SLOW_JOIN)
        }) {
            return;
        }
        assert!(std::time::Instant::now() < until, "connection {id} never ran the query: {rows:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn connection_cap_and_timeouts() {
    let opts = tern_mysql::MysqlOptions {
        max_connections: 3,
        connect_timeout: std::time::Duration::from_secs(1),
        ..Default::default()
    };
    let (_d, _n, port) = common::start_with(opts);
    let mut open: Vec<My> = (0..3).map(|_| My::connect(port, "root", None, proto::NATIVE_PASSWORD, true).0).collect();
    // The fourth gets MySQL's 1040 in place of the handshake.
    let mut over = My::raw(port);
    let (seq, p) = over.packet().expect("an answer");
    assert_eq!(seq, 0);
    assert_eq!(over.result_from(p), Res::Err(1040, "08004".into(), "Too many connections".into()));
    assert!(over.packet().is_none());
    open.pop();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut again = loop {
        let (m, r) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
        if r == Res::Ok {
            break m;
        }
        assert!(std::time::Instant::now() < until, "a freed place is not taken: {r:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(again.query("SET GLOBAL max_connections = 4"), Res::Ok);
    assert_eq!(
        again.query("SELECT @@max_connections"),
        Res::Rows(vec!["@@max_connections".into()], rows(&[&[Some("4")]]))
    );
    let (_fourth, r) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    assert_eq!(r, Res::Ok);
    drop(open);
    // wait_timeout: an idle session is told why, then closed.
    assert_eq!(again.query("SET wait_timeout = 1"), Res::Ok);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let (_, p) = again.packet().expect("the timeout error");
    let Res::Err(4031, _, msg) = again.result_from(p) else { panic!("wait_timeout") };
    assert!(msg.contains("inactivity"), "{msg}");
    assert!(again.packet().is_none());
    // connect_timeout: a client that never answers the handshake is dropped.
    let mut silent = My::raw(port);
    silent.packet().expect("handshake");
    let t = std::time::Instant::now();
    assert!(silent.packet().is_none(), "closed without an answer");
    assert!(t.elapsed() < std::time::Duration::from_secs(10));
}

/// What Tern does not serve yet is refused with 1235 naming it (and the session goes on).
#[test]
fn unsupported_features_are_refused_by_name() {
    let (_d, _n, port) = start(1 << 20);
    let (mut m, _) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    assert_eq!(m.query("CREATE DATABASE u"), Res::Ok);
    assert_eq!(m.query("CREATE TABLE u.t (id INT PRIMARY KEY, v INT)"), Res::Ok);
    for (sql, what) in [
        ("CREATE TABLE u.g (id INT PRIMARY KEY, g GEOMETRY)", "GEOMETRY columns"),
        ("CREATE TABLE u.g (id INT PRIMARY KEY, g POINT)", "POINT columns"),
    ] {
        let Res::Err(1235, _, msg) = m.query(sql) else { panic!("{sql}") };
        assert!(msg.contains(what), "{sql}: {msg}");
    }
    // Derived tables, correlated subqueries and CTEs run in the analytic engine.
    assert_eq!(m.query("INSERT INTO u.t VALUES (1, 1), (2, 5)"), Res::Ok);
    for (sql, want) in [
        ("SELECT x FROM (SELECT 1 AS x) AS d", "1"),
        ("SELECT COUNT(*) AS n FROM u.t a WHERE EXISTS (SELECT 1 FROM u.t b WHERE b.v = a.id)", "1"),
        ("WITH c AS (SELECT 1 AS x) SELECT x FROM c", "1"),
    ] {
        let Res::Rows(_, r) = m.query(sql) else { panic!("{sql}") };
        assert_eq!(r, rows(&[&[Some(want)]]), "{sql}");
    }
    // A statement neither path reads is the parser's syntax error.
    let Res::Err(1064, ..) = m.query("SELECT FROM WHERE (") else { panic!("syntax") };
    assert_eq!(m.query("SELECT 1"), Res::Rows(vec!["1".into()], rows(&[&[Some("1")]])));
}
