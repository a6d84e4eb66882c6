//! Aggregation pushed down to the data node's scans (RonSQL-style): an ldm folds the rows of a
//! scan batch into partial groups — COUNT, SUM, MIN, MAX per group of column values — and returns
//! one row per group instead of the rows; the client merges the partials of every batch and
//! partition. Partial rows are the group values followed by the accumulators, each encoded with
//! `Value::encode`.

use crate::bin::{Dec, DecodeError, DecodeResult, Enc};
use crate::row::RowLayout;
use crate::value::Value;
use std::cmp::Ordering;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggOp {
    /// COUNT(col), or COUNT(*) without a column.
    Count,
    Sum,
    Min,
    Max,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Aggregation {
    /// Grouping columns (empty: one group).
    pub group_by: Vec<u16>,
    pub aggs: Vec<(AggOp, Option<u16>)>,
}

/// Groups and accumulators a scan may hold at once; beyond, rows stream as partial groups of one.
pub const GROUPS_MAX: usize = 65_536;

impl Aggregation {
    pub fn encode(&self, e: &mut Enc) {
        e.u32(self.group_by.len() as u32);
        for &c in &self.group_by {
            e.u16(c);
        }
        e.u32(self.aggs.len() as u32);
        for (op, col) in &self.aggs {
            e.u8(match op {
                AggOp::Count => 0,
                AggOp::Sum => 1,
                AggOp::Min => 2,
                AggOp::Max => 3,
            });
            match col {
                None => e.u8(0),
                Some(c) => {
                    e.u8(1);
                    e.u16(*c);
                }
            }
        }
    }

    pub fn decode(d: &mut Dec) -> DecodeResult<Aggregation> {
        let n = d.u32()? as usize;
        if n > 4096 {
            return Err(DecodeError("too many grouping columns"));
        }
        let group_by = (0..n).map(|_| d.u16()).collect::<DecodeResult<_>>()?;
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
                _ => return Err(DecodeError("bad aggregate")),
            };
            let col = match d.u8()? {
                0 => None,
                1 => Some(d.u16()?),
                _ => return Err(DecodeError("bad aggregate column tag")),
            };
            aggs.push((op, col));
        }
        Ok(Aggregation { group_by, aggs })
    }

    /// The largest column it reads (to check it against the table).
    pub fn max_column(&self) -> Option<u16> {
        self.group_by.iter().copied().chain(self.aggs.iter().filter_map(|a| a.1)).max()
    }
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
            let a2 = crate::value::rescale(*a, *sa, t).unwrap_or(*a);
            let x2 = crate::value::rescale(x, s, t).unwrap_or(x);
            Value::Decimal { v: a2.saturating_add(x2), scale: t }
        }
        (acc, _) => Value::Double(acc.as_f64().unwrap_or(0.0) + v.as_f64().unwrap_or(0.0)),
    };
}

/// Folds `v` into an accumulator of `op` (partials from several sources merge the same way,
/// counts adding up).
pub fn fold(op: AggOp, acc: &mut Value, v: &Value, is_partial: bool) {
    match op {
        AggOp::Count => {
            let add = if is_partial { v.as_i128().unwrap_or(0) as i64 } else { (!v.is_null()) as i64 };
            *acc = Value::Int(acc.as_i128().unwrap_or(0) as i64 + add);
        }
        AggOp::Sum => add_sum(acc, v),
        AggOp::Min | AggOp::Max => {
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
    }
}

/// The initial accumulator.
pub fn start(op: AggOp) -> Value {
    match op {
        AggOp::Count => Value::Int(0),
        _ => Value::Null,
    }
}

/// Partial groups being built from stored rows: one hash lookup per row, groups kept in
/// first-seen order.
#[derive(Default)]
pub struct Partial {
    /// Encoded group values -> index in `entries`.
    index: crate::hash::FastMap<Vec<u8>, usize>,
    /// (group values, accumulators) per group.
    entries: Vec<(Vec<Value>, Vec<Value>)>,
}

impl Partial {
    pub fn add(&mut self, a: &Aggregation, layout: &RowLayout, row: &[u8]) {
        let mut key = Vec::new();
        {
            let mut e = Enc::new(&mut key);
            for &c in &a.group_by {
                layout.get(row, c as usize).unwrap_or(Value::Null).encode(&mut e);
            }
        }
        let next = self.entries.len();
        let g = *self.index.entry(key).or_insert(next);
        if g == next {
            let vals = a.group_by.iter().map(|&c| layout.get(row, c as usize).unwrap_or(Value::Null)).collect();
            self.entries.push((vals, a.aggs.iter().map(|(op, _)| start(*op)).collect()));
        }
        let accs = &mut self.entries[g].1;
        for ((op, col), acc) in a.aggs.iter().zip(accs.iter_mut()) {
            let v = match col {
                None => Value::Int(1),
                Some(c) => layout.get(row, *c as usize).unwrap_or(Value::Null),
            };
            fold(*op, acc, &v, false);
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The partial rows (group values, then accumulators), in first-seen order.
    pub fn finish(self) -> Vec<Vec<u8>> {
        let mut out = Vec::with_capacity(self.entries.len());
        for (vals, accs) in self.entries {
            let mut buf = Vec::new();
            let mut e = Enc::new(&mut buf);
            for v in vals.iter().chain(accs.iter()) {
                v.encode(&mut e);
            }
            out.push(buf);
        }
        out
    }
}

/// Splits a partial row into its group values and accumulators.
pub fn decode_partial(a: &Aggregation, bytes: &[u8]) -> DecodeResult<(Vec<Value>, Vec<Value>)> {
    let mut d = Dec::new(bytes);
    let groups = (0..a.group_by.len()).map(|_| Value::decode(&mut d)).collect::<DecodeResult<Vec<_>>>()?;
    let accs = (0..a.aggs.len()).map(|_| Value::decode(&mut d)).collect::<DecodeResult<Vec<_>>>()?;
    Ok((groups, accs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Column, ColumnType, Table};

    #[test]
    fn partial_groups_and_merge() {
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
        let a = Aggregation {
            group_by: vec![1],
            aggs: vec![(AggOp::Count, None), (AggOp::Count, Some(2)), (AggOp::Sum, Some(2)), (AggOp::Max, Some(0))],
        };
        let mut p = Partial::default();
        for (id, g, x) in [(1, "a", Some(150)), (2, "b", None), (3, "a", Some(25)), (4, "a", None)] {
            let vals =
                vec![Value::Int(id), Value::str(g), x.map(|v| Value::Decimal { v, scale: 2 }).unwrap_or(Value::Null)];
            let mut row = Vec::new();
            layout.encode_row(&vals, &mut row).unwrap();
            p.add(&a, &layout, &row);
        }
        let rows = p.finish();
        assert_eq!(rows.len(), 2);
        let (g, acc) = decode_partial(&a, &rows[0]).unwrap();
        assert_eq!(g, vec![Value::str("a")]);
        assert_eq!(acc, vec![Value::Int(3), Value::Int(2), Value::Decimal { v: 175, scale: 2 }, Value::Int(4)]);
        // Merging two partials of the same group.
        let mut merged: Vec<Value> = a.aggs.iter().map(|(op, _)| start(*op)).collect();
        for _ in 0..2 {
            for ((op, _), (m, v)) in a.aggs.iter().zip(merged.iter_mut().zip(&acc)) {
                fold(*op, m, v, true);
            }
        }
        assert_eq!(merged, vec![Value::Int(6), Value::Int(4), Value::Decimal { v: 350, scale: 2 }, Value::Int(4)]);
        let (g, acc) = decode_partial(&a, &rows[1]).unwrap();
        assert_eq!((g, acc[2].clone()), (vec![Value::str("b")], Value::Null));
        let mut buf = Vec::new();
        a.encode(&mut Enc::new(&mut buf));
        assert_eq!(Aggregation::decode(&mut Dec::new(&buf)).unwrap(), a);
    }
}
