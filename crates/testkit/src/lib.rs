//! What Tern's tests share (a dev-dependency of every crate that has randomized tests).
//!
//! **Seeds.** A randomized test draws its seed from `seed()`: `TERN_SEED` when set (a failure's
//! printed seed replays it), else one taken from the clock, and prints it with the test's name
//! so any failure can be replayed. `TERN_SEED` is the only seed variable.

/// The environment variable that fixes the seed of every randomized test.
pub const SEED_VAR: &str = "TERN_SEED";

/// The seed for a randomized test: `TERN_SEED` from the environment, or one derived from the
/// clock. The caller prints it (`seed_for` does) so a failure reproduces.
pub fn seed() -> u64 {
    match std::env::var(SEED_VAR) {
        Ok(s) => s.trim().parse().unwrap_or_else(|_| panic!("{SEED_VAR} must be a u64, not {s:?}")),
        Err(_) => std::time::SystemTime::now()
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
    #[test]
    fn a_set_seed_is_the_seed() {
        // (Only checks parsing: the variable is not set here, so the clock gives one.)
        let a = super::seed();
        let b = super::seed();
        assert!(std::env::var(super::SEED_VAR).is_ok() || a != 0 || b != 0);
    }
}
