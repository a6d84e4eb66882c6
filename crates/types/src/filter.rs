//! Pushed-down filters: predicates evaluated inside the data node against stored rows, with SQL
//! three-valued logic (a comparison with NULL is unknown; a row passes only when the filter is
//! true).

use crate::bin::{Dec, DecodeError, DecodeResult, Enc};
use crate::row::RowLayout;
use crate::value::Value;
use std::cmp::Ordering;
use std::sync::Arc;

/// Nesting limit, so that a hostile filter cannot exhaust the stack.
pub const FILTER_DEPTH_MAX: usize = 64;
pub const FILTER_TERMS_MAX: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    fn decode(d: &mut Dec) -> DecodeResult<CmpOp> {
        Ok(match d.u8()? {
            0 => CmpOp::Eq,
            1 => CmpOp::Ne,
            2 => CmpOp::Lt,
            3 => CmpOp::Le,
            4 => CmpOp::Gt,
            5 => CmpOp::Ge,
            _ => return Err(DecodeError("bad comparison")),
        })
    }

    /// Whether `a op b` holds when `a` compares to `b` as `ord`.
    pub fn holds(self, ord: Ordering) -> bool {
        match self {
            CmpOp::Eq => ord == Ordering::Equal,
            CmpOp::Ne => ord != Ordering::Equal,
            CmpOp::Lt => ord == Ordering::Less,
            CmpOp::Le => ord != Ordering::Greater,
            CmpOp::Gt => ord == Ordering::Greater,
            CmpOp::Ge => ord != Ordering::Less,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    True,
    Cmp {
        col: u16,
        op: CmpOp,
        value: Value,
    },
    IsNull(u16),
    IsNotNull(u16),
    In {
        col: u16,
        values: Vec<Value>,
    },
    /// The column's value may be in this set (a superset test, see `KeyBloom`): true for
    /// every member, and for about 1 % of other values. Only for a conjunction whose every
    /// passing row is checked again by the sender (a hash join's keys sent with its probe-side
    /// scan); NOT of it is meaningless.
    Bloom {
        col: u16,
        set: KeyBloom,
    },
    /// `a op b` of two columns of the same type.
    CmpCols {
        a: u16,
        op: CmpOp,
        b: u16,
    },
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Not(Box<Filter>),
}

impl Filter {
    /// Evaluates against a stored row: Some(true) passes.
    pub fn eval(&self, layout: &RowLayout, row: &[u8]) -> Option<bool> {
        match self {
            Filter::True => Some(true),
            Filter::Cmp { col, op, value } => {
                let v = layout.get(row, *col as usize).ok()?;
                Some(op.holds(v.cmp_sql(value)?))
            }
            Filter::IsNull(c) => Some(layout.is_null(row, *c as usize)),
            Filter::IsNotNull(c) => Some(!layout.is_null(row, *c as usize)),
            Filter::In { col, values } => {
                let v = layout.get(row, *col as usize).ok()?;
                if v.is_null() {
                    return None;
                }
                let mut unknown = false;
                for x in values {
                    match v.cmp_sql(x) {
                        Some(Ordering::Equal) => return Some(true),
                        None => unknown = true,
                        _ => {}
                    }
                }
                if unknown { None } else { Some(false) }
            }
            Filter::CmpCols { a, op, b } => {
                let (x, y) = (layout.get(row, *a as usize).ok()?, layout.get(row, *b as usize).ok()?);
                Some(op.holds(x.cmp_sql(&y)?))
            }
            Filter::Bloom { col, set } => {
                let v = layout.get(row, *col as usize).ok()?;
                if v.is_null() {
                    return None;
                }
                Some(KeyBloom::key_of(&v).is_none_or(|k| set.contains(k)))
            }
            Filter::And(fs) => {
                let mut unknown = false;
                for f in fs {
                    match f.eval(layout, row) {
                        Some(false) => return Some(false),
                        None => unknown = true,
                        Some(true) => {}
                    }
                }
                if unknown { None } else { Some(true) }
            }
            Filter::Or(fs) => {
                let mut unknown = false;
                for f in fs {
                    match f.eval(layout, row) {
                        Some(true) => return Some(true),
                        None => unknown = true,
                        Some(false) => {}
                    }
                }
                if unknown { None } else { Some(false) }
            }
            Filter::Not(f) => f.eval(layout, row).map(|b| !b),
        }
    }

    pub fn passes(&self, layout: &RowLayout, row: &[u8]) -> bool {
        self.eval(layout, row) == Some(true)
    }

    /// Highest column position the filter reads, for validation against a table.
    pub fn max_column(&self) -> Option<u16> {
        match self {
            Filter::True => None,
            Filter::Cmp { col, .. }
            | Filter::IsNull(col)
            | Filter::IsNotNull(col)
            | Filter::In { col, .. }
            | Filter::Bloom { col, .. } => Some(*col),
            Filter::CmpCols { a, b, .. } => Some(*a.max(b)),
            Filter::And(fs) | Filter::Or(fs) => fs.iter().filter_map(|f| f.max_column()).max(),
            Filter::Not(f) => f.max_column(),
        }
    }

    pub fn encode(&self, e: &mut Enc) {
        match self {
            Filter::True => e.u8(0),
            Filter::Cmp { col, op, value } => {
                e.u8(1);
                e.u16(*col);
                e.u8(*op as u8);
                value.encode(e);
            }
            Filter::IsNull(c) => {
                e.u8(2);
                e.u16(*c)
            }
            Filter::IsNotNull(c) => {
                e.u8(3);
                e.u16(*c)
            }
            Filter::In { col, values } => {
                e.u8(4);
                e.u16(*col);
                e.u32(values.len() as u32);
                values.iter().for_each(|v| v.encode(e));
            }
            Filter::And(fs) | Filter::Or(fs) => {
                e.u8(if matches!(self, Filter::And(_)) { 5 } else { 6 });
                e.u32(fs.len() as u32);
                fs.iter().for_each(|f| f.encode(e));
            }
            Filter::Not(f) => {
                e.u8(7);
                f.encode(e)
            }
            Filter::CmpCols { a, op, b } => {
                e.u8(9);
                e.u16(*a);
                e.u8(*op as u8);
                e.u16(*b);
            }
            Filter::Bloom { col, set } => {
                e.u8(8);
                e.u16(*col);
                e.u32(set.words.len() as u32);
                set.words.iter().for_each(|w| e.u64(*w));
            }
        }
    }

    pub fn decode(d: &mut Dec) -> DecodeResult<Filter> {
        Self::decode_depth(d, 0)
    }

    fn decode_depth(d: &mut Dec, depth: usize) -> DecodeResult<Filter> {
        if depth > FILTER_DEPTH_MAX {
            return Err(DecodeError("filter nested too deeply"));
        }
        Ok(match d.u8()? {
            0 => Filter::True,
            1 => {
                let col = d.u16()?;
                let op = CmpOp::decode(d)?;
                Filter::Cmp { col, op, value: Value::decode(d)? }
            }
            9 => {
                let a = d.u16()?;
                let op = CmpOp::decode(d)?;
                Filter::CmpCols { a, op, b: d.u16()? }
            }
            2 => Filter::IsNull(d.u16()?),
            3 => Filter::IsNotNull(d.u16()?),
            4 => {
                let col = d.u16()?;
                let n = d.len(FILTER_TERMS_MAX)?;
                Filter::In { col, values: (0..n).map(|_| Value::decode(d)).collect::<DecodeResult<_>>()? }
            }
            t @ (5 | 6) => {
                let n = d.len(FILTER_TERMS_MAX)?;
                let fs = (0..n).map(|_| Self::decode_depth(d, depth + 1)).collect::<DecodeResult<Vec<_>>>()?;
                if t == 5 { Filter::And(fs) } else { Filter::Or(fs) }
            }
            7 => Filter::Not(Box::new(Self::decode_depth(d, depth + 1)?)),
            8 => {
                let col = d.u16()?;
                let n = d.len(BLOOM_WORDS_MAX)?;
                if !n.is_power_of_two() {
                    return Err(DecodeError("bad key set size"));
                }
                let words = (0..n).map(|_| d.u64()).collect::<DecodeResult<Vec<u64>>>()?;
                Filter::Bloom { col, set: KeyBloom { words: words.into() } }
            }
            _ => return Err(DecodeError("bad filter tag")),
        })
    }
}

/// Largest key set a filter may carry, in 64-bit words (8 MiB).
pub const BLOOM_WORDS_MAX: usize = 1 << 20;

/// A set of integer keys (integers, DATEs as their day numbers) as a blocked Bloom filter: each
/// key sets three bits of one 64-bit word chosen by its hash, so a test reads one word. With
/// 10–20 bits per key about 1 % of other keys pass. Both sides map a value to its key with
/// `key_of`.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyBloom {
    words: Arc<[u64]>,
}

impl KeyBloom {
    /// The set of `keys` (`n`: how many there are, at most; sizes the filter).
    pub fn new(n: usize, keys: impl IntoIterator<Item = i64>) -> KeyBloom {
        let len = (n.saturating_mul(10) / 64 + 1).next_power_of_two().clamp(8, BLOOM_WORDS_MAX);
        let mut words = vec![0u64; len];
        for k in keys {
            let (w, m) = Self::probe(k, len);
            words[w] |= m;
        }
        KeyBloom { words: words.into() }
    }

    /// The key a value is tested by: integers and DATEs (other kinds cannot be tested: None).
    pub fn key_of(v: &Value) -> Option<i64> {
        match v {
            Value::Int(i) => Some(*i),
            Value::UInt(u) => Some(*u as i64),
            Value::Date(d) => Some(*d as i64),
            _ => None,
        }
    }

    /// Whether `key` may be in the set.
    #[inline]
    pub fn contains(&self, key: i64) -> bool {
        let (w, m) = Self::probe(key, self.words.len());
        self.words[w] & m == m
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.words.len() * 8
    }

    #[inline]
    fn probe(key: i64, len: usize) -> (usize, u64) {
        // SplitMix64's finaliser: every input bit moves every output bit.
        let mut h = (key as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
        let m = (1u64 << (h & 63)) | (1u64 << ((h >> 6) & 63)) | (1u64 << ((h >> 12) & 63));
        (((h >> 32) as usize) & (len - 1), m)
    }
}

/// A filter prepared for one table's layout: a comparison of a fixed-width integer, DATE,
/// DATETIME/TIMESTAMP or DECIMAL column with a literal of the same kind reads the stored bytes
/// (no `Value` per row); everything else is evaluated as `Filter::eval` does, with the same
/// result.
pub struct Prepared<'f> {
    node: PNode<'f>,
}

enum PNode<'f> {
    Generic(&'f Filter),
    /// `column op lit` over the stored number (`read` says how to read it).
    Cmp {
        off: usize,
        width: usize,
        null_bit: Option<u32>,
        read: Read,
        op: CmpOp,
        lit: i128,
    },
    /// `a op b` of two stored numbers of one kind.
    CmpCols {
        a: (usize, Option<u32>),
        b: (usize, Option<u32>),
        width: usize,
        read: Read,
        op: CmpOp,
    },
    /// A key-set test of a stored integer or DATE.
    Bloom {
        off: usize,
        width: usize,
        null_bit: Option<u32>,
        read: Read,
        set: &'f KeyBloom,
    },
    And(Vec<PNode<'f>>),
}

#[derive(Clone, Copy)]
enum Read {
    /// A signed integer of this many bits.
    Int(u32),
    Date,
    Micros,
    Decimal,
}

impl Filter {
    /// This filter prepared for `layout` (see `Prepared`).
    pub fn prepare<'f>(&'f self, layout: &RowLayout) -> Prepared<'f> {
        Prepared { node: prepare(self, layout) }
    }
}

fn prepare<'f>(f: &'f Filter, layout: &RowLayout) -> PNode<'f> {
    use crate::schema::ColumnType as T;
    match f {
        Filter::And(fs) => {
            // The tests that read stored bytes first: a row most of them reject never reaches
            // the generic ones, which decode values (and allocate for strings).
            let mut ns: Vec<PNode<'f>> = fs.iter().map(|f| prepare(f, layout)).collect();
            ns.sort_by_key(|n| matches!(n, PNode::Generic(_)));
            PNode::And(ns)
        }
        Filter::Cmp { col, op, value } => {
            let c = *col as usize;
            let Some((off, width, null_bit)) = layout.fixed_at(c) else { return PNode::Generic(f) };
            let Some(ty) = layout.types.get(c) else { return PNode::Generic(f) };
            let fast = match (ty, value) {
                (T::TinyInt { unsigned: false }, Value::Int(x)) => Some((Read::Int(8), *x as i128)),
                (T::SmallInt { unsigned: false }, Value::Int(x)) => Some((Read::Int(16), *x as i128)),
                (T::MediumInt { unsigned: false } | T::Int { unsigned: false }, Value::Int(x)) => {
                    Some((Read::Int(32), *x as i128))
                }
                (T::BigInt { unsigned: false }, Value::Int(x)) => Some((Read::Int(64), *x as i128)),
                (T::Date, Value::Date(d)) => Some((Read::Date, *d as i128)),
                (T::DateTime { .. }, Value::DateTime(t)) | (T::Timestamp { .. }, Value::Timestamp(t)) => {
                    Some((Read::Micros, *t as i128))
                }
                (T::DateTime { .. }, Value::Date(d)) => {
                    Some((Read::Micros, *d as i128 * crate::time::MICROS_PER_DAY as i128))
                }
                // The literal at the column's scale, when that is exact (as `cmp_sql` compares).
                (T::Decimal { scale, .. }, Value::Decimal { v, scale: s }) if width == 16 && s <= scale => {
                    crate::value::rescale(*v, *s, *scale).map(|l| (Read::Decimal, l))
                }
                (T::Decimal { scale, .. }, Value::Int(x)) if width == 16 => {
                    crate::value::rescale(*x as i128, 0, *scale).map(|l| (Read::Decimal, l))
                }
                _ => None,
            };
            match fast {
                Some((read, lit)) => PNode::Cmp { off, width, null_bit, read, op: *op, lit },
                None => PNode::Generic(f),
            }
        }
        Filter::CmpCols { a, op, b } => {
            let (Some((oa, wa, na)), Some((ob, wb, nb))) = (layout.fixed_at(*a as usize), layout.fixed_at(*b as usize))
            else {
                return PNode::Generic(f);
            };
            let (Some(ta), Some(tb)) = (layout.types.get(*a as usize), layout.types.get(*b as usize)) else {
                return PNode::Generic(f);
            };
            if ta != tb || wa != wb {
                return PNode::Generic(f);
            }
            let read = match ta {
                T::TinyInt { unsigned: false } => Read::Int(8),
                T::SmallInt { unsigned: false } => Read::Int(16),
                T::MediumInt { unsigned: false } | T::Int { unsigned: false } => Read::Int(32),
                T::BigInt { unsigned: false } => Read::Int(64),
                T::Date => Read::Date,
                T::DateTime { .. } | T::Timestamp { .. } => Read::Micros,
                T::Decimal { .. } if wa == 16 => Read::Decimal,
                _ => return PNode::Generic(f),
            };
            PNode::CmpCols { a: (oa, na), b: (ob, nb), width: wa, read, op: *op }
        }
        Filter::Bloom { col, set } => {
            let c = *col as usize;
            let Some((off, width, null_bit)) = layout.fixed_at(c) else { return PNode::Generic(f) };
            let read = match layout.types.get(c) {
                Some(T::TinyInt { unsigned: false }) => Read::Int(8),
                Some(T::SmallInt { unsigned: false }) => Read::Int(16),
                Some(T::MediumInt { unsigned: false } | T::Int { unsigned: false }) => Read::Int(32),
                Some(T::BigInt { unsigned: false }) => Read::Int(64),
                Some(T::Date) => Read::Date,
                _ => return PNode::Generic(f),
            };
            PNode::Bloom { off, width, null_bit, read, set }
        }
        _ => PNode::Generic(f),
    }
}

impl Read {
    /// The stored number at `off` of a row's body (None when NULL).
    #[inline]
    fn at(self, body: &[u8], off: usize, width: usize, null_bit: Option<u32>) -> Option<i128> {
        if crate::row::is_null(body, null_bit) {
            return None;
        }
        let bytes = body.get(off..off + width)?;
        Some(match self {
            Read::Int(bits) => crate::row::stored_int(bytes, bits) as i128,
            Read::Date => (crate::row::stored_u64(bytes) as u32 as i32) as i128,
            Read::Micros => crate::row::stored_u64(bytes) as i64 as i128,
            Read::Decimal => crate::row::stored_i128(bytes),
        })
    }
}

impl PNode<'_> {
    fn eval(&self, layout: &RowLayout, row: &[u8], body: &[u8]) -> Option<bool> {
        match self {
            PNode::Generic(f) => f.eval(layout, row),
            PNode::Cmp { off, width, null_bit, read, op, lit } => {
                let v = read.at(body, *off, *width, *null_bit)?;
                Some(op.holds(v.cmp(lit)))
            }
            PNode::CmpCols { a, b, width, read, op } => {
                let x = read.at(body, a.0, *width, a.1)?;
                let y = read.at(body, b.0, *width, b.1)?;
                Some(op.holds(x.cmp(&y)))
            }
            PNode::Bloom { off, width, null_bit, read, set } => {
                // Integers and DATEs only (`prepare`): the number is the key.
                Some(set.contains(read.at(body, *off, *width, *null_bit)? as i64))
            }
            PNode::And(ns) => {
                let mut unknown = false;
                for n in ns {
                    match n.eval(layout, row, body) {
                        Some(false) => return Some(false),
                        None => unknown = true,
                        Some(true) => {}
                    }
                }
                if unknown { None } else { Some(true) }
            }
        }
    }
}

impl Prepared<'_> {
    pub fn passes(&self, layout: &RowLayout, row: &[u8]) -> bool {
        match &self.node {
            PNode::Generic(f) => f.passes(layout, row),
            n => n.eval(layout, row, layout.body(row)) == Some(true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Column, ColumnType as T, Table};

    /// Random comparisons (and conjunctions of them) over every column kind, with literals of
    /// matching and other kinds and NULLs: the prepared filter passes exactly the rows
    /// `Filter::eval` passes. Prints the seed that reproduces a failure.
    #[test]
    fn prepared_filters_equal_eval() {
        use crate::rng::Rng;
        let seed = tern_testkit::seed();
        let mut rng = Rng::new(seed);
        let t = Table::new(
            "d",
            "t",
            vec![
                Column::new("id", T::Int { unsigned: false }).not_null(),
                Column::new("ti", T::TinyInt { unsigned: false }),
                Column::new("i", T::Int { unsigned: false }),
                Column::new("b", T::BigInt { unsigned: false }),
                Column::new("d", T::Decimal { precision: 15, scale: 2, unsigned: false }),
                Column::new("dt", T::Date),
                Column::new("ts", T::DateTime { fsp: 0 }),
                Column::new("x", T::Double),
                Column::new("s", T::VarChar { len: 5 }),
                Column::new("u", T::Int { unsigned: true }),
                Column::new("i2", T::Int { unsigned: false }),
                Column::new("dt2", T::Date),
                Column::new("d2", T::Decimal { precision: 15, scale: 2, unsigned: false }),
                Column::new("ts2", T::DateTime { fsp: 0 }),
            ],
            vec![0],
        );
        let layout = RowLayout::new(&t);
        let day = crate::time::MICROS_PER_DAY;
        let value = |rng: &mut Rng, c: usize| -> Value {
            let r = rng.below(41) as i64 - 20;
            match c {
                0..=3 | 10 => Value::Int(r),
                4 | 12 => Value::Decimal { v: r as i128 * 25, scale: 2 },
                5 | 11 => Value::Date(r as i32),
                6 | 13 => Value::DateTime(r * day / 2),
                7 => Value::Double(r as f64 / 4.0),
                8 => Value::str(&r.to_string()),
                _ => Value::UInt(r.unsigned_abs()),
            }
        };
        let literal = |rng: &mut Rng| -> Value {
            let r = rng.below(41) as i64 - 20;
            match rng.below(7) {
                0 => Value::Int(r),
                1 => Value::Decimal { v: r as i128 * 5, scale: rng.below(4) as u8 },
                2 => Value::Date(r as i32),
                3 => Value::DateTime(r * day / 2),
                4 => Value::Double(r as f64 / 4.0),
                5 => Value::Null,
                _ => Value::UInt(r.unsigned_abs()),
            }
        };
        let ops = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge];
        for case in 0..300 {
            let terms: Vec<Filter> = (0..1 + rng.below(3))
                .map(|_| {
                    if rng.chance(5) {
                        // Two columns of the same kind, or of different kinds.
                        let (a, b) = if rng.chance(2) {
                            *rng.pick(&[(2, 10), (5, 11), (4, 12), (6, 13), (10, 3), (1, 1)])
                        } else {
                            (rng.below(14) as u16, rng.below(14) as u16)
                        };
                        Filter::CmpCols { a, op: *rng.pick(&ops), b }
                    } else if rng.chance(4) {
                        // A key set of some small numbers (DATEs as day numbers).
                        let keys: Vec<i64> = (0..rng.below(12)).map(|_| rng.below(41) as i64 - 20).collect();
                        Filter::Bloom { col: rng.below(14) as u16, set: KeyBloom::new(keys.len(), keys) }
                    } else {
                        Filter::Cmp { col: rng.below(14) as u16, op: *rng.pick(&ops), value: literal(&mut rng) }
                    }
                })
                .collect();
            let f = if terms.len() == 1 { terms.into_iter().next().unwrap() } else { Filter::And(terms) };
            let p = f.prepare(&layout);
            for id in 0..40 {
                let mut vals: Vec<Value> = (0..14).map(|c| value(&mut rng, c)).collect();
                vals[0] = Value::Int(id);
                for v in vals.iter_mut().skip(1) {
                    if rng.chance(10) {
                        *v = Value::Null;
                    }
                }
                let mut row = Vec::new();
                layout.encode_row(&vals, &mut row).unwrap();
                assert_eq!(
                    p.passes(&layout, &row),
                    f.passes(&layout, &row),
                    "seed {seed}, case {case}: {f:?} on {vals:?}"
                );
            }
        }
    }

    /// Every member passes a key set; about 1 % of other keys do; the set survives the wire.
    #[test]
    fn key_sets_hold_their_members() {
        use crate::rng::Rng;
        let seed = tern_testkit::seed();
        let mut rng = Rng::new(seed);
        let members: Vec<i64> = (0..20_000).map(|_| rng.below(1 << 40) as i64 * 2).collect();
        let set = KeyBloom::new(members.len(), members.iter().copied());
        assert!(members.iter().all(|&k| set.contains(k)), "seed {seed}");
        let others = (0..100_000).filter(|_| set.contains(rng.below(1 << 40) as i64 * 2 + 1)).count();
        assert!(others < 3_000, "seed {seed}: {others} of 100000 non-members pass");
        let f = Filter::Bloom { col: 3, set };
        let mut bytes = Vec::new();
        f.encode(&mut Enc::new(&mut bytes));
        assert_eq!(Filter::decode(&mut Dec::new(&bytes)).unwrap(), f);
        assert_eq!(f.max_column(), Some(3));
        let cols = Filter::And(vec![Filter::CmpCols { a: 11, op: CmpOp::Lt, b: 12 }, f.clone()]);
        let mut b2 = Vec::new();
        cols.encode(&mut Enc::new(&mut b2));
        assert_eq!(Filter::decode(&mut Dec::new(&b2)).unwrap(), cols);
        assert_eq!(cols.max_column(), Some(12));
        // A size that is not a power of two, or too large, is refused.
        let mut bad = bytes.clone();
        bad[3..7].copy_from_slice(&3u32.to_le_bytes());
        assert!(Filter::decode(&mut Dec::new(&bad)).is_err());
    }

    #[test]
    fn three_valued_logic() {
        let t = Table {
            id: 1,
            database: "d".into(),
            name: "t".into(),
            columns: vec![
                Column::new("id", T::Int { unsigned: false }).not_null(),
                Column::new("x", T::Int { unsigned: false }),
            ],
            primary_key: vec![0],
            partition_key: vec![0],
            indexes: vec![],
            partition_count: 1,
            groups: 0,
            ttl: None,
            comment: String::new(),
        };
        let l = RowLayout::new(&t);
        let mut row = Vec::new();
        l.encode_row(&[Value::Int(1), Value::Null], &mut row).unwrap();
        let gt = Filter::Cmp { col: 1, op: CmpOp::Gt, value: Value::Int(0) };
        assert_eq!(gt.eval(&l, &row), None);
        assert_eq!(Filter::Not(Box::new(gt.clone())).eval(&l, &row), None);
        assert_eq!(Filter::Or(vec![gt.clone(), Filter::IsNull(1)]).eval(&l, &row), Some(true));
        assert_eq!(
            Filter::And(vec![gt.clone(), Filter::Cmp { col: 0, op: CmpOp::Eq, value: Value::Int(2) }]).eval(&l, &row),
            Some(false)
        );
        let inf = Filter::In { col: 0, values: vec![Value::Int(5), Value::Int(1)] };
        assert!(inf.passes(&l, &row));
        let mut b = Vec::new();
        let f = Filter::And(vec![inf, Filter::Not(Box::new(gt))]);
        f.encode(&mut Enc::new(&mut b));
        assert_eq!(Filter::decode(&mut Dec::new(&b)).unwrap(), f);
    }
}
