//! Hostile input: garbage bytes, damaged frames, and well-framed requests full of random values
//! must never stop the data node; each gets an error (or a closed connection), and clients that
//! behave keep being served with their data intact. Prints its seed; rerun with TERN_SEED.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use tern_client::{Client, ColumnType, DdlReq, Index, OpResult, Table, Value};
use tern_kernel::NodeConfig;
use tern_runtime::{DataNode, DataNodeConfig};
use tern_types::filter::{CmpOp, Filter};
use tern_types::rng::Rng;
use tern_types::schema::Column;
use tern_wire::{
    AbortOption, Bound, ColumnUpdate, Exec, KeyOp, OpKind, Reply, Request, ScanReq, TxnReq, UpdateExpr, decode_frame,
    encode_frame,
};

fn node(dir: &std::path::Path) -> DataNode {
    let mut node = NodeConfig::new(1, 2, 64 << 20);
    // Random transactions leave locks behind; keep waits short.
    node.ldm.lock_wait_timeout_ms = 20;
    let cfg = DataNodeConfig {
        node,
        data_dir: dir.to_path_buf(),
        listen: "127.0.0.1:0".parse().unwrap(),
        spin_max_us: 10,
        expect_spin_us: tern_runtime::EXPECT_SPIN_US_DEFAULT,
        redo_segment_bytes: 1 << 20,
        idle_hook: None,
        control: None,
        transporter: tern_runtime::Transporter::Auto,
        cluster_secret: None,
    };
    let n = DataNode::start(cfg).unwrap();
    assert!(n.wait_started(Duration::from_secs(20)));
    n
}

fn random_bytes(rng: &mut Rng, max: u64) -> Vec<u8> {
    (0..rng.below(max)).map(|_| rng.below(256) as u8).collect()
}

fn random_value(rng: &mut Rng) -> Value {
    match rng.below(8) {
        0 => Value::Null,
        1 => Value::Int(rng.next_u64() as i64),
        2 => Value::UInt(rng.next_u64()),
        3 => Value::Double(f64::from_bits(rng.next_u64())),
        4 => Value::Bytes(random_bytes(rng, 40)),
        5 => Value::Decimal { v: rng.next_u64() as i128, scale: rng.below(39) as u8 },
        6 => Value::Date(rng.next_u64() as i32),
        _ => Value::Timestamp(rng.next_u64() as i64),
    }
}

fn random_op(rng: &mut Rng, tables: &[u32]) -> KeyOp {
    let kinds = [
        OpKind::Read,
        OpKind::ReadShared,
        OpKind::ReadExclusive,
        OpKind::Insert,
        OpKind::Update,
        OpKind::Write,
        OpKind::Delete,
        OpKind::DeleteExpired,
        OpKind::UpdateDirty,
    ];
    KeyOp {
        table: if rng.chance(80) { *rng.pick(tables) } else { rng.next_u64() as u32 },
        kind: *rng.pick(&kinds),
        key: random_bytes(rng, 12),
        row: random_bytes(rng, 64),
        updates: (0..rng.below(3))
            .map(|_| ColumnUpdate {
                col: rng.below(6) as u16,
                expr: if rng.chance(50) {
                    UpdateExpr::Set(random_value(rng))
                } else {
                    UpdateExpr::Add(random_value(rng))
                },
            })
            .collect(),
        projection: if rng.chance(30) { Some((0..rng.below(4)).map(|_| rng.below(6) as u16).collect()) } else { None },
    }
}

fn random_request(rng: &mut Rng, tables: &[u32]) -> Request {
    match rng.below(3) {
        0 | 1 => Request::Txn(TxnReq {
            txn: rng.below(4),
            ops: (0..rng.below(6)).map(|_| random_op(rng, tables)).collect(),
            exec: *rng.pick(&[Exec::NoCommit, Exec::Commit, Exec::Rollback]),
            abort: *rng.pick(&[AbortOption::AbortOnError, AbortOption::IgnoreError]),
            durable: rng.chance(10),
            nowait: rng.chance(20),
        }),
        _ => Request::Scan(ScanReq {
            scan: rng.below(4),
            table: *rng.pick(tables),
            index: if rng.chance(50) { Some(rng.below(6) as u32) } else { None },
            lo: rng.chance(50).then(|| Bound { key: random_bytes(rng, 10), inclusive: rng.chance(50) }),
            hi: rng.chance(50).then(|| Bound { key: random_bytes(rng, 10), inclusive: rng.chance(50) }),
            ranges: (0..if rng.chance(20) { rng.below(5) } else { 0 })
                .map(|_| {
                    let b = |rng: &mut Rng| Bound { key: random_bytes(rng, 10), inclusive: rng.chance(50) };
                    (rng.chance(80).then(|| b(rng)), rng.chance(80).then(|| b(rng)))
                })
                .collect(),
            filter: Filter::Cmp { col: rng.below(6) as u16, op: CmpOp::Gt, value: random_value(rng) },
            projection: None,
            limit: rng.below(5),
            ordered: rng.chance(50),
            descending: rng.chance(50),
            batch_rows: rng.below(10) as u32,
            partition: if rng.chance(30) { Some(rng.below(4) as u32) } else { None },
            expired: rng.chance(10),
            aggregate: rng.chance(20).then(|| tern_agg::Aggregation {
                group_by: (0..rng.below(3)).map(|_| tern_agg::AggExpr::Col(rng.below(8) as u16)).collect(),
                aggs: (0..rng.below(4))
                    .map(|_| {
                        let op = *rng.pick(&[
                            tern_agg::AggOp::Count,
                            tern_agg::AggOp::Sum,
                            tern_agg::AggOp::Min,
                            tern_agg::AggOp::Max,
                            tern_agg::AggOp::Var,
                        ]);
                        let c = tern_agg::AggExpr::Col(rng.below(8) as u16);
                        let arg = match rng.below(3) {
                            0 => None,
                            1 => Some(c),
                            _ => Some(tern_agg::AggExpr::Bin(
                                tern_agg::Arith::Mul,
                                Box::new(c),
                                Box::new(tern_agg::AggExpr::Lit(Value::Int(rng.below(1000) as i64 - 500))),
                            )),
                        };
                        (op, arg)
                    })
                    .collect(),
            }),
            offset: if rng.chance(20) { rng.below(1 << 40) } else { 0 },
        }),
    }
}

/// A raw connection to the node: TCP, or the shared-memory rings (bytes written into the
/// request ring, read from the reply ring; end-of-file is the Unix socket closing).
enum Pipe {
    Tcp(TcpStream),
    Shm(std::os::unix::net::UnixStream, Box<tern_shm::Endpoint>),
}

impl Pipe {
    fn open(addr: &str, shm: bool) -> Pipe {
        if shm {
            let port = addr.rsplit_once(':').unwrap().1.parse().unwrap();
            let (s, e) = tern_shm::connect(port, Duration::from_secs(5)).unwrap();
            s.set_nonblocking(true).unwrap();
            return Pipe::Shm(s, Box::new(e));
        }
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Pipe::Tcp(s)
    }

    fn shutdown_write(&self) {
        let _ = match self {
            Pipe::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
            Pipe::Shm(s, _) => s.shutdown(std::net::Shutdown::Write),
        };
    }
}

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Pipe::Tcp(s) => s.write(buf),
            Pipe::Shm(_, e) => {
                let until = std::time::Instant::now() + Duration::from_secs(10);
                loop {
                    let n = e.send(buf).map_err(std::io::Error::other)?;
                    if n > 0 || buf.is_empty() {
                        return Ok(n);
                    }
                    if std::time::Instant::now() > until {
                        return Err(std::io::ErrorKind::TimedOut.into());
                    }
                    std::thread::yield_now();
                }
            }
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Read for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Pipe::Tcp(s) => s.read(buf),
            Pipe::Shm(s, e) => {
                let until = std::time::Instant::now() + Duration::from_secs(10);
                loop {
                    let mut v = Vec::new();
                    let n = e.recv_into(&mut v, buf.len()).map_err(std::io::Error::other)?;
                    if n > 0 {
                        buf[..n].copy_from_slice(&v);
                        return Ok(n);
                    }
                    let mut b = [0u8; 8];
                    match s.read(&mut b) {
                        Ok(0) => return Ok(0),
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                    if std::time::Instant::now() > until {
                        return Err(std::io::ErrorKind::TimedOut.into());
                    }
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
    }
}

#[test]
fn hostile_clients_do_not_hurt_the_node() {
    hostile(false);
}

/// The same over the shared-memory transporter: the rings carry the same frames, and the node
/// treats damaged ones the same way.
#[test]
fn hostile_shared_memory_clients_do_not_hurt_the_node() {
    hostile(true);
}

fn hostile(shm: bool) {
    let seed = tern_testkit::seed();
    println!("seed = {seed} (rerun with TERN_SEED={seed})");
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let n = node(dir.path());
    let addr = n.local_addr().to_string();
    let good = Client::connect(&addr).unwrap();
    good.ddl(DdlReq::CreateDatabase { name: "h".into(), if_not_exists: true }).unwrap();
    let table = Table {
        id: 0,
        database: "h".into(),
        name: "t".into(),
        columns: vec![
            Column::new("id", ColumnType::Int { unsigned: false }).not_null(),
            Column::new("v", ColumnType::VarChar { len: 10 }),
            Column::new("d", ColumnType::Decimal { precision: 10, scale: 2, unsigned: false }),
            Column::new("b", ColumnType::Binary { len: 20 }),
        ],
        primary_key: vec![0],
        partition_key: vec![0],
        indexes: vec![Index { id: 0, name: "v_uq".into(), columns: vec![1], unique: true }],
        partition_count: 0,
        groups: 0,
        ttl: None,
        comment: String::new(),
    };
    good.ddl(DdlReq::CreateTable { table, if_not_exists: false }).unwrap();
    let t = good.table("h", "t").unwrap();
    let row = [Value::Int(1), Value::str("one"), Value::str("1.50"), Value::Bytes(vec![1; 20])];
    good.blocking().execute(vec![t.insert(&row).unwrap()]).unwrap();
    let tables: Vec<u32> = good.catalog().tables.keys().copied().collect();

    // 1. Garbage bytes and damaged frames: the node closes those connections.
    for i in 0..50 {
        let mut s = Pipe::open(&addr, shm);
        let mut bytes = random_bytes(&mut rng, 300);
        if i % 2 == 0 {
            // A valid frame header whose payload was damaged in flight.
            let mut f = Vec::new();
            encode_frame(&random_bytes(&mut rng, 100), &mut f);
            let at = 16 + rng.below((f.len() - 16).max(1) as u64) as usize;
            if at < f.len() {
                f[at] ^= 0x40;
            }
            bytes = f;
        }
        let _ = s.write_all(&bytes);
        // An incomplete frame would wait for more bytes: end the stream so the node sees EOF.
        s.shutdown_write();
        let mut buf = [0u8; 64];
        let _ = s.read(&mut buf);
    }
    // 2. Well-framed requests with random contents: each gets a reply, the connection lives.
    let mut s = Pipe::open(&addr, shm);
    let mut hello = Vec::new();
    Request::Hello { client_name: "hostile".into(), worker: None, proof: None }.encode(1, &mut hello);
    let mut f = Vec::new();
    encode_frame(&hello, &mut f);
    s.write_all(&f).unwrap();
    let mut inbuf: Vec<u8> = Vec::new();
    let mut read_reply = |s: &mut Pipe| -> (u64, Reply) {
        loop {
            if let Some((payload, used)) = decode_frame(&inbuf).unwrap() {
                let r = Reply::decode(payload).expect("the node's replies decode");
                inbuf.drain(..used);
                return r;
            }
            let mut b = [0u8; 65536];
            let n = s.read(&mut b).expect("the node answers");
            assert!(n > 0, "the node closed a connection that sent only well-framed requests");
            inbuf.extend_from_slice(&b[..n]);
        }
    };
    assert!(matches!(read_reply(&mut s).1, Reply::Welcome { .. }));
    for id in 2..2002u64 {
        let req = random_request(&mut rng, &tables);
        let mut p = Vec::new();
        req.encode(id, &mut p);
        let mut f = Vec::new();
        encode_frame(&p, &mut f);
        s.write_all(&f).unwrap();
        let (got, _) = read_reply(&mut s);
        assert_eq!(got, id, "one reply per request, in order");
    }
    // 3. Raw well-framed payloads that are not requests at all.
    for id in 0..200u64 {
        let mut p = vec![rng.below(20) as u8];
        p.extend_from_slice(&(5000 + id).to_le_bytes());
        p.extend(random_bytes(&mut rng, 80));
        let mut f = Vec::new();
        encode_frame(&p, &mut f);
        s.write_all(&f).unwrap();
        let (_, r) = read_reply(&mut s);
        assert!(!matches!(r, Reply::Welcome { .. }));
    }
    drop(s);
    // The node still serves, and the row written before is intact (random writes may only have
    // touched keys they could encode, never this row's layout).
    let r = good.blocking().execute(vec![t.read(&[Value::Int(1)]).unwrap()]).unwrap();
    match &r[0] {
        OpResult::Row(b) => assert!(t.decode_row(b).is_ok()),
        OpResult::NotFound => {}
        other => panic!("{other:?}"),
    }
    let st = good.status().unwrap();
    assert_eq!(st.state, "started");
}
