//! Redo log records.
//!
//! Each ldm appends to its own log. The log is a sequence of records addressed by LSN (the byte
//! offset in the ldm's logical log, which spans segment files). A record is
//! `[magic u32 "TRDO"][payload_len u32][crc32c(payload_len bytes ++ payload) u32][payload]`.
//! The payload of a commit record is `[kind=1 u8][epoch u64][txn tc node u16][tc instance u16]
//! [txn id u64][op count u32]` then per op `[table u32][partition u32][put=0|delete=1 u8]
//! [bytes: the full row for put, the key for delete]`. Records are idempotent after-images keyed
//! by primary key, so replaying from any checkpoint start is safe.
//!
//! An *epoch mark* (`[kind=2 u8][epoch u64]`) is appended by an epoch flush that closes an epoch
//! with commits in it, just before the sync: every commit record of epochs <= `epoch` this ldm
//! will ever hold precedes it (the flush comes after every tc finished those epochs). Once synced,
//! a node whose every ldm holds a mark of `epoch` has that epoch on disk, so a durable commit
//! needs only that one sync per replica; the system file, saved later, is not on its path
//! (`recovery::node_epoch`).

use tern_types::bin::{Dec, DecodeResult, Enc};
use tern_types::schema::TableId;

pub const REDO_MAGIC: u32 = 0x4F44_5254; // "TRDO" little-endian
pub const REDO_HEADER_LEN: usize = 12;
/// Largest record accepted on replay.
pub const REDO_RECORD_MAX: usize = 256 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedoOp {
    Put { table: TableId, partition: u32, row: Vec<u8> },
    Delete { table: TableId, partition: u32, key: Vec<u8> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitRecord {
    pub epoch: u64,
    pub tc_node: u16,
    pub tc_instance: u16,
    pub txn: u64,
    pub ops: Vec<RedoOp>,
}

/// Appends a record header + payload for a commit to `out`.
pub fn append_commit(out: &mut Vec<u8>, epoch: u64, tc_node: u16, tc_instance: u16, txn: u64, ops: &[RedoOpRef<'_>]) {
    let start = out.len();
    out.extend_from_slice(&[0; REDO_HEADER_LEN]);
    let mut e = Enc::new(out);
    e.u8(1);
    e.u64(epoch);
    e.u16(tc_node);
    e.u16(tc_instance);
    e.u64(txn);
    e.u32(ops.len() as u32);
    for op in ops {
        match op {
            RedoOpRef::Put { table, partition, row } => {
                e.u32(*table);
                e.u32(*partition);
                e.u8(0);
                e.bytes(row);
            }
            RedoOpRef::Delete { table, partition, key } => {
                e.u32(*table);
                e.u32(*partition);
                e.u8(1);
                e.bytes(key);
            }
        }
    }
    seal(out, start);
}

/// Appends an epoch mark (see the module comment).
pub fn append_epoch_mark(out: &mut Vec<u8>, epoch: u64) {
    let start = out.len();
    out.extend_from_slice(&[0; REDO_HEADER_LEN]);
    let mut e = Enc::new(out);
    e.u8(2);
    e.u64(epoch);
    seal(out, start);
}

/// Length of an epoch mark record.
pub const EPOCH_MARK_LEN: usize = REDO_HEADER_LEN + 9;

/// A decoded redo record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Commit(CommitRecord),
    EpochMark(u64),
}

/// Decodes a record of either kind.
pub fn decode(payload: &[u8]) -> DecodeResult<Record> {
    if payload.first() == Some(&2) {
        let mut d = Dec::new(&payload[1..]);
        let epoch = d.u64()?;
        if !d.is_empty() {
            return Err(tern_types::bin::DecodeError("trailing bytes in epoch mark"));
        }
        return Ok(Record::EpochMark(epoch));
    }
    decode_commit(payload).map(Record::Commit)
}

/// Borrowed form of a redo op, so commit can log without copying rows twice.
#[derive(Debug, Clone, Copy)]
pub enum RedoOpRef<'a> {
    Put { table: TableId, partition: u32, row: &'a [u8] },
    Delete { table: TableId, partition: u32, key: &'a [u8] },
}

fn seal(out: &mut [u8], start: usize) {
    let payload_len = out.len() - start - REDO_HEADER_LEN;
    let len_bytes = (payload_len as u32).to_le_bytes();
    let mut crc = crc32c::crc32c(&len_bytes);
    crc = crc32c::crc32c_append(crc, &out[start + REDO_HEADER_LEN..]);
    out[start..start + 4].copy_from_slice(&REDO_MAGIC.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&len_bytes);
    out[start + 8..start + 12].copy_from_slice(&crc.to_le_bytes());
}

/// Outcome of reading one record at the front of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Read<'a> {
    Record {
        payload: &'a [u8],
        len: usize,
    },
    /// Not enough bytes for the header or the payload.
    Short,
    /// Header or checksum wrong.
    Bad,
}

pub fn read_record(buf: &[u8]) -> Read<'_> {
    if buf.len() < REDO_HEADER_LEN {
        return Read::Short;
    }
    if u32::from_le_bytes(buf[0..4].try_into().expect("4")) != REDO_MAGIC {
        return Read::Bad;
    }
    let n = u32::from_le_bytes(buf[4..8].try_into().expect("4")) as usize;
    if n > REDO_RECORD_MAX {
        return Read::Bad;
    }
    if buf.len() < REDO_HEADER_LEN + n {
        return Read::Short;
    }
    let payload = &buf[REDO_HEADER_LEN..REDO_HEADER_LEN + n];
    let crc = crc32c::crc32c_append(crc32c::crc32c(&buf[4..8]), payload);
    if crc != u32::from_le_bytes(buf[8..12].try_into().expect("4")) {
        return Read::Bad;
    }
    Read::Record { payload, len: REDO_HEADER_LEN + n }
}

pub fn decode_commit(payload: &[u8]) -> DecodeResult<CommitRecord> {
    let mut d = Dec::new(payload);
    if d.u8()? != 1 {
        return Err(tern_types::bin::DecodeError("unknown redo record kind"));
    }
    let epoch = d.u64()?;
    let tc_node = d.u16()?;
    let tc_instance = d.u16()?;
    let txn = d.u64()?;
    let n = d.len(1 << 24)?;
    let mut ops = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let table = d.u32()?;
        let partition = d.u32()?;
        ops.push(match d.u8()? {
            0 => RedoOp::Put { table, partition, row: d.bytes()?.to_vec() },
            1 => RedoOp::Delete { table, partition, key: d.bytes()?.to_vec() },
            _ => return Err(tern_types::bin::DecodeError("bad redo op")),
        });
    }
    if !d.is_empty() {
        return Err(tern_types::bin::DecodeError("trailing bytes in redo record"));
    }
    Ok(CommitRecord { epoch, tc_node, tc_instance, txn, ops })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_detect_damage() {
        let mut log = Vec::new();
        append_commit(
            &mut log,
            7,
            1,
            0,
            42,
            &[
                RedoOpRef::Put { table: 3, partition: 1, row: b"row" },
                RedoOpRef::Delete { table: 3, partition: 0, key: b"k" },
            ],
        );
        let first = log.len();
        append_commit(&mut log, 8, 1, 0, 43, &[]);
        let Read::Record { payload, len } = read_record(&log) else { panic!("record") };
        assert_eq!(len, first);
        let rec = decode_commit(payload).unwrap();
        assert_eq!(rec.epoch, 7);
        assert_eq!(rec.ops.len(), 2);
        assert!(matches!(read_record(&log[first..]), Read::Record { .. }));
        assert_eq!(read_record(&log[first..log.len() - 1]), Read::Short);
        let mut bad = log.clone();
        bad[20] ^= 0xFF;
        assert_eq!(read_record(&bad), Read::Bad);
    }

    #[test]
    fn epoch_marks_round_trip_beside_commits() {
        let mut log = Vec::new();
        append_commit(&mut log, 7, 1, 0, 42, &[]);
        let first = log.len();
        append_epoch_mark(&mut log, 7);
        assert_eq!(log.len() - first, EPOCH_MARK_LEN);
        let Read::Record { payload, .. } = read_record(&log) else { panic!("record") };
        assert!(matches!(decode(payload), Ok(Record::Commit(c)) if c.epoch == 7));
        let Read::Record { payload, len } = read_record(&log[first..]) else { panic!("mark") };
        assert_eq!(len, EPOCH_MARK_LEN);
        assert_eq!(decode(payload), Ok(Record::EpochMark(7)));
        assert!(decode_commit(payload).is_err(), "a mark is not a commit");
    }
}
