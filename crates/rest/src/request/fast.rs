//! One pass over the common, valid shapes of pk-read bodies and `/batch` envelopes.
//!
//! The general parser (the parent module) borrows every nested section as a `RawValue` and parses
//! it again one level down, so each byte of a batch is scanned about five times. This scanner
//! walks the text once and builds the same `ReadSpec`s. It handles only what it can answer
//! exactly like the general parser: strings without escapes, known members at most once, every
//! section of the right type and every check of the parsing step passed. On anything else it
//! returns `None` and the caller runs the general parser, which then produces the error (or the
//! result) with its exact texts. Validation (identifiers, lengths, duplicates) is shared and
//! runs after either parser.
//!
//! Bounded like the general parser: skipped values nest at most `DEPTH_MAX` deep (deeper ones
//! go to the general parser, which has serde_json's recursion limit), and nothing recurses
//! otherwise.

use super::ReadSpec;
use serde_json::Value as Json;

/// Deepest nesting this scanner skips; deeper values are left to the general parser.
const DEPTH_MAX: u32 = 32;

struct Scan<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Scan<'a> {
    fn new(s: &'a str) -> Scan<'a> {
        Scan { s, b: s.as_bytes(), i: 0 }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// The next byte after whitespace (not consumed).
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// The whole input consumed (trailing whitespace allowed).
    fn end(&mut self) -> Option<()> {
        self.peek().is_none().then_some(())
    }

    /// A string without escapes or control characters.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        let n = self.b[start..].iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
        if self.b[start + n] != b'"' {
            return None;
        }
        self.i = start + n + 1;
        // The ends are ASCII quotes, so both are character boundaries.
        Some(&self.s[start..start + n])
    }

    fn literal(&mut self, lit: &[u8]) -> Option<()> {
        self.b[self.i..].starts_with(lit).then(|| self.i += lit.len())
    }

    fn digits(&mut self) -> usize {
        let from = self.i;
        while let Some(b'0'..=b'9') = self.b.get(self.i) {
            self.i += 1;
        }
        self.i - from
    }

    /// A number in JSON's grammar.
    fn number(&mut self) -> Option<()> {
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match self.b.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return None,
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return None;
            }
        }
        Some(())
    }

    /// Any value, checked and skipped; returns its text.
    fn value(&mut self, depth: u32) -> Option<&'a str> {
        let c = self.peek()?;
        let start = self.i;
        match c {
            b'"' => {
                self.string()?;
            }
            b'{' | b'[' => {
                if depth >= DEPTH_MAX {
                    return None;
                }
                if c == b'{' {
                    self.object(|sc, _| sc.value(depth + 1).map(drop))?;
                } else {
                    self.array(|sc| sc.value(depth + 1).map(drop))?;
                }
            }
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            b'n' => self.literal(b"null")?,
            b'-' | b'0'..=b'9' => self.number()?,
            _ => return None,
        }
        Some(&self.s[start..self.i])
    }

    /// An object; `member` gets each key and must consume its value.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.sequence(b'{', b'}', |p| {
            let key = p.string()?;
            p.eat(b':')?;
            member(p, key)
        })
    }

    /// An array; `element` must consume each element.
    fn array(&mut self, element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.sequence(b'[', b']', element)
    }

    /// `open`, items separated by commas (`item` consumes one), `close`.
    fn sequence(&mut self, open: u8, close: u8, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(open)?;
        if self.peek()? == close {
            self.i += 1;
            return Some(());
        }
        loop {
            item(self)?;
            match self.peek()? {
                b',' => self.i += 1,
                c if c == close => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `null` (consumed: true) or something else (not consumed: false).
    fn null(&mut self) -> Option<bool> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(true);
        }
        Some(false)
    }
}

/// Sets a member seen for the first time (a repeated known member goes to the general parser,
/// which names it).
fn once<T>(slot: &mut Option<T>, v: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(v);
    Some(())
}

/// `filters`: a non-empty array of `{"column": non-empty string, "value": non-null value}`.
fn filters(sc: &mut Scan<'_>) -> Option<Vec<(String, Json)>> {
    let mut out = Vec::new();
    sc.array(|sc| {
        let (mut column, mut value) = (None, None);
        let mut other = None;
        sc.object(|sc, key| match key {
            "column" => once(&mut column, sc.string()?),
            "value" => {
                let v = match sc.peek()? {
                    b'"' => Json::String(sc.string()?.to_owned()),
                    _ => {
                        let text = sc.value(1)?;
                        if text == "null" {
                            return None;
                        }
                        serde_json::from_str(text).ok()?
                    }
                };
                once(&mut value, v)
            }
            "dataReturnType" => once(&mut other, sc.value(1)?),
            _ => sc.value(1).map(drop),
        })?;
        let column = column.filter(|c| !c.is_empty())?;
        out.push((column.to_owned(), value?));
        Some(())
    })?;
    (!out.is_empty()).then_some(out)
}

/// `readColumns`: null, or an array of `{"column": non-empty string, "dataReturnType": "default"}`
/// (the type optional or null); empty means every column.
fn read_columns(sc: &mut Scan<'_>) -> Option<Option<Vec<String>>> {
    if sc.null()? {
        return Some(None);
    }
    let mut out = Vec::new();
    sc.array(|sc| {
        let (mut column, mut kind, mut value) = (None, None, None);
        sc.object(|sc, key| match key {
            "column" => once(&mut column, sc.string()?),
            "dataReturnType" => {
                let k = if sc.null()? { None } else { Some(sc.string()?) };
                once(&mut kind, k)
            }
            "value" => once(&mut value, sc.value(1)?),
            _ => sc.value(1).map(drop),
        })?;
        if kind.flatten().is_some_and(|k| k != "default") {
            return None;
        }
        out.push(column.filter(|c| !c.is_empty())?.to_owned());
        Some(())
    })?;
    Some((!out.is_empty()).then_some(out))
}

/// The members of a pk-read body: filters (required), readColumns, operationId.
type ReadBody = (Vec<(String, Json)>, Option<Vec<String>>, Option<String>);

fn read_body(sc: &mut Scan<'_>) -> Option<ReadBody> {
    let (mut f, mut r, mut id) = (None, None, None);
    sc.object(|sc, key| match key {
        "filters" => once(&mut f, filters(sc)?),
        "readColumns" => once(&mut r, read_columns(sc)?),
        "operationId" => {
            let v = if sc.null()? { None } else { Some(sc.string()?.to_owned()) };
            once(&mut id, v)
        }
        _ => sc.value(1).map(drop),
    })?;
    Some((f?, r.flatten(), id.flatten()))
}

/// A pk-read body (`/{db}/{table}/pk-read`), or None: let the general parser answer.
pub(super) fn pk_read(db: &str, table: &str, raw: &str) -> Option<ReadSpec> {
    let mut sc = Scan::new(raw);
    if sc.peek()? != b'{' {
        return None;
    }
    let (filters, read_columns, operation_id) = read_body(&mut sc)?;
    sc.end()?;
    Some(ReadSpec { db: db.to_owned(), table: table.to_owned(), operation_id, filters, read_columns })
}

/// A `/batch` envelope of pk-reads, or None: let the general parser answer.
pub(super) fn batch_read(raw: &str) -> Option<Vec<ReadSpec>> {
    let mut sc = Scan::new(raw);
    if sc.peek()? != b'{' {
        return None;
    }
    let mut ops = None;
    sc.object(|sc, key| match key {
        "operations" => {
            let mut specs = Vec::new();
            sc.array(|sc| {
                specs.push(sub_op(sc)?);
                Some(())
            })?;
            once(&mut ops, specs)
        }
        _ => sc.value(1).map(drop),
    })?;
    sc.end()?;
    ops.filter(|o| !o.is_empty())
}

/// One sub-operation: `{"method": "POST" (optional), "relative-url": "db/table/pk-read",
/// "body": {...}}`.
fn sub_op(sc: &mut Scan<'_>) -> Option<ReadSpec> {
    let (mut method, mut url, mut body) = (None, None, None);
    sc.object(|sc, key| match key {
        "method" => once(&mut method, sc.string()?),
        "relative-url" => once(&mut url, sc.string()?),
        "body" => {
            if sc.peek()? != b'{' {
                return None;
            }
            once(&mut body, read_body(sc)?)
        }
        _ => sc.value(1).map(drop),
    })?;
    if method.is_some_and(|m| m != "POST") {
        return None;
    }
    let (db, table, op) = super::relative_url(url?).ok()?;
    if op != "pk-read" {
        return None;
    }
    let (filters, read_columns, operation_id) = body?;
    Some(ReadSpec { db: db.to_owned(), table: table.to_owned(), operation_id, filters, read_columns })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seeded generator, and `clean`: only shapes without parse errors (so batches of
    /// several operations pass too).
    struct Rng(tern_types::rng::Rng, bool);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0.below(n as u64) as usize
        }
        fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
            self.0.pick::<&str>(xs)
        }
        /// True one time in `n`, never in clean mode.
        fn fault(&mut self, n: usize) -> bool {
            !self.1 && self.below(n) == 0
        }
    }

    fn ws(r: &mut Rng) -> &'static str {
        r.pick(&["", "", " ", "\n\t ", "\r\n"])
    }

    /// A JSON object of the given members, in a random order, sometimes with an unknown member or
    /// a repeated one.
    fn object(r: &mut Rng, mut members: Vec<(String, String)>) -> String {
        if r.below(6) == 0 {
            members.push(("x".into(), r.pick(&["1", "null", "{\"a\":[1,{}]}", "\"s\""]).into()));
        }
        if r.fault(15) && !members.is_empty() {
            let m = members[r.below(members.len())].clone();
            members.push(m);
        }
        for i in (1..members.len()).rev() {
            members.swap(i, r.below(i + 1));
        }
        let body: Vec<String> =
            members.iter().map(|(k, v)| format!("{}\"{k}\"{}:{}{v}{}", ws(r), ws(r), ws(r), ws(r))).collect();
        format!("{{{}}}", body.join(","))
    }

    fn name(r: &mut Rng) -> String {
        if r.1 {
            return format!("\"{}\"", r.pick(&["id0", "col_1", "c", "é", "db", "t"]));
        }
        format!("\"{}\"", r.pick(&["id0", "col_1", "c", "", "é", "a\\u0041", "a\\\"b", "db", "t"]))
    }

    fn value(r: &mut Rng) -> String {
        if r.1 {
            return r.pick(&["1", "-0", "1.5e3", "12345678901234567890123", "\"str\"", "true", "[1]", "-12"]).into();
        }
        r.pick(&[
            "1",
            "-0",
            "1.5e3",
            "0.25",
            "12345678901234567890123",
            "\"str\"",
            "\"q\\\"x\"",
            "true",
            "false",
            "null",
            "{\"a\":[1,2]}",
            "[1]",
            "\"\"",
            "-12",
        ])
        .into()
    }

    fn list(r: &mut Rng, n: usize, each: impl Fn(&mut Rng) -> String) -> String {
        let items: Vec<String> = (0..n).map(|_| format!("{}{}", ws(r), each(r))).collect();
        format!("[{}]", items.join(","))
    }

    fn filter(r: &mut Rng) -> String {
        let mut m = vec![("column".into(), name(r)), ("value".into(), value(r))];
        if r.fault(8) {
            m.remove(r.below(2));
        }
        object(r, m)
    }

    fn read_column(r: &mut Rng) -> String {
        let mut m = vec![("column".into(), name(r))];
        if r.below(3) == 0 {
            let kind = if r.1 { "\"default\"" } else { r.pick(&["\"default\"", "null", "\"base64\"", "1"]) };
            m.push(("dataReturnType".into(), kind.into()));
        }
        object(r, m)
    }

    fn body(r: &mut Rng) -> String {
        let mut m = Vec::new();
        if !r.fault(10) {
            let n = if r.1 { 1 } else { r.below(4) };
            m.push(("filters".into(), if r.fault(12) { "null".into() } else { list(r, n, filter) }));
        }
        if r.below(2) == 0 {
            let n = r.below(3);
            m.push(("readColumns".into(), if r.below(6) == 0 { "null".into() } else { list(r, n, read_column) }));
        }
        if r.below(3) == 0 {
            let id = if r.1 { r.pick(&["\"op1\"", "null"]) } else { r.pick(&["\"op1\"", "null", "7", "\"\""]) };
            m.push(("operationId".into(), id.into()));
        }
        object(r, m)
    }

    fn sub_op(r: &mut Rng) -> String {
        let mut m = Vec::new();
        if r.below(3) != 0 {
            let method = if r.1 { "\"POST\"" } else { r.pick(&["\"POST\"", "\"POST\"", "\"GET\"", "null"]) };
            m.push(("method".into(), method.into()));
        }
        if !r.fault(12) {
            let url = if r.1 {
                r.pick(&["db/t/pk-read", "/db/table/pk-read/"])
            } else {
                r.pick(&["db/t/pk-read", "/db/table/pk-read/", "db/t/pk-write", "b/pk-read", "db//pk-read-x"])
            };
            m.push(("relative-url".into(), format!("\"{url}\"")));
        }
        if !r.fault(12) {
            m.push(("body".into(), if r.fault(15) { "[]".into() } else { body(r) }));
        }
        object(r, m)
    }

    fn envelope(r: &mut Rng) -> String {
        let n = r.below(4);
        let ops = list(r, n, sub_op);
        format!("{}{}{}", ws(r), object(r, vec![("operations".into(), ops)]), ws(r))
    }

    /// Drops, inserts or cuts a byte now and then: syntax errors anywhere.
    fn mutate(r: &mut Rng, s: String) -> String {
        if r.1 {
            return s;
        }
        let mut b = s.into_bytes();
        match r.below(8) {
            0 if !b.is_empty() => {
                b.remove(r.below(b.len()));
            }
            1 => {
                let at = r.below(b.len() + 1);
                b.insert(at, b"{}[],:\"\\ 0-en"[r.below(13)]);
            }
            2 => b.truncate(r.below(b.len() + 1)),
            _ => {}
        }
        String::from_utf8(b).unwrap_or_default()
    }

    #[test]
    fn the_fast_parser_agrees_with_the_general_one() {
        let seed = std::env::var("TERN_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x005E_ED0F_FA57);
        println!("seed {seed} (TERN_SEED to repeat)");
        let mut r = Rng(tern_types::rng::Rng::new(seed), false);
        let (mut fast_batches, mut fast_reads) = (0, 0);
        for case in 0..20_000 {
            r.1 = case % 2 == 0;
            let text = envelope(&mut r);
            let text = mutate(&mut r, text);
            if let Some(fast) = batch_read(&text) {
                fast_batches += 1;
                let general = super::super::batch_read_general(&text).unwrap_or_else(|e| {
                    panic!("seed {seed} case {case}: {text}\nfast: {fast:?}\ngeneral: {}", e.message)
                });
                assert_eq!(format!("{fast:?}"), format!("{general:?}"), "seed {seed} case {case}: {text}");
            }
            let text = body(&mut r);
            let text = mutate(&mut r, text);
            if let Some(fast) = pk_read("db", "t", &text) {
                fast_reads += 1;
                let general = super::super::pk_read_general("db", "t", &text).unwrap_or_else(|e| {
                    panic!("seed {seed} case {case}: {text}\nfast: {fast:?}\ngeneral: {}", e.message)
                });
                assert_eq!(format!("{fast:?}"), format!("{general:?}"), "seed {seed} case {case}: {text}");
            }
        }
        // The generator's common shapes do take the fast path.
        println!("fast: {fast_batches} batches, {fast_reads} reads");
        assert!(fast_batches > 1_000 && fast_reads > 1_000, "fast: {fast_batches} batches, {fast_reads} reads");
    }

    #[test]
    fn plain_bodies_take_the_fast_path() {
        let op = r#"{"method": "POST", "relative-url": "db/t/pk-read",
            "body": {"filters": [{"column": "id0", "value": 5}, {"column": "k", "value": "x"}],
                     "readColumns": [{"column": "c", "dataReturnType": "default"}], "operationId": "o"}}"#;
        let specs = batch_read(&format!(r#"{{"operations": [{op}, {op}]}}"#)).expect("fast");
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[1].filters, vec![("id0".to_string(), Json::from(5)), ("k".to_string(), Json::from("x"))]);
        assert_eq!(specs[1].read_columns.as_deref(), Some(&["c".to_string()][..]));
        assert_eq!(specs[1].operation_id.as_deref(), Some("o"));
        assert!(pk_read("db", "t", r#"{"filters": [{"column": "id0", "value": 5}]}"#).is_some());
        // Escapes, errors and deep values go to the general parser.
        assert!(pk_read("db", "t", r#"{"filters": [{"column": "i\u0064", "value": 5}]}"#).is_none());
        assert!(pk_read("db", "t", r#"{"filters": []}"#).is_none());
        let deep = format!(r#"{{"filters": [{{"column": "a", "value": {}1{}}}]}}"#, "[".repeat(40), "]".repeat(40));
        assert!(pk_read("db", "t", &deep).is_none());
        assert!(batch_read(r#"{"operations": []}"#).is_none());
        assert!(batch_read(r#"{"operations": [{"relative-url": "db/t/pk-read", "body": {"filters": [{"column": "a", "value": 1}]}}]} x"#).is_none());
    }
}
