//! Calendar arithmetic and MySQL-style text forms of DATE, TIME, DATETIME and TIMESTAMP.
//!
//! Representations (all proleptic Gregorian, no time zones):
//! * DATE: days since 1970-01-01 (i32).
//! * DATETIME: microseconds since 1970-01-01 00:00:00 (i64), a naive wall-clock value.
//! * TIMESTAMP: microseconds since the Unix epoch, UTC (i64).
//! * TIME: signed microseconds, |t| <= 838:59:59.000000 as in MySQL.
//!
//! The day-number conversion is the classic era-based civil-calendar algorithm (H. Hinnant,
//! "chrono-Compatible Low-Level Date Algorithms"), written from its description.

pub const MICROS_PER_SEC: i64 = 1_000_000;
pub const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SEC;
pub const TIME_MAX_MICROS: i64 = (838 * 3600 + 59 * 60 + 59) * MICROS_PER_SEC;

/// Days since 1970-01-01 for a civil date.
pub fn days_from_civil(y: i32, m: u32, d: u32) -> i32 {
    let y = if m <= 2 { y - 1 } else { y } as i64;
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe - 719_468) as i32
}

/// Civil date (year, month, day) of a day number.
pub fn civil_from_days(z: i32) -> (i32, u32, u32) {
    let z = z as i64 + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    ((if m <= 2 { y + 1 } else { y }) as i32, m, d)
}

pub fn is_leap(y: i32) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

pub fn days_in_month(y: i32, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(y) => 29,
        _ => 28,
    }
}

fn digits(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses `YYYY-MM-DD` (years 1000..=9999 as MySQL's DATE range).
pub fn parse_date(s: &str) -> Option<i32> {
    let mut it = s.trim().splitn(3, '-');
    let y = digits(it.next()?)? as i32;
    let m = digits(it.next()?)?;
    let d = digits(it.next()?)?;
    if !(1000..=9999).contains(&y) || !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return None;
    }
    Some(days_from_civil(y, m, d))
}

/// Parses `SS[.ffffff]` fraction part into microseconds; rejects more than 6 fraction digits.
fn parse_seconds(s: &str) -> Option<(u32, i64)> {
    let (sec, frac) = match s.split_once('.') {
        Some((a, b)) => (a, b),
        None => (s, ""),
    };
    let sec = digits(sec)?;
    if frac.len() > 6 || (!frac.is_empty() && digits(frac).is_none()) {
        return None;
    }
    let mut micros = 0i64;
    for (i, b) in frac.bytes().enumerate() {
        micros += (b - b'0') as i64 * 10i64.pow(5 - i as u32);
    }
    Some((sec, micros))
}

/// Parses `YYYY-MM-DD[ HH:MM:SS[.ffffff]]` (also with `T`) into microseconds since 1970.
pub fn parse_datetime(s: &str) -> Option<i64> {
    let s = s.trim();
    let (date, time) = match s.find([' ', 'T']) {
        Some(i) => (&s[..i], s[i + 1..].trim()),
        None => (s, "00:00:00"),
    };
    let days = parse_date(date)?;
    let mut it = time.splitn(3, ':');
    let h = digits(it.next()?)?;
    let mi = digits(it.next()?)?;
    let (sec, micros) = parse_seconds(it.next()?)?;
    if h > 23 || mi > 59 || sec > 59 {
        return None;
    }
    Some(days as i64 * MICROS_PER_DAY + ((h * 3600 + mi * 60 + sec) as i64) * MICROS_PER_SEC + micros)
}

/// Parses `[-]HH:MM:SS[.ffffff]` into signed microseconds.
pub fn parse_time(s: &str) -> Option<i64> {
    let s = s.trim();
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s),
    };
    let mut it = body.splitn(3, ':');
    let h = digits(it.next()?)? as i64;
    let mi = digits(it.next()?)?;
    let (sec, micros) = parse_seconds(it.next()?)?;
    if mi > 59 || sec > 59 {
        return None;
    }
    let v = (h * 3600 + mi as i64 * 60 + sec as i64) * MICROS_PER_SEC + micros;
    if v > TIME_MAX_MICROS {
        return None;
    }
    Some(if neg { -v } else { v })
}

pub fn format_date(days: i32) -> String {
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

fn push_fraction(out: &mut String, micros: i64, fsp: u8) {
    if fsp > 0 {
        let f = format!("{:06}", micros);
        out.push('.');
        out.push_str(&f[..fsp as usize]);
    }
}

/// `YYYY-MM-DD HH:MM:SS[.f]` with exactly `fsp` fraction digits (truncated, as stored values
/// already have the column's precision).
pub fn format_datetime(micros: i64, fsp: u8) -> String {
    let days = micros.div_euclid(MICROS_PER_DAY);
    let rest = micros.rem_euclid(MICROS_PER_DAY);
    let secs = rest / MICROS_PER_SEC;
    let mut s = format!("{} {:02}:{:02}:{:02}", format_date(days as i32), secs / 3600, secs / 60 % 60, secs % 60);
    push_fraction(&mut s, rest % MICROS_PER_SEC, fsp);
    s
}

/// `[-]HH:MM:SS[.f]` as MySQL prints TIME values.
pub fn format_time(micros: i64, fsp: u8) -> String {
    let neg = micros < 0;
    let a = micros.unsigned_abs() as i64;
    let secs = a / MICROS_PER_SEC;
    let mut s = format!("{}{:02}:{:02}:{:02}", if neg { "-" } else { "" }, secs / 3600, secs / 60 % 60, secs % 60);
    push_fraction(&mut s, a % MICROS_PER_SEC, fsp);
    s
}

/// Truncates microseconds to a fractional-second precision.
pub fn truncate_fsp(micros: i64, fsp: u8) -> i64 {
    let unit = 10i64.pow(6 - fsp.min(6) as u32);
    micros - micros.rem_euclid(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trip() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        for z in [-800_000, -1, 0, 1, 11_016, 2_932_896] {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
    }

    #[test]
    fn parse_and_format() {
        assert_eq!(format_date(parse_date("2024-02-29").unwrap()), "2024-02-29");
        assert!(parse_date("2023-02-29").is_none());
        assert!(parse_date("2023-13-01").is_none());
        let dt = parse_datetime("1999-12-31 23:59:58.25").unwrap();
        assert_eq!(format_datetime(dt, 2), "1999-12-31 23:59:58.25");
        assert_eq!(format_datetime(dt, 0), "1999-12-31 23:59:58");
        assert_eq!(format_datetime(parse_datetime("1000-01-01").unwrap(), 0), "1000-01-01 00:00:00");
        let t = parse_time("-838:59:58.5").unwrap();
        assert_eq!(format_time(t, 1), "-838:59:58.5");
        assert!(parse_time("839:00:00").is_none());
        assert_eq!(truncate_fsp(1_234_567, 3), 1_234_000);
    }
}
