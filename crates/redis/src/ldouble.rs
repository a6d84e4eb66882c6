//! INCRBYFLOAT arithmetic as redis-server does it: in C `long double`, which on x86-64 is the
//! 80-bit extended format (64-bit significand), parsed with `strtold`, summed, and printed with
//! `%.17Lf` with trailing zeros removed. The digits users see depend on that format (redis
//! answers `1000.09999999999999998` for 1000 + 0.1), so it is emulated here exactly: values are
//! a sign, a 64-bit significand and a binary exponent; parsing, addition and printing go through
//! exact big integers and round once, to nearest, ties to even (the default rounding mode).
//!
//! Inputs are bounded by the caller (redis refuses strings of 5,120 bytes or more), which bounds
//! the big integers here to a few thousand words.

use std::cmp::Ordering;

/// The largest binary exponent of the format (values below 2^16384).
const EXP_MAX: i64 = 16384;
/// Below this (with the significand's 64 bits) values underflow; strtold reports ERANGE.
const EXP_MIN: i64 = -16445;
/// redis's `MAX_LONG_DOUBLE_CHARS`: longer strings are not numbers to it.
pub const CHARS_MAX: usize = 5 * 1024;

/// A finite extended-precision value: `(-1)^neg × mant × 2^exp`; `mant` is 0 or has its top bit
/// set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LDouble {
    neg: bool,
    mant: u64,
    exp: i64,
}

/// Parsing outcomes redis tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    Num(LDouble),
    /// `inf` / `infinity`: a number to redis, which then refuses the sum.
    Inf,
    /// Not a number redis accepts (syntax, NaN, overflow or underflow to zero).
    Bad,
}

// ------------------------------------------------------------------ big unsigned integers

/// Little-endian 32-bit limbs, no leading zero limbs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn from_u64(v: u64) -> Big {
        let mut b = Big(vec![v as u32, (v >> 32) as u32]);
        b.trim();
        b
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn bits(&self) -> u64 {
        match self.0.last() {
            None => 0,
            Some(&top) => (self.0.len() as u64 - 1) * 32 + (32 - top.leading_zeros() as u64),
        }
    }

    fn bit(&self, i: u64) -> bool {
        self.0.get((i / 32) as usize).is_some_and(|w| w >> (i % 32) & 1 == 1)
    }

    /// Whether any bit below `i` is set.
    fn any_below(&self, i: u64) -> bool {
        let (w, b) = ((i / 32) as usize, i % 32);
        self.0.iter().take(w.min(self.0.len())).any(|&x| x != 0)
            || (b > 0 && self.0.get(w).is_some_and(|&x| x & ((1u32 << b) - 1) != 0))
    }

    fn mul_small(&mut self, m: u32) {
        let mut carry = 0u64;
        for w in &mut self.0 {
            let v = *w as u64 * m as u64 + carry;
            *w = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
        self.trim();
    }

    fn add_small(&mut self, a: u32) {
        let mut carry = a as u64;
        for w in &mut self.0 {
            if carry == 0 {
                return;
            }
            let v = *w as u64 + carry;
            *w = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
    }

    fn mul_pow10(&mut self, mut n: u64) {
        while n >= 9 {
            self.mul_small(1_000_000_000);
            n -= 9;
        }
        self.mul_small(10u32.pow(n as u32));
    }

    fn shl(&self, n: u64) -> Big {
        if self.is_zero() {
            return self.clone();
        }
        let (words, bits) = ((n / 32) as usize, n % 32);
        let mut v = vec![0u32; words];
        let mut carry = 0u32;
        for &w in &self.0 {
            v.push(if bits == 0 { w } else { (w << bits) | carry });
            carry = if bits == 0 { 0 } else { w >> (32 - bits) };
        }
        v.push(carry);
        let mut b = Big(v);
        b.trim();
        b
    }

    fn shr(&self, n: u64) -> Big {
        let (words, bits) = ((n / 32) as usize, n % 32);
        if words >= self.0.len() {
            return Big(Vec::new());
        }
        let src = &self.0[words..];
        let mut v = Vec::with_capacity(src.len());
        for i in 0..src.len() {
            let lo = src[i] >> bits;
            let hi = if bits == 0 { 0 } else { src.get(i + 1).map_or(0, |&h| h << (32 - bits)) };
            v.push(lo | hi);
        }
        let mut b = Big(v);
        b.trim();
        b
    }

    fn cmp(&self, o: &Big) -> Ordering {
        self.0.len().cmp(&o.0.len()).then_with(|| self.0.iter().rev().cmp(o.0.iter().rev()))
    }

    fn add(&self, o: &Big) -> Big {
        let mut v = Vec::with_capacity(self.0.len().max(o.0.len()) + 1);
        let mut carry = 0u64;
        for i in 0..self.0.len().max(o.0.len()) {
            let s = *self.0.get(i).unwrap_or(&0) as u64 + *o.0.get(i).unwrap_or(&0) as u64 + carry;
            v.push(s as u32);
            carry = s >> 32;
        }
        v.push(carry as u32);
        let mut b = Big(v);
        b.trim();
        b
    }

    /// `self - o`, for `self >= o`.
    fn sub(&self, o: &Big) -> Big {
        let mut v = Vec::with_capacity(self.0.len());
        let mut borrow = 0i64;
        for i in 0..self.0.len() {
            let d = self.0[i] as i64 - *o.0.get(i).unwrap_or(&0) as i64 - borrow;
            borrow = (d < 0) as i64;
            v.push((d + (borrow << 32)) as u32);
        }
        let mut b = Big(v);
        b.trim();
        b
    }

    /// Quotient and whether the remainder is not zero (binary long division).
    fn div(&self, d: &Big) -> (Big, bool) {
        if self.cmp(d) == Ordering::Less {
            return (Big(Vec::new()), !self.is_zero());
        }
        let shift = self.bits() - d.bits();
        let mut rem = self.clone();
        let mut q = Big(vec![0; (shift / 32 + 1) as usize]);
        let mut dd = d.shl(shift);
        for i in (0..=shift).rev() {
            if rem.cmp(&dd) != Ordering::Less {
                rem = rem.sub(&dd);
                q.0[(i / 32) as usize] |= 1 << (i % 32);
            }
            dd = dd.shr(1);
        }
        q.trim();
        (q, !rem.is_zero())
    }

    /// Decimal digits.
    fn to_decimal(&self) -> String {
        let mut v = self.0.clone();
        let mut chunks = Vec::new();
        while !v.is_empty() {
            let mut rem = 0u64;
            for w in v.iter_mut().rev() {
                let cur = (rem << 32) | *w as u64;
                *w = (cur / 1_000_000_000) as u32;
                rem = cur % 1_000_000_000;
            }
            while v.last() == Some(&0) {
                v.pop();
            }
            chunks.push(rem as u32);
        }
        let mut s = chunks.pop().map(|c| c.to_string()).unwrap_or_else(|| "0".into());
        for c in chunks.iter().rev() {
            s.push_str(&format!("{c:09}"));
        }
        s
    }
}

/// Rounds `n × 2^exp` (with `sticky`: something nonzero was below `n`) to a 64-bit significand.
fn round(neg: bool, n: &Big, exp: i64, sticky: bool) -> Option<LDouble> {
    if n.is_zero() {
        return Some(LDouble { neg, mant: 0, exp: 0 });
    }
    let bits = n.bits();
    if bits <= 64 {
        let mant = (n.0.first().copied().unwrap_or(0) as u64) | ((n.0.get(1).copied().unwrap_or(0) as u64) << 32);
        let s = 64 - bits;
        // Sticky bits lie below a value that fits: it is exact already (no rounding needed).
        return finish(neg, mant << s, exp - s as i64);
    }
    let s = bits - 64;
    let top = n.shr(s);
    let mut mant = (top.0.first().copied().unwrap_or(0) as u64) | ((top.0.get(1).copied().unwrap_or(0) as u64) << 32);
    let half = n.bit(s - 1);
    let rest = sticky || n.any_below(s - 1);
    let mut e = exp + s as i64;
    if half && (rest || mant & 1 == 1) {
        mant = mant.wrapping_add(1);
        if mant == 0 {
            mant = 1 << 63;
            e += 1;
        }
    }
    finish(neg, mant, e)
}

fn finish(neg: bool, mant: u64, exp: i64) -> Option<LDouble> {
    if exp + 64 > EXP_MAX {
        return None;
    }
    if exp < EXP_MIN {
        return Some(LDouble { neg, mant: 0, exp: 0 });
    }
    Some(LDouble { neg, mant, exp })
}

impl LDouble {
    pub const ZERO: LDouble = LDouble { neg: false, mant: 0, exp: 0 };

    fn big(&self) -> Big {
        Big::from_u64(self.mant)
    }

    pub fn is_zero(&self) -> bool {
        self.mant == 0
    }

    /// A string as redis's `string2ld` takes it: `strtold` syntax (decimal, hexadecimal,
    /// `inf`), no leading blank, nothing after the number, no NaN, no overflow or underflow.
    pub fn parse(s: &[u8]) -> Parsed {
        if s.is_empty() || s.len() >= CHARS_MAX || s[0].is_ascii_whitespace() {
            return Parsed::Bad;
        }
        let (neg, body) = match s[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let lower = body.to_ascii_lowercase();
        if lower == b"inf" || lower == b"infinity" {
            return Parsed::Inf;
        }
        let r = if lower.starts_with(b"0x") { parse_hex(neg, &lower[2..]) } else { parse_dec(neg, &lower) };
        // An overflow is strtold's ERANGE with HUGE_VAL, which redis refuses like a syntax error.
        match r {
            Some(Some(v)) => Parsed::Num(v),
            _ => Parsed::Bad,
        }
    }

    /// The exact sum rounded once; None when it overflows (redis: "would produce NaN or
    /// Infinity").
    pub fn add(&self, o: &LDouble) -> Option<LDouble> {
        if self.is_zero() {
            return Some(*o);
        }
        if o.is_zero() {
            return Some(*self);
        }
        let e = self.exp.min(o.exp);
        let a = self.big().shl((self.exp - e) as u64);
        let b = o.big().shl((o.exp - e) as u64);
        if self.neg == o.neg {
            return round(self.neg, &a.add(&b), e, false);
        }
        match a.cmp(&b) {
            Ordering::Equal => Some(LDouble::ZERO),
            Ordering::Greater => round(self.neg, &a.sub(&b), e, false),
            Ordering::Less => round(o.neg, &b.sub(&a), e, false),
        }
    }

    /// `%.17Lf` with trailing zeros (and a bare '.') removed, and "-0" as "0" (redis's
    /// `ld2string` in its human mode).
    pub fn to_human(&self) -> String {
        const DECIMALS: u64 = 17;
        let scaled = if self.exp >= 0 {
            let mut n = self.big().shl(self.exp as u64);
            n.mul_pow10(DECIMALS);
            n
        } else {
            let mut n = self.big();
            n.mul_pow10(DECIMALS);
            let s = (-self.exp) as u64;
            let mut q = n.shr(s);
            let half = s > 0 && n.bit(s - 1);
            if half && (n.any_below(s - 1) || q.bit(0)) {
                q.add_small(1);
            }
            q
        };
        let mut digits = scaled.to_decimal();
        if digits.len() <= DECIMALS as usize {
            digits = format!("{}{digits}", "0".repeat(DECIMALS as usize + 1 - digits.len()));
        }
        let (int, frac) = digits.split_at(digits.len() - DECIMALS as usize);
        let frac = frac.trim_end_matches('0');
        let mut s = String::new();
        if self.neg {
            s.push('-');
        }
        s.push_str(int);
        if !frac.is_empty() {
            s.push('.');
            s.push_str(frac);
        }
        if s == "-0" { "0".into() } else { s }
    }
}

/// Decimal `strtold`: digits with an optional point and an optional exponent. Some(None) is an
/// overflow, None no number (or an underflow to zero).
fn parse_dec(neg: bool, s: &[u8]) -> Option<Option<LDouble>> {
    let mut digits = Big(Vec::new());
    let (mut i, mut seen, mut frac, mut exp10) = (0, false, false, 0i64);
    let mut significant = 0usize;
    while i < s.len() {
        match s[i] {
            b'0'..=b'9' => {
                seen = true;
                // Beyond 800 significant digits the rest only decides ties: keep it as a sticky 1.
                if significant < 800 {
                    digits.mul_small(10);
                    digits.add_small((s[i] - b'0') as u32);
                    if !digits.is_zero() {
                        significant += 1;
                    }
                    if frac {
                        exp10 -= 1;
                    }
                } else {
                    if !frac {
                        exp10 += 1;
                    }
                    if s[i] != b'0' && significant == 800 {
                        digits.mul_small(10);
                        digits.add_small(1);
                        exp10 -= 1;
                        significant += 1;
                    }
                }
            }
            b'.' if !frac => frac = true,
            _ => break,
        }
        i += 1;
    }
    if !seen {
        return None;
    }
    if i < s.len() {
        if s[i] != b'e' {
            return None;
        }
        exp10 = exp10.saturating_add(exponent(&s[i + 1..])?);
    }
    if digits.is_zero() {
        return Some(Some(LDouble { neg, mant: 0, exp: 0 }));
    }
    // Far outside the format: overflow or underflow without computing huge powers.
    let mag = exp10 + digits.to_decimal().len() as i64;
    if mag > 4934 {
        return Some(None);
    }
    if mag < -4952 {
        return None;
    }
    let v = if exp10 >= 0 {
        let mut n = digits;
        n.mul_pow10(exp10 as u64);
        round(neg, &n, 0, false)
    } else {
        let mut d = Big::from_u64(1);
        d.mul_pow10((-exp10) as u64);
        // Enough quotient bits to round: 66 beyond the divisor.
        let k = (d.bits() + 66).saturating_sub(digits.bits());
        let (q, sticky) = digits.shl(k).div(&d);
        round(neg, &q, -(k as i64), sticky)
    };
    checked(v)
}

/// Hexadecimal `strtold` (`0x1.8p3`): exact up to rounding the significand.
fn parse_hex(neg: bool, s: &[u8]) -> Option<Option<LDouble>> {
    let mut n = Big(Vec::new());
    let (mut i, mut seen, mut frac, mut exp2) = (0, false, false, 0i64);
    while i < s.len() {
        match s[i] {
            c @ (b'0'..=b'9' | b'a'..=b'f') => {
                seen = true;
                if n.bits() < 4096 {
                    n.mul_small(16);
                    n.add_small((c as char).to_digit(16).unwrap_or(0));
                    if frac {
                        exp2 -= 4;
                    }
                } else if !frac {
                    exp2 += 4;
                }
            }
            b'.' if !frac => frac = true,
            _ => break,
        }
        i += 1;
    }
    if !seen {
        return None;
    }
    if i < s.len() {
        if s[i] != b'p' {
            return None;
        }
        exp2 = exp2.saturating_add(exponent(&s[i + 1..])?);
    }
    if n.is_zero() {
        return Some(Some(LDouble { neg, mant: 0, exp: 0 }));
    }
    checked(round(neg, &n, exp2, false))
}

/// The exponent after `e` or `p`: an optional sign and digits, clamped to ±100,000 (far beyond
/// the format either way); None when malformed.
fn exponent(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = digits.iter().fold(0i64, |v, &d| (v * 10 + (d - b'0') as i64).min(100_000));
    Some(if neg { -v } else { v })
}

/// A rounded parse result as strtold reports it: Some(None) an overflow, None an underflow to
/// zero (ERANGE, which redis refuses).
fn checked(v: Option<LDouble>) -> Option<Option<LDouble>> {
    match v {
        None => Some(None),
        Some(x) if x.is_zero() => None,
        Some(x) => Some(Some(x)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incr(a: &str, b: &str) -> String {
        let (Parsed::Num(x), Parsed::Num(y)) = (LDouble::parse(a.as_bytes()), LDouble::parse(b.as_bytes())) else {
            panic!("{a} {b}")
        };
        x.add(&y).expect("finite").to_human()
    }

    /// Answers of redis-server 7.0.15 (x86-64) to SET + INCRBYFLOAT.
    #[test]
    fn sums_print_like_redis() {
        assert_eq!(incr("1000", "0.1"), "1000.09999999999999998");
        assert_eq!(incr("10.5", "0.1"), "10.6");
        assert_eq!(incr("123456789", "0.123"), "123456789.12299999999959255");
        assert_eq!(incr("123456789.12299999999959255", "1e10"), "10123456789.12299999967217445");
        assert_eq!(incr("1e20", "1"), "100000000000000000000");
        assert_eq!(incr("100000000000000000000", "1.5e-7"), "100000000000000000000");
        assert_eq!(incr("5.0e3", "2.0e2"), "5200");
        assert_eq!(incr("0", "0x10"), "16");
        assert_eq!(incr("0", "-0"), "0");
        assert_eq!(incr("0", ".5"), "0.5");
        assert_eq!(incr("0", "1e-30"), "0");
        assert_eq!(incr("3", "-3.5"), "-0.5");
        assert_eq!(
            incr("3", "1e300"),
            "1000000000000000000008997324079559193870523944273290747938260082321265646596180935755849152083750497190350372508614274835903592556184672983913096260520748646287327135641843653294084255107606016789726652932370030551382947620994540294772781889620606179267611627097410650567187386105690089424915104006144"
        );
    }

    #[test]
    fn parses_like_string2ld() {
        for bad in ["", " 1", "1 ", "abc", "1e", "--1", ".", "nan", "1e-5000", "0x", "1e+", "1e+-5", "1e--5"] {
            assert_eq!(LDouble::parse(bad.as_bytes()), Parsed::Bad, "{bad:?}");
        }
        assert_eq!(LDouble::parse(b"inf"), Parsed::Inf);
        assert_eq!(LDouble::parse(b"-Infinity"), Parsed::Inf);
        assert_eq!(LDouble::parse(b"1e5000"), Parsed::Bad);
        assert!(matches!(LDouble::parse(b"+5."), Parsed::Num(_)));
        let big = "9".repeat(6000);
        assert_eq!(LDouble::parse(big.as_bytes()), Parsed::Bad);
    }
}
