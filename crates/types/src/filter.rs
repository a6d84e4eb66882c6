//! Pushed-down filters: predicates evaluated inside the data node against stored rows, with SQL
//! three-valued logic (a comparison with NULL is unknown; a row passes only when the filter is
//! true).

use crate::bin::{Dec, DecodeError, DecodeResult, Enc};
use crate::row::RowLayout;
use crate::value::Value;
use std::cmp::Ordering;

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

#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    True,
    Cmp { col: u16, op: CmpOp, value: Value },
    IsNull(u16),
    IsNotNull(u16),
    In { col: u16, values: Vec<Value> },
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
                let ord = v.cmp_sql(value)?;
                Some(match op {
                    CmpOp::Eq => ord == Ordering::Equal,
                    CmpOp::Ne => ord != Ordering::Equal,
                    CmpOp::Lt => ord == Ordering::Less,
                    CmpOp::Le => ord != Ordering::Greater,
                    CmpOp::Gt => ord == Ordering::Greater,
                    CmpOp::Ge => ord != Ordering::Less,
                })
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
            Filter::Cmp { col, .. } | Filter::IsNull(col) | Filter::IsNotNull(col) | Filter::In { col, .. } => {
                Some(*col)
            }
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
                let op = match d.u8()? {
                    0 => CmpOp::Eq,
                    1 => CmpOp::Ne,
                    2 => CmpOp::Lt,
                    3 => CmpOp::Le,
                    4 => CmpOp::Gt,
                    5 => CmpOp::Ge,
                    _ => return Err(DecodeError("bad comparison")),
                };
                Filter::Cmp { col, op, value: Value::decode(d)? }
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
            _ => return Err(DecodeError("bad filter tag")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Column, ColumnType as T, Table};

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
