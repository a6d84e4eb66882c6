//! The SQL tokenizer (MySQL lexical rules): identifiers with backquotes, strings in single or
//! double quotes with backslash escapes and doubled quotes, numbers, `X'..'`/`0x..` and
//! `b'..'`/`0b..` literals, `?` parameters, `@user` and `@@system` variables, comments (`-- `,
//! `#`, `/* */`), and executable comments `/*! ... */` / `/*!80000 ... */` whose content is read
//! as SQL (so `/*! ENGINE = innodb */` is part of the statement).

#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// An unquoted word (keyword or identifier), as written.
    Word(String),
    /// A backquoted identifier.
    Quoted(String),
    Str(Vec<u8>),
    /// Number text: integer, decimal or float (`1e3`).
    Num(String),
    /// `X'..'` / `0x..` and `b'..'` / `0b..`: the bytes they denote.
    HexBytes(Vec<u8>),
    BitBytes(Vec<u8>),
    Param,
    /// `@name` (user variable).
    UserVar(String),
    /// `@@[global.|session.|local.]name`: (global?, name lowercased).
    SysVar(bool, String),
    /// Punctuation and operators.
    Sym(&'static str),
}

impl Tok {
    /// Whether this is the (case-insensitive) keyword `kw`.
    pub fn is_kw(&self, kw: &str) -> bool {
        matches!(self, Tok::Word(w) if w.eq_ignore_ascii_case(kw))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct LexError(pub String);

/// First of the private-use characters that stand for raw (non-UTF-8) bytes 0x80..=0xFF of a
/// statement (binary string literals), so that statements can be handled as text.
const RAW_BASE: u32 = 0xF780;

/// A statement's bytes as text: invalid UTF-8 bytes become private-use characters that string
/// literals turn back into the bytes.
pub fn decode_statement(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_string(),
        Err(_) => {
            let mut out = String::with_capacity(b.len() + 16);
            let mut rest = b;
            loop {
                match std::str::from_utf8(rest) {
                    Ok(s) => {
                        out.push_str(s);
                        return out;
                    }
                    Err(e) => {
                        let (good, bad) = rest.split_at(e.valid_up_to());
                        out.push_str(std::str::from_utf8(good).expect("valid prefix"));
                        let n = e.error_len().unwrap_or(bad.len()).max(1);
                        for &x in &bad[..n] {
                            out.push(char::from_u32(RAW_BASE + (x as u32 - 0x80)).expect("private use"));
                        }
                        rest = &bad[n..];
                    }
                }
            }
        }
    }
}

/// Turns the stand-in characters of `decode_statement` back into raw bytes.
fn raw_bytes(s: Vec<u8>) -> Vec<u8> {
    if !s.windows(2).any(|w| w[0] == 0xEF && (w[1] == 0x9E || w[1] == 0x9F)) {
        return s;
    }
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == 0xEF && i + 2 < s.len() && (s[i + 1] == 0x9E || s[i + 1] == 0x9F) {
            let c = 0xF000 | ((s[i + 1] as u32 & 0x3F) << 6) | (s[i + 2] as u32 & 0x3F);
            if c >= RAW_BASE {
                out.push((c - RAW_BASE + 0x80) as u8);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

const SYMS: [&str; 27] = [
    "<=>", "<<", ">>", "<=", ">=", "<>", "!=", ":=", "||", "&&", "(", ")", ",", ".", ";", "=", "<", ">", "+", "-", "*",
    "/", "%", "!", "~", "|", "&",
];

/// Tokens of `sql` with the byte offset where each starts.
pub fn tokenize(sql: &str) -> Result<Vec<(Tok, usize)>, LexError> {
    Ok(tokenize_spans(sql)?.into_iter().map(|(t, s, _)| (t, s)).collect())
}

/// Tokens with the byte range each covers (start, end).
pub fn tokenize_spans(sql: &str) -> Result<Vec<(Tok, usize, usize)>, LexError> {
    let b = sql.as_bytes();
    let mut out: Vec<(Tok, usize)> = Vec::new();
    let mut ends: Vec<usize> = Vec::new();
    let mut i = 0;
    // Depth of executable comments `/*! ... */` we are inside (their `*/` is skipped).
    let mut exec_comment = 0usize;
    while i < b.len() {
        // A token pushed by the previous step ends where this one starts.
        while ends.len() < out.len() {
            ends.push(i);
        }
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        // Comments.
        if c == b'#'
            || (c == b'-' && b.get(i + 1) == Some(&b'-') && b.get(i + 2).is_none_or(|c| c.is_ascii_whitespace()))
        {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            if b.get(i + 2) == Some(&b'!') {
                i += 3;
                // An optional version number: the content applies to us (we say we are 8.0).
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                exec_comment += 1;
                continue;
            }
            match sql[i + 2..].find("*/") {
                Some(end) => i = i + 2 + end + 2,
                None => return Err(LexError("unterminated comment".into())),
            }
            continue;
        }
        if exec_comment > 0 && c == b'*' && b.get(i + 1) == Some(&b'/') {
            exec_comment -= 1;
            i += 2;
            continue;
        }
        let start = i;
        // X'..', B'..', N'..' prefixes.
        if (c == b'x' || c == b'X' || c == b'b' || c == b'B') && b.get(i + 1) == Some(&b'\'') {
            let end = sql[i + 2..].find('\'').ok_or_else(|| LexError("unterminated literal".into()))? + i + 2;
            let digits = &sql[i + 2..end];
            let tok = if c == b'x' || c == b'X' { Tok::HexBytes(hex(digits)?) } else { Tok::BitBytes(bits(digits)?) };
            out.push((tok, start));
            i = end + 1;
            continue;
        }
        if (c == b'n' || c == b'N') && b.get(i + 1) == Some(&b'\'') {
            i += 1;
            continue;
        }
        if c == b'0' && matches!(b.get(i + 1), Some(b'x') | Some(b'b')) {
            let hexy = b[i + 1] == b'x';
            let mut j = i + 2;
            while j < b.len() && (if hexy { b[j].is_ascii_hexdigit() } else { b[j] == b'0' || b[j] == b'1' }) {
                j += 1;
            }
            if j > i + 2 && !b.get(j).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
                let digits = &sql[i + 2..j];
                out.push((if hexy { Tok::HexBytes(hex_padded(digits)?) } else { Tok::BitBytes(bits(digits)?) }, start));
                i = j;
                continue;
            }
        }
        if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            let (tok, j) = number(sql, i);
            out.push((tok, start));
            i = j;
            continue;
        }
        if is_ident_byte(c) {
            let mut j = i;
            while j < b.len() && is_ident_byte(b[j]) {
                j += 1;
            }
            // A character set introducer before a string (`_binary'...'`, `_utf8mb4'...'`).
            if c == b'_' && matches!(b.get(j), Some(b'\'') | Some(b'"')) {
                i = j;
                continue;
            }
            out.push((Tok::Word(sql[i..j].to_string()), start));
            i = j;
            continue;
        }
        match c {
            b'`' => {
                let (name, j) = quoted_ident(b, i)?;
                out.push((Tok::Quoted(name), start));
                i = j;
            }
            b'\'' | b'"' => {
                let (s, j) = string(b, i)?;
                // Adjacent strings concatenate ('a' 'b').
                if let Some((Tok::Str(prev), _)) = out.last_mut()
                    && prev_is_string_end(b, i)
                {
                    prev.extend_from_slice(&s);
                } else {
                    out.push((Tok::Str(s), start));
                }
                i = j;
            }
            b'?' => {
                out.push((Tok::Param, start));
                i += 1;
            }
            b'@' => {
                let (tok, j) = variable(sql, i)?;
                out.push((tok, start));
                i = j;
            }
            _ => {
                let Some(sym) = SYMS.iter().find(|s| sql[i..].starts_with(**s)) else {
                    return Err(LexError(format!("unexpected character '{}'", sql[i..].chars().next().unwrap_or('?'))));
                };
                out.push((Tok::Sym(sym), start));
                i += sym.len();
            }
        }
    }
    while ends.len() < out.len() {
        ends.push(i);
    }
    Ok(out.into_iter().zip(ends).map(|((t, s), e)| (t, s, e)).collect())
}

/// A number starting at `i` (digits, a fraction, an exponent), or the identifier it begins
/// (`1abc` is one in MySQL); the token and where the next starts.
fn number(sql: &str, i: usize) -> (Tok, usize) {
    let b = sql.as_bytes();
    let mut j = i;
    while j < b.len() && b[j].is_ascii_digit() {
        j += 1;
    }
    if j < b.len() && b[j] == b'.' {
        j += 1;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
    }
    if j < b.len() && (b[j] == b'e' || b[j] == b'E') {
        let mut k = j + 1;
        if k < b.len() && (b[k] == b'+' || b[k] == b'-') {
            k += 1;
        }
        if k < b.len() && b[k].is_ascii_digit() {
            while k < b.len() && b[k].is_ascii_digit() {
                k += 1;
            }
            j = k;
        }
    }
    // `1abc` is an identifier in MySQL.
    if j < b.len() && (b[j].is_ascii_alphabetic() || b[j] == b'_' || b[j] == b'$') && !sql[i..j].contains('.') {
        let mut k = j;
        while k < b.len() && is_ident_byte(b[k]) {
            k += 1;
        }
        return (Tok::Word(sql[i..k].to_string()), k);
    }
    (Tok::Num(sql[i..j].to_string()), j)
}

/// A `quoted` identifier at `i` (a doubled backtick is one); its name and where the next token
/// starts.
fn quoted_ident(b: &[u8], i: usize) -> Result<(String, usize), LexError> {
    let mut s = Vec::new();
    let mut j = i + 1;
    loop {
        match b.get(j) {
            None => return Err(LexError("unterminated quoted identifier".into())),
            Some(b'`') if b.get(j + 1) == Some(&b'`') => {
                s.push(b'`');
                j += 2;
            }
            Some(b'`') => break,
            Some(&x) => {
                s.push(x);
                j += 1;
            }
        }
    }
    Ok((String::from_utf8_lossy(&s).into_owned(), j + 1))
}

/// `@@[global.|session.]name` or `@name` (also quoted) at `i`; the token and where the next
/// starts.
fn variable(sql: &str, i: usize) -> Result<(Tok, usize), LexError> {
    let b = sql.as_bytes();
    if b.get(i + 1) == Some(&b'@') {
        let mut j = i + 2;
        while j < b.len() && (is_ident_byte(b[j]) || b[j] == b'.') {
            j += 1;
        }
        let name = sql[i + 2..j].to_ascii_lowercase();
        let (global, name) = if let Some(n) = name.strip_prefix("global.") {
            (true, n.to_string())
        } else if let Some(n) = name.strip_prefix("session.").or_else(|| name.strip_prefix("local.")) {
            (false, n.to_string())
        } else {
            (false, name)
        };
        if name.is_empty() {
            return Err(LexError("empty variable name".into()));
        }
        Ok((Tok::SysVar(global, name), j))
    } else {
        let mut j = i + 1;
        let name = if matches!(b.get(j), Some(b'`') | Some(b'\'') | Some(b'"')) {
            let (s, k) = if b[j] == b'`' {
                let end = sql[j + 1..].find('`').ok_or_else(|| LexError("unterminated".into()))? + j + 1;
                (sql.as_bytes()[j + 1..end].to_vec(), end + 1)
            } else {
                string(b, j)?
            };
            j = k;
            String::from_utf8_lossy(&s).into_owned()
        } else {
            while j < b.len() && (is_ident_byte(b[j]) || b[j] == b'.') {
                j += 1;
            }
            sql[i + 1..j].to_string()
        };
        Ok((Tok::UserVar(name.to_ascii_lowercase()), j))
    }
}

/// Splits a text at its top-level `;` (outside strings, identifiers and comments) into
/// statements; empty ones are dropped, one text without `;` is one statement.
pub fn split_statements(sql: &str) -> Vec<String> {
    let Ok(toks) = tokenize_spans(sql) else { return vec![sql.to_string()] };
    let mut out = Vec::new();
    let mut start = 0;
    for (t, s, e) in &toks {
        if *t == Tok::Sym(";") {
            let part = sql[start..*s].trim();
            if !part.is_empty() {
                out.push(part.to_string());
            }
            start = *e;
        }
    }
    let rest = sql[start..].trim();
    if !rest.is_empty() || out.is_empty() {
        out.push(rest.to_string());
    }
    out
}

fn prev_is_string_end(b: &[u8], i: usize) -> bool {
    // Only when whitespace separates this string from a closing quote.
    let mut j = i;
    while j > 0 && b[j - 1].is_ascii_whitespace() {
        j -= 1;
    }
    j < i && j > 0 && (b[j - 1] == b'\'' || b[j - 1] == b'"')
}

fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

/// A quoted string starting at `b[i]`; returns its bytes and the index after the closing quote.
fn string(b: &[u8], i: usize) -> Result<(Vec<u8>, usize), LexError> {
    let q = b[i];
    let mut s = Vec::new();
    let mut j = i + 1;
    loop {
        match b.get(j) {
            None => return Err(LexError("unterminated string".into())),
            Some(&c) if c == q => {
                if b.get(j + 1) == Some(&q) {
                    s.push(q);
                    j += 2;
                } else {
                    return Ok((raw_bytes(s), j + 1));
                }
            }
            Some(b'\\') => {
                let Some(&e) = b.get(j + 1) else { return Err(LexError("unterminated string".into())) };
                match e {
                    b'0' => s.push(0),
                    b'n' => s.push(b'\n'),
                    b'r' => s.push(b'\r'),
                    b't' => s.push(b'\t'),
                    b'b' => s.push(8),
                    b'Z' => s.push(26),
                    // `\%` and `\_` keep the backslash (they are LIKE escapes).
                    b'%' | b'_' => s.extend_from_slice(&[b'\\', e]),
                    other => s.push(other),
                }
                j += 2;
            }
            Some(&c) => {
                s.push(c);
                j += 1;
            }
        }
    }
}

fn hex(d: &str) -> Result<Vec<u8>, LexError> {
    if !d.len().is_multiple_of(2) || !d.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(LexError(format!("invalid hexadecimal literal X'{d}'")));
    }
    Ok((0..d.len()).step_by(2).map(|k| u8::from_str_radix(&d[k..k + 2], 16).expect("hex digits")).collect())
}

fn hex_padded(d: &str) -> Result<Vec<u8>, LexError> {
    if d.len() % 2 == 1 { hex(&format!("0{d}")) } else { hex(d) }
}

fn bits(d: &str) -> Result<Vec<u8>, LexError> {
    if !d.bytes().all(|c| c == b'0' || c == b'1') {
        return Err(LexError(format!("invalid binary literal b'{d}'")));
    }
    let mut out = Vec::new();
    let pad = (8 - d.len() % 8) % 8;
    let padded = format!("{}{}", "0".repeat(pad), d);
    for k in (0..padded.len()).step_by(8) {
        out.push(u8::from_str_radix(&padded[k..k + 8], 2).expect("bits"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        tokenize(s).unwrap().into_iter().map(|(t, _)| t).collect()
    }

    #[test]
    fn words_numbers_strings() {
        assert_eq!(
            toks("SELECT c FROM `t``x` WHERE id=? AND s='a''b\\n' -- x\n # y\n"),
            vec![
                Tok::Word("SELECT".into()),
                Tok::Word("c".into()),
                Tok::Word("FROM".into()),
                Tok::Quoted("t`x".into()),
                Tok::Word("WHERE".into()),
                Tok::Word("id".into()),
                Tok::Sym("="),
                Tok::Param,
                Tok::Word("AND".into()),
                Tok::Word("s".into()),
                Tok::Sym("="),
                Tok::Str(b"a'b\n".to_vec()),
            ]
        );
        assert_eq!(toks("1.5e3 .5 12"), vec![Tok::Num("1.5e3".into()), Tok::Num(".5".into()), Tok::Num("12".into())]);
        assert_eq!(
            toks("X'4142' 0x1 b'101' 0b11"),
            vec![Tok::HexBytes(b"AB".to_vec()), Tok::HexBytes(vec![1]), Tok::BitBytes(vec![5]), Tok::BitBytes(vec![3])]
        );
        assert_eq!(
            toks("@@session.autocommit @x @@GLOBAL.Max_Allowed_Packet"),
            vec![
                Tok::SysVar(false, "autocommit".into()),
                Tok::UserVar("x".into()),
                Tok::SysVar(true, "max_allowed_packet".into())
            ]
        );
        assert_eq!(
            toks("a<=>b<>c!=d"),
            vec![
                Tok::Word("a".into()),
                Tok::Sym("<=>"),
                Tok::Word("b".into()),
                Tok::Sym("<>"),
                Tok::Word("c".into()),
                Tok::Sym("!="),
                Tok::Word("d".into())
            ]
        );
        assert_eq!(toks("'a' 'b'"), vec![Tok::Str(b"ab".to_vec())]);
        assert_eq!(split_statements("SELECT 1; SELECT ';' ;; SELECT 2"), vec!["SELECT 1", "SELECT ';'", "SELECT 2"]);
        assert_eq!(split_statements("SELECT 1;"), vec!["SELECT 1"]);
        assert_eq!(toks("_binary'x'"), vec![Tok::Str(b"x".to_vec())]);
        let raw = decode_statement(b"SELECT '\x00\xff\xc3(' ");
        assert_eq!(tokenize(&raw).unwrap()[1].0, Tok::Str(vec![0, 0xff, 0xc3, b'(']));
    }

    #[test]
    fn comments() {
        assert_eq!(
            toks("CREATE /* x */ t /*! ENGINE = innodb */"),
            vec![
                Tok::Word("CREATE".into()),
                Tok::Word("t".into()),
                Tok::Word("ENGINE".into()),
                Tok::Sym("="),
                Tok::Word("innodb".into())
            ]
        );
        assert_eq!(
            toks("/*!40101 SET x=1*/"),
            vec![Tok::Word("SET".into()), Tok::Word("x".into()), Tok::Sym("="), Tok::Num("1".into())]
        );
        assert!(tokenize("'abc").is_err());
        assert!(tokenize("/* abc").is_err());
        assert!(tokenize("X'4'").is_err());
        assert_eq!(toks("1-1"), vec![Tok::Num("1".into()), Tok::Sym("-"), Tok::Num("1".into())]);
    }
}
