//! RESP2 as redis-server speaks it: requests are multibulk arrays of bulk strings
//! (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`) or inline lines (`GET k\r\n`, as typed into telnet); replies are
//! simple strings, errors, integers, bulk strings and arrays.
//!
//! The parser is incremental: given the bytes received so far it returns a whole command, or says
//! more bytes are needed, or fails with the error text redis-server sends before it closes the
//! connection (redis `networking.c`: "Protocol error: invalid multibulk length", "expected '$', got
//! 'x'", "invalid bulk length", "too big inline request", "unbalanced quotes in request").

/// Size limits; the defaults are redis-server 7's (`proto-max-bulk-len` 512 MB, 64 KB inline lines
/// and count strings, at most `INT_MAX` arguments per command; memory is bounded by the pending
/// limit the caller applies to `Parser::held` plus its unparsed bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_bulk: usize,
    pub max_inline: usize,
    pub max_args: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_bulk: 512 << 20, max_inline: 64 << 10, max_args: i32::MAX as usize }
    }
}

/// What the bytes so far hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes are needed; the first `used` bytes were taken into the parser's state (whole
    /// arguments of a command still arriving) and are to be dropped by the caller.
    Incomplete { used: usize },
    /// A command and how many bytes it took (since the last `Incomplete`).
    Command { args: Vec<Vec<u8>>, used: usize },
    /// An empty line or a multibulk of zero (or negative) length: nothing to run, `used` bytes go.
    Empty { used: usize },
}

/// A protocol error: the text (with redis-server's `ERR ` prefix) to send before closing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

fn perr(msg: impl std::fmt::Display) -> ProtocolError {
    ProtocolError(format!("ERR Protocol error: {msg}"))
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?.windows(2).position(|w| w == b"\r\n").map(|p| from + p)
}

/// A decimal integer as redis's `string2ll` accepts it (optional '-', digits, no '+', no spaces,
/// no leading zeros, within the signed 64-bit range).
pub fn parse_int(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if digits[0] == b'0' && (digits.len() > 1 || neg) {
        return None;
    }
    let v: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    if neg {
        if v == 1 << 63 { Some(i64::MIN) } else { i64::try_from(v).ok().map(|v| -v) }
    } else {
        i64::try_from(v).ok()
    }
}

/// Per-argument bookkeeping counted with its bytes against the pending limit.
pub const ARG_OVERHEAD: usize = 32;

/// One connection's parser. Like redis-server it keeps a multibulk command's complete arguments
/// between reads, so bytes are looked at once however slowly a command arrives (re-parsing from
/// the start would make a command of a million small arguments cost quadratic time).
#[derive(Debug, Default)]
pub struct Parser {
    args: Vec<Vec<u8>>,
    /// Arguments still to come of the multibulk being read (0: between commands).
    left: usize,
    /// Bytes (plus `ARG_OVERHEAD` each) of the arguments held.
    held: usize,
}

impl Parser {
    /// Memory held for the command being received.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Parses from the start of `buf` (the bytes after those already used).
    pub fn next(&mut self, buf: &[u8], lim: &Limits) -> Result<Parsed, ProtocolError> {
        if self.left > 0 {
            return self.bulks(buf, 0, lim);
        }
        match buf.first() {
            None => Ok(Parsed::Incomplete { used: 0 }),
            Some(b'*') => self.multibulk(buf, lim),
            Some(_) => parse_inline(buf, lim),
        }
    }

    fn multibulk(&mut self, buf: &[u8], lim: &Limits) -> Result<Parsed, ProtocolError> {
        let Some(end) = find_crlf(buf, 1) else {
            return if buf.len() > lim.max_inline {
                Err(perr("too big mbulk count string"))
            } else {
                Ok(Parsed::Incomplete { used: 0 })
            };
        };
        let n = parse_int(&buf[1..end])
            .filter(|&n| n <= lim.max_args as i64)
            .ok_or_else(|| perr("invalid multibulk length"))?;
        if n <= 0 {
            return Ok(Parsed::Empty { used: end + 2 });
        }
        self.left = n as usize;
        self.args = Vec::with_capacity(self.left.min(1024));
        self.held = 0;
        self.bulks(buf, end + 2, lim)
    }

    /// Reads bulk arguments from `pos` while they are complete.
    fn bulks(&mut self, buf: &[u8], mut pos: usize, lim: &Limits) -> Result<Parsed, ProtocolError> {
        while self.left > 0 {
            let Some(&c) = buf.get(pos) else { return Ok(Parsed::Incomplete { used: pos }) };
            if c != b'$' {
                self.reset();
                return Err(perr(format_args!("expected '$', got '{}'", c as char)));
            }
            let Some(end) = find_crlf(buf, pos + 1) else {
                if buf.len() - pos > lim.max_inline {
                    self.reset();
                    return Err(perr("too big bulk count string"));
                }
                return Ok(Parsed::Incomplete { used: pos });
            };
            let Some(len) = parse_int(&buf[pos + 1..end]).filter(|&l| l >= 0 && l as u64 <= lim.max_bulk as u64) else {
                self.reset();
                return Err(perr("invalid bulk length"));
            };
            let (start, len) = (end + 2, len as usize);
            if buf.len() < start + len + 2 {
                return Ok(Parsed::Incomplete { used: pos });
            }
            self.args.push(buf[start..start + len].to_vec());
            self.held += len + ARG_OVERHEAD;
            self.left -= 1;
            // As redis-server does, the two bytes after the payload are skipped unchecked.
            pos = start + len + 2;
        }
        self.held = 0;
        Ok(Parsed::Command { args: std::mem::take(&mut self.args), used: pos })
    }

    fn reset(&mut self) {
        *self = Parser::default();
    }
}

/// Parses one command from the start of `buf` with a fresh parser (tests, one-shot callers).
pub fn parse(buf: &[u8], lim: &Limits) -> Result<Parsed, ProtocolError> {
    match Parser::default().next(buf, lim)? {
        Parsed::Incomplete { .. } => Ok(Parsed::Incomplete { used: 0 }),
        other => Ok(other),
    }
}

fn parse_inline(buf: &[u8], lim: &Limits) -> Result<Parsed, ProtocolError> {
    let Some(nl) = buf.iter().take(lim.max_inline + 2).position(|&b| b == b'\n') else {
        return if buf.len() > lim.max_inline {
            Err(perr("too big inline request"))
        } else {
            Ok(Parsed::Incomplete { used: 0 })
        };
    };
    let mut line = &buf[..nl];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    let args = split_args(line).ok_or_else(|| perr("unbalanced quotes in request"))?;
    if args.is_empty() {
        return Ok(Parsed::Empty { used: nl + 1 });
    }
    Ok(Parsed::Command { args, used: nl + 1 })
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Splits an inline line into arguments like redis's `sdssplitargs`: blanks separate; "double
/// quotes" take \n \r \t \b \a \\ \" and \xHH escapes; 'single quotes' take \'; a closing quote
/// must be followed by a blank or the end. None when quotes do not balance.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut i = 0;
    let blank = |c: u8| matches!(c, b' ' | b'\n' | b'\r' | b'\t' | 0x0b | 0x0c);
    loop {
        while i < line.len() && blank(line[i]) {
            i += 1;
        }
        if i >= line.len() {
            return Some(out);
        }
        let mut cur = Vec::new();
        let mut in_dq = false;
        let mut in_sq = false;
        loop {
            if in_dq {
                let c = *line.get(i)?;
                if c == b'\\'
                    && line.get(i + 1) == Some(&b'x')
                    && let (Some(h), Some(l)) =
                        (line.get(i + 2).and_then(|&c| hex(c)), line.get(i + 3).and_then(|&c| hex(c)))
                {
                    cur.push(h * 16 + l);
                    i += 4;
                    continue;
                }
                if c == b'\\' && i + 1 < line.len() {
                    cur.push(match line[i + 1] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                    i += 2;
                } else if c == b'"' {
                    if line.get(i + 1).is_some_and(|&n| !blank(n)) {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    cur.push(c);
                    i += 1;
                }
            } else if in_sq {
                let c = *line.get(i)?;
                if c == b'\\' && line.get(i + 1) == Some(&b'\'') {
                    cur.push(b'\'');
                    i += 2;
                } else if c == b'\'' {
                    if line.get(i + 1).is_some_and(|&n| !blank(n)) {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    cur.push(c);
                    i += 1;
                }
            } else {
                match line.get(i) {
                    None => break,
                    Some(&c) if blank(c) => break,
                    Some(b'"') => in_dq = true,
                    Some(b'\'') => in_sq = true,
                    Some(&c) => cur.push(c),
                }
                i += 1;
            }
        }
        out.push(cur);
    }
}

/// Reply encoders (RESP2).
pub fn simple(out: &mut Vec<u8>, s: &str) {
    out.push(b'+');
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// An error reply; `msg` starts with its code (`ERR ...`, `WRONGTYPE ...`). Line breaks in it
/// would break the framing, so they become spaces (as redis-server does).
pub fn error(out: &mut Vec<u8>, msg: &str) {
    out.push(b'-');
    out.extend(msg.bytes().map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
    out.extend_from_slice(b"\r\n");
}

pub fn integer(out: &mut Vec<u8>, v: i64) {
    out.push(b':');
    out.extend_from_slice(v.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// redis's `sdscatrepr`: the bytes in double quotes, with C escapes for quotes, backslashes,
/// control characters and bytes that are not printable (MONITOR's arguments).
pub fn repr(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    for &c in s {
        match c {
            b'\\' | b'"' => out.extend_from_slice(&[b'\\', c]),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            7 => out.extend_from_slice(b"\\a"),
            8 => out.extend_from_slice(b"\\b"),
            c if c.is_ascii_graphic() || c == b' ' => out.push(c),
            c => out.extend_from_slice(format!("\\x{c:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

pub fn bulk(out: &mut Vec<u8>, v: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(v.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(v);
    out.extend_from_slice(b"\r\n");
}

/// The nil bulk string (`$-1`), e.g. GET of a missing key.
pub fn null(out: &mut Vec<u8>) {
    out.extend_from_slice(b"$-1\r\n");
}

/// The nil array (`*-1`), e.g. EXEC after a watched key changed.
pub fn null_array(out: &mut Vec<u8>) {
    out.extend_from_slice(b"*-1\r\n");
}

pub fn array_len(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// How a command's top-level RESP2 reply looks in RESP3 (`HELLO 3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resp3Shape {
    /// Only nulls change (`$-1` / `*-1` become `_`).
    Plain,
    /// A flat array of key, value, key, value ... becomes a map (HGETALL, CONFIG GET, HELLO).
    Map,
    /// A bulk string becomes a verbatim text string (INFO).
    Verbatim,
    /// A flat array of field, value, field, value ... becomes an array of [field, value] pairs
    /// (HRANDFIELD WITHVALUES).
    Pairs,
    /// A top-level array becomes a set (SMEMBERS, SINTER ...).
    Set,
    /// Each top-level array becomes a push (SUBSCRIBE's confirmations, pub/sub messages).
    Push,
}

/// Rewrites complete RESP2 replies (as this crate encodes them) into RESP3; `shape` applies to
/// each top-level reply. Bytes that do not parse are copied unchanged. Iterative (an explicit
/// count of what each open array still holds), so no nesting depth can exhaust the stack.
pub fn to_resp3(replies: &[u8], shape: Resp3Shape) -> Vec<u8> {
    let mut out = Vec::with_capacity(replies.len() + 16);
    if shape == Resp3Shape::Pairs
        && let Some(done) = pairs(replies, &mut out)
    {
        return done;
    }
    let mut pos = 0;
    // Elements still to come of each array being rewritten, innermost last.
    let mut open: Vec<i64> = Vec::new();
    while pos < replies.len() {
        let here = if open.is_empty() { shape } else { Resp3Shape::Plain };
        let Some((next, children)) = convert(replies, pos, &mut out, here) else {
            out.extend_from_slice(&replies[pos..]);
            break;
        };
        pos = next;
        if let Some(left) = open.last_mut() {
            *left -= 1;
        }
        if children > 0 {
            open.push(children);
        }
        while open.last() == Some(&0) {
            open.pop();
        }
    }
    out
}

/// A top-level flat array of 2n elements as n two-element arrays; None (nothing written) when
/// the reply is not such an array.
fn pairs(b: &[u8], out: &mut Vec<u8>) -> Option<Vec<u8>> {
    let end = find_crlf(b, 0)?;
    let n = if b[0] == b'*' { parse_int(&b[1..end])? } else { return None };
    if n < 0 || n % 2 != 0 {
        return None;
    }
    let mut body = Vec::new();
    let mut pos = end + 2;
    for i in 0..n {
        if i % 2 == 0 {
            body.extend_from_slice(b"*2\r\n");
        }
        let (next, children) = convert(b, pos, &mut body, Resp3Shape::Plain)?;
        if children != 0 {
            return None;
        }
        pos = next;
    }
    out.push(b'*');
    out.extend_from_slice((n / 2).to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend(body);
    out.extend_from_slice(&b[pos..]);
    Some(std::mem::take(out))
}

/// Converts the one reply header (with a bulk's payload) at `pos`; returns the position after it
/// and, for an array, how many elements follow.
fn convert(b: &[u8], pos: usize, out: &mut Vec<u8>, shape: Resp3Shape) -> Option<(usize, i64)> {
    let end = find_crlf(b, pos)?;
    let line = &b[pos..end];
    let next = end + 2;
    match line.first()? {
        b'$' => {
            let n = parse_int(&line[1..])?;
            if n < 0 {
                out.extend_from_slice(b"_\r\n");
                return Some((next, 0));
            }
            let data = b.get(next..next + n as usize)?;
            if shape == Resp3Shape::Verbatim {
                out.push(b'=');
                out.extend_from_slice((n + 4).to_string().as_bytes());
                out.extend_from_slice(b"\r\ntxt:");
            } else {
                out.extend_from_slice(line);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(data);
            out.extend_from_slice(b"\r\n");
            Some((next + n as usize + 2, 0))
        }
        b'*' => {
            let n = parse_int(&line[1..])?;
            if n < 0 {
                out.extend_from_slice(b"_\r\n");
                return Some((next, 0));
            }
            if shape == Resp3Shape::Map && n % 2 == 0 {
                out.push(b'%');
                out.extend_from_slice((n / 2).to_string().as_bytes());
            } else if shape == Resp3Shape::Set {
                out.push(b'~');
                out.extend_from_slice(n.to_string().as_bytes());
            } else if shape == Resp3Shape::Push {
                out.push(b'>');
                out.extend_from_slice(n.to_string().as_bytes());
            } else {
                out.extend_from_slice(line);
            }
            out.extend_from_slice(b"\r\n");
            Some((next, n))
        }
        _ => {
            out.extend_from_slice(&b[pos..next]);
            Some((next, 0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp3_rewrites_nulls_maps_and_verbatim() {
        let mut r = Vec::new();
        null(&mut r);
        array_len(&mut r, 3);
        bulk(&mut r, b"a");
        null(&mut r);
        integer(&mut r, 5);
        assert_eq!(to_resp3(&r, Resp3Shape::Plain), b"_\r\n*3\r\n$1\r\na\r\n_\r\n:5\r\n");
        let mut m = Vec::new();
        array_len(&mut m, 4);
        for x in [&b"f"[..], b"1", b"g", b"2"] {
            bulk(&mut m, x);
        }
        assert_eq!(to_resp3(&m, Resp3Shape::Map), b"%2\r\n$1\r\nf\r\n$1\r\n1\r\n$1\r\ng\r\n$1\r\n2\r\n");
        let mut v = Vec::new();
        bulk(&mut v, b"# Server\r\n");
        assert_eq!(to_resp3(&v, Resp3Shape::Verbatim), b"=14\r\ntxt:# Server\r\n\r\n");
        let mut e = Vec::new();
        error(&mut e, "ERR x");
        assert_eq!(to_resp3(&e, Resp3Shape::Plain), e);
        // Nested arrays: only the top level takes the shape; a deep nesting needs no stack.
        let mut n = Vec::new();
        array_len(&mut n, 2);
        array_len(&mut n, 2);
        bulk(&mut n, b"a");
        null(&mut n);
        integer(&mut n, 1);
        assert_eq!(to_resp3(&n, Resp3Shape::Map), b"%1\r\n*2\r\n$1\r\na\r\n_\r\n:1\r\n");
        let deep = [b"*1\r\n".repeat(1_000_000), b"$-1\r\n".to_vec()].concat();
        assert_eq!(to_resp3(&deep, Resp3Shape::Plain), [b"*1\r\n".repeat(1_000_000), b"_\r\n".to_vec()].concat());
    }

    fn cmd(parts: &[&str]) -> Vec<Vec<u8>> {
        parts.iter().map(|p| p.as_bytes().to_vec()).collect()
    }

    #[test]
    fn multibulk_whole_split_and_pipelined() {
        let lim = Limits::default();
        let wire = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        let first = 31;
        // Every proper prefix of the first command is incomplete.
        for cut in 0..first {
            assert_eq!(parse(&wire[..cut], &lim), Ok(Parsed::Incomplete { used: 0 }), "cut {cut}");
        }
        assert_eq!(parse(wire, &lim), Ok(Parsed::Command { args: cmd(&["SET", "k", "hello"]), used: first }));
        assert_eq!(
            parse(&wire[first..], &lim),
            Ok(Parsed::Command { args: cmd(&["GET", "k"]), used: wire.len() - first })
        );
        // Binary-safe payloads, empty arguments, zero and negative counts.
        assert_eq!(
            parse(b"*2\r\n$0\r\n\r\n$4\r\na\r\nb\r\n", &lim),
            Ok(Parsed::Command { args: vec![vec![], b"a\r\nb".to_vec()], used: 20 })
        );
        assert_eq!(parse(b"*0\r\n", &lim), Ok(Parsed::Empty { used: 4 }));
        assert_eq!(parse(b"*-1\r\n", &lim), Ok(Parsed::Empty { used: 5 }));
    }

    #[test]
    fn multibulk_errors_are_redis_texts() {
        let lim = Limits::default();
        let e = |b: &[u8]| parse(b, &lim).unwrap_err().0;
        assert_eq!(e(b"*x\r\n"), "ERR Protocol error: invalid multibulk length");
        assert_eq!(e(b"*2147483648\r\n"), "ERR Protocol error: invalid multibulk length");
        assert_eq!(parse(b"*2147483647\r\n", &lim), Ok(Parsed::Incomplete { used: 0 }));
        assert_eq!(e(b"*+1\r\n"), "ERR Protocol error: invalid multibulk length");
        assert_eq!(e(b"*1\r\n:1\r\n"), "ERR Protocol error: expected '$', got ':'");
        assert_eq!(e(b"*1\r\n$-1\r\n"), "ERR Protocol error: invalid bulk length");
        assert_eq!(e(b"*1\r\n$536870913\r\n"), "ERR Protocol error: invalid bulk length");
        assert_eq!(e(b"*1\r\n$abc\r\n"), "ERR Protocol error: invalid bulk length");
        let small = Limits { max_inline: 8, ..lim };
        assert_eq!(parse(b"*1234567890", &small).unwrap_err().0, "ERR Protocol error: too big mbulk count string");
        assert_eq!(parse(b"*1\r\n$1234567890", &small).unwrap_err().0, "ERR Protocol error: too big bulk count string");
        // A declared bulk within the limit just waits for its bytes.
        assert_eq!(parse(b"*1\r\n$536870912\r\nabc", &lim), Ok(Parsed::Incomplete { used: 0 }));
    }

    #[test]
    fn inline_commands_and_quoting() {
        let lim = Limits::default();
        assert_eq!(parse(b"PING\r\n", &lim), Ok(Parsed::Command { args: cmd(&["PING"]), used: 6 }));
        assert_eq!(parse(b"  GET   k \n", &lim), Ok(Parsed::Command { args: cmd(&["GET", "k"]), used: 11 }));
        assert_eq!(parse(b"\r\n", &lim), Ok(Parsed::Empty { used: 2 }));
        assert_eq!(parse(b"GET k", &lim), Ok(Parsed::Incomplete { used: 0 }));
        assert_eq!(split_args(br#"SET "a b" 'c d'"#), Some(cmd(&["SET", "a b", "c d"])));
        assert_eq!(split_args(br#""\x41\n\"" '\'x'"#), Some(vec![b"A\n\"".to_vec(), b"'x".to_vec()]));
        assert_eq!(split_args(br#""\xZZ""#), Some(vec![b"xZZ".to_vec()]));
        assert_eq!(split_args(br#""""#), Some(vec![vec![]]));
        assert_eq!(split_args(b"a\"b\""), Some(vec![b"ab".to_vec()]));
        for bad in [&br#"SET "a"#[..], br#"SET 'a"#, br#""a"b"#, br#"'a'b"#] {
            assert_eq!(split_args(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse(b"SET \"a\r\n", &lim).unwrap_err().0, "ERR Protocol error: unbalanced quotes in request");
        let small = Limits { max_inline: 4, ..lim };
        assert_eq!(parse(b"PINGPONG", &small).unwrap_err().0, "ERR Protocol error: too big inline request");
    }

    #[test]
    fn reply_encoding() {
        let mut o = Vec::new();
        simple(&mut o, "OK");
        error(&mut o, "ERR bad\r\nthing");
        integer(&mut o, -42);
        bulk(&mut o, b"hi");
        null(&mut o);
        array_len(&mut o, 2);
        assert_eq!(o, b"+OK\r\n-ERR bad  thing\r\n:-42\r\n$2\r\nhi\r\n$-1\r\n*2\r\n".to_vec());
    }
}
