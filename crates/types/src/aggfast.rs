//! A pushed aggregation program compiled for one table's row layout: expressions over signed
//! integer, DECIMAL and FLOAT/DOUBLE columns become typed trees (decimal scales, literal
//! conversions and the kind of every step settled once), evaluated a batch of rows at a time:
//! the columns they read are copied from the stored bytes of each row into typed column
//! vectors (`Batch`), every node runs over the whole batch, and typed accumulators fold the
//! results row by row in scan order. The results are exactly
//! those of the `Value` interpreter in `agg` (same MySQL arithmetic, the same overflow errors, the
//! same partial rows); a program this cannot compile (unsigned or temporal arguments, key columns,
//! other literals) is run by the interpreter.

use crate::agg::{AggError, AggExpr, AggOp, Aggregation, Arith};
use crate::row::{RowLayout, stored_i128, stored_int, stored_u64};
use crate::schema::ColumnType;
use crate::value::Value;

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

impl At {
    #[inline]
    fn bytes<'a>(&self, body: &'a [u8]) -> AResult<Option<&'a [u8]>> {
        if crate::row::is_null(body, self.null_bit) {
            return Ok(None);
        }
        body.get(self.off..self.off + self.width).map(Some).ok_or_else(damaged)
    }
}

/// A column the program reads, copied per row into the batch.
#[derive(Debug, Clone, Copy)]
enum Load {
    Int(At, u32),
    Dec(At),
    Flt(At, bool),
}

/// A column of values over a batch; `null[i]`: row i has no value (its `v[i]` is 0).
#[derive(Debug, Clone, Default)]
struct Vector<T> {
    v: Vec<T>,
    null: Vec<bool>,
}

impl<T: Copy + Default> Vector<T> {
    fn with_capacity(n: usize) -> Self {
        Vector { v: Vec::with_capacity(n), null: Vec::with_capacity(n) }
    }

    fn push(&mut self, x: Option<T>) {
        self.null.push(x.is_none());
        self.v.push(x.unwrap_or_default());
    }

    fn clear(&mut self) {
        self.v.clear();
        self.null.clear();
    }
}

/// The batch's copy of one loaded column.
#[derive(Debug, Clone)]
enum Col {
    I(Vector<i64>),
    D(Vector<i128>),
    F(Vector<f64>),
}

/// Rows buffered for evaluation: their loaded columns and their groups.
#[derive(Debug, Default)]
pub struct Batch {
    cols: Vec<Col>,
    groups: Vec<u32>,
}

/// Rows per batch.
pub const BATCH_ROWS: usize = 1024;

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
    Col(&'a [T], &'a [bool]),
    Lit(T),
}

impl<T: Copy + Default> Vals<'_, T> {
    #[inline(always)]
    fn view(&self, n: usize) -> View<'_, T> {
        match self {
            Vals::Ref(c) => View::Col(&c.v[..n], &c.null[..n]),
            Vals::Own(c) => View::Col(&c.v[..n], &c.null[..n]),
            Vals::Lit(x) => View::Lit(*x),
        }
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
                let mut out = Vector { v: vec![U::default(); n], null: null.to_vec() };
                let mut ok = true;
                for ((o, &x), &xn) in out.v.iter_mut().zip(v).zip(null) {
                    if !xn {
                        let r = f(x);
                        ok &= r.is_some();
                        *o = r.unwrap_or_default();
                    }
                }
                if ok { Ok(Vals::Own(out)) } else { Err(out_of_range(err)) }
            }
        }
    }
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
    #[inline(always)]
    fn run<U: Copy + Default>(n: usize, null: Vec<bool>, f: impl Fn(usize) -> Option<U>) -> (Vector<U>, bool) {
        let mut out = Vector { v: vec![U::default(); n], null };
        let mut ok = true;
        for (i, o) in out.v.iter_mut().enumerate() {
            if !out.null[i] {
                let r = f(i);
                ok &= r.is_some();
                *o = r.unwrap_or_default();
            }
        }
        (out, ok)
    }
    let (out, ok) = match (a.view(n), b.view(n)) {
        (View::Lit(x), View::Lit(y)) => {
            return match f(x, y) {
                Some(r) => Ok(Vals::Lit(r)),
                None => Err(out_of_range(err)),
            };
        }
        (View::Col(x, xn), View::Lit(y)) => run(n, xn.to_vec(), |i| f(x[i], y)),
        (View::Lit(x), View::Col(y, yn)) => run(n, yn.to_vec(), |i| f(x, y[i])),
        (View::Col(x, xn), View::Col(y, yn)) => {
            let null = xn.iter().zip(yn).map(|(a, b)| *a | *b).collect();
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
    fn eval<'a>(&self, b: &'a Batch) -> AResult<Vals<'a, i64>> {
        let n = b.groups.len();
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
    fn eval<'a>(&self, b: &'a Batch) -> AResult<Vals<'a, i128>> {
        let n = b.groups.len();
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
    fn eval<'a>(&self, b: &'a Batch) -> AResult<Vals<'a, f64>> {
        let n = b.groups.len();
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

/// A typed accumulator.
#[derive(Debug, Clone)]
enum Acc {
    Count(i64),
    /// SUM of integers or decimals: exact, at a fixed scale (None: no value yet).
    SumD(Option<i128>, u8),
    SumF(Option<f64>),
    /// MIN/MAX over integers (kept as BIGINT), decimals (at their scale) or doubles.
    MinMaxI(Option<i64>),
    MinMaxD(Option<i128>, u8),
    MinMaxF(Option<f64>),
    Var(i64, f64, f64),
}

/// One compiled aggregate: its operation, argument and accumulator template.
#[derive(Debug, Clone)]
struct Agg {
    op: AggOp,
    arg: Option<CE>,
    start: Acc,
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

/// `f(group, value)` for every row with a value, in row order; false from `f` (an accumulator
/// of another kind) stops with false.
#[inline(always)]
fn each<T: Copy>(groups: &[u32], view: View<T>, mut f: impl FnMut(usize, T) -> bool) -> bool {
    match view {
        View::Lit(x) => groups.iter().all(|&g| f(g as usize, x)),
        View::Col(v, null) => {
            let (v, null) = (&v[..groups.len()], &null[..groups.len()]);
            for (i, &g) in groups.iter().enumerate() {
                if !null[i] && !f(g as usize, v[i]) {
                    return false;
                }
            }
            true
        }
    }
}

/// Welford's step of a variance accumulator.
#[inline(always)]
fn var_step(n: &mut i64, mean: &mut f64, m2: &mut f64, x: f64) {
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
            let start = match (op, &arg) {
                (AggOp::Count, _) => Acc::Count(0),
                (AggOp::Var, _) => Acc::Var(0, 0.0, 0.0),
                (_, None) => return None,
                (AggOp::Sum, Some(CE::I(_))) => Acc::SumD(None, 0),
                (AggOp::Sum, Some(CE::D(_, s))) => Acc::SumD(None, *s),
                (AggOp::Sum, Some(CE::F(_))) => Acc::SumF(None),
                (AggOp::Min | AggOp::Max, Some(CE::I(_))) => Acc::MinMaxI(None),
                (AggOp::Min | AggOp::Max, Some(CE::D(_, s))) => Acc::MinMaxD(None, *s),
                // The interpreter keeps a bare FLOAT column's MIN/MAX as FLOAT.
                (AggOp::Min | AggOp::Max, Some(CE::F(FE::Col(c))))
                    if matches!(loads.get(*c), Some((_, Load::Flt(_, true)))) =>
                {
                    return None;
                }
                (AggOp::Min | AggOp::Max, Some(CE::F(_))) => Acc::MinMaxF(None),
            };
            aggs.push(Agg { op: *op, arg, start });
        }
        Some(Fast { aggs, loads: loads.into_iter().map(|(_, l)| l).collect() })
    }

    /// Fresh accumulators of a new group.
    pub fn start(&self) -> Vec<AccSlot> {
        self.aggs.iter().map(|a| AccSlot(a.start.clone())).collect()
    }

    /// Copies the columns the program reads from one row's body (`RowLayout::body`) into the
    /// batch, with the row's group.
    pub fn push(&self, batch: &mut Batch, body: &[u8], group: u32) -> AResult<()> {
        if batch.cols.len() != self.loads.len() {
            batch.cols = self
                .loads
                .iter()
                .map(|l| match l {
                    Load::Int(..) => Col::I(Vector::with_capacity(BATCH_ROWS)),
                    Load::Dec(_) => Col::D(Vector::with_capacity(BATCH_ROWS)),
                    Load::Flt(..) => Col::F(Vector::with_capacity(BATCH_ROWS)),
                })
                .collect();
        }
        for (l, c) in self.loads.iter().zip(batch.cols.iter_mut()) {
            match (l, c) {
                (Load::Int(at, bits), Col::I(v)) => v.push(at.bytes(body)?.map(|b| stored_int(b, *bits))),
                (Load::Dec(at), Col::D(v)) => v.push(at.bytes(body)?.map(stored_i128)),
                (Load::Flt(at, single), Col::F(v)) => v.push(at.bytes(body)?.map(|b| {
                    let u = stored_u64(b);
                    if *single { f32::from_bits(u as u32) as f64 } else { f64::from_bits(u) }
                })),
                _ => return Err(shape()),
            }
        }
        batch.groups.push(group);
        Ok(())
    }

    /// Evaluates the batch and folds it, row by row in the order pushed, into the groups'
    /// accumulators; the batch is empty afterwards.
    pub fn flush(&self, batch: &mut Batch, accs: &mut [Vec<AccSlot>]) -> AResult<()> {
        let result = self.fold(batch, accs);
        for c in batch.cols.iter_mut() {
            match c {
                Col::I(v) => v.clear(),
                Col::D(v) => v.clear(),
                Col::F(v) => v.clear(),
            }
        }
        batch.groups.clear();
        result
    }

    fn fold(&self, batch: &Batch, accs: &mut [Vec<AccSlot>]) -> AResult<()> {
        if batch.groups.is_empty() {
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
        if groups.iter().any(|&g| accs.get(g as usize).is_none_or(|a| a.len() != self.aggs.len())) {
            return Err(shape());
        }
        for (k, (a, arg)) in self.aggs.iter().zip(&args).enumerate() {
            if !fold_all(a.op, &a.start, k, arg, groups, accs) {
                return Err(shape());
            }
        }
        Ok(())
    }

    /// A group's accumulators as the interpreter's slots (`Aggregation::start`'s layout).
    pub fn values(&self, accs: &[AccSlot]) -> Vec<Value> {
        let mut out = Vec::with_capacity(accs.len() + 2);
        for AccSlot(acc) in accs {
            match *acc {
                Acc::Count(n) => out.push(Value::Int(n)),
                Acc::SumD(s, scale) => out.push(s.map_or(Value::Null, |v| Value::Decimal { v, scale })),
                Acc::SumF(s) => out.push(s.map_or(Value::Null, Value::Double)),
                Acc::MinMaxI(m) => out.push(m.map_or(Value::Null, Value::Int)),
                Acc::MinMaxD(m, scale) => out.push(m.map_or(Value::Null, |v| Value::Decimal { v, scale })),
                Acc::MinMaxF(m) => out.push(m.map_or(Value::Null, Value::Double)),
                Acc::Var(n, mean, m2) => out.extend([Value::Int(n), Value::Double(mean), Value::Double(m2)]),
            }
        }
        out
    }
}

/// Folds a batch's values of aggregate `k` into its groups' accumulators, in row order: one
/// loop per kind of accumulator and argument (chosen by the aggregate's template `start`).
/// False when an accumulator is not of the template's kind.
fn fold_all(op: AggOp, start: &Acc, k: usize, arg: &Arg, groups: &[u32], accs: &mut [Vec<AccSlot>]) -> bool {
    let n = groups.len();
    // `$body` for every row with a value `$x` whose group's accumulator matches `$acc`.
    macro_rules! fold {
        ($view:expr, |$x:pat_param| $acc:pat => $body:expr) => {
            each(groups, $view, |g, $x| match &mut accs[g][k].0 {
                $acc => {
                    $body;
                    true
                }
                _ => false,
            })
        };
    }
    match (start, arg) {
        (Acc::Count(_), Arg::Rows) => fold!(View::Lit(()), |_| Acc::Count(c) => *c += 1),
        (Acc::Count(_), Arg::I(v)) => fold!(v.view(n), |_| Acc::Count(c) => *c += 1),
        (Acc::Count(_), Arg::D(v, _)) => fold!(v.view(n), |_| Acc::Count(c) => *c += 1),
        (Acc::Count(_), Arg::F(v)) => fold!(v.view(n), |_| Acc::Count(c) => *c += 1),
        (Acc::SumD(..), Arg::I(v)) => {
            fold!(v.view(n), |x| Acc::SumD(s, _) => *s = Some(s.unwrap_or(0).saturating_add(x as i128)))
        }
        (Acc::SumD(..), Arg::D(v, _)) => {
            fold!(v.view(n), |x| Acc::SumD(s, _) => *s = Some(s.unwrap_or(0).saturating_add(x)))
        }
        (Acc::SumF(_), Arg::F(v)) => fold!(v.view(n), |x| Acc::SumF(s) => *s = Some(s.unwrap_or(0.0) + x)),
        (Acc::MinMaxI(_), Arg::I(v)) => fold!(v.view(n), |x| Acc::MinMaxI(m) => *m = Some(pick(op, *m, x))),
        (Acc::MinMaxD(..), Arg::D(v, _)) => fold!(v.view(n), |x| Acc::MinMaxD(m, _) => *m = Some(pick(op, *m, x))),
        (Acc::MinMaxF(_), Arg::F(v)) => fold!(v.view(n), |x| Acc::MinMaxF(m) => *m = Some(pick(op, *m, x))),
        (Acc::Var(..), Arg::I(v)) => fold!(v.view(n), |x| Acc::Var(c, mean, m2) => var_step(c, mean, m2, x as f64)),
        (Acc::Var(..), Arg::D(v, scale)) => {
            let d = 10f64.powi(*scale as i32);
            fold!(v.view(n), |x| Acc::Var(c, mean, m2) => var_step(c, mean, m2, x as f64 / d))
        }
        (Acc::Var(..), Arg::F(v)) => fold!(v.view(n), |x| Acc::Var(c, mean, m2) => var_step(c, mean, m2, x)),
        (Acc::Var(..), Arg::Rows) => true,
        _ => false,
    }
}

fn pick<T: PartialOrd + Copy>(op: AggOp, cur: Option<T>, v: T) -> T {
    match cur {
        Some(c) if (op == AggOp::Min && c <= v) || (op == AggOp::Max && c >= v) => c,
        _ => v,
    }
}

/// A group's typed accumulator (opaque outside this module).
#[derive(Debug, Clone)]
pub struct AccSlot(Acc);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agg::Partial;
    use crate::rng::Rng;
    use crate::schema::{Column, Table};

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
        let seed = crate::rng::test_seed();
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
            let rows: Vec<Vec<u8>> = (0..200).map(|i| row(&mut rng, &l, i, big)).collect();
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
