//! `tern bench tpch`: TPC-H through the MySQL protocol. Generates the data with `tpchgen-cli`
//! (PyPI), loads it with `LOAD DATA LOCAL INFILE`, runs the 22 queries (the specification's text
//! with its validation parameters, in MySQL's dialect) through the `mariadb` command-line client,
//! and with `--against mariadb` / `--against duckdb` runs the same on the peer in the same run
//! (a MariaDB this command starts in a temporary directory; DuckDB in-process through Python),
//! comparing every answer with the peer's.
//!
//! Every engine is timed the same way per query: MariaDB and Tern by the wall time of one
//! `mariadb --batch` process (its ~10 ms start-up included in both), DuckDB by the time of
//! `execute` + `fetchall` inside Python.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct TpchOptions {
    /// The MySQL-protocol server under test (Tern's front end).
    pub addr: String,
    pub scale: f64,
    /// Where generated data is kept (one subdirectory per scale factor; reused).
    pub dir: PathBuf,
    /// "mariadb", "duckdb".
    pub against: Vec<String>,
    /// Query numbers to run (1..=22).
    pub queries: Vec<usize>,
    /// Per query, per engine.
    pub timeout: Duration,
    /// Skip generating and loading (the data is already in Tern's `tpch` database).
    pub no_load: bool,
}

/// One query's outcome on one engine.
#[derive(Debug, Clone)]
pub struct QueryRun {
    pub seconds: f64,
    /// Rows as text cells; Err: the error or timeout.
    pub rows: Result<Vec<Vec<String>>, String>,
}

/// The whole run: load times and per-query results per engine ("tern", then peers).
pub struct TpchReport {
    pub engines: Vec<String>,
    /// (engine, table, rows, seconds)
    pub loads: Vec<(String, String, u64, f64)>,
    /// (query number, one run per engine)
    pub queries: Vec<(usize, Vec<QueryRun>)>,
}

pub const TABLES: [&str; 8] = ["region", "nation", "part", "supplier", "partsupp", "customer", "orders", "lineitem"];

/// The schema (MySQL dialect), with the keys and indexes both Tern and MariaDB get.
pub const SCHEMA: &[(&str, &str)] = &[
    (
        "region",
        "CREATE TABLE region (r_regionkey INT NOT NULL, r_name CHAR(25) NOT NULL, r_comment VARCHAR(152), PRIMARY KEY (r_regionkey))",
    ),
    (
        "nation",
        "CREATE TABLE nation (n_nationkey INT NOT NULL, n_name CHAR(25) NOT NULL, n_regionkey INT NOT NULL, n_comment VARCHAR(152), PRIMARY KEY (n_nationkey), KEY n_rk (n_regionkey))",
    ),
    (
        "part",
        "CREATE TABLE part (p_partkey INT NOT NULL, p_name VARCHAR(55) NOT NULL, p_mfgr CHAR(25) NOT NULL, p_brand CHAR(10) NOT NULL, p_type VARCHAR(25) NOT NULL, p_size INT NOT NULL, p_container CHAR(10) NOT NULL, p_retailprice DECIMAL(15,2) NOT NULL, p_comment VARCHAR(23) NOT NULL, PRIMARY KEY (p_partkey))",
    ),
    (
        "supplier",
        "CREATE TABLE supplier (s_suppkey INT NOT NULL, s_name CHAR(25) NOT NULL, s_address VARCHAR(40) NOT NULL, s_nationkey INT NOT NULL, s_phone CHAR(15) NOT NULL, s_acctbal DECIMAL(15,2) NOT NULL, s_comment VARCHAR(101) NOT NULL, PRIMARY KEY (s_suppkey), KEY s_nk (s_nationkey))",
    ),
    (
        "partsupp",
        "CREATE TABLE partsupp (ps_partkey INT NOT NULL, ps_suppkey INT NOT NULL, ps_availqty INT NOT NULL, ps_supplycost DECIMAL(15,2) NOT NULL, ps_comment VARCHAR(199) NOT NULL, PRIMARY KEY (ps_partkey, ps_suppkey), KEY ps_sk (ps_suppkey))",
    ),
    (
        "customer",
        "CREATE TABLE customer (c_custkey INT NOT NULL, c_name VARCHAR(25) NOT NULL, c_address VARCHAR(40) NOT NULL, c_nationkey INT NOT NULL, c_phone CHAR(15) NOT NULL, c_acctbal DECIMAL(15,2) NOT NULL, c_mktsegment CHAR(10) NOT NULL, c_comment VARCHAR(117) NOT NULL, PRIMARY KEY (c_custkey), KEY c_nk (c_nationkey))",
    ),
    (
        "orders",
        "CREATE TABLE orders (o_orderkey INT NOT NULL, o_custkey INT NOT NULL, o_orderstatus CHAR(1) NOT NULL, o_totalprice DECIMAL(15,2) NOT NULL, o_orderdate DATE NOT NULL, o_orderpriority CHAR(15) NOT NULL, o_clerk CHAR(15) NOT NULL, o_shippriority INT NOT NULL, o_comment VARCHAR(79) NOT NULL, PRIMARY KEY (o_orderkey), KEY o_ck (o_custkey), KEY o_od (o_orderdate))",
    ),
    (
        "lineitem",
        "CREATE TABLE lineitem (l_orderkey INT NOT NULL, l_partkey INT NOT NULL, l_suppkey INT NOT NULL, l_linenumber INT NOT NULL, l_quantity DECIMAL(15,2) NOT NULL, l_extendedprice DECIMAL(15,2) NOT NULL, l_discount DECIMAL(15,2) NOT NULL, l_tax DECIMAL(15,2) NOT NULL, l_returnflag CHAR(1) NOT NULL, l_linestatus CHAR(1) NOT NULL, l_shipdate DATE NOT NULL, l_commitdate DATE NOT NULL, l_receiptdate DATE NOT NULL, l_shipinstruct CHAR(25) NOT NULL, l_shipmode CHAR(10) NOT NULL, l_comment VARCHAR(44) NOT NULL, PRIMARY KEY (l_orderkey, l_linenumber), KEY l_pk_sk (l_partkey, l_suppkey), KEY l_sd (l_shipdate))",
    ),
];

/// The 22 queries with the specification's validation parameters (Q11's fraction is
/// 0.0001 / scale factor, filled in by `query`).
const QUERIES: [&str; 22] = [
    "select l_returnflag, l_linestatus, sum(l_quantity) as sum_qty, sum(l_extendedprice) as sum_base_price, sum(l_extendedprice * (1 - l_discount)) as sum_disc_price, sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) as sum_charge, avg(l_quantity) as avg_qty, avg(l_extendedprice) as avg_price, avg(l_discount) as avg_disc, count(*) as count_order from lineitem where l_shipdate <= date '1998-12-01' - interval '90' day group by l_returnflag, l_linestatus order by l_returnflag, l_linestatus",
    "select s_acctbal, s_name, n_name, p_partkey, p_mfgr, s_address, s_phone, s_comment from part, supplier, partsupp, nation, region where p_partkey = ps_partkey and s_suppkey = ps_suppkey and p_size = 15 and p_type like '%BRASS' and s_nationkey = n_nationkey and n_regionkey = r_regionkey and r_name = 'EUROPE' and ps_supplycost = (select min(ps_supplycost) from partsupp, supplier, nation, region where p_partkey = ps_partkey and s_suppkey = ps_suppkey and s_nationkey = n_nationkey and n_regionkey = r_regionkey and r_name = 'EUROPE') order by s_acctbal desc, n_name, s_name, p_partkey limit 100",
    "select l_orderkey, sum(l_extendedprice * (1 - l_discount)) as revenue, o_orderdate, o_shippriority from customer, orders, lineitem where c_mktsegment = 'BUILDING' and c_custkey = o_custkey and l_orderkey = o_orderkey and o_orderdate < date '1995-03-15' and l_shipdate > date '1995-03-15' group by l_orderkey, o_orderdate, o_shippriority order by revenue desc, o_orderdate limit 10",
    "select o_orderpriority, count(*) as order_count from orders where o_orderdate >= date '1993-07-01' and o_orderdate < date '1993-07-01' + interval '3' month and exists (select * from lineitem where l_orderkey = o_orderkey and l_commitdate < l_receiptdate) group by o_orderpriority order by o_orderpriority",
    "select n_name, sum(l_extendedprice * (1 - l_discount)) as revenue from customer, orders, lineitem, supplier, nation, region where c_custkey = o_custkey and l_orderkey = o_orderkey and l_suppkey = s_suppkey and c_nationkey = s_nationkey and s_nationkey = n_nationkey and n_regionkey = r_regionkey and r_name = 'ASIA' and o_orderdate >= date '1994-01-01' and o_orderdate < date '1994-01-01' + interval '1' year group by n_name order by revenue desc",
    "select sum(l_extendedprice * l_discount) as revenue from lineitem where l_shipdate >= date '1994-01-01' and l_shipdate < date '1994-01-01' + interval '1' year and l_discount between 0.06 - 0.01 and 0.06 + 0.01 and l_quantity < 24",
    "select supp_nation, cust_nation, l_year, sum(volume) as revenue from (select n1.n_name as supp_nation, n2.n_name as cust_nation, extract(year from l_shipdate) as l_year, l_extendedprice * (1 - l_discount) as volume from supplier, lineitem, orders, customer, nation n1, nation n2 where s_suppkey = l_suppkey and o_orderkey = l_orderkey and c_custkey = o_custkey and s_nationkey = n1.n_nationkey and c_nationkey = n2.n_nationkey and ((n1.n_name = 'FRANCE' and n2.n_name = 'GERMANY') or (n1.n_name = 'GERMANY' and n2.n_name = 'FRANCE')) and l_shipdate between date '1995-01-01' and date '1996-12-31') as shipping group by supp_nation, cust_nation, l_year order by supp_nation, cust_nation, l_year",
    "select o_year, sum(case when nation = 'BRAZIL' then volume else 0 end) / sum(volume) as mkt_share from (select extract(year from o_orderdate) as o_year, l_extendedprice * (1 - l_discount) as volume, n2.n_name as nation from part, supplier, lineitem, orders, customer, nation n1, nation n2, region where p_partkey = l_partkey and s_suppkey = l_suppkey and l_orderkey = o_orderkey and o_custkey = c_custkey and c_nationkey = n1.n_nationkey and n1.n_regionkey = r_regionkey and r_name = 'AMERICA' and s_nationkey = n2.n_nationkey and o_orderdate between date '1995-01-01' and date '1996-12-31' and p_type = 'ECONOMY ANODIZED STEEL') as all_nations group by o_year order by o_year",
    "select nation, o_year, sum(amount) as sum_profit from (select n_name as nation, extract(year from o_orderdate) as o_year, l_extendedprice * (1 - l_discount) - ps_supplycost * l_quantity as amount from part, supplier, lineitem, partsupp, orders, nation where s_suppkey = l_suppkey and ps_suppkey = l_suppkey and ps_partkey = l_partkey and p_partkey = l_partkey and o_orderkey = l_orderkey and s_nationkey = n_nationkey and p_name like '%green%') as profit group by nation, o_year order by nation, o_year desc",
    "select c_custkey, c_name, sum(l_extendedprice * (1 - l_discount)) as revenue, c_acctbal, n_name, c_address, c_phone, c_comment from customer, orders, lineitem, nation where c_custkey = o_custkey and l_orderkey = o_orderkey and o_orderdate >= date '1993-10-01' and o_orderdate < date '1993-10-01' + interval '3' month and l_returnflag = 'R' and c_nationkey = n_nationkey group by c_custkey, c_name, c_acctbal, c_phone, n_name, c_address, c_comment order by revenue desc limit 20",
    "select ps_partkey, sum(ps_supplycost * ps_availqty) as value from partsupp, supplier, nation where ps_suppkey = s_suppkey and s_nationkey = n_nationkey and n_name = 'GERMANY' group by ps_partkey having sum(ps_supplycost * ps_availqty) > (select sum(ps_supplycost * ps_availqty) * FRACTION from partsupp, supplier, nation where ps_suppkey = s_suppkey and s_nationkey = n_nationkey and n_name = 'GERMANY') order by value desc",
    "select l_shipmode, sum(case when o_orderpriority = '1-URGENT' or o_orderpriority = '2-HIGH' then 1 else 0 end) as high_line_count, sum(case when o_orderpriority <> '1-URGENT' and o_orderpriority <> '2-HIGH' then 1 else 0 end) as low_line_count from orders, lineitem where o_orderkey = l_orderkey and l_shipmode in ('MAIL', 'SHIP') and l_commitdate < l_receiptdate and l_shipdate < l_commitdate and l_receiptdate >= date '1994-01-01' and l_receiptdate < date '1994-01-01' + interval '1' year group by l_shipmode order by l_shipmode",
    "select c_count, count(*) as custdist from (select c_custkey, count(o_orderkey) as c_count from customer left outer join orders on c_custkey = o_custkey and o_comment not like '%special%requests%' group by c_custkey) as c_orders group by c_count order by custdist desc, c_count desc",
    "select 100.00 * sum(case when p_type like 'PROMO%' then l_extendedprice * (1 - l_discount) else 0 end) / sum(l_extendedprice * (1 - l_discount)) as promo_revenue from lineitem, part where l_partkey = p_partkey and l_shipdate >= date '1995-09-01' and l_shipdate < date '1995-09-01' + interval '1' month",
    "with revenue0 as (select l_suppkey as supplier_no, sum(l_extendedprice * (1 - l_discount)) as total_revenue from lineitem where l_shipdate >= date '1996-01-01' and l_shipdate < date '1996-01-01' + interval '3' month group by l_suppkey) select s_suppkey, s_name, s_address, s_phone, total_revenue from supplier, revenue0 where s_suppkey = supplier_no and total_revenue = (select max(total_revenue) from revenue0) order by s_suppkey",
    "select p_brand, p_type, p_size, count(distinct ps_suppkey) as supplier_cnt from partsupp, part where p_partkey = ps_partkey and p_brand <> 'Brand#45' and p_type not like 'MEDIUM POLISHED%' and p_size in (49, 14, 23, 45, 19, 3, 36, 9) and ps_suppkey not in (select s_suppkey from supplier where s_comment like '%Customer%Complaints%') group by p_brand, p_type, p_size order by supplier_cnt desc, p_brand, p_type, p_size",
    "select sum(l_extendedprice) / 7.0 as avg_yearly from lineitem, part where p_partkey = l_partkey and p_brand = 'Brand#23' and p_container = 'MED BOX' and l_quantity < (select 0.2 * avg(l_quantity) from lineitem where l_partkey = p_partkey)",
    "select c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice, sum(l_quantity) from customer, orders, lineitem where o_orderkey in (select l_orderkey from lineitem group by l_orderkey having sum(l_quantity) > 300) and c_custkey = o_custkey and o_orderkey = l_orderkey group by c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice order by o_totalprice desc, o_orderdate limit 100",
    "select sum(l_extendedprice * (1 - l_discount)) as revenue from lineitem, part where (p_partkey = l_partkey and p_brand = 'Brand#12' and p_container in ('SM CASE', 'SM BOX', 'SM PACK', 'SM PKG') and l_quantity >= 1 and l_quantity <= 1 + 10 and p_size between 1 and 5 and l_shipmode in ('AIR', 'AIR REG') and l_shipinstruct = 'DELIVER IN PERSON') or (p_partkey = l_partkey and p_brand = 'Brand#23' and p_container in ('MED BAG', 'MED BOX', 'MED PKG', 'MED PACK') and l_quantity >= 10 and l_quantity <= 10 + 10 and p_size between 1 and 10 and l_shipmode in ('AIR', 'AIR REG') and l_shipinstruct = 'DELIVER IN PERSON') or (p_partkey = l_partkey and p_brand = 'Brand#34' and p_container in ('LG CASE', 'LG BOX', 'LG PACK', 'LG PKG') and l_quantity >= 20 and l_quantity <= 20 + 10 and p_size between 1 and 15 and l_shipmode in ('AIR', 'AIR REG') and l_shipinstruct = 'DELIVER IN PERSON')",
    "select s_name, s_address from supplier, nation where s_suppkey in (select ps_suppkey from partsupp where ps_partkey in (select p_partkey from part where p_name like 'forest%') and ps_availqty > (select 0.5 * sum(l_quantity) from lineitem where l_partkey = ps_partkey and l_suppkey = ps_suppkey and l_shipdate >= date '1994-01-01' and l_shipdate < date '1994-01-01' + interval '1' year)) and s_nationkey = n_nationkey and n_name = 'CANADA' order by s_name",
    "select s_name, count(*) as numwait from supplier, lineitem l1, orders, nation where s_suppkey = l1.l_suppkey and o_orderkey = l1.l_orderkey and o_orderstatus = 'F' and l1.l_receiptdate > l1.l_commitdate and exists (select * from lineitem l2 where l2.l_orderkey = l1.l_orderkey and l2.l_suppkey <> l1.l_suppkey) and not exists (select * from lineitem l3 where l3.l_orderkey = l1.l_orderkey and l3.l_suppkey <> l1.l_suppkey and l3.l_receiptdate > l3.l_commitdate) and s_nationkey = n_nationkey and n_name = 'SAUDI ARABIA' group by s_name order by numwait desc, s_name limit 100",
    "select cntrycode, count(*) as numcust, sum(c_acctbal) as totacctbal from (select substring(c_phone from 1 for 2) as cntrycode, c_acctbal from customer where substring(c_phone from 1 for 2) in ('13', '31', '23', '29', '30', '18', '17') and c_acctbal > (select avg(c_acctbal) from customer where c_acctbal > 0.00 and substring(c_phone from 1 for 2) in ('13', '31', '23', '29', '30', '18', '17')) and not exists (select * from orders where o_custkey = c_custkey)) as custsale group by cntrycode order by cntrycode",
];

/// Query `n` (1-based) for scale factor `scale`.
pub fn query(n: usize, scale: f64) -> String {
    let q = QUERIES[n - 1];
    if n == 11 { q.replace("FRACTION", &format!("{:.10}", 0.0001 / scale)) } else { q.to_string() }
}

/// The rows a `.tbl` file holds.
fn count_lines(p: &Path) -> u64 {
    use std::io::Read;
    let Ok(mut f) = std::fs::File::open(p) else { return 0 };
    let (mut buf, mut n) = (vec![0u8; 1 << 20], 0u64);
    while let Ok(k) = f.read(&mut buf) {
        if k == 0 {
            break;
        }
        n += buf[..k].iter().filter(|&&c| c == b'\n').count() as u64;
    }
    n
}

/// Generates the data (once per scale factor) and returns its directory.
pub fn generate(dir: &Path, scale: f64) -> Result<PathBuf, String> {
    let out = dir.join(format!("sf{scale}"));
    if TABLES.iter().all(|t| out.join(format!("{t}.tbl")).exists()) {
        return Ok(out);
    }
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let st = Command::new("tpchgen-cli")
        .arg("-s")
        .arg(scale.to_string())
        .arg(format!("--output-dir={}", out.display()))
        .status()
        .map_err(|e| format!("tpchgen-cli is needed (python3 -m pip install tpchgen-cli): {e}"))?;
    if !st.success() {
        return Err(format!("tpchgen-cli failed: {st}"));
    }
    Ok(out)
}

/// A MySQL-protocol endpoint reached through the `mariadb` client.
pub(crate) struct My {
    host: String,
    port: String,
}

impl My {
    pub(crate) fn new(addr: &str) -> Result<My, String> {
        let (h, p) = addr.rsplit_once(':').ok_or_else(|| format!("address {addr} has no port"))?;
        Ok(My { host: h.to_string(), port: p.to_string() })
    }

    fn cmd(&self, db: Option<&str>) -> Command {
        let mut c = Command::new("mariadb");
        c.args(["--batch", "--skip-column-names", "--local-infile=1", "-uroot", "-h"])
            .arg(&self.host)
            .arg("-P")
            .arg(&self.port);
        if let Some(d) = db {
            c.arg(d);
        }
        c
    }

    /// Runs SQL; returns its output lines split in tab-separated cells, within `timeout`.
    pub(crate) fn run(&self, db: Option<&str>, sql: &str, timeout: Duration) -> Result<Vec<Vec<String>>, String> {
        let mut child = self
            .cmd(db)
            .arg("-e")
            .arg(sql)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("the mariadb client is needed (apt-get install -y mariadb-client): {e}"))?;
        let deadline = Instant::now() + timeout;
        // Drain stdout on a thread (large results would fill the pipe).
        let mut stdout = child.stdout.take().expect("piped");
        let reader = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = std::io::Read::read_to_end(&mut stdout, &mut s);
            s
        });
        loop {
            match child.try_wait() {
                Ok(Some(st)) => {
                    let out = reader.join().unwrap_or_default();
                    let mut err = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        let _ = std::io::Read::read_to_string(&mut e, &mut err);
                    }
                    if !st.success() {
                        return Err(err.trim().to_string());
                    }
                    return Ok(String::from_utf8_lossy(&out)
                        .lines()
                        .map(|l| l.split('\t').map(str::to_string).collect())
                        .collect());
                }
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("timed out after {} s", timeout.as_secs()));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}

/// Creates the schema and loads every table; (table, rows, seconds) per table.
fn load_mysql(my: &My, data: &Path, timeout: Duration) -> Result<Vec<(String, u64, f64)>, String> {
    my.run(
        None,
        "DROP DATABASE IF EXISTS tpch; CREATE DATABASE tpch DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        timeout,
    )?;
    let mut out = Vec::new();
    for (t, ddl) in SCHEMA {
        my.run(Some("tpch"), ddl, timeout)?;
        let file = data.join(format!("{t}.tbl"));
        let started = Instant::now();
        my.run(
            Some("tpch"),
            &format!(
                "LOAD DATA LOCAL INFILE '{}' INTO TABLE {t} FIELDS TERMINATED BY '|' LINES TERMINATED BY '|\\n'",
                file.display()
            ),
            timeout,
        )
        .map_err(|e| format!("loading {t}: {e}"))?;
        out.push((t.to_string(), count_lines(&file), started.elapsed().as_secs_f64()));
    }
    Ok(out)
}

fn run_mysql_queries(my: &My, o: &TpchOptions) -> Vec<QueryRun> {
    o.queries
        .iter()
        .map(|&n| {
            let started = Instant::now();
            let rows = my.run(Some("tpch"), &query(n, o.scale), o.timeout);
            QueryRun { seconds: started.elapsed().as_secs_f64(), rows }
        })
        .collect()
}

/// A MariaDB started for the run in a temporary directory (stopped on drop).
struct MariaDb {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_mariadb(base: &Path) -> Result<MariaDb, String> {
    let dir = base.join(format!("mariadb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let data = dir.join("data");
    let st = Command::new("mariadb-install-db")
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .args(["--user=root", "--auth-root-authentication-method=normal"])
        .output()
        .map_err(|e| format!("mariadb-install-db is needed (apt-get install -y mariadb-server): {e}"))?;
    if !st.status.success() {
        return Err(format!("mariadb-install-db: {}", String::from_utf8_lossy(&st.stderr)));
    }
    let port =
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?.port();
    let child = Command::new("mariadbd")
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--port={port}"))
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--socket={}", dir.join("sock").display()))
        .args(["--user=root", "--skip-grant-tables", "--innodb-buffer-pool-size=2G", "--local-infile=1"])
        .arg(format!("--log-error={}", dir.join("err.log").display()))
        .arg(format!("--pid-file={}", dir.join("pid").display()))
        .spawn()
        .map_err(|e| format!("mariadbd: {e}"))?;
    let m = MariaDb { child, dir, port };
    let my = My::new(&format!("127.0.0.1:{port}"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if my.run(None, "SELECT 1", Duration::from_secs(5)).is_ok() {
            return Ok(m);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err("MariaDB did not start".into())
}

/// The DuckDB side: a Python program that loads the `.tbl` files and times every query.
const DUCKDB_SCRIPT: &str = r#"
import duckdb, json, sys, time
spec = json.load(sys.stdin)
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
out = {"loads": [], "queries": []}
for name, ddl in spec["schema"]:
    con.execute(ddl)
    t = time.perf_counter()
    con.execute(f"INSERT INTO {name} SELECT * FROM read_csv('{spec['dir']}/{name}.tbl', delim='|', header=false, auto_detect=false, columns={spec['columns'][name]})")
    n = con.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
    out["loads"].append([name, n, time.perf_counter() - t])
def cell(v):
    return "NULL" if v is None else str(v)
for n, q in spec["queries"]:
    t = time.perf_counter()
    try:
        rows = [[cell(v) for v in r] for r in con.execute(q).fetchall()]
        out["queries"].append([n, time.perf_counter() - t, rows, None])
    except Exception as e:
        out["queries"].append([n, time.perf_counter() - t, None, str(e)])
json.dump(out, sys.stdout)
"#;

/// DuckDB's column list of a table for read_csv: name -> type, in order.
fn duck_columns(ddl: &str) -> String {
    let inner = &ddl[ddl.find('(').map_or(0, |i| i + 1)..];
    let mut cols = Vec::new();
    for part in inner.split(", ") {
        let mut w = part.split_whitespace();
        let (Some(name), Some(ty)) = (w.next(), w.next()) else { continue };
        if name == "PRIMARY" || name == "KEY" {
            break;
        }
        cols.push(format!("'{name}': '{ty}'"));
    }
    // The trailing '|' of every line is one more, empty column.
    cols.push("'_end': 'VARCHAR'".into());
    format!("{{{}}}", cols.join(", "))
}

/// A peer's loads (table, rows, seconds) and query runs.
type PeerRun = (Vec<(String, u64, f64)>, Vec<QueryRun>);

fn run_duckdb(data: &Path, o: &TpchOptions) -> Result<PeerRun, String> {
    let schema: Vec<(String, String)> = SCHEMA
        .iter()
        .map(|(t, ddl)| {
            // DuckDB takes the columns and primary key, not MySQL's secondary KEYs.
            let cols = match ddl.split_once(", KEY") {
                Some((cols, _)) => format!("{cols})"),
                None => ddl.to_string(),
            };
            (t.to_string(), cols.replace(", PRIMARY KEY", ", _end VARCHAR, PRIMARY KEY"))
        })
        .collect();
    let columns: serde_json::Map<String, serde_json::Value> =
        SCHEMA.iter().map(|(t, ddl)| (t.to_string(), duck_columns(ddl).into())).collect();
    let queries: Vec<(usize, String)> = o.queries.iter().map(|&n| (n, query(n, o.scale))).collect();
    let spec = serde_json::json!({
        "dir": data.display().to_string(),
        "schema": schema,
        "columns": columns,
        "queries": queries,
    })
    .to_string();
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(DUCKDB_SCRIPT)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("python3: {e}"))?;
    child.stdin.take().expect("piped").write_all(spec.as_bytes()).map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "DuckDB (python3 -m pip install duckdb) failed: {}",
            String::from_utf8_lossy(&out.stderr).lines().rev().take(6).collect::<Vec<_>>().join(" / ")
        ));
    }
    parse_duck(&String::from_utf8_lossy(&out.stdout))
}

/// DuckDB's answer: loads `[table, rows, seconds]` and queries `[n, seconds, rows | null,
/// error | null]`.
fn parse_duck(text: &str) -> Result<PeerRun, String> {
    use serde_json::Value as J;
    let top: J = serde_json::from_str(text).map_err(|e| format!("DuckDB's answer: {e}"))?;
    let loads = top["loads"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| Some((l[0].as_str()?.to_string(), l[1].as_u64()?, l[2].as_f64()?)))
        .collect();
    let cell = |c: &J| match c {
        J::String(x) => x.clone(),
        J::Null => "NULL".into(),
        o => o.to_string(),
    };
    let runs = top["queries"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|q| QueryRun {
            seconds: q[1].as_f64().unwrap_or(0.0),
            rows: match (&q[2], &q[3]) {
                (J::Array(rs), _) => {
                    Ok(rs.iter().map(|r| r.as_array().into_iter().flatten().map(cell).collect()).collect())
                }
                (_, J::String(e)) => Err(e.clone()),
                _ => Err("no result".into()),
            },
        })
        .collect();
    Ok((loads, runs))
}

/// Whether two answers agree: same row count and, cell by cell, equal text or numbers within
/// rounding of the last printed digit (engines print decimals and doubles differently).
/// Ok(true): every cell's text is the same.
pub fn same_answer(a: &[Vec<String>], b: &[Vec<String>]) -> Result<bool, String> {
    let mut exact = true;
    if a.len() != b.len() {
        return Err(format!("{} rows vs {}", a.len(), b.len()));
    }
    for (i, (ra, rb)) in a.iter().zip(b).enumerate() {
        if ra.len() != rb.len() {
            return Err(format!("row {i}: {} columns vs {}", ra.len(), rb.len()));
        }
        for (x, y) in ra.iter().zip(rb) {
            let (x, y) = (x.trim_end(), y.trim_end());
            if x == y {
                continue;
            }
            exact = false;
            match (x.parse::<f64>(), y.parse::<f64>()) {
                (Ok(p), Ok(q)) if (p - q).abs() <= 0.005 + 1e-9 * p.abs().max(q.abs()) => {}
                _ => return Err(format!("row {i}: {x:?} vs {y:?}")),
            }
        }
    }
    Ok(exact)
}

pub fn run(o: &TpchOptions) -> Result<TpchReport, String> {
    let data = generate(&o.dir, o.scale)?;
    let tern = My::new(&o.addr)?;
    let mut engines = vec!["tern".to_string()];
    let mut loads = Vec::new();
    if !o.no_load {
        eprintln!("loading scale factor {} into Tern at {} ...", o.scale, o.addr);
        for (t, n, s) in load_mysql(&tern, &data, o.timeout)? {
            loads.push(("tern".to_string(), t, n, s));
        }
    }
    let mut per_engine = Vec::new();
    eprintln!("running {} queries on Tern ...", o.queries.len());
    per_engine.push(run_mysql_queries(&tern, o));
    for peer in &o.against {
        match peer.as_str() {
            "mariadb" => {
                eprintln!("starting MariaDB and loading ...");
                let m = start_mariadb(&o.dir)?;
                let my = My::new(&format!("127.0.0.1:{}", m.port))?;
                for (t, n, s) in load_mysql(&my, &data, o.timeout.max(Duration::from_secs(3600)))? {
                    loads.push(("mariadb".to_string(), t, n, s));
                }
                eprintln!("running {} queries on MariaDB ...", o.queries.len());
                per_engine.push(run_mysql_queries(&my, o));
            }
            "duckdb" => {
                eprintln!("loading and running on DuckDB ...");
                // A failing peer does not lose Tern's figures: its queries report the error.
                let (l, runs) = run_duckdb(&data, o).unwrap_or_else(|e| {
                    eprintln!("DuckDB: {e}");
                    (Vec::new(), Vec::new())
                });
                for (t, n, s) in l {
                    loads.push(("duckdb".to_string(), t, n, s));
                }
                per_engine.push(runs);
            }
            other => return Err(format!("unknown peer {other} (mariadb, duckdb)")),
        }
        engines.push(peer.clone());
    }
    let queries = o
        .queries
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            (
                n,
                per_engine
                    .iter()
                    .map(|runs| runs.get(i).cloned().unwrap_or(QueryRun { seconds: 0.0, rows: Err("not run".into()) }))
                    .collect(),
            )
        })
        .collect();
    Ok(TpchReport { engines, loads, queries })
}

/// The report as a table: load rates, then per query the time on each engine, Tern's ratio to
/// each peer, and whether Tern's answer equals each peer's.
pub fn print(r: &TpchReport) {
    println!("{:<10} {:<9} {:>10} {:>9} {:>12}", "load", "table", "rows", "seconds", "rows/s");
    for (e, t, n, s) in &r.loads {
        println!("{e:<10} {t:<9} {n:>10} {s:>9.2} {:>12.0}", *n as f64 / s.max(1e-9));
    }
    println!();
    let mut head = format!("{:<5}", "query");
    for e in &r.engines {
        head.push_str(&format!(" {:>10}", format!("{e} s")));
    }
    for e in r.engines.iter().skip(1) {
        head.push_str(&format!(" {:>12}", format!("{e}/tern")));
    }
    head.push_str("  answer");
    println!("{head}");
    for (n, runs) in &r.queries {
        let mut line = format!("Q{n:<4}");
        for run in runs {
            line.push_str(&match &run.rows {
                Ok(_) => format!(" {:>10.3}", run.seconds),
                Err(_) => format!(" {:>10}", "error"),
            });
        }
        for run in runs.iter().skip(1) {
            line.push_str(&format!(" {:>12.2}", run.seconds / runs[0].seconds.max(1e-9)));
        }
        let mut verdicts = Vec::new();
        for (e, run) in r.engines.iter().zip(runs).skip(1) {
            verdicts.push(match (&runs[0].rows, &run.rows) {
                (Ok(a), Ok(b)) => match same_answer(a, b) {
                    Ok(true) => format!("= {e}"),
                    Ok(false) => format!("~ {e} (last digits)"),
                    Err(d) => format!("DIFFERS from {e}: {d}"),
                },
                (Err(a), _) => format!("tern: {}", a.lines().next().unwrap_or("")),
                (_, Err(b)) => format!("{e}: {}", b.lines().next().unwrap_or("")),
            });
        }
        if verdicts.is_empty() {
            verdicts.push(match &runs[0].rows {
                Ok(rows) => format!("{} rows", rows.len()),
                Err(e) => e.lines().next().unwrap_or("").to_string(),
            });
        }
        println!("{line}  {}", verdicts.join("; "));
    }
}
