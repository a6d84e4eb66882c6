//! Local checkpoint files: a fuzzy snapshot of every partition an ldm owns, written as a stream.
//!
//! Layout: `[magic "TCKP" u32][format u16 = 2][ldm u16][checkpoint id u64][redo start LSN u64]`,
//! then records `[1][table u32][partition u32]` (a partition begins) and `[2][len u32][row]`, then
//! the trailer `[3][max epoch u64][row count u64]` and `[crc32c of everything before, u32]`.
//!
//! The ldm writes a checkpoint over many loop turns while transactions go on (NDB's fuzzy LCP):
//! each row is some version between the start and the end of the scan. Recovery replays redo from
//! the start LSN, and redo records are idempotent after-images, so the result is exact. The
//! trailer's `max_epoch` is the newest epoch applied when the scan ended: the checkpoint holds no
//! newer data, and may be used to recover to epoch E only if `max_epoch <= E`.

use tern_types::bin::{Dec, DecodeError, DecodeResult, Enc};
use tern_types::schema::TableId;

const MAGIC: u32 = 0x504B_4354;
const FORMAT: u16 = 2;
const TAG_PARTITION: u8 = 1;
const TAG_ROW: u8 = 2;
const TAG_END: u8 = 3;

pub fn file_name(ldm: u16, id: u64) -> String {
    format!("ldm-{ldm}/ckpt-{id:016x}.dat")
}

/// The name a checkpoint is written under until it is complete (renamed to `file_name`).
pub fn part_name(ldm: u16, id: u64) -> String {
    format!("{}.part", file_name(ldm, id))
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

/// Produces a checkpoint in chunks, keeping the running checksum.
pub struct CheckpointStream {
    buf: Vec<u8>,
    crc: u32,
    rows: u64,
    /// Capacity of each new chunk buffer (a chunk that grows by doubling copies itself and
    /// faults in fresh pages several times).
    chunk_capacity: usize,
}

impl CheckpointStream {
    pub fn new(ldm: u16, id: u64, start_lsn: u64) -> CheckpointStream {
        let mut buf = Vec::with_capacity(64 * 1024);
        let mut e = Enc::new(&mut buf);
        e.u32(MAGIC);
        e.u16(FORMAT);
        e.u16(ldm);
        e.u64(id);
        e.u64(start_lsn);
        CheckpointStream { buf, crc: 0, rows: 0, chunk_capacity: 64 * 1024 }
    }

    /// Chunks are taken once they hold about `bytes`: size their buffers for that.
    pub fn set_chunk_capacity(&mut self, bytes: usize) {
        self.chunk_capacity = bytes;
        self.buf.reserve(bytes.saturating_sub(self.buf.len()));
    }

    pub fn partition(&mut self, table: TableId, partition: u32) {
        let mut e = Enc::new(&mut self.buf);
        e.u8(TAG_PARTITION);
        e.u32(table);
        e.u32(partition);
    }

    pub fn row(&mut self, row: &[u8]) {
        let mut e = Enc::new(&mut self.buf);
        e.u8(TAG_ROW);
        e.bytes(row);
        self.rows += 1;
    }

    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Takes what has been produced so far.
    pub fn take_chunk(&mut self) -> Vec<u8> {
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(self.chunk_capacity));
        self.crc = crc32c::crc32c_append(self.crc, &chunk);
        chunk
    }

    /// The last chunk: trailer and checksum.
    pub fn finish(mut self, max_epoch: u64) -> Vec<u8> {
        let rows = self.rows;
        let mut e = Enc::new(&mut self.buf);
        e.u8(TAG_END);
        e.u64(max_epoch);
        e.u64(rows);
        let mut last = self.take_chunk();
        last.extend_from_slice(&self.crc.to_le_bytes());
        last
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
    let ldm = d.u16()?;
    let id = d.u64()?;
    let start_lsn = d.u64()?;
    let mut partitions: Vec<(TableId, u32, Vec<&[u8]>)> = Vec::new();
    let mut rows = 0u64;
    loop {
        match d.u8()? {
            TAG_PARTITION => partitions.push((d.u32()?, d.u32()?, Vec::new())),
            TAG_ROW => {
                let row = d.bytes()?;
                partitions.last_mut().ok_or(DecodeError("row before any partition"))?.2.push(row);
                rows += 1;
            }
            TAG_END => {
                let max_epoch = d.u64()?;
                if d.u64()? != rows || !d.is_empty() {
                    return Err(DecodeError("checkpoint trailer does not match its rows"));
                }
                return Ok(Checkpoint { header: CheckpointHeader { ldm, id, start_lsn, max_epoch }, partitions });
            }
            _ => return Err(DecodeError("bad checkpoint record tag")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let h = CheckpointHeader { ldm: 1, id: 5, start_lsn: 100, max_epoch: 9 };
        let mut w = CheckpointStream::new(1, 5, 100);
        w.partition(3, 0);
        w.row(b"a");
        let mut bytes = w.take_chunk();
        w.row(b"bc");
        w.partition(4, 1);
        bytes.extend(w.take_chunk());
        bytes.extend(w.finish(9));
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
