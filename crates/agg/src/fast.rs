//! A pushed aggregation program compiled for one table's row layout: expressions over signed
//! integer, DECIMAL and FLOAT/DOUBLE columns become typed trees (decimal scales, literal
//! conversions and the kind of every step settled once), evaluated a batch of rows at a time:
//! the columns they read are copied from the stored bytes of each row into typed column
//! vectors (`Batch`), every node runs over the whole batch, and typed accumulators fold the
//! results row by row in scan order. The results are exactly
//! those of the `Value` interpreter in `agg` (same MySQL arithmetic, the same overflow errors, the
//! same partial rows); a program this cannot compile (unsigned or temporal arguments, key columns,
//! other literals) is run by the interpreter.

use crate::{AggError, AggExpr, AggOp, Aggregation, Arith};
use tern_types::row::{RowLayout, stored_i128, stored_int, stored_u64};
use tern_types::schema::ColumnType;
use tern_types::value::Value;

type AResult<T> = Result<T, AggError>;

fn out_of_range(what: &str) -> AggError {
    AggError(format!("{what} value is out of range in a pushed aggregate"))
}

fn damaged() -> AggError {
    AggError("damaged row in a pushed aggregate".into())
}

/// 10^38: a DECIMAL result at or beyond it is out of range.
const DEC_LIMIT: u128 = 100_000_000_000_000_000_000_000_000_000_000_000_000;

/// Where a fixed column's bytes are in a row body.
#[derive(Debug, Clone, Copy)]
struct At {
    off: usize,
    width: usize,
    null_bit: Option<u32>,
}

/// A column the program reads, copied from the batch's rows into a typed vector.
#[derive(Debug, Clone, Copy)]
enum Load {
    Int(At, u32),
    Dec(At),
    Flt(At, bool),
}

/// A column of values over a batch; `null` (None when no row is NULL, as for a NOT NULL
/// column): `null[i]` — row i has no value (its `v[i]` is 0).
#[derive(Debug, Clone, Default)]
struct Vector<T> {
    v: Vec<T>,
    null: Option<Vec<bool>>,
}

/// The batch's copy of one loaded column.
#[derive(Debug, Clone)]
enum Col {
    I(Vector<i64>),
    D(Vector<i128>),
    F(Vector<f64>),
}

/// Rows buffered for evaluation (their bodies, borrowed from the scanned partition) and their
/// groups; the loaded columns are filled from them when the batch is evaluated.
#[derive(Debug, Default)]
pub struct Batch<'r> {
    rows: Vec<&'r [u8]>,
    groups: Vec<u32>,
    cols: Vec<Col>,
}

impl Batch<'_> {
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }
}

/// Rows per batch (a batch's vectors stay in the core's L2 cache).
pub const BATCH_ROWS: usize = 512;

/// Fills `out` with `f` of column `at`'s bytes in every row.
fn load<T: Copy + Default>(rows: &[&[u8]], at: At, out: &mut Vector<T>, f: impl Fn(&[u8]) -> T) -> AResult<()> {
    out.v.clear();
    let (lo, hi) = (at.off, at.off + at.width);
    match at.null_bit {
        None => {
            out.null = None;
            for body in rows {
                out.v.push(f(body.get(lo..hi).ok_or_else(damaged)?));
            }
        }
        Some(bit) => {
            let mut null = out.null.take().unwrap_or_default();
            null.clear();
            for body in rows {
                if tern_types::row::is_null(body, Some(bit)) {
                    null.push(true);
                    out.v.push(T::default());
                } else {
                    null.push(false);
                    out.v.push(f(body.get(lo..hi).ok_or_else(damaged)?));
                }
            }
            out.null = Some(null);
        }
    }
    Ok(())
}

/// An expression's values over a batch: a loaded column (borrowed), computed values, or one
/// literal for every row.
enum Vals<'a, T> {
    Ref(&'a Vector<T>),
    Own(Vector<T>),
    Lit(T),
}

/// A `Vals` with its kind settled once per batch: a column's values and null flags (cut to
/// the batch's rows, so the loops below need no bounds checks), or one literal.
#[derive(Clone, Copy)]
enum View<'a, T> {
    Col(&'a [T], Option<&'a [bool]>),
    Lit(T),
}

impl<T: Copy + Default> Vals<'_, T> {
    #[inline(always)]
    fn view(&self, n: usize) -> View<'_, T> {
        let c: &Vector<T> = match self {
            Vals::Ref(c) => c,
            Vals::Own(c) => c,
            Vals::Lit(x) => return View::Lit(*x),
        };
        View::Col(&c.v[..n], c.null.as_deref().map(|x| &x[..n]))
    }

    /// `f` over every row (absent in, absent out); `f` returns None for an overflow, which fails
    /// the batch with `err`.
    fn map<U: Copy + Default>(&self, n: usize, err: &str, f: impl Fn(T) -> Option<U>) -> AResult<Vals<'static, U>> {
        match self.view(n) {
            View::Lit(x) => match f(x) {
                Some(y) => Ok(Vals::Lit(y)),
                None => Err(out_of_range(err)),
            },
            View::Col(v, null) => {
                let (out, ok) = run(n, null.map(<[bool]>::to_vec), |i| f(v[i]));
                if ok { Ok(Vals::Own(out)) } else { Err(out_of_range(err)) }
            }
        }
    }
}

/// `f(i)` for every row i with a value (`null` None: every row); false when some `f` gave
/// None (an overflow).
#[inline(always)]
fn run<U: Copy + Default>(n: usize, null: Option<Vec<bool>>, f: impl Fn(usize) -> Option<U>) -> (Vector<U>, bool) {
    let mut ok = true;
    // `extend` over a range knows its length: no capacity check per value.
    let v: Vec<U> = match &null {
        None => (0..n)
            .map(|i| {
                let r = f(i);
                ok &= r.is_some();
                r.unwrap_or_default()
            })
            .collect(),
        Some(nl) => nl[..n]
            .iter()
            .enumerate()
            .map(|(i, &xn)| {
                if xn {
                    return U::default();
                }
                let r = f(i);
                ok &= r.is_some();
                r.unwrap_or_default()
            })
            .collect(),
    };
    (Vector { v, null }, ok)
}

/// `f` over the rows where both sides have a value (absent otherwise); None from `f` is an
/// overflow, failing the batch with `err`. One loop per pair of kinds (column or literal), so
/// no row pays for the choice.
fn zip<T: Copy + Default, U: Copy + Default>(
    a: &Vals<T>,
    b: &Vals<T>,
    n: usize,
    err: &str,
    f: impl Fn(T, T) -> Option<U>,
) -> AResult<Vals<'static, U>> {
    let (out, ok) = match (a.view(n), b.view(n)) {
        (View::Lit(x), View::Lit(y)) => {
            return match f(x, y) {
                Some(r) => Ok(Vals::Lit(r)),
                None => Err(out_of_range(err)),
            };
        }
        (View::Col(x, xn), View::Lit(y)) => run(n, xn.map(<[bool]>::to_vec), |i| f(x[i], y)),
        (View::Lit(x), View::Col(y, yn)) => run(n, yn.map(<[bool]>::to_vec), |i| f(x, y[i])),
        (View::Col(x, xn), View::Col(y, yn)) => {
            let null = match (xn, yn) {
                (None, None) => None,
                (Some(a), None) | (None, Some(a)) => Some(a.to_vec()),
                (Some(a), Some(b)) => Some(a.iter().zip(b).map(|(a, b)| *a | *b).collect()),
            };
            run(n, null, |i| f(x[i], y[i]))
        }
    };
    if ok { Ok(Vals::Own(out)) } else { Err(out_of_range(err)) }
}

/// An integer (BIGINT) expression.
#[derive(Debug, Clone)]
enum IE {
    Col(usize),
    Lit(i64),
    Neg(Box<IE>),
    Bin(Arith, Box<IE>, Box<IE>),
}

/// A DECIMAL expression (its scale is fixed at compile time).
#[derive(Debug, Clone)]
enum DE {
    Col(usize),
    Lit(i128),
    /// An integer or decimal operand brought to a larger scale (× 10^k, checked).
    Up(Box<DE>, i128),
    FromI(IE),
    Neg(Box<DE>),
    Bin(Arith, Box<DE>, Box<DE>),
}

/// A DOUBLE expression.
#[derive(Debug, Clone)]
enum FE {
    Col(usize),
    Lit(f64),
    FromI(IE),
    /// A decimal of this scale as a double (`v / 10^scale`, as `Value::as_f64`).
    FromD(DE, u8),
    Neg(Box<FE>),
    Bin(Arith, Box<FE>, Box<FE>),
}

#[derive(Debug, Clone)]
enum CE {
    I(IE),
    D(DE, u8),
    F(FE),
}

impl IE {
    fn eval<'a>(&self, b: &'a Batch<'_>) -> AResult<Vals<'a, i64>> {
        let n = b.rows.len();
        Ok(match self {
            IE::Col(slot) => match &b.cols[*slot] {
                Col::I(v) => Vals::Ref(v),
                _ => return Err(shape()),
            },
            IE::Lit(v) => Vals::Lit(*v),
            IE::Neg(a) => a.eval(b)?.map(n, "BIGINT", |x| x.checked_neg())?,
            IE::Bin(op, x, y) => {
                let (x, y) = (x.eval(b)?, y.eval(b)?);
                match op {
                    Arith::Add => zip(&x, &y, n, "BIGINT", |x, y| x.checked_add(y))?,
                    Arith::Sub => zip(&x, &y, n, "BIGINT", |x, y| x.checked_sub(y))?,
                    Arith::Mul => zip(&x, &y, n, "BIGINT", |x, y| x.checked_mul(y))?,
                }
            }
        })
    }
}

fn shape() -> AggError {
    AggError("a compiled aggregate lost its shape".into())
}

/// A DECIMAL result within its 38 digits.
#[inline(always)]
fn dec(v: Option<i128>) -> Option<i128> {
    v.filter(|v| v.unsigned_abs() < DEC_LIMIT)
}

impl DE {
    fn eval<'a>(&self, b: &'a Batch<'_>) -> AResult<Vals<'a, i128>> {
        let n = b.rows.len();
        Ok(match self {
            DE::Col(slot) => match &b.cols[*slot] {
                Col::D(v) => Vals::Ref(v),
                _ => return Err(shape()),
            },
            DE::Lit(v) => Vals::Lit(*v),
            DE::Up(a, m) => a.eval(b)?.map(n, "DECIMAL", |x| x.checked_mul(*m))?,
            DE::FromI(a) => a.eval(b)?.map(n, "DECIMAL", |x| Some(x as i128))?,
            DE::Neg(a) => a.eval(b)?.map(n, "DECIMAL", |x| Some(-x))?,
            DE::Bin(op, x, y) => {
                let (x, y) = (x.eval(b)?, y.eval(b)?);
                match op {
                    Arith::Add => zip(&x, &y, n, "DECIMAL", |x, y| dec(x.checked_add(y)))?,
                    Arith::Sub => zip(&x, &y, n, "DECIMAL", |x, y| dec(x.checked_sub(y)))?,
                    // Operands that fit in 64 bits (nearly all) multiply with one widening
                    // multiplication, which cannot overflow 128 bits.
                    Arith::Mul => zip(&x, &y, n, "DECIMAL", |x, y| {
                        dec(match (i64::try_from(x), i64::try_from(y)) {
                            (Ok(a), Ok(b)) => Some(a as i128 * b as i128),
                            _ => x.checked_mul(y),
                        })
                    })?,
                }
            }
        })
    }
}

impl FE {
    fn eval<'a>(&self, b: &'a Batch<'_>) -> AResult<Vals<'a, f64>> {
        let n = b.rows.len();
        let finite = |r: f64| r.is_finite().then_some(r);
        Ok(match self {
            FE::Col(slot) => match &b.cols[*slot] {
                Col::F(v) => Vals::Ref(v),
                _ => return Err(shape()),
            },
            FE::Lit(v) => Vals::Lit(*v),
            FE::FromI(a) => a.eval(b)?.map(n, "DOUBLE", |x| Some(x as f64))?,
            FE::FromD(a, scale) => {
                let d = 10f64.powi(*scale as i32);
                a.eval(b)?.map(n, "DOUBLE", |x| Some(x as f64 / d))?
            }
            FE::Neg(a) => a.eval(b)?.map(n, "DOUBLE", |x| Some(-x))?,
            FE::Bin(op, x, y) => {
                let (x, y) = (x.eval(b)?, y.eval(b)?);
                match op {
                    Arith::Add => zip(&x, &y, n, "DOUBLE", |x, y| finite(x + y))?,
                    Arith::Sub => zip(&x, &y, n, "DOUBLE", |x, y| finite(x - y))?,
                    Arith::Mul => zip(&x, &y, n, "DOUBLE", |x, y| finite(x * y))?,
                }
            }
        })
    }
}

fn to_f(e: CE) -> FE {
    match e {
        // Literals are converted once, here.
        CE::I(IE::Lit(v)) => FE::Lit(v as f64),
        CE::D(DE::Lit(v), s) => FE::Lit(v as f64 / 10f64.powi(s as i32)),
        CE::I(i) => FE::FromI(i),
        CE::D(d, s) => FE::FromD(d, s),
        CE::F(f) => f,
    }
}

/// A decimal operand at scale `to` (an integer is a decimal of scale 0).
fn to_d(e: CE, to: u8) -> Option<DE> {
    let (d, s) = match e {
        CE::I(i) => (DE::FromI(i), 0),
        CE::D(d, s) => (d, s),
        CE::F(_) => return None,
    };
    if s == to {
        return Some(match d {
            DE::FromI(IE::Lit(v)) => DE::Lit(v as i128),
            d => d,
        });
    }
    let m = 10i128.checked_pow((to - s) as u32)?;
    Some(match d {
        // A literal is scaled once, here (one that would overflow is left to fail per row, as
        // the interpreter does).
        DE::Lit(v) if v.checked_mul(m).is_some() => DE::Lit(v * m),
        DE::FromI(IE::Lit(v)) if (v as i128).checked_mul(m).is_some() => DE::Lit(v as i128 * m),
        d => DE::Up(Box::new(d), m),
    })
}

/// The batch slot of column `c` read as `load` (one slot per column).
fn slot(loads: &mut Vec<(usize, Load)>, c: usize, load: Load) -> usize {
    match loads.iter().position(|(x, _)| *x == c) {
        Some(i) => i,
        None => {
            loads.push((c, load));
            loads.len() - 1
        }
    }
}

fn compile(e: &AggExpr, layout: &RowLayout, loads: &mut Vec<(usize, Load)>) -> Option<CE> {
    Some(match e {
        AggExpr::Col(c) => {
            let c = *c as usize;
            let (off, width, null_bit) = layout.fixed_at(c)?;
            let at = At { off, width, null_bit };
            use ColumnType as T;
            let int = |bits| Load::Int(at, bits);
            match layout.types[c] {
                T::TinyInt { unsigned: false } => CE::I(IE::Col(slot(loads, c, int(8)))),
                T::SmallInt { unsigned: false } => CE::I(IE::Col(slot(loads, c, int(16)))),
                T::MediumInt { unsigned: false } | T::Int { unsigned: false } => {
                    CE::I(IE::Col(slot(loads, c, int(32))))
                }
                T::BigInt { unsigned: false } => CE::I(IE::Col(slot(loads, c, int(64)))),
                T::Decimal { scale, .. } if width == 16 => CE::D(DE::Col(slot(loads, c, Load::Dec(at))), scale),
                T::Float => CE::F(FE::Col(slot(loads, c, Load::Flt(at, true)))),
                T::Double => CE::F(FE::Col(slot(loads, c, Load::Flt(at, false)))),
                _ => return None,
            }
        }
        AggExpr::Lit(v) => match v {
            Value::Int(i) => CE::I(IE::Lit(*i)),
            Value::Decimal { v, scale } => CE::D(DE::Lit(*v), *scale),
            Value::Double(f) => CE::F(FE::Lit(*f)),
            _ => return None,
        },
        AggExpr::Neg(a) => match compile(a, layout, loads)? {
            CE::I(i) => CE::I(IE::Neg(Box::new(i))),
            CE::D(d, s) => CE::D(DE::Neg(Box::new(d)), s),
            CE::F(f) => CE::F(FE::Neg(Box::new(f))),
        },
        AggExpr::Bin(op, a, b) => {
            let (a, b) = (compile(a, layout, loads)?, compile(b, layout, loads)?);
            match (&a, &b) {
                (CE::F(_), _) | (_, CE::F(_)) => CE::F(FE::Bin(*op, Box::new(to_f(a)), Box::new(to_f(b)))),
                (CE::I(_), CE::I(_)) => {
                    let (CE::I(x), CE::I(y)) = (a, b) else { unreachable!() };
                    CE::I(IE::Bin(*op, Box::new(x), Box::new(y)))
                }
                _ => {
                    let scale = |e: &CE| if let CE::D(_, s) = e { *s } else { 0 };
                    let (sa, sb) = (scale(&a), scale(&b));
                    if *op == Arith::Mul {
                        let s = sa.checked_add(sb)?;
                        CE::D(DE::Bin(*op, Box::new(to_d(a, sa)?), Box::new(to_d(b, sb)?)), s)
                    } else {
                        let s = sa.max(sb);
                        CE::D(DE::Bin(*op, Box::new(to_d(a, s)?), Box::new(to_d(b, s)?)), s)
                    }
                }
            }
        }
    })
}

/// The kind of a compiled aggregate's accumulator.
#[derive(Debug, Clone, Copy)]
enum Acc {
    Count,
    /// SUM of integers or decimals: exact, at a fixed scale.
    SumD(u8),
    SumF,
    /// MIN/MAX over integers (kept as BIGINT), decimals (at their scale) or doubles.
    MinMaxI,
    MinMaxD(u8),
    MinMaxF,
    Var,
}

/// One aggregate's accumulators, one entry per group (`has[g]`: group g has seen a value).
#[derive(Debug, Clone)]
enum AccCol {
    Count(Vec<i64>),
    SumD(Vec<i128>, Vec<bool>, u8),
    SumF(Vec<f64>, Vec<bool>),
    MinMaxI(Vec<i64>, Vec<bool>),
    MinMaxD(Vec<i128>, Vec<bool>, u8),
    MinMaxF(Vec<f64>, Vec<bool>),
    Var(Vec<(i64, f64, f64)>),
}

impl AccCol {
    fn new(kind: Acc) -> AccCol {
        match kind {
            Acc::Count => AccCol::Count(Vec::new()),
            Acc::SumD(s) => AccCol::SumD(Vec::new(), Vec::new(), s),
            Acc::SumF => AccCol::SumF(Vec::new(), Vec::new()),
            Acc::MinMaxI => AccCol::MinMaxI(Vec::new(), Vec::new()),
            Acc::MinMaxD(s) => AccCol::MinMaxD(Vec::new(), Vec::new(), s),
            Acc::MinMaxF => AccCol::MinMaxF(Vec::new(), Vec::new()),
            Acc::Var => AccCol::Var(Vec::new()),
        }
    }

    fn push(&mut self) {
        match self {
            AccCol::Count(c) => c.push(0),
            AccCol::SumD(v, h, _) | AccCol::MinMaxD(v, h, _) => {
                v.push(0);
                h.push(false);
            }
            AccCol::SumF(v, h) | AccCol::MinMaxF(v, h) => {
                v.push(0.0);
                h.push(false);
            }
            AccCol::MinMaxI(v, h) => {
                v.push(0);
                h.push(false);
            }
            AccCol::Var(v) => v.push((0, 0.0, 0.0)),
        }
    }

    fn len(&self) -> usize {
        match self {
            AccCol::Count(c) => c.len(),
            AccCol::SumD(v, ..) | AccCol::MinMaxD(v, ..) => v.len(),
            AccCol::SumF(v, _) | AccCol::MinMaxF(v, _) => v.len(),
            AccCol::MinMaxI(v, _) => v.len(),
            AccCol::Var(v) => v.len(),
        }
    }

    /// Group g's slots as the interpreter keeps them.
    fn values(&self, g: usize, out: &mut Vec<Value>) {
        let opt = |has: &[bool], v: Value| if has[g] { v } else { Value::Null };
        match self {
            AccCol::Count(c) => out.push(Value::Int(c[g])),
            AccCol::SumD(v, h, scale) | AccCol::MinMaxD(v, h, scale) => {
                out.push(opt(h, Value::Decimal { v: v[g], scale: *scale }))
            }
            AccCol::SumF(v, h) | AccCol::MinMaxF(v, h) => out.push(opt(h, Value::Double(v[g]))),
            AccCol::MinMaxI(v, h) => out.push(opt(h, Value::Int(v[g]))),
            AccCol::Var(v) => {
                let (n, mean, m2) = v[g];
                out.extend([Value::Int(n), Value::Double(mean), Value::Double(m2)]);
            }
        }
    }
}

/// The accumulators of every group of a compiled program, one column per aggregate.
#[derive(Debug, Clone, Default)]
pub struct Accs {
    cols: Vec<AccCol>,
    groups: usize,
}

impl Accs {
    /// Fresh accumulators for a new group (its index: the number of groups before).
    pub fn push_group(&mut self) {
        for c in &mut self.cols {
            c.push();
        }
        self.groups += 1;
    }
}

/// One compiled aggregate: its operation, argument and accumulator kind.
#[derive(Debug, Clone)]
struct Agg {
    op: AggOp,
    arg: Option<CE>,
    acc: Acc,
}

/// The compiled program.
#[derive(Debug, Clone)]
pub struct Fast {
    aggs: Vec<Agg>,
    loads: Vec<Load>,
}

/// One aggregate's argument over a batch.
enum Arg<'a> {
    Rows,
    I(Vals<'a, i64>),
    D(Vals<'a, i128>, u8),
    F(Vals<'a, f64>),
}

/// `f(group, value)` for every row with a value, in row order.
#[inline(always)]
fn each<T: Copy>(groups: &[u32], view: View<T>, mut f: impl FnMut(usize, T)) {
    match view {
        View::Lit(x) => groups.iter().for_each(|&g| f(g as usize, x)),
        View::Col(v, None) => {
            for (&g, &x) in groups.iter().zip(v) {
                f(g as usize, x);
            }
        }
        View::Col(v, Some(null)) => {
            for ((&g, &x), &n) in groups.iter().zip(v).zip(null) {
                if !n {
                    f(g as usize, x);
                }
            }
        }
    }
}

/// Welford's step of a variance accumulator.
#[inline(always)]
fn var_step(s: &mut (i64, f64, f64), x: f64) {
    let (n, mean, m2) = s;
    *n += 1;
    let new_mean = *mean + (x - *mean) / *n as f64;
    *m2 += (x - *mean) * (x - new_mean);
    *mean = new_mean;
}

impl Fast {
    /// Compiles `a` for `layout`; None when some argument cannot be compiled.
    pub fn compile(a: &Aggregation, layout: &RowLayout) -> Option<Fast> {
        let mut aggs = Vec::with_capacity(a.aggs.len());
        let mut loads = Vec::new();
        for (op, arg) in &a.aggs {
            let arg = match arg {
                None => None,
                Some(e) => Some(compile(e, layout, &mut loads)?),
            };
            let acc = match (op, &arg) {
                (AggOp::Count, _) => Acc::Count,
                (AggOp::Var, _) => Acc::Var,
                (_, None) => return None,
                (AggOp::Sum, Some(CE::I(_))) => Acc::SumD(0),
                (AggOp::Sum, Some(CE::D(_, s))) => Acc::SumD(*s),
                (AggOp::Sum, Some(CE::F(_))) => Acc::SumF,
                (AggOp::Min | AggOp::Max, Some(CE::I(_))) => Acc::MinMaxI,
                (AggOp::Min | AggOp::Max, Some(CE::D(_, s))) => Acc::MinMaxD(*s),
                // The interpreter keeps a bare FLOAT column's MIN/MAX as FLOAT.
                (AggOp::Min | AggOp::Max, Some(CE::F(FE::Col(c))))
                    if matches!(loads.get(*c), Some((_, Load::Flt(_, true)))) =>
                {
                    return None;
                }
                (AggOp::Min | AggOp::Max, Some(CE::F(_))) => Acc::MinMaxF,
            };
            aggs.push(Agg { op: *op, arg, acc });
        }
        let loads = loads.into_iter().map(|(_, l)| l).collect();
        Some(Fast { aggs, loads })
    }

    /// Accumulators for no group yet.
    pub fn accs(&self) -> Accs {
        Accs { cols: self.aggs.iter().map(|a| AccCol::new(a.acc)).collect(), groups: 0 }
    }

    /// Buffers one row's body (`RowLayout::body`) with its group (a damaged row fails the batch
    /// when its columns are loaded).
    #[inline]
    pub fn push<'r>(&self, batch: &mut Batch<'r>, body: &'r [u8], group: u32) {
        batch.rows.push(body);
        batch.groups.push(group);
    }

    /// Evaluates the batch and folds it, row by row in the order pushed, into the groups'
    /// accumulators; the batch is empty afterwards.
    pub fn flush(&self, batch: &mut Batch<'_>, accs: &mut Accs) -> AResult<()> {
        let result = self.load(batch).and_then(|()| self.fold(batch, accs));
        batch.rows.clear();
        batch.groups.clear();
        result
    }

    /// Copies the columns the program reads from the batch's rows into its vectors.
    fn load(&self, batch: &mut Batch<'_>) -> AResult<()> {
        if batch.cols.len() != self.loads.len() {
            batch.cols = self
                .loads
                .iter()
                .map(|l| match l {
                    Load::Int(..) => Col::I(Vector::default()),
                    Load::Dec(_) => Col::D(Vector::default()),
                    Load::Flt(..) => Col::F(Vector::default()),
                })
                .collect();
        }
        let rows = &batch.rows[..];
        for (l, c) in self.loads.iter().zip(batch.cols.iter_mut()) {
            match (l, c) {
                (Load::Int(at, bits), Col::I(v)) => load(rows, *at, v, |b| stored_int(b, *bits))?,
                (Load::Dec(at), Col::D(v)) => load(rows, *at, v, stored_i128)?,
                (Load::Flt(at, true), Col::F(v)) => {
                    load(rows, *at, v, |b| f32::from_bits(stored_u64(b) as u32) as f64)?
                }
                (Load::Flt(at, false), Col::F(v)) => load(rows, *at, v, |b| f64::from_bits(stored_u64(b)))?,
                _ => return Err(shape()),
            }
        }
        Ok(())
    }

    fn fold(&self, batch: &Batch<'_>, accs: &mut Accs) -> AResult<()> {
        if batch.rows.is_empty() {
            return Ok(());
        }
        // Every argument first (an error anywhere fails the batch, as it fails the scan).
        let args = self
            .aggs
            .iter()
            .map(|a| {
                Ok(match &a.arg {
                    None => Arg::Rows,
                    Some(CE::I(x)) => Arg::I(x.eval(batch)?),
                    Some(CE::D(x, s)) => Arg::D(x.eval(batch)?, *s),
                    Some(CE::F(x)) => Arg::F(x.eval(batch)?),
                })
            })
            .collect::<AResult<Vec<_>>>()?;
        let groups = &batch.groups[..];
        // Every group indexes every accumulator column (checked once, not per row).
        let n = accs.groups;
        if accs.cols.len() != self.aggs.len()
            || accs.cols.iter().any(|c| c.len() != n)
            || groups.iter().any(|&g| g as usize >= n)
        {
            return Err(shape());
        }
        // With few groups, the batch's rows per group are counted once (two lanes).
        let tally = (n <= LANE_GROUPS).then(|| {
            let mut lanes = [[0i64; LANE_GROUPS]; 2];
            let pairs = groups.chunks_exact(2);
            for &g in pairs.remainder() {
                lanes[0][g as usize] += 1;
            }
            for p in pairs {
                lanes[0][p[0] as usize] += 1;
                lanes[1][p[1] as usize] += 1;
            }
            Tally { groups: n, rows: std::array::from_fn(|g| lanes[0][g] + lanes[1][g]) }
        });
        for ((a, arg), col) in self.aggs.iter().zip(&args).zip(accs.cols.iter_mut()) {
            if !fold_all(a.op, col, arg, groups, tally.as_ref()) {
                return Err(shape());
            }
        }
        Ok(())
    }

    /// Group g's accumulators as the interpreter's slots (`Aggregation::start`'s layout).
    pub fn values(&self, accs: &Accs, g: usize) -> Vec<Value> {
        let mut out = Vec::with_capacity(accs.cols.len() + 2);
        for c in &accs.cols {
            c.values(g, &mut out);
        }
        out
    }
}

/// Groups up to which a batch's counts and exact sums are made in two interleaved lanes of
/// per-group partials (consecutive rows of one group then do not wait on each other's store to
/// the same accumulator).
const LANE_GROUPS: usize = 8;

/// A batch's rows per group, when there are at most LANE_GROUPS groups.
struct Tally {
    groups: usize,
    rows: [i64; LANE_GROUPS],
}

/// Whether a view has a value in every row.
fn no_nulls<T>(v: &View<T>) -> bool {
    matches!(v, View::Lit(_) | View::Col(_, None))
}

/// Adds a batch's exact values to their groups' sums in two lanes (`Tally`'s groups), when no
/// order of the additions can overflow (then the result equals the row-by-row saturating sums):
/// false, and nothing added, otherwise. NULL rows hold 0 and only skip `has`.
fn sum_lanes<T: Copy>(
    groups: &[u32],
    view: View<T>,
    tally: &Tally,
    sums: &mut [i128],
    has: &mut [bool],
    wide: impl Fn(T) -> i128,
) -> bool {
    let View::Col(v, null) = view else { return false };
    let biggest = v.iter().map(|&x| wide(x).unsigned_abs()).max().unwrap_or(0);
    let start = sums.iter().map(|x| x.unsigned_abs()).max().unwrap_or(0);
    let safe =
        biggest.checked_mul(v.len() as u128).and_then(|b| b.checked_add(start)).is_some_and(|b| b <= i128::MAX as u128);
    if !safe || sums.len() != tally.groups {
        return false;
    }
    let mut lanes = [[0i128; LANE_GROUPS]; 2];
    let (pg, pv) = (groups.chunks_exact(2), v.chunks_exact(2));
    for (&g, &x) in pg.remainder().iter().zip(pv.remainder()) {
        lanes[0][g as usize] += wide(x);
    }
    for (g, x) in pg.zip(pv) {
        lanes[0][g[0] as usize] += wide(x[0]);
        lanes[1][g[1] as usize] += wide(x[1]);
    }
    for (g, s) in sums.iter_mut().enumerate() {
        *s += lanes[0][g] + lanes[1][g];
    }
    match null {
        None => has.iter_mut().zip(&tally.rows).for_each(|(h, &r)| *h |= r > 0),
        Some(null) => groups.iter().zip(null).for_each(|(&g, &n)| has[g as usize] |= !n),
    }
    true
}

/// Folds a batch's values of one aggregate into its groups' accumulators, in row order (or,
/// for counts and exact sums over few groups, in lanes with the same result): one loop per
/// kind of accumulator and argument. False when the accumulator is not of the argument's
/// kind. Every group is below the columns' length (`Fast::fold` checks).
fn fold_all(op: AggOp, col: &mut AccCol, arg: &Arg, groups: &[u32], tally: Option<&Tally>) -> bool {
    let n = groups.len();
    let min = op == AggOp::Min;
    // COUNT over rows that all have a value: the batch's rows per group.
    if let (AccCol::Count(c), Some(t)) = (&mut *col, tally)
        && c.len() == t.groups
        && match arg {
            Arg::Rows => true,
            Arg::I(v) => no_nulls(&v.view(n)),
            Arg::D(v, _) => no_nulls(&v.view(n)),
            Arg::F(v) => no_nulls(&v.view(n)),
        }
    {
        c.iter_mut().zip(&t.rows).for_each(|(c, r)| *c += r);
        return true;
    }
    if let (AccCol::SumD(s, h, _), Some(t)) = (&mut *col, tally) {
        let done = match arg {
            Arg::I(v) => sum_lanes(groups, v.view(n), t, s, h, |x| x as i128),
            Arg::D(v, _) => sum_lanes(groups, v.view(n), t, s, h, |x| x),
            _ => false,
        };
        if done {
            return true;
        }
    }
    match (col, arg) {
        (AccCol::Count(c), Arg::Rows) => groups.iter().for_each(|&g| c[g as usize] += 1),
        (AccCol::Count(c), Arg::I(v)) => each(groups, v.view(n), |g, _| c[g] += 1),
        (AccCol::Count(c), Arg::D(v, _)) => each(groups, v.view(n), |g, _| c[g] += 1),
        (AccCol::Count(c), Arg::F(v)) => each(groups, v.view(n), |g, _| c[g] += 1),
        (AccCol::SumD(s, h, _), Arg::I(v)) => each(groups, v.view(n), |g, x| {
            s[g] = s[g].saturating_add(x as i128);
            h[g] = true;
        }),
        (AccCol::SumD(s, h, _), Arg::D(v, _)) => each(groups, v.view(n), |g, x| {
            s[g] = s[g].saturating_add(x);
            h[g] = true;
        }),
        (AccCol::SumF(s, h), Arg::F(v)) => each(groups, v.view(n), |g, x| {
            s[g] += x;
            h[g] = true;
        }),
        (AccCol::MinMaxI(m, h), Arg::I(v)) => each(groups, v.view(n), |g, x| pick(min, &mut m[g], &mut h[g], x)),
        (AccCol::MinMaxD(m, h, _), Arg::D(v, _)) => each(groups, v.view(n), |g, x| pick(min, &mut m[g], &mut h[g], x)),
        (AccCol::MinMaxF(m, h), Arg::F(v)) => each(groups, v.view(n), |g, x| pick(min, &mut m[g], &mut h[g], x)),
        (AccCol::Var(s), Arg::I(v)) => each(groups, v.view(n), |g, x| var_step(&mut s[g], x as f64)),
        (AccCol::Var(s), Arg::D(v, scale)) => {
            let d = 10f64.powi(*scale as i32);
            each(groups, v.view(n), |g, x| var_step(&mut s[g], x as f64 / d))
        }
        (AccCol::Var(s), Arg::F(v)) => each(groups, v.view(n), |g, x| var_step(&mut s[g], x)),
        (AccCol::Var(_), Arg::Rows) => {}
        _ => return false,
    }
    true
}

/// MIN (`min`) or MAX: `v` replaces the current value when better or the first.
#[inline(always)]
fn pick<T: PartialOrd + Copy>(min: bool, cur: &mut T, has: &mut bool, v: T) {
    // As the interpreter: the current value stays only when it is at least as good.
    if !*has || !((min && *cur <= v) || (!min && *cur >= v)) {
        *cur = v;
        *has = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Partial;
    use tern_types::rng::Rng;
    use tern_types::schema::{Column, Table};

    fn layout() -> RowLayout {
        let dec = |p, s| ColumnType::Decimal { precision: p, scale: s, unsigned: false };
        let t = Table::new(
            "d",
            "t",
            vec![
                Column::new("id", ColumnType::Int { unsigned: false }).not_null(),
                Column::new("g", ColumnType::VarChar { len: 5 }),
                Column::new("ti", ColumnType::TinyInt { unsigned: false }),
                Column::new("i", ColumnType::Int { unsigned: false }),
                Column::new("b", ColumnType::BigInt { unsigned: false }),
                Column::new("d2", dec(15, 2)).not_null(),
                Column::new("d4", dec(12, 4)),
                Column::new("f", ColumnType::Float),
                Column::new("x", ColumnType::Double),
                Column::new("u", ColumnType::Int { unsigned: true }),
            ],
            vec![0],
        );
        RowLayout::new(&t)
    }

    fn expr(rng: &mut Rng, depth: u32) -> AggExpr {
        if depth == 0 || rng.chance(35) {
            return match rng.below(6) {
                0 => AggExpr::Lit(Value::Int(rng.below(2001) as i64 - 1000)),
                1 => AggExpr::Lit(Value::Decimal { v: rng.below(20001) as i128 - 10000, scale: rng.below(4) as u8 }),
                2 if rng.chance(30) => AggExpr::Lit(Value::Double(rng.below(1000) as f64 / 8.0)),
                _ => AggExpr::Col(2 + rng.below(7) as u16),
            };
        }
        if rng.chance(15) {
            return AggExpr::Neg(Box::new(expr(rng, depth - 1)));
        }
        let op = *rng.pick(&[Arith::Add, Arith::Sub, Arith::Mul]);
        AggExpr::Bin(op, Box::new(expr(rng, depth - 1)), Box::new(expr(rng, depth - 1)))
    }

    fn row(rng: &mut Rng, l: &RowLayout, id: i64, big: bool) -> Vec<u8> {
        let span = if big { u64::MAX / 4 } else { 100_000 };
        let mut vals = vec![
            Value::Int(id),
            Value::str(["a", "b", "c"][rng.below(3) as usize]),
            Value::Int(rng.below(256) as i64 - 128),
            Value::Int(rng.below(1 << 31) as i64 - (1 << 30)),
            Value::Int((rng.below(span) as i64).wrapping_sub(span as i64 / 2)),
            Value::Decimal { v: rng.below(1_000_000_000) as i128 - 500_000_000, scale: 2 },
            Value::Decimal { v: rng.below(100_000_000) as i128 - 50_000_000, scale: 4 },
            Value::Float(rng.below(10_000) as f32 / 16.0),
            Value::Double(rng.below(1_000_000) as f64 / 64.0 - 5000.0),
            Value::UInt(rng.below(1000)),
        ];
        // Every nullable column is NULL now and then (d2 is NOT NULL).
        for (i, v) in vals.iter_mut().enumerate() {
            if i != 0 && i != 5 && rng.chance(10) {
                *v = Value::Null;
            }
        }
        let mut out = Vec::new();
        l.encode_row(&vals, &mut out).unwrap();
        out
    }

    /// Random programs over random rows: the compiled program's partial rows (or its error) equal
    /// the interpreter's, byte for byte. Prints the seed that reproduces a failure.
    #[test]
    fn compiled_programs_equal_the_interpreter() {
        let seed = tern_testkit::seed();
        let mut rng = Rng::new(seed);
        let l = layout();
        let mut compiled = 0;
        let mut errors = 0;
        for case in 0..400 {
            let ops = [AggOp::Count, AggOp::Sum, AggOp::Min, AggOp::Max, AggOp::Var];
            let aggs = (0..1 + rng.below(4))
                .map(|_| {
                    let op = *rng.pick(&ops);
                    let arg = if op == AggOp::Count && rng.chance(30) { None } else { Some(expr(&mut rng, 3)) };
                    (op, arg)
                })
                .collect();
            let group_by = if rng.chance(50) { vec![AggExpr::Col(1)] } else { vec![] };
            let a = Aggregation { group_by, aggs };
            compiled += Fast::compile(&a, &l).is_some() as u32;
            let big = case % 5 == 0;
            // Some cases span several batches.
            let n = if case % 4 == 1 { 2 * BATCH_ROWS as i64 + 77 } else { 200 };
            let rows: Vec<Vec<u8>> = (0..n).map(|i| row(&mut rng, &l, i, big)).collect();
            let run = |interpreted: bool| {
                let mut p = if interpreted { Partial::interpreted() } else { Partial::default() };
                for r in &rows {
                    p.add(&a, &l, r)?;
                }
                p.finish()
            };
            // The same rows (or an error in both: which row's error comes first may differ, as
            // the batch evaluates one aggregate at a time).
            match (run(false), run(true)) {
                (Ok(x), Ok(y)) => assert_eq!(x, y, "seed {seed}, case {case}: {a:?}"),
                (Err(_), Err(_)) => errors += 1,
                (x, y) => panic!("seed {seed}, case {case}: {a:?}: {x:?} vs {y:?}"),
            }
        }
        assert!(compiled > 100, "seed {seed}: only {compiled} of 400 programs compiled");
        assert!(errors > 0, "seed {seed}: no program overflowed");
    }
}
