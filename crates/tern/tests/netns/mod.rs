//! A harness of "hosts" on one machine: each host is a network namespace with its own address
//! (10.A.B.n/24) on a veth pair whose other end sits in a switch namespace, on a bridge. Nothing
//! of it touches the machine's own namespace: the bridge lives in the switch namespace, and the
//! test reaches the hosts from threads that enter a client host's namespace (`in_ns`).
//!
//! Faults: `kill_host` (every process of the host SIGKILLed and its link down, as a power
//! loss), `partition` (some hosts' ports moved to a second bridge: two sides that reach only
//! their own), and an impaired network (`Impair`: added latency and loss). Where the kernel has
//! `sch_netem`, an impairment that is the same between every pair of hosts is `tc qdisc … netem`
//! on each host's interface; otherwise (and for per-zone latency) the switch namespace has no
//! bridge and a userspace switch thread forwards the frames between the ports (AF_PACKET
//! sockets), holding each for its delay and dropping some. Namespaces are named
//! `tern-<pid>-<n>-<host>`; a harness of a process that no longer runs is removed by the next.
//! Needs root and iproute2 (and ethtool for the userspace switch); without them the tests fail
//! unless `TERN_SKIP_NETNS=1` is set.
#![allow(dead_code)] // each test binary uses its own subset

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Whether the harness can run here; with `TERN_SKIP_NETNS=1` a test without it returns early
/// (printing why), otherwise it fails.
pub fn required() -> bool {
    let why = if unsafe { libc::geteuid() } != 0 {
        Some("not root".to_string())
    } else {
        match Command::new("ip").args(["netns", "list"]).output() {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some(String::from_utf8_lossy(&o.stderr).to_string()),
            Err(e) => Some(format!("no `ip` (iproute2): {e}")),
        }
    };
    match why {
        None => true,
        Some(why) if std::env::var("TERN_SKIP_NETNS").as_deref() == Ok("1") => {
            println!("skipped: the network-namespace harness cannot run here ({why})");
            false
        }
        Some(why) => panic!(
            "the network-namespace harness needs root and iproute2 ({why}); set TERN_SKIP_NETNS=1 to skip these tests"
        ),
    }
}

/// Runs a command, panicking with its output when it fails.
pub fn run(cmd: &str, args: &[&str]) -> String {
    let o = Command::new(cmd).args(args).stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        o.status.success(),
        "{cmd} {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn ip(args: &[&str]) {
    run("ip", args);
}

/// Added latency and loss between hosts.
#[derive(Clone, Debug)]
pub struct Impair {
    /// One-way delay range within a zone, microseconds.
    pub same_zone_us: (u64, u64),
    /// One-way delay range between zones.
    pub cross_zone_us: (u64, u64),
    /// Frames dropped, per 10,000.
    pub loss_per_10k: u64,
    /// Each host's zone (hosts not named: zone 0).
    pub zones: BTreeMap<String, u8>,
    pub seed: u64,
}

impl Impair {
    pub fn uniform(min_us: u64, max_us: u64, loss_per_10k: u64, seed: u64) -> Impair {
        Impair {
            same_zone_us: (min_us, max_us),
            cross_zone_us: (min_us, max_us),
            loss_per_10k,
            zones: BTreeMap::new(),
            seed,
        }
    }
}

pub struct Host {
    pub name: String,
    pub ns: String,
    pub ip: String,
    /// The switch side of its veth.
    port: String,
    procs: Vec<(String, Child)>,
}

pub struct Net {
    pub dir: std::path::PathBuf,
    prefix: String,
    sw: String,
    net: (u8, u8),
    pub hosts: BTreeMap<String, Host>,
    impair: Option<Impair>,
    /// How the impairment is applied: "netem", "userspace" or "" (none).
    pub impaired_by: &'static str,
    switch: Option<(Arc<AtomicBool>, std::thread::JoinHandle<SwitchStats>)>,
    ports: Arc<Mutex<Vec<(String, u8)>>>,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SwitchStats {
    pub frames: u64,
    pub dropped: u64,
}

static HARNESSES: AtomicU32 = AtomicU32::new(0);

/// Removes namespaces of harnesses whose process is gone.
fn sweep() {
    let Ok(o) = Command::new("ip").args(["netns", "list"]).output() else { return };
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix("tern-") else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new("ip").args(["netns", "del", name]).output();
        }
    }
}

impl Net {
    /// An empty network: the switch namespace with its bridges (or, impaired without netem,
    /// the userspace switch once `start` is called).
    pub fn new(dir: &std::path::Path, impair: Option<Impair>) -> Net {
        sweep();
        let n = HARNESSES.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let prefix = format!("tern-{pid}-{n}");
        // 10.(100 + pid % 100).(n % 250).x: harnesses of parallel tests and processes differ.
        let net = (100 + (pid % 100) as u8, (n % 250) as u8);
        let sw = format!("{prefix}-sw");
        ip(&["netns", "add", &sw]);
        ip(&["-n", &sw, "link", "set", "lo", "up"]);
        let mut me = Net {
            dir: dir.to_path_buf(),
            prefix,
            sw,
            net,
            hosts: BTreeMap::new(),
            impair: None,
            impaired_by: "",
            switch: None,
            ports: Arc::default(),
        };
        let uniform = impair.as_ref().is_some_and(|i| i.same_zone_us == i.cross_zone_us);
        me.impaired_by = match &impair {
            None => "",
            Some(_) if uniform && netem_available() => "netem",
            Some(_) => "userspace",
        };
        me.impair = impair;
        if me.impaired_by != "userspace" {
            for br in ["br0", "br1"] {
                ip(&["-n", &me.sw, "link", "add", br, "type", "bridge"]);
                ip(&["-n", &me.sw, "link", "set", br, "up"]);
            }
        }
        me
    }

    /// Adds host `name` (its address is returned).
    pub fn add_host(&mut self, name: &str) -> String {
        let idx = self.hosts.len() + 1;
        let ns = format!("{}-{name}", self.prefix);
        let addr = format!("10.{}.{}.{}", self.net.0, self.net.1, 10 + idx);
        // The switch side's name need only be unique in the switch namespace (the veth is made
        // there and in the host's namespace directly).
        let port = format!("p{idx}");
        ip(&["netns", "add", &ns]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ip(&["link", "add", &port, "netns", &self.sw, "type", "veth", "peer", "name", "eth0", "netns", &ns]);
        ip(&["-n", &ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"]);
        ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        match self.impaired_by {
            "userspace" => {
                // Frames must reach the userspace switch as they go on the wire: no offloads
                // (segmentation, checksums left to the device).
                for (n, dev) in [(&ns, "eth0"), (&self.sw, port.as_str())] {
                    run(
                        "ip",
                        &[
                            "netns", "exec", n, "ethtool", "-K", dev, "tx", "off", "rx", "off", "tso", "off", "gso",
                            "off", "gro", "off",
                        ],
                    );
                }
                ip(&["-n", &self.sw, "link", "set", &port, "promisc", "on"]);
                let zone = self.impair.as_ref().and_then(|i| i.zones.get(name).copied()).unwrap_or(0);
                self.ports.lock().unwrap().push((port.clone(), zone));
            }
            _ => ip(&["-n", &self.sw, "link", "set", &port, "master", "br0"]),
        }
        ip(&["-n", &self.sw, "link", "set", &port, "up"]);
        if self.impaired_by == "netem" {
            let i = self.impair.as_ref().unwrap();
            let (lo, hi) = i.same_zone_us;
            let (mid, jitter) = ((lo + hi) / 2, (hi - lo) / 2);
            let loss = format!("{}.{:02}%", i.loss_per_10k / 100, i.loss_per_10k % 100);
            run(
                "ip",
                &[
                    "netns",
                    "exec",
                    &ns,
                    "tc",
                    "qdisc",
                    "add",
                    "dev",
                    "eth0",
                    "root",
                    "netem",
                    "delay",
                    &format!("{mid}us"),
                    &format!("{jitter}us"),
                    "loss",
                    &loss,
                ],
            );
        }
        self.hosts.insert(name.into(), Host { name: name.into(), ns, ip: addr.clone(), port, procs: Vec::new() });
        addr
    }

    pub fn ip_of(&self, host: &str) -> String {
        self.hosts[host].ip.clone()
    }

    pub fn ns_of(&self, host: &str) -> String {
        self.hosts[host].ns.clone()
    }

    /// Starts the userspace switch (impaired networks without netem) once every host is added.
    pub fn start(&mut self) {
        if self.impaired_by != "userspace" || self.switch.is_some() {
            return;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (sw, ports, impair, stop2) =
            (self.sw.clone(), self.ports.lock().unwrap().clone(), self.impair.clone().unwrap(), stop.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            enter_ns(&sw);
            userspace_switch(&ports, &impair, &stop2, tx)
        });
        rx.recv_timeout(Duration::from_secs(10)).expect("the userspace switch started");
        self.switch = Some((stop, h));
    }

    /// Starts `tern ARGS` on `host` as process `name`, its stderr in `dir/<host>-<name>.log`.
    pub fn spawn(&mut self, host: &str, name: &str, args: &[String], env: &[(&str, String)]) {
        let h = self.hosts.get_mut(host).expect("host");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{host}-{name}.log")))
            .unwrap();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &h.ns, env!("CARGO_BIN_EXE_tern")]).args(args);
        cmd.env("TERN_LOG", std::env::var("TERN_TEST_LOG").unwrap_or_else(|_| "warn".into()));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log).spawn().expect("spawn tern");
        h.procs.push((name.into(), child));
    }

    /// The exit status of process `name` on `host` if it ended (and forgets it).
    pub fn exited(&mut self, host: &str, name: &str) -> Option<std::process::ExitStatus> {
        let h = self.hosts.get_mut(host)?;
        let i = h.procs.iter().position(|(n, _)| n == name)?;
        let st = h.procs[i].1.try_wait().unwrap()?;
        h.procs.remove(i);
        Some(st)
    }

    /// Whether process `name` on `host` runs.
    pub fn running(&mut self, host: &str, name: &str) -> bool {
        let Some(h) = self.hosts.get_mut(host) else { return false };
        h.procs.iter_mut().any(|(n, c)| n == name && c.try_wait().unwrap().is_none())
    }

    /// The processes that ended, as (host, name, status), forgotten.
    pub fn reap(&mut self) -> Vec<(String, String, std::process::ExitStatus)> {
        let mut out = Vec::new();
        for h in self.hosts.values_mut() {
            let mut i = 0;
            while i < h.procs.len() {
                if let Some(st) = h.procs[i].1.try_wait().unwrap() {
                    let (n, _) = h.procs.remove(i);
                    out.push((h.name.clone(), n, st));
                } else {
                    i += 1;
                }
            }
        }
        out
    }

    /// The loss of a whole host: every process on it SIGKILLed, its link down.
    pub fn kill_host(&mut self, host: &str) {
        let h = self.hosts.get_mut(host).expect("host");
        for (_, mut c) in std::mem::take(&mut h.procs) {
            let _ = c.kill();
            let _ = c.wait();
        }
        let port = h.port.clone();
        self.link(&port, false);
    }

    /// The host is back (its disk survived): its link up, no process running yet.
    pub fn revive_host(&mut self, host: &str) {
        let port = self.hosts[host].port.clone();
        self.link(&port, true);
    }

    fn link(&self, port: &str, up: bool) {
        if self.impaired_by == "userspace" {
            // The userspace switch's ports stay up; a host down is cut off by its own end.
            let ns = self.hosts.values().find(|h| h.port == port).unwrap().ns.clone();
            ip(&["-n", &ns, "link", "set", "eth0", if up { "up" } else { "down" }]);
            return;
        }
        ip(&["-n", &self.sw, "link", "set", port, if up { "up" } else { "down" }]);
    }

    /// Splits the network: `side` on one bridge, every other host on the other.
    pub fn partition(&self, side: &[&str]) {
        assert_ne!(self.impaired_by, "userspace", "partitions need the bridges");
        for h in side {
            ip(&["-n", &self.sw, "link", "set", &self.hosts[*h].port, "master", "br1"]);
        }
    }

    /// Ends a partition: every host on one bridge again.
    pub fn heal(&self) {
        for h in self.hosts.values() {
            ip(&["-n", &self.sw, "link", "set", &h.port, "master", "br0"]);
        }
    }

    /// Runs `f` on a thread in `host`'s network namespace (sockets it opens are that host's).
    pub fn in_ns<T: Send>(&self, host: &str, f: impl FnOnce() -> T + Send) -> T {
        let ns = self.ns_of(host);
        std::thread::scope(|s| {
            s.spawn(|| {
                enter_ns(&ns);
                f()
            })
            .join()
            .unwrap()
        })
    }

    /// Spawns a thread in `host`'s namespace.
    pub fn spawn_in<T: Send + 'static>(
        &self,
        host: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let ns = self.ns_of(host);
        std::thread::spawn(move || {
            enter_ns(&ns);
            f()
        })
    }

    /// `tern ARGS` run to its end on `host`: (success, stdout, stderr).
    pub fn tern(&self, host: &str, args: &[&str], env: &[(&str, String)]) -> (bool, String, String) {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.hosts[host].ns, env!("CARGO_BIN_EXE_tern")]).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let o = cmd.stdin(Stdio::null()).output().unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    }

    /// The userspace switch's figures (None: not used).
    pub fn stop_switch(&mut self) -> Option<SwitchStats> {
        let (stop, h) = self.switch.take()?;
        stop.store(true, Ordering::Relaxed);
        h.join().ok()
    }

    /// The last lines every process logged, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return out };
        let mut files: Vec<_> = rd.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "log")).collect();
        files.sort_by_key(|e| e.file_name());
        for e in files {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!("--- {}\n", e.file_name().to_string_lossy()));
            out.push_str(&lines[lines.len().saturating_sub(15)..].join("\n"));
            out.push('\n');
        }
        out
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for h in self.hosts.values_mut() {
            for (_, c) in h.procs.iter_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        self.stop_switch();
        for h in self.hosts.values() {
            let _ = Command::new("ip").args(["netns", "del", &h.ns]).output();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.sw]).output();
    }
}

/// Moves the calling thread into network namespace `ns`.
pub fn enter_ns(ns: &str) {
    let f = std::fs::File::open(format!("/var/run/netns/{ns}")).unwrap_or_else(|e| panic!("namespace {ns}: {e}"));
    use std::os::fd::AsRawFd;
    // SAFETY: setns on a namespace file this thread opened; only the calling thread moves.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(r, 0, "setns {ns}: {}", std::io::Error::last_os_error());
}

/// Whether the kernel has netem (a probe in a namespace of its own).
fn netem_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let ns = format!("tern-{}-netem-probe", std::process::id());
        if Command::new("ip").args(["netns", "add", &ns]).output().is_err() {
            return false;
        }
        let ok = Command::new("ip")
            .args(["netns", "exec", &ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"])
            .output()
            .is_ok_and(|o| o.status.success());
        let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        ok
    })
}

/// A frame held by the userspace switch: (due, arrival order, bytes), earliest first.
type Held = Reverse<(Instant, u64, Vec<u8>)>;

/// A learning Ethernet switch over AF_PACKET sockets on the switch-side veth ends: each frame is
/// held for its delay (in order per output port) or dropped, then sent out of the port its
/// destination MAC was last seen on (every other port for broadcasts and unknown ones).
fn userspace_switch(
    ports: &[(String, u8)],
    impair: &Impair,
    stop: &AtomicBool,
    started: std::sync::mpsc::Sender<()>,
) -> SwitchStats {
    use tern_types::rng::Rng;
    let mut fds = Vec::new();
    for (name, _) in ports {
        let cname = std::ffi::CString::new(name.as_str()).unwrap();
        // SAFETY: plain socket calls on values this function owns.
        unsafe {
            let fd = libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK,
                (libc::ETH_P_ALL as u16).to_be() as i32,
            );
            assert!(fd >= 0, "packet socket: {}", std::io::Error::last_os_error());
            let idx = libc::if_nametoindex(cname.as_ptr());
            assert!(idx > 0, "no port {name}");
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
            sll.sll_ifindex = idx as i32;
            let r = libc::bind(
                fd,
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            );
            assert_eq!(r, 0, "bind {name}: {}", std::io::Error::last_os_error());
            let buf: libc::c_int = 4 << 20;
            for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    &buf as *const libc::c_int as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as u32,
                );
            }
            fds.push(fd);
        }
    }
    let _ = started.send(());
    let mut rng = Rng::new(impair.seed);
    let mut macs: BTreeMap<[u8; 6], usize> = BTreeMap::new();
    // Frames waiting per output port, by when they are due; order is kept per (input, output)
    // pair (a frame is never due before the previous one of its pair), not per output port, so
    // a frame from a near host does not wait behind one from a far host.
    let mut queues: Vec<BinaryHeap<Held>> = vec![BinaryHeap::new(); fds.len()];
    let mut last_due: BTreeMap<(usize, usize), Instant> = BTreeMap::new();
    let mut seq = 0u64;
    let mut stats = SwitchStats::default();
    let mut buf = vec![0u8; 65536];
    let delay = |rng: &mut Rng, from: usize, to: usize| {
        let (lo, hi) = if ports[from].1 == ports[to].1 { impair.same_zone_us } else { impair.cross_zone_us };
        Duration::from_micros(lo + rng.below(hi - lo + 1))
    };
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let next = queues.iter().filter_map(|q| q.peek().map(|Reverse((t, _, _))| *t)).min();
        // Asleep until the next frame is due (to the microsecond: a busy loop here would take
        // a core from the processes under test) or a port has a frame.
        let wait =
            next.map_or(Duration::from_millis(20), |t| t.saturating_duration_since(now).min(Duration::from_millis(20)));
        let ts = libc::timespec { tv_sec: 0, tv_nsec: wait.as_nanos() as libc::c_long };
        let mut pfds: Vec<libc::pollfd> =
            fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
        // SAFETY: pfds is a live array of pollfd, ts a live timespec.
        unsafe { libc::ppoll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, &ts, std::ptr::null()) };
        for (from, p) in pfds.iter().enumerate() {
            if p.revents & libc::POLLIN == 0 {
                continue;
            }
            loop {
                let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
                // SAFETY: buf and sll outlive the call; their sizes are passed.
                let n = unsafe {
                    libc::recvfrom(
                        fds[from],
                        buf.as_mut_ptr() as *mut libc::c_void,
                        buf.len(),
                        0,
                        &mut sll as *mut libc::sockaddr_ll as *mut libc::sockaddr,
                        &mut len,
                    )
                };
                if n <= 0 {
                    break;
                }
                if sll.sll_pkttype == libc::PACKET_OUTGOING || n < 14 {
                    continue;
                }
                let frame = &buf[..n as usize];
                stats.frames += 1;
                let mut src = [0u8; 6];
                src.copy_from_slice(&frame[6..12]);
                macs.insert(src, from);
                let mut dst = [0u8; 6];
                dst.copy_from_slice(&frame[0..6]);
                let outs: Vec<usize> = match macs.get(&dst) {
                    Some(&to) if dst[0] & 1 == 0 => vec![to],
                    _ => (0..fds.len()).filter(|&i| i != from).collect(),
                };
                for to in outs {
                    if to == from {
                        continue;
                    }
                    if rng.below(10_000) < impair.loss_per_10k {
                        stats.dropped += 1;
                        continue;
                    }
                    let mut due = Instant::now() + delay(&mut rng, from, to);
                    let last = last_due.entry((from, to)).or_insert(due);
                    due = due.max(*last);
                    *last = due;
                    seq += 1;
                    queues[to].push(Reverse((due, seq, frame.to_vec())));
                }
            }
        }
        let now = Instant::now();
        for (to, q) in queues.iter_mut().enumerate() {
            while q.peek().is_some_and(|Reverse((t, _, _))| *t <= now) {
                let Reverse((_, _, f)) = q.pop().unwrap();
                // SAFETY: f outlives the call. A full send buffer drops the frame (as a wire would).
                unsafe { libc::send(fds[to], f.as_ptr() as *const libc::c_void, f.len(), libc::MSG_DONTWAIT) };
            }
        }
    }
    for fd in fds {
        // SAFETY: closing sockets this function opened.
        unsafe { libc::close(fd) };
    }
    stats
}
