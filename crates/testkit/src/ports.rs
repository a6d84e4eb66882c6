//! Free ports for tests, below Linux's ephemeral range (32768-60999 by default). A port the
//! kernel chose for `bind(0)` can be taken by any outgoing connection or `bind(0)` (of a test
//! running in parallel, or of a server starting) between the check and the server's own bind,
//! which failed tests now and then with "port in use" (seen in CI: a Redis TLS port). Each call
//! moves on, so tests running in parallel in one process do not pick the same ones; the process
//! id spreads processes.

/// The ports handed out.
pub const PORTS: std::ops::Range<u32> = 20_000..32_000;

/// `n` free ports in a row (mgmds and data nodes of `tern up` take consecutive ports).
pub fn ports_in_a_row(n: u16) -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let span = PORTS.end - PORTS.start;
    let seed = std::process::id().wrapping_mul(7919);
    for _ in 0..span {
        let i = NEXT.fetch_add(n as u32, Ordering::Relaxed);
        let p = PORTS.start + (seed.wrapping_add(i)) % (span - n as u32);
        if (0..n as u32).all(|k| std::net::TcpListener::bind(("127.0.0.1", (p + k) as u16)).is_ok()) {
            return p as u16;
        }
    }
    panic!("no {n} free ports in a row in {PORTS:?}");
}

/// One free port.
pub fn free_port() -> u16 {
    ports_in_a_row(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_free_distinct_and_in_range() {
        let a = ports_in_a_row(3);
        let b = free_port();
        assert!(PORTS.contains(&(a as u32)) && PORTS.contains(&(b as u32)));
        assert!(!(a..a + 3).contains(&b), "a port handed out twice: {a}..{} and {b}", a + 3);
        for p in a..a + 3 {
            std::net::TcpListener::bind(("127.0.0.1", p)).expect("free");
        }
    }
}
