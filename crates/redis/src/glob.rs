//! Glob patterns as redis-server matches them (KEYS, SCAN/HSCAN MATCH, CONFIG GET), in time
//! linear in pattern × string and with no recursion, whatever the pattern.
//!
//! Semantics are those of redis `util.c` `stringmatchlen` (7.0), facts checked against
//! redis-server 7.0.15 by `tests/differential.rs`:
//! * `*` any run of bytes, `?` one byte, `\x` the byte x (a trailing `\` is itself);
//! * `[...]` one byte of a set: `^` first inverts it, `a-z` is a range whose ends may come in
//!   either order and are compared as C's signed `char` (bytes ≥ 0x80 sort below 0), `\x` is x;
//!   a range is taken wherever a byte is followed by `-` and one more byte, even `]`, so `[a-]`
//!   is the range `]`..`a`; `[]` matches nothing; a set without its `]` runs to the pattern's end;
//! * an empty string matches only the empty pattern (redis's loop never starts) — KEYS and SCAN
//!   treat the pattern `*` alone as "everything", which `Glob` does too;
//! * redis gives up (no match) when it would recurse below its 1,000th star: a pattern whose
//!   1,001st star group is followed by anything never matches.
//!
//! The pattern is compiled once into tokens; matching keeps only the position after the last
//! star (the classic greedy algorithm: for patterns of stars, single-byte tokens and literals,
//! retrying from the latest star is enough), so a hostile pattern such as `a*a*a*…b` costs at
//! most pattern × string steps instead of redis's exponential worst case.

/// redis-server's recursion bound (`nesting > 1000` answers no match).
const STAR_GROUPS_MAX: usize = 1000;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Star,
    Any,
    Byte(u8),
    /// A set of bytes, one bit each.
    Set([u64; 4]),
}

/// A compiled pattern.
#[derive(Debug, Clone)]
pub struct Glob {
    toks: Vec<Tok>,
    nocase: bool,
    /// The pattern `*` alone: everything, the empty string included.
    all: bool,
    /// Redis would exceed its recursion bound before finishing any match.
    never: bool,
}

fn set_has(set: &[u64; 4], b: u8) -> bool {
    set[(b >> 6) as usize] & (1 << (b & 63)) != 0
}

fn set_add(set: &mut [u64; 4], b: u8) {
    set[(b >> 6) as usize] |= 1 << (b & 63);
}

fn fold(b: u8, nocase: bool) -> u8 {
    if nocase { b.to_ascii_lowercase() } else { b }
}

impl Glob {
    /// Compiles `p`; `nocase` compares ASCII letters case-insensitively (CONFIG GET).
    pub fn new(p: &[u8], nocase: bool) -> Glob {
        let mut toks = Vec::new();
        let mut i = 0;
        while i < p.len() {
            match p[i] {
                b'*' => {
                    while p.get(i + 1) == Some(&b'*') {
                        i += 1;
                    }
                    toks.push(Tok::Star);
                }
                b'?' => toks.push(Tok::Any),
                b'[' => {
                    let (set, end) = Self::class(p, i + 1, nocase);
                    toks.push(Tok::Set(set));
                    i = end;
                }
                b'\\' if i + 1 < p.len() => {
                    i += 1;
                    toks.push(Tok::Byte(p[i]));
                }
                b => toks.push(Tok::Byte(b)),
            }
            i += 1;
        }
        let stars = toks.iter().filter(|t| **t == Tok::Star).count();
        let never = stars > STAR_GROUPS_MAX + 1 || (stars == STAR_GROUPS_MAX + 1 && toks.last() != Some(&Tok::Star));
        Glob { toks, nocase, all: p == b"*", never }
    }

    /// The set of a `[` class whose body starts at `i`; returns it and the index of its last
    /// pattern byte (its `]`, or the pattern's last byte when there is none).
    fn class(p: &[u8], mut i: usize, nocase: bool) -> ([u64; 4], usize) {
        let not = p.get(i) == Some(&b'^');
        if not {
            i += 1;
        }
        let mut set = [0u64; 4];
        let add_eq = |x: u8, set: &mut [u64; 4]| {
            for b in 0..=255u8 {
                if fold(b, nocase) == fold(x, nocase) {
                    set_add(set, b);
                }
            }
        };
        loop {
            if i >= p.len() {
                // No closing bracket: the class took the rest of the pattern.
                i = p.len() - 1;
                break;
            }
            if p[i] == b'\\' && i + 1 < p.len() {
                i += 1;
                add_eq(p[i], &mut set);
            } else if p[i] == b']' {
                break;
            } else if i + 2 < p.len() && p[i + 1] == b'-' {
                // C compares `char`s, signed on the platforms redis runs on.
                let (mut lo, mut hi) = (p[i] as i8, p[i + 2] as i8);
                if lo > hi {
                    std::mem::swap(&mut lo, &mut hi);
                }
                let (lo, hi) = (fold(lo as u8, nocase) as i8, fold(hi as u8, nocase) as i8);
                for b in 0..=255u8 {
                    let c = fold(b, nocase) as i8;
                    if lo <= c && c <= hi {
                        set_add(&mut set, b);
                    }
                }
                i += 2;
            } else {
                add_eq(p[i], &mut set);
            }
            i += 1;
        }
        if not {
            for w in &mut set {
                *w = !*w;
            }
        }
        (set, i)
    }

    fn one(&self, t: &Tok, b: u8) -> bool {
        match t {
            Tok::Star => true,
            Tok::Any => true,
            Tok::Byte(x) => fold(*x, self.nocase) == fold(b, self.nocase),
            Tok::Set(s) => set_has(s, b),
        }
    }

    /// Whether `s` matches: at most (tokens + 1) × (bytes + 1) steps.
    pub fn matches(&self, s: &[u8]) -> bool {
        if self.all {
            return true;
        }
        if s.is_empty() {
            return self.toks.is_empty();
        }
        if self.never {
            return false;
        }
        let (mut t, mut i) = (0, 0);
        // After the latest star: its token index and the next string position it may swallow.
        let mut retry: Option<(usize, usize)> = None;
        while i < s.len() {
            match self.toks.get(t) {
                Some(Tok::Star) => {
                    retry = Some((t + 1, i));
                    t += 1;
                    continue;
                }
                Some(tok) if self.one(tok, s[i]) => {
                    t += 1;
                    i += 1;
                    continue;
                }
                _ => {}
            }
            match retry {
                Some((rt, ri)) => {
                    // The star takes one more byte; the rest starts again after it.
                    retry = Some((rt, ri + 1));
                    t = rt;
                    i = ri + 1;
                }
                None => return false,
            }
        }
        self.toks[t..].iter().all(|x| *x == Tok::Star)
    }
}

/// Whether `s` matches pattern `p` (case-sensitive). Compile with `Glob::new` to match many.
pub fn glob(p: &[u8], s: &[u8]) -> bool {
    Glob::new(p, false).matches(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_like_redis() {
        assert!(glob(b"*", b"anything"));
        assert!(glob(b"user:*", b"user:1"));
        assert!(!glob(b"user:*", b"usr:1"));
        assert!(glob(b"h?llo", b"hello") && !glob(b"h?llo", b"hllo"));
        assert!(glob(b"h[ae]llo", b"hallo") && !glob(b"h[ae]llo", b"hillo"));
        assert!(glob(b"h[^e]llo", b"hallo") && !glob(b"h[^e]llo", b"hello"));
        assert!(glob(b"h[a-c]llo", b"hbllo") && !glob(b"h[a-c]llo", b"hdllo"));
        assert!(glob(b"a\\*b", b"a*b") && !glob(b"a\\*b", b"axb"));
    }

    #[test]
    fn redis_quirks() {
        // `[a-]` is the range ']'..'a'; an unclosed class runs to the end of the pattern.
        for (c, m) in [(b"]", true), (b"^", true), (b"a", true), (b"-", false), (b"b", false)] {
            assert_eq!(glob(b"[a-]", c), m, "{:?}", c);
        }
        assert!(glob(b"[a-]x", b"x") && !glob(b"[a-]x", b"ax"));
        assert!(!glob(b"[]", b"]") && !glob(b"[]a]", b"a") && !glob(b"[", b"["));
        assert!(glob(b"[^", b"z") && glob(b"[^]", b"q"));
        // Reversed ranges, escapes inside and outside classes, a trailing backslash.
        assert!(glob(b"[z-a]", b"m") && !glob(b"[z-a]", b"A"));
        assert!(glob(b"[\\]]", b"]") && glob(b"[\\-]", b"-") && glob(b"x\\", b"x\\"));
        // Signed chars: a range from 'a' to 0xff covers 0xff (-1) .. 'a'.
        assert!(glob(b"[a-\xff]", b"\x00") && glob(b"[a-\xff]", b"\xff") && !glob(b"[a-\xff]", b"\x80"));
        // The empty string matches only the empty pattern, except `*` alone (KEYS, SCAN).
        assert!(!glob(b"**", b"") && !glob(b"?*", b"") && glob(b"", b"") && glob(b"*", b""));
        assert!(glob(b"a*", b"a") && glob(b"*a", b"a") && !glob(b"*?", b"") && glob(b"*?", b"ab"));
        // Redis's recursion bound: a 1,001st star group followed by more never matches.
        let key: Vec<u8> = [vec![b'a'; 1200], b"b".to_vec()].concat();
        assert!(glob(&b"a*".repeat(1000).into_iter().chain(*b"b").collect::<Vec<u8>>(), &key));
        assert!(!glob(&b"a*".repeat(1001).into_iter().chain(*b"b").collect::<Vec<u8>>(), &key));
        assert!(glob(&b"a*".repeat(1001), &key) && !glob(&b"a*".repeat(1002), &key));
        // CONFIG GET compares without case.
        assert!(
            Glob::new(b"MAXMEM*", true).matches(b"maxmemory") && !Glob::new(b"MAXMEM*", false).matches(b"maxmemory")
        );
        assert!(Glob::new(b"[L-M]axmemory", true).matches(b"maxmemory"));
    }

    /// `a*a*…a*b` against a long run of `a`: exponential for a backtracking matcher.
    #[test]
    fn hostile_patterns_finish_promptly() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let key = vec![b'a'; 3000];
            let p: Vec<u8> = b"a*".repeat(40).into_iter().chain(*b"b").collect();
            let g = Glob::new(&p, false);
            let r = (0..100).any(|_| g.matches(&key));
            // The most star groups redis allows, each retried at every position.
            let big: Vec<u8> = b"a*".repeat(1000).into_iter().chain(*b"b").collect();
            let g = Glob::new(&big, false);
            let r2 = (0..10).any(|_| g.matches(&key));
            tx.send((r, r2)).unwrap();
        });
        let r = rx.recv_timeout(std::time::Duration::from_secs(30)).expect("glob matching did not finish within 30 s");
        assert_eq!(r, (false, false));
    }

    /// The matcher agrees with a plain dynamic program over the tokens (random patterns).
    #[test]
    fn agrees_with_a_reference_matcher() {
        use tern_types::rng::Rng;
        let seed = tern_testkit::seed();
        println!("seed {seed} (rerun with TERN_SEED={seed})");
        let mut rng = Rng::new(seed);
        let alphabet = b"ab*?[]^-\\";
        for _ in 0..20_000 {
            let p: Vec<u8> = (0..rng.below(9)).map(|_| alphabet[rng.below(alphabet.len() as u64) as usize]).collect();
            let s: Vec<u8> = (0..rng.below(7)).map(|_| b"ab]^-\\*"[rng.below(7) as usize]).collect();
            let g = Glob::new(&p, false);
            assert_eq!(g.matches(&s), reference(&g, &s), "pattern {:?} string {:?}", p, s);
        }
    }

    fn reference(g: &Glob, s: &[u8]) -> bool {
        if g.all {
            return true;
        }
        if s.is_empty() {
            return g.toks.is_empty();
        }
        let n = g.toks.len();
        // can[t] = the tokens from t match the rest of the string (filled back to front).
        let mut next = vec![false; n + 1];
        next[n] = true;
        for t in (0..n).rev() {
            next[t] = g.toks[t] == Tok::Star && next[t + 1];
        }
        for i in (0..s.len()).rev() {
            let mut cur = vec![false; n + 1];
            for t in (0..n).rev() {
                cur[t] = match &g.toks[t] {
                    Tok::Star => cur[t + 1] || next[t],
                    tok => g.one(tok, s[i]) && next[t + 1],
                };
            }
            next = cur;
        }
        next[0]
    }
}
