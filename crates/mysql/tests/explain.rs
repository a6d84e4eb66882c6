//! EXPLAIN through the MySQL front end: the key-value path's access paths, the engine's operator
//! tree, and EXPLAIN ANALYZE's metrics showing that a join read its probe side by the build
//! side's keys (key reads on the primary key, ranges of a secondary index) rather than whole.

mod common;

use common::{My, Res, start};
use tern_mysql::proto;

/// The one text cell of an EXPLAIN answer.
fn explain(m: &mut My, sql: &str) -> String {
    match m.query(sql) {
        Res::Rows(names, rows) => {
            assert_eq!(names, vec!["EXPLAIN".to_string()], "{sql}");
            assert_eq!(rows.len(), 1, "{sql}");
            rows[0][0].clone().expect("text")
        }
        other => panic!("{sql}: {other:?}"),
    }
}

/// The value of metric `name` on the plan line that mentions `node`.
fn metric(plan: &str, node: &str, name: &str) -> u64 {
    let line = plan.lines().find(|l| l.contains(node)).unwrap_or_else(|| panic!("no {node} in\n{plan}"));
    let at = line.find(&format!("{name}=")).unwrap_or_else(|| panic!("no {name} in {line}"));
    line[at + name.len() + 1..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap()
}

fn count(m: &mut My, sql: &str) -> usize {
    match m.query(sql) {
        Res::Rows(_, rows) => rows.len(),
        other => panic!("{sql}: {other:?}"),
    }
}

#[test]
fn explain_shows_access_paths_and_keyed_joins() {
    let (_d, _n, port) = start(1 << 20);
    let (mut m, r) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    assert_eq!(r, Res::Ok);
    for sql in [
        "CREATE DATABASE ex",
        "USE ex",
        "CREATE TABLE big (id INT PRIMARY KEY, grp INT, v INT, KEY grp_idx (grp)) PARTITION BY KEY (id) PARTITIONS 4",
        "CREATE TABLE small (k INT, g INT)",
    ] {
        assert_eq!(m.query(sql), Res::Ok, "{sql}");
    }
    let values: Vec<String> = (1..=200).map(|i| format!("({i}, {}, {})", i % 20, i * 3)).collect();
    assert!(matches!(m.query(&format!("INSERT INTO big VALUES {}", values.join(", "))), Res::Ok | Res::Rows(..)));
    assert!(matches!(m.query("INSERT INTO small VALUES (3, 4), (7, 4), (150, 19), (999, NULL)"), Res::Ok));

    // The key-value path: a primary key lookup with a pushed condition.
    let plan = explain(&mut m, "EXPLAIN SELECT v FROM big WHERE id = 3 AND v > 1");
    assert!(plan.starts_with("Key-value path:"), "{plan}");
    assert!(plan.contains("Table: `ex`.`big`") && plan.contains("primary key lookup"), "{plan}");
    let plan = explain(&mut m, "EXPLAIN FORMAT=TREE SELECT v FROM big WHERE grp = 4");
    assert!(plan.contains("index scan") && plan.contains("`grp_idx`"), "{plan}");
    let plan = explain(&mut m, "EXPLAIN ANALYZE SELECT v FROM big WHERE grp = 4");
    assert!(plan.ends_with("Rows returned: 10"), "{plan}");

    // The engine: a join whose probe side is read by the build side's keys.
    let by_index = "SELECT s.k, b.id FROM small s JOIN big b ON b.grp = s.g";
    let plan = explain(&mut m, &format!("EXPLAIN {by_index}"));
    assert!(plan.starts_with("Query engine"), "{plan}");
    assert!(plan.contains("HashJoinExec") && plan.contains("TernScan: ex.big"), "{plan}");
    let rows = count(&mut m, by_index);
    assert_eq!(rows, 30, "g = 4 twice (10 rows each) and g = 19 once");
    let plan = explain(&mut m, &format!("EXPLAIN ANALYZE {by_index}"));
    assert!(plan.ends_with(&format!("Rows returned: {rows}")), "{plan}");
    // Two distinct keys, as ranges of grp_idx in each of big's 4 partitions; only the matching
    // rows were sent, not all 200.
    assert_eq!(metric(&plan, "TernScan: ex.big", "index_ranges"), 2 * 4, "{plan}");
    assert_eq!(metric(&plan, "TernScan: ex.big", "output_rows"), 20, "{plan}");

    let by_key = "SELECT s.k, b.v FROM small s JOIN big b ON b.id = s.k";
    assert_eq!(count(&mut m, by_key), 3);
    let plan = explain(&mut m, &format!("EXPLAIN ANALYZE {by_key}"));
    // Keys 3, 7, 150 and 999, each read in its own partition.
    assert_eq!(metric(&plan, "TernScan: ex.big", "key_reads"), 4, "{plan}");
    assert_eq!(metric(&plan, "TernScan: ex.big", "output_rows"), 3, "{plan}");

    // A join on a column the probe side cannot look up by: the build side's keys go to the
    // data node as a key-set filter, which drops (almost) every row that cannot join.
    let by_set = "SELECT s.k, b.id FROM small s JOIN big b ON b.v = s.k";
    assert_eq!(count(&mut m, by_set), 2, "v = 3 and v = 150");
    let plan = explain(&mut m, &format!("EXPLAIN ANALYZE {by_set}"));
    assert_eq!(metric(&plan, "TernScan: ex.big", "key_set"), 4 * 4, "{plan}");
    assert!(metric(&plan, "TernScan: ex.big", "output_rows") < 20, "{plan}");
    // Keys for a large part of the table: a scan with the key set beats reading them one by one.
    let many: Vec<String> = (1..=120).map(|i| format!("({}, 1)", i * 2)).collect();
    assert_eq!(m.query("CREATE TABLE many (k INT, g INT)"), Res::Ok);
    assert!(matches!(m.query(&format!("INSERT INTO many VALUES {}", many.join(", "))), Res::Ok));
    let wide = "SELECT b.id FROM many s JOIN big b ON b.id = s.k";
    assert_eq!(count(&mut m, wide), 100);
    let plan = explain(&mut m, &format!("EXPLAIN ANALYZE {wide}"));
    assert_eq!(metric(&plan, "TernScan: ex.big", "key_reads"), 0, "{plan}");
    assert_eq!(metric(&plan, "TernScan: ex.big", "key_set"), 120 * 4, "{plan}");
    assert!(metric(&plan, "TernScan: ex.big", "output_rows") < 120, "{plan}");

    // A static range of an indexed column that holds a small part of a big table reads that
    // range of the index (the estimate comes from the column's smallest and largest values);
    // a wide one scans the table.
    assert_eq!(m.query("CREATE TABLE wide (id INT PRIMARY KEY, d INT, KEY d_idx (d))"), Res::Ok);
    let rows: Vec<String> = (0..12_000).map(|i| format!("({i}, {})", i / 2)).collect();
    assert!(matches!(m.query(&format!("INSERT INTO wide VALUES {}", rows.join(", "))), Res::Ok));
    let narrow = "SELECT COUNT(*), SUM(id) FROM (SELECT id FROM wide WHERE d BETWEEN 100 AND 149) x";
    let plan = explain(&mut m, &format!("EXPLAIN ANALYZE {narrow}"));
    assert!(plan.contains("index_range=d_idx"), "{plan}");
    assert_eq!(metric(&plan, "TernScan: ex.wide", "output_rows"), 100, "{plan}");
    assert_eq!(
        m.query(narrow),
        Res::Rows(vec!["COUNT(*)".into(), "SUM(id)".into()], vec![vec![Some("100".into()), Some("24950".into())]])
    );
    for (sql, n) in [
        ("SELECT id FROM (SELECT id FROM wide WHERE d >= 10 AND d < 12) x", 4),
        ("SELECT id FROM (SELECT id FROM wide WHERE d = 5999) x", 2),
        ("SELECT id FROM (SELECT id FROM wide WHERE d > 5998 AND d <= 7000) x", 2),
        ("SELECT id FROM (SELECT id FROM wide WHERE d BETWEEN 20 AND 10) x", 0),
        ("SELECT id FROM (SELECT id FROM wide WHERE d BETWEEN -50 AND 1) x", 4),
    ] {
        assert_eq!(count(&mut m, sql), n, "{sql}");
        assert!(explain(&mut m, &format!("EXPLAIN {sql}")).contains("index_range=d_idx"), "{sql}");
    }
    let plan = explain(&mut m, "EXPLAIN SELECT id FROM (SELECT id FROM wide WHERE d BETWEEN 100 AND 3000) x");
    assert!(!plan.contains("index_range"), "{plan}");
    assert_eq!(count(&mut m, "SELECT id FROM (SELECT id FROM wide WHERE d BETWEEN 100 AND 3000) x"), 5802);

    // An empty build side reads nothing at all.
    let plan = explain(&mut m, "EXPLAIN ANALYZE SELECT b.v FROM small s JOIN big b ON b.id = s.k WHERE s.g = 77");
    assert_eq!(metric(&plan, "TernScan: ex.big", "output_rows"), 0, "{plan}");
    assert!(plan.ends_with("Rows returned: 0"), "{plan}");

    // Errors are the statement's own; a table's EXPLAIN still lists its columns.
    assert!(matches!(m.query("EXPLAIN SELECT * FROM nope"), Res::Err(1146, ..)));
    assert!(matches!(m.query("EXPLAIN SELEC 1"), Res::Err(1064, ..)));
    let Res::Rows(names, cols) = m.query("EXPLAIN big") else { panic!("EXPLAIN big") };
    assert_eq!((names[0].as_str(), cols.len()), ("Field", 3));
}

/// Inner joins start from the input whose filters keep fewest rows, measured on a sample: the
/// guesses for `cat IN (three values)` (3/10) and `kind = 'a'` (1/10) would start from `p`, but
/// `cat` keeps 1 % of `d` and `kind` half of `p`, so `d`'s 3 rows are joined first and `f` is
/// read by their keys. (FROM order scans all of `f`.)
#[test]
fn joins_start_from_the_input_its_sampled_filters_keep_smallest() {
    let (_d, _n, port) = start(1 << 20);
    let (mut m, r) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    assert_eq!(r, Res::Ok);
    for sql in [
        "CREATE DATABASE jo",
        "USE jo",
        "CREATE TABLE f (id INT PRIMARY KEY, d_id INT, p_id INT)",
        "CREATE TABLE d (id INT PRIMARY KEY, cat VARCHAR(10))",
        "CREATE TABLE p (id INT PRIMARY KEY, kind VARCHAR(10))",
    ] {
        assert_eq!(m.query(sql), Res::Ok, "{sql}");
    }
    let f: Vec<String> = (1..=3000).map(|i| format!("({i}, {}, {})", i % 300, i % 100)).collect();
    for chunk in f.chunks(1000) {
        assert_eq!(m.query(&format!("INSERT INTO f VALUES {}", chunk.join(", "))), Res::Ok);
    }
    let d: Vec<String> = (0..300).map(|i| format!("({i}, 'c{}')", i % 100)).collect();
    assert_eq!(m.query(&format!("INSERT INTO d VALUES {}", d.join(", "))), Res::Ok);
    let p: Vec<String> = (0..100).map(|i| format!("({i}, '{}')", if i % 2 == 1 { "a" } else { "b" })).collect();
    assert_eq!(m.query(&format!("INSERT INTO p VALUES {}", p.join(", "))), Res::Ok);
    let sql = "SELECT COUNT(*) FROM f JOIN p ON p.id = f.p_id JOIN d ON d.id = f.d_id \
               WHERE d.cat IN ('c7', 'x', 'y') AND p.kind = 'a'";
    // d.id in {7, 107, 207}: f's ids 7, 107, 207, ... (30 of them), all with p_id 7 ('a').
    assert_eq!(m.query(sql), Res::Rows(vec!["COUNT(*)".into()], vec![vec![Some("30".into())]]));
    let plan = explain(&mut m, &format!("EXPLAIN ANALYZE {sql}"));
    assert!(metric(&plan, "TernScan: jo.f", "output_rows") <= 100, "{plan}");
}
