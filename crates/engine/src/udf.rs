//! MySQL functions the query engine lacks or computes differently from MySQL, registered as
//! engine functions that evaluate each row with the OLTP registry's functions (`tern_sql::func`), so a function
//! gives the same answer whichever path runs the statement. The result's type is settled from
//! the arguments' types when the statement is planned (`Ret`).

use super::arrow::value_at;
use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, Date32Builder, Decimal128Builder, DurationMicrosecondBuilder, Float64Builder,
    Int64Builder, StringBuilder, TimestampMicrosecondBuilder, UInt64Builder,
};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, TimeUnit};
use datafusion::common::{DataFusionError, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility,
};
use datafusion::prelude::SessionContext;
use std::sync::{Arc, OnceLock};
use tern_sql::ast::CastTy;
use tern_sql::eval;
use tern_sql::func::{self, FnCtx, FnId, Ty};
use tern_types::value::{Value, rescale};

/// How a function's result type follows from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Ret {
    Text,
    Bytes,
    Int,
    UInt,
    Date,
    Time,
    /// A string's numeric prefix as a DOUBLE (MySQL's arithmetic on text, `mysql`).
    Double,
    /// ROUND / TRUNCATE: a DECIMAL with the scale the second argument (a literal) asks for, an
    /// integer for integers, a DOUBLE otherwise.
    Rounded,
    /// FLOOR / CEIL: an integer for integers and DECIMALs, a DOUBLE otherwise.
    Floor,
    /// STR_TO_DATE: a DATE, TIME or DATETIME by the parts its (constant) format names.
    StrToDate,
    /// TIMESTAMPADD(unit, n, d): a DATE for a DATE moved by days or more, else a DATETIME.
    DateAdd,
    /// FROM_UNIXTIME: a DATETIME, or text with a format argument.
    FromUnix,
}

/// The functions the engine takes from the registry (`tern_sql::func`), by the name the engine
/// calls them: MySQL's that the engine lacks, and those it computes differently (DATE_FORMAT's
/// specifiers, LENGTH in bytes, MID — which SUBSTRING becomes, `funcs` — with negative
/// positions, FLOOR/CEIL of a DECIMAL as an integer, FROM_UNIXTIME without a fraction). Their
/// result types follow from the registry's rule for each (`ret_of`).
const FROM_REGISTRY: &[&str] = &[
    "date_format",
    "format",
    "str_to_date",
    "timestampdiff",
    "timestampadd",
    "substring_index",
    "mid",
    "lcase",
    "ucase",
    "space",
    "hex",
    "md5",
    "sha1",
    "sha",
    "sha2",
    "crc32",
    "monthname",
    "dayname",
    "elt",
    "unhex",
    "length",
    "sign",
    "locate",
    "ord",
    "isnull",
    "unix_timestamp",
    "dayofweek",
    "weekday",
    "dayofyear",
    "week",
    "field",
    "date",
    "time",
    "last_day",
    "curdate",
    "from_unixtime",
    "truncate",
    "floor",
    "ceil",
    "ceiling",
];

/// Functions of the engine's own making: what CAST(x AS SIGNED / UNSIGNED / DOUBLE) and the
/// CONCAT of GROUP_CONCAT's arguments become (`funcs`, `mysql`).
const OWN: &[(&str, Ret, How)] = &[
    ("tern_to_double", Ret::Double, How::Cast(CastTy::Double)),
    ("tern_cast_signed", Ret::Int, How::Cast(CastTy::Signed)),
    ("tern_cast_unsigned", Ret::UInt, How::Cast(CastTy::Unsigned)),
    ("tern_concat", Ret::Text, How::Concat),
];

/// What a function computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum How {
    Call(FnId),
    Cast(CastTy),
    /// The registry's CONCAT.
    Concat,
}

/// The engine's result-type rule for a registry function, None for those the engine computes
/// itself (NOW, COALESCE...: never taken from the registry).
fn ret_of(ty: Ty) -> Option<Ret> {
    Some(match ty {
        Ty::Text => Ret::Text,
        Ty::Bytes => Ret::Bytes,
        Ty::Int => Ret::Int,
        Ty::Date => Ret::Date,
        Ty::Time | Ty::TimeOf => Ret::Time,
        Ty::FromUnix => Ret::FromUnix,
        Ty::StrToDate => Ret::StrToDate,
        Ty::DateAdd => Ret::DateAdd,
        Ty::Floor => Ret::Floor,
        Ty::Rounded => Ret::Rounded,
        Ty::Double => Ret::Double,
        Ty::Now | Ty::FirstArg | Ty::SecondArg => return None,
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct MySqlFn {
    name: &'static str,
    how: How,
    ret: Ret,
    signature: Signature,
}

/// Registers every function of `FROM_REGISTRY` and `OWN` in `ctx` (replacing the engine's own of that name);
/// the functions are made once per process and shared by every statement's session.
pub fn register(ctx: &SessionContext) {
    for f in udfs() {
        ctx.register_udf(f.clone());
    }
    static GROUP_CONCAT: OnceLock<datafusion::logical_expr::AggregateUDF> = OnceLock::new();
    ctx.register_udaf(
        GROUP_CONCAT
            .get_or_init(|| datafusion::logical_expr::AggregateUDF::from(super::group_concat::GroupConcat::new()))
            .clone(),
    );
}

/// The function of `FROM_REGISTRY` or `OWN` called `name`.
pub(super) fn function(name: &str) -> ScalarUDF {
    udfs().iter().find(|f| f.name() == name).expect("a function of FROM_REGISTRY or OWN").clone()
}

fn udfs() -> &'static [ScalarUDF] {
    static UDFS: OnceLock<Vec<ScalarUDF>> = OnceLock::new();
    UDFS.get_or_init(|| {
        let registry = FROM_REGISTRY.iter().map(|&name| {
            let id = func::lookup(&name.to_ascii_uppercase()).expect("a function of the registry");
            (name, ret_of(id.ty()).expect("a result type the engine knows"), How::Call(id))
        });
        registry
            .chain(OWN.iter().copied())
            .map(|(name, ret, how)| {
                let signature =
                    Signature::one_of(vec![TypeSignature::VariadicAny, TypeSignature::Nullary], Volatility::Stable);
                ScalarUDF::new_from_impl(MySqlFn { name, how, ret, signature })
            })
            .collect()
    })
}

fn exec(msg: impl Into<String>) -> DataFusionError {
    DataFusionError::Execution(msg.into())
}

/// The scale ROUND/TRUNCATE give a DECIMAL (the evaluator's rule: the digits asked for, 0 when
/// negative).
fn rounded_scale(d: Option<&ScalarValue>) -> Option<i8> {
    let d = match d {
        None => 0,
        Some(v) => match v.cast_to(&DataType::Int64).ok()? {
            ScalarValue::Int64(Some(d)) => d,
            _ => return None,
        },
    };
    Some(d.clamp(0, 30) as i8)
}

impl MySqlFn {
    fn result_type(&self, args: &[DataType], scalars: &[Option<&ScalarValue>]) -> datafusion::common::Result<DataType> {
        let first = args.first();
        Ok(match self.ret {
            Ret::Text => DataType::Utf8,
            Ret::Bytes => DataType::Binary,
            Ret::Int => DataType::Int64,
            Ret::UInt => DataType::UInt64,
            Ret::Date => DataType::Date32,
            Ret::Time => DataType::Duration(TimeUnit::Microsecond),
            Ret::Double => DataType::Float64,
            Ret::FromUnix if args.len() >= 2 => DataType::Utf8,
            Ret::FromUnix => DataType::Timestamp(TimeUnit::Microsecond, None),
            Ret::StrToDate => {
                let fmt = match scalars.get(1).copied().flatten() {
                    Some(ScalarValue::Utf8(Some(f))) => f.clone(),
                    _ if scalars.is_empty() => String::new(),
                    _ => return Err(exec("STR_TO_DATE: the format must be a constant string")),
                };
                match tern_types::time::str_to_date_parts(fmt.as_bytes()) {
                    (true, false, _) => DataType::Date32,
                    (false, true, _) => DataType::Duration(TimeUnit::Microsecond),
                    _ => DataType::Timestamp(TimeUnit::Microsecond, None),
                }
            }
            Ret::DateAdd => {
                let unit = match scalars.first().copied().flatten() {
                    Some(ScalarValue::Utf8(Some(u))) => u.to_ascii_uppercase(),
                    _ => String::new(),
                };
                let by_days = matches!(unit.as_str(), "DAY" | "WEEK" | "MONTH" | "QUARTER" | "YEAR");
                if by_days && args.get(2) == Some(&DataType::Date32) {
                    DataType::Date32
                } else {
                    DataType::Timestamp(TimeUnit::Microsecond, None)
                }
            }
            Ret::Floor => match first {
                Some(t) if t.is_integer() || matches!(t, DataType::Decimal128(..) | DataType::Null) => DataType::Int64,
                _ => DataType::Float64,
            },
            Ret::Rounded => match first {
                Some(t) if t.is_integer() => DataType::Int64,
                Some(DataType::Decimal128(p, _)) => {
                    let s = rounded_scale(scalars.get(1).copied().flatten()).ok_or_else(|| {
                        exec(format!("{}: the number of decimals must be a constant", self.name.to_ascii_uppercase()))
                    })?;
                    DataType::Decimal128((*p).max(s as u8 + 1).min(38), s)
                }
                Some(DataType::Null) => DataType::Int64,
                _ => DataType::Float64,
            },
        })
    }
}

/// Session values for functions run by the engine (only the clock is used; the others are
/// session state the engine's functions do not read).
struct EngineCtx {
    now: i64,
}

impl FnCtx for EngineCtx {
    fn now(&self) -> i64 {
        self.now
    }
    fn database(&self) -> Option<String> {
        None
    }
    fn user(&self) -> String {
        String::new()
    }
    fn connection_id(&self) -> u32 {
        0
    }
    fn last_insert_id(&self) -> u64 {
        0
    }
    fn set_last_insert_id(&self, _: u64) {}
    fn row_count(&self) -> i64 {
        0
    }
    fn found_rows(&self) -> u64 {
        0
    }
}

/// An array of `ty` from the evaluator's values (converted as the MySQL front end would show
/// them).
fn array_of(values: &[Value], ty: &DataType) -> datafusion::common::Result<ArrayRef> {
    let n = values.len();
    Ok(match ty {
        DataType::Int64 => {
            let mut b = Int64Builder::with_capacity(n);
            for v in values {
                b.append_option(eval::to_i128(v).map(|x| x.clamp(i64::MIN as i128, i64::MAX as i128) as i64));
            }
            Arc::new(b.finish())
        }
        DataType::UInt64 => {
            let mut b = UInt64Builder::with_capacity(n);
            for v in values {
                b.append_option(eval::to_i128(v).map(|x| x.clamp(0, u64::MAX as i128) as u64));
            }
            Arc::new(b.finish())
        }
        DataType::Float64 => {
            let mut b = Float64Builder::with_capacity(n);
            for v in values {
                b.append_option(eval::to_f64(v));
            }
            Arc::new(b.finish())
        }
        DataType::Decimal128(p, s) => {
            let mut b = Decimal128Builder::with_capacity(n);
            for v in values {
                let x = match v {
                    Value::Null => None,
                    Value::Decimal { v, scale } => rescale(*v, *scale, *s as u8),
                    o => eval::to_i128(o).and_then(|x| rescale(x, 0, *s as u8)),
                };
                b.append_option(x);
            }
            Arc::new(b.finish().with_precision_and_scale(*p, *s)?)
        }
        DataType::Date32 => {
            let mut b = Date32Builder::with_capacity(n);
            for v in values {
                b.append_option(match v {
                    Value::Date(d) => Some(*d),
                    Value::DateTime(t) | Value::Timestamp(t) => {
                        Some(t.div_euclid(tern_types::time::MICROS_PER_DAY) as i32)
                    }
                    _ => None,
                });
            }
            Arc::new(b.finish())
        }
        DataType::Timestamp(TimeUnit::Microsecond, None) => {
            let mut b = TimestampMicrosecondBuilder::with_capacity(n);
            for v in values {
                b.append_option(match v {
                    Value::DateTime(t) | Value::Timestamp(t) => Some(*t),
                    Value::Date(d) => Some(*d as i64 * tern_types::time::MICROS_PER_DAY),
                    _ => None,
                });
            }
            Arc::new(b.finish())
        }
        DataType::Duration(TimeUnit::Microsecond) => {
            let mut b = DurationMicrosecondBuilder::with_capacity(n);
            for v in values {
                b.append_option(match v {
                    Value::Time(t) => Some(*t),
                    _ => None,
                });
            }
            Arc::new(b.finish())
        }
        DataType::Binary => {
            let mut b = BinaryBuilder::with_capacity(n, n * 8);
            for v in values {
                b.append_option(eval::text(v));
            }
            Arc::new(b.finish())
        }
        _ => {
            let mut b = StringBuilder::with_capacity(n, n * 8);
            for v in values {
                b.append_option(eval::text(v).map(|t| String::from_utf8_lossy(&t).into_owned()));
            }
            Arc::new(b.finish())
        }
    })
}

impl ScalarUDFImpl for MySqlFn {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> datafusion::common::Result<DataType> {
        self.result_type(args, &[])
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> datafusion::common::Result<FieldRef> {
        let types: Vec<DataType> = args.arg_fields.iter().map(|f| f.data_type().clone()).collect();
        let ty = self.result_type(&types, args.scalar_arguments)?;
        let field = Field::new(self.name, ty.clone(), true);
        // STR_TO_DATE's value shows fractional seconds when its format reads them.
        if self.ret == Ret::StrToDate
            && let Some(ScalarValue::Utf8(Some(f))) = args.scalar_arguments.get(1).copied().flatten()
        {
            let frac = tern_types::time::str_to_date_parts(f.as_bytes()).2;
            return Ok(Arc::new(field.with_metadata(
                [(super::arrow::DECIMALS.to_string(), if frac { "6" } else { "0" }.to_string())].into(),
            )));
        }
        // A rounded DOUBLE shows the digits asked for, as MySQL's does.
        if self.ret == Ret::Rounded
            && ty == DataType::Float64
            && let Some(d) = rounded_scale(args.scalar_arguments.get(1).copied().flatten())
            && args.scalar_arguments.get(1).copied().flatten().is_some()
        {
            return Ok(Arc::new(field.with_metadata([(super::arrow::DECIMALS.to_string(), d.to_string())].into())));
        }
        Ok(Arc::new(field))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::common::Result<ColumnarValue> {
        if self.name == "mid"
            && let Some(out) = mid_of_text(&args.args)
        {
            return Ok(out);
        }
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let ctx = EngineCtx { now: eval::now_micros() };
        let concat = func::planner_made("CONCAT");
        let mut out = Vec::with_capacity(rows);
        let mut vals = Vec::with_capacity(arrays.len());
        for i in 0..rows {
            vals.clear();
            vals.extend(arrays.iter().map(|a| value_at(a, i)));
            let v = match self.how {
                How::Call(id) => id.call(&vals, &ctx),
                How::Cast(ty) => eval::cast(vals.first().cloned().unwrap_or(Value::Null), ty),
                How::Concat => concat.call(&vals, &ctx),
            };
            out.push(v.map_err(|e| exec(e.message.clone()))?);
        }
        Ok(ColumnarValue::Array(array_of(&out, args.return_field.data_type())?))
    }
}

/// MID (what SUBSTRING becomes) of a text column from a constant positive position for a
/// constant length: the characters the evaluator's MID takes, without a `Value` per row (TPC-H
/// Q22 runs `SUBSTRING(c_phone, 1, 2)` on every customer). None for other cases.
fn mid_of_text(args: &[ColumnarValue]) -> Option<ColumnarValue> {
    use datafusion::arrow::array::{Array, StringArray};
    let int = |v: &ColumnarValue| match v {
        ColumnarValue::Scalar(ScalarValue::Int64(Some(n))) => Some(*n),
        ColumnarValue::Scalar(ScalarValue::Int32(Some(n))) => Some(*n as i64),
        _ => None,
    };
    let (ColumnarValue::Array(a), Some(pos)) = (args.first()?, args.get(1).and_then(int)) else { return None };
    let text = a.as_any().downcast_ref::<StringArray>()?;
    let len = match args.get(2) {
        None => usize::MAX,
        Some(l) => int(l)?.max(0) as usize,
    };
    if pos < 1 || args.len() > 3 {
        return None;
    }
    let skip = (pos - 1) as usize;
    let mut b = StringBuilder::with_capacity(text.len(), text.len() * len.min(16));
    for v in text.iter() {
        match v {
            None => b.append_null(),
            Some(t) => match t.char_indices().nth(skip) {
                None => b.append_value(""),
                Some((i, _)) => {
                    let rest = &t[i..];
                    let end = rest.char_indices().nth(len).map_or(rest.len(), |(j, _)| j);
                    b.append_value(&rest[..end]);
                }
            },
        }
    }
    Some(ColumnarValue::Array(Arc::new(b.finish())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_function_resolves_in_the_registry_with_a_type() {
        let names: Vec<&str> = udfs().iter().map(|f| f.name()).collect();
        assert_eq!(names.len(), FROM_REGISTRY.len() + OWN.len());
        for name in FROM_REGISTRY {
            let id = func::lookup(&name.to_ascii_uppercase()).unwrap();
            assert!(ret_of(id.ty()).is_some(), "{name}");
            assert_eq!(function(name).name(), *name);
        }
        // The registry computes what the engine calls: LENGTH in bytes, MID of characters.
        let ctx = EngineCtx { now: 0 };
        let length = func::lookup("LENGTH").unwrap();
        assert_eq!(length.call(&[Value::str("é")], &ctx).unwrap(), Value::Int(2));
        let mid = func::lookup("MID").unwrap();
        assert_eq!(mid.call(&[Value::str("héllo"), Value::Int(-3), Value::Int(2)], &ctx).unwrap(), Value::str("ll"));
    }
}
