//! Local checkpoint files: a snapshot of every partition an ldm owns.
//!
//! Layout: `[magic "TCKP" u32][format u16][ldm u16][checkpoint id u64][redo start LSN u64]
//! [max epoch u64][partition count u32]`, then per partition `[table u32][partition u32]
//! [row count u64]` and the rows as `[len u32][row bytes]`, then `[crc32c of everything before]`.
//!
//! A checkpoint holds every commit the ldm applied before `start_lsn` and none after; the newest
//! commit in it has epoch `max_epoch`. It may be used for recovery to epoch E only if
//! `max_epoch <= E`; recovery then replays redo from `start_lsn`.

use tern_types::bin::{Dec, DecodeError, DecodeResult, Enc};
use tern_types::schema::TableId;

const MAGIC: u32 = 0x504B_4354;
const FORMAT: u16 = 1;

pub fn file_name(ldm: u16, id: u64) -> String {
    format!("ldm-{ldm}/ckpt-{id:016x}.dat")
}

/// Parses the checkpoint id out of a file name produced by `file_name`.
pub fn parse_file_name(name: &str) -> Option<u64> {
    let base = name.rsplit('/').next()?;
    let hex = base.strip_prefix("ckpt-")?.strip_suffix(".dat")?;
    u64::from_str_radix(hex, 16).ok()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointHeader {
    pub ldm: u16,
    pub id: u64,
    pub start_lsn: u64,
    pub max_epoch: u64,
}

/// Builds a checkpoint in memory.
pub struct CheckpointWriter {
    buf: Vec<u8>,
    count_at: usize,
    partitions: u32,
}

impl CheckpointWriter {
    pub fn new(h: &CheckpointHeader) -> CheckpointWriter {
        let mut buf = Vec::new();
        let mut e = Enc::new(&mut buf);
        e.u32(MAGIC);
        e.u16(FORMAT);
        e.u16(h.ldm);
        e.u64(h.id);
        e.u64(h.start_lsn);
        e.u64(h.max_epoch);
        let count_at = buf.len();
        buf.extend_from_slice(&[0; 4]);
        CheckpointWriter { buf, count_at, partitions: 0 }
    }

    pub fn partition<'a>(&mut self, table: TableId, partition: u32, rows: impl ExactSizeIterator<Item = &'a [u8]>) {
        let mut e = Enc::new(&mut self.buf);
        e.u32(table);
        e.u32(partition);
        e.u64(rows.len() as u64);
        for r in rows {
            e.bytes(r);
        }
        self.partitions += 1;
    }

    pub fn finish(mut self) -> Vec<u8> {
        let n = self.partitions.to_le_bytes();
        self.buf[self.count_at..self.count_at + 4].copy_from_slice(&n);
        let crc = crc32c::crc32c(&self.buf);
        self.buf.extend_from_slice(&crc.to_le_bytes());
        self.buf
    }
}

/// A decoded checkpoint: header plus partitions with their rows (borrowed from the file bytes).
pub struct Checkpoint<'a> {
    pub header: CheckpointHeader,
    pub partitions: Vec<(TableId, u32, Vec<&'a [u8]>)>,
}

pub fn decode(bytes: &[u8]) -> DecodeResult<Checkpoint<'_>> {
    if bytes.len() < 4 {
        return Err(DecodeError("checkpoint too short"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4")) {
        return Err(DecodeError("checkpoint checksum mismatch"));
    }
    let mut d = Dec::new(body);
    if d.u32()? != MAGIC {
        return Err(DecodeError("not a Tern checkpoint"));
    }
    if d.u16()? != FORMAT {
        return Err(DecodeError("unknown checkpoint format"));
    }
    let header = CheckpointHeader { ldm: d.u16()?, id: d.u64()?, start_lsn: d.u64()?, max_epoch: d.u64()? };
    let n = d.u32()? as usize;
    let mut partitions = Vec::with_capacity(n.min(4096));
    for _ in 0..n {
        let table = d.u32()?;
        let partition = d.u32()?;
        let count = d.u64()? as usize;
        if count > d.remaining() / 4 {
            return Err(DecodeError("row count larger than the file"));
        }
        let mut rows = Vec::with_capacity(count);
        for _ in 0..count {
            rows.push(d.bytes()?);
        }
        partitions.push((table, partition, rows));
    }
    if !d.is_empty() {
        return Err(DecodeError("trailing bytes in checkpoint"));
    }
    Ok(Checkpoint { header, partitions })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let h = CheckpointHeader { ldm: 1, id: 5, start_lsn: 100, max_epoch: 9 };
        let mut w = CheckpointWriter::new(&h);
        let rows: Vec<&[u8]> = vec![b"a", b"bc"];
        w.partition(3, 0, rows.into_iter());
        w.partition(4, 1, std::iter::empty::<&[u8]>());
        let bytes = w.finish();
        let c = decode(&bytes).unwrap();
        assert_eq!(c.header, h);
        assert_eq!(c.partitions.len(), 2);
        assert_eq!(c.partitions[0].2, vec![&b"a"[..], &b"bc"[..]]);
        let mut bad = bytes.clone();
        bad[30] ^= 1;
        assert!(decode(&bad).is_err());
        assert_eq!(parse_file_name(&file_name(2, 0xabc)), Some(0xabc));
    }
}
