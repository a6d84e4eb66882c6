//! Row and key encodings (performance-critical: used for every stored row and every lookup).
//!
//! **Key encoding** (primary keys, index keys, partition keys) is *memcomparable*: comparing the
//! bytes compares the values. Integers are big-endian with the sign bit flipped; floats flip all
//! bits when negative, the sign bit otherwise; fixed binary is raw; variable-length bytes escape
//! 0x00 as 0x00 0xFF and end with 0x00 0x01. Nullable index columns get a 0x00 (NULL) / 0x01 prefix.
//!
//! **Row encoding**: `[key_len u16, only when the key is variable-length][key bytes][null bitmap]
//! [fixed area][u32 length per variable column][variable data]`. Key columns live only in the key
//! part, so a hash-index probe compares a byte slice without decoding. A table of an INT key and
//! 25 INT columns stores 104 bytes per row.
//!
//! **Value-list encoding** (projections on the wire): `[null bitmap][each non-null value: fixed
//! bytes, or u32 length + bytes]`.

use crate::error::{ErrorCode, TernError, TernResult, err};
use crate::schema::{ColumnType, Table};
use crate::value::Value;

#[derive(Debug, Clone, Copy)]
enum Slot {
    Key(u16),
    Fixed { off: u32, width: u32, null_bit: Option<u32> },
    Var { idx: u32, null_bit: Option<u32> },
}

/// A column of a stored row without decoding (`RowLayout::stored`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored<'a> {
    Null,
    Bytes(&'a [u8]),
    /// A key column: decode it.
    Key,
}

/// Precomputed layout of a table's rows.
#[derive(Debug, Clone)]
pub struct RowLayout {
    pub types: Vec<ColumnType>,
    pub key_cols: Vec<u16>,
    pub partition_cols: Vec<u16>,
    pub nullable: Vec<bool>,
    key_fixed: Option<usize>,
    slots: Vec<Slot>,
    null_bytes: usize,
    fixed_len: usize,
    var_count: usize,
}

fn corrupt(what: &str) -> TernError {
    TernError::new(ErrorCode::Corruption, format!("malformed row: {what}"))
}

/// Width of a fixed-width type inside a key.
fn key_width(ty: ColumnType) -> Option<usize> {
    match ty {
        ColumnType::MediumInt { .. } => Some(4),
        t => t.fixed_width(),
    }
}

impl RowLayout {
    pub fn new(t: &Table) -> RowLayout {
        let types: Vec<ColumnType> = t.columns.iter().map(|c| c.ty).collect();
        let nullable: Vec<bool> = t.columns.iter().map(|c| c.nullable).collect();
        let mut slots = Vec::with_capacity(types.len());
        let nullable_body = (0..types.len()).filter(|&i| !t.is_key_column(i) && nullable[i]).count();
        let mut null_next = 0u32;
        let mut off = 0u32;
        let mut var = 0u32;
        for (i, &ty) in types.iter().enumerate() {
            if let Some(p) = t.primary_key.iter().position(|&k| k as usize == i) {
                slots.push(Slot::Key(p as u16));
                continue;
            }
            let null_bit = nullable[i].then(|| {
                null_next += 1;
                null_next - 1
            });
            match ty.fixed_width() {
                Some(w) => {
                    slots.push(Slot::Fixed { off, width: w as u32, null_bit });
                    off += w as u32;
                }
                None => {
                    slots.push(Slot::Var { idx: var, null_bit });
                    var += 1;
                }
            }
        }
        let key_fixed = t.primary_key.iter().map(|&k| key_width(types[k as usize])).sum::<Option<usize>>();
        RowLayout {
            types,
            key_cols: t.primary_key.clone(),
            partition_cols: t.partition_key.clone(),
            nullable,
            key_fixed,
            slots,
            null_bytes: nullable_body.div_ceil(8),
            fixed_len: off as usize,
            var_count: var as usize,
        }
    }

    /// Stored length of every row when the table has only fixed-width columns.
    pub fn fixed_row_len(&self) -> Option<usize> {
        let k = self.key_fixed?;
        (self.var_count == 0).then_some(k + self.null_bytes + self.fixed_len)
    }

    /// Checks that key bytes from a client are well-formed for this table.
    pub fn check_key(&self, key: &[u8]) -> TernResult<()> {
        match self.key_fixed {
            Some(n) if key.len() == n => Ok(()),
            Some(n) => err(ErrorCode::InvalidRequest, format!("key is {} bytes, expected {n}", key.len())),
            None => {
                let malformed = || TernError::new(ErrorCode::InvalidRequest, "malformed key");
                let mut rest = key;
                for &c in &self.key_cols {
                    skip_key_value(self.types[c as usize], &mut rest).map_err(|_| malformed())?;
                }
                if rest.is_empty() { Ok(()) } else { Err(malformed()) }
            }
        }
    }

    /// Checks that row bytes from a client are structurally valid for this table (so that every
    /// later accessor is safe) and that NOT NULL columns hold values.
    pub fn check_row(&self, row: &[u8]) -> TernResult<()> {
        let bad = |what: &str| TernError::new(ErrorCode::InvalidRequest, format!("malformed row: {what}"));
        let key_len = match self.key_fixed {
            Some(n) => n,
            None => {
                if row.len() < 2 {
                    return Err(bad("short"));
                }
                2 + u16::from_le_bytes([row[0], row[1]]) as usize
            }
        };
        if row.len() < key_len {
            return Err(bad("short key"));
        }
        self.check_key(self.key_of(row))?;
        let body = &row[key_len..];
        let fixed_end = self.null_bytes + self.fixed_len + 4 * self.var_count;
        if body.len() < fixed_end {
            return Err(bad("short body"));
        }
        let lens = self.null_bytes + self.fixed_len;
        let mut total = 0usize;
        for j in 0..self.var_count {
            let at = lens + 4 * j;
            total += u32::from_le_bytes(body[at..at + 4].try_into().expect("4")) as usize;
        }
        if body.len() != fixed_end + total {
            return Err(bad("variable lengths do not add up"));
        }
        for (i, slot) in self.slots.iter().enumerate() {
            if let Slot::Fixed { null_bit: None, .. } | Slot::Var { null_bit: None, .. } = slot {
                continue;
            }
            if !self.nullable[i] && self.is_null(row, i) {
                return err(ErrorCode::NotNull, "NULL in a NOT NULL column");
            }
        }
        Ok(())
    }

    pub fn column_count(&self) -> usize {
        self.types.len()
    }

    /// The key part of a stored row.
    #[inline]
    pub fn key_of<'a>(&self, row: &'a [u8]) -> &'a [u8] {
        match self.key_fixed {
            Some(n) => &row[..n],
            None => {
                let n = u16::from_le_bytes([row[0], row[1]]) as usize;
                &row[2..2 + n]
            }
        }
    }

    #[inline]
    fn body_of<'a>(&self, row: &'a [u8]) -> &'a [u8] {
        match self.key_fixed {
            Some(n) => &row[n..],
            None => {
                let n = u16::from_le_bytes([row[0], row[1]]) as usize;
                &row[2 + n..]
            }
        }
    }

    /// Encodes the primary key from key values given in key order (already coerced).
    pub fn encode_key(&self, key_values: &[Value], out: &mut Vec<u8>) -> TernResult<()> {
        if key_values.len() != self.key_cols.len() {
            return err(
                ErrorCode::InvalidRequest,
                format!("expected {} key values, got {}", self.key_cols.len(), key_values.len()),
            );
        }
        let mut raw = 0;
        for (i, v) in key_values.iter().enumerate() {
            let before = out.len();
            encode_key_value(self.types[self.key_cols[i] as usize], v, out)?;
            raw += raw_key_len(v, out.len() - before);
        }
        check_key_len(raw, out.len())
    }

    /// Decodes the key values (in key order) from key bytes.
    pub fn decode_key(&self, mut key: &[u8]) -> TernResult<Vec<Value>> {
        let mut out = Vec::with_capacity(self.key_cols.len());
        for &c in &self.key_cols {
            out.push(decode_key_value(self.types[c as usize], &mut key)?);
        }
        if !key.is_empty() {
            return Err(corrupt("trailing key bytes"));
        }
        Ok(out)
    }

    /// The bytes that decide the partition of a row with this primary key.
    pub fn partition_key_bytes<'a>(&self, key: &'a [u8]) -> TernResult<std::borrow::Cow<'a, [u8]>> {
        if self.partition_cols == self.key_cols {
            return Ok(std::borrow::Cow::Borrowed(key));
        }
        let values = self.decode_key(key)?;
        let mut out = Vec::new();
        for &p in &self.partition_cols {
            let pos = self.key_cols.iter().position(|&k| k == p).expect("partition key is part of the primary key");
            encode_key_value(self.types[p as usize], &values[pos], &mut out)?;
        }
        Ok(std::borrow::Cow::Owned(out))
    }

    pub fn partition_of_key(&self, key: &[u8], partition_count: u32) -> TernResult<u32> {
        Ok(crate::hash::partition_of(&self.partition_key_bytes(key)?, partition_count))
    }

    /// Encodes a full row from values of every column, in column order (already coerced; NOT
    /// NULL already checked).
    pub fn encode_row(&self, values: &[Value], out: &mut Vec<u8>) -> TernResult<()> {
        assert_eq!(values.len(), self.types.len(), "one value per column");
        let start = out.len();
        if self.key_fixed.is_none() {
            out.extend_from_slice(&[0, 0]);
        }
        let key_start = out.len();
        let mut raw = 0;
        for &k in &self.key_cols {
            let before = out.len();
            encode_key_value(self.types[k as usize], &values[k as usize], out)?;
            raw += raw_key_len(&values[k as usize], out.len() - before);
        }
        if self.key_fixed.is_none() {
            let n = out.len() - key_start;
            check_key_len(raw, n)?;
            out[start..start + 2].copy_from_slice(&(n as u16).to_le_bytes());
        }
        let body = out.len();
        out.resize(body + self.null_bytes + self.fixed_len + 4 * self.var_count, 0);
        let fixed_base = body + self.null_bytes;
        let lens_base = fixed_base + self.fixed_len;
        for (i, slot) in self.slots.iter().enumerate() {
            let v = &values[i];
            match *slot {
                Slot::Key(_) => {}
                Slot::Fixed { off, width, null_bit } => {
                    if v.is_null() {
                        set_null(out, body, null_bit)?;
                    } else {
                        let at = fixed_base + off as usize;
                        write_fixed(self.types[i], v, &mut out[at..at + width as usize])?;
                    }
                }
                Slot::Var { idx, null_bit } => {
                    if v.is_null() {
                        set_null(out, body, null_bit)?;
                    } else {
                        let Value::Bytes(b) = v else {
                            return err(ErrorCode::InvalidValue, "expected bytes");
                        };
                        let at = lens_base + 4 * idx as usize;
                        out[at..at + 4].copy_from_slice(&(b.len() as u32).to_le_bytes());
                        out.extend_from_slice(b);
                    }
                }
            }
        }
        if out.len() - start > crate::schema::ROW_MAX_BYTES {
            return err(ErrorCode::TooLarge, "row is larger than 16 MiB");
        }
        Ok(())
    }

    /// Decodes one column of a stored row.
    pub fn get(&self, row: &[u8], col: usize) -> TernResult<Value> {
        match self.slots[col] {
            Slot::Key(p) => {
                let mut key = self.key_of(row);
                for (i, &c) in self.key_cols.iter().enumerate() {
                    let v = decode_key_value(self.types[c as usize], &mut key)?;
                    if i == p as usize {
                        return Ok(v);
                    }
                }
                Err(corrupt("key position"))
            }
            Slot::Fixed { off, width, null_bit } => {
                let body = self.body_of(row);
                if is_null(body, null_bit) {
                    return Ok(Value::Null);
                }
                let at = self.null_bytes + off as usize;
                let b = body.get(at..at + width as usize).ok_or_else(|| corrupt("fixed area"))?;
                Ok(read_fixed(self.types[col], b))
            }
            Slot::Var { idx, null_bit } => {
                let body = self.body_of(row);
                if is_null(body, null_bit) {
                    return Ok(Value::Null);
                }
                Ok(Value::Bytes(self.var_slice(body, idx as usize)?.to_vec()))
            }
        }
    }

    /// Appends the value-list encoding (`encode_values`) of columns `cols` of a stored row to
    /// `out`, copying the bytes of fixed and variable columns as they are stored (the two
    /// encodings agree there); only key columns are decoded. Errors: a column that does not exist
    /// (`NoSuchColumn`), a damaged row.
    pub fn project_into(&self, row: &[u8], cols: &[u16], out: &mut Vec<u8>) -> TernResult<()> {
        if let Some(&c) = cols.iter().find(|&&c| c as usize >= self.slots.len()) {
            return err(ErrorCode::NoSuchColumn, format!("column {c} does not exist"));
        }
        let base = out.len();
        out.resize(base + cols.len().div_ceil(8), 0);
        let body = self.body_of(row);
        let mut vars: Option<Vec<(usize, usize)>> = None;
        for (i, &c) in cols.iter().enumerate() {
            let Some(slot) = self.slots.get(c as usize).copied() else {
                return err(ErrorCode::NoSuchColumn, format!("column {c} does not exist"));
            };
            let null = |out: &mut Vec<u8>| out[base + i / 8] |= 1 << (i % 8);
            match slot {
                Slot::Key(_) => {
                    let v = self.get(row, c as usize)?;
                    if v.is_null() {
                        null(out);
                        continue;
                    }
                    let ty = self.types[c as usize];
                    match ty.fixed_width() {
                        Some(w) => {
                            let at = out.len();
                            out.resize(at + w, 0);
                            write_fixed(ty, &v, &mut out[at..])?;
                        }
                        None => {
                            let Value::Bytes(b) = v else { return err(ErrorCode::InvalidValue, "expected bytes") };
                            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                            out.extend_from_slice(&b);
                        }
                    }
                }
                Slot::Fixed { off, width, null_bit } => {
                    if is_null(body, null_bit) {
                        null(out);
                        continue;
                    }
                    let at = self.null_bytes + off as usize;
                    out.extend_from_slice(body.get(at..at + width as usize).ok_or_else(|| corrupt("fixed area"))?);
                }
                Slot::Var { idx, null_bit } => {
                    if is_null(body, null_bit) {
                        null(out);
                        continue;
                    }
                    // Offsets of every variable column, computed once per row.
                    if vars.is_none() {
                        let lens = self.null_bytes + self.fixed_len;
                        let mut data = lens + 4 * self.var_count;
                        let mut v = Vec::with_capacity(self.var_count);
                        for j in 0..self.var_count {
                            let b = body.get(lens + 4 * j..lens + 4 * j + 4).ok_or_else(|| corrupt("var lengths"))?;
                            let n = u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize;
                            v.push((data, n));
                            data += n;
                        }
                        vars = Some(v);
                    }
                    let (at, n) = vars.as_ref().expect("set")[idx as usize];
                    let b = body.get(at..at + n).ok_or_else(|| corrupt("var data"))?;
                    out.extend_from_slice(&(n as u32).to_le_bytes());
                    out.extend_from_slice(b);
                }
            }
        }
        Ok(())
    }

    fn var_slice<'a>(&self, body: &'a [u8], idx: usize) -> TernResult<&'a [u8]> {
        self.var_bytes(body, idx).ok_or_else(|| corrupt("var lengths or data"))
    }

    /// Decodes every column.
    pub fn decode_row(&self, row: &[u8]) -> TernResult<Vec<Value>> {
        let mut key_vals = self.decode_key(self.key_of(row))?.into_iter();
        let mut out = Vec::with_capacity(self.types.len());
        let mut keys: Vec<Option<Value>> = vec![None; self.key_cols.len()];
        for (i, k) in keys.iter_mut().enumerate() {
            *k = key_vals.next();
            let _ = i;
        }
        for c in 0..self.types.len() {
            match self.slots[c] {
                Slot::Key(p) => out.push(keys[p as usize].take().ok_or_else(|| corrupt("key"))?),
                _ => out.push(self.get(row, c)?),
            }
        }
        Ok(out)
    }

    /// Whether the stored row's column is NULL (cheap; no decoding).
    /// A column's bytes as stored (the same value always has the same bytes), without decoding:
    /// for grouping rows by raw bytes. Key columns (or a damaged row) answer `Key`: decode those.
    pub fn stored<'a>(&self, row: &'a [u8], col: usize) -> Stored<'a> {
        match self.slots.get(col) {
            Some(Slot::Fixed { off, width, null_bit }) => {
                let body = self.body_of(row);
                if is_null(body, *null_bit) {
                    return Stored::Null;
                }
                let at = self.null_bytes + *off as usize;
                body.get(at..at + *width as usize).map_or(Stored::Key, Stored::Bytes)
            }
            Some(Slot::Var { idx, null_bit }) => {
                let body = self.body_of(row);
                if is_null(body, *null_bit) {
                    return Stored::Null;
                }
                self.var_slice(body, *idx as usize).map_or(Stored::Key, Stored::Bytes)
            }
            _ => Stored::Key,
        }
    }

    /// Where a fixed-width, non-key column is in a row's body (`body`): (byte offset, width,
    /// null bit). None for key and variable-length columns.
    pub fn fixed_at(&self, col: usize) -> Option<(usize, usize, Option<u32>)> {
        match self.slots.get(col)? {
            Slot::Fixed { off, width, null_bit } => Some((self.null_bytes + *off as usize, *width as usize, *null_bit)),
            _ => None,
        }
    }

    /// Where a variable-length column is in a row's body: (its index among the variable
    /// columns, null bit). None for key and fixed-width columns.
    pub fn var_at(&self, col: usize) -> Option<(usize, Option<u32>)> {
        match self.slots.get(col)? {
            Slot::Var { idx, null_bit } => Some((*idx as usize, *null_bit)),
            _ => None,
        }
    }

    /// The bytes of variable-length column `idx` (`var_at`) in a row's body; None for a
    /// damaged row.
    #[inline]
    pub fn var_bytes<'a>(&self, body: &'a [u8], idx: usize) -> Option<&'a [u8]> {
        if idx >= self.var_count {
            return None;
        }
        let lens = self.null_bytes + self.fixed_len;
        let len_area = body.get(lens..lens + 4 * self.var_count)?;
        let len = |j: usize| u32::from_le_bytes(len_area[4 * j..4 * j + 4].try_into().expect("4 bytes")) as usize;
        let data = lens + 4 * self.var_count + (0..idx).map(len).sum::<usize>();
        body.get(data..data + len(idx))
    }

    /// The non-key part of a stored row (null bits, fixed area, variable area).
    pub fn body<'a>(&self, row: &'a [u8]) -> &'a [u8] {
        self.body_of(row)
    }

    pub fn is_null(&self, row: &[u8], col: usize) -> bool {
        match self.slots[col] {
            Slot::Key(_) => false,
            Slot::Fixed { null_bit, .. } | Slot::Var { null_bit, .. } => is_null(self.body_of(row), null_bit),
        }
    }
}

fn set_null(out: &mut [u8], body: usize, bit: Option<u32>) -> TernResult<()> {
    match bit {
        Some(b) => {
            out[body + (b / 8) as usize] |= 1 << (b % 8);
            Ok(())
        }
        None => err(ErrorCode::NotNull, "NULL in a NOT NULL column"),
    }
}

/// The first 8 bytes of a stored fixed-width number, little endian (zero-extended).
#[inline]
pub fn stored_u64(b: &[u8]) -> u64 {
    // A whole word (every 8-byte column, and any column followed by more of the row) is one
    // load; a shorter column is copied byte by byte (not by a `memcpy` call of unknown length).
    if let Some(w) = b.first_chunk::<8>() {
        return u64::from_le_bytes(*w);
    }
    match *b {
        [x] => x as u64,
        [x, y] => u16::from_le_bytes([x, y]) as u64,
        [x, y, z, w] => u32::from_le_bytes([x, y, z, w]) as u64,
        _ => {
            let mut a = [0u8; 8];
            for (x, y) in a.iter_mut().zip(b) {
                *x = *y;
            }
            u64::from_le_bytes(a)
        }
    }
}

/// A stored signed integer of `bits` bits, sign-extended.
#[inline]
pub fn stored_int(b: &[u8], bits: u32) -> i64 {
    ((stored_u64(b) << (64 - bits)) as i64) >> (64 - bits)
}

/// A stored DECIMAL (16 bytes, little endian).
#[inline]
pub fn stored_i128(b: &[u8]) -> i128 {
    if let Some(w) = b.first_chunk::<16>() {
        return i128::from_le_bytes(*w);
    }
    let mut a = [0u8; 16];
    for (x, y) in a.iter_mut().zip(b) {
        *x = *y;
    }
    i128::from_le_bytes(a)
}

/// Whether a row body's null bit `bit` is set (None: the column is NOT NULL).
#[inline]
pub fn is_null(body: &[u8], bit: Option<u32>) -> bool {
    match bit {
        Some(b) => body.get((b / 8) as usize).is_some_and(|x| x & (1 << (b % 8)) != 0),
        None => false,
    }
}

fn int_of(v: &Value) -> TernResult<i128> {
    v.as_i128().ok_or_else(|| TernError::new(ErrorCode::InvalidValue, format!("expected an integer, got {v:?}")))
}

fn write_fixed(ty: ColumnType, v: &Value, dst: &mut [u8]) -> TernResult<()> {
    use ColumnType as T;
    match (ty, v) {
        (T::Float, Value::Float(f)) => dst.copy_from_slice(&f.to_bits().to_le_bytes()),
        (T::Double, Value::Double(f)) => dst.copy_from_slice(&f.to_bits().to_le_bytes()),
        (T::Decimal { .. }, Value::Decimal { v, .. }) => dst.copy_from_slice(&v.to_le_bytes()),
        (T::Date, Value::Date(d)) => dst.copy_from_slice(&d.to_le_bytes()),
        (T::Time { .. }, Value::Time(t))
        | (T::DateTime { .. }, Value::DateTime(t))
        | (T::Timestamp { .. }, Value::Timestamp(t)) => dst.copy_from_slice(&t.to_le_bytes()),
        (T::Binary { .. }, Value::Bytes(b)) if b.len() == dst.len() => dst.copy_from_slice(b),
        (t, v) if t.is_integer() || matches!(t, T::Year | T::Bit { .. }) => {
            let n = int_of(v)?;
            let bytes = n.to_le_bytes();
            dst.copy_from_slice(&bytes[..dst.len()]);
        }
        (t, v) => {
            return err(ErrorCode::InvalidValue, format!("value {v:?} does not fit column type {}", t.sql_name()));
        }
    }
    Ok(())
}

fn read_fixed(ty: ColumnType, b: &[u8]) -> Value {
    use ColumnType as T;
    if matches!(ty, T::Binary { .. }) || ty.fixed_width().is_none() {
        return Value::Bytes(b.to_vec());
    }
    let u = stored_u64(b);
    match ty {
        T::TinyInt { unsigned: false } => Value::Int(stored_int(b, 8)),
        T::SmallInt { unsigned: false } => Value::Int(stored_int(b, 16)),
        T::MediumInt { unsigned: false } | T::Int { unsigned: false } => Value::Int(stored_int(b, 32)),
        T::BigInt { unsigned: false } => Value::Int(u as i64),
        T::TinyInt { unsigned: true }
        | T::SmallInt { unsigned: true }
        | T::MediumInt { unsigned: true }
        | T::Int { unsigned: true }
        | T::BigInt { unsigned: true } => Value::UInt(u),
        T::Float => Value::Float(f32::from_bits(u as u32)),
        T::Double => Value::Double(f64::from_bits(u)),
        T::Decimal { scale, .. } => Value::Decimal { v: stored_i128(b), scale },
        T::Date => Value::Date(u as u32 as i32),
        T::Time { .. } => Value::Time(u as i64),
        T::DateTime { .. } => Value::DateTime(u as i64),
        T::Timestamp { .. } => Value::Timestamp(u as i64),
        T::Year => Value::Year(u as u16),
        T::Bit { .. } => Value::Bit(u),
        T::Binary { .. } => Value::Bytes(b.to_vec()),
        T::Char { .. } | T::VarChar { .. } | T::VarBinary { .. } | T::Text | T::Blob => Value::Bytes(b.to_vec()),
    }
}

/// The bytes a key value counts against `KEY_MAX_BYTES`: its own length, as NDB counts it, not
/// its sortable encoding (where each 0x00 byte of a string takes two bytes).
fn raw_key_len(v: &Value, encoded: usize) -> usize {
    match v {
        Value::Bytes(b) => b.len(),
        _ => encoded,
    }
}

/// A key of `raw` bytes (encoded in `encoded`) is within the limits: `KEY_MAX_BYTES` of values,
/// and an encoding whose length fits the row's u16 key length.
fn check_key_len(raw: usize, encoded: usize) -> TernResult<()> {
    if raw > crate::schema::KEY_MAX_BYTES || encoded > u16::MAX as usize {
        return err(ErrorCode::DataTooLong, "primary key is longer than 4096 bytes");
    }
    Ok(())
}

/// Appends the memcomparable encoding of a non-NULL value.
pub fn encode_key_value(ty: ColumnType, v: &Value, out: &mut Vec<u8>) -> TernResult<()> {
    use ColumnType as T;
    match (ty, v) {
        (_, Value::Null) => return err(ErrorCode::NotNull, "NULL in a key column"),
        (T::Float, Value::Float(f)) => out.extend_from_slice(&flip_float(f.to_bits() as u64, 32).to_be_bytes()[4..]),
        (T::Double, Value::Double(f)) => out.extend_from_slice(&flip_float(f.to_bits(), 64).to_be_bytes()),
        (T::Decimal { .. }, Value::Decimal { v, .. }) => {
            out.extend_from_slice(&((*v as u128) ^ (1u128 << 127)).to_be_bytes())
        }
        (T::Binary { len }, Value::Bytes(b)) if b.len() == len as usize => out.extend_from_slice(b),
        (T::Char { .. } | T::VarChar { .. } | T::VarBinary { .. } | T::Text | T::Blob, Value::Bytes(b)) => {
            for &x in b {
                out.push(x);
                if x == 0 {
                    out.push(0xFF);
                }
            }
            out.extend_from_slice(&[0, 1]);
        }
        (T::Date, Value::Date(d)) => out.extend_from_slice(&((*d as u32) ^ (1 << 31)).to_be_bytes()),
        (T::Time { .. }, Value::Time(t))
        | (T::DateTime { .. }, Value::DateTime(t))
        | (T::Timestamp { .. }, Value::Timestamp(t)) => out.extend_from_slice(&((*t as u64) ^ (1 << 63)).to_be_bytes()),
        (t, v) if t.is_integer() || matches!(t, T::Year | T::Bit { .. }) => {
            let n = int_of(v)?;
            let w = key_width(t).expect("fixed");
            let signed = t.is_integer() && !t.is_unsigned();
            let mut x = n as u64;
            if signed {
                x ^= 1 << (w * 8 - 1);
            }
            out.extend_from_slice(&x.to_be_bytes()[8 - w..]);
        }
        (t, v) => {
            return err(ErrorCode::InvalidValue, format!("value {v:?} does not fit key column type {}", t.sql_name()));
        }
    }
    Ok(())
}

fn flip_float(bits: u64, width: u32) -> u64 {
    let sign = 1u64 << (width - 1);
    let mask = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
    if bits & sign != 0 { !bits & mask } else { bits | sign }
}

/// Encodes a possibly NULL value for a nullable index column.
pub fn encode_index_value(ty: ColumnType, nullable: bool, v: &Value, out: &mut Vec<u8>) -> TernResult<()> {
    if nullable {
        if v.is_null() {
            out.push(0);
            return Ok(());
        }
        out.push(1);
    }
    encode_key_value(ty, v, out)
}

/// Decodes one memcomparable value from the front of `key`, advancing it.
/// Steps over one encoded key value, checking what `decode_key_value` checks (lengths, string
/// escapes) without decoding it.
pub fn skip_key_value(ty: ColumnType, key: &mut &[u8]) -> TernResult<()> {
    use ColumnType as T;
    let n = match ty {
        T::Char { .. } | T::VarChar { .. } | T::VarBinary { .. } | T::Text | T::Blob => {
            let mut i = 0;
            loop {
                match key.get(i) {
                    None => return Err(corrupt("unterminated key string")),
                    Some(0) => match key.get(i + 1) {
                        Some(0xFF) => i += 2,
                        Some(1) => break i + 2,
                        _ => return Err(corrupt("bad key escape")),
                    },
                    Some(_) => i += 1,
                }
            }
        }
        T::Binary { len } => len as usize,
        T::Float | T::Date => 4,
        T::Double | T::Time { .. } | T::DateTime { .. } | T::Timestamp { .. } => 8,
        T::Decimal { .. } => 16,
        t => key_width(t).expect("fixed"),
    };
    if key.len() < n {
        return Err(corrupt("short key"));
    }
    *key = &key[n..];
    Ok(())
}

pub fn decode_key_value(ty: ColumnType, key: &mut &[u8]) -> TernResult<Value> {
    use ColumnType as T;
    let take = |key: &mut &[u8], n: usize| -> TernResult<Vec<u8>> {
        if key.len() < n {
            return Err(corrupt("short key"));
        }
        let (a, b) = key.split_at(n);
        *key = b;
        Ok(a.to_vec())
    };
    Ok(match ty {
        T::Char { .. } | T::VarChar { .. } | T::VarBinary { .. } | T::Text | T::Blob => {
            let mut out = Vec::new();
            let mut i = 0;
            loop {
                match key.get(i) {
                    None => return Err(corrupt("unterminated key string")),
                    Some(0) => match key.get(i + 1) {
                        Some(0xFF) => {
                            out.push(0);
                            i += 2;
                        }
                        Some(1) => {
                            i += 2;
                            break;
                        }
                        _ => return Err(corrupt("bad key escape")),
                    },
                    Some(&b) => {
                        out.push(b);
                        i += 1;
                    }
                }
            }
            *key = &key[i..];
            Value::Bytes(out)
        }
        T::Binary { len } => Value::Bytes(take(key, len as usize)?),
        T::Float => {
            let b = take(key, 4)?;
            let u = u32::from_be_bytes(b.try_into().expect("4")) as u64;
            Value::Float(f32::from_bits(unflip_float(u, 32) as u32))
        }
        T::Double => {
            let b = take(key, 8)?;
            Value::Double(f64::from_bits(unflip_float(u64::from_be_bytes(b.try_into().expect("8")), 64)))
        }
        T::Decimal { scale, .. } => {
            let b = take(key, 16)?;
            Value::Decimal { v: (u128::from_be_bytes(b.try_into().expect("16")) ^ (1u128 << 127)) as i128, scale }
        }
        T::Date => Value::Date((u32::from_be_bytes(take(key, 4)?.try_into().expect("4")) ^ (1 << 31)) as i32),
        T::Time { .. } | T::DateTime { .. } | T::Timestamp { .. } => {
            let t = (u64::from_be_bytes(take(key, 8)?.try_into().expect("8")) ^ (1 << 63)) as i64;
            match ty {
                T::Time { .. } => Value::Time(t),
                T::DateTime { .. } => Value::DateTime(t),
                _ => Value::Timestamp(t),
            }
        }
        t => {
            let w = key_width(t).expect("fixed");
            let b = take(key, w)?;
            let mut a = [0u8; 8];
            a[8 - w..].copy_from_slice(&b);
            let mut x = u64::from_be_bytes(a);
            if t.is_integer() && !t.is_unsigned() {
                x ^= 1 << (w * 8 - 1);
                let shift = 64 - w * 8;
                Value::Int(((x << shift) as i64) >> shift)
            } else if t == T::Year {
                Value::Year(x as u16)
            } else if matches!(t, T::Bit { .. }) {
                Value::Bit(x)
            } else {
                Value::UInt(x)
            }
        }
    })
}

fn unflip_float(bits: u64, width: u32) -> u64 {
    let sign = 1u64 << (width - 1);
    let mask = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
    if bits & sign != 0 { bits & !sign } else { !bits & mask }
}

/// Encodes a list of values of the given types (projections on the wire).
pub fn encode_values(types: &[ColumnType], values: &[Value], out: &mut Vec<u8>) -> TernResult<()> {
    assert_eq!(types.len(), values.len());
    let nb = types.len().div_ceil(8);
    let base = out.len();
    out.resize(base + nb, 0);
    for (i, (ty, v)) in types.iter().zip(values).enumerate() {
        if v.is_null() {
            out[base + i / 8] |= 1 << (i % 8);
            continue;
        }
        match ty.fixed_width() {
            Some(w) => {
                let at = out.len();
                out.resize(at + w, 0);
                write_fixed(*ty, v, &mut out[at..])?;
            }
            None => {
                let Value::Bytes(b) = v else {
                    return err(ErrorCode::InvalidValue, "expected bytes");
                };
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
        }
    }
    Ok(())
}

/// Decodes a value list produced by `encode_values`; advances `bytes`.
pub fn decode_values(types: &[ColumnType], bytes: &mut &[u8]) -> TernResult<Vec<Value>> {
    let nb = types.len().div_ceil(8);
    if bytes.len() < nb {
        return Err(corrupt("short value list"));
    }
    let (nulls, mut rest) = bytes.split_at(nb);
    let mut out = Vec::with_capacity(types.len());
    for (i, ty) in types.iter().enumerate() {
        if nulls[i / 8] & (1 << (i % 8)) != 0 {
            out.push(Value::Null);
            continue;
        }
        let n = match ty.fixed_width() {
            Some(w) => w,
            None => {
                if rest.len() < 4 {
                    return Err(corrupt("short value length"));
                }
                let n = u32::from_le_bytes(rest[..4].try_into().expect("4")) as usize;
                rest = &rest[4..];
                n
            }
        };
        if rest.len() < n {
            return Err(corrupt("short value"));
        }
        let (v, r) = rest.split_at(n);
        out.push(read_fixed(*ty, v));
        rest = r;
    }
    *bytes = rest;
    Ok(out)
}

#[cfg(test)]
mod tests {
    /// `skip_key_value` accepts what `decode_key_value` decodes, consuming as many bytes, and
    /// rejects what it rejects (every prefix of every encoding, and bytes after a string's 0).
    #[test]
    fn skipping_a_key_value_agrees_with_decoding_it() {
        use super::*;
        let cases: Vec<(ColumnType, Value)> = vec![
            (ColumnType::VarChar { len: 20 }, Value::Bytes(b"a\0b\0".to_vec())),
            (ColumnType::VarBinary { len: 20 }, Value::Bytes(vec![0, 0, 1, 0xFF, 0])),
            (ColumnType::VarBinary { len: 20 }, Value::Bytes(vec![])),
            (ColumnType::Binary { len: 3 }, Value::Bytes(vec![1, 0, 2])),
            (ColumnType::Int { unsigned: false }, Value::Int(-5)),
            (ColumnType::MediumInt { unsigned: true }, Value::UInt(70000)),
            (ColumnType::BigInt { unsigned: true }, Value::UInt(u64::MAX)),
            (ColumnType::Float, Value::Float(1.5)),
            (ColumnType::Double, Value::Double(-2.25)),
            (ColumnType::Decimal { precision: 10, scale: 2, unsigned: false }, Value::Decimal { v: -12345, scale: 2 }),
            (ColumnType::Date, Value::Date(19000)),
            (ColumnType::DateTime { fsp: 0 }, Value::DateTime(1_700_000_000_000_000)),
            (ColumnType::Year, Value::Year(2024)),
        ];
        for (ty, v) in cases {
            let mut enc = Vec::new();
            encode_key_value(ty, &v, &mut enc).unwrap();
            enc.extend_from_slice(&[7, 7]); // what follows the value
            for cut in 0..=enc.len() {
                let (mut a, mut b) = (&enc[..cut], &enc[..cut]);
                let d = decode_key_value(ty, &mut a);
                let k = skip_key_value(ty, &mut b);
                assert_eq!(d.is_ok(), k.is_ok(), "{ty:?} cut at {cut}");
                assert_eq!(a.len(), b.len(), "{ty:?} cut at {cut}");
            }
            if ty.fixed_width().is_none() {
                let bad = [0u8, 5];
                assert!(skip_key_value(ty, &mut &bad[..]).is_err() && decode_key_value(ty, &mut &bad[..]).is_err());
            }
        }
    }

    /// The byte-copying projection equals decoding the columns and encoding them as a value list,
    /// for every column order, NULLs, keys and variable columns.
    #[test]
    fn project_into_equals_decode_then_encode() {
        use super::*;
        use crate::schema::{Column, Table};
        let t = Table {
            id: 1,
            database: "d".into(),
            name: "t".into(),
            columns: vec![
                Column::new("k", ColumnType::VarChar { len: 20 }).not_null(),
                Column::new("a", ColumnType::Int { unsigned: false }),
                Column::new("s", ColumnType::VarChar { len: 50 }),
                Column::new("k2", ColumnType::BigInt { unsigned: false }).not_null(),
                Column::new("b", ColumnType::Double),
                Column::new("t", ColumnType::VarBinary { len: 50 }),
            ],
            primary_key: vec![0, 3],
            partition_key: vec![0],
            indexes: vec![],
            partition_count: 0,
            groups: 0,
            ttl: None,
            comment: String::new(),
        };
        let l = RowLayout::new(&t);
        let rows = [
            vec![
                Value::str("key"),
                Value::Int(-5),
                Value::str("hello"),
                Value::Int(7),
                Value::Double(1.5),
                Value::Bytes(vec![0, 1, 2]),
            ],
            vec![Value::str(""), Value::Null, Value::Null, Value::Int(-1), Value::Null, Value::Bytes(vec![])],
        ];
        let orders: [&[u16]; 4] = [&[0, 1, 2, 3, 4, 5], &[5, 2, 0], &[3, 3, 1], &[4]];
        for r in &rows {
            let mut row = Vec::new();
            l.encode_row(r, &mut row).unwrap();
            for cols in orders {
                let types: Vec<ColumnType> = cols.iter().map(|&c| l.types[c as usize]).collect();
                let values: Vec<Value> = cols.iter().map(|&c| l.get(&row, c as usize).unwrap()).collect();
                let mut want = Vec::new();
                encode_values(&types, &values, &mut want).unwrap();
                let mut got = vec![9u8];
                l.project_into(&row, cols, &mut got).unwrap();
                assert_eq!(&got[1..], &want[..], "{cols:?} of {r:?}");
            }
        }
        assert_eq!(l.project_into(&[], &[9], &mut Vec::new()).unwrap_err().code, ErrorCode::NoSuchColumn);
    }

    /// NDB counts a key's own bytes against its 4,096-byte limit; the sortable encoding (where a
    /// 0x00 byte takes two) may be longer.
    #[test]
    fn key_limit_counts_value_bytes() {
        use crate::schema::{Column, ColumnType as T, Table};
        let t = Table {
            id: 1,
            database: "d".into(),
            name: "t".into(),
            columns: vec![Column::new("k", T::VarBinary { len: 5000 }).not_null()],
            primary_key: vec![0],
            partition_key: vec![0],
            indexes: vec![],
            partition_count: 1,
            groups: 0,
            ttl: None,
            comment: String::new(),
        };
        let l = RowLayout::new(&t);
        let zeros = Value::Bytes(vec![0; 3000]);
        let mut key = Vec::new();
        l.encode_key(std::slice::from_ref(&zeros), &mut key).unwrap();
        assert!(key.len() > 4096);
        assert_eq!(l.decode_key(&key).unwrap(), vec![zeros.clone()]);
        let mut row = Vec::new();
        l.encode_row(std::slice::from_ref(&zeros), &mut row).unwrap();
        assert_eq!(l.decode_key(l.key_of(&row)).unwrap(), vec![zeros]);
        assert!(l.encode_key(&[Value::Bytes(vec![1; 4097])], &mut Vec::new()).is_err());
    }

    use super::*;
    use crate::schema::{Column, ColumnType as T};

    fn table(cols: Vec<Column>, pk: Vec<u16>) -> Table {
        Table {
            id: 1,
            database: "d".into(),
            name: "t".into(),
            columns: cols,
            partition_key: pk.clone(),
            primary_key: pk,
            indexes: vec![],
            partition_count: 2,
            groups: 0,
            ttl: None,
            comment: String::new(),
        }
    }

    #[test]
    fn flex_row_is_104_bytes() {
        let mut cols = vec![Column::new("id", T::Int { unsigned: false }).not_null()];
        for i in 0..25 {
            cols.push(Column::new(&format!("c{i}"), T::Int { unsigned: false }).not_null());
        }
        let t = table(cols, vec![0]);
        let l = RowLayout::new(&t);
        let vals: Vec<Value> = (0..26).map(|i| Value::Int(i * 1000 - 7)).collect();
        let mut row = Vec::new();
        l.encode_row(&vals, &mut row).unwrap();
        assert_eq!(row.len(), 104);
        assert_eq!(l.decode_row(&row).unwrap(), vals);
        assert_eq!(l.get(&row, 5).unwrap(), Value::Int(4993));
    }

    #[test]
    fn mixed_row_round_trip() {
        let t = table(
            vec![
                Column::new("a", T::VarChar { len: 10 }).not_null(),
                Column::new("b", T::BigInt { unsigned: true }).not_null(),
                Column::new("c", T::VarBinary { len: 10 }),
                Column::new("d", T::Double),
                Column::new("e", T::Decimal { precision: 10, scale: 2, unsigned: false }),
                Column::new("f", T::Text),
                Column::new("g", T::Date),
                Column::new("h", T::Binary { len: 40 }),
            ],
            vec![0, 1],
        );
        let l = RowLayout::new(&t);
        let vals = vec![
            Value::Bytes(b"k\0y".to_vec()),
            Value::UInt(u64::MAX),
            Value::Null,
            Value::Double(-1.5),
            Value::Decimal { v: -12345, scale: 2 },
            Value::str("hello"),
            Value::Date(-3),
            Value::Bytes(vec![9; 40]),
        ];
        let mut row = Vec::new();
        l.encode_row(&vals, &mut row).unwrap();
        assert_eq!(l.decode_row(&row).unwrap(), vals);
        assert!(l.is_null(&row, 2));
        let mut key = Vec::new();
        l.encode_key(&vals[..2], &mut key).unwrap();
        assert_eq!(l.key_of(&row), &key[..]);
    }

    #[test]
    fn key_encoding_preserves_order() {
        let cases: Vec<(ColumnType, Vec<Value>)> = vec![
            (
                T::Int { unsigned: false },
                vec![
                    Value::Int(i32::MIN as i64),
                    Value::Int(-1),
                    Value::Int(0),
                    Value::Int(7),
                    Value::Int(i32::MAX as i64),
                ],
            ),
            (T::BigInt { unsigned: true }, vec![Value::UInt(0), Value::UInt(1), Value::UInt(u64::MAX)]),
            (T::Double, vec![Value::Double(-1e9), Value::Double(-0.5), Value::Double(0.0), Value::Double(2.5)]),
            (T::Float, vec![Value::Float(-3.0), Value::Float(1.0), Value::Float(1.5)]),
            (
                T::VarChar { len: 9 },
                vec![
                    Value::str(""),
                    Value::Bytes(vec![0]),
                    Value::Bytes(vec![0, 0]),
                    Value::str("a"),
                    Value::str("ab"),
                    Value::str("b"),
                ],
            ),
            (
                T::Decimal { precision: 9, scale: 2, unsigned: false },
                vec![
                    Value::Decimal { v: -5, scale: 2 },
                    Value::Decimal { v: 0, scale: 2 },
                    Value::Decimal { v: 3, scale: 2 },
                ],
            ),
            (T::DateTime { fsp: 0 }, vec![Value::DateTime(-5), Value::DateTime(0), Value::DateTime(99)]),
            (T::MediumInt { unsigned: false }, vec![Value::Int(-8_388_608), Value::Int(-1), Value::Int(8_388_607)]),
        ];
        for (ty, vals) in cases {
            let enc: Vec<Vec<u8>> = vals
                .iter()
                .map(|v| {
                    let mut o = Vec::new();
                    encode_key_value(ty, v, &mut o).unwrap();
                    o
                })
                .collect();
            for w in enc.windows(2) {
                assert!(w[0] < w[1], "{ty:?}: order broken");
            }
            for (e, v) in enc.iter().zip(&vals) {
                let mut s = &e[..];
                assert_eq!(&decode_key_value(ty, &mut s).unwrap(), v);
                assert!(s.is_empty());
            }
        }
    }

    #[test]
    fn value_lists_round_trip() {
        // Regression: a variable-length value longer than 16 bytes once panicked on decode.
        let long = T::VarChar { len: 200 };
        let mut b = Vec::new();
        encode_values(&[long], &[Value::str(&"x".repeat(96))], &mut b).unwrap();
        assert_eq!(decode_values(&[long], &mut &b[..]).unwrap(), vec![Value::str(&"x".repeat(96))]);
        let types = [T::Int { unsigned: false }, T::VarChar { len: 5 }, T::Double];
        let vals = vec![Value::Int(-3), Value::Null, Value::Double(2.0)];
        let mut b = Vec::new();
        encode_values(&types, &vals, &mut b).unwrap();
        let mut s = &b[..];
        assert_eq!(decode_values(&types, &mut s).unwrap(), vals);
        assert!(s.is_empty());
        let mut short = &b[..b.len() - 1];
        assert!(decode_values(&types, &mut short).is_err());
    }
}
