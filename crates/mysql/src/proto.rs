//! The MySQL client/server protocol as documented in the MySQL source documentation ("Client/Server
//! Protocol"): packets of `[3-byte length][sequence id][payload]`, length-encoded integers and
//! strings, the v10 initial handshake, the client's HandshakeResponse41, `mysql_native_password`,
//! OK / ERR / EOF packets, column definitions (Protocol::ColumnDefinition41) and text result rows.

pub use tern_sql::meta::text_value;
pub use tern_sql::meta::{ColumnDef, charset, flag, ty};
use tern_types::Value;
use tern_types::digest::sha1;
use tern_types::digest::sha256;
use tern_types::time;

/// Largest payload of one packet; a longer payload continues in the next packet(s).
pub const PACKET_MAX: usize = 0xFF_FFFF;

/// Capability flags.
pub mod cap {
    pub const LONG_PASSWORD: u32 = 1;
    pub const FOUND_ROWS: u32 = 1 << 1;
    pub const LONG_FLAG: u32 = 1 << 2;
    pub const CONNECT_WITH_DB: u32 = 1 << 3;
    pub const LOCAL_FILES: u32 = 1 << 7;
    pub const PROTOCOL_41: u32 = 1 << 9;
    pub const INTERACTIVE: u32 = 1 << 10;
    pub const SSL: u32 = 1 << 11;
    pub const TRANSACTIONS: u32 = 1 << 13;
    pub const SECURE_CONNECTION: u32 = 1 << 15;
    pub const MULTI_STATEMENTS: u32 = 1 << 16;
    pub const MULTI_RESULTS: u32 = 1 << 17;
    pub const PS_MULTI_RESULTS: u32 = 1 << 18;
    pub const PLUGIN_AUTH: u32 = 1 << 19;
    pub const CONNECT_ATTRS: u32 = 1 << 20;
    pub const PLUGIN_AUTH_LENENC_CLIENT_DATA: u32 = 1 << 21;
    pub const DEPRECATE_EOF: u32 = 1 << 24;
}

/// Server status flags.
pub mod status {
    pub const IN_TRANS: u16 = 1;
    pub const AUTOCOMMIT: u16 = 2;
    pub const MORE_RESULTS_EXISTS: u16 = 8;
}

/// Command bytes (the first payload byte of a client request).
pub mod com {
    pub const QUIT: u8 = 0x01;
    pub const INIT_DB: u8 = 0x02;
    pub const QUERY: u8 = 0x03;
    pub const FIELD_LIST: u8 = 0x04;
    pub const PROCESS_KILL: u8 = 0x0c;
    pub const PING: u8 = 0x0e;
    pub const STMT_PREPARE: u8 = 0x16;
    pub const STMT_EXECUTE: u8 = 0x17;
    pub const STMT_SEND_LONG_DATA: u8 = 0x18;
    pub const STMT_CLOSE: u8 = 0x19;
    pub const STMT_RESET: u8 = 0x1a;
    pub const SET_OPTION: u8 = 0x1b;
    pub const RESET_CONNECTION: u8 = 0x1f;
}

/// A malformed packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

// ------------------------------------------------------------------ framing

/// One whole (possibly multi-packet) payload taken from the front of `buf`: Ok(None) when more
/// bytes are needed; Ok(Some((sequence id of its last packet, payload, bytes used))).
pub fn take_payload(buf: &[u8], max: usize) -> Result<Option<(u8, Vec<u8>, usize)>, Malformed> {
    let mut pos = 0;
    let mut payload = Vec::new();
    loop {
        let Some(h) = buf.get(pos..pos + 4) else { return Ok(None) };
        let len = u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize;
        let seq = h[3];
        let Some(body) = buf.get(pos + 4..pos + 4 + len) else {
            return if payload.len() + len > max { Err(Malformed("packet too large")) } else { Ok(None) };
        };
        if payload.len() + len > max {
            return Err(Malformed("packet too large"));
        }
        payload.extend_from_slice(body);
        pos += 4 + len;
        if len < PACKET_MAX {
            return Ok(Some((seq, payload, pos)));
        }
    }
}

/// Appends `payload` as packets starting at sequence id `seq`; returns the next sequence id.
pub fn put_packets(out: &mut Vec<u8>, mut seq: u8, payload: &[u8]) -> u8 {
    let mut chunks = payload.chunks(PACKET_MAX).peekable();
    if payload.is_empty() {
        out.extend_from_slice(&[0, 0, 0, seq]);
        return seq.wrapping_add(1);
    }
    while let Some(c) = chunks.next() {
        out.extend_from_slice(&(c.len() as u32).to_le_bytes()[..3]);
        out.push(seq);
        out.extend_from_slice(c);
        seq = seq.wrapping_add(1);
        if chunks.peek().is_none() && c.len() == PACKET_MAX {
            // A payload that ends on a full packet is closed by an empty one.
            out.extend_from_slice(&[0, 0, 0, seq]);
            seq = seq.wrapping_add(1);
        }
    }
    seq
}

// ------------------------------------------------------------------ length-encoded values

pub fn put_lenenc_int(out: &mut Vec<u8>, v: u64) {
    match v {
        0..=0xFA => out.push(v as u8),
        0xFB..=0xFFFF => {
            out.push(0xFC);
            out.extend_from_slice(&(v as u16).to_le_bytes());
        }
        0x1_0000..=0xFF_FFFF => {
            out.push(0xFD);
            out.extend_from_slice(&(v as u32).to_le_bytes()[..3]);
        }
        _ => {
            out.push(0xFE);
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

pub fn put_lenenc_str(out: &mut Vec<u8>, s: &[u8]) {
    put_lenenc_int(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// A reader over a payload.
pub struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b, pos: 0 }
    }
    pub fn rest(&self) -> &'a [u8] {
        &self.b[self.pos..]
    }
    pub fn is_empty(&self) -> bool {
        self.pos >= self.b.len()
    }
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let s = self.b.get(self.pos..self.pos + n).ok_or(Malformed("truncated packet"))?;
        self.pos += n;
        Ok(s)
    }
    pub fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.bytes(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, Malformed> {
        let b = self.bytes(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub fn u32(&mut self) -> Result<u32, Malformed> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self) -> Result<u64, Malformed> {
        let b = self.bytes(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
    /// A length-encoded integer; None for the NULL marker 0xFB.
    pub fn lenenc_int(&mut self) -> Result<Option<u64>, Malformed> {
        Ok(match self.u8()? {
            0xFB => None,
            0xFC => Some(self.u16()? as u64),
            0xFD => {
                let b = self.bytes(3)?;
                Some(u32::from_le_bytes([b[0], b[1], b[2], 0]) as u64)
            }
            0xFE => Some(self.u64()?),
            0xFF => return Err(Malformed("bad length-encoded integer")),
            v => Some(v as u64),
        })
    }
    pub fn lenenc_str(&mut self) -> Result<&'a [u8], Malformed> {
        let n = self.lenenc_int()?.ok_or(Malformed("unexpected NULL"))?;
        self.bytes(usize::try_from(n).map_err(|_| Malformed("length too large"))?)
    }
    pub fn nul_str(&mut self) -> Result<&'a [u8], Malformed> {
        let rest = self.rest();
        let n = rest.iter().position(|&c| c == 0).ok_or(Malformed("unterminated string"))?;
        self.pos += n + 1;
        Ok(&rest[..n])
    }
}

// ------------------------------------------------------------------ handshake and auth

/// What the server offers.
pub const SERVER_CAPABILITIES: u32 = cap::LONG_PASSWORD
    | cap::FOUND_ROWS
    | cap::LONG_FLAG
    | cap::CONNECT_WITH_DB
    | cap::LOCAL_FILES
    | cap::PROTOCOL_41
    | cap::INTERACTIVE
    | cap::TRANSACTIONS
    | cap::SECURE_CONNECTION
    | cap::MULTI_STATEMENTS
    | cap::MULTI_RESULTS
    | cap::PS_MULTI_RESULTS
    | cap::PLUGIN_AUTH
    | cap::CONNECT_ATTRS
    | cap::PLUGIN_AUTH_LENENC_CLIENT_DATA
    | cap::DEPRECATE_EOF;

pub const NATIVE_PASSWORD: &str = "mysql_native_password";
pub const CACHING_SHA2_PASSWORD: &str = "caching_sha2_password";

/// The v10 initial handshake payload. `scramble` is the 20-byte challenge; `tls` adds the SSL
/// capability (the client may send an SSLRequest and continue over TLS).
pub fn handshake_v10(server_version: &str, connection_id: u32, scramble: &[u8; 20], status: u16, tls: bool) -> Vec<u8> {
    let caps = if tls { SERVER_CAPABILITIES | cap::SSL } else { SERVER_CAPABILITIES };
    let mut p = vec![10];
    p.extend_from_slice(server_version.as_bytes());
    p.push(0);
    p.extend_from_slice(&connection_id.to_le_bytes());
    p.extend_from_slice(&scramble[..8]);
    p.push(0);
    p.extend_from_slice(&(caps as u16).to_le_bytes());
    p.push(charset::UTF8MB4_GENERAL_CI);
    p.extend_from_slice(&status.to_le_bytes());
    p.extend_from_slice(&((caps >> 16) as u16).to_le_bytes());
    p.push(21);
    p.extend_from_slice(&[0; 10]);
    p.extend_from_slice(&scramble[8..]);
    p.push(0);
    p.extend_from_slice(NATIVE_PASSWORD.as_bytes());
    p.push(0);
    p
}

/// The client's HandshakeResponse41.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeResponse {
    pub capabilities: u32,
    pub max_packet: u32,
    pub charset: u8,
    pub user: String,
    pub auth: Vec<u8>,
    pub database: Option<String>,
    pub plugin: Option<String>,
}

pub fn parse_handshake_response(p: &[u8]) -> Result<HandshakeResponse, Malformed> {
    let mut r = Reader::new(p);
    let capabilities = r.u32()?;
    if capabilities & cap::PROTOCOL_41 == 0 {
        return Err(Malformed("clients older than protocol 4.1 are not supported"));
    }
    let max_packet = r.u32()?;
    let charset = r.u8()?;
    r.bytes(23)?;
    let user = String::from_utf8_lossy(r.nul_str()?).into_owned();
    let auth = if capabilities & cap::PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
        r.lenenc_str()?.to_vec()
    } else if capabilities & cap::SECURE_CONNECTION != 0 {
        let n = r.u8()? as usize;
        r.bytes(n)?.to_vec()
    } else {
        r.nul_str()?.to_vec()
    };
    let database = if capabilities & cap::CONNECT_WITH_DB != 0 && !r.is_empty() {
        Some(String::from_utf8_lossy(r.nul_str()?).into_owned()).filter(|d| !d.is_empty())
    } else {
        None
    };
    let plugin = if capabilities & cap::PLUGIN_AUTH != 0 && !r.is_empty() {
        Some(String::from_utf8_lossy(r.nul_str()?).into_owned())
    } else {
        None
    };
    Ok(HandshakeResponse { capabilities, max_packet, charset, user, auth, database, plugin })
}

/// The stored form of a password for `mysql_native_password`: SHA1(SHA1(password)); MySQL shows
/// it as '*' followed by 40 upper-case hex digits.
pub fn native_password_hash(password: &[u8]) -> [u8; 20] {
    sha1(&sha1(password))
}

/// What a client sends for `password` and `scramble`: SHA1(pw) XOR SHA1(scramble + SHA1(SHA1(pw)));
/// empty for an empty password.
pub fn native_password_response(password: &[u8], scramble: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let h1 = sha1(password);
    let h2 = sha1(&h1);
    let mut s = scramble.to_vec();
    s.extend_from_slice(&h2);
    let m = sha1(&s);
    h1.iter().zip(m).map(|(a, b)| a ^ b).collect()
}

/// Checks a client's response against the stored hash (None: the account has no password).
pub fn native_password_ok(stored: Option<&[u8; 20]>, scramble: &[u8], response: &[u8]) -> bool {
    match stored {
        None => response.is_empty(),
        Some(stored) => {
            if response.len() != 20 {
                return false;
            }
            let mut s = scramble.to_vec();
            s.extend_from_slice(stored);
            let m = sha1(&s);
            let candidate: Vec<u8> = response.iter().zip(m).map(|(a, b)| a ^ b).collect();
            &sha1(&candidate) == stored
        }
    }
}

/// Is this first answer an SSLRequest (the client asks for TLS before it says who it is)?
pub fn is_ssl_request(p: &[u8]) -> bool {
    p.len() == 32 && p.len() >= 4 && u32::from_le_bytes([p[0], p[1], p[2], p[3]]) & cap::SSL != 0
}

/// What a `caching_sha2_password` client sends for `password` and `nonce`:
/// SHA256(pw) XOR SHA256(SHA256(SHA256(pw)) + nonce); empty for an empty password.
pub fn sha2_password_response(password: &[u8], nonce: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let h1 = sha256(password);
    let mut s = sha256(&h1).to_vec();
    s.extend_from_slice(nonce);
    h1.iter().zip(sha256(&s)).map(|(a, b)| a ^ b).collect()
}

/// The fast path of `caching_sha2_password`: checks a scramble against the cached
/// SHA256(SHA256(password)).
pub fn sha2_scramble_ok(cached: &[u8; 32], nonce: &[u8], response: &[u8]) -> bool {
    if response.len() != 32 {
        return false;
    }
    let mut s = cached.to_vec();
    s.extend_from_slice(nonce);
    let h1: Vec<u8> = response.iter().zip(sha256(&s)).map(|(a, b)| a ^ b).collect();
    &sha256(&h1) == cached
}

/// `caching_sha2_password`'s answers after the scramble: fast authentication succeeded, or send
/// the password itself (over TLS).
pub const SHA2_FAST_OK: [u8; 2] = [0x01, 0x03];
pub const SHA2_FULL_AUTH: [u8; 2] = [0x01, 0x04];

/// The stored form of a `caching_sha2_password` password: a random salt and SHA-256 applied
/// `SHA2_ROUNDS` times over salt and password, as `$T$<rounds>$<salt hex>$<hash hex>` (Tern's
/// own form; MySQL keeps a SHA-crypt string there). Only a full authentication (the password
/// itself, over TLS) is checked against it; scrambles are checked against the SHA256(SHA256(pw))
/// cached after one.
pub const SHA2_ROUNDS: u32 = 5000;

pub fn sha2_stored(password: &[u8], salt: &[u8; 16]) -> String {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!("$T${SHA2_ROUNDS}${}${}", hex(salt), hex(&sha2_rounds(password, salt, SHA2_ROUNDS)))
}

fn sha2_rounds(password: &[u8], salt: &[u8], rounds: u32) -> [u8; 32] {
    let mut buf = salt.to_vec();
    buf.extend_from_slice(password);
    let mut h = sha256(&buf);
    for _ in 1..rounds {
        let mut b = h.to_vec();
        b.extend_from_slice(password);
        h = sha256(&b);
    }
    h
}

/// Checks a password against `sha2_stored`'s form.
pub fn sha2_stored_ok(stored: &str, password: &[u8]) -> bool {
    let parts: Vec<&str> = stored.split('$').collect();
    let [_, "T", rounds, salt, hash] = parts[..] else { return false };
    let unhex = |s: &str| -> Option<Vec<u8>> {
        if !s.len().is_multiple_of(2) {
            return None;
        }
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
    };
    let (Ok(rounds), Some(salt), Some(hash)) = (rounds.parse::<u32>(), unhex(salt), unhex(hash)) else {
        return false;
    };
    (1..=1_000_000).contains(&rounds) && sha2_rounds(password, &salt, rounds)[..] == hash[..]
}

/// AuthSwitchRequest: asks the client to answer `plugin`'s challenge with `scramble`.
pub fn auth_switch(plugin: &str, scramble: &[u8; 20]) -> Vec<u8> {
    let mut p = vec![0xFE];
    p.extend_from_slice(plugin.as_bytes());
    p.push(0);
    p.extend_from_slice(scramble);
    p.push(0);
    p
}

// ------------------------------------------------------------------ responses

pub fn ok_packet(affected: u64, last_insert_id: u64, status: u16, warnings: u16, info: &str) -> Vec<u8> {
    let mut p = vec![0x00];
    put_lenenc_int(&mut p, affected);
    put_lenenc_int(&mut p, last_insert_id);
    p.extend_from_slice(&status.to_le_bytes());
    p.extend_from_slice(&warnings.to_le_bytes());
    // As MariaDB servers send it: a length-encoded string when there is one (MariaDB's client
    // library reads it so; MySQL's reads the rest of the packet and sees the length byte).
    if !info.is_empty() {
        put_lenenc_str(&mut p, info.as_bytes());
    }
    p
}

/// The OK packet that ends a result set when the client asked for DEPRECATE_EOF.
pub fn eof_ok_packet(status: u16, warnings: u16) -> Vec<u8> {
    let mut p = vec![0xFE, 0, 0];
    p.extend_from_slice(&status.to_le_bytes());
    p.extend_from_slice(&warnings.to_le_bytes());
    p
}

pub fn eof_packet(status: u16, warnings: u16) -> Vec<u8> {
    let mut p = vec![0xFE];
    p.extend_from_slice(&warnings.to_le_bytes());
    p.extend_from_slice(&status.to_le_bytes());
    p
}

pub fn err_packet(errno: u16, sqlstate: &str, message: &str) -> Vec<u8> {
    let mut p = vec![0xFF];
    p.extend_from_slice(&errno.to_le_bytes());
    p.push(b'#');
    let mut st = sqlstate.as_bytes().to_vec();
    st.resize(5, b'0');
    p.extend_from_slice(&st);
    p.extend_from_slice(message.as_bytes());
    p
}

/// A column definition's payload (Protocol::ColumnDefinition41).
pub fn column_def(c: &ColumnDef) -> Vec<u8> {
    let mut p = Vec::with_capacity(64);
    put_lenenc_str(&mut p, b"def");
    for s in [&c.schema, &c.table, &c.org_table, &c.name, &c.org_name] {
        put_lenenc_str(&mut p, s.as_bytes());
    }
    p.push(0x0c);
    p.extend_from_slice(&c.charset.to_le_bytes());
    p.extend_from_slice(&c.length.to_le_bytes());
    p.push(c.ty);
    p.extend_from_slice(&c.flags.to_le_bytes());
    p.push(c.decimals);
    p.extend_from_slice(&[0, 0]);
    p
}

/// A text-protocol row: each value as a length-encoded string, NULL as 0xFB.
pub fn text_row(values: &[Option<&[u8]>]) -> Vec<u8> {
    let mut p = Vec::new();
    for v in values {
        match v {
            None => p.push(0xFB),
            Some(b) => put_lenenc_str(&mut p, b),
        }
    }
    p
}

/// A whole text result set as packets starting at `seq` (column count, definitions, [EOF], rows,
/// EOF or OK); returns the next sequence id.
pub fn put_text_resultset(
    out: &mut Vec<u8>,
    mut seq: u8,
    deprecate_eof: bool,
    status: u16,
    columns: &[ColumnDef],
    rows: &[Vec<Option<Vec<u8>>>],
) -> u8 {
    let mut count = Vec::new();
    put_lenenc_int(&mut count, columns.len() as u64);
    seq = put_packets(out, seq, &count);
    for c in columns {
        seq = put_packets(out, seq, &column_def(c));
    }
    if !deprecate_eof {
        seq = put_packets(out, seq, &eof_packet(status, 0));
    }
    for r in rows {
        let vals: Vec<Option<&[u8]>> = r.iter().map(|v| v.as_deref()).collect();
        seq = put_packets(out, seq, &text_row(&vals));
    }
    let end = if deprecate_eof { eof_ok_packet(status, 0) } else { eof_packet(status, 0) };
    put_packets(out, seq, &end)
}

fn put_temporal(p: &mut Vec<u8>, micros: i64, date_only: bool) {
    let days = micros.div_euclid(time::MICROS_PER_DAY);
    let rest = micros.rem_euclid(time::MICROS_PER_DAY);
    let (y, m, d) = time::civil_from_days(days as i32);
    let secs = rest / 1_000_000;
    let us = (rest % 1_000_000) as u32;
    let (h, mi, s) = ((secs / 3600) as u8, (secs / 60 % 60) as u8, (secs % 60) as u8);
    if date_only || (h == 0 && mi == 0 && s == 0 && us == 0) {
        p.push(4);
        p.extend_from_slice(&(y as u16).to_le_bytes());
        p.extend_from_slice(&[m as u8, d as u8]);
        if date_only {
            return;
        }
        return;
    }
    p.push(if us != 0 { 11 } else { 7 });
    p.extend_from_slice(&(y as u16).to_le_bytes());
    p.extend_from_slice(&[m as u8, d as u8, h, mi, s]);
    if us != 0 {
        p.extend_from_slice(&us.to_le_bytes());
    }
}

/// A binary-protocol result row: a NULL bitmap (offset 2), then each value in its column's
/// type (integers and floats little-endian, temporal values as length-prefixed fields,
/// everything else as a length-encoded string).
pub fn binary_row(p: &mut Vec<u8>, columns: &[ColumnDef], row: &[Value]) {
    use tern_sql::eval::{text, to_f64, to_i128};
    p.push(0);
    let start = p.len();
    p.resize(start + (columns.len() + 2).div_ceil(8), 0);
    for (i, (v, c)) in row.iter().zip(columns).enumerate() {
        if v.is_null() || c.ty == ty::NULL {
            let bit = i + 2;
            p[start + bit / 8] |= 1 << (bit % 8);
            continue;
        }
        match c.ty {
            ty::TINY => p.push(to_i128(v).unwrap_or(0) as u8),
            ty::SHORT | ty::YEAR => p.extend_from_slice(&(to_i128(v).unwrap_or(0) as u16).to_le_bytes()),
            ty::LONG | ty::INT24 => p.extend_from_slice(&(to_i128(v).unwrap_or(0) as u32).to_le_bytes()),
            ty::LONGLONG => p.extend_from_slice(&(to_i128(v).unwrap_or(0) as u64).to_le_bytes()),
            ty::FLOAT => p.extend_from_slice(&(to_f64(v).unwrap_or(0.0) as f32).to_le_bytes()),
            ty::DOUBLE => p.extend_from_slice(&to_f64(v).unwrap_or(0.0).to_le_bytes()),
            ty::DATE | ty::DATETIME | ty::TIMESTAMP => match v {
                Value::Date(d) => put_temporal(p, *d as i64 * time::MICROS_PER_DAY, true),
                Value::DateTime(t) | Value::Timestamp(t) => put_temporal(p, *t, c.ty == ty::DATE),
                other => {
                    let s = text(other).unwrap_or_default();
                    let s = String::from_utf8_lossy(&s);
                    match time::parse_datetime(&s)
                        .or_else(|| time::parse_date(&s).map(|d| d as i64 * time::MICROS_PER_DAY))
                    {
                        Some(t) => put_temporal(p, t, c.ty == ty::DATE),
                        None => p.push(0),
                    }
                }
            },
            ty::TIME => {
                let t = match v {
                    Value::Time(t) => *t,
                    other => time::parse_time(&String::from_utf8_lossy(&text(other).unwrap_or_default())).unwrap_or(0),
                };
                if t == 0 {
                    p.push(0);
                } else {
                    let neg = t < 0;
                    let a = t.unsigned_abs();
                    let us = (a % 1_000_000) as u32;
                    let secs = a / 1_000_000;
                    let days = (secs / 86_400) as u32;
                    let rest = secs % 86_400;
                    p.push(if us != 0 { 12 } else { 8 });
                    p.push(neg as u8);
                    p.extend_from_slice(&days.to_le_bytes());
                    p.extend_from_slice(&[(rest / 3600) as u8, (rest / 60 % 60) as u8, (rest % 60) as u8]);
                    if us != 0 {
                        p.extend_from_slice(&us.to_le_bytes());
                    }
                }
            }
            _ => put_lenenc_str(p, &text_value(v, c).unwrap_or_default()),
        }
    }
}

/// One COM_STMT_EXECUTE parameter of a type (`unsigned` from the type's flag byte).
pub fn binary_param(r: &mut Reader, t: u8, unsigned: bool) -> Result<Value, Malformed> {
    Ok(match t {
        ty::NULL => Value::Null,
        ty::TINY => {
            let b = r.u8()?;
            if unsigned { Value::UInt(b as u64) } else { Value::Int(b as i8 as i64) }
        }
        ty::SHORT | ty::YEAR => {
            let v = r.u16()?;
            if unsigned { Value::UInt(v as u64) } else { Value::Int(v as i16 as i64) }
        }
        ty::LONG | ty::INT24 => {
            let v = r.u32()?;
            if unsigned { Value::UInt(v as u64) } else { Value::Int(v as i32 as i64) }
        }
        ty::LONGLONG => {
            let v = r.u64()?;
            if unsigned { Value::UInt(v) } else { Value::Int(v as i64) }
        }
        ty::FLOAT => Value::Double(f32::from_le_bytes(r.bytes(4)?.try_into().expect("4 bytes")) as f64),
        ty::DOUBLE => Value::Double(f64::from_le_bytes(r.bytes(8)?.try_into().expect("8 bytes"))),
        ty::DATE | ty::DATETIME | ty::TIMESTAMP => {
            let n = r.u8()? as usize;
            let b = r.bytes(n)?;
            let get = |i: usize| b.get(i).copied().unwrap_or(0) as u32;
            let y = if n >= 2 { u16::from_le_bytes([b[0], b[1]]) as i32 } else { 0 };
            let (m, d) = (get(2), get(3));
            let (h, mi, s) = (get(4) as i64, get(5) as i64, get(6) as i64);
            let us = if n >= 11 { u32::from_le_bytes([b[7], b[8], b[9], b[10]]) as i64 } else { 0 };
            if n == 0 || m == 0 || d == 0 {
                return Ok(Value::Bytes(b"0000-00-00".to_vec()));
            }
            let days = time::days_from_civil(y, m, d) as i64;
            let t = days * time::MICROS_PER_DAY + ((h * 60 + mi) * 60 + s) * 1_000_000 + us;
            if n <= 4 && t.rem_euclid(time::MICROS_PER_DAY) == 0 {
                Value::Date(days as i32)
            } else {
                Value::DateTime(t)
            }
        }
        ty::TIME => {
            let n = r.u8()? as usize;
            let b = r.bytes(n)?;
            if n == 0 {
                return Ok(Value::Time(0));
            }
            if n < 8 {
                return Err(Malformed("short TIME parameter"));
            }
            let neg = b[0] == 1;
            let days = u32::from_le_bytes([b[1], b[2], b[3], b[4]]) as i64;
            let secs = days * 86_400 + b[5] as i64 * 3600 + b[6] as i64 * 60 + b[7] as i64;
            let us = if n >= 12 { u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as i64 } else { 0 };
            let t = secs * 1_000_000 + us;
            Value::Time(if neg { -t } else { t })
        }
        ty::NEWDECIMAL | ty::DECIMAL => {
            let s = r.lenenc_str()?;
            let text = String::from_utf8_lossy(s);
            tern_sql::parse::number(text.trim()).unwrap_or(Value::Bytes(s.to_vec()))
        }
        _ => Value::Bytes(r.lenenc_str()?.to_vec()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_split_and_join() {
        let mut out = Vec::new();
        assert_eq!(put_packets(&mut out, 3, b"hello"), 4);
        assert_eq!(&out[..4], &[5, 0, 0, 3]);
        assert_eq!(take_payload(&out, 1 << 30).unwrap(), Some((3, b"hello".to_vec(), 9)));
        assert_eq!(take_payload(&out[..6], 1 << 30).unwrap(), None);
        // A payload of exactly one full packet is closed by an empty packet.
        let big = vec![7u8; PACKET_MAX];
        let mut out = Vec::new();
        assert_eq!(put_packets(&mut out, 0, &big), 2);
        assert_eq!(out.len(), PACKET_MAX + 8);
        let (seq, p, used) = take_payload(&out, 1 << 30).unwrap().unwrap();
        assert_eq!((seq, p.len(), used), (1, PACKET_MAX, out.len()));
        let bigger = vec![1u8; PACKET_MAX + 10];
        let mut out = Vec::new();
        put_packets(&mut out, 0, &bigger);
        assert_eq!(take_payload(&out, 1 << 30).unwrap().unwrap().1, bigger);
        assert_eq!(take_payload(&out, 1000), Err(Malformed("packet too large")));
    }

    #[test]
    fn lenenc_round_trips() {
        for v in [0u64, 250, 251, 0xFFFF, 0x1_0000, 0xFF_FFFF, 0x100_0000, u64::MAX] {
            let mut b = Vec::new();
            put_lenenc_int(&mut b, v);
            assert_eq!(Reader::new(&b).lenenc_int().unwrap(), Some(v), "{v}");
        }
        assert_eq!(Reader::new(&[0xFB]).lenenc_int().unwrap(), None);
        let mut b = Vec::new();
        put_lenenc_str(&mut b, b"abc");
        assert_eq!(Reader::new(&b).lenenc_str().unwrap(), b"abc");
        assert!(Reader::new(&[5, b'a']).lenenc_str().is_err());
    }

    #[test]
    fn handshake_and_native_password() {
        let scramble: [u8; 20] = *b"abcdefghijklmnopqrst";
        let h = handshake_v10("8.0.35-tern", 7, &scramble, status::AUTOCOMMIT, false);
        let mut r = Reader::new(&h);
        assert_eq!(r.u8().unwrap(), 10);
        assert_eq!(r.nul_str().unwrap(), b"8.0.35-tern");
        assert_eq!(r.u32().unwrap(), 7);
        assert_eq!(r.bytes(8).unwrap(), b"abcdefgh");
        // A client's response with a database and the plugin name.
        let resp = native_password_response(b"secret", &scramble);
        assert_eq!(resp.len(), 20);
        let caps = cap::PROTOCOL_41 | cap::SECURE_CONNECTION | cap::CONNECT_WITH_DB | cap::PLUGIN_AUTH;
        let mut p = Vec::new();
        p.extend_from_slice(&caps.to_le_bytes());
        p.extend_from_slice(&(1u32 << 24).to_le_bytes());
        p.push(45);
        p.extend_from_slice(&[0; 23]);
        p.extend_from_slice(b"root\0");
        p.push(20);
        p.extend_from_slice(&resp);
        p.extend_from_slice(b"shop\0mysql_native_password\0");
        let hr = parse_handshake_response(&p).unwrap();
        assert_eq!(hr.user, "root");
        assert_eq!(hr.database.as_deref(), Some("shop"));
        assert_eq!(hr.plugin.as_deref(), Some(NATIVE_PASSWORD));
        let stored = native_password_hash(b"secret");
        assert!(native_password_ok(Some(&stored), &scramble, &hr.auth));
        assert!(!native_password_ok(Some(&native_password_hash(b"other")), &scramble, &hr.auth));
        assert!(native_password_ok(None, &scramble, b""));
        assert!(!native_password_ok(None, &scramble, &hr.auth));
        // Known value: the stored hash of "password" as MySQL prints it.
        let hex: String = native_password_hash(b"password").iter().map(|b| format!("{b:02X}")).collect();
        assert_eq!(hex, "2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19");
        // Truncated responses are errors, not panics.
        for n in 0..p.len() - 1 {
            let _ = parse_handshake_response(&p[..n]);
        }
    }

    #[test]
    fn responses() {
        let ok = ok_packet(3, 9, status::AUTOCOMMIT, 0, "");
        assert_eq!(ok, vec![0, 3, 9, 2, 0, 0, 0]);
        let err = err_packet(1146, "42S02", "Table 'a.b' doesn't exist");
        assert_eq!(&err[..9], &[0xFF, 0x7A, 0x04, b'#', b'4', b'2', b'S', b'0', b'2']);
        let mut out = Vec::new();
        let cols = [ColumnDef::expr("@@version_comment", ty::VAR_STRING, 100)];
        let seq = put_text_resultset(&mut out, 1, true, status::AUTOCOMMIT, &cols, &[vec![Some(b"Tern".to_vec())]]);
        assert_eq!(seq, 5);
        // count, column, row, OK(0xFE)
        let mut pos = 0;
        let mut kinds = Vec::new();
        while let Some((_, p, used)) = take_payload(&out[pos..], 1 << 20).unwrap() {
            kinds.push(p[0]);
            pos += used;
        }
        assert_eq!(kinds, vec![1, 3, 4, 0xFE]);
        assert_eq!(text_row(&[None, Some(b"x")]), vec![0xFB, 1, b'x']);
    }

    #[test]
    fn caching_sha2_scramble_and_stored_form() {
        let nonce = *b"abcdefghijklmnopqrst";
        let cached = sha256(&sha256(b"secret"));
        let r = sha2_password_response(b"secret", &nonce);
        assert_eq!(r.len(), 32);
        assert!(sha2_scramble_ok(&cached, &nonce, &r));
        assert!(!sha2_scramble_ok(&cached, b"another nonce.......", &r), "a replay under another nonce fails");
        assert!(!sha2_scramble_ok(&sha256(&sha256(b"other")), &nonce, &r));
        assert!(sha2_password_response(b"", &nonce).is_empty());
        let stored = sha2_stored(b"secret", &[7; 16]);
        assert!(stored.starts_with("$T$5000$07070707"), "{stored}");
        assert!(sha2_stored_ok(&stored, b"secret"));
        assert!(!sha2_stored_ok(&stored, b"Secret"));
        assert_ne!(stored, sha2_stored(b"secret", &[8; 16]), "salted");
        for bad in ["", "$T$", "$T$x$00$00", "$T$5000$0$00", "$X$5000$00$00", "$T$0$00$00"] {
            assert!(!sha2_stored_ok(bad, b"secret"), "{bad}");
        }
        let mut ssl = vec![0u8; 32];
        ssl[..4].copy_from_slice(&(cap::SSL | cap::PROTOCOL_41).to_le_bytes());
        assert!(is_ssl_request(&ssl));
        assert!(!is_ssl_request(&ssl[..31]));
        // The SSL capability is offered only with TLS configured.
        let caps = |tls: bool| {
            let h = handshake_v10("8.0.35-tern", 7, &nonce, status::AUTOCOMMIT, tls);
            let at = 1 + "8.0.35-tern".len() + 1 + 4 + 8 + 1;
            u16::from_le_bytes([h[at], h[at + 1]]) as u32 | (u16::from_le_bytes([h[at + 5], h[at + 6]]) as u32) << 16
        };
        assert_eq!(caps(true), SERVER_CAPABILITIES | cap::SSL);
        assert_eq!(caps(false), SERVER_CAPABILITIES);
    }
}
