//! The system file: the last durable epoch and, per ldm, the redo LSN that its flush of that epoch
//! made durable; read first on restart. Saved after every epoch that carried writes, as a log of
//! records (issue 33): each save appends one framed record and syncs the file (one fdatasync,
//! where replacing the file cost a temporary file, two fsyncs and a rename — the saves are on the
//! path of every durable commit); the first save after a start, and every save once the file
//! holds `LOG_BYTES_MAX`, replaces the file atomically by that record alone (so a torn record at
//! the end of the file from a crash is never followed by later ones). The newest valid record is
//! the system file's content.
//!
//! Record: `[magic "TSYS" u32][format u16][durable_epoch u64][ldm count u16][synced_lsn u64 ...]
//! [crc32c of the preceding bytes u32]`. File: a sequence of `[record length u32][record]`, or
//! (written before the log) one bare record.

use tern_types::bin::{Dec, DecodeError, DecodeResult, Enc};

pub const SYSFILE_NAME: &str = "sysfile";
const MAGIC: u32 = 0x5359_5354;
const FORMAT: u16 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sysfile {
    pub durable_epoch: u64,
    /// Per ldm: redo below this LSN is durable and holds every record of epochs <= durable_epoch.
    pub synced_lsn: Vec<u64>,
}

impl Sysfile {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut e = Enc::new(&mut out);
        e.u32(MAGIC);
        e.u16(FORMAT);
        e.u64(self.durable_epoch);
        e.u16(self.synced_lsn.len() as u16);
        self.synced_lsn.iter().for_each(|&l| e.u64(l));
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// The system file's content: its newest valid record (a torn or damaged tail after it is
    /// ignored); a file whose first record is not valid is an error.
    pub fn decode(bytes: &[u8]) -> DecodeResult<Sysfile> {
        if let Ok(s) = Sysfile::decode_record(bytes) {
            // The single-record format of data directories written before the log.
            return Ok(s);
        }
        let mut newest: Option<Sysfile> = None;
        let mut rest = bytes;
        while rest.len() >= 4 {
            let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
            let Some(record) = rest.get(4..4 + len) else { break };
            match Sysfile::decode_record(record) {
                Ok(s) => {
                    debug_assert!(
                        newest.as_ref().is_none_or(|n| n.durable_epoch <= s.durable_epoch),
                        "system-file records in epoch order"
                    );
                    newest = Some(s);
                }
                Err(e) if newest.is_none() => return Err(e),
                Err(_) => break,
            }
            rest = &rest[4 + len..];
        }
        newest.ok_or(DecodeError("sysfile too short"))
    }

    /// One record (`encode`'s bytes).
    pub fn decode_record(bytes: &[u8]) -> DecodeResult<Sysfile> {
        if bytes.len() < 4 {
            return Err(DecodeError("sysfile too short"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4")) {
            return Err(DecodeError("sysfile checksum mismatch"));
        }
        let mut d = Dec::new(body);
        if d.u32()? != MAGIC {
            return Err(DecodeError("not a Tern sysfile"));
        }
        if d.u16()? != FORMAT {
            return Err(DecodeError("unknown sysfile format"));
        }
        let durable_epoch = d.u64()?;
        let n = d.u16()? as usize;
        let synced_lsn = (0..n).map(|_| d.u64()).collect::<DecodeResult<_>>()?;
        Ok(Sysfile { durable_epoch, synced_lsn })
    }
}

/// Past this size the next save replaces the system file instead of appending to it.
pub const LOG_BYTES_MAX: usize = 1 << 20;

/// A record as the system file holds it: its length, then its bytes.
pub fn frame(record: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + record.len());
    out.extend_from_slice(&(record.len() as u32).to_le_bytes());
    out.extend_from_slice(record);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_checksum() {
        let s = Sysfile { durable_epoch: 99, synced_lsn: vec![1, 2, 3] };
        let b = s.encode();
        assert_eq!(Sysfile::decode(&b).unwrap(), s);
        let mut bad = b.clone();
        bad[7] ^= 1;
        assert!(Sysfile::decode(&bad).is_err());
    }

    #[test]
    fn the_newest_valid_record_of_the_log_counts() {
        let rec = |e: u64| Sysfile { durable_epoch: e, synced_lsn: vec![e * 10, e * 20] };
        let mut file = Vec::new();
        for e in 1..=3 {
            file.extend(frame(&rec(e).encode()));
        }
        assert_eq!(Sysfile::decode(&file).unwrap(), rec(3));
        // A torn fourth record (a crash during its append) leaves the third.
        let whole = file.len();
        file.extend(frame(&rec(4).encode()));
        for cut in whole + 1..file.len() {
            assert_eq!(Sysfile::decode(&file[..cut]).unwrap(), rec(3), "cut at {cut}");
        }
        // A damaged last record too.
        let last = file.len() - 3;
        file[last] ^= 0x40;
        assert_eq!(Sysfile::decode(&file).unwrap(), rec(3));
        // A damaged first record is a damaged file, not an empty one.
        let mut bad = file.clone();
        bad[9] ^= 1;
        assert!(Sysfile::decode(&bad).is_err());
        assert!(Sysfile::decode(&[]).is_err());
    }
}
