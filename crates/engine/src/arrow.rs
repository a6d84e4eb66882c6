//! Between Tern's encodings and Arrow: a table's Arrow schema, value-list rows (a scan's
//! projected rows, `tern_types::row`) decoded straight into Arrow builders, and result batches
//! back into `Value`s with MySQL column types.

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryBuilder, Date32Builder, Decimal128Builder, DurationMicrosecondBuilder,
    Float32Builder, Float64Builder, Int8Builder, Int16Builder, Int32Builder, Int64Builder, RecordBatch,
    RecordBatchOptions, StringBuilder, TimestampMicrosecondBuilder, UInt8Builder, UInt16Builder, UInt32Builder,
    UInt64Builder,
};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, DurationMicrosecondType, Field, Float32Type, Float64Type, Int8Type,
    Int16Type, Int32Type, Int64Type, Schema, SchemaRef, TimeUnit, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use std::sync::Arc;
use tern_sql::meta::{ColumnDef, ty};
use tern_types::{ColumnType, Table, Value};

/// The Arrow type a column is read as.
pub fn arrow_type(t: ColumnType) -> DataType {
    use ColumnType as T;
    match t {
        T::TinyInt { unsigned: false } => DataType::Int8,
        T::TinyInt { unsigned: true } => DataType::UInt8,
        T::SmallInt { unsigned: false } => DataType::Int16,
        T::SmallInt { unsigned: true } => DataType::UInt16,
        T::MediumInt { unsigned: false } | T::Int { unsigned: false } => DataType::Int32,
        T::MediumInt { unsigned: true } | T::Int { unsigned: true } => DataType::UInt32,
        T::BigInt { unsigned: false } => DataType::Int64,
        T::BigInt { unsigned: true } | T::Bit { .. } => DataType::UInt64,
        T::Float => DataType::Float32,
        T::Double => DataType::Float64,
        T::Decimal { precision, scale, .. } => DataType::Decimal128(precision, scale as i8),
        T::Char { .. } | T::VarChar { .. } | T::Text => DataType::Utf8,
        T::Binary { .. } | T::VarBinary { .. } | T::Blob => DataType::Binary,
        T::Date => DataType::Date32,
        T::Time { .. } => DataType::Duration(TimeUnit::Microsecond),
        T::DateTime { .. } | T::Timestamp { .. } => DataType::Timestamp(TimeUnit::Microsecond, None),
        T::Year => DataType::UInt16,
    }
}

/// A table's columns as Arrow fields. Names are lower-cased: the engine folds unquoted
/// identifiers to lower case, and MySQL's column names are case-insensitive.
pub fn schema_of(t: &Table) -> SchemaRef {
    Arc::new(Schema::new(
        t.columns
            .iter()
            .map(|c| {
                let f = Field::new(c.name.to_lowercase(), arrow_type(c.ty), c.nullable);
                match c.ty {
                    // The fraction digits a temporal column shows (kept through projections).
                    ColumnType::DateTime { fsp } | ColumnType::Timestamp { fsp } | ColumnType::Time { fsp } => {
                        f.with_metadata([(DECIMALS.to_string(), fsp.to_string())].into())
                    }
                    _ => f,
                }
            })
            .collect::<Vec<_>>(),
    ))
}

/// Field metadata: the digits after the point a column shows (a temporal column's fractional
/// seconds, a rounded DOUBLE's decimals).
pub const DECIMALS: &str = "tern.decimals";

/// Whether a result field's fraction digits are known from its metadata (else `fsp_of` the
/// values decides).
pub fn decimals_known(f: &Field) -> bool {
    f.metadata().contains_key(DECIMALS)
}

/// The fraction digits a DATETIME or TIME value needs (0 for whole seconds).
pub fn fsp_of(v: &Value) -> u8 {
    match v {
        Value::DateTime(t) | Value::Timestamp(t) | Value::Time(t) => {
            let mut f = t.rem_euclid(1_000_000);
            if f == 0 {
                return 0;
            }
            let mut digits = 6;
            while f % 10 == 0 {
                f /= 10;
                digits -= 1;
            }
            digits
        }
        _ => 0,
    }
}

enum Col {
    I8(Int8Builder),
    I16(Int16Builder),
    I32(Int32Builder),
    I64(Int64Builder),
    U8(UInt8Builder),
    U16(UInt16Builder),
    U32(UInt32Builder),
    U64(UInt64Builder),
    F32(Float32Builder),
    F64(Float64Builder),
    Dec(Decimal128Builder, u8, i8),
    Str(StringBuilder),
    Bin(BinaryBuilder),
    Date(Date32Builder),
    Ts(TimestampMicrosecondBuilder),
    Dur(DurationMicrosecondBuilder),
}

impl Col {
    fn new(t: ColumnType, rows: usize) -> Col {
        match arrow_type(t) {
            DataType::Int8 => Col::I8(Int8Builder::with_capacity(rows)),
            DataType::Int16 => Col::I16(Int16Builder::with_capacity(rows)),
            DataType::Int32 => Col::I32(Int32Builder::with_capacity(rows)),
            DataType::Int64 => Col::I64(Int64Builder::with_capacity(rows)),
            DataType::UInt8 => Col::U8(UInt8Builder::with_capacity(rows)),
            DataType::UInt16 => Col::U16(UInt16Builder::with_capacity(rows)),
            DataType::UInt32 => Col::U32(UInt32Builder::with_capacity(rows)),
            DataType::UInt64 => Col::U64(UInt64Builder::with_capacity(rows)),
            DataType::Float32 => Col::F32(Float32Builder::with_capacity(rows)),
            DataType::Float64 => Col::F64(Float64Builder::with_capacity(rows)),
            DataType::Decimal128(p, s) => Col::Dec(Decimal128Builder::with_capacity(rows), p, s),
            DataType::Utf8 => Col::Str(StringBuilder::with_capacity(rows, rows * 16)),
            DataType::Date32 => Col::Date(Date32Builder::with_capacity(rows)),
            DataType::Timestamp(..) => Col::Ts(TimestampMicrosecondBuilder::with_capacity(rows)),
            DataType::Duration(_) => Col::Dur(DurationMicrosecondBuilder::with_capacity(rows)),
            _ => Col::Bin(BinaryBuilder::with_capacity(rows, rows * 16)),
        }
    }

    fn null(&mut self) {
        match self {
            Col::I8(b) => b.append_null(),
            Col::I16(b) => b.append_null(),
            Col::I32(b) => b.append_null(),
            Col::I64(b) => b.append_null(),
            Col::U8(b) => b.append_null(),
            Col::U16(b) => b.append_null(),
            Col::U32(b) => b.append_null(),
            Col::U64(b) => b.append_null(),
            Col::F32(b) => b.append_null(),
            Col::F64(b) => b.append_null(),
            Col::Dec(b, ..) => b.append_null(),
            Col::Str(b) => b.append_null(),
            Col::Bin(b) => b.append_null(),
            Col::Date(b) => b.append_null(),
            Col::Ts(b) => b.append_null(),
            Col::Dur(b) => b.append_null(),
        }
    }

    /// Appends a stored value's bytes (fixed-width little-endian, or a variable value's bytes).
    fn push(&mut self, b: &[u8]) {
        let mut a = [0u8; 16];
        let n = b.len().min(16);
        a[..n].copy_from_slice(&b[..n]);
        let u = u64::from_le_bytes(a[..8].try_into().expect("8 bytes"));
        let sext = |bits: u32| ((u << (64 - bits)) as i64) >> (64 - bits);
        match self {
            Col::I8(x) => x.append_value(sext(8) as i8),
            Col::I16(x) => x.append_value(sext(16) as i16),
            Col::I32(x) => x.append_value(sext(32) as i32),
            Col::I64(x) => x.append_value(u as i64),
            Col::U8(x) => x.append_value(u as u8),
            Col::U16(x) => x.append_value(u as u16),
            Col::U32(x) => x.append_value(u as u32),
            Col::U64(x) => x.append_value(u),
            Col::F32(x) => x.append_value(f32::from_bits(u as u32)),
            Col::F64(x) => x.append_value(f64::from_bits(u)),
            Col::Dec(x, ..) => x.append_value(i128::from_le_bytes(a)),
            Col::Str(x) => match std::str::from_utf8(b) {
                Ok(s) => x.append_value(s),
                Err(_) => x.append_value(String::from_utf8_lossy(b)),
            },
            Col::Bin(x) => x.append_value(b),
            Col::Date(x) => x.append_value(u as u32 as i32),
            Col::Ts(x) => x.append_value(u as i64),
            Col::Dur(x) => x.append_value(u as i64),
        }
    }

    fn finish(self) -> ArrayRef {
        match self {
            Col::I8(mut b) => Arc::new(b.finish()),
            Col::I16(mut b) => Arc::new(b.finish()),
            Col::I32(mut b) => Arc::new(b.finish()),
            Col::I64(mut b) => Arc::new(b.finish()),
            Col::U8(mut b) => Arc::new(b.finish()),
            Col::U16(mut b) => Arc::new(b.finish()),
            Col::U32(mut b) => Arc::new(b.finish()),
            Col::U64(mut b) => Arc::new(b.finish()),
            Col::F32(mut b) => Arc::new(b.finish()),
            Col::F64(mut b) => Arc::new(b.finish()),
            Col::Dec(mut b, p, s) => Arc::new(b.finish().with_precision_and_scale(p, s).expect("valid decimal type")),
            Col::Str(mut b) => Arc::new(b.finish()),
            Col::Bin(mut b) => Arc::new(b.finish()),
            Col::Date(mut b) => Arc::new(b.finish()),
            Col::Ts(mut b) => Arc::new(b.finish()),
            Col::Dur(mut b) => Arc::new(b.finish()),
        }
    }
}

/// Decodes value-list rows of `types` (a scan's projection) into a batch of `schema`.
/// `keep` = false for every column: the rows only count (the scan read one column for nothing).
pub fn batch_of(rows: &[Vec<u8>], types: &[ColumnType], keep: bool, schema: &SchemaRef) -> Result<RecordBatch, String> {
    if !keep {
        return RecordBatch::try_new_with_options(
            schema.clone(),
            vec![],
            &RecordBatchOptions::new().with_row_count(Some(rows.len())),
        )
        .map_err(|e| e.to_string());
    }
    let mut cols: Vec<Col> = types.iter().map(|&t| Col::new(t, rows.len())).collect();
    let nb = types.len().div_ceil(8);
    for row in rows {
        if row.len() < nb {
            return Err("malformed row: short value list".into());
        }
        let (nulls, mut rest) = row.split_at(nb);
        for (i, (t, col)) in types.iter().zip(cols.iter_mut()).enumerate() {
            if nulls[i / 8] & (1 << (i % 8)) != 0 {
                col.null();
                continue;
            }
            let n = match t.fixed_width() {
                Some(w) => w,
                None => {
                    let Some(len) = rest.get(..4) else { return Err("malformed row: short value length".into()) };
                    rest = &rest[4..];
                    u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize
                }
            };
            let Some(v) = rest.get(..n) else { return Err("malformed row: short value".into()) };
            col.push(v);
            rest = &rest[n..];
        }
    }
    RecordBatch::try_new(schema.clone(), cols.into_iter().map(Col::finish).collect()).map_err(|e| e.to_string())
}

/// The MySQL column definition of a result field.
pub fn column_def(f: &Field) -> ColumnDef {
    let (t, len, decimals) = match f.data_type() {
        DataType::Boolean => (ty::LONGLONG, 1, 0),
        DataType::Int8 | DataType::UInt8 => (ty::TINY, 4, 0),
        DataType::Int16 | DataType::UInt16 => (ty::SHORT, 6, 0),
        DataType::Int32 | DataType::UInt32 => (ty::LONG, 11, 0),
        DataType::Int64 | DataType::UInt64 => (ty::LONGLONG, 21, 0),
        DataType::Float16 | DataType::Float32 => (ty::FLOAT, 12, 31),
        DataType::Float64 => (ty::DOUBLE, 22, 31),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => (ty::NEWDECIMAL, *p as u32 + 2, (*s).max(0) as u8),
        DataType::Date32 | DataType::Date64 => (ty::DATE, 10, 0),
        DataType::Timestamp(..) => (ty::DATETIME, 26, 6),
        DataType::Duration(_) | DataType::Time32(_) | DataType::Time64(_) => (ty::TIME, 17, 6),
        DataType::Null => (ty::NULL, 0, 0),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView | DataType::FixedSizeBinary(_) => {
            (ty::BLOB, 65_535, 0)
        }
        _ => (ty::VAR_STRING, 1024, 0),
    };
    let mut d = ColumnDef::expr(f.name(), t, len);
    if t == ty::NEWDECIMAL || t == ty::DATETIME || t == ty::TIME {
        d.decimals = decimals;
    }
    if let Some(fsp) = f.metadata().get(DECIMALS).and_then(|v| v.parse().ok())
        && matches!(t, ty::DATETIME | ty::TIME | ty::DOUBLE)
    {
        d.decimals = fsp;
    }
    d
}

/// The values of row `i` of every column.
pub fn rows_of(batch: &RecordBatch, out: &mut Vec<Vec<Value>>) -> Result<(), String> {
    let cols: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            // Types without a direct Value: their text.
            DataType::Decimal256(..)
            | DataType::Float16
            | DataType::Date64
            | DataType::Time32(_)
            | DataType::Time64(_)
            | DataType::Interval(_)
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Dictionary(..)
            | DataType::List(_)
            | DataType::Struct(_) => datafusion::arrow::compute::cast(c, &DataType::Utf8).map_err(|e| e.to_string()),
            DataType::LargeBinary | DataType::BinaryView => {
                datafusion::arrow::compute::cast(c, &DataType::Binary).map_err(|e| e.to_string())
            }
            _ => Ok(c.clone()),
        })
        .collect::<Result<_, _>>()?;
    for i in 0..batch.num_rows() {
        let mut row = Vec::with_capacity(cols.len());
        for c in &cols {
            row.push(value_at(c, i));
        }
        out.push(row);
    }
    Ok(())
}

pub(crate) fn value_at(c: &ArrayRef, i: usize) -> Value {
    if c.is_null(i) {
        return Value::Null;
    }
    match c.data_type() {
        DataType::Boolean => Value::Int(c.as_boolean().value(i) as i64),
        DataType::Int8 => Value::Int(c.as_primitive::<Int8Type>().value(i) as i64),
        DataType::Int16 => Value::Int(c.as_primitive::<Int16Type>().value(i) as i64),
        DataType::Int32 => Value::Int(c.as_primitive::<Int32Type>().value(i) as i64),
        DataType::Int64 => Value::Int(c.as_primitive::<Int64Type>().value(i)),
        DataType::UInt8 => Value::UInt(c.as_primitive::<UInt8Type>().value(i) as u64),
        DataType::UInt16 => Value::UInt(c.as_primitive::<UInt16Type>().value(i) as u64),
        DataType::UInt32 => Value::UInt(c.as_primitive::<UInt32Type>().value(i) as u64),
        DataType::UInt64 => Value::UInt(c.as_primitive::<UInt64Type>().value(i)),
        DataType::Float32 => Value::Float(c.as_primitive::<Float32Type>().value(i)),
        DataType::Float64 => Value::Double(c.as_primitive::<Float64Type>().value(i)),
        DataType::Decimal128(_, s) => {
            let v = c.as_primitive::<Decimal128Type>().value(i);
            if *s >= 0 {
                Value::Decimal { v, scale: *s as u8 }
            } else {
                Value::Decimal { v: v * 10i128.pow((-*s) as u32), scale: 0 }
            }
        }
        DataType::Date32 => Value::Date(c.as_primitive::<Date32Type>().value(i)),
        DataType::Timestamp(unit, _) => {
            let v = match unit {
                TimeUnit::Second => {
                    c.as_primitive::<datafusion::arrow::datatypes::TimestampSecondType>().value(i) * 1_000_000
                }
                TimeUnit::Millisecond => {
                    c.as_primitive::<datafusion::arrow::datatypes::TimestampMillisecondType>().value(i) * 1000
                }
                TimeUnit::Microsecond => {
                    c.as_primitive::<datafusion::arrow::datatypes::TimestampMicrosecondType>().value(i)
                }
                TimeUnit::Nanosecond => {
                    c.as_primitive::<datafusion::arrow::datatypes::TimestampNanosecondType>().value(i) / 1000
                }
            };
            Value::DateTime(v)
        }
        DataType::Duration(TimeUnit::Microsecond) => Value::Time(c.as_primitive::<DurationMicrosecondType>().value(i)),
        DataType::Utf8 => Value::Bytes(c.as_string::<i32>().value(i).as_bytes().to_vec()),
        DataType::Binary => Value::Bytes(c.as_binary::<i32>().value(i).to_vec()),
        DataType::Null => Value::Null,
        _ => match datafusion::arrow::util::display::array_value_to_string(c, i) {
            Ok(s) => Value::Bytes(s.into_bytes()),
            Err(_) => Value::Null,
        },
    }
}
