//! MySQL's division in the query engine (DataFusion divides integers as integers, decimals at
//! its own scale, and fails on a zero divisor). Planned instead, when the SQL is turned into
//! expressions (`ExprPlanner::plan_binary_op`):
//! * exact `/` (integers and DECIMALs): a DECIMAL with the dividend's scale + 4
//!   (`div_precision_increment`, at most 30) and precision p1 + s2 + 4 (at most 38), rounded half
//!   away from zero, as MySQL's `Item_func_div` types and rounds it;
//! * any other numeric `/`: a DOUBLE;
//! * a zero divisor gives NULL (MySQL's default, without strict-mode division errors), for `%`
//!   too.
//!
//! Literals with a decimal point are DECIMAL, as in MySQL (`parse_float_as_decimal` in `run`).

use datafusion::arrow::array::{Array, ArrayRef, Decimal128Array, Float64Array};
use datafusion::arrow::datatypes::{DataType, i256};
use datafusion::common::{DFSchema, Result, exec_err, plan_err};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, Operator, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility, lit,
};
use datafusion::sql::sqlparser::ast::BinaryOperator;
use std::sync::Arc;

/// MySQL's `div_precision_increment` default.
const DIV_INCREMENT: i8 = 4;
/// The largest DECIMAL scale MySQL keeps.
const SCALE_MAX: i8 = 30;

#[derive(Debug)]
pub struct MySqlPlanner;

/// (precision, scale) of an exact numeric type, as a DECIMAL.
fn exact(t: &DataType) -> Option<(u8, i8)> {
    Some(match t {
        DataType::Int8 | DataType::UInt8 => (3, 0),
        DataType::Int16 | DataType::UInt16 => (5, 0),
        DataType::Int32 | DataType::UInt32 => (10, 0),
        DataType::Int64 => (19, 0),
        DataType::UInt64 => (20, 0),
        DataType::Decimal128(p, s) if *s >= 0 => (*p, *s),
        _ => return None,
    })
}

fn null(t: &DataType) -> bool {
    matches!(t, DataType::Null)
}

fn text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn numeric(t: &DataType) -> bool {
    t.is_numeric() || matches!(t, DataType::Null)
}

impl ExprPlanner for MySqlPlanner {
    fn plan_binary_op(&self, expr: RawBinaryExpr, schema: &DFSchema) -> Result<PlannerResult<RawBinaryExpr>> {
        let (lt, rt) = (expr.left.get_type(schema)?, expr.right.get_type(schema)?);
        // MySQL computes arithmetic on text as DOUBLE, reading each string's numeric prefix
        // ('12abc' + 1 = 13, 'abc' * 2 = 0); DataFusion refuses to coerce Utf8 + Int64.
        let arithmetic = matches!(
            expr.op,
            BinaryOperator::Plus
                | BinaryOperator::Minus
                | BinaryOperator::Multiply
                | BinaryOperator::Divide
                | BinaryOperator::Modulo
        );
        if arithmetic && (text(&lt) || text(&rt)) && (text(&lt) || numeric(&lt)) && (text(&rt) || numeric(&rt)) {
            let double = |e: Expr, t: &DataType| -> Result<Expr> {
                if text(t) {
                    Ok(super::udf::function("tern_to_double").call(vec![e]))
                } else {
                    e.cast_to(&DataType::Float64, schema)
                }
            };
            let (left, right) = (double(expr.left, &lt)?, double(expr.right, &rt)?);
            return Ok(PlannerResult::Planned(match expr.op {
                BinaryOperator::Divide => ScalarUDF::from(FloatDiv::new()).call(vec![left, right]),
                BinaryOperator::Modulo => Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(left),
                    Operator::Modulo,
                    Box::new(datafusion::functions::core::expr_fn::nullif(right, lit(0.0))),
                )),
                BinaryOperator::Plus => left + right,
                BinaryOperator::Minus => left - right,
                _ => left * right,
            }));
        }
        // MySQL compares text with a number as DOUBLEs ('10.0' = 10, 'abc' = 0); DataFusion
        // casts the text to the number's type and fails on '10.0'. A string literal becomes
        // its number when planned (an integer one keeps an integer column's comparison, which
        // the scan can push to the data node).
        let comparison = matches!(
            expr.op,
            BinaryOperator::Eq
                | BinaryOperator::NotEq
                | BinaryOperator::Lt
                | BinaryOperator::LtEq
                | BinaryOperator::Gt
                | BinaryOperator::GtEq
                | BinaryOperator::Spaceship
        );
        if comparison && ((text(&lt) && numeric(&rt) && !null(&rt)) || (numeric(&lt) && !null(&lt) && text(&rt))) {
            use datafusion::common::ScalarValue as S;
            // The text side as a number: a literal now, else each row's through tern_to_double.
            let number = |e: Expr, other: &DataType| -> Expr {
                let literal = match &e {
                    Expr::Literal(S::Utf8(s) | S::LargeUtf8(s) | S::Utf8View(s), _) => Some(s.clone()),
                    _ => None,
                };
                match literal {
                    Some(None) => lit(S::Float64(None)),
                    Some(Some(s)) => match s.trim().parse::<i64>() {
                        Ok(i) if other.is_integer() => lit(i),
                        _ => lit(tern_sql::eval::str_to_f64(s.as_bytes())),
                    },
                    None => super::udf::function("tern_to_double").call(vec![e]),
                }
            };
            let text_left = text(&lt);
            let (text_side, num_side, num_type) =
                if text_left { (expr.left, expr.right, &rt) } else { (expr.right, expr.left, &lt) };
            let t = number(text_side, num_type);
            let keep = num_type.is_integer() && matches!(t, Expr::Literal(S::Int64(_), _));
            let n = if keep { num_side } else { num_side.cast_to(&DataType::Float64, schema)? };
            let (left, right) = if text_left { (t, n) } else { (n, t) };
            let op = match expr.op {
                BinaryOperator::Eq => Operator::Eq,
                BinaryOperator::NotEq => Operator::NotEq,
                BinaryOperator::Lt => Operator::Lt,
                BinaryOperator::LtEq => Operator::LtEq,
                BinaryOperator::Gt => Operator::Gt,
                BinaryOperator::GtEq => Operator::GtEq,
                _ => Operator::IsNotDistinctFrom,
            };
            return Ok(PlannerResult::Planned(Expr::BinaryExpr(BinaryExpr::new(Box::new(left), op, Box::new(right)))));
        }
        if expr.op == BinaryOperator::Modulo && numeric(&lt) && numeric(&rt) {
            // MySQL: `a % 0` is NULL (DataFusion fails the statement): `a % NULLIF(b, 0)`.
            let right = datafusion::functions::core::expr_fn::nullif(expr.right, lit(0));
            return Ok(PlannerResult::Planned(Expr::BinaryExpr(BinaryExpr::new(
                Box::new(expr.left),
                Operator::Modulo,
                Box::new(right),
            ))));
        }
        if expr.op != BinaryOperator::Divide {
            return Ok(PlannerResult::Original(expr));
        }
        if let (Some((p1, s1)), Some((p2, s2))) = (exact(&lt), exact(&rt)) {
            let left = expr.left.cast_to(&DataType::Decimal128(p1, s1), schema)?;
            let right = expr.right.cast_to(&DataType::Decimal128(p2, s2), schema)?;
            return Ok(PlannerResult::Planned(ScalarUDF::from(ExactDiv::new()).call(vec![left, right])));
        }
        if numeric(&lt) && numeric(&rt) {
            let left = expr.left.cast_to(&DataType::Float64, schema)?;
            let right = expr.right.cast_to(&DataType::Float64, schema)?;
            return Ok(PlannerResult::Planned(ScalarUDF::from(FloatDiv::new()).call(vec![left, right])));
        }
        Ok(PlannerResult::Original(expr))
    }
}

/// The type of an exact quotient of DECIMAL(p1, s1) by DECIMAL(p2, s2).
fn quotient_type(p1: u8, s1: i8, s2: i8) -> (u8, i8) {
    let scale = (s1 + DIV_INCREMENT).min(SCALE_MAX);
    let precision = (p1 as i32 + s2 as i32 + DIV_INCREMENT as i32).clamp(scale as i32 + 1, 38) as u8;
    (precision, scale)
}

/// `a / b` of two DECIMAL columns at MySQL's type, NULL for a zero divisor.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ExactDiv {
    signature: Signature,
}

impl ExactDiv {
    fn new() -> ExactDiv {
        ExactDiv { signature: Signature::any(2, Volatility::Immutable) }
    }
}

fn decimal_args(types: &[DataType]) -> Result<((u8, i8), (u8, i8))> {
    match types {
        [DataType::Decimal128(p1, s1), DataType::Decimal128(p2, s2)] => Ok(((*p1, *s1), (*p2, *s2))),
        _ => plan_err!("mysql_div takes two DECIMAL arguments, not {types:?}"),
    }
}

impl ScalarUDFImpl for ExactDiv {
    fn name(&self) -> &str {
        "mysql_div"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        let ((p1, s1), (_, s2)) = decimal_args(arg_types)?;
        let (p, s) = quotient_type(p1, s1, s2);
        Ok(DataType::Decimal128(p, s))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let types: Vec<DataType> = args.arg_fields.iter().map(|f| f.data_type().clone()).collect();
        let ((p1, s1), (_, s2)) = decimal_args(&types)?;
        let (p, s) = quotient_type(p1, s1, s2);
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let (Some(a), Some(b)) = (
            arrays[0].as_any().downcast_ref::<Decimal128Array>(),
            arrays[1].as_any().downcast_ref::<Decimal128Array>(),
        ) else {
            return exec_err!("mysql_div: arguments are not decimals");
        };
        // a / b at scale s: a * 10^(s - s1 + s2) / b, rounded half away from zero.
        let k = s as i32 - s1 as i32 + s2 as i32;
        let ten = i256::from_i128(10);
        let (up, down) = if k >= 0 {
            (ten.checked_pow(k as u32), None)
        } else {
            (Some(i256::from_i128(1)), ten.checked_pow((-k) as u32))
        };
        let Some(up) = up else { return exec_err!("mysql_div: scale out of range") };
        let mut out = Vec::with_capacity(a.len());
        for i in 0..a.len() {
            if a.is_null(i) || b.is_null(i) || b.value(i) == 0 {
                out.push(None);
                continue;
            }
            let mut n = i256::from_i128(a.value(i)).wrapping_mul(up);
            if let Some(d) = down {
                n = n.wrapping_div(d);
            }
            let d = i256::from_i128(b.value(i));
            let (q, r) = (n.wrapping_div(d), n.wrapping_rem(d));
            let twice = r.wrapping_abs().wrapping_mul(i256::from_i128(2));
            let q = if twice >= d.wrapping_abs() {
                if n.is_negative() != d.is_negative() {
                    q.wrapping_sub(i256::from_i128(1))
                } else {
                    q.wrapping_add(i256::from_i128(1))
                }
            } else {
                q
            };
            match q.to_i128().filter(|v| v.unsigned_abs() < 10u128.pow(p as u32)) {
                Some(v) => out.push(Some(v)),
                None => return exec_err!("Out of range value: a DECIMAL quotient does not fit DECIMAL({p}, {s})"),
            }
        }
        let arr = Decimal128Array::from(out).with_precision_and_scale(p, s)?;
        Ok(ColumnarValue::Array(Arc::new(arr) as ArrayRef))
    }
}

/// `a / b` of two doubles, NULL for a zero divisor.
#[derive(Debug, PartialEq, Eq, Hash)]
struct FloatDiv {
    signature: Signature,
}

impl FloatDiv {
    fn new() -> FloatDiv {
        FloatDiv { signature: Signature::exact(vec![DataType::Float64, DataType::Float64], Volatility::Immutable) }
    }
}

impl ScalarUDFImpl for FloatDiv {
    fn name(&self) -> &str {
        "mysql_fdiv"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let (Some(a), Some(b)) =
            (arrays[0].as_any().downcast_ref::<Float64Array>(), arrays[1].as_any().downcast_ref::<Float64Array>())
        else {
            return exec_err!("mysql_fdiv: arguments are not doubles");
        };
        let out: Float64Array = a
            .iter()
            .zip(b.iter())
            .map(|(x, y)| match (x, y) {
                (Some(x), Some(y)) if y != 0.0 => Some(x / y),
                _ => None,
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotient_types_follow_mysql() {
        // INT / INT: DECIMAL(10 + 0 + 4, 4); DECIMAL(15,2) / DECIMAL(2,1): scale 6.
        assert_eq!(quotient_type(10, 0, 0), (14, 4));
        assert_eq!(quotient_type(15, 2, 1), (20, 6));
        assert_eq!(quotient_type(38, 28, 0), (38, 30));
    }
}
