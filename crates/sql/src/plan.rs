//! Planning: names resolved against the catalog, expressions compiled to `X` (column positions
//! instead of names), and for every table of a query its access path — primary-key lookups,
//! batched lookups for IN-lists, ordered-index ranges (the `PRIMARY` ordered index included),
//! or a full scan — plus the comparisons that can be pushed to the data node as filters.
//! Plans hold no values: parameters and session variables are read at execution, so a plan is
//! cached per prepared statement and per normalised statement text.

use super::ast::*;
use super::eval;
use crate::SqlError;
use crate::func::{self, FnId};
use crate::meta::{self, ColumnDef, flag, ty};
use tern_client::TableHandle;
use tern_types::filter::CmpOp;
use tern_types::schema::{HIDDEN_ROWID, Index};
use tern_types::{ColumnType, Value};

/// A compiled expression.
#[derive(Debug, Clone)]
pub enum X {
    Lit(Value),
    Param(usize),
    /// Position in the combined row of the query's tables.
    Col(usize),
    /// An aggregate's result (grouped queries).
    Agg(usize),
    /// `VALUES(col)` in ON DUPLICATE KEY UPDATE: the value the insert proposed.
    NewCol(usize),
    Sys(bool, String),
    User(String),
    Un(UnOp, Box<X>),
    Bin(BinOp, Box<X>, Box<X>),
    IsNull(Box<X>, bool),
    IsBool(Box<X>, bool, bool),
    In(Box<X>, Vec<X>, bool),
    /// `e IN (subquery)`: the subquery's result set number.
    InSub(Box<X>, usize, bool),
    Exists(usize, bool),
    /// A scalar subquery's result.
    Sub(usize),
    Between(Box<X>, Box<X>, Box<X>, bool),
    Like(Box<X>, Box<X>, bool),
    /// A scalar function of the registry, resolved when planned.
    Call(FnId, Vec<X>),
    Case(Option<Box<X>>, Vec<(X, X)>, Option<Box<X>>),
    Cast(Box<X>, CastTy),
    DateAdd(Box<X>, Box<X>, String, i64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggFn {
    Count,
    Sum,
    Avg,
    Min,
    Max,
    GroupConcat,
    BitAnd,
    BitOr,
    BitXor,
    /// STD / STDDEV / STDDEV_POP, STDDEV_SAMP, VARIANCE / VAR_POP, VAR_SAMP (doubles).
    StdPop,
    StdSamp,
    VarPop,
    VarSamp,
}

impl AggFn {
    /// Variance family: (sample?, square root?).
    pub fn variance(self) -> Option<(bool, bool)> {
        match self {
            AggFn::StdPop => Some((false, true)),
            AggFn::StdSamp => Some((true, true)),
            AggFn::VarPop => Some((false, false)),
            AggFn::VarSamp => Some((true, false)),
            _ => None,
        }
    }
}

/// A grouped single-table query the data node aggregates (RonSQL's pushdown): the program
/// shipped with the scan and how the query's values come from the merged partial groups.
#[derive(Debug, Clone)]
pub struct PushedAgg {
    pub agg: tern_agg::Aggregation,
    /// Per aggregate of the query, how its value comes from a group's slots.
    pub finals: Vec<Final>,
    /// The select list, HAVING and ORDER BY rewritten over `X::Agg(i)`: i below the query's
    /// aggregate count is an aggregate, `aggs.len() + j` is grouping expression j's value.
    pub items: Vec<X>,
    pub having: Option<X>,
    pub order: Vec<(X, bool)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Final {
    /// COUNT, SUM, MIN, MAX: the slot as it is.
    Slot(usize),
    /// AVG: SUM slot / COUNT slot.
    Avg(usize, usize),
    /// Variance family from the (count, mean, M2) slots.
    Var { slot: usize, samp: bool, sqrt: bool },
}

#[derive(Debug, Clone)]
pub struct Agg {
    pub func: AggFn,
    /// None for COUNT(*).
    pub arg: Option<X>,
    pub distinct: bool,
}

/// A comparison pushed to the data node: its constant side is evaluated at execution and
/// coerced to the column's type (when that fails, the comparison stays local only).
#[derive(Debug, Clone)]
pub enum Push {
    Cmp(u16, CmpOp, X),
    IsNull(u16, bool),
    In(u16, Vec<X>),
}

#[derive(Debug, Clone)]
pub struct Range {
    pub eq: Vec<X>,
    pub lo: Option<(X, bool)>,
    pub hi: Option<(X, bool)>,
}

#[derive(Debug, Clone)]
pub enum Access {
    /// One row by primary key (values in key order).
    Key(Vec<X>),
    /// Several rows by primary key.
    Keys(Vec<Vec<X>>),
    /// Ordered-index ranges (several for IN-lists and ORs of ranges; rows are de-duplicated).
    Index {
        index: Index,
        ranges: Vec<Range>,
    },
    Scan,
}

#[derive(Clone)]
pub struct Src {
    pub handle: TableHandle,
    pub alias: String,
    pub offset: usize,
    pub left_join: bool,
    /// Conditions of a LEFT JOIN's ON clause (local to this table's rows).
    pub on: Vec<X>,
    pub access: Access,
    pub push: Vec<Push>,
    /// Columns read (positions in the table), in ascending order.
    pub needed: Vec<u16>,
}

#[derive(Clone)]
pub struct SelectPlan {
    pub srcs: Vec<Src>,
    pub width: usize,
    /// Conditions checked once the row of every table is known.
    pub filter: Vec<X>,
    pub items: Vec<X>,
    pub columns: Vec<ColumnDef>,
    pub aggs: Vec<Agg>,
    pub grouped: bool,
    pub group_by: Vec<X>,
    pub having: Option<X>,
    pub order: Vec<(X, bool)>,
    pub distinct: bool,
    pub limit: Option<X>,
    pub offset: Option<X>,
    pub lock: Option<Lock>,
    /// The scan of the single table may stop after offset+limit rows, in index order
    /// (Some(descending)) or any order (None).
    pub push_limit: bool,
    pub scan_order: Option<bool>,
    /// Aggregation the data node can do (single table, plain columns): the scan returns partial
    /// groups, aggregates in the order of `aggs`.
    pub agg_push: Option<PushedAgg>,
    /// Subqueries, executed before this plan (uncorrelated).
    pub subs: Vec<SelectPlan>,
    pub unions: Vec<(bool, SelectPlan)>,
}

#[derive(Clone)]
pub struct InsertPlan {
    pub handle: TableHandle,
    /// Per row: one expression per table column (defaults filled in).
    pub rows: Vec<Vec<X>>,
    pub select: Option<(Box<SelectPlan>, Vec<usize>)>,
    pub replace: bool,
    pub ignore: bool,
    /// ON DUPLICATE KEY UPDATE: (column, expression over the existing row / NewCol).
    pub on_dup: Vec<(u16, X)>,
    /// Columns the statement named (others take defaults).
    pub explicit: Vec<bool>,
}

#[derive(Clone)]
pub struct ModifyPlan {
    pub src: Src,
    pub filter: Vec<X>,
    /// UPDATE assignments (empty for DELETE).
    pub sets: Vec<(u16, X)>,
    pub order: Vec<(X, bool)>,
    pub limit: Option<X>,
    pub subs: Vec<SelectPlan>,
}

/// Looks up a table: (database, name) → handle, or the MySQL error.
pub trait Catalog {
    fn table(&self, db: Option<&str>, name: &str) -> Result<TableHandle, SqlError>;
}

struct Scope<'a> {
    tables: Vec<(String, &'a TableHandle, usize)>,
}

impl Scope<'_> {
    fn resolve(&self, table: Option<&str>, name: &str, clause: &str) -> Result<usize, SqlError> {
        let mut found = None;
        for (alias, h, off) in &self.tables {
            if let Some(t) = table
                && !t.eq_ignore_ascii_case(alias)
                && !t.eq_ignore_ascii_case(&h.table.name)
            {
                continue;
            }
            if let Some(c) = h.table.column_index(name) {
                if found.is_some() {
                    return Err(SqlError::new(1052, "23000", format!("Column '{name}' in {clause} is ambiguous")));
                }
                found = Some(off + c);
            }
        }
        found.ok_or_else(|| {
            let full = match table {
                Some(t) => format!("{t}.{name}"),
                None => name.to_string(),
            };
            SqlError::new(1054, "42S22", format!("Unknown column '{full}' in '{clause}'"))
        })
    }

    /// The table column at row position `c`.
    fn column(&self, c: usize) -> Option<&tern_types::Column> {
        self.tables.iter().rev().find(|(_, _, off)| *off <= c).and_then(|(_, h, off)| h.table.columns.get(c - off))
    }

    fn width(&self) -> usize {
        self.tables.last().map(|(_, h, off)| off + h.table.columns.len()).unwrap_or(0)
    }
}

/// ORDER BY an ENUM or SET column sorts by member number (or bit mask), as MySQL does, not by
/// the stored text.
fn member_order(scope: &Scope, x: X) -> X {
    let X::Col(c) = x else { return x };
    match scope.column(c).and_then(|col| col.members.as_ref()) {
        Some(m) => {
            let mut args = vec![X::Col(c), X::Lit(Value::Int(m.set as i64))];
            args.extend(m.values.iter().map(|v| X::Lit(Value::Bytes(v.clone().into_bytes()))));
            X::Call(func::planner_made("MEMBER_INDEX"), args)
        }
        None => x,
    }
}

pub fn agg_fn(name: &str) -> Option<AggFn> {
    Some(match name {
        "COUNT" => AggFn::Count,
        "SUM" => AggFn::Sum,
        "AVG" => AggFn::Avg,
        "MIN" => AggFn::Min,
        "MAX" => AggFn::Max,
        "GROUP_CONCAT" => AggFn::GroupConcat,
        "BIT_AND" => AggFn::BitAnd,
        "BIT_OR" => AggFn::BitOr,
        "BIT_XOR" => AggFn::BitXor,
        "STD" | "STDDEV" | "STDDEV_POP" => AggFn::StdPop,
        "STDDEV_SAMP" => AggFn::StdSamp,
        "VARIANCE" | "VAR_POP" => AggFn::VarPop,
        "VAR_SAMP" => AggFn::VarSamp,
        _ => return None,
    })
}

/// Compiles expressions of one query level.
struct Compiler<'a, 'c> {
    scope: &'a Scope<'a>,
    cat: &'c dyn Catalog,
    db: Option<&'c str>,
    /// Aggregates collected (None: aggregates are not allowed here).
    aggs: Option<Vec<Agg>>,
    subs: Vec<SelectPlan>,
    clause: &'static str,
    /// Columns of the INSERT target for VALUES(col).
    insert_target: Option<&'a TableHandle>,
}

impl Compiler<'_, '_> {
    fn x(&mut self, e: &Expr) -> Result<X, SqlError> {
        Ok(match e {
            Expr::Lit(v) => X::Lit(v.clone()),
            Expr::Param(i) => X::Param(*i),
            Expr::Column { table, name } => X::Col(self.scope.resolve(table.as_deref(), name, self.clause)?),
            Expr::SysVar { global, name } => X::Sys(*global, name.clone()),
            Expr::UserVar(n) => X::User(n.clone()),
            Expr::Unary(op, a) => X::Un(*op, Box::new(self.x(a)?)),
            Expr::Binary(op, a, b) => {
                // date + INTERVAL n unit
                if matches!(op, BinOp::Add | BinOp::Sub)
                    && let Expr::Interval { e: n, unit } = &**b
                {
                    let sign = if *op == BinOp::Add { 1 } else { -1 };
                    return Ok(X::DateAdd(Box::new(self.x(a)?), Box::new(self.x(n)?), unit.clone(), sign));
                }
                if *op == BinOp::Add
                    && let Expr::Interval { e: n, unit } = &**a
                {
                    return Ok(X::DateAdd(Box::new(self.x(b)?), Box::new(self.x(n)?), unit.clone(), 1));
                }
                X::Bin(*op, Box::new(self.x(a)?), Box::new(self.x(b)?))
            }
            Expr::IsNull { e, neg } => X::IsNull(Box::new(self.x(e)?), *neg),
            Expr::IsBool { e, value, neg } => X::IsBool(Box::new(self.x(e)?), *value, *neg),
            Expr::In { e, list, neg } => {
                X::In(Box::new(self.x(e)?), list.iter().map(|v| self.x(v)).collect::<Result<_, _>>()?, *neg)
            }
            Expr::InSelect { e, q, neg } => {
                let i = self.sub(q)?;
                X::InSub(Box::new(self.x(e)?), i, *neg)
            }
            Expr::Exists { q, neg } => X::Exists(self.sub(q)?, *neg),
            Expr::Subquery(q) => X::Sub(self.sub(q)?),
            Expr::Between { e, lo, hi, neg } => {
                X::Between(Box::new(self.x(e)?), Box::new(self.x(lo)?), Box::new(self.x(hi)?), *neg)
            }
            Expr::Like { e, pat, neg } => X::Like(Box::new(self.x(e)?), Box::new(self.x(pat)?), *neg),
            Expr::Func { name, args, distinct, star } => {
                if let Some(f) = agg_fn(name) {
                    let Some(aggs) = self.aggs.as_mut() else {
                        return Err(SqlError::new(1111, "HY000", "Invalid use of group function"));
                    };
                    let _ = aggs;
                    let arg = if *star {
                        None
                    } else {
                        if args.len() != 1 && f != AggFn::GroupConcat {
                            return Err(SqlError::new(
                                1064,
                                "42000",
                                format!("You have an error in your SQL syntax; wrong number of arguments to {name}"),
                            ));
                        }
                        // Aggregates inside aggregates are not allowed.
                        let saved = self.aggs.take();
                        let a = if args.len() == 1 {
                            self.x(&args[0])
                        } else {
                            args.iter()
                                .map(|a| self.x(a))
                                .collect::<Result<Vec<_>, _>>()
                                .map(|v| X::Call(func::planner_made("CONCAT"), v))
                        };
                        self.aggs = saved;
                        Some(a?)
                    };
                    if *star && f != AggFn::Count {
                        return Err(SqlError::new(1064, "42000", "You have an error in your SQL syntax near '*)'"));
                    }
                    let aggs = self.aggs.as_mut().expect("checked");
                    aggs.push(Agg { func: f, arg, distinct: *distinct });
                    return Ok(X::Agg(aggs.len() - 1));
                }
                if name == "VALUES"
                    && args.len() == 1
                    && let (Some(t), Expr::Column { name: c, .. }) = (self.insert_target, &args[0])
                {
                    let i = t
                        .table
                        .column_index(c)
                        .ok_or_else(|| SqlError::new(1054, "42S22", format!("Unknown column '{c}' in 'field list'")))?;
                    return Ok(X::NewCol(i));
                }
                if matches!(name.as_str(), "DATE_ADD" | "DATE_SUB" | "ADDDATE" | "SUBDATE") && args.len() == 2 {
                    let sign = if name.contains("SUB") { -1 } else { 1 };
                    let (n, unit) = match &args[1] {
                        Expr::Interval { e, unit } => (self.x(e)?, unit.clone()),
                        other => (self.x(other)?, "DAY".to_string()),
                    };
                    let d = self.x(&args[0])?;
                    return Ok(X::DateAdd(Box::new(d), Box::new(n), unit, sign));
                }
                let mut xs: Vec<X> = args.iter().map(|a| self.x(a)).collect::<Result<_, _>>()?;
                // Unknown functions and too few arguments fail when planned, not per row.
                let id = func::resolve(name, xs.len())?;
                if id.func().bit_bytes {
                    xs = xs.into_iter().map(|x| self.bit_bytes(x)).collect();
                }
                X::Call(id, xs)
            }
            Expr::Case { operand, whens, else_ } => X::Case(
                match operand {
                    Some(o) => Some(Box::new(self.x(o)?)),
                    None => None,
                },
                whens.iter().map(|(w, t)| Ok((self.x(w)?, self.x(t)?))).collect::<Result<_, SqlError>>()?,
                match else_ {
                    Some(e) => Some(Box::new(self.x(e)?)),
                    None => None,
                },
            ),
            Expr::Cast { e, ty } => {
                let x = self.x(e)?;
                let x = if matches!(ty, CastTy::Binary | CastTy::Char) { self.bit_bytes(x) } else { x };
                X::Cast(Box::new(x), *ty)
            }
            Expr::Interval { .. } => {
                return Err(SqlError::new(1064, "42000", "You have an error in your SQL syntax near 'INTERVAL'"));
            }
            Expr::Default => return Err(SqlError::new(1064, "42000", "DEFAULT is only allowed in VALUES and SET")),
        })
    }

    /// A BIT(n) column read as a string: its ceil(n/8) bytes, big-endian (MariaDB does so for
    /// TO_BASE64, LENGTH, CONCAT, CAST AS BINARY...; HEX and arithmetic see the number).
    fn bit_bytes(&self, x: X) -> X {
        let X::Col(c) = x else { return x };
        match self.scope.column(c).map(|col| col.ty) {
            Some(tern_types::ColumnType::Bit { bits }) => {
                X::Call(func::planner_made("BIT_BYTES"), vec![X::Col(c), X::Lit(Value::Int((bits as i64 + 7) / 8))])
            }
            _ => x,
        }
    }

    fn sub(&mut self, q: &Select) -> Result<usize, SqlError> {
        let plan = plan_select(q, self.cat, self.db).map_err(|e| {
            if e.errno == 1054 {
                SqlError::new(1235, "42000", "This version of Tern doesn't yet support 'correlated subqueries'")
            } else {
                e
            }
        })?;
        self.subs.push(plan);
        Ok(self.subs.len() - 1)
    }
}

/// Splits a condition into its AND-ed parts.
fn conjuncts(e: X, out: &mut Vec<X>) {
    match e {
        X::Bin(BinOp::And, a, b) => {
            conjuncts(*a, out);
            conjuncts(*b, out);
        }
        other => out.push(other),
    }
}

/// Whether `x` reads only columns below `limit` (and no aggregates); constants qualify.
fn cols_below(x: &X, limit: usize) -> bool {
    let mut ok = true;
    walk(x, &mut |n| match n {
        X::Col(c) if *c >= limit => ok = false,
        X::Agg(_) | X::NewCol(_) => ok = false,
        _ => {}
    });
    ok
}

/// Visits `x` and every expression inside it.
pub fn walk_x(x: &X, f: &mut dyn FnMut(&X)) {
    walk(x, f)
}

fn walk(x: &X, f: &mut dyn FnMut(&X)) {
    f(x);
    match x {
        X::Un(_, a) | X::IsNull(a, _) | X::IsBool(a, _, _) | X::Cast(a, _) | X::InSub(a, _, _) => walk(a, f),
        X::Bin(_, a, b) | X::Like(a, b, _) | X::DateAdd(a, b, _, _) => {
            walk(a, f);
            walk(b, f);
        }
        X::In(a, l, _) => {
            walk(a, f);
            for v in l {
                walk(v, f);
            }
        }
        X::Between(a, b, c, _) => {
            walk(a, f);
            walk(b, f);
            walk(c, f);
        }
        X::Call(_, l) => {
            for v in l {
                walk(v, f);
            }
        }
        X::Case(o, w, e) => {
            if let Some(o) = o {
                walk(o, f);
            }
            for (a, b) in w {
                walk(a, f);
                walk(b, f);
            }
            if let Some(e) = e {
                walk(e, f);
            }
        }
        _ => {}
    }
}

/// Columns of table [off, off+n) that `x` reads.
fn collect_cols(x: &X, off: usize, n: usize, out: &mut Vec<u16>) {
    walk(x, &mut |node| {
        if let X::Col(c) = node
            && *c >= off
            && *c < off + n
        {
            out.push((c - off) as u16);
        }
    });
}

fn is_const(x: &X) -> bool {
    cols_below(x, 0)
}

/// Flips a comparison so the column is on the left.
fn flip(op: BinOp) -> BinOp {
    match op {
        BinOp::Lt => BinOp::Gt,
        BinOp::Le => BinOp::Ge,
        BinOp::Gt => BinOp::Lt,
        BinOp::Ge => BinOp::Le,
        o => o,
    }
}

fn cmp_op(op: BinOp) -> Option<CmpOp> {
    Some(match op {
        BinOp::Eq => CmpOp::Eq,
        BinOp::Ne => CmpOp::Ne,
        BinOp::Lt => CmpOp::Lt,
        BinOp::Le => CmpOp::Le,
        BinOp::Gt => CmpOp::Gt,
        BinOp::Ge => CmpOp::Ge,
        _ => return None,
    })
}

/// A condition on one column of the table at [off, off+n) against values known before the
/// table is read (constants, parameters, columns of earlier tables).
#[derive(Clone)]
enum ColCond {
    Cmp(usize, BinOp, X),
    In(usize, Vec<X>),
    Between(usize, X, X),
    IsNull(usize, bool),
}

fn col_cond(x: &X, off: usize, n: usize) -> Option<ColCond> {
    let mine = |c: &usize| *c >= off && *c < off + n;
    match x {
        X::Bin(op, a, b) if cmp_op(*op).is_some() => match (&**a, &**b) {
            (X::Col(c), v) if mine(c) && cols_below(v, off) => Some(ColCond::Cmp(c - off, *op, v.clone())),
            (v, X::Col(c)) if mine(c) && cols_below(v, off) => Some(ColCond::Cmp(c - off, flip(*op), v.clone())),
            _ => None,
        },
        X::In(a, list, false) => match &**a {
            X::Col(c) if mine(c) && list.iter().all(|v| cols_below(v, off)) => Some(ColCond::In(c - off, list.clone())),
            _ => None,
        },
        X::Between(a, lo, hi, false) => match &**a {
            X::Col(c) if mine(c) && cols_below(lo, off) && cols_below(hi, off) => {
                Some(ColCond::Between(c - off, (**lo).clone(), (**hi).clone()))
            }
            _ => None,
        },
        X::IsNull(a, neg) => match &**a {
            X::Col(c) if mine(c) => Some(ColCond::IsNull(c - off, *neg)),
            _ => None,
        },
        _ => None,
    }
}

/// Ranges on one column from a condition (None when it gives no range).
fn ranges_of(cond: &ColCond) -> Option<Vec<Range>> {
    Some(match cond {
        ColCond::Cmp(_, BinOp::Eq, v) => vec![Range { eq: vec![v.clone()], lo: None, hi: None }],
        ColCond::Cmp(_, op @ (BinOp::Lt | BinOp::Le), v) => {
            vec![Range { eq: vec![], lo: None, hi: Some((v.clone(), *op == BinOp::Le)) }]
        }
        ColCond::Cmp(_, op @ (BinOp::Gt | BinOp::Ge), v) => {
            vec![Range { eq: vec![], lo: Some((v.clone(), *op == BinOp::Ge)), hi: None }]
        }
        ColCond::Between(_, lo, hi) => {
            vec![Range { eq: vec![], lo: Some((lo.clone(), true)), hi: Some((hi.clone(), true)) }]
        }
        ColCond::In(_, list) => list.iter().map(|v| Range { eq: vec![v.clone()], lo: None, hi: None }).collect(),
        _ => return None,
    })
}

fn cond_col(c: &ColCond) -> usize {
    match c {
        ColCond::Cmp(c, ..) | ColCond::In(c, _) | ColCond::Between(c, ..) | ColCond::IsNull(c, _) => *c,
    }
}

/// Chooses the access path of the table at `off` from the conditions that apply to it; the
/// conditions stay in the local filter as well (re-checking is cheap and keeps every path
/// exact), except that a unique key lookup needs no scan at all.
fn choose_access(h: &TableHandle, off: usize, conds: &[X]) -> (Access, Vec<Push>) {
    let n = h.table.columns.len();
    let cc: Vec<ColCond> = conds.iter().filter_map(|x| col_cond(x, off, n)).collect();
    let mut push = Vec::new();
    for c in &cc {
        match c {
            ColCond::Cmp(col, op, v) if is_const(v) => {
                push.push(Push::Cmp(*col as u16, cmp_op(*op).expect("cmp"), v.clone()))
            }
            ColCond::Between(col, lo, hi) if is_const(lo) && is_const(hi) => {
                push.push(Push::Cmp(*col as u16, CmpOp::Ge, lo.clone()));
                push.push(Push::Cmp(*col as u16, CmpOp::Le, hi.clone()));
            }
            ColCond::In(col, list) if list.iter().all(is_const) => push.push(Push::In(*col as u16, list.clone())),
            ColCond::IsNull(col, neg) => push.push(Push::IsNull(*col as u16, !*neg)),
            _ => {}
        }
    }
    if super::infoschema::is_virtual(&h.table.database) {
        // Virtual tables make every row; the local filter (all the conditions) picks.
        return (Access::Scan, push);
    }
    let pk = &h.table.primary_key;
    // Primary key equality on every key column.
    let eq_of = |col: u16| {
        cc.iter().find_map(|c| match c {
            ColCond::Cmp(cn, BinOp::Eq, v) if *cn == col as usize => Some(v.clone()),
            _ => None,
        })
    };
    let key: Option<Vec<X>> = pk.iter().map(|&c| eq_of(c)).collect();
    if let Some(k) = key {
        return (Access::Key(k), push);
    }
    // IN on a single-column key (or IN on one key column with equality on the others).
    for c in &cc {
        if let ColCond::In(col, list) = c
            && pk.contains(&(*col as u16))
        {
            let others: Option<Vec<(u16, X)>> =
                pk.iter().filter(|&&k| k as usize != *col).map(|&k| eq_of(k).map(|v| (k, v))).collect();
            if let Some(others) = others {
                let keys = list
                    .iter()
                    .map(|v| {
                        pk.iter()
                            .map(|&k| {
                                if k as usize == *col {
                                    v.clone()
                                } else {
                                    others.iter().find(|(o, _)| *o == k).expect("other key column").1.clone()
                                }
                            })
                            .collect()
                    })
                    .collect();
                return (Access::Keys(keys), push);
            }
        }
    }
    // Ordered indexes: the longest equality prefix, then a range on the next column.
    let mut best: Option<(usize, Access)> = None;
    for idx in &h.table.indexes {
        let mut eq = Vec::new();
        for &c in &idx.columns {
            match eq_of(c) {
                Some(v) => eq.push(v),
                None => break,
            }
        }
        let mut score = eq.len() * 4;
        let mut ranges = vec![Range { eq: eq.clone(), lo: None, hi: None }];
        if let Some(&next) = idx.columns.get(eq.len()) {
            // Range conditions on the next column, merged (lo, hi), or an IN-list.
            let mut lo = None;
            let mut hi = None;
            let mut list = None;
            for c in cc.iter().filter(|c| cond_col(c) == next as usize) {
                match ranges_of(c) {
                    Some(rs) if rs.len() == 1 && rs[0].eq.is_empty() => {
                        if rs[0].lo.is_some() {
                            lo = rs[0].lo.clone();
                        }
                        if rs[0].hi.is_some() {
                            hi = rs[0].hi.clone();
                        }
                    }
                    Some(rs) if matches!(c, ColCond::In(..)) => list = Some(rs),
                    _ => {}
                }
            }
            if let Some(list) = list {
                if eq.is_empty() {
                    ranges = list;
                } else {
                    ranges = list
                        .into_iter()
                        .map(|r| Range { eq: eq.iter().cloned().chain(r.eq).collect(), lo: None, hi: None })
                        .collect();
                }
                score += 3;
            } else if lo.is_some() || hi.is_some() {
                ranges = vec![Range { eq: eq.clone(), lo, hi }];
                score += 2;
            }
        }
        // An OR of ranges on the first column (select_random_ranges).
        if score == 0 {
            continue;
        }
        if best.as_ref().is_none_or(|(s, _)| score > *s) {
            best = Some((score, Access::Index { index: idx.clone(), ranges }));
        }
    }
    if best.is_none() {
        // OR of conditions on one indexed column: a range per disjunct.
        for x in conds {
            if let Some((col, rs)) = or_ranges(x, off, n)
                && let Some(idx) = h.table.indexes.iter().find(|i| i.columns.first() == Some(&(col as u16)))
            {
                best = Some((1, Access::Index { index: idx.clone(), ranges: rs }));
                break;
            }
        }
    }
    match best {
        Some((_, a)) => (a, push),
        None => (Access::Scan, push),
    }
}

fn or_ranges(x: &X, off: usize, n: usize) -> Option<(usize, Vec<Range>)> {
    let mut parts = Vec::new();
    fn disj(x: &X, out: &mut Vec<X>) {
        match x {
            X::Bin(BinOp::Or, a, b) => {
                disj(a, out);
                disj(b, out);
            }
            o => out.push(o.clone()),
        }
    }
    disj(x, &mut parts);
    if parts.len() < 2 {
        return None;
    }
    let mut col = None;
    let mut out = Vec::new();
    for p in &parts {
        let c = col_cond(p, off, n)?;
        if col.is_some_and(|k| k != cond_col(&c)) {
            return None;
        }
        col = Some(cond_col(&c));
        out.extend(ranges_of(&c)?);
    }
    Some((col?, out))
}

/// Column metadata of a table column.
pub fn column_def(h: &TableHandle, c: usize, alias: &str, name: &str) -> ColumnDef {
    let col = &h.table.columns[c];
    let (mut t, len, dec, binary) = proto_type(col.ty);
    let mut flags = 0;
    if let Some(m) = &col.members {
        // MySQL sends ENUM and SET columns as MYSQL_TYPE_STRING with ENUM_FLAG / SET_FLAG.
        t = meta::ty::STRING;
        flags |= if m.set { flag::SET } else { flag::ENUM };
    }
    if !col.nullable {
        flags |= flag::NOT_NULL;
    }
    if h.table.primary_key.contains(&(c as u16)) {
        flags |= flag::PRI_KEY;
    } else if h.table.indexes.iter().any(|i| i.columns.first() == Some(&(c as u16))) {
        flags |= if h.table.indexes.iter().any(|i| i.unique && i.columns.len() == 1 && i.columns[0] == c as u16) {
            flag::UNIQUE_KEY
        } else {
            flag::MULTIPLE_KEY
        };
    }
    if col.ty.is_unsigned() {
        flags |= flag::UNSIGNED;
    }
    if col.auto_increment {
        flags |= flag::AUTO_INCREMENT;
    }
    if binary {
        flags |= flag::BINARY;
    }
    if matches!(col.ty, ColumnType::Text | ColumnType::Blob) {
        flags |= flag::BLOB;
    }
    if col.ty.is_integer() || matches!(col.ty, ColumnType::Decimal { .. } | ColumnType::Float | ColumnType::Double) {
        flags |= flag::NUM;
    }
    ColumnDef {
        schema: h.table.database.clone(),
        table: alias.to_string(),
        org_table: h.table.name.clone(),
        name: name.to_string(),
        org_name: col.name.clone(),
        charset: if binary { meta::charset::BINARY as u16 } else { meta::charset::UTF8MB4_GENERAL_CI as u16 },
        length: len,
        ty: t,
        flags,
        decimals: dec,
    }
}

/// (protocol type, display length, decimals, binary) of a column type.
pub fn proto_type(t: ColumnType) -> (u8, u32, u8, bool) {
    use ColumnType as C;
    match t {
        C::TinyInt { unsigned } => (ty::TINY, if unsigned { 3 } else { 4 }, 0, true),
        C::SmallInt { unsigned } => (ty::SHORT, if unsigned { 5 } else { 6 }, 0, true),
        C::MediumInt { unsigned } => (ty::INT24, if unsigned { 8 } else { 9 }, 0, true),
        C::Int { unsigned } => (ty::LONG, if unsigned { 10 } else { 11 }, 0, true),
        C::BigInt { .. } => (ty::LONGLONG, 20, 0, true),
        C::Float => (ty::FLOAT, 12, 31, true),
        C::Double => (ty::DOUBLE, 22, 31, true),
        C::Decimal { precision, scale, .. } => (ty::NEWDECIMAL, precision as u32 + (scale > 0) as u32 + 1, scale, true),
        C::Char { len } => (ty::STRING, len * 4, 0, false),
        C::VarChar { len } => (ty::VAR_STRING, len * 4, 0, false),
        C::Binary { len } => (ty::STRING, len, 0, true),
        C::VarBinary { len } => (ty::VAR_STRING, len, 0, true),
        C::Text => (ty::BLOB, 262_140, 0, false),
        C::Blob => (ty::BLOB, 65_535, 0, true),
        C::Date => (ty::DATE, 10, 0, true),
        C::Time { fsp } => (ty::TIME, 10 + if fsp > 0 { fsp as u32 + 1 } else { 0 }, fsp, true),
        C::DateTime { fsp } => (ty::DATETIME, 19 + if fsp > 0 { fsp as u32 + 1 } else { 0 }, fsp, true),
        C::Timestamp { fsp } => (ty::TIMESTAMP, 19 + if fsp > 0 { fsp as u32 + 1 } else { 0 }, fsp, true),
        C::Year => (ty::YEAR, 4, 0, true),
        C::Bit { bits } => (ty::BIT, bits as u32, 0, true),
    }
}

/// The static result type of a computed expression: (protocol type, length, decimals).
fn expr_type(x: &X, src: &[(usize, ColumnType)], aggs: &[Agg]) -> (u8, u32, u8) {
    let col_ty = |c: usize| src.iter().find(|(p, _)| *p == c).map(|(_, t)| *t);
    match x {
        X::Col(c) => match col_ty(*c) {
            Some(t) => {
                let (p, l, d, _) = proto_type(t);
                (p, l, d)
            }
            None => (ty::VAR_STRING, 255, 31),
        },
        X::Lit(v) => match v {
            Value::Null => (ty::NULL, 0, 0),
            Value::Int(_) | Value::UInt(_) => (ty::LONGLONG, 21, 0),
            Value::Decimal { scale, .. } => (ty::NEWDECIMAL, 40, *scale),
            Value::Double(_) | Value::Float(_) => (ty::DOUBLE, 22, 31),
            Value::Date(_) => (ty::DATE, 10, 0),
            Value::DateTime(_) | Value::Timestamp(_) => (ty::DATETIME, 26, 6),
            Value::Time(_) => (ty::TIME, 17, 6),
            _ => (ty::VAR_STRING, 255, 31),
        },
        X::Agg(i) => match aggs.get(*i) {
            Some(a) => match a.func {
                AggFn::Count | AggFn::BitAnd | AggFn::BitOr | AggFn::BitXor => (ty::LONGLONG, 21, 0),
                AggFn::Sum | AggFn::Avg => {
                    let inner = a.arg.as_ref().map(|x| expr_type(x, src, aggs)).unwrap_or((ty::LONGLONG, 21, 0));
                    match inner.0 {
                        ty::DOUBLE | ty::FLOAT | ty::VAR_STRING | ty::STRING | ty::BLOB => (ty::DOUBLE, 23, 31),
                        _ => (
                            ty::NEWDECIMAL,
                            42,
                            if a.func == AggFn::Avg { (inner.2.min(26)) + 4 } else { inner.2.min(30) },
                        ),
                    }
                }
                AggFn::Min | AggFn::Max => {
                    a.arg.as_ref().map(|x| expr_type(x, src, aggs)).unwrap_or((ty::VAR_STRING, 255, 31))
                }
                AggFn::GroupConcat => (ty::BLOB, 1024, 31),
                // A double; over exact numbers shown with 4 more fraction digits than the
                // argument's (MySQL's decimals for the variance family).
                AggFn::StdPop | AggFn::StdSamp | AggFn::VarPop | AggFn::VarSamp => {
                    let inner = a.arg.as_ref().map(|x| expr_type(x, src, aggs)).unwrap_or((ty::DOUBLE, 23, 31));
                    match inner.0 {
                        ty::DOUBLE | ty::FLOAT | ty::VAR_STRING | ty::STRING | ty::BLOB | ty::NULL => {
                            (ty::DOUBLE, 23, 31)
                        }
                        _ => (ty::DOUBLE, 23, (inner.2 + 4).min(30)),
                    }
                }
            },
            None => (ty::LONGLONG, 21, 0),
        },
        X::Bin(op, a, b) => match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Mod | BinOp::Div => {
                let (ta, _, da) = expr_type(a, src, aggs);
                let (tb, _, db) = expr_type(b, src, aggs);
                let is_int = |t: u8| matches!(t, ty::TINY | ty::SHORT | ty::INT24 | ty::LONG | ty::LONGLONG | ty::YEAR);
                let is_dbl =
                    |t: u8| matches!(t, ty::DOUBLE | ty::FLOAT | ty::VAR_STRING | ty::STRING | ty::BLOB | ty::NULL);
                if is_dbl(ta) || is_dbl(tb) {
                    (ty::DOUBLE, 23, 31)
                } else if *op == BinOp::Div {
                    (ty::NEWDECIMAL, 42, (da + 4).min(30))
                } else if is_int(ta) && is_int(tb) {
                    (ty::LONGLONG, 21, 0)
                } else {
                    (ty::NEWDECIMAL, 42, if *op == BinOp::Mul { (da + db).min(30) } else { da.max(db) })
                }
            }
            BinOp::IntDiv | BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr => {
                (ty::LONGLONG, 21, 0)
            }
            _ => (ty::LONGLONG, 1, 0),
        },
        X::Un(UnOp::Neg, a) => expr_type(a, src, aggs),
        X::Un(..)
        | X::IsNull(..)
        | X::IsBool(..)
        | X::In(..)
        | X::InSub(..)
        | X::Exists(..)
        | X::Between(..)
        | X::Like(..) => (ty::LONGLONG, 1, 0),
        X::Cast(_, t) => match t {
            CastTy::Signed | CastTy::Unsigned => (ty::LONGLONG, 21, 0),
            CastTy::Double => (ty::DOUBLE, 22, 31),
            CastTy::Decimal(p, s) => (ty::NEWDECIMAL, *p as u32 + 2, *s),
            CastTy::Date => (ty::DATE, 10, 0),
            CastTy::DateTime => (ty::DATETIME, 26, 6),
            CastTy::Time => (ty::TIME, 17, 6),
            CastTy::Char | CastTy::Binary => (ty::VAR_STRING, 255, 31),
        },
        X::DateAdd(..) => (ty::DATETIME, 19, 0),
        X::Call(f, args) => call_type(*f, args, src, aggs),
        X::Case(_, whens, _) => {
            whens.first().map(|(_, t)| expr_type(t, src, aggs)).unwrap_or((ty::VAR_STRING, 255, 31))
        }
        X::Sys(..) | X::User(..) | X::Param(_) | X::NewCol(_) | X::Sub(_) => (ty::VAR_STRING, 255, 31),
    }
}

/// The static result type of a call of function `f`, by its registry row's rule.
fn call_type(f: FnId, args: &[X], src: &[(usize, ColumnType)], aggs: &[Agg]) -> (u8, u32, u8) {
    const TEXT: (u8, u32, u8) = (ty::VAR_STRING, 255, 31);
    match f.ty() {
        func::Ty::Text | func::Ty::Bytes | func::Ty::DateAdd => TEXT,
        func::Ty::Int => (ty::LONGLONG, 21, 0),
        func::Ty::Now => (ty::DATETIME, 19, 0),
        func::Ty::FromUnix if args.len() < 2 => (ty::DATETIME, 19, 0),
        func::Ty::FromUnix => TEXT,
        // STR_TO_DATE's type follows its (constant) format's parts.
        func::Ty::StrToDate => match args.get(1) {
            Some(X::Lit(Value::Bytes(f))) => match tern_types::time::str_to_date_parts(f) {
                (true, false, _) => (ty::DATE, 10, 0),
                (false, true, frac) => (ty::TIME, 17, if frac { 6 } else { 0 }),
                (_, _, frac) => (ty::DATETIME, 26, if frac { 6 } else { 0 }),
            },
            _ => (ty::DATETIME, 26, 6),
        },
        func::Ty::Date => (ty::DATE, 10, 0),
        func::Ty::Time => (ty::TIME, 8, 0),
        // TIME(x) keeps x's fraction digits: a temporal column's, a string's as written.
        func::Ty::TimeOf => {
            let d = match args.first() {
                Some(X::Lit(Value::Bytes(b))) => {
                    let t = String::from_utf8_lossy(b);
                    t.trim()
                        .rsplit_once('.')
                        .map_or(0, |(_, f)| f.bytes().take_while(u8::is_ascii_digit).count().min(6))
                        as u8
                }
                Some(a) => match expr_type(a, src, aggs) {
                    (ty::DATETIME | ty::TIMESTAMP | ty::TIME, _, d) => d.min(6),
                    (ty::DATE, ..) => 0,
                    _ => 6,
                },
                None => 0,
            };
            (ty::TIME, if d > 0 { 11 + d as u32 } else { 10 }, d)
        }
        func::Ty::FirstArg | func::Ty::Floor => match args.first() {
            Some(a) => {
                let t = expr_type(a, src, aggs);
                if f.ty() == func::Ty::Floor && t.0 == ty::NEWDECIMAL { (ty::LONGLONG, 21, 0) } else { t }
            }
            None => TEXT,
        },
        func::Ty::SecondArg => match args.get(1).or(args.first()) {
            Some(a) => expr_type(a, src, aggs),
            None => TEXT,
        },
        func::Ty::Rounded => {
            let (t, l, d) = args.first().map(|a| expr_type(a, src, aggs)).unwrap_or((ty::NEWDECIMAL, 10, 0));
            let want = match args.get(1) {
                Some(X::Lit(v)) => eval::to_i128(v).unwrap_or(0).clamp(0, 30) as u8,
                Some(_) => d,
                None => 0,
            };
            match t {
                ty::NEWDECIMAL => (t, l, want.min(d)),
                // A DOUBLE shows the digits asked for (a constant count).
                ty::DOUBLE if matches!(args.get(1), Some(X::Lit(_))) => (t, l, want),
                _ => (t, l, d),
            }
        }
        func::Ty::Double => (ty::DOUBLE, 23, 31),
    }
}

fn computed_def(name: &str, t: (u8, u32, u8)) -> ColumnDef {
    let mut d = ColumnDef::expr(name, t.0, t.1);
    d.decimals = t.2;
    if matches!(t.0, ty::VAR_STRING | ty::STRING | ty::BLOB) {
        d.decimals = 31;
    } else if t.0 == ty::NULL {
        d.flags = flag::BINARY;
    }
    d
}

/// A select item's result-column name and, for a plain column, its (table, column).
type ItemName = (String, Option<(usize, usize)>);

/// The select list compiled: `*` and `t.*` expanded, each item's name (alias or text).
fn select_items(q: &Select, scope: &Scope, cx: &mut Compiler) -> Result<(Vec<X>, Vec<ItemName>), SqlError> {
    let mut items = Vec::new();
    let mut names: Vec<ItemName> = Vec::new();
    for it in &q.items {
        match it {
            SelectItem::Star(t) => {
                let mut any = false;
                for (alias, h, off) in &scope.tables {
                    if let Some(t) = t
                        && !t.eq_ignore_ascii_case(alias)
                    {
                        continue;
                    }
                    any = true;
                    for (c, col) in h.table.columns.iter().enumerate() {
                        if col.hidden || col.name == HIDDEN_ROWID {
                            continue;
                        }
                        items.push(X::Col(off + c));
                        names.push((
                            col.name.clone(),
                            Some((scope.tables.iter().position(|x| x.2 == *off).unwrap_or(0), c)),
                        ));
                    }
                }
                if !any {
                    return Err(match t {
                        Some(t) => SqlError::new(1051, "42S02", format!("Unknown table '{t}'")),
                        None => SqlError::new(1096, "HY000", "No tables used"),
                    });
                }
            }
            SelectItem::Expr { e, alias, text } => {
                let x = cx.x(e)?;
                let src = match (&x, alias) {
                    (X::Col(c), _) => scope.tables.iter().enumerate().find_map(|(ti, (_, h, off))| {
                        (*c >= *off && *c < off + h.table.columns.len()).then_some((ti, c - off))
                    }),
                    _ => None,
                };
                names.push((alias.clone().unwrap_or_else(|| text.clone()), src));
                items.push(x);
            }
        }
    }
    Ok((items, names))
}

/// What choosing the tables' access paths reads.
struct Sourcing<'a> {
    q: &'a Select,
    handles: &'a [(String, TableHandle)],
    scope: &'a Scope<'a>,
    on_conds: &'a [Vec<X>],
    items: &'a [X],
    order: &'a [(X, bool)],
    group_by: &'a [X],
    aggs: &'a [Agg],
    having: Option<&'a X>,
}

/// Each table's access path, pushed conditions and needed columns, in FROM order; true when
/// every WHERE condition went to the only table's data node exactly. A single-table key lookup
/// takes its key conditions out of `filter` (they hold by construction).
fn sources(w: &Sourcing, filter: &mut Vec<X>) -> (Vec<Src>, bool) {
    let Sourcing { q, handles, scope, on_conds, items, order, group_by, aggs, having } = *w;
    let mut srcs = Vec::new();
    let mut all_pushed = true;
    for (i, (alias, h)) in handles.iter().enumerate() {
        let off = scope.tables[i].2;
        let n = h.table.columns.len();
        let left = on_conds[i].is_empty() && matches!(q.from[i].join, Some((JoinKind::Left, _)));
        let left = left || !on_conds[i].is_empty();
        // Conditions usable for this table: its ON clause (left joins), else WHERE conditions
        // over this and earlier tables (never WHERE for the inner side of a left join).
        let usable: Vec<X> = if left {
            on_conds[i].clone()
        } else {
            filter.iter().filter(|x| cols_below(x, off + n)).cloned().collect()
        };
        let (access, push) = choose_access(h, off, &usable);
        if handles.len() == 1 && matches!(access, Access::Key(_) | Access::Keys(_)) {
            // The key lookup answers its own conditions exactly: no need to re-check them per row
            // (an IN-list of 100 keys would otherwise cost 100 comparisons per row).
            filter.retain(|x| !key_condition(h, x));
        }
        let mut needed = Vec::new();
        for x in items.iter().chain(filter.iter()).chain(order.iter().map(|(x, _)| x)).chain(group_by.iter()) {
            collect_cols(x, off, n, &mut needed);
        }
        for a in aggs {
            if let Some(x) = &a.arg {
                collect_cols(x, off, n, &mut needed);
            }
        }
        if let Some(hv) = having {
            collect_cols(hv, off, n, &mut needed);
        }
        for c in on_conds.iter().flatten() {
            collect_cols(c, off, n, &mut needed);
        }
        if matches!(access, Access::Index { ref ranges, .. } if ranges.len() > 1) || q.lock.is_some() {
            // Rows from several ranges are de-duplicated by key; locking re-reads by key.
            needed.extend(h.table.primary_key.iter().copied());
        }
        if needed.is_empty() {
            // COUNT(*) and friends still need a row per match: read the key.
            needed.extend(h.table.primary_key.iter().copied());
        }
        needed.sort_unstable();
        needed.dedup();
        let exact = usable.len() == filter.len()
            && usable.iter().all(|x| col_cond(x, off, n).is_some_and(|c| cond_is_const(&c)))
            && !matches!(&access, Access::Index { ranges, .. } if ranges.len() > 1);
        if !exact || i > 0 {
            all_pushed = false;
        }
        srcs.push(Src {
            handle: h.clone(),
            alias: alias.clone(),
            offset: off,
            left_join: left,
            on: on_conds[i].clone(),
            access,
            push,
            needed,
        });
    }
    (srcs, all_pushed)
}

/// The direction a single table's index scan delivers rows in ORDER BY's order, if it does.
fn scan_order_of(srcs: &[Src], order: &[(X, bool)]) -> Option<bool> {
    if srcs.len() == 1 && !order.is_empty() {
        let s = &srcs[0];
        let desc = order[0].1;
        let cols: Option<Vec<u16>> = order
            .iter()
            .map(|(x, d)| if *d == desc { if let X::Col(c) = x { Some(*c as u16) } else { None } } else { None })
            .collect();
        if let (Some(cols), Access::Index { index, ranges }) = (cols, &s.access)
            && ranges.len() == 1
        {
            let eqn = ranges[0].eq.len();
            if index.columns.len() >= eqn + cols.len() && index.columns[eqn..eqn + cols.len()] == cols[..] {
                return Some(desc);
            }
        }
    }
    None
}

/// The result columns' definitions: a plain column's own, a computed value's by its type.
fn result_columns(scope: &Scope, items: &[X], names: &[ItemName], aggs: &[Agg]) -> Vec<ColumnDef> {
    let mut src_types = Vec::new();
    for (_, h, off) in &scope.tables {
        for (c, col) in h.table.columns.iter().enumerate() {
            src_types.push((off + c, col.ty));
        }
    }
    let mut columns = Vec::new();
    for (x, (name, src)) in items.iter().zip(names) {
        let def = match (x, src) {
            (X::Col(_), Some((ti, c))) => {
                let (alias, h, _) = &scope.tables[*ti];
                column_def(h, *c, alias, name)
            }
            _ => computed_def(name, expr_type(x, &src_types, aggs)),
        };
        columns.push(def);
    }
    columns
}

/// HAVING, ORDER BY and GROUP BY compiled; they may name select aliases and positions (after
/// a UNION, ORDER BY names result columns only).
#[allow(clippy::type_complexity)]
fn clauses(
    q: &Select,
    scope: &Scope,
    cx: &mut Compiler,
    items: &[X],
    names: &[ItemName],
) -> Result<(Option<X>, Vec<(X, bool)>, Vec<X>), SqlError> {
    let alias_of = |e: &Expr, items: &[X]| -> Option<X> {
        match e {
            Expr::Column { table: None, name } => {
                names.iter().position(|(n, _)| n.eq_ignore_ascii_case(name)).map(|i| items[i].clone())
            }
            Expr::Lit(Value::Int(k)) if *k >= 1 && (*k as usize) <= items.len() => Some(items[*k as usize - 1].clone()),
            _ => None,
        }
    };
    cx.clause = "having clause";
    let having = match &q.having {
        Some(h) => Some(match cx.x(h) {
            Ok(x) => x,
            Err(e) if e.errno == 1054 => substitute_aliases(h, names, items, cx)?,
            Err(e) => return Err(e),
        }),
        None => None,
    };
    cx.clause = "order clause";
    let mut order = Vec::new();
    for (e, desc) in &q.order_by {
        if !q.unions.is_empty() {
            // After a UNION, ORDER BY names result columns (by name, alias or position); the
            // executor evaluates these against the result rows.
            let i = match e {
                Expr::Column { name, .. } => names.iter().position(|(n, _)| n.eq_ignore_ascii_case(name)),
                Expr::Lit(Value::Int(k)) if *k >= 1 && (*k as usize) <= items.len() => Some(*k as usize - 1),
                _ => None,
            };
            let Some(i) = i else {
                return Err(SqlError::new(1054, "42S22", "Unknown column in 'order clause'"));
            };
            order.push((X::Col(i), *desc));
            continue;
        }
        let x = match cx.x(e) {
            Ok(x) if !matches!(e, Expr::Lit(_)) => x,
            Ok(_) | Err(_) if alias_of(e, items).is_some() => alias_of(e, items).expect("checked"),
            Ok(x) => x,
            Err(err) => return Err(err),
        };
        order.push((member_order(scope, x), *desc));
    }
    cx.clause = "group statement";
    let saved = cx.aggs.take();
    let mut group_by = Vec::new();
    for e in &q.group_by {
        let x = match cx.x(e) {
            Ok(x) if !matches!(e, Expr::Lit(_)) => x,
            Ok(_) | Err(_) if alias_of(e, items).is_some() => alias_of(e, items).expect("checked"),
            Ok(x) => x,
            Err(err) => return Err(err),
        };
        group_by.push(x);
    }
    cx.aggs = saved;
    Ok((having, order, group_by))
}

/// Plans a SELECT.
pub fn plan_select(q: &Select, cat: &dyn Catalog, db: Option<&str>) -> Result<SelectPlan, SqlError> {
    let mut handles = Vec::new();
    for t in &q.from {
        let h = cat.table(t.db.as_deref().or(db), &t.name)?;
        handles.push((t.alias.clone().unwrap_or_else(|| t.name.clone()), h));
    }
    let mut scope = Scope { tables: Vec::new() };
    let mut off = 0;
    for (alias, h) in &handles {
        scope.tables.push((alias.clone(), h, off));
        off += h.table.columns.len();
    }
    let width = scope.width();
    let mut cx =
        Compiler { scope: &scope, cat, db, aggs: None, subs: Vec::new(), clause: "where clause", insert_target: None };
    // WHERE and ON conditions.
    let mut filter = Vec::new();
    if let Some(w) = &q.filter {
        conjuncts(cx.x(w)?, &mut filter);
    }
    cx.clause = "on clause";
    let mut on_conds: Vec<Vec<X>> = vec![Vec::new(); handles.len()];
    for (i, t) in q.from.iter().enumerate() {
        if let Some((kind, Some(on))) = &t.join {
            let mut v = Vec::new();
            conjuncts(cx.x(on)?, &mut v);
            if *kind == JoinKind::Left {
                on_conds[i] = v;
            } else {
                filter.extend(v);
            }
        }
    }
    // Select items.
    cx.clause = "field list";
    cx.aggs = Some(Vec::new());
    let (items, names) = select_items(q, &scope, &mut cx)?;
    let (having, order, group_by) = clauses(q, &scope, &mut cx, &items, &names)?;
    let aggs = cx.aggs.take().unwrap_or_default();
    let grouped = !aggs.is_empty() || !group_by.is_empty();
    let limit = match &q.limit {
        Some(e) => Some(cx.x(e)?),
        None => None,
    };
    let offset = match &q.offset {
        Some(e) => Some(cx.x(e)?),
        None => None,
    };
    let mut subs = std::mem::take(&mut cx.subs);
    // Access paths, in FROM order.
    let (srcs, all_pushed) = sources(
        &Sourcing {
            q,
            handles: &handles,
            scope: &scope,
            on_conds: &on_conds,
            items: &items,
            order: &order,
            group_by: &group_by,
            aggs: &aggs,
            having: having.as_ref(),
        },
        &mut filter,
    );
    // ORDER BY on the single table's index prefix lets the scan deliver rows in order.
    let scan_order = if !grouped && !q.distinct { scan_order_of(&srcs, &order) } else { None };
    let push_limit = srcs.len() == 1
        && all_pushed
        && !grouped
        && !q.distinct
        && (order.is_empty() || scan_order.is_some())
        && q.unions.is_empty()
        && q.lock.is_none();
    let columns = result_columns(&scope, &items, &names, &aggs);
    let mut unions = Vec::new();
    for (all, u) in &q.unions {
        let p = plan_select(u, cat, db)?;
        if p.items.len() != items.len() {
            return Err(SqlError::new(1222, "21000", "The used SELECT statements have a different number of columns"));
        }
        unions.push((*all, p));
    }
    let agg_push = if srcs.len() == 1 && grouped && q.unions.is_empty() && q.lock.is_none() {
        pushable_aggregation(&srcs[0], &filter, &aggs, &group_by, &items, having.as_ref(), &order)
    } else {
        None
    };
    subs.shrink_to_fit();
    Ok(SelectPlan {
        srcs,
        width,
        filter,
        items,
        columns,
        aggs,
        grouped,
        group_by,
        having,
        order,
        distinct: q.distinct,
        limit,
        offset,
        lock: q.lock,
        push_limit,
        scan_order,
        agg_push,
        subs,
        unions,
    })
}

/// The aggregation a single-table grouped query can leave to the data node: COUNT / SUM / AVG /
/// MIN / MAX / the variance family over columns or arithmetic (+ - * and unary minus) on numeric
/// columns and numeric literals, grouped by columns or such expressions, with every other value
/// the query shows computed from the groups and aggregates.
fn pushable_aggregation(
    src: &Src,
    filter: &[X],
    aggs: &[Agg],
    group_by: &[X],
    items: &[X],
    having: Option<&X>,
    order: &[(X, bool)],
) -> Option<PushedAgg> {
    use tern_agg::{AggOp, Aggregation};
    let t = &src.handle.table;
    if super::infoschema::is_virtual(&t.database) || matches!(src.access, Access::Key(_) | Access::Keys(_)) {
        return None;
    }
    // Every condition must be one the data node applies (a pushed comparison).
    let n = t.columns.len();
    if !filter.iter().all(|x| col_cond(x, 0, n).is_some_and(|c| cond_is_const(&c))) {
        return None;
    }
    if let Access::Index { ranges, .. } = &src.access
        && ranges.len() > 1
    {
        return None;
    }
    let group = group_by.iter().map(|g| agg_expr(g, t, false)).collect::<Option<Vec<_>>>()?;
    let mut spec = Vec::new();
    let mut finals = Vec::new();
    let mut slot = 0;
    // The same operation over the same argument is computed once (TPC-H Q1's AVG(l_quantity)
    // reuses SUM(l_quantity)'s slot).
    let mut push = |spec: &mut Vec<(AggOp, Option<tern_agg::AggExpr>)>, op: AggOp, arg| {
        let mut at = 0;
        for (o, a) in spec.iter() {
            if *o == op && *a == arg {
                return at;
            }
            at += o.slots();
        }
        spec.push((op, arg));
        let at = slot;
        slot += op.slots();
        at
    };
    for a in aggs {
        if a.distinct {
            return None;
        }
        // SUM, AVG and the variance family only over numbers (strings convert per row in SQL).
        let numeric = !matches!(a.func, AggFn::Count | AggFn::Min | AggFn::Max);
        let arg = match &a.arg {
            None if a.func == AggFn::Count => None,
            None => return None,
            Some(x) => Some(agg_expr(x, t, numeric)?),
        };
        finals.push(match a.func {
            AggFn::Count => Final::Slot(push(&mut spec, AggOp::Count, arg)),
            AggFn::Sum => Final::Slot(push(&mut spec, AggOp::Sum, arg)),
            AggFn::Min => Final::Slot(push(&mut spec, AggOp::Min, arg)),
            AggFn::Max => Final::Slot(push(&mut spec, AggOp::Max, arg)),
            AggFn::Avg => {
                let s = push(&mut spec, AggOp::Sum, arg.clone());
                Final::Avg(s, push(&mut spec, AggOp::Count, arg))
            }
            f => {
                let (samp, sqrt) = f.variance()?;
                Final::Var { slot: push(&mut spec, AggOp::Var, arg), samp, sqrt }
            }
        });
    }
    // What the query shows outside aggregates must be computed from the grouping values.
    let nagg = aggs.len();
    let over = |x: &X| over_groups(x, group_by, nagg);
    let items = items.iter().map(over).collect::<Option<Vec<_>>>()?;
    let having = match having {
        Some(h) => Some(over(h)?),
        None => None,
    };
    let order = order.iter().map(|(x, d)| Some((over(x)?, *d))).collect::<Option<Vec<_>>>()?;
    let agg = Aggregation { group_by: group, aggs: spec };
    // Deeper or larger than the data node takes: the API server aggregates.
    agg.within_limits().then_some(PushedAgg { agg, finals, items, having, order })
}

/// A compiled expression as the data node's aggregation program evaluates it: columns, numeric
/// literals and + - * / unary minus over numeric columns (`numeric`: the value must be a number).
fn agg_expr(x: &X, t: &tern_types::schema::Table, numeric: bool) -> Option<tern_agg::AggExpr> {
    use tern_agg::{AggExpr, Arith};
    let is_num = |ty: ColumnType| {
        ty.is_integer() || matches!(ty, ColumnType::Decimal { .. } | ColumnType::Float | ColumnType::Double)
    };
    Some(match x {
        X::Col(c) => {
            let col = t.columns.get(*c)?;
            if numeric && !is_num(col.ty) {
                return None;
            }
            AggExpr::Col(*c as u16)
        }
        X::Lit(v @ (Value::Int(_) | Value::UInt(_) | Value::Decimal { .. } | Value::Double(_))) => {
            AggExpr::Lit(v.clone())
        }
        X::Un(UnOp::Neg, a) => AggExpr::Neg(Box::new(agg_expr(a, t, true)?)),
        X::Bin(op @ (BinOp::Add | BinOp::Sub | BinOp::Mul), a, b) => {
            let op = match op {
                BinOp::Add => Arith::Add,
                BinOp::Sub => Arith::Sub,
                _ => Arith::Mul,
            };
            AggExpr::Bin(op, Box::new(agg_expr(a, t, true)?), Box::new(agg_expr(b, t, true)?))
        }
        _ => return None,
    })
}

/// `x` with every grouping expression replaced by its value's position after the aggregates;
/// None when a column is left that is not inside a grouping expression.
fn over_groups(x: &X, group_by: &[X], nagg: usize) -> Option<X> {
    if let Some(j) = group_by.iter().position(|g| same_x(g, x)) {
        return Some(X::Agg(nagg + j));
    }
    Some(match x {
        X::Col(_) | X::NewCol(_) | X::InSub(..) | X::Exists(..) | X::Sub(_) => return None,
        X::Lit(_) | X::Param(_) | X::Agg(_) | X::Sys(..) | X::User(_) => x.clone(),
        X::Un(op, a) => X::Un(*op, Box::new(over_groups(a, group_by, nagg)?)),
        X::Bin(op, a, b) => {
            X::Bin(*op, Box::new(over_groups(a, group_by, nagg)?), Box::new(over_groups(b, group_by, nagg)?))
        }
        X::IsNull(a, n) => X::IsNull(Box::new(over_groups(a, group_by, nagg)?), *n),
        X::IsBool(a, b, n) => X::IsBool(Box::new(over_groups(a, group_by, nagg)?), *b, *n),
        X::In(a, l, n) => X::In(
            Box::new(over_groups(a, group_by, nagg)?),
            l.iter().map(|e| over_groups(e, group_by, nagg)).collect::<Option<_>>()?,
            *n,
        ),
        X::Between(a, b, c, n) => X::Between(
            Box::new(over_groups(a, group_by, nagg)?),
            Box::new(over_groups(b, group_by, nagg)?),
            Box::new(over_groups(c, group_by, nagg)?),
            *n,
        ),
        X::Like(a, b, n) => {
            X::Like(Box::new(over_groups(a, group_by, nagg)?), Box::new(over_groups(b, group_by, nagg)?), *n)
        }
        X::Call(f, args) => X::Call(*f, args.iter().map(|e| over_groups(e, group_by, nagg)).collect::<Option<_>>()?),
        X::Case(base, arms, other) => X::Case(
            match base {
                Some(b) => Some(Box::new(over_groups(b, group_by, nagg)?)),
                None => None,
            },
            arms.iter()
                .map(|(w, th)| Some((over_groups(w, group_by, nagg)?, over_groups(th, group_by, nagg)?)))
                .collect::<Option<_>>()?,
            match other {
                Some(o) => Some(Box::new(over_groups(o, group_by, nagg)?)),
                None => None,
            },
        ),
        X::Cast(a, ty) => X::Cast(Box::new(over_groups(a, group_by, nagg)?), *ty),
        X::DateAdd(a, b, u, s) => X::DateAdd(
            Box::new(over_groups(a, group_by, nagg)?),
            Box::new(over_groups(b, group_by, nagg)?),
            u.clone(),
            *s,
        ),
    })
}

/// Structural equality of the expressions a grouping expression can be (columns, literals,
/// arithmetic).
fn same_x(a: &X, b: &X) -> bool {
    match (a, b) {
        (X::Col(x), X::Col(y)) => x == y,
        (X::Lit(x), X::Lit(y)) => x == y,
        (X::Un(o1, x), X::Un(o2, y)) => o1 == o2 && same_x(x, y),
        (X::Bin(o1, x1, y1), X::Bin(o2, x2, y2)) => o1 == o2 && same_x(x1, x2) && same_x(y1, y2),
        _ => false,
    }
}

/// `pk_col = constant` or `pk_col IN (constants)` on a single-table query's key column.
fn key_condition(h: &TableHandle, x: &X) -> bool {
    let n = h.table.columns.len();
    match col_cond(x, 0, n) {
        Some(ColCond::Cmp(c, BinOp::Eq, v)) => h.table.is_key_column(c) && is_const(&v),
        Some(ColCond::In(c, l)) => h.table.is_key_column(c) && l.iter().all(is_const),
        _ => false,
    }
}

fn cond_is_const(c: &ColCond) -> bool {
    match c {
        ColCond::Cmp(_, _, v) => is_const(v),
        ColCond::In(_, l) => l.iter().all(is_const),
        ColCond::Between(_, a, b) => is_const(a) && is_const(b),
        ColCond::IsNull(..) => true,
    }
}

/// HAVING naming select aliases: replaces alias columns by the aliased expressions.
fn substitute_aliases(
    e: &Expr,
    names: &[(String, Option<(usize, usize)>)],
    items: &[X],
    cx: &mut Compiler,
) -> Result<X, SqlError> {
    match e {
        Expr::Column { table: None, name } => match names.iter().position(|(n, _)| n.eq_ignore_ascii_case(name)) {
            Some(i) => Ok(items[i].clone()),
            None => cx.x(e),
        },
        Expr::Binary(op, a, b) => Ok(X::Bin(
            *op,
            Box::new(substitute_aliases(a, names, items, cx)?),
            Box::new(substitute_aliases(b, names, items, cx)?),
        )),
        Expr::Unary(op, a) => Ok(X::Un(*op, Box::new(substitute_aliases(a, names, items, cx)?))),
        other => cx.x(other),
    }
}

/// Plans UPDATE or DELETE on one table.
pub fn plan_modify(
    table: &ObjName,
    filter: Option<&Expr>,
    sets: &[(String, Expr)],
    order_by: &[(Expr, bool)],
    limit: Option<&Expr>,
    cat: &dyn Catalog,
    db: Option<&str>,
) -> Result<ModifyPlan, SqlError> {
    let h = cat.table(table.db.as_deref().or(db), &table.name)?;
    let scope = Scope { tables: vec![(table.name.clone(), &h, 0)] };
    let mut cx =
        Compiler { scope: &scope, cat, db, aggs: None, subs: Vec::new(), clause: "where clause", insert_target: None };
    let mut conds = Vec::new();
    if let Some(w) = filter {
        conjuncts(cx.x(w)?, &mut conds);
    }
    cx.clause = "field list";
    let mut set_x = Vec::new();
    for (c, e) in sets {
        let col = h
            .table
            .column_index(c)
            .ok_or_else(|| SqlError::new(1054, "42S22", format!("Unknown column '{c}' in 'field list'")))?;
        let x = match e {
            Expr::Default => X::Lit(crate::column::default_of(&h.table.columns[col])),
            e => cx.x(e)?,
        };
        set_x.push((col as u16, x));
    }
    cx.clause = "order clause";
    let order = order_by.iter().map(|(e, d)| Ok((cx.x(e)?, *d))).collect::<Result<Vec<_>, SqlError>>()?;
    let limit = match limit {
        Some(e) => Some(cx.x(e)?),
        None => None,
    };
    let (access, push) = choose_access(&h, 0, &conds);
    let needed = (0..h.table.columns.len() as u16).collect();
    let subs = std::mem::take(&mut cx.subs);
    Ok(ModifyPlan {
        src: Src {
            handle: h.clone(),
            alias: table.name.clone(),
            offset: 0,
            left_join: false,
            on: Vec::new(),
            access,
            push,
            needed,
        },
        filter: conds,
        sets: set_x,
        order,
        limit,
        subs,
    })
}

/// Plans an INSERT / REPLACE.
pub fn plan_insert(ins: &Insert, cat: &dyn Catalog, db: Option<&str>) -> Result<InsertPlan, SqlError> {
    let h = cat.table(ins.table.db.as_deref().or(db), &ins.table.name)?;
    let ncol = h.table.columns.len();
    let targets: Vec<usize> = match &ins.columns {
        Some(cols) => cols
            .iter()
            .map(|c| {
                h.table
                    .column_index(c)
                    .ok_or_else(|| SqlError::new(1054, "42S22", format!("Unknown column '{c}' in 'field list'")))
            })
            .collect::<Result<_, _>>()?,
        None => (0..ncol).filter(|&c| !h.table.columns[c].hidden && h.table.columns[c].name != HIDDEN_ROWID).collect(),
    };
    let mut explicit = vec![false; ncol];
    for &t in &targets {
        explicit[t] = true;
    }
    let empty = Scope { tables: Vec::new() };
    let mut cx =
        Compiler { scope: &empty, cat, db, aggs: None, subs: Vec::new(), clause: "field list", insert_target: None };
    let default_of = |c: usize| X::Lit(crate::column::default_of(&h.table.columns[c]));
    let mut rows = Vec::new();
    let mut select = None;
    match &ins.source {
        InsertSource::Values(vals) => {
            for (i, r) in vals.iter().enumerate() {
                if r.len() != targets.len() && !(r.is_empty() && ins.columns.is_none()) {
                    return Err(SqlError::new(
                        1136,
                        "21S01",
                        format!("Column count doesn't match value count at row {}", i + 1),
                    ));
                }
                let mut row: Vec<X> = (0..ncol).map(default_of).collect();
                for (&t, e) in targets.iter().zip(r) {
                    row[t] = match e {
                        Expr::Default => default_of(t),
                        e => cx.x(e)?,
                    };
                }
                rows.push(row);
            }
        }
        InsertSource::Select(q) => {
            let p = plan_select(q, cat, db)?;
            if p.items.len() != targets.len() {
                return Err(SqlError::new(1136, "21S01", "Column count doesn't match value count at row 1"));
            }
            rows.push((0..ncol).map(default_of).collect());
            select = Some((Box::new(p), targets.clone()));
        }
    }
    let scope = Scope { tables: vec![(ins.table.name.clone(), &h, 0)] };
    let mut cx2 = Compiler {
        scope: &scope,
        cat,
        db,
        aggs: None,
        subs: Vec::new(),
        clause: "field list",
        insert_target: Some(&h),
    };
    let mut on_dup = Vec::new();
    for (c, e) in &ins.on_dup {
        let col = h
            .table
            .column_index(c)
            .ok_or_else(|| SqlError::new(1054, "42S22", format!("Unknown column '{c}' in 'field list'")))?;
        on_dup.push((col as u16, cx2.x(e)?));
    }
    if !cx.subs.is_empty() || !cx2.subs.is_empty() {
        return Err(SqlError::new(
            1235,
            "42000",
            "This version of Tern doesn't yet support 'subqueries in INSERT values'",
        ));
    }
    Ok(InsertPlan { handle: h, rows, select, replace: ins.replace, ignore: ins.ignore, on_dup, explicit })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ast::Statement;
    use crate::parse::parse;
    use tern_types::{Column, Table};

    struct Cat(TableHandle);
    impl Catalog for Cat {
        fn table(&self, _db: Option<&str>, name: &str) -> Result<TableHandle, SqlError> {
            if name == "t" { Ok(self.0.clone()) } else { Err(SqlError::new(1146, "42S02", "no")) }
        }
    }

    fn cat() -> Cat {
        let mut t = Table::new(
            "d",
            "t",
            vec![
                Column::new("id", ColumnType::Int { unsigned: false }).not_null(),
                Column::new("k", ColumnType::Int { unsigned: false }),
                Column::new("c", ColumnType::VarChar { len: 10 }),
            ],
            vec![0],
        );
        t.indexes = vec![
            Index { id: 1, name: "PRIMARY".into(), columns: vec![0], unique: false },
            Index { id: 2, name: "k_1".into(), columns: vec![1], unique: false },
        ];
        t.partition_count = 2;
        Cat(TableHandle::new(t))
    }

    fn plan(sql: &str) -> SelectPlan {
        let Statement::Select(q) = parse(sql).unwrap().stmt else { panic!() };
        plan_select(&q, &cat(), Some("d")).unwrap()
    }

    #[test]
    fn access_paths() {
        assert!(matches!(plan("SELECT c FROM t WHERE id = ?").srcs[0].access, Access::Key(_)));
        assert!(
            matches!(plan("SELECT c FROM t WHERE id IN (1, 2, 3)").srcs[0].access, Access::Keys(ref k) if k.len() == 3)
        );
        let p = plan("SELECT c FROM t WHERE id BETWEEN 1 AND 5 ORDER BY id LIMIT 3");
        assert!(matches!(p.srcs[0].access, Access::Index { ref index, .. } if index.name == "PRIMARY"));
        assert!(p.push_limit && p.scan_order == Some(false));
        assert!(
            matches!(plan("SELECT c FROM t WHERE k IN (1, 2)").srcs[0].access, Access::Index { ref ranges, .. } if ranges.len() == 2)
        );
        assert!(
            matches!(plan("SELECT c FROM t WHERE k BETWEEN 1 AND 2 OR k BETWEEN 5 AND 6").srcs[0].access, Access::Index { ref ranges, .. } if ranges.len() == 2)
        );
        assert!(matches!(plan("SELECT c FROM t WHERE c = 'x'").srcs[0].access, Access::Scan));
        // Key lookups answer their own condition.
        assert!(plan("SELECT c FROM t WHERE id IN (1, 2)").filter.is_empty());
    }

    #[test]
    fn aggregation_pushdown_when_the_data_node_can() {
        use tern_agg::{AggExpr, AggOp, Arith};
        let a = plan("SELECT SUM(k) FROM t WHERE id BETWEEN ? AND ?").agg_push.expect("pushed");
        assert_eq!(a.agg.aggs, vec![(AggOp::Sum, Some(AggExpr::Col(1)))]);
        assert!(plan("SELECT k, COUNT(*), MIN(c) FROM t GROUP BY k").agg_push.is_some());
        // AVG is a SUM and a COUNT; arithmetic arguments; the variance family; grouping by an
        // expression, shown through an expression over it.
        let a = plan("SELECT k * 2 + 1, AVG(k), SUM(-k * 3), STDDEV_SAMP(k), SUM(k) FROM t GROUP BY k * 2")
            .agg_push
            .expect("pushed");
        assert_eq!(
            a.agg.group_by,
            vec![AggExpr::Bin(Arith::Mul, Box::new(AggExpr::Col(1)), Box::new(AggExpr::Lit(Value::Int(2))))]
        );
        assert_eq!(
            a.agg.aggs.iter().map(|x| x.0).collect::<Vec<_>>(),
            [AggOp::Sum, AggOp::Count, AggOp::Sum, AggOp::Var]
        );
        // SUM(k) is AVG(k)'s SUM: one slot.
        assert_eq!(
            a.finals,
            [Final::Avg(0, 1), Final::Slot(2), Final::Var { slot: 3, samp: true, sqrt: true }, Final::Slot(0)]
        );
        assert!(matches!(&a.items[0], X::Bin(BinOp::Add, g, _) if matches!(**g, X::Agg(4))));
        // Not: DISTINCT, unpushable conditions, SUM of text, key lookups, columns outside the
        // grouping expressions, functions.
        assert!(plan("SELECT COUNT(DISTINCT k) FROM t").agg_push.is_none());
        assert!(plan("SELECT k, COUNT(*) FROM t GROUP BY k * 2").agg_push.is_none());
        assert!(plan("SELECT SUM(ABS(k)) FROM t").agg_push.is_none());
        assert!(plan("SELECT SUM(c + 1) FROM t").agg_push.is_none());
        let deep = format!("SELECT SUM({}k{}) FROM t", "(1 + ".repeat(40), ")".repeat(40));
        assert!(plan(&deep).agg_push.is_none(), "deeper than the data node takes");
        assert!(plan("SELECT COUNT(*) FROM t WHERE c LIKE 'a%'").agg_push.is_none());
        assert!(plan("SELECT SUM(c) FROM t").agg_push.is_none());
        assert!(plan("SELECT COUNT(*) FROM t WHERE id = 1").agg_push.is_none());
        assert!(plan("SELECT c, COUNT(*) FROM t GROUP BY k").agg_push.is_none());
    }
}
