//! A tiny little-endian binary codec used for the catalog, wire messages and redo records.
//!
//! Decoding never panics: every read checks the remaining length and returns `DecodeError`, because
//! these bytes come from the network or from disk.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("malformed data: {0}")]
pub struct DecodeError(pub &'static str);

pub type DecodeResult<T> = Result<T, DecodeError>;

/// Appends values to a byte vector.
pub struct Enc<'a> {
    pub buf: &'a mut Vec<u8>,
}

impl<'a> Enc<'a> {
    pub fn new(buf: &'a mut Vec<u8>) -> Self {
        Enc { buf }
    }
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn bool(&mut self, v: bool) {
        self.buf.push(v as u8);
    }
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i128(&mut self, v: i128) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn f64(&mut self, v: f64) {
        self.buf.extend_from_slice(&v.to_bits().to_le_bytes());
    }
    /// Length-prefixed (u32) bytes.
    pub fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.buf.extend_from_slice(v);
    }
    pub fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
    pub fn raw(&mut self, v: &[u8]) {
        self.buf.extend_from_slice(v);
    }
}

/// Reads values from a byte slice.
pub struct Dec<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
}

impl<'a> Dec<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Dec { buf, pos: 0 }
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }
    pub fn take(&mut self, n: usize) -> DecodeResult<&'a [u8]> {
        if self.remaining() < n {
            return Err(DecodeError("truncated"));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> DecodeResult<[u8; N]> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    pub fn u8(&mut self) -> DecodeResult<u8> {
        Ok(self.arr::<1>()?[0])
    }
    pub fn bool(&mut self) -> DecodeResult<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError("bad bool")),
        }
    }
    pub fn u16(&mut self) -> DecodeResult<u16> {
        Ok(u16::from_le_bytes(self.arr()?))
    }
    pub fn u32(&mut self) -> DecodeResult<u32> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    pub fn u64(&mut self) -> DecodeResult<u64> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    pub fn i64(&mut self) -> DecodeResult<i64> {
        Ok(i64::from_le_bytes(self.arr()?))
    }
    pub fn i128(&mut self) -> DecodeResult<i128> {
        Ok(i128::from_le_bytes(self.arr()?))
    }
    pub fn f64(&mut self) -> DecodeResult<f64> {
        Ok(f64::from_bits(u64::from_le_bytes(self.arr()?)))
    }
    pub fn bytes(&mut self) -> DecodeResult<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub fn str(&mut self) -> DecodeResult<&'a str> {
        std::str::from_utf8(self.bytes()?).map_err(|_| DecodeError("bad utf-8"))
    }
    pub fn string(&mut self) -> DecodeResult<String> {
        Ok(self.str()?.to_owned())
    }
    /// A collection length, bounded so that corrupt input cannot make us allocate without bound.
    pub fn len(&mut self, max: usize) -> DecodeResult<usize> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(DecodeError("length over limit"));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let mut v = Vec::new();
        let mut e = Enc::new(&mut v);
        e.u8(7);
        e.u32(0xdead_beef);
        e.str("héllo");
        e.i128(-5);
        let mut d = Dec::new(&v);
        assert_eq!(d.u8().unwrap(), 7);
        assert_eq!(d.u32().unwrap(), 0xdead_beef);
        assert_eq!(d.str().unwrap(), "héllo");
        assert_eq!(d.i128().unwrap(), -5);
        assert!(d.is_empty());
        let mut d = Dec::new(&v[..6]);
        d.u8().unwrap();
        d.u32().unwrap();
        assert!(d.str().is_err());
    }
}
