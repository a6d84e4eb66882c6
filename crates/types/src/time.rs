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

/// Parses a TIME as MySQL reads one from text into signed microseconds: `[-][D ]HH:MM:SS[.f]`,
/// `[-][D ]HH:MM`, `[-]HHMMSS[.f]` / `MMSS` / `SS` (digits only), or a DATETIME's text
/// (`YYYY-MM-DD HH:MM:SS[.f]`, its time of day).
pub fn parse_time(s: &str) -> Option<i64> {
    let s = s.trim();
    if !s.starts_with('-')
        && s.find([' ', 'T']).is_some_and(|i| s[..i].contains('-'))
        && let Some(at) = parse_datetime(s)
    {
        return Some(at.rem_euclid(MICROS_PER_DAY));
    }
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s),
    };
    let (days, body) = match body.split_once(' ') {
        Some((d, rest)) => (digits(d)? as i64, rest.trim_start()),
        None => (0, body),
    };
    let (h, mi, sec, micros) = if body.contains(':') {
        let mut it = body.splitn(3, ':');
        let h = digits(it.next()?)? as i64;
        let mi = digits(it.next()?)?;
        let (sec, micros) = match it.next() {
            Some(x) => parse_seconds(x)?,
            None => (0, 0),
        };
        (h, mi, sec, micros)
    } else {
        if days > 0 {
            return None;
        }
        // Digits: the last two are seconds, the two before minutes, the rest hours.
        let (whole, frac) = body.split_once('.').unwrap_or((body, ""));
        let n = digits(whole)? as i64;
        let (_, micros) = parse_seconds(&format!("0.{frac}"))?;
        (n / 10000, (n / 100 % 100) as u32, (n % 100) as u32, micros)
    };
    if mi > 59 || sec > 59 {
        return None;
    }
    let v = ((days * 24 + h) * 3600 + mi as i64 * 60 + sec as i64) * MICROS_PER_SEC + micros;
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

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// Day of the week of a day number, 0 = Monday.
pub fn weekday(days: i32) -> u32 {
    // 1970-01-01 was a Thursday.
    (days as i64 + 3).rem_euclid(7) as u32
}

/// MySQL's week number of a date and the year it belongs to, for the behaviour bits of its
/// week calculation: Monday first (else Sunday), weeks of the year's last days may belong to
/// the next year (`week_year`; the week number is then 1..=53, else 0..=53), and week 1 is the
/// first with the first day of the week in it (`first_weekday`) or the first with 4 or more days
/// of the year. (MySQL 8.0 reference manual, WEEK() and DATE_FORMAT(); the steps are those its
/// week calculation is documented by.)
pub fn week(days: i32, monday_first: bool, week_year: bool, first_weekday: bool) -> (u32, i32) {
    let (mut year, month, day) = civil_from_days(days);
    let mut first = days_from_civil(year, 1, 1);
    let wd = |d: i32| if monday_first { weekday(d) } else { (weekday(d) + 1) % 7 };
    let mut weekday0 = wd(first);
    let year_days = |y: i32| if is_leap(y) { 366 } else { 365 };
    let mut week_year = week_year;
    let starts_late = |w: u32| (first_weekday && w != 0) || (!first_weekday && w >= 4);
    if month == 1 && day <= 7 - weekday0 {
        if !week_year && starts_late(weekday0) {
            return (0, year);
        }
        week_year = true;
        year -= 1;
        let n = year_days(year);
        first -= n;
        weekday0 = (weekday0 + 53 * 7 - n as u32) % 7;
    }
    let since =
        if starts_late(weekday0) { days - (first + (7 - weekday0 as i32)) } else { days - (first - weekday0 as i32) };
    if week_year && since >= 52 * 7 {
        let w = (weekday0 + year_days(year) as u32) % 7;
        if (!first_weekday && w < 4) || (first_weekday && w == 0) {
            return (1, year + 1);
        }
    }
    ((since / 7 + 1) as u32, year)
}

/// MySQL's DATE_FORMAT of a date and time (microseconds since 1970-01-01 00:00:00) with the
/// specifiers of the MySQL 8.0 reference manual; an unknown specifier `%x` gives `x`.
pub fn date_format(micros: i64, fmt: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let days = micros.div_euclid(MICROS_PER_DAY) as i32;
    let rest = micros.rem_euclid(MICROS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    let secs = rest / MICROS_PER_SEC;
    let (h, mi, s, us) = (secs / 3600, secs / 60 % 60, secs % 60, rest % MICROS_PER_SEC);
    let h12 = if h % 12 == 0 { 12 } else { h % 12 };
    let ampm = if h < 12 { "AM" } else { "PM" };
    let wd = weekday(days);
    let mut out = Vec::with_capacity(fmt.len() + 16);
    let mut it = fmt.iter();
    while let Some(&c) = it.next() {
        if c != b'%' {
            out.push(c);
            continue;
        }
        let Some(&k) = it.next() else { break };
        let _ = match k {
            b'a' => write!(out, "{}", &WEEKDAYS[wd as usize][..3]),
            b'b' => write!(out, "{}", &MONTHS[m as usize - 1][..3]),
            b'c' => write!(out, "{m}"),
            b'D' => {
                let suffix = match (d % 10, d / 10 == 1) {
                    (_, true) => "th",
                    (1, _) => "st",
                    (2, _) => "nd",
                    (3, _) => "rd",
                    _ => "th",
                };
                write!(out, "{d}{suffix}")
            }
            b'd' => write!(out, "{d:02}"),
            b'e' => write!(out, "{d}"),
            b'f' => write!(out, "{us:06}"),
            b'H' => write!(out, "{h:02}"),
            b'h' | b'I' => write!(out, "{h12:02}"),
            b'i' => write!(out, "{mi:02}"),
            b'j' => write!(out, "{:03}", days - days_from_civil(y, 1, 1) + 1),
            b'k' => write!(out, "{h}"),
            b'l' => write!(out, "{h12}"),
            b'M' => write!(out, "{}", MONTHS[m as usize - 1]),
            b'm' => write!(out, "{m:02}"),
            b'p' => write!(out, "{ampm}"),
            b'r' => write!(out, "{h12:02}:{mi:02}:{s:02} {ampm}"),
            b'S' | b's' => write!(out, "{s:02}"),
            b'T' => write!(out, "{h:02}:{mi:02}:{s:02}"),
            b'U' => write!(out, "{:02}", week(days, false, false, true).0),
            b'u' => write!(out, "{:02}", week(days, true, false, false).0),
            b'V' => write!(out, "{:02}", week(days, false, true, true).0),
            b'v' => write!(out, "{:02}", week(days, true, true, false).0),
            b'W' => write!(out, "{}", WEEKDAYS[wd as usize]),
            b'w' => write!(out, "{}", (wd + 1) % 7),
            b'X' => write!(out, "{:04}", week(days, false, true, true).1),
            b'x' => write!(out, "{:04}", week(days, true, true, false).1),
            b'Y' => write!(out, "{y:04}"),
            b'y' => write!(out, "{:02}", y.rem_euclid(100)),
            other => {
                out.push(other);
                Ok(())
            }
        };
    }
    out
}

/// Whether a STR_TO_DATE format names date parts and time parts (its result's type), and
/// whether it reads fractional seconds.
pub fn str_to_date_parts(fmt: &[u8]) -> (bool, bool, bool) {
    let (mut date, mut time, mut frac) = (false, false, false);
    let mut f = fmt.iter();
    while let Some(&c) = f.next() {
        if c == b'%' {
            match f.next() {
                Some(b'Y' | b'y' | b'm' | b'c' | b'M' | b'b' | b'd' | b'e' | b'D' | b'j') => date = true,
                Some(b'H' | b'k' | b'h' | b'I' | b'l' | b'i' | b's' | b'S' | b'p' | b'T' | b'r') => time = true,
                Some(b'f') => (time, frac) = (true, true),
                _ => {}
            }
        }
    }
    (date, time, frac)
}

/// What `str_to_date` read: a date, a date and time, or a time (microseconds), by the parts its
/// format names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    Date(i32),
    DateTime(i64),
    Time(i64),
}

/// MySQL's STR_TO_DATE: `s` read by the DATE_FORMAT specifiers of `fmt` (numbers of up to the
/// specifier's digits, month and day names, AM/PM, literal characters matched exactly); None
/// when `s` does not match or the date is invalid. The result is a DATE when the format has only
/// date parts, a TIME when only time parts, else a DATETIME.
pub fn str_to_date(s: &[u8], fmt: &[u8]) -> Option<Parsed> {
    let (mut y, mut mo, mut d) = (None::<i64>, None::<i64>, None::<i64>);
    let (mut h, mut mi, mut sec, mut us) = (0i64, 0i64, 0i64, 0i64);
    let (mut pm, mut twelve, mut has_time) = (None::<bool>, false, false);
    let mut yday = None::<i64>;
    let mut i = 0usize;
    let num = |i: &mut usize, max: usize| -> Option<i64> {
        let start = *i;
        while *i < s.len() && *i - start < max && s[*i].is_ascii_digit() {
            *i += 1;
        }
        if *i == start {
            return None;
        }
        std::str::from_utf8(&s[start..*i]).ok()?.parse().ok()
    };
    let name = |i: &mut usize, names: &[&str], short: bool| -> Option<i64> {
        for (k, n) in names.iter().enumerate() {
            let n = if short { &n[..3] } else { n };
            if s.len() >= *i + n.len() && s[*i..*i + n.len()].eq_ignore_ascii_case(n.as_bytes()) {
                *i += n.len();
                return Some(k as i64);
            }
        }
        None
    };
    let mut f = fmt.iter();
    while let Some(&c) = f.next() {
        // As MySQL: spaces before each part of the input are skipped, spaces in the format
        // match nothing, and the rest of the format is ignored once the input ends.
        while i < s.len() && s[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= s.len() {
            break;
        }
        if c != b'%' {
            if c.is_ascii_whitespace() {
                continue;
            }
            if s.get(i) != Some(&c) {
                return None;
            }
            i += 1;
            continue;
        }
        let k = *f.next()?;
        match k {
            b'Y' => y = Some(num(&mut i, 4)?),
            b'y' => y = Some(num(&mut i, 2).map(|v| if v < 70 { 2000 + v } else { 1900 + v })?),
            b'm' | b'c' => mo = Some(num(&mut i, 2)?),
            b'M' => mo = Some(name(&mut i, &MONTHS, false)? + 1),
            b'b' => mo = Some(name(&mut i, &MONTHS, true)? + 1),
            b'd' | b'e' => d = Some(num(&mut i, 2)?),
            b'D' => {
                d = Some(num(&mut i, 2)?);
                i += 2.min(s.len() - i);
            }
            b'j' => yday = Some(num(&mut i, 3)?),
            b'H' | b'k' => {
                h = num(&mut i, 2)?;
                has_time = true;
            }
            b'h' | b'I' | b'l' => {
                h = num(&mut i, 2)?;
                twelve = true;
                has_time = true;
            }
            b'i' => {
                mi = num(&mut i, 2)?;
                has_time = true;
            }
            b's' | b'S' => {
                sec = num(&mut i, 2)?;
                has_time = true;
            }
            b'f' => {
                let start = i;
                let v = num(&mut i, 6)?;
                us = v * 10i64.pow(6 - (i - start) as u32);
                has_time = true;
            }
            b'p' => pm = Some(name(&mut i, &["AM", "PM"], false)? == 1),
            b'T' | b'r' => {
                twelve = k == b'r';
                h = num(&mut i, 2)?;
                (s.get(i) == Some(&b':')).then_some(())?;
                i += 1;
                mi = num(&mut i, 2)?;
                (s.get(i) == Some(&b':')).then_some(())?;
                i += 1;
                sec = num(&mut i, 2)?;
                has_time = true;
                if twelve {
                    while i < s.len() && s[i].is_ascii_whitespace() {
                        i += 1;
                    }
                    pm = Some(name(&mut i, &["AM", "PM"], false)? == 1);
                }
            }
            b'W' | b'a' => {
                name(&mut i, &WEEKDAYS, k == b'a')?;
            }
            b'%' => {
                (s.get(i) == Some(&b'%')).then_some(())?;
                i += 1;
            }
            _ => return None,
        }
    }
    if twelve {
        if !(1..=12).contains(&h) {
            return None;
        }
        h %= 12;
        if pm == Some(true) {
            h += 12;
        }
    }
    if h > 23 || mi > 59 || sec > 59 {
        return None;
    }
    let time = ((h * 60 + mi) * 60 + sec) * MICROS_PER_SEC + us;
    let has_date = y.is_some() || mo.is_some() || d.is_some() || yday.is_some();
    if !has_date {
        return has_time.then_some(Parsed::Time(time));
    }
    let y = y.unwrap_or(0);
    let days = match yday {
        Some(n) if mo.is_none() && d.is_none() => {
            if n < 1 || n > if is_leap(y as i32) { 366 } else { 365 } {
                return None;
            }
            days_from_civil(y as i32, 1, 1) + n as i32 - 1
        }
        _ => {
            let (m, dd) = (mo.unwrap_or(0), d.unwrap_or(0));
            // MySQL reads a zero month or day as a zero date, which Tern does not store: NULL.
            if !(1..=12).contains(&m) || dd < 1 || dd > days_in_month(y as i32, m as u32) as i64 || y > 9999 {
                return None;
            }
            days_from_civil(y as i32, m as u32, dd as u32)
        }
    };
    Some(if has_time { Parsed::DateTime(days as i64 * MICROS_PER_DAY + time) } else { Parsed::Date(days) })
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
        // MySQL's other TIME texts: HH:MM, days, digits only, a DATETIME's time of day.
        let hms = |h: i64, m: i64, s: i64| (h * 3600 + m * 60 + s) * MICROS_PER_SEC;
        assert_eq!(parse_time("10:11"), Some(hms(10, 11, 0)));
        assert_eq!(parse_time("2 10:11:12"), Some(hms(58, 11, 12)));
        assert_eq!(parse_time("-1 01:00"), Some(-hms(25, 0, 0)));
        assert_eq!(parse_time("101112"), Some(hms(10, 11, 12)));
        assert_eq!(parse_time("1112.25"), Some(hms(0, 11, 12) + 250_000));
        assert_eq!(parse_time("12"), Some(hms(0, 0, 12)));
        assert_eq!(parse_time("2024-01-02 10:11:12.5"), Some(hms(10, 11, 12) + 500_000));
        assert_eq!(parse_time("2024-01-02T23:59:59"), Some(hms(23, 59, 59)));
        for bad in ["", "10:61", "1061", "ab", "10:11:12.1234567", "2024-13-02 10:11:12", "1 2 3"] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
        assert_eq!(truncate_fsp(1_234_567, 3), 1_234_000);
    }

    #[test]
    fn mysql_date_format_and_weeks() {
        let t = parse_datetime("2024-03-05 13:04:05.000123").unwrap();
        let f = |fmt: &str| String::from_utf8(date_format(t, fmt.as_bytes())).unwrap();
        assert_eq!(f("%Y-%m-%d %H:%i:%s"), "2024-03-05 13:04:05");
        assert_eq!(
            f("%a %b %c %D %e %f %h %I %j %k %l %M %p %r %T %W %w %y %% %q"),
            "Tue Mar 3 5th 5 000123 01 01 065 13 1 March PM 01:04:05 PM 13:04:05 Tuesday 2 24 % q"
        );
        // Week numbers of the MySQL manual's examples (WEEK('2008-02-20') = 7, mode 1 = 8;
        // '2008-12-31' in mode 1 is week 53; '2000-01-01' is week 52 of 1999 with %V/%X).
        let d = |s: &str| parse_date(s).unwrap();
        assert_eq!(week(d("2008-02-20"), false, false, true).0, 7);
        assert_eq!(week(d("2008-02-20"), true, false, false).0, 8);
        assert_eq!(week(d("2008-12-31"), true, false, false).0, 53);
        assert_eq!(week(d("2000-01-01"), false, true, true), (52, 1999));
        assert_eq!(week(d("2000-01-01"), false, false, true).0, 0);
        let day =
            |s: &str, fmt: &str| String::from_utf8(date_format(d(s) as i64 * MICROS_PER_DAY, fmt.as_bytes())).unwrap();
        assert_eq!(day("2000-01-01", "%X %V %x %v %U %u"), "1999 52 1999 52 00 00");
        assert_eq!(day("2011-12-11", "%D %D"), "11th 11th");
        assert_eq!(day("2024-01-01", "%W %a %w"), "Monday Mon 1");
    }

    #[test]
    fn mysql_str_to_date() {
        let p = |s: &str, f: &str| str_to_date(s.as_bytes(), f.as_bytes());
        assert_eq!(p("01,5,2013", "%d,%m,%Y"), Some(Parsed::Date(parse_date("2013-05-01").unwrap())));
        assert_eq!(p("May 1, 2013", "%M %d,%Y"), Some(Parsed::Date(parse_date("2013-05-01").unwrap())));
        assert_eq!(p("a09:30:17", "a%h:%i:%s"), Some(Parsed::Time(parse_time("09:30:17").unwrap())));
        assert_eq!(
            p("2024-03-05 01:04:05 PM", "%Y-%m-%d %r"),
            Some(Parsed::DateTime(parse_datetime("2024-03-05 13:04:05").unwrap()))
        );
        assert_eq!(
            p("05/03/2024 1:04:05.5 pm", "%d/%m/%Y %l:%i:%s.%f %p"),
            Some(Parsed::DateTime(parse_datetime("2024-03-05 13:04:05.5").unwrap()))
        );
        assert_eq!(p("2023-02-29", "%Y-%m-%d"), None);
        assert_eq!(p("2024-13-01", "%Y-%m-%d"), None);
        assert_eq!(p("x2024", "%Y"), None);
        assert_eq!(p("2024 060", "%Y %j"), Some(Parsed::Date(parse_date("2024-02-29").unwrap())));
    }
}
