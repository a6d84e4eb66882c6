use super::*;
use std::time::Instant;

fn seed() -> u64 {
    let s = std::env::var("TERN_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1
    });
    eprintln!("seed {s} (TERN_SEED={s} reproduces this run)");
    s
}

fn next(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn pair(cap: usize) -> (Producer, Consumer) {
    let seg = Arc::new(Segment::create(cap).unwrap());
    (Producer { seg: seg.clone(), ring: 0, head: 0 }, Consumer { seg, ring: 0, tail: 0 })
}

/// A byte stream written in random pieces (wrapping the ring many times) comes out whole and in
/// order, read in other random pieces, with the reader in another thread.
#[test]
fn random_pieces_arrive_whole_and_in_order() {
    let mut s = seed();
    let (mut tx, mut rx) = pair(RING_MIN);
    let total = 8 * 1024 * 1024usize;
    let data: Vec<u8> = (0..total).map(|i| (i * 31 + (i >> 9)) as u8).collect();
    let expect = data.clone();
    let mut rs = next(&mut s);
    let reader = std::thread::spawn(move || {
        let mut got = Vec::with_capacity(total);
        let until = Instant::now() + Duration::from_secs(60);
        while got.len() < total {
            let max = 1 + (next(&mut rs) % 100_000) as usize;
            let (n, _) = rx.read_into(&mut got, max).unwrap();
            if n == 0 {
                assert!(Instant::now() < until, "reader starved");
                std::thread::yield_now();
            }
        }
        got
    });
    let mut at = 0;
    let until = Instant::now() + Duration::from_secs(60);
    while at < total {
        let len = (1 + next(&mut s) % 70_000) as usize;
        let end = (at + len).min(total);
        let (n, _) = tx.write(&data[at..end]).unwrap();
        at += n;
        if n == 0 {
            assert!(Instant::now() < until, "writer starved");
            std::thread::yield_now();
        }
    }
    assert!(reader.join().unwrap() == expect, "the stream changed in the ring");
}

/// Parking and waking: a reader that parks on its eventfd whenever the ring is empty, and a
/// writer that sends small messages with pauses, never lose a wake-up (each message is read
/// within the poll timeout's bound; a lost wake-up would show as a 5 s stall).
#[test]
fn a_parked_reader_is_always_woken() {
    let mut s = seed();
    let seg = Arc::new(Segment::create(RING_MIN).unwrap());
    let ev = Arc::new(EventFd::new().unwrap());
    let mut tx = Producer { seg: seg.clone(), ring: 0, head: 0 };
    let mut rx = Consumer { seg, ring: 0, tail: 0 };
    let ev2 = ev.clone();
    let count = 20_000u32;
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut wakes = 0u32;
        while got.len() < count as usize * 4 {
            if rx.read_into(&mut got, usize::MAX).unwrap().0 > 0 {
                continue;
            }
            if !rx.prepare_park() {
                continue;
            }
            let mut p = libc::pollfd { fd: ev2.raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut p, 1, 5000) };
            rx.unpark();
            assert!(r > 0, "lost wake-up after {} bytes", got.len());
            ev2.drain();
            wakes += 1;
        }
        (got, wakes)
    });
    for i in 0..count {
        let b = i.to_le_bytes();
        let mut at = 0;
        while at < 4 {
            let (n, wake) = tx.write(&b[at..]).unwrap();
            if wake {
                ev.signal();
            }
            at += n;
        }
        if next(&mut s).is_multiple_of(8) {
            std::thread::sleep(Duration::from_micros(next(&mut s) % 50));
        }
    }
    let (got, wakes) = reader.join().unwrap();
    let want: Vec<u8> = (0..count).flat_map(|i| i.to_le_bytes()).collect();
    assert_eq!(got, want);
    assert!(wakes > 0, "the reader never parked");
}

/// A full ring: the writer asks to be woken, the reader that frees space wakes it.
#[test]
fn a_blocked_writer_is_woken_when_space_frees() {
    let (mut tx, mut rx) = pair(RING_MIN);
    let big = vec![7u8; RING_MIN + 10];
    let (n, _) = tx.write(&big).unwrap();
    assert_eq!(n, RING_MIN);
    assert_eq!(tx.write(&big).unwrap().0, 0, "full");
    assert!(tx.prepare_wait(), "still full: may wait");
    let mut buf = Vec::new();
    let (n, wake) = rx.read_into(&mut buf, 100).unwrap();
    assert_eq!((n, wake), (100, true), "the reader must wake the waiting writer");
    let (_, wake) = rx.read_into(&mut buf, 100).unwrap();
    assert!(!wake, "only once");
    assert!(!tx.prepare_wait(), "space now");
}

/// A peer that writes an impossible index gets an error, not an out-of-bounds copy.
#[test]
fn impossible_indices_are_refused() {
    let (mut tx, mut rx) = pair(RING_MIN);
    tx.write(b"hello").unwrap();
    let seg = rx.seg.clone();
    let ctl = seg.ctl(0);
    ctl.head.0.store(RING_MIN as u64 * 3, Ordering::SeqCst);
    assert!(matches!(rx.read_into(&mut Vec::new(), usize::MAX), Err(ShmError::Corrupt(_))));
    assert!(!rx.prepare_park(), "a corrupt ring is not parked on");
    ctl.tail.0.store(10, Ordering::SeqCst); // read more than was written
    assert!(matches!(tx.write(b"x"), Err(ShmError::Corrupt(_))));
}

/// Segments that are not sealed, have a foreign header or a wrong size are refused.
#[test]
fn foreign_segments_are_refused() {
    // Not sealed.
    // SAFETY: creating and sizing our own memfd.
    let fd = unsafe { OwnedFd::from_raw_fd(libc::memfd_create(c"x".as_ptr(), libc::MFD_CLOEXEC)) };
    // SAFETY: as above.
    unsafe { libc::ftruncate(fd.as_raw_fd(), (HEADER + 2 * RING_MIN) as libc::off_t) };
    assert!(matches!(Segment::attach(fd), Err(ShmError::Corrupt(_))));
    // Sealed, right size, no header.
    // SAFETY: as above.
    let fd =
        unsafe { OwnedFd::from_raw_fd(libc::memfd_create(c"x".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)) };
    // SAFETY: as above.
    unsafe {
        libc::ftruncate(fd.as_raw_fd(), (HEADER + 2 * RING_MIN) as libc::off_t);
        libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW);
    }
    assert!(matches!(Segment::attach(fd), Err(ShmError::Corrupt(_))));
    assert!(Segment::create(RING_MIN + 1).is_err());
    assert!(Segment::create(RING_MAX * 2).is_err());
}

/// The handshake over the abstract Unix socket: the client maps the server's segment and both
/// directions work; when the client goes away the server reads end-of-file.
#[test]
fn handshake_and_both_directions() {
    let port = 40_000 + (std::process::id() % 20_000) as u16;
    let l = listen(port).unwrap();
    let server = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut e = serve(&s, RING_MIN).unwrap();
        let mut buf = Vec::new();
        let until = Instant::now() + Duration::from_secs(10);
        while buf.len() < 4 {
            e.recv_into(&mut buf, usize::MAX).unwrap();
            assert!(Instant::now() < until);
        }
        assert_eq!(&buf, b"ping");
        assert_eq!(e.send(b"pong").unwrap(), 4);
        // The client closes: end-of-file on the stream.
        let mut b = [0u8; 1];
        assert_eq!(io::Read::read(&mut &s, &mut b).unwrap(), 0);
    });
    let (stream, mut e) = connect(port, Duration::from_secs(5)).unwrap();
    assert_eq!(e.send(b"ping").unwrap(), 4);
    let mut buf = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while buf.len() < 4 {
        e.recv_into(&mut buf, usize::MAX).unwrap();
        assert!(Instant::now() < until);
    }
    assert_eq!(&buf, b"pong");
    drop(stream);
    server.join().unwrap();
    // Nobody listens on this name now.
    assert!(connect(port, Duration::from_millis(200)).is_err());
}

#[test]
fn transporter_names_and_hosts() {
    assert_eq!("SHM".parse::<Transporter>(), Ok(Transporter::Shm));
    assert!("udp".parse::<Transporter>().is_err());
    assert!(is_this_host("127.0.0.1"));
    assert!(is_this_host("localhost"));
    assert!(!is_this_host("192.0.2.1"), "TEST-NET-1 is never local");
    assert_eq!(split_host_port("[::1]:3306"), Some(("::1", 3306)));
    assert_eq!(split_host_port("h:1186"), Some(("h", 1186)));
}
