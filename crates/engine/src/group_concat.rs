//! MySQL's `GROUP_CONCAT` in the engine, as the aggregate `tern_group_concat(flags, separator,
//! value, key...)` that `funcs` writes it as: `value` is the text of the call's arguments (NULL
//! when one is NULL: the row is left out), `key...` its ORDER BY expressions and `flags` a
//! constant string — `D` (DISTINCT) or `-`, then `a` or `d` per key.
//!
//! The accumulator orders its values itself, by the keys' sort-preserving row encoding (NULLs
//! first ascending, last descending, as MySQL sorts), so any number of GROUP_CONCATs with
//! different orders share one aggregation (DataFusion's `string_agg` would need the input
//! sorted per aggregate and refuses two orders). Its memory is what `size` reports, counted
//! by the aggregation against the statement's limit; the result is cut at
//! `GROUP_CONCAT_MAX_LEN` bytes (MariaDB's default `group_concat_max_len`).

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BinaryArray};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature, Volatility};
use datafusion::physical_expr::expressions::Literal;
use std::sync::Arc;

/// Bytes of a GROUP_CONCAT result, at most (longer ones are cut, as MySQL cuts them).
pub const GROUP_CONCAT_MAX_LEN: usize = 1 << 20;

#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct GroupConcat {
    signature: Signature,
}

impl GroupConcat {
    pub(super) fn new() -> GroupConcat {
        GroupConcat { signature: Signature::variadic_any(Volatility::Immutable) }
    }
}

/// A constant string argument.
fn constant(args: &AccumulatorArgs, i: usize) -> Result<String> {
    match args.exprs.get(i).and_then(|e| e.downcast_ref::<Literal>()).map(Literal::value) {
        Some(ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s))) => {
            Ok(s.clone())
        }
        _ => exec_err!("tern_group_concat: argument {i} is not a constant string"),
    }
}

impl AggregateUDFImpl for GroupConcat {
    fn name(&self) -> &str {
        "tern_group_concat"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let flags = constant(&args, 0)?;
        let sep = constant(&args, 1)?;
        let keys = args.expr_fields.len().saturating_sub(3);
        if args.expr_fields.len() < 3 || flags.len() != keys + 1 {
            return exec_err!("tern_group_concat: bad arguments");
        }
        let fields = args.expr_fields[3..]
            .iter()
            .zip(flags[1..].bytes())
            .map(|(f, dir)| {
                let descending = dir == b'd';
                SortField::new_with_options(f.data_type().clone(), SortOptions { descending, nulls_first: !descending })
            })
            .collect::<Vec<_>>();
        let converter = if fields.is_empty() { None } else { Some(RowConverter::new(fields)?) };
        Ok(Box::new(Acc {
            distinct: flags.starts_with('D'),
            sep: sep.into_bytes(),
            converter,
            entries: Vec::new(),
            bytes: 0,
        }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(format!("{}[entries]", args.name), DataType::Binary, true))])
    }
}

#[derive(Debug)]
struct Acc {
    distinct: bool,
    sep: Vec<u8>,
    converter: Option<RowConverter>,
    /// (order key, value text) per row, in arrival order.
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    bytes: usize,
}

impl Acc {
    fn push(&mut self, key: Vec<u8>, text: Vec<u8>) {
        self.bytes += key.len() + text.len() + 48;
        self.entries.push((key, text));
    }
}

impl Accumulator for Acc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let Some(v) = values.get(2) else { return exec_err!("tern_group_concat: no value") };
        let v = datafusion::arrow::compute::cast(v, &DataType::Utf8)?;
        let texts = v.as_string::<i32>();
        let rows = match &self.converter {
            Some(c) => Some(c.convert_columns(&values[3..])?),
            None => None,
        };
        for i in 0..texts.len() {
            if texts.is_null(i) {
                continue;
            }
            let key = rows.as_ref().map_or_else(Vec::new, |r| r.row(i).as_ref().to_vec());
            self.push(key, texts.value(i).as_bytes().to_vec());
        }
        Ok(())
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.entries.is_empty() {
            return Ok(ScalarValue::Utf8(None));
        }
        // Stable: equal keys keep their arrival order.
        self.entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut seen = std::collections::HashSet::new();
        let mut out: Vec<u8> = Vec::new();
        for (n, (_, text)) in self.entries.iter().enumerate() {
            if self.distinct && !seen.insert(text.as_slice()) {
                continue;
            }
            if n > 0 {
                out.extend_from_slice(&self.sep);
            }
            out.extend_from_slice(text);
            if out.len() >= GROUP_CONCAT_MAX_LEN {
                break;
            }
        }
        out.truncate(GROUP_CONCAT_MAX_LEN);
        // Cut on a character boundary.
        let text = match String::from_utf8(out) {
            Ok(s) => s,
            Err(e) => {
                let valid = e.utf8_error().valid_up_to();
                let mut b = e.into_bytes();
                b.truncate(valid);
                String::from_utf8(b).unwrap_or_default()
            }
        };
        Ok(ScalarValue::Utf8(Some(text)))
    }

    fn size(&self) -> usize {
        std::mem::size_of::<Self>() + self.bytes + self.converter.as_ref().map_or(0, RowConverter::size)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let mut b = Vec::with_capacity(self.bytes);
        for (key, text) in &self.entries {
            b.extend_from_slice(&(key.len() as u32).to_le_bytes());
            b.extend_from_slice(key);
            b.extend_from_slice(&(text.len() as u32).to_le_bytes());
            b.extend_from_slice(text);
        }
        Ok(vec![ScalarValue::Binary(Some(b))])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let Some(s) = states.first().and_then(|s| s.as_any().downcast_ref::<BinaryArray>()) else {
            return exec_err!("tern_group_concat: bad state");
        };
        for i in 0..s.len() {
            if s.is_null(i) {
                continue;
            }
            let mut b = s.value(i);
            let take = |b: &mut &[u8]| -> Result<Vec<u8>> {
                if b.len() < 4 {
                    return exec_err!("tern_group_concat: bad state");
                }
                let n = u32::from_le_bytes(b[..4].try_into().expect("4 bytes")) as usize;
                if b.len() < 4 + n {
                    return exec_err!("tern_group_concat: bad state");
                }
                let v = b[4..4 + n].to_vec();
                *b = &b[4 + n..];
                Ok(v)
            };
            while !b.is_empty() {
                let key = take(&mut b)?;
                let text = take(&mut b)?;
                self.push(key, text);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray};

    fn acc(distinct: bool, descending: bool) -> Acc {
        let field = SortField::new_with_options(DataType::Int64, SortOptions { descending, nulls_first: !descending });
        Acc {
            distinct,
            sep: b"|".to_vec(),
            converter: Some(RowConverter::new(vec![field]).unwrap()),
            entries: Vec::new(),
            bytes: 0,
        }
    }

    fn batch(texts: &[Option<&str>], keys: &[Option<i64>]) -> Vec<ArrayRef> {
        let unused: ArrayRef = Arc::new(StringArray::from(vec![Some("-"); texts.len()]));
        vec![
            unused.clone(),
            unused,
            Arc::new(StringArray::from(texts.to_vec())),
            Arc::new(Int64Array::from(keys.to_vec())),
        ]
    }

    #[test]
    fn orders_merges_and_dedupes() {
        // Two partial accumulators, merged through their state, ordered by the key with NULL
        // keys first; NULL values left out.
        let mut a = acc(false, false);
        a.update_batch(&batch(&[Some("c"), None, Some("a")], &[Some(3), Some(0), Some(1)])).unwrap();
        let mut b = acc(false, false);
        b.update_batch(&batch(&[Some("b"), Some("n"), Some("c")], &[Some(2), None, Some(3)])).unwrap();
        let state: ArrayRef = match &b.state().unwrap()[0] {
            ScalarValue::Binary(Some(v)) => Arc::new(BinaryArray::from(vec![Some(v.as_slice())])),
            other => panic!("{other:?}"),
        };
        a.merge_batch(&[state]).unwrap();
        assert_eq!(a.evaluate().unwrap(), ScalarValue::Utf8(Some("n|a|b|c|c".into())));
        // Descending puts NULL keys last; DISTINCT keeps the first of equal values.
        let mut d = acc(true, true);
        d.update_batch(&batch(&[Some("c"), Some("n"), Some("a"), Some("c")], &[Some(3), None, Some(1), Some(3)]))
            .unwrap();
        assert_eq!(d.evaluate().unwrap(), ScalarValue::Utf8(Some("c|a|n".into())));
        // Nothing: NULL. A corrupt state is an error, not a panic.
        assert_eq!(acc(false, false).evaluate().unwrap(), ScalarValue::Utf8(None));
        let bad: ArrayRef = Arc::new(BinaryArray::from(vec![Some(&[9u8, 0, 0, 0, 1][..])]));
        assert!(acc(false, false).merge_batch(&[bad]).is_err());
    }

    #[test]
    fn results_are_cut_at_the_limit_on_a_character() {
        let mut a = acc(false, false);
        let long = "é".repeat(GROUP_CONCAT_MAX_LEN / 4 + 1);
        a.update_batch(&batch(&[Some(&long), Some(&long), Some(&long)], &[Some(1), Some(2), Some(3)])).unwrap();
        let ScalarValue::Utf8(Some(s)) = a.evaluate().unwrap() else { panic!() };
        assert!(s.len() <= GROUP_CONCAT_MAX_LEN && s.len() > GROUP_CONCAT_MAX_LEN - 4, "{}", s.len());
    }
}
