//! What Tern's tests share (a dev-dependency of every crate that has randomized tests).
//!
//! **Seeds.** A randomized test draws its seed from `seed()`: `TERN_SEED` when set (a failure's
//! printed seed replays it), else one taken from the clock, and prints it with the test's name
//! so any failure can be replayed. `TERN_SEED` is the only seed variable.
//!
//! **Ports** (`ports`): free ports below the ephemeral range, never handed out twice in a process.
//!
//! **Peers** (`peers`): redis-server and MariaDB started on free ports for the differential tests.

pub mod peers;
pub mod ports;

/// The environment variable that fixes the seed of every randomized test.
pub const SEED_VAR: &str = "TERN_SEED";

/// The seed for a randomized test: `TERN_SEED` from the environment, or one derived from the
/// clock. The caller prints it (`seed_for` does) so a failure reproduces.
pub fn seed() -> u64 {
    seed_from(std::env::var(SEED_VAR).ok())
}

/// The seed a value of `TERN_SEED` names (surrounding white space ignored; anything but a u64
/// panics, naming the variable), or one from the clock when it is unset.
fn seed_from(var: Option<String>) -> u64 {
    match var {
        Some(s) => s.trim().parse().unwrap_or_else(|_| panic!("{SEED_VAR} must be a u64, not {s:?}")),
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(42),
    }
}

/// `seed()`, printed with what it is for: `<what> seed: <n> (TERN_SEED=<n> replays it)`.
pub fn seed_for(what: &str) -> u64 {
    let s = seed();
    println!("{what} seed: {s} ({SEED_VAR}={s} replays it)");
    s
}

#[cfg(test)]
mod tests {
    use super::seed_from;

    #[test]
    fn a_set_seed_is_the_seed() {
        assert_eq!(seed_from(Some("123".into())), 123);
        assert_eq!(seed_from(Some(" 7\n".into())), 7);
    }

    #[test]
    #[should_panic(expected = "TERN_SEED must be a u64")]
    fn a_seed_that_is_no_number_is_refused() {
        seed_from(Some("x".into()));
    }
}
