//! The shared-memory transporter (NDB's SHM transporter, seed 004's point): two processes on one
//! host exchange the same frames they would send over TCP through two byte rings in one shared
//! memory segment, and wake each other with an eventfd only when the reader is parked.
//!
//! * **Segment**: a memfd the *server* (the data node) creates, sized and sealed (no shrinking, no
//!   growing, no new seals) before it hands it over, so a client cannot make the server's mapping
//!   fault. Layout: a 4 KiB header (magic, version, ring capacity, two ring control blocks with
//!   every index on its own cache line), then ring 0 (client → server) and ring 1 (server →
//!   client), each a power of two in size.
//! * **Rings**: single producer, single consumer, streams of bytes (frames may be larger than the
//!   ring: the consumer copies what is there into its own buffer and decodes frames from that,
//!   as it would after `recv`). Each side keeps its own index privately and only *reads* the
//!   other's from the segment, and every index read from the segment is checked (`head - tail`
//!   must not exceed the capacity): a peer that scribbles on the segment gets its connection
//!   closed, never an out-of-bounds access.
//! * **Wake-ups**: a consumer about to park sets its ring's `parked` flag, then looks at the ring
//!   once more; a producer that added bytes clears the flag and, if it was set, writes the
//!   consumer's eventfd (a Dekker pair with a SeqCst fence on each side, so a wake-up is never
//!   lost). A producer that finds the ring full sets `blocked`; the consumer that frees space
//!   clears it and writes the producer's eventfd.
//! * **Handshake and liveness**: the server listens on an abstract Unix socket named after its
//!   TCP port (`tern-shm-<port>`, per network namespace, nothing to clean up on disk). On accept it
//!   sends one byte with the memfd and two eventfds (SCM_RIGHTS). The Unix socket stays open for
//!   the life of the connection: when either process dies the other reads end-of-file there,
//!   closes its side, and the kernel frees the segment once neither maps it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::time::Duration;

const MAGIC: u64 = u64::from_le_bytes(*b"TERNSHM1");
const VERSION: u32 = 1;
const HEADER: usize = 4096;
/// Ring sizes a segment may have.
pub const RING_MIN: usize = 64 * 1024;
pub const RING_MAX: usize = 64 * 1024 * 1024;
/// The ring size the server gives each direction.
pub const RING_DEFAULT: usize = 1024 * 1024;

/// How processes on one host talk to a data node (`transporter = "tcp" | "shm" | "auto"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transporter {
    Tcp,
    Shm,
    /// Shared memory when the data node is on this host and offers it, else TCP.
    #[default]
    Auto,
}

impl std::str::FromStr for Transporter {
    type Err = String;
    fn from_str(s: &str) -> Result<Transporter, String> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Ok(Transporter::Tcp),
            "shm" => Ok(Transporter::Shm),
            "auto" => Ok(Transporter::Auto),
            other => Err(format!("transporter must be tcp, shm or auto (got {other:?})")),
        }
    }
}

impl Transporter {
    /// From the environment variable `TERN_TRANSPORTER` when set and valid (the test matrix
    /// runs the front-end suites once with `shm`), else `default`.
    pub fn from_env_or(default: Transporter) -> Transporter {
        std::env::var("TERN_TRANSPORTER").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
    }
}

#[derive(Debug)]
pub enum ShmError {
    Io(io::Error),
    /// The peer broke the segment's rules (bad header, seals, or indices).
    Corrupt(&'static str),
}

impl std::fmt::Display for ShmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShmError::Io(e) => write!(f, "{e}"),
            ShmError::Corrupt(what) => write!(f, "shared memory segment: {what}"),
        }
    }
}

impl std::error::Error for ShmError {}

impl From<io::Error> for ShmError {
    fn from(e: io::Error) -> ShmError {
        ShmError::Io(e)
    }
}

#[repr(C, align(64))]
struct Line(AtomicU64);

/// One ring's shared indices, each on its own cache line.
#[repr(C)]
struct Ctl {
    head: Line,
    tail: Line,
    parked: Line,
    blocked: Line,
}

const CTL_OFFSET: [usize; 2] = [256, 512];

/// A mapped segment.
pub struct Segment {
    ptr: *mut u8,
    len: usize,
    cap: usize,
    _fd: OwnedFd,
}

// SAFETY: the mapping is shared memory accessed only through atomics (indices) and raw copies
// of byte ranges one side owns at a time (the SPSC protocol); the pointer stays valid until drop.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

fn map(fd: &OwnedFd, len: usize) -> Result<*mut u8, ShmError> {
    // SAFETY: maps `len` bytes of a file we hold; checked for failure below.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0)
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error().into());
    }
    Ok(p as *mut u8)
}

impl Segment {
    /// Creates a sealed segment with two rings of `cap` bytes (a power of two in range).
    pub fn create(cap: usize) -> Result<Segment, ShmError> {
        if !cap.is_power_of_two() || !(RING_MIN..=RING_MAX).contains(&cap) {
            return Err(ShmError::Corrupt("ring size must be a power of two between 64 KiB and 64 MiB"));
        }
        let len = HEADER + 2 * cap;
        // SAFETY: a NUL-terminated name; the result is checked.
        let fd = unsafe { libc::memfd_create(c"tern-shm".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if fd < 0 {
            return Err(io::Error::last_os_error().into());
        }
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain syscalls on our descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error().into());
        }
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io::Error::last_os_error().into());
        }
        let ptr = map(&fd, len)?;
        let seg = Segment { ptr, len, cap, _fd: fd };
        // SAFETY: the header lies within the fresh (zeroed) mapping.
        unsafe {
            (seg.ptr as *mut u64).write_volatile(MAGIC);
            (seg.ptr.add(8) as *mut u32).write_volatile(VERSION);
            (seg.ptr.add(12) as *mut u32).write_volatile(cap as u32);
        }
        Ok(seg)
    }

    /// Maps a segment received from a server, checking its size, seals and header.
    pub fn attach(fd: OwnedFd) -> Result<Segment, ShmError> {
        // SAFETY: fstat into a zeroed struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error().into());
        }
        // SAFETY: a query on our descriptor.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW) != (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW) {
            return Err(ShmError::Corrupt("segment is not sealed against resizing"));
        }
        let len = st.st_size as usize;
        if !(HEADER + 2 * RING_MIN..=HEADER + 2 * RING_MAX).contains(&len) {
            return Err(ShmError::Corrupt("segment has an impossible size"));
        }
        let ptr = map(&fd, len)?;
        // SAFETY: the header lies within the mapping (len >= HEADER).
        let (magic, version, cap) = unsafe {
            ((ptr as *const u64).read_volatile(), (ptr.add(8) as *const u32).read_volatile(), {
                (ptr.add(12) as *const u32).read_volatile() as usize
            })
        };
        let seg = Segment { ptr, len, cap, _fd: fd };
        if magic != MAGIC || version != VERSION {
            return Err(ShmError::Corrupt("not a Tern segment of this version"));
        }
        if !cap.is_power_of_two() || !(RING_MIN..=RING_MAX).contains(&cap) || HEADER + 2 * cap != len {
            return Err(ShmError::Corrupt("ring size does not match the segment"));
        }
        Ok(seg)
    }

    pub fn ring_capacity(&self) -> usize {
        self.cap
    }

    fn ctl(&self, ring: usize) -> &Ctl {
        // SAFETY: the control blocks lie within the header, aligned to 64, and are only used
        // through atomics.
        unsafe { &*(self.ptr.add(CTL_OFFSET[ring]) as *const Ctl) }
    }

    fn data(&self, ring: usize) -> *mut u8 {
        // SAFETY: ring data areas lie within the mapping (checked at create/attach).
        unsafe { self.ptr.add(HEADER + ring * self.cap) }
    }
}

/// The writing end of one ring.
pub struct Producer {
    seg: Arc<Segment>,
    ring: usize,
    head: u64,
}

/// The reading end of one ring.
pub struct Consumer {
    seg: Arc<Segment>,
    ring: usize,
    tail: u64,
}

impl Producer {
    /// Copies as much of `bytes` as fits. Returns how many, and whether the consumer was parked
    /// (the caller then wakes it).
    pub fn write(&mut self, bytes: &[u8]) -> Result<(usize, bool), ShmError> {
        let seg = &*self.seg;
        let ctl = seg.ctl(self.ring);
        let tail = ctl.tail.0.load(Ordering::Acquire);
        let used = self.head.wrapping_sub(tail);
        if used > seg.cap as u64 {
            return Err(ShmError::Corrupt("the reader's index is beyond the writer's"));
        }
        let n = (seg.cap - used as usize).min(bytes.len());
        if n == 0 {
            return Ok((0, false));
        }
        let mask = seg.cap - 1;
        let at = self.head as usize & mask;
        let first = n.min(seg.cap - at);
        // SAFETY: [at, at+first) and [0, n-first) lie within the ring's data area, and the SPSC
        // protocol gives the producer these bytes until it publishes the new head.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), seg.data(self.ring).add(at), first);
            std::ptr::copy_nonoverlapping(bytes.as_ptr().add(first), seg.data(self.ring), n - first);
        }
        self.head = self.head.wrapping_add(n as u64);
        ctl.head.0.store(self.head, Ordering::Release);
        fence(Ordering::SeqCst);
        let wake = ctl.parked.0.load(Ordering::Relaxed) != 0 && ctl.parked.0.swap(0, Ordering::SeqCst) != 0;
        Ok((n, wake))
    }

    /// The ring is full: asks the consumer to wake this side when it frees space. Returns false
    /// when space turned up meanwhile (write again at once).
    pub fn prepare_wait(&self) -> bool {
        let ctl = self.seg.ctl(self.ring);
        ctl.blocked.0.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let tail = ctl.tail.0.load(Ordering::Acquire);
        if self.head.wrapping_sub(tail) < self.seg.cap as u64 {
            ctl.blocked.0.store(0, Ordering::Relaxed);
            return false;
        }
        true
    }
}

impl Consumer {
    /// Bytes waiting (an error when the writer's index is impossible).
    pub fn available(&self) -> Result<usize, ShmError> {
        let head = self.seg.ctl(self.ring).head.0.load(Ordering::Acquire);
        let n = head.wrapping_sub(self.tail);
        if n > self.seg.cap as u64 {
            return Err(ShmError::Corrupt("the writer's index is beyond the ring"));
        }
        Ok(n as usize)
    }

    /// Appends up to `max` waiting bytes to `buf`. Returns how many, and whether the producer
    /// waits for space (the caller then wakes it).
    pub fn read_into(&mut self, buf: &mut Vec<u8>, max: usize) -> Result<(usize, bool), ShmError> {
        let n = self.available()?.min(max);
        if n == 0 {
            return Ok((0, false));
        }
        let seg = &*self.seg;
        let mask = seg.cap - 1;
        let at = self.tail as usize & mask;
        let first = n.min(seg.cap - at);
        buf.reserve(n);
        let len = buf.len();
        // SAFETY: copies from [at, at+first) and [0, n-first) of the ring (within its data area,
        // published by the producer's head) into the vector's reserved spare capacity.
        unsafe {
            let dst = buf.as_mut_ptr().add(len);
            std::ptr::copy_nonoverlapping(seg.data(self.ring).add(at), dst, first);
            std::ptr::copy_nonoverlapping(seg.data(self.ring), dst.add(first), n - first);
            buf.set_len(len + n);
        }
        self.tail = self.tail.wrapping_add(n as u64);
        let ctl = seg.ctl(self.ring);
        ctl.tail.0.store(self.tail, Ordering::Release);
        fence(Ordering::SeqCst);
        let wake = ctl.blocked.0.load(Ordering::Relaxed) != 0 && ctl.blocked.0.swap(0, Ordering::SeqCst) != 0;
        Ok((n, wake))
    }

    /// About to park: asks the producer to wake this side. Returns false when bytes turned up
    /// meanwhile (do not park).
    pub fn prepare_park(&self) -> bool {
        let ctl = self.seg.ctl(self.ring);
        ctl.parked.0.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.available().map_or(true, |n| n > 0) {
            ctl.parked.0.store(0, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Awake again (the producer need not wake this side).
    pub fn unpark(&self) {
        self.seg.ctl(self.ring).parked.0.store(0, Ordering::Relaxed);
    }
}

/// An eventfd (non-blocking): one side writes it to wake the other.
pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: creates a descriptor; checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor we own.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local. A full counter (EAGAIN) already means "wake".
        unsafe { libc::write(self.0.as_raw_fd(), &one as *const u64 as *const libc::c_void, 8) };
    }

    /// Resets the counter (after a wake-up).
    pub fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a local; EAGAIN when already zero.
        unsafe { libc::read(self.0.as_raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8) };
    }

    pub fn raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// One side of a shared-memory connection.
pub struct Endpoint {
    pub tx: Producer,
    pub rx: Consumer,
    /// Written to wake the other side.
    pub wake_peer: EventFd,
    /// Readable when the other side woke this one.
    pub wake_me: EventFd,
}

impl Endpoint {
    /// Writes `bytes` (as much as fits) and wakes the peer if it was parked.
    pub fn send(&mut self, bytes: &[u8]) -> Result<usize, ShmError> {
        let (n, wake) = self.tx.write(bytes)?;
        if wake {
            self.wake_peer.signal();
        }
        Ok(n)
    }

    /// Appends up to `max` waiting bytes to `buf`, waking a peer that waits for space.
    pub fn recv_into(&mut self, buf: &mut Vec<u8>, max: usize) -> Result<usize, ShmError> {
        let (n, wake) = self.rx.read_into(buf, max)?;
        if wake {
            self.wake_peer.signal();
        }
        Ok(n)
    }
}

/// The abstract Unix socket name of the data node listening on TCP `port`.
pub fn socket_name(port: u16) -> String {
    format!("tern-shm-{port}")
}

/// Listens for shared-memory connections next to TCP `port`.
pub fn listen(port: u16) -> io::Result<UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(socket_name(port).as_bytes())?;
    UnixListener::bind_addr(&addr)
}

/// The server's side of a new connection: creates the segment and the two eventfds and hands
/// them to the client.
pub fn serve(stream: &UnixStream, cap: usize) -> Result<Endpoint, ShmError> {
    let seg = Arc::new(Segment::create(cap)?);
    let to_server = EventFd::new()?;
    let to_client = EventFd::new()?;
    send_fds(stream, &[seg._fd.as_raw_fd(), to_server.raw_fd(), to_client.raw_fd()])?;
    Ok(Endpoint {
        tx: Producer { seg: seg.clone(), ring: 1, head: 0 },
        rx: Consumer { seg, ring: 0, tail: 0 },
        wake_peer: to_client,
        wake_me: to_server,
    })
}

/// Connects to the data node listening on TCP `port` on this host (its abstract Unix socket),
/// and receives the segment. The stream must stay open for the connection's life.
pub fn connect(port: u16, timeout: Duration) -> Result<(UnixStream, Endpoint), ShmError> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(socket_name(port).as_bytes())?;
    let stream = UnixStream::connect_addr(&addr)?;
    stream.set_read_timeout(Some(timeout))?;
    let fds = recv_fds(&stream)?;
    stream.set_read_timeout(None)?;
    let [seg, to_server, to_client]: [OwnedFd; 3] =
        fds.try_into().map_err(|_| ShmError::Corrupt("the server sent the wrong descriptors"))?;
    let seg = Arc::new(Segment::attach(seg)?);
    Ok((
        stream,
        Endpoint {
            tx: Producer { seg: seg.clone(), ring: 0, head: 0 },
            rx: Consumer { seg, ring: 1, tail: 0 },
            wake_peer: EventFd(to_server),
            wake_me: EventFd(to_client),
        },
    ))
}

const FDS_MAX: usize = 4;

fn send_fds(stream: &UnixStream, fds: &[RawFd]) -> io::Result<()> {
    assert!(fds.len() <= FDS_MAX);
    let mut byte = [b'S'];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr() as *mut libc::c_void, iov_len: 1 };
    let mut cbuf = [0u64; 8]; // aligned room for one SCM_RIGHTS with up to FDS_MAX descriptors
    let bytes = std::mem::size_of_val(fds) as u32;
    // SAFETY: builds a msghdr over local buffers (cbuf is larger than CMSG_SPACE(16)) and
    // writes the descriptors into the one control message.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = libc::CMSG_SPACE(bytes) as usize;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(bytes) as usize;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c) as *mut RawFd, fds.len());
        if libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn recv_fds(stream: &UnixStream) -> io::Result<Vec<OwnedFd>> {
    let mut byte = [0u8];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr() as *mut libc::c_void, iov_len: 1 };
    let mut cbuf = [0u64; 8];
    let mut fds = Vec::new();
    // SAFETY: receives into local buffers; every descriptor the kernel installed is taken into
    // an OwnedFd (so none leaks, whatever the peer sent).
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&cbuf);
        let n = libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c) as *const RawFd;
                let count = ((*c).cmsg_len - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        n
    };
    if n != 1 || byte[0] != b'S' {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "no shared-memory offer from the data node"));
    }
    Ok(fds)
}

/// Whether `host` (a name or address) is this machine: a loopback address, or one a socket can
/// be bound to here.
pub fn is_this_host(host: &str) -> bool {
    use std::net::ToSocketAddrs;
    let Ok(addrs) = (host, 0).to_socket_addrs() else { return false };
    let addrs: Vec<_> = addrs.collect();
    !addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback() || std::net::UdpSocket::bind((a.ip(), 0)).is_ok())
}

/// Splits `host:port` (also `[v6]:port`).
pub fn split_host_port(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host, port.parse().ok()?))
}

#[cfg(test)]
mod tests;
