//! The system file: the last durable epoch and, per ldm, the redo LSN that its flush of that epoch
//! made durable. Written atomically (temporary file, fsync, rename, fsync directory) after every
//! epoch that carried writes; read first on restart.
//!
//! Layout: `[magic "TSYS" u32][format u16][durable_epoch u64][ldm count u16][synced_lsn u64 ...]
//! [crc32c of the preceding bytes u32]`.

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

    pub fn decode(bytes: &[u8]) -> DecodeResult<Sysfile> {
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
}
