//! The order of a query's inner joins (DataFusion joins in FROM order: TPC-H Q5 joined customer,
//! orders and lineitem before the one region its filter keeps, and 940 k lineitem rows crossed
//! from the data node where 180 k join).
//!
//! [`JoinOrder`] is a logical optimizer rule that runs after DataFusion's own (filters are pushed
//! down, cross joins turned into equi-joins). It flattens each tree of inner joins into its inputs
//! and conditions, estimates each input's rows (the data node's row count times a guess per
//! filter), and picks the left-deep order with the smallest sum of intermediate results by dynamic
//! programming over subsets (System R's order, "C_out" cost). The left input of each join is the
//! part already joined, which the hash join builds on and whose keys narrow the next table's scan
//! (`scan`'s key sets), so small intermediate results mean few rows read. Join sizes follow the
//! usual key rules: joining on a unique key of the new input keeps at most one row per row so far;
//! joining on a unique key of a table already joined gives the new input's rows that match the keys
//! still present. The plan is only changed when the estimate is clearly better than FROM order.
//!
//! An input's filters are measured, not guessed, where that matters: before reordering, the engine
//! counts how many of the first [`SAMPLE_ROWS`] rows of each filtered table scan in a cluster pass
//! its filters ([`sample_plans`], run by `engine::physical`), and [`reorder_sampled`] uses those
//! parts (TPC-H Q8's `p_type = '…'` keeps 1/150 of `part`, where a guess for `=` says 1/10).
//!
//! Semi and anti joins (`IN`/`EXISTS` subqueries) whose outer columns come from one input of an
//! inner join are moved onto that input first (Q18's 57 orders pick their lineitem rows by key
//! instead of the whole join being filtered at the end).

use super::table::TernTable;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema, ExprSchema, NullEquality, Result};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::utils::{conjunction, split_conjunction_owned};
use datafusion::logical_expr::{
    BinaryExpr, Expr, Join, JoinConstraint, JoinType, LogicalPlan, Operator, Projection, TableScan, TableScanBuilder,
};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// More inputs than this are left in FROM order (the search is exponential in them).
const INPUTS_MAX: usize = 12;

/// A new order must be estimated at most this part of FROM order's cost to be used.
const BETTER: f64 = 0.7;

/// Rows of a filtered input read to measure its filters (per partition stream at most).
pub const SAMPLE_ROWS: usize = 4096;

/// The part of an input's rows its filters pass, measured on a sample, by the input's plan text.
pub type Samples = HashMap<String, f64>;

/// Whether inner joins are reordered: yes unless `TERN_JOIN_ORDER=0` (FROM order, DataFusion's).
pub fn enabled() -> bool {
    std::env::var_os("TERN_JOIN_ORDER").is_none_or(|v| v != "0")
}

/// The optimizer rule: semi joins moved onto their input. Inner joins are reordered after the
/// optimizer, with sampled selectivities ([`reorder_sampled`]).
#[derive(Debug, Default)]
pub struct JoinOrder {
    /// Whether inner joins are also reordered here, on guessed selectivities (tests).
    pub reorder: bool,
}

impl OptimizerRule for JoinOrder {
    fn name(&self) -> &str {
        "tern_join_order"
    }

    fn rewrite(&self, plan: LogicalPlan, _config: &dyn OptimizerConfig) -> Result<Transformed<LogicalPlan>> {
        let plan = plan.transform_up(push_semi_join)?;
        let transformed = plan.transformed;
        if !self.reorder {
            return Ok(plan);
        }
        let mut plan = reorder(plan.data, &Samples::new())?;
        plan.transformed |= transformed;
        Ok(plan)
    }
}

/// The plan with its inner joins reordered, filtered inputs estimated by `samples`.
pub fn reorder_sampled(plan: LogicalPlan, samples: &Samples) -> Result<Transformed<LogicalPlan>> {
    reorder(plan, samples)
}

/// The key of an input in [`Samples`].
fn sample_key(plan: &LogicalPlan) -> String {
    plan.display_indent().to_string()
}

/// A filtered input to measure: its key, a plan counting the sampled rows that pass its filters
/// and one counting the sampled rows (both one row, one INT64 column).
pub struct SamplePlan {
    pub key: String,
    pub passed: LogicalPlan,
    pub read: LogicalPlan,
}

/// The inputs of the clusters [`reorder`] would order whose rows come from a filtered scan of a
/// Tern table (through filters, projections and aliases), as plans that count a sample of them.
pub fn sample_plans(plan: &LogicalPlan) -> Result<Vec<SamplePlan>> {
    fn visit(plan: &LogicalPlan, out: &mut Vec<SamplePlan>) -> Result<()> {
        if !is_inner_join(plan) {
            return plan.inputs().into_iter().try_for_each(|p| visit(p, out));
        }
        let mut cluster = Cluster::default();
        cluster.flatten(plan.clone());
        let ordered = (3..=INPUTS_MAX).contains(&cluster.leaves.len());
        for leaf in &cluster.leaves {
            if ordered
                && !out.iter().any(|s| s.key == sample_key(leaf))
                && let Some(s) = sample_plan(leaf)?
            {
                out.push(s);
            }
            visit(leaf, out)?;
        }
        Ok(())
    }
    let mut out = Vec::new();
    visit(plan, &mut out)?;
    Ok(out)
}

/// `leaf` over the first rows of its table, counted (none when it has no filter or is not a
/// chain of filters, projections and aliases over a scan of a Tern table).
fn sample_plan(leaf: &LogicalPlan) -> Result<Option<SamplePlan>> {
    use datafusion::functions_aggregate::expr_fn::count;
    use datafusion::logical_expr::{LogicalPlanBuilder, lit};
    let mut chain = Vec::new();
    let mut node = leaf;
    let scan = loop {
        match node {
            LogicalPlan::Filter(f) if !f.predicate.contains_outer() => {
                chain.push(node);
                node = &f.input;
            }
            LogicalPlan::Projection(_) | LogicalPlan::SubqueryAlias(_) => {
                chain.push(node);
                node = node.inputs()[0];
            }
            LogicalPlan::TableScan(scan) => break scan,
            _ => return Ok(None),
        }
    };
    let filtered = !scan.filters.is_empty() || chain.iter().any(|n| matches!(n, LogicalPlan::Filter(_)));
    let tern = source_as_provider(&scan.source).ok().is_some_and(|t| t.downcast_ref::<TernTable>().is_some());
    if !filtered || !tern || scan.fetch.is_some() {
        return Ok(None);
    }
    let sample = LogicalPlan::TableScan(
        TableScanBuilder::new(scan.table_name.clone(), scan.source.clone())
            .with_projection(scan.projection.clone())
            .with_fetch(Some(SAMPLE_ROWS))
            .build()?,
    );
    let counted = || vec![count(lit(1))];
    let read = LogicalPlanBuilder::from(sample.clone()).aggregate(Vec::<Expr>::new(), counted())?.build()?;
    let mut b = LogicalPlanBuilder::from(sample);
    if let Some(f) = conjunction(scan.filters.iter().cloned()) {
        b = b.filter(f)?;
    }
    for n in chain.iter().rev() {
        b = match n {
            LogicalPlan::Filter(f) => b.filter(f.predicate.clone())?,
            LogicalPlan::Projection(p) => b.project(p.expr.clone())?,
            LogicalPlan::SubqueryAlias(a) => b.alias(a.alias.clone())?,
            _ => unreachable!("the chain holds filters, projections and aliases"),
        };
    }
    let passed = b.aggregate(Vec::<Expr>::new(), counted())?.build()?;
    Ok(Some(SamplePlan { key: sample_key(leaf), passed, read }))
}

/// A semi or anti join over an inner join whose outer columns all come from one side of it,
/// moved onto that side (again and again, down the tree).
fn push_semi_join(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    let LogicalPlan::Join(semi) = &plan else { return Ok(Transformed::no(plan)) };
    if !matches!(semi.join_type, JoinType::LeftSemi | JoinType::LeftAnti) || semi.null_aware {
        return Ok(Transformed::no(plan));
    }
    // Through a projection of columns (it keeps the columns the semi join reads).
    if let LogicalPlan::Projection(p) = semi.left.as_ref()
        && is_column_projection(p)
        && is_inner_join(&p.input)
    {
        let LogicalPlan::Join(semi) = plan else { unreachable!("matched above") };
        let LogicalPlan::Projection(p) = Arc::unwrap_or_clone(semi.left) else { unreachable!("matched above") };
        let below = Join::try_new(
            p.input,
            semi.right,
            semi.on,
            semi.filter,
            semi.join_type,
            semi.join_constraint,
            semi.null_equality,
            semi.null_aware,
        )?;
        let below = push_semi_join(LogicalPlan::Join(below))?;
        let projection = Projection::try_new(p.expr, Arc::new(below.data))?;
        return Ok(Transformed::yes(LogicalPlan::Projection(projection)));
    }
    let LogicalPlan::Join(inner) = semi.left.as_ref() else { return Ok(Transformed::no(plan)) };
    if !is_inner_join(&semi.left) {
        return Ok(Transformed::no(plan));
    }
    // The outer side's columns the semi join reads.
    let right = semi.right.schema();
    let mut outer: Vec<Column> = semi.on.iter().flat_map(|(l, _)| l.column_refs()).cloned().collect();
    if let Some(f) = &semi.filter {
        outer.extend(f.column_refs().into_iter().filter(|c| !right.has_column(c)).cloned());
    }
    if outer.is_empty() {
        return Ok(Transformed::no(plan));
    }
    let on_left = outer.iter().all(|c| inner.left.schema().has_column(c));
    let on_right = !on_left && outer.iter().all(|c| inner.right.schema().has_column(c));
    if !on_left && !on_right {
        return Ok(Transformed::no(plan));
    }
    let LogicalPlan::Join(semi) = plan else { unreachable!("matched above") };
    let LogicalPlan::Join(inner) = Arc::unwrap_or_clone(semi.left) else { unreachable!("matched above") };
    let side = if on_left { inner.left.clone() } else { inner.right.clone() };
    let moved = Join::try_new(
        side,
        semi.right,
        semi.on,
        semi.filter,
        semi.join_type,
        semi.join_constraint,
        semi.null_equality,
        semi.null_aware,
    )?;
    // Further down while it can go.
    let moved = Arc::new(push_semi_join(LogicalPlan::Join(moved))?.data);
    let (left, right) = if on_left { (moved, inner.right) } else { (inner.left, moved) };
    let join = Join::try_new(
        left,
        right,
        inner.on,
        inner.filter,
        JoinType::Inner,
        inner.join_constraint,
        inner.null_equality,
        inner.null_aware,
    )?;
    Ok(Transformed::yes(LogicalPlan::Join(join)))
}

/// Every tree of inner joins in the plan, ordered (children first).
fn reorder(plan: LogicalPlan, samples: &Samples) -> Result<Transformed<LogicalPlan>> {
    if !is_inner_join(&plan) {
        return plan.map_children(|p| reorder(p, samples));
    }
    let original = plan.clone();
    let mut cluster = Cluster::default();
    cluster.flatten(plan);
    let mut changed = false;
    let mut leaves = Vec::with_capacity(cluster.leaves.len());
    for leaf in std::mem::take(&mut cluster.leaves) {
        let t = reorder(leaf, samples)?;
        changed |= t.transformed;
        leaves.push(t.data);
    }
    cluster.leaves = leaves;
    match cluster.order(samples) {
        Some(order) => Ok(Transformed::yes(cluster.build(&order, original.schema())?)),
        None if changed => Ok(Transformed::yes(cluster.build_as_before(original)?)),
        None => Ok(Transformed::no(original)),
    }
}

fn is_inner_join(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Join(j) if j.join_type == JoinType::Inner && j.join_constraint == JoinConstraint::On
        && j.null_equality == NullEquality::NullEqualsNothing)
}

/// A projection that only passes columns on (`optimize_projections` puts them between joins).
fn is_column_projection(p: &Projection) -> bool {
    p.expr.iter().all(|e| matches!(e, Expr::Column(_)))
}

/// The inputs and conditions of a tree of inner joins.
#[derive(Default)]
struct Cluster {
    leaves: Vec<LogicalPlan>,
    /// Conditions of the joins and of filters between them.
    conditions: Vec<Expr>,
}

/// An equality between expressions of two inputs.
struct Pair {
    a: usize,
    b: usize,
    a_expr: Expr,
    b_expr: Expr,
    /// Pairs of one class compare the same value (`a = b AND b = c`: `a = c` is implied).
    class: usize,
}

/// What the estimates know of an input.
struct Input {
    rows: f64,
    /// Rows before its filters (the number of key values a join on its unique key can meet).
    domain: f64,
    /// Column sets whose values are unique in it.
    keys: Vec<Vec<Column>>,
}

impl Cluster {
    fn flatten(&mut self, plan: LogicalPlan) {
        match plan {
            LogicalPlan::Join(j) if is_inner_join(&LogicalPlan::Join(j.clone())) => {
                self.conditions.extend(j.on.into_iter().map(|(l, r)| l.eq(r)));
                if let Some(f) = j.filter {
                    self.conditions.extend(split_conjunction_owned(f));
                }
                self.flatten(Arc::unwrap_or_clone(j.left));
                self.flatten(Arc::unwrap_or_clone(j.right));
            }
            LogicalPlan::Filter(f) if is_inner_join(&f.input) && !f.predicate.contains_outer() => {
                self.conditions.extend(split_conjunction_owned(f.predicate));
                self.flatten(Arc::unwrap_or_clone(f.input));
            }
            LogicalPlan::Projection(p) if is_column_projection(&p) && is_inner_join(&p.input) => {
                self.flatten(Arc::unwrap_or_clone(p.input));
            }
            other => self.leaves.push(other),
        }
    }

    /// The input whose schema holds every column of `e` (none for no columns or several inputs).
    fn input_of(&self, e: &Expr) -> Option<usize> {
        let cols = e.column_refs();
        if cols.is_empty() {
            return None;
        }
        let mut found = None;
        for c in cols {
            let i = self.leaves.iter().position(|l| l.schema().has_column(c))?;
            if found.is_some_and(|f| f != i) {
                return None;
            }
            found = Some(i);
        }
        found
    }

    /// The inputs `e` reads, as a bit set.
    fn inputs_of(&self, e: &Expr) -> u32 {
        e.column_refs()
            .into_iter()
            .filter_map(|c| self.leaves.iter().position(|l| l.schema().has_column(c)))
            .fold(0, |m, i| m | 1 << i)
    }

    /// The conditions' equalities between two inputs.
    fn pairs(&self) -> Vec<Pair> {
        let mut pairs = Vec::new();
        for c in &self.conditions {
            let Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) = c else { continue };
            if let (Some(a), Some(b)) = (self.input_of(left), self.input_of(right))
                && a != b
            {
                let class = pairs.len();
                pairs.push(Pair { a, b, a_expr: (**left).clone(), b_expr: (**right).clone(), class });
            }
        }
        pairs
    }

    /// The conditions' equalities and those they imply: columns equal to one another form a
    /// class, and any two columns of a class (of two inputs, of one type) are equal (Q5's
    /// `c_nationkey = s_nationkey AND s_nationkey = n_nationkey` joins customer to nation).
    fn pairs_implied(&self) -> Vec<Pair> {
        let mut pairs = self.pairs();
        // Union-find over the columns of column = column pairs.
        let mut members: Vec<(Column, usize)> = Vec::new();
        let mut parent: Vec<usize> = (0..pairs.len()).collect();
        fn root(parent: &mut [usize], mut i: usize) -> usize {
            while parent[i] != i {
                parent[i] = parent[parent[i]];
                i = parent[i];
            }
            i
        }
        for (i, p) in pairs.iter().enumerate() {
            for e in [&p.a_expr, &p.b_expr] {
                let Expr::Column(c) = e else { continue };
                match members.iter().find(|(m, _)| m == c) {
                    Some(&(_, j)) => {
                        let (ri, rj) = (root(&mut parent, i), root(&mut parent, j));
                        parent[ri] = rj;
                    }
                    None => members.push((c.clone(), i)),
                }
            }
        }
        for p in pairs.iter_mut() {
            p.class = root(&mut parent, p.class);
        }
        let typed: Vec<(Column, usize, usize, Option<datafusion::arrow::datatypes::DataType>)> = members
            .into_iter()
            .filter_map(|(c, i)| {
                let input = self.leaves.iter().position(|l| l.schema().has_column(&c))?;
                let ty = self.leaves[input].schema().field_from_column(&c).ok().map(|f| f.data_type().clone());
                Some((c, input, root(&mut parent, i), ty))
            })
            .collect();
        for (i, (c, a, class, ty)) in typed.iter().enumerate() {
            for (d, b, class_d, ty_d) in &typed[i + 1..] {
                if class != class_d || a == b || ty.is_none() || ty != ty_d {
                    continue;
                }
                let known = pairs.iter().any(|p| {
                    (p.a == *a
                        && p.b == *b
                        && p.a_expr == Expr::Column(c.clone())
                        && p.b_expr == Expr::Column(d.clone()))
                        || (p.a == *b
                            && p.b == *a
                            && p.a_expr == Expr::Column(d.clone())
                            && p.b_expr == Expr::Column(c.clone()))
                });
                if !known {
                    pairs.push(Pair {
                        a: *a,
                        b: *b,
                        a_expr: Expr::Column(c.clone()),
                        b_expr: Expr::Column(d.clone()),
                        class: *class,
                    });
                }
            }
        }
        pairs
    }

    /// A better order than the present one, as input positions.
    fn order(&self, samples: &Samples) -> Option<Vec<usize>> {
        let n = self.leaves.len();
        if !(3..=INPUTS_MAX).contains(&n) {
            return None;
        }
        let inputs: Vec<Input> = self
            .leaves
            .iter()
            .map(|leaf| {
                let mut input = estimate(leaf);
                if let Some(part) = samples.get(&sample_key(leaf)) {
                    input.rows = (input.domain * part).max(1.0);
                }
                input
            })
            .collect();
        let pairs = self.pairs_implied();
        let others: Vec<(u32, f64)> = self
            .conditions
            .iter()
            .filter(|c| !is_pair(c, &pairs))
            .map(|c| (self.inputs_of(c), selectivity(c)))
            .collect();
        let model = Model { inputs, pairs, others };
        let present: Vec<usize> = (0..n).collect();
        let present_cost = model.cost(&present);
        let best = model.best()?;
        (best.1 < present_cost * BETTER && best.0 != present).then_some(best.0)
    }

    /// The inputs joined left-deep in `order`, each condition at the first join that has its
    /// columns, under a projection to the columns (and order) the tree had.
    fn build(self, order: &[usize], schema: &DFSchema) -> Result<LogicalPlan> {
        let implied = self.pairs_implied();
        let pairs = &implied[..self.pairs().len()];
        let pair_of = |c: &Expr| {
            let Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) = c else { return None };
            pairs.iter().position(|p| **left == p.a_expr && **right == p.b_expr)
        };
        let masks: Vec<u32> = self.conditions.iter().map(|c| self.inputs_of(c)).collect();
        let pair_index: Vec<Option<usize>> = self.conditions.iter().map(pair_of).collect();
        let mut leaves: Vec<Option<LogicalPlan>> = self.leaves.into_iter().map(Some).collect();
        let mut used = vec![false; self.conditions.len()];
        let mut mask = 1u32 << order[0];
        let mut plan = leaves[order[0]].take().expect("each input once");
        for &x in &order[1..] {
            let next = leaves[x].take().expect("each input once");
            let joined = mask | 1 << x;
            let mut on = Vec::new();
            let mut filter = Vec::new();
            for (i, c) in self.conditions.iter().enumerate() {
                if used[i] || masks[i] & !joined != 0 {
                    continue;
                }
                used[i] = true;
                match pair_index[i].map(|p| &pairs[p]) {
                    Some(p) if p.b == x && mask & 1 << p.a != 0 => on.push((p.a_expr.clone(), p.b_expr.clone())),
                    Some(p) if p.a == x && mask & 1 << p.b != 0 => on.push((p.b_expr.clone(), p.a_expr.clone())),
                    _ => filter.push(c.clone()),
                }
            }
            if on.is_empty() {
                // Joined by what the conditions imply: one equality per class.
                let mut classes = HashSet::new();
                for p in &implied[pairs.len()..] {
                    let (s_expr, x_expr) = match (p.a == x, p.b == x) {
                        (false, true) if mask & 1 << p.a != 0 => (&p.a_expr, &p.b_expr),
                        (true, false) if mask & 1 << p.b != 0 => (&p.b_expr, &p.a_expr),
                        _ => continue,
                    };
                    if classes.insert(p.class) {
                        on.push((s_expr.clone(), x_expr.clone()));
                    }
                }
            }
            let join = Join::try_new(
                Arc::new(plan),
                Arc::new(next),
                on,
                conjunction(filter),
                JoinType::Inner,
                JoinConstraint::On,
                NullEquality::NullEqualsNothing,
                false,
            )?;
            plan = LogicalPlan::Join(join);
            mask = joined;
        }
        // Conditions of no input's columns (constants) filter the result.
        let rest: Vec<Expr> = self.conditions.iter().zip(&used).filter(|(_, u)| !**u).map(|(c, _)| c.clone()).collect();
        if let Some(p) = conjunction(rest) {
            plan = LogicalPlan::Filter(datafusion::logical_expr::Filter::try_new(p, Arc::new(plan))?);
        }
        let columns = schema.columns().into_iter().map(Expr::Column).collect();
        Ok(LogicalPlan::Projection(Projection::try_new(columns, Arc::new(plan))?))
    }

    /// The tree as it was, with its inputs (rewritten inside) in their places.
    fn build_as_before(self, original: LogicalPlan) -> Result<LogicalPlan> {
        let mut leaves = self.leaves.into_iter();
        fn put(plan: LogicalPlan, leaves: &mut std::vec::IntoIter<LogicalPlan>) -> Result<LogicalPlan> {
            let inner = match &plan {
                LogicalPlan::Join(_) => is_inner_join(&plan),
                LogicalPlan::Filter(f) => is_inner_join(&f.input) && !f.predicate.contains_outer(),
                LogicalPlan::Projection(p) => is_column_projection(p) && is_inner_join(&p.input),
                _ => false,
            };
            if !inner {
                return Ok(leaves.next().expect("as many inputs as flattened"));
            }
            Ok(plan.map_children(|c| put(c, leaves).map(Transformed::yes))?.data)
        }
        put(original, &mut leaves)?.recompute_schema()
    }
}

fn is_pair(c: &Expr, pairs: &[Pair]) -> bool {
    let Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) = c else { return false };
    pairs.iter().any(|p| **left == p.a_expr && **right == p.b_expr)
}

/// Sizes of joins, estimated.
struct Model {
    inputs: Vec<Input>,
    pairs: Vec<Pair>,
    /// Other conditions: the inputs they read and the part of rows they pass.
    others: Vec<(u32, f64)>,
}

/// A left-deep join of some inputs: its rows, and per input the part of its rows (of `domain`)
/// still present.
#[derive(Clone)]
struct Joined {
    mask: u32,
    rows: f64,
    present: Vec<f64>,
}

impl Model {
    fn start(&self, i: usize) -> Joined {
        let present = self.inputs.iter().map(|x| (x.rows / x.domain).min(1.0)).collect();
        Joined { mask: 1 << i, rows: self.inputs[i].rows, present }
    }

    fn connected(&self, mask: u32, x: usize) -> bool {
        self.pairs.iter().any(|p| (p.a == x && mask & 1 << p.b != 0) || (p.b == x && mask & 1 << p.a != 0))
            || self.others.iter().any(|(m, _)| m & 1 << x != 0 && m & mask != 0 && m & !(mask | 1 << x) == 0)
    }

    /// `s` joined with input `x`.
    fn join(&self, s: &Joined, x: usize) -> Joined {
        let input = &self.inputs[x];
        // The equalities between s and x: x's columns, s's columns (with their input), classes.
        let mut x_cols: Vec<(&Column, usize)> = Vec::new();
        let mut s_cols: Vec<(usize, &Column, usize)> = Vec::new();
        let mut classes: HashSet<usize> = HashSet::new();
        for p in &self.pairs {
            let (other, x_expr, s_expr) = if p.b == x && s.mask & 1 << p.a != 0 {
                (p.a, &p.b_expr, &p.a_expr)
            } else if p.a == x && s.mask & 1 << p.b != 0 {
                (p.b, &p.a_expr, &p.b_expr)
            } else {
                continue;
            };
            classes.insert(p.class);
            if let Expr::Column(c) = x_expr {
                x_cols.push((c, p.class));
            }
            if let Expr::Column(c) = s_expr {
                s_cols.push((other, c, p.class));
            }
        }
        let mut present = s.present.clone();
        let fx = present[x];
        let x_key = input.keys.iter().find(|k| k.iter().all(|c| x_cols.iter().any(|(x, _)| *x == c)));
        let s_key = (0..self.inputs.len()).filter(|t| s.mask & 1 << t != 0).find_map(|t| {
            let k = self.inputs[t]
                .keys
                .iter()
                .find(|k| k.iter().all(|c| s_cols.iter().any(|(i, s, _)| *i == t && *s == c)))?;
            Some((t, k))
        });
        let (mut rows, used): (f64, HashSet<usize>) = if classes.is_empty() {
            (s.rows * input.rows, HashSet::new())
        } else if let Some(k) = x_key {
            // At most one row of x for each row so far.
            let used = x_cols.iter().filter(|(c, _)| k.contains(c)).map(|(_, class)| *class).collect();
            (s.rows * fx, used)
        } else if let Some((t, k)) = s_key {
            // The rows of x whose key is still present, times the rows so far per key.
            let keys = (present[t] * self.inputs[t].domain).max(1.0);
            let used = s_cols.iter().filter(|(i, c, _)| *i == t && k.contains(c)).map(|(_, _, class)| *class).collect();
            (input.rows * present[t] * (s.rows / keys).max(1.0), used)
        } else {
            (s.rows.max(input.rows), classes.iter().take(1).copied().collect())
        };
        // Each further independent equality passes about half.
        rows *= 0.5f64.powi(classes.difference(&used).count() as i32);
        let mask = s.mask | 1 << x;
        for (m, sel) in &self.others {
            if m & 1 << x != 0 && m & !mask == 0 && m & s.mask != 0 {
                rows *= sel;
            }
        }
        let rows = rows.max(1.0);
        for (t, p) in present.iter_mut().enumerate() {
            if mask & 1 << t != 0 {
                *p = p.min(rows / self.inputs[t].domain);
            }
        }
        Joined { mask, rows, present }
    }

    /// The sum of the intermediate results' rows of joining in `order`.
    fn cost(&self, order: &[usize]) -> f64 {
        let mut s = self.start(order[0]);
        let mut cost = 0.0;
        for &x in &order[1..] {
            s = self.join(&s, x);
            cost += s.rows;
        }
        cost
    }

    /// The cheapest left-deep order and its cost (joining connected inputs while there are any).
    fn best(&self) -> Option<(Vec<usize>, f64)> {
        let n = self.inputs.len();
        let full = (1u32 << n) - 1;
        // Per subset: cost, the join, the order.
        let mut best: Vec<Option<(f64, Joined, Vec<usize>)>> = vec![None; 1 << n];
        for i in 0..n {
            best[1 << i] = Some((0.0, self.start(i), vec![i]));
        }
        for mask in 1..=full {
            let Some((cost, joined, order)) = best[mask as usize].clone() else { continue };
            let outside: Vec<usize> = (0..n).filter(|x| mask & 1 << x == 0).collect();
            let connected: Vec<usize> = outside.iter().copied().filter(|&x| self.connected(mask, x)).collect();
            let candidates = if connected.is_empty() { outside } else { connected };
            for x in candidates {
                let next = self.join(&joined, x);
                let c = cost + next.rows;
                let slot = &mut best[next.mask as usize];
                if slot.as_ref().is_none_or(|(b, _, _)| c < *b) {
                    let mut o = order.clone();
                    o.push(x);
                    *slot = Some((c, next, o));
                }
            }
        }
        best[full as usize].take().map(|(c, _, o)| (o, c))
    }
}

/// Rows of a plan and what it knows of keys, estimated.
fn estimate(plan: &LogicalPlan) -> Input {
    match plan {
        LogicalPlan::TableScan(scan) => scan_estimate(scan),
        LogicalPlan::Filter(f) => {
            let mut input = estimate(&f.input);
            let pushed: &[Expr] = match f.input.as_ref() {
                LogicalPlan::TableScan(s) => &s.filters,
                _ => &[],
            };
            let sel: f64 = datafusion::logical_expr::utils::split_conjunction(&f.predicate)
                .into_iter()
                .filter(|c| !pushed.contains(c))
                .map(selectivity)
                .product();
            input.rows = (input.rows * sel).max(1.0);
            input
        }
        LogicalPlan::Projection(p) => {
            let mut input = estimate(&p.input);
            let passed: Vec<&Column> =
                p.expr.iter().filter_map(|e| if let Expr::Column(c) = e { Some(c) } else { None }).collect();
            input.keys.retain(|k| k.iter().all(|c| passed.contains(&c)));
            input
        }
        LogicalPlan::SubqueryAlias(a) => {
            let mut input = estimate(&a.input);
            input.keys = input
                .keys
                .into_iter()
                .map(|k| k.into_iter().map(|c| Column::new(Some(a.alias.clone()), c.name)).collect())
                .collect();
            input
        }
        LogicalPlan::Aggregate(a) => {
            let input = estimate(&a.input);
            if a.group_expr.is_empty() {
                return Input { rows: 1.0, domain: 1.0, keys: vec![vec![]] };
            }
            let rows = (input.rows / 10.0).max(1.0);
            let plain = a.group_expr.iter().all(|e| matches!(e, Expr::Column(_)));
            let keys = if plain {
                vec![(0..a.group_expr.len()).map(|i| Column::from(a.schema.qualified_field(i))).collect()]
            } else {
                vec![]
            };
            Input { rows, domain: rows, keys }
        }
        LogicalPlan::Join(j) => {
            let (l, r) = (estimate(&j.left), estimate(&j.right));
            match j.join_type {
                // A semi join keeps at most the other side's rows (one per key it matches).
                JoinType::LeftSemi => Input { rows: (l.rows / 2.0).min(r.rows).max(1.0), ..l },
                JoinType::RightSemi => Input { rows: (r.rows / 2.0).min(l.rows).max(1.0), ..r },
                JoinType::LeftAnti => Input { rows: (l.rows / 2.0).max(1.0), ..l },
                JoinType::RightAnti => Input { rows: (r.rows / 2.0).max(1.0), ..r },
                JoinType::Left => l,
                JoinType::Right => r,
                _ => {
                    let rows = l.rows.max(r.rows);
                    Input { rows, domain: rows, keys: vec![] }
                }
            }
        }
        LogicalPlan::Limit(l) => {
            let mut input = estimate(&l.input);
            if let Ok(datafusion::logical_expr::FetchType::Literal(Some(n))) = l.get_fetch_type() {
                input.rows = input.rows.min(n as f64).max(1.0);
            }
            input
        }
        LogicalPlan::Distinct(d) => estimate(d.input()),
        _ => Input { rows: 1000.0, domain: 1000.0, keys: vec![] },
    }
}

fn scan_estimate(scan: &TableScan) -> Input {
    let table = source_as_provider(&scan.source).ok();
    let table = table.as_ref().and_then(|t| t.downcast_ref::<TernTable>());
    let Some(table) = table else { return Input { rows: 1000.0, domain: 1000.0, keys: vec![] } };
    let domain = table.row_count().unwrap_or(1000).max(1) as f64;
    let sel: f64 = scan.filters.iter().map(selectivity).product();
    let mut rows = (domain * sel).max(1.0);
    if let Some(n) = scan.fetch {
        rows = rows.min(n as f64).max(1.0);
    }
    let keys = table
        .unique_keys()
        .into_iter()
        .map(|k| k.into_iter().map(|name| Column::new(Some(scan.table_name.clone()), name)).collect())
        .collect();
    Input { rows, domain, keys }
}

/// The part of rows a condition passes, guessed from its form.
fn selectivity(e: &Expr) -> f64 {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => selectivity(left) * selectivity(right),
            Operator::Or => (selectivity(left) + selectivity(right)).min(1.0),
            Operator::Eq => 0.1,
            Operator::NotEq => 0.9,
            Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq => 1.0 / 3.0,
            _ => 0.5,
        },
        Expr::Between(b) if b.negated => 0.75,
        Expr::Between(_) => 0.25,
        Expr::Like(l) if l.negated => 0.9,
        Expr::Like(_) => 0.1,
        Expr::InList(l) if l.negated => 0.9,
        Expr::InList(l) => (0.1 * l.list.len() as f64).min(0.5),
        Expr::IsNotNull(_) => 1.0,
        Expr::IsNull(_) => 0.1,
        Expr::Not(inner) => 1.0 - selectivity(inner).min(0.9),
        _ => 0.5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(rows: f64, domain: f64, key: Option<&str>) -> Input {
        Input { rows, domain, keys: key.map(|k| vec![vec![Column::from_qualified_name(k)]]).unwrap_or_default() }
    }

    fn pair(a: usize, a_col: &str, b: usize, b_col: &str, class: usize) -> Pair {
        let col = |n: &str| Expr::Column(Column::from_qualified_name(n));
        Pair { a, b, a_expr: col(a_col), b_expr: col(b_col), class }
    }

    /// TPC-H Q5's shape at scale factor 1, in its FROM order: customer, orders, lineitem,
    /// supplier, nation, region (one region of five kept, a year of seven of orders).
    #[test]
    fn q5_starts_from_the_region_and_reads_lineitem_by_order() {
        let inputs = vec![
            input(150_000.0, 150_000.0, Some("customer.c_custkey")),
            input(1_500_000.0 / 7.0, 1_500_000.0, Some("orders.o_orderkey")),
            input(6_000_000.0, 6_000_000.0, None),
            input(10_000.0, 10_000.0, Some("supplier.s_suppkey")),
            input(25.0, 25.0, Some("nation.n_nationkey")),
            input(1.0, 5.0, Some("region.r_regionkey")),
        ];
        let pairs = vec![
            pair(0, "customer.c_custkey", 1, "orders.o_custkey", 0),
            pair(2, "lineitem.l_orderkey", 1, "orders.o_orderkey", 1),
            pair(2, "lineitem.l_suppkey", 3, "supplier.s_suppkey", 2),
            pair(0, "customer.c_nationkey", 3, "supplier.s_nationkey", 3),
            pair(3, "supplier.s_nationkey", 4, "nation.n_nationkey", 3),
            pair(4, "nation.n_regionkey", 5, "region.r_regionkey", 5),
            // Implied by the two of class 3.
            pair(0, "customer.c_nationkey", 4, "nation.n_nationkey", 3),
        ];
        let model = Model { inputs, pairs, others: vec![] };
        let (order, cost) = model.best().expect("an order");
        // Region, nation, then the nation's customers and their orders before lineitem.
        let pos = |i: usize| order.iter().position(|&x| x == i).expect("every input");
        assert!(pos(5) <= 1 && pos(4) <= 1, "{order:?}");
        assert!(pos(0) < pos(2) && pos(1) < pos(2), "{order:?}");
        let from_order = model.cost(&[0, 1, 2, 3, 4, 5]);
        assert!(cost < from_order * BETTER, "{cost} against {from_order}");
        // Orders were 1/7 and customers 1/5: lineitem rows joined ~ 6 M / 35.
        let mut s = model.start(order[0]);
        for &x in &order[1..] {
            s = model.join(&s, x);
            if x == 2 {
                assert!(s.rows < 300_000.0, "{} rows at lineitem, {order:?}", s.rows);
            }
        }
    }

    /// A chain joined on unique keys stays as it is when FROM order is already the best.
    #[test]
    fn a_good_order_is_kept() {
        let inputs = vec![
            input(10.0, 1000.0, Some("a.id")),
            input(1000.0, 1000.0, Some("b.id")),
            input(100_000.0, 100_000.0, Some("c.id")),
        ];
        let pairs = vec![pair(0, "a.id", 1, "b.a_id", 0), pair(1, "b.id", 2, "c.b_id", 1)];
        let model = Model { inputs, pairs, others: vec![] };
        let (order, cost) = model.best().expect("an order");
        assert_eq!(order[0], 0, "{order:?}");
        assert!(cost >= model.cost(&[0, 1, 2]) * BETTER);
    }

    #[test]
    fn selectivity_guesses() {
        use datafusion::logical_expr::{col, lit};
        let range = col("d").gt_eq(lit(1)).and(col("d").lt(lit(2)));
        assert!((selectivity(&range) - 1.0 / 9.0).abs() < 1e-9);
        assert_eq!(selectivity(&col("x").is_not_null()), 1.0);
        assert!(selectivity(&col("a").eq(lit(1)).or(col("b").eq(lit(2)))) < 0.25);
    }
}
