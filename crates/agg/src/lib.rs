//! Aggregation pushed down to the data node's scans (RonSQL-style): an ldm evaluates an
//! aggregation program over the stored rows of a scan batch — grouping expressions and
//! COUNT / SUM / MIN / MAX / variance accumulators whose arguments are arithmetic over columns
//! and literals — and returns one partial row per group instead of the rows; the client merges
//! the partials of every batch and partition (SUM of SUMs, counts added, variances combined).
//! Partial rows are the group values followed by the accumulator slots, each encoded with
//! `Value::encode`.
//!
//! Arithmetic follows MySQL's rules as the SQL layer evaluates them (`tern_sql::eval::arith`):
//! integers stay BIGINT (overflow is an error), DECIMAL is exact (sum: the larger scale;
//! product: the scales added), anything with FLOAT/DOUBLE is a double. An error (overflow) fails
//! the scan with `ValueOutOfRange`; the SQL layer then evaluates the rows itself, which gives
//! MySQL's own error text.

mod fast;

use std::cmp::Ordering;
use tern_types::bin::{Dec, DecodeError, DecodeResult, Enc};
use tern_types::row::RowLayout;
use tern_types::value::{Value, rescale};

/// Nesting limit of a pushed expression (a hostile program cannot exhaust the stack).
pub const EXPR_DEPTH_MAX: usize = 32;
/// Nodes of all expressions of one program.
pub const EXPR_NODES_MAX: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggOp {
    /// COUNT(expr), or COUNT(*) without an argument.
    Count,
    Sum,
    Min,
    Max,
    /// Population variance state (count, mean, sum of squared deviations) from which the
    /// SQL layer derives VAR_POP / VAR_SAMP / STDDEV_POP / STDDEV_SAMP.
    Var,
}

impl AggOp {
    /// Accumulator slots the operation keeps in a partial row.
    pub fn slots(self) -> usize {
        match self {
            AggOp::Var => 3,
            _ => 1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arith {
    Add,
    Sub,
    Mul,
}

/// An expression evaluated per stored row.
#[derive(Debug, Clone, PartialEq)]
pub enum AggExpr {
    Col(u16),
    Lit(Value),
    Neg(Box<AggExpr>),
    Bin(Arith, Box<AggExpr>, Box<AggExpr>),
}

/// Why a row could not be folded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggError(pub String);

type AResult<T> = Result<T, AggError>;

fn out_of_range(what: &str) -> AggError {
    AggError(format!("{what} value is out of range in a pushed aggregate"))
}

impl AggExpr {
    pub fn eval(&self, layout: &RowLayout, row: &[u8]) -> AResult<Value> {
        match self {
            AggExpr::Col(c) => layout.get(row, *c as usize).map_err(|e| AggError(e.message)),
            AggExpr::Lit(v) => Ok(v.clone()),
            AggExpr::Neg(a) => neg(a.eval(layout, row)?),
            AggExpr::Bin(op, a, b) => arith(*op, &a.eval(layout, row)?, &b.eval(layout, row)?),
        }
    }

    /// (depth, nodes) of the tree, as `decode` counts them (a leaf is depth 0).
    fn size(&self) -> (usize, usize) {
        match self {
            AggExpr::Col(_) | AggExpr::Lit(_) => (0, 1),
            AggExpr::Neg(a) => {
                let (d, n) = a.size();
                (d + 1, n + 1)
            }
            AggExpr::Bin(_, a, b) => {
                let ((da, na), (db, nb)) = (a.size(), b.size());
                (da.max(db) + 1, na + nb + 1)
            }
        }
    }

    fn max_column(&self) -> Option<u16> {
        match self {
            AggExpr::Col(c) => Some(*c),
            AggExpr::Lit(_) => None,
            AggExpr::Neg(a) => a.max_column(),
            AggExpr::Bin(_, a, b) => a.max_column().max(b.max_column()),
        }
    }

    fn encode(&self, e: &mut Enc) {
        match self {
            AggExpr::Col(c) => {
                e.u8(0);
                e.u16(*c);
            }
            AggExpr::Lit(v) => {
                e.u8(1);
                v.encode(e);
            }
            AggExpr::Neg(a) => {
                e.u8(2);
                a.encode(e);
            }
            AggExpr::Bin(op, a, b) => {
                e.u8(match op {
                    Arith::Add => 3,
                    Arith::Sub => 4,
                    Arith::Mul => 5,
                });
                a.encode(e);
                b.encode(e);
            }
        }
    }

    fn decode(d: &mut Dec, depth: usize, nodes: &mut usize) -> DecodeResult<AggExpr> {
        *nodes += 1;
        if depth > EXPR_DEPTH_MAX || *nodes > EXPR_NODES_MAX {
            return Err(DecodeError("aggregate expression too deep or too large"));
        }
        Ok(match d.u8()? {
            0 => AggExpr::Col(d.u16()?),
            1 => AggExpr::Lit(Value::decode(d)?),
            2 => AggExpr::Neg(Box::new(AggExpr::decode(d, depth + 1, nodes)?)),
            t @ 3..=5 => {
                let op = match t {
                    3 => Arith::Add,
                    4 => Arith::Sub,
                    _ => Arith::Mul,
                };
                let a = AggExpr::decode(d, depth + 1, nodes)?;
                let b = AggExpr::decode(d, depth + 1, nodes)?;
                AggExpr::Bin(op, Box::new(a), Box::new(b))
            }
            _ => return Err(DecodeError("bad aggregate expression")),
        })
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Num {
    Int,
    Dec,
    Dbl,
}

fn num_kind(v: &Value) -> Option<Num> {
    Some(match v {
        Value::Int(_) | Value::UInt(_) | Value::Year(_) | Value::Bit(_) => Num::Int,
        Value::Decimal { .. } => Num::Dec,
        Value::Float(_) | Value::Double(_) => Num::Dbl,
        _ => return None,
    })
}

fn as_dec(v: &Value) -> Option<(i128, u8)> {
    match v {
        Value::Decimal { v, scale } => Some((*v, *scale)),
        o => Some((o.as_i128()?, 0)),
    }
}

fn dec_result(v: i128, scale: u8) -> AResult<Value> {
    if v.unsigned_abs() >= 10u128.pow(38) { Err(out_of_range("DECIMAL")) } else { Ok(Value::Decimal { v, scale }) }
}

/// Unary minus, as the SQL layer evaluates it.
pub fn neg(v: Value) -> AResult<Value> {
    Ok(match v {
        Value::Null => Value::Null,
        Value::Int(i) => Value::Int(i.checked_neg().ok_or_else(|| out_of_range("BIGINT"))?),
        Value::UInt(u) if u <= 1 << 63 => Value::Int((u as i128).wrapping_neg() as i64),
        Value::UInt(_) => return Err(out_of_range("BIGINT")),
        Value::Decimal { v, scale } => Value::Decimal { v: -v, scale },
        o => Value::Double(-o.as_f64().ok_or_else(|| AggError("not a number".into()))?),
    })
}

/// `a op b` over numbers, as the SQL layer evaluates it (NULL in, NULL out).
pub fn arith(op: Arith, a: &Value, b: &Value) -> AResult<Value> {
    if a.is_null() || b.is_null() {
        return Ok(Value::Null);
    }
    let (Some(ka), Some(kb)) = (num_kind(a), num_kind(b)) else {
        return Err(AggError("arithmetic on a value that is not a number".into()));
    };
    let kind = if ka == Num::Dbl || kb == Num::Dbl {
        Num::Dbl
    } else if ka == Num::Dec || kb == Num::Dec {
        Num::Dec
    } else {
        Num::Int
    };
    match kind {
        Num::Int => {
            let (x, y) = (a.as_i128().unwrap_or(0), b.as_i128().unwrap_or(0));
            let r = match op {
                Arith::Add => x + y,
                Arith::Sub => x - y,
                Arith::Mul => x.checked_mul(y).ok_or_else(|| out_of_range("BIGINT"))?,
            };
            if matches!(a, Value::UInt(_)) || matches!(b, Value::UInt(_)) {
                if r < 0 || r > u64::MAX as i128 {
                    return Err(out_of_range("BIGINT UNSIGNED"));
                }
                return Ok(if r <= i64::MAX as i128 { Value::Int(r as i64) } else { Value::UInt(r as u64) });
            }
            i64::try_from(r).map(Value::Int).map_err(|_| out_of_range("BIGINT"))
        }
        Num::Dec => {
            let (Some((x, sx)), Some((y, sy))) = (as_dec(a), as_dec(b)) else { return Ok(Value::Null) };
            match op {
                Arith::Mul => dec_result(x.checked_mul(y).ok_or_else(|| out_of_range("DECIMAL"))?, sx + sy),
                Arith::Add | Arith::Sub => {
                    let s = sx.max(sy);
                    let xs = rescale(x, sx, s).ok_or_else(|| out_of_range("DECIMAL"))?;
                    let ys = rescale(y, sy, s).ok_or_else(|| out_of_range("DECIMAL"))?;
                    dec_result(
                        if op == Arith::Add { xs.checked_add(ys) } else { xs.checked_sub(ys) }
                            .ok_or_else(|| out_of_range("DECIMAL"))?,
                        s,
                    )
                }
            }
        }
        Num::Dbl => {
            let (x, y) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
            let r = match op {
                Arith::Add => x + y,
                Arith::Sub => x - y,
                Arith::Mul => x * y,
            };
            if !r.is_finite() {
                return Err(out_of_range("DOUBLE"));
            }
            Ok(Value::Double(r))
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Aggregation {
    /// Grouping expressions (empty: one group).
    pub group_by: Vec<AggExpr>,
    /// Operations and their arguments (None: COUNT(*)).
    pub aggs: Vec<(AggOp, Option<AggExpr>)>,
}

/// Groups and accumulators a scan may hold at once; beyond, rows stream as partial groups of one.
pub const GROUPS_MAX: usize = 65_536;

impl Aggregation {
    pub fn encode(&self, e: &mut Enc) {
        e.u32(self.group_by.len() as u32);
        for g in &self.group_by {
            g.encode(e);
        }
        e.u32(self.aggs.len() as u32);
        for (op, arg) in &self.aggs {
            e.u8(match op {
                AggOp::Count => 0,
                AggOp::Sum => 1,
                AggOp::Min => 2,
                AggOp::Max => 3,
                AggOp::Var => 4,
            });
            match arg {
                None => e.u8(0),
                Some(x) => {
                    e.u8(1);
                    x.encode(e);
                }
            }
        }
    }

    pub fn decode(d: &mut Dec) -> DecodeResult<Aggregation> {
        let mut nodes = 0;
        let n = d.u32()? as usize;
        if n > 4096 {
            return Err(DecodeError("too many grouping expressions"));
        }
        let group_by = (0..n).map(|_| AggExpr::decode(d, 0, &mut nodes)).collect::<DecodeResult<_>>()?;
        let n = d.u32()? as usize;
        if n > 4096 {
            return Err(DecodeError("too many aggregates"));
        }
        let mut aggs = Vec::with_capacity(n);
        for _ in 0..n {
            let op = match d.u8()? {
                0 => AggOp::Count,
                1 => AggOp::Sum,
                2 => AggOp::Min,
                3 => AggOp::Max,
                4 => AggOp::Var,
                _ => return Err(DecodeError("bad aggregate")),
            };
            let arg = match d.u8()? {
                0 => None,
                1 => Some(AggExpr::decode(d, 0, &mut nodes)?),
                _ => return Err(DecodeError("bad aggregate argument tag")),
            };
            if op != AggOp::Count && arg.is_none() {
                return Err(DecodeError("aggregate without an argument"));
            }
            aggs.push((op, arg));
        }
        Ok(Aggregation { group_by, aggs })
    }

    /// Whether the data node will take the program (`decode`'s depth and size limits): a
    /// planner builds only programs that pass.
    pub fn within_limits(&self) -> bool {
        let mut nodes = 0;
        for x in self.group_by.iter().chain(self.aggs.iter().filter_map(|a| a.1.as_ref())) {
            let (d, n) = x.size();
            nodes += n;
            if d > EXPR_DEPTH_MAX {
                return false;
            }
        }
        nodes <= EXPR_NODES_MAX
    }

    /// The largest column it reads (to check it against the table).
    pub fn max_column(&self) -> Option<u16> {
        self.group_by.iter().chain(self.aggs.iter().filter_map(|a| a.1.as_ref())).filter_map(AggExpr::max_column).max()
    }

    /// Accumulator slots of a partial row.
    pub fn slot_count(&self) -> usize {
        self.aggs.iter().map(|(op, _)| op.slots()).sum()
    }

    /// COUNT(*) of one group: what an ordered index can answer by counting its entries.
    pub fn is_count_star(&self) -> bool {
        self.group_by.is_empty() && matches!(self.aggs[..], [(AggOp::Count, None)])
    }

    /// The partial row of `is_count_star` over `n` rows (none for no rows, as `Partial` gives).
    pub fn count_partial(n: u64) -> Vec<Vec<u8>> {
        if n == 0 {
            return Vec::new();
        }
        let mut buf = Vec::new();
        Value::Int(i64::try_from(n).unwrap_or(i64::MAX)).encode(&mut Enc::new(&mut buf));
        vec![buf]
    }

    /// Initial accumulator slots.
    pub fn start(&self) -> Vec<Value> {
        let mut out = Vec::with_capacity(self.slot_count());
        for (op, _) in &self.aggs {
            match op {
                AggOp::Count => out.push(Value::Int(0)),
                AggOp::Var => out.extend([Value::Int(0), Value::Double(0.0), Value::Double(0.0)]),
                _ => out.push(Value::Null),
            }
        }
        out
    }

    /// Folds one row's argument values (one per aggregate; COUNT(*) takes any non-NULL value)
    /// into `acc` (laid out as `start`).
    pub fn fold_values(&self, acc: &mut [Value], args: &[Value]) {
        let mut i = 0;
        for ((op, _), v) in self.aggs.iter().zip(args) {
            fold_value(*op, &mut acc[i..i + op.slots()], v.clone());
            i += op.slots();
        }
    }

    /// Merges the accumulator slots of a partial into `acc` (both laid out as `start`).
    pub fn merge(&self, acc: &mut [Value], part: &[Value]) {
        let mut i = 0;
        for (op, _) in &self.aggs {
            let n = op.slots();
            if i + n > acc.len() || i + n > part.len() {
                return;
            }
            match op {
                AggOp::Count => acc[i] = Value::Int(int_of(&acc[i]).saturating_add(int_of(&part[i]))),
                AggOp::Sum => add_sum(&mut acc[i], &part[i]),
                AggOp::Min | AggOp::Max => min_max(*op, &mut acc[i], &part[i]),
                AggOp::Var => {
                    let (na, ma, sa) = var_of(&acc[i..i + 3]);
                    let (nb, mb, sb) = var_of(&part[i..i + 3]);
                    let (n, m, s) = var_merge((na, ma, sa), (nb, mb, sb));
                    acc[i] = Value::Int(n);
                    acc[i + 1] = Value::Double(m);
                    acc[i + 2] = Value::Double(s);
                }
            }
            i += n;
        }
    }
}

fn int_of(v: &Value) -> i64 {
    v.as_i128().unwrap_or(0) as i64
}

fn var_of(s: &[Value]) -> (i64, f64, f64) {
    (int_of(&s[0]), s[1].as_f64().unwrap_or(0.0), s[2].as_f64().unwrap_or(0.0))
}

/// Combines two (count, mean, M2) variance states (Chan et al.'s pairwise update).
pub fn var_merge(a: (i64, f64, f64), b: (i64, f64, f64)) -> (i64, f64, f64) {
    if a.0 == 0 {
        return b;
    }
    if b.0 == 0 {
        return a;
    }
    let n = a.0 + b.0;
    let delta = b.1 - a.1;
    let mean = a.1 + delta * b.0 as f64 / n as f64;
    let m2 = a.2 + b.2 + delta * delta * (a.0 as f64) * (b.0 as f64) / n as f64;
    (n, mean, m2)
}

/// Folds one value into a variance state (the recurrence MySQL's VARIANCE uses).
fn var_add(s: &mut [Value], x: f64) {
    let (n, mean, m2) = var_of(s);
    let n = n + 1;
    let new_mean = mean + (x - mean) / n as f64;
    s[0] = Value::Int(n);
    s[1] = Value::Double(new_mean);
    s[2] = Value::Double(m2 + (x - mean) * (x - new_mean));
}

/// Adds `v` to a SUM: integers and decimals exactly (as scaled i128), floats as doubles.
fn add_sum(acc: &mut Value, v: &Value) {
    let as_dec = |v: &Value| -> Option<(i128, u8)> {
        match v {
            Value::Int(i) => Some((*i as i128, 0)),
            Value::UInt(u) => Some((*u as i128, 0)),
            Value::Year(y) => Some((*y as i128, 0)),
            Value::Bit(b) => Some((*b as i128, 0)),
            Value::Decimal { v, scale } => Some((*v, *scale)),
            _ => None,
        }
    };
    if v.is_null() {
        return;
    }
    *acc = match (&*acc, as_dec(v)) {
        (Value::Null, Some((x, s))) => Value::Decimal { v: x, scale: s },
        (Value::Decimal { v: a, scale: sa }, Some((x, s))) if *sa == s => {
            Value::Decimal { v: a.saturating_add(x), scale: s }
        }
        (Value::Decimal { v: a, scale: sa }, Some((x, s))) => {
            let t = (*sa).max(s);
            let a2 = rescale(*a, *sa, t).unwrap_or(*a);
            let x2 = rescale(x, s, t).unwrap_or(x);
            Value::Decimal { v: a2.saturating_add(x2), scale: t }
        }
        (acc, _) => Value::Double(acc.as_f64().unwrap_or(0.0) + v.as_f64().unwrap_or(0.0)),
    };
}

fn min_max(op: AggOp, acc: &mut Value, v: &Value) {
    if v.is_null() {
        return;
    }
    let better = match acc.cmp_sql(v) {
        None => acc.is_null(),
        Some(o) => (op == AggOp::Min && o == Ordering::Greater) || (op == AggOp::Max && o == Ordering::Less),
    };
    if better {
        *acc = v.clone();
    }
}

/// Folds one row's argument value into the slots of `op`.
fn fold_value(op: AggOp, slots: &mut [Value], v: Value) {
    match op {
        AggOp::Count => {
            if !v.is_null() {
                slots[0] = Value::Int(int_of(&slots[0]) + 1);
            }
        }
        AggOp::Sum => add_sum(&mut slots[0], &v),
        AggOp::Min | AggOp::Max => min_max(op, &mut slots[0], &v),
        AggOp::Var => {
            if let Some(x) = v.as_f64() {
                var_add(slots, x);
            }
        }
    }
}

/// Where a grouping expression's key bytes come from: a fixed-width column's stored bytes (a
/// null flag, then the bytes), a variable-length column's (a null flag, the length in one byte
/// below 255 or 255 and four bytes, the bytes), or the encoded value of anything else (a key
/// column, an expression).
#[derive(Debug, Clone, Copy)]
enum KeyCol {
    Fixed { at: usize, width: usize, null_bit: Option<u32> },
    Var { idx: usize, null_bit: Option<u32> },
    Eval,
}

impl KeyCol {
    fn of(g: &AggExpr, layout: &RowLayout) -> KeyCol {
        let AggExpr::Col(c) = g else { return KeyCol::Eval };
        let c = *c as usize;
        if let Some((at, width, null_bit)) = layout.fixed_at(c) {
            KeyCol::Fixed { at, width, null_bit }
        } else if let Some((idx, null_bit)) = layout.var_at(c) {
            KeyCol::Var { idx, null_bit }
        } else {
            KeyCol::Eval
        }
    }
}

fn damaged() -> AggError {
    AggError("damaged row in a pushed aggregate".into())
}

/// Appends a few bytes without a call to `memcpy` (group keys are mostly short).
#[inline(always)]
fn put(key: &mut Vec<u8>, b: &[u8]) {
    if b.len() <= 16 {
        for &x in b {
            key.push(x);
        }
    } else {
        key.extend_from_slice(b);
    }
}

/// Equal group keys (padded to whole words, `pad`): short ones compared a word at a time, not
/// byte by byte or by a call to `memcmp`.
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    let word = |k: &[u8], i: usize| u64::from_le_bytes(k[i..i + 8].try_into().expect("8 bytes"));
    a.len() == b.len()
        && if a.len() <= 32 && a.len().is_multiple_of(8) {
            (0..a.len()).step_by(8).all(|i| word(a, i) == word(b, i))
        } else {
            a == b
        }
}

/// Pads a group key with zeros to a whole number of words. Keys are self-delimiting (every part
/// has a flag and a fixed or stated length), so padding keeps distinct keys distinct.
#[inline(always)]
fn pad(key: &mut Vec<u8>) {
    while !key.len().is_multiple_of(8) {
        key.push(0);
    }
}

/// A padded key (`pad`) of at most 16 bytes as one number (zero-extended: still one number per
/// key, as keys are self-delimiting).
#[inline(always)]
fn packed(key: &[u8]) -> u128 {
    let word = |i: usize| key.get(i..i + 8).map_or(0, |w| u64::from_le_bytes(w.try_into().expect("8 bytes")));
    (word(8) as u128) << 64 | word(0) as u128
}

/// The first `n` (≤ 8) bytes of `b` as a little-endian number.
#[inline(always)]
fn le_bytes(b: &[u8], n: usize) -> Option<u64> {
    if n == 8 {
        return b.first_chunk::<8>().map(|w| u64::from_le_bytes(*w));
    }
    match b.first_chunk::<8>() {
        // A whole word and a mask: no byte-by-byte loop.
        Some(w) => Some(u64::from_le_bytes(*w) & ((1u64 << (8 * n)) - 1)),
        None => Some(b.get(..n)?.iter().rev().fold(0u64, |acc, &x| acc << 8 | x as u64)),
    }
}

/// A row's group key as `Partial::build_key` makes it, padded and `packed`, when it has at most
/// 16 bytes of columns' stored bytes (no part longer than 8 bytes); None otherwise (the caller
/// builds the bytes). Made in registers: a key written a byte at a time and read back as a word
/// would wait on its stores.
#[inline(always)]
fn small_key(key_cols: &[KeyCol], layout: &RowLayout, body: &[u8]) -> Option<u128> {
    let mut k = 0u128;
    let mut pos = 0usize;
    for kc in key_cols {
        match *kc {
            KeyCol::Fixed { at, width, null_bit } => {
                if !tern_types::row::is_null(body, null_bit) {
                    if width > 8 || pos + 1 + width > 16 {
                        return None;
                    }
                    let v = le_bytes(body.get(at..)?, width)?;
                    k |= 1 << (8 * pos) | (v as u128) << (8 * (pos + 1));
                    pos += width;
                }
            }
            KeyCol::Var { idx, null_bit } => {
                if !tern_types::row::is_null(body, null_bit) {
                    let b = layout.var_bytes(body, idx)?;
                    let n = b.len();
                    if n > 8 || pos + 2 + n > 16 {
                        return None;
                    }
                    let v = if n == 0 { 0 } else { le_bytes(b, n)? };
                    k |= 1 << (8 * pos) | (n as u128) << (8 * (pos + 1)) | (v as u128) << (8 * (pos + 2));
                    pos += 1 + n;
                }
            }
            KeyCol::Eval => return None,
        }
        // The flag byte (0 for NULL).
        pos += 1;
        if pos > 16 {
            return None;
        }
    }
    Some(k)
}

/// Up to this many groups a row's group is found by comparing keys, not by hashing.
const FEW_GROUPS: usize = 8;

/// Partial groups being built from stored rows: a row's group is the previous row's when their
/// keys are equal, else found by comparing keys (up to FEW_GROUPS groups) or one hash lookup (no
/// allocation for a row of a known group); groups kept in first-seen order. The program is compiled for the
/// table's layout on the first row (`aggfast`); the `Value` interpreter runs what cannot be.
#[derive(Default)]
pub struct Partial<'r> {
    /// Group key bytes -> index in `entries` (made once there are more than FEW_GROUPS).
    index: tern_types::hash::FastMap<Vec<u8>, usize>,
    /// Every group's key bytes, in `entries` order.
    keys: Vec<Vec<u8>>,
    /// (group values, accumulator slots) per group (the interpreter's slots).
    entries: Vec<(Vec<Value>, Vec<Value>)>,
    key: Vec<u8>,
    /// How each grouping expression's key bytes are read (settled on the first row).
    key_cols: Vec<KeyCol>,
    /// The groups with keys of at most 16 bytes (`packed`), while there are at most FEW_GROUPS.
    small: Vec<(u128, u32)>,
    /// The previous row's group and its key bytes.
    last: Option<usize>,
    last_key: Vec<u8>,
    /// None: not compiled yet; Some(None): not compilable.
    fast: Option<Option<crate::fast::Fast>>,
    /// The compiled program's accumulators of every group.
    fast_accs: crate::fast::Accs,
    /// Rows waiting for the compiled program (borrowed from the scanned partition).
    batch: crate::fast::Batch<'r>,
}

impl<'r> Partial<'r> {
    /// A partial that never compiles its program (tests compare the two).
    #[cfg(test)]
    pub(crate) fn interpreted() -> Partial<'r> {
        Partial { fast: Some(None), ..Partial::default() }
    }

    pub fn add(&mut self, a: &Aggregation, layout: &RowLayout, row: &'r [u8]) -> AResult<()> {
        if self.key_cols.len() != a.group_by.len() {
            self.key_cols = a.group_by.iter().map(|g| KeyCol::of(g, layout)).collect();
        }
        if self.fast.is_none() {
            let fast = crate::fast::Fast::compile(a, layout);
            if let Some(f) = &fast {
                self.fast_accs = f.accs();
            }
            self.fast = Some(fast);
        }
        let body = layout.body(row);
        // A short key among few groups is made in registers and compared with every group's
        // without a branch per group (which group a row has is often unpredictable, as in TPC-H
        // Q1); otherwise, or for a new group, the key's bytes are built.
        let mut g = usize::MAX;
        if self.keys.len() <= FEW_GROUPS
            && let Some(k) = small_key(&self.key_cols, layout, body)
        {
            for &(x, i) in &self.small {
                if x == k {
                    g = i as usize;
                }
            }
        }
        if g == usize::MAX {
            self.build_key(a, layout, row, body)?;
            // Rows of one group often come together (a scan in key order): the previous row's
            // group is tried before the lookup.
            g = match self.last {
                Some(g) if same(&self.last_key, &self.key) => g,
                _ => self.lookup(a, layout, row)?,
            };
            self.last = Some(g);
            std::mem::swap(&mut self.key, &mut self.last_key);
        }
        let fast = self.fast.as_ref().and_then(|f| f.as_ref());
        if let Some(f) = fast {
            f.push(&mut self.batch, body, g as u32);
            if self.batch.len() >= crate::fast::BATCH_ROWS {
                return f.flush(&mut self.batch, &mut self.fast_accs);
            }
            return Ok(());
        }
        let accs = &mut self.entries[g].1;
        let mut i = 0;
        for (op, arg) in &a.aggs {
            let v = match arg {
                None => Value::Int(1),
                Some(x) => x.eval(layout, row)?,
            };
            fold_value(*op, &mut accs[i..i + op.slots()], v);
            i += op.slots();
        }
        Ok(())
    }

    /// Builds the row's group key bytes in `self.key` (padded).
    fn build_key(&mut self, a: &Aggregation, layout: &RowLayout, row: &[u8], body: &[u8]) -> AResult<()> {
        self.key.clear();
        for (kc, g) in self.key_cols.iter().zip(&a.group_by) {
            match *kc {
                KeyCol::Fixed { at, width, null_bit } => {
                    if tern_types::row::is_null(body, null_bit) {
                        self.key.push(0);
                    } else {
                        self.key.push(1);
                        put(&mut self.key, body.get(at..at + width).ok_or_else(damaged)?);
                    }
                }
                KeyCol::Var { idx, null_bit } => {
                    if tern_types::row::is_null(body, null_bit) {
                        self.key.push(0);
                    } else {
                        let b = layout.var_bytes(body, idx).ok_or_else(damaged)?;
                        self.key.push(1);
                        // The length in one byte when short (TPC-H's flags: a 6-byte key).
                        match u8::try_from(b.len()) {
                            Ok(n) if n < u8::MAX => self.key.push(n),
                            _ => {
                                self.key.push(u8::MAX);
                                put(&mut self.key, &(b.len() as u32).to_le_bytes());
                            }
                        }
                        put(&mut self.key, b);
                    }
                }
                KeyCol::Eval => {
                    // A key column or an expression: its value is the group key.
                    let v = g.eval(layout, row)?;
                    self.key.push(2);
                    v.encode(&mut Enc::new(&mut self.key));
                }
            }
        }
        pad(&mut self.key);
        Ok(())
    }

    /// The group of the key in `self.key`, made when new (its values evaluated from `row`).
    fn lookup(&mut self, a: &Aggregation, layout: &RowLayout, row: &[u8]) -> AResult<usize> {
        // A few groups (TPC-H Q1 has four) are compared in turn rather than hashed.
        if self.keys.len() <= FEW_GROUPS {
            if let Some(g) = self.keys.iter().position(|k| same(k, &self.key)) {
                return Ok(g);
            }
        } else if let Some(&g) = self.index.get(&self.key[..]) {
            return Ok(g);
        }
        // A new group (rare): its values are evaluated once more, rather than kept for every row.
        let vals = a.group_by.iter().map(|g| g.eval(layout, row)).collect::<AResult<Vec<_>>>()?;
        let g = self.entries.len();
        match self.fast.as_ref().and_then(|f| f.as_ref()) {
            Some(_) => {
                self.entries.push((vals, Vec::new()));
                self.fast_accs.push_group();
            }
            None => self.entries.push((vals, a.start())),
        }
        // Only while groups are found by their packed keys (at most FEW_GROUPS).
        if self.key.len() <= 16 && self.keys.len() <= FEW_GROUPS {
            self.small.push((packed(&self.key), g as u32));
        }
        self.keys.push(self.key.clone());
        if self.keys.len() > FEW_GROUPS {
            if self.index.is_empty() {
                self.index.extend(self.keys.iter().cloned().enumerate().map(|(g, k)| (k, g)));
            } else {
                self.index.insert(self.key.clone(), g);
            }
        }
        Ok(g)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Folds the rows still buffered for the compiled program.
    fn flush(&mut self) -> AResult<()> {
        match &self.fast {
            Some(Some(f)) => f.flush(&mut self.batch, &mut self.fast_accs),
            _ => Ok(()),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The partial rows (group values, then accumulator slots), in first-seen order (an error
    /// of the rows still buffered fails it as one in `add` would).
    pub fn finish(mut self) -> AResult<Vec<Vec<u8>>> {
        self.flush()?;
        if let Some(Some(f)) = &self.fast {
            for (g, e) in self.entries.iter_mut().enumerate() {
                e.1 = f.values(&self.fast_accs, g);
            }
        }
        let mut out = Vec::with_capacity(self.entries.len());
        for (vals, accs) in self.entries {
            let mut buf = Vec::new();
            let mut e = Enc::new(&mut buf);
            for v in vals.iter().chain(accs.iter()) {
                v.encode(&mut e);
            }
            out.push(buf);
        }
        Ok(out)
    }
}

/// Splits a partial row into its group values and accumulator slots.
pub fn decode_partial(a: &Aggregation, bytes: &[u8]) -> DecodeResult<(Vec<Value>, Vec<Value>)> {
    let mut d = Dec::new(bytes);
    let groups = (0..a.group_by.len()).map(|_| Value::decode(&mut d)).collect::<DecodeResult<Vec<_>>>()?;
    let accs = (0..a.slot_count()).map(|_| Value::decode(&mut d)).collect::<DecodeResult<Vec<_>>>()?;
    Ok((groups, accs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_types::schema::{Column, ColumnType, Table};

    fn col(c: u16) -> Box<AggExpr> {
        Box::new(AggExpr::Col(c))
    }

    fn dec(v: i128, scale: u8) -> Value {
        Value::Decimal { v, scale }
    }

    #[test]
    fn partial_groups_expressions_and_merge() {
        let t = Table::new(
            "d",
            "t",
            vec![
                Column::new("id", ColumnType::Int { unsigned: false }).not_null(),
                Column::new("g", ColumnType::VarChar { len: 5 }),
                Column::new("x", ColumnType::Decimal { precision: 10, scale: 2, unsigned: false }),
            ],
            vec![0],
        );
        let layout = RowLayout::new(&t);
        // x * (1 - x) with a literal decimal; id % ... grouping by g and by id + 1 (a key column
        // inside an expression).
        let one = Box::new(AggExpr::Lit(dec(100, 2)));
        let a = Aggregation {
            group_by: vec![AggExpr::Col(1)],
            aggs: vec![
                (AggOp::Count, None),
                (AggOp::Count, Some(AggExpr::Col(2))),
                (AggOp::Sum, Some(AggExpr::Col(2))),
                (AggOp::Max, Some(AggExpr::Col(0))),
                (AggOp::Sum, Some(AggExpr::Bin(Arith::Mul, col(2), Box::new(AggExpr::Bin(Arith::Sub, one, col(2)))))),
                (AggOp::Var, Some(AggExpr::Col(0))),
            ],
        };
        let stored: Vec<Vec<u8>> = [(1, "a", Some(150)), (2, "b", None), (3, "a", Some(25)), (4, "a", None)]
            .into_iter()
            .map(|(id, g, x)| {
                let vals = vec![Value::Int(id), Value::str(g), x.map(|v| dec(v, 2)).unwrap_or(Value::Null)];
                let mut row = Vec::new();
                layout.encode_row(&vals, &mut row).unwrap();
                row
            })
            .collect();
        let mut p = Partial::default();
        for row in &stored {
            p.add(&a, &layout, row).unwrap();
        }
        let rows = p.finish().unwrap();
        assert_eq!(rows.len(), 2);
        let (g, acc) = decode_partial(&a, &rows[0]).unwrap();
        assert_eq!(g, vec![Value::str("a")]);
        // 1.50 * (1.00 - 1.50) + 0.25 * (1.00 - 0.25) = -0.75 + 0.1875
        assert_eq!(&acc[..5], &[Value::Int(3), Value::Int(2), dec(175, 2), Value::Int(4), dec(-5625, 4)]);
        // ids 1, 3, 4: mean 8/3, M2 = 1/9*(25 + 1 + 16) = 42/9
        assert_eq!(acc[5], Value::Int(3));
        assert!((acc[6].as_f64().unwrap() - 8.0 / 3.0).abs() < 1e-12);
        assert!((acc[7].as_f64().unwrap() - 42.0 / 9.0).abs() < 1e-12);
        // Merging two partials of the same group.
        let mut merged = a.start();
        a.merge(&mut merged, &acc);
        a.merge(&mut merged, &acc);
        assert_eq!(&merged[..5], &[Value::Int(6), Value::Int(4), dec(350, 2), Value::Int(4), dec(-11250, 4)]);
        // Six values (1, 3, 4 twice): same mean, M2 doubled.
        assert_eq!(merged[5], Value::Int(6));
        assert!((merged[7].as_f64().unwrap() - 84.0 / 9.0).abs() < 1e-12);
        let (g, acc) = decode_partial(&a, &rows[1]).unwrap();
        assert_eq!((g, acc[2].clone()), (vec![Value::str("b")], Value::Null));
        let mut buf = Vec::new();
        a.encode(&mut Enc::new(&mut buf));
        assert_eq!(Aggregation::decode(&mut Dec::new(&buf)).unwrap(), a);
    }

    /// Random rows (runs of equal groups and scattered ones) grouped by a nullable fixed-width
    /// column, nullable variable-length ones (empty, prefix and long strings) and a key column: every
    /// group's count and sum equal a naive count by decoded values. Prints the seed.
    #[test]
    fn group_keys_from_stored_bytes() {
        let seed = tern_testkit::seed();
        println!("seed {seed} (rerun with TERN_SEED={seed})");
        let mut rng = tern_types::rng::Rng::new(seed);
        let t = Table::new(
            "d",
            "t",
            vec![
                Column::new("id", ColumnType::Int { unsigned: false }).not_null(),
                Column::new("k", ColumnType::SmallInt { unsigned: false }).not_null(),
                Column::new("t", ColumnType::TinyInt { unsigned: false }),
                Column::new("s", ColumnType::VarChar { len: 300 }),
                Column::new("u", ColumnType::VarChar { len: 300 }),
                Column::new("x", ColumnType::BigInt { unsigned: false }),
            ],
            vec![0, 1],
        );
        let layout = RowLayout::new(&t);
        let long: Vec<String> = [254, 255, 300].iter().map(|&n| "x".repeat(n)).collect();
        let strs = [
            None,
            Some(""),
            Some("a"),
            Some("ab"),
            Some("b"),
            Some("abcdefg"),
            Some("abcdefgh"),
            Some("abcdefghi"),
            Some(&long[0][..]),
            Some(&long[1][..]),
            Some(&long[2][..]),
        ];
        for group_by in [vec![2, 3], vec![3, 4], vec![1, 3], vec![4, 2, 1], vec![3], vec![2]] {
            let a = Aggregation {
                group_by: group_by.iter().map(|&c| AggExpr::Col(c)).collect(),
                aggs: vec![(AggOp::Count, None), (AggOp::Sum, Some(AggExpr::Col(5)))],
            };
            let mut naive: Vec<(Vec<Value>, i64, i128)> = Vec::new();
            let mut stored = Vec::new();
            let mut vals = Vec::new();
            for id in 0..3000 {
                if vals.is_empty() || rng.chance(30) {
                    let s = |r: &mut tern_types::rng::Rng| (*r.pick(&strs)).map_or(Value::Null, Value::str);
                    let tv = if rng.chance(20) { Value::Null } else { Value::Int(rng.below(3) as i64) };
                    vals = vec![Value::Int(id), Value::Int(rng.below(2) as i64), tv, s(&mut rng), s(&mut rng)];
                }
                vals[0] = Value::Int(id);
                let x = rng.below(1000) as i64;
                let mut row_vals = vals.clone();
                row_vals.push(Value::Int(x));
                let mut row = Vec::new();
                layout.encode_row(&row_vals, &mut row).unwrap();
                stored.push(row);
                let key: Vec<Value> = group_by.iter().map(|&c| row_vals[c as usize].clone()).collect();
                match naive.iter_mut().find(|(k, ..)| *k == key) {
                    Some(e) => {
                        e.1 += 1;
                        e.2 += x as i128;
                    }
                    None => naive.push((key, 1, x as i128)),
                }
            }
            // A key made in registers equals the built bytes, packed.
            let mut q =
                Partial { key_cols: a.group_by.iter().map(|g| KeyCol::of(g, &layout)).collect(), ..Partial::default() };
            let mut small = 0;
            for row in &stored {
                let body = layout.body(row);
                q.build_key(&a, &layout, row, body).unwrap();
                if let Some(k) = small_key(&q.key_cols, &layout, body) {
                    assert_eq!(k, packed(&q.key), "groups of {group_by:?}, seed {seed}");
                    small += 1;
                }
            }
            assert!(group_by.contains(&1) || small > 0, "seed {seed}");
            let mut p = Partial::default();
            for row in &stored {
                p.add(&a, &layout, row).unwrap();
            }
            let rows = p.finish().unwrap();
            assert_eq!(rows.len(), naive.len(), "groups of {group_by:?}, seed {seed}");
            for (r, (key, n, sum)) in rows.iter().zip(&naive) {
                let (g, acc) = decode_partial(&a, r).unwrap();
                assert_eq!(&g, key, "seed {seed}");
                assert_eq!(acc, vec![Value::Int(*n), dec(*sum, 0)], "seed {seed}");
            }
        }
    }

    #[test]
    fn grouping_by_expressions_and_key_columns() {
        let t = Table::new(
            "d",
            "t",
            vec![
                Column::new("id", ColumnType::BigInt { unsigned: false }).not_null(),
                Column::new("v", ColumnType::Double),
            ],
            vec![0],
        );
        let layout = RowLayout::new(&t);
        let a = Aggregation {
            group_by: vec![AggExpr::Bin(Arith::Sub, col(0), Box::new(AggExpr::Lit(Value::Int(1)))), AggExpr::Col(0)],
            aggs: vec![(AggOp::Sum, Some(AggExpr::Neg(col(1))))],
        };
        let stored: Vec<Vec<u8>> = [(5, 1.5), (6, 2.0), (5, 0.25)]
            .into_iter()
            .map(|(id, v)| {
                let mut row = Vec::new();
                layout.encode_row(&[Value::Int(id), Value::Double(v)], &mut row).unwrap();
                row
            })
            .collect();
        let mut p = Partial::default();
        for row in &stored {
            p.add(&a, &layout, row).unwrap();
        }
        let rows = p.finish().unwrap();
        assert_eq!(rows.len(), 2);
        let (g, acc) = decode_partial(&a, &rows[0]).unwrap();
        assert_eq!(g, vec![Value::Int(4), Value::Int(5)]);
        assert_eq!(acc, vec![Value::Double(-1.75)]);
    }

    #[test]
    fn arithmetic_follows_mysql_types_and_fails_on_overflow() {
        assert_eq!(arith(Arith::Add, &Value::Int(2), &Value::Int(3)), Ok(Value::Int(5)));
        assert_eq!(arith(Arith::Mul, &dec(150, 2), &dec(5, 1)), Ok(dec(750, 3)));
        assert_eq!(arith(Arith::Sub, &Value::Int(1), &dec(25, 2)), Ok(dec(75, 2)));
        assert_eq!(arith(Arith::Add, &Value::Int(1), &Value::Double(0.5)), Ok(Value::Double(1.5)));
        assert_eq!(arith(Arith::Add, &Value::Null, &Value::Int(1)), Ok(Value::Null));
        assert!(arith(Arith::Add, &Value::Int(i64::MAX), &Value::Int(1)).is_err());
        assert!(arith(Arith::Sub, &Value::UInt(1), &Value::Int(2)).is_err());
        assert!(arith(Arith::Mul, &Value::Double(1e300), &Value::Double(1e300)).is_err());
        assert!(neg(Value::Int(i64::MIN)).is_err());
        assert!(arith(Arith::Add, &Value::str("1"), &Value::Int(1)).is_err());
    }

    #[test]
    fn hostile_programs_are_refused() {
        // Nesting beyond the limit.
        let mut x = AggExpr::Col(0);
        for _ in 0..(EXPR_DEPTH_MAX + 5) {
            x = AggExpr::Neg(Box::new(x));
        }
        let a = Aggregation { group_by: vec![], aggs: vec![(AggOp::Sum, Some(x))] };
        assert!(!a.within_limits());
        let mut buf = Vec::new();
        a.encode(&mut Enc::new(&mut buf));
        assert!(Aggregation::decode(&mut Dec::new(&buf)).is_err());
        // At the limit: taken, and `within_limits` says so.
        let mut x = AggExpr::Col(0);
        for _ in 0..EXPR_DEPTH_MAX {
            x = AggExpr::Neg(Box::new(x));
        }
        let a = Aggregation { group_by: vec![], aggs: vec![(AggOp::Sum, Some(x))] };
        assert!(a.within_limits());
        let mut buf = Vec::new();
        a.encode(&mut Enc::new(&mut buf));
        assert!(Aggregation::decode(&mut Dec::new(&buf)).is_ok());
        // A non-COUNT aggregate without an argument.
        let a = Aggregation { group_by: vec![], aggs: vec![(AggOp::Sum, None)] };
        let mut buf = Vec::new();
        a.encode(&mut Enc::new(&mut buf));
        assert!(Aggregation::decode(&mut Dec::new(&buf)).is_err());
    }
}
