//! The engine's scan of a Tern table: one output partition per table partition, the projection
//! and simple filters pushed to the data node, a row-count estimate for the join planner, and
//! the keys of a hash join's build side used to read only the matching rows.
//!
//! A hash join pushes a *dynamic filter* into the scan on its probe side (DataFusion's join
//! dynamic filtering): once the build side is hashed, the filter holds its key bounds and, when
//! the keys are few, their list. The scan waits for that filter before it reads, and when the
//! list names a column it can look up by — the table's one-column primary key (batched key
//! reads) or the first column of an ordered index (one multi-range index scan per partition) —
//! it reads those keys only; otherwise the bounds narrow the pushed filter. This is the
//! index-nested-loop join of MySQL and NDB (batched key access) for the engine's plans: a join
//! from a few rows of one table into a big one no longer ships the big one. The join still
//! matches every row, so what the lookup reads may be a superset.

use super::arrow::batch_of;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result, ScalarValue, Statistics, internal_err};
use datafusion::config::ConfigOptions;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{
    BinaryExpr, CaseExpr, Column, DynamicFilterPhysicalExpr, InListExpr, Literal,
};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coop::{CooperativeExec, make_cooperative};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType, SchedulingType};
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterPushdownPhase, FilterPushdownPropagation, PushedDown,
};
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    ReplaceChildrenOptions,
};
use futures::{StreamExt, TryStreamExt};
use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;
use tern_client::{AbortOption, Client, Exec, KeyRange, OpResult, SCAN_RANGES_MAX, ScanSpec, TableHandle};
use tern_types::filter::{Filter, KeyBloom};
use tern_types::{ColumnType, Value};

/// Rows per scan batch the engine asks for.
const SCAN_BATCH_ROWS: u32 = 2048;

/// Key reads per transaction of a keyed lookup.
const KEY_READS_PER_BATCH: usize = 1000;

/// Keys of a join filter, at most, that a scan reads by key (primary key reads or index
/// ranges); with more, or more than one per `KEYED_FRACTION` rows of the table, it scans with
/// the keys as a key-set filter instead.
const JOIN_KEYS_READ_MAX: usize = 1 << 16;

/// See `JOIN_KEYS_READ_MAX`: reading by key beats a filtered scan only for a small part of the
/// table (a key read or index descent costs about as much as scanning this many rows).
const KEYED_FRACTION: u64 = 8;

/// Index ranges per multi-range scan request (the data node's limit).
const RANGES_PER_SCAN: usize = SCAN_RANGES_MAX;

/// How long a probe-side scan waits for its join's filter at most before it reads the whole
/// partition (a hash join completes its filter before it reads its probe side, so the wait is
/// nil in every plan DataFusion makes; this only bounds a surprise).
const DYNAMIC_FILTER_WAIT: Duration = Duration::from_secs(10);

/// A range of an ordered index that holds every row a scan's filter can pass.
#[derive(Debug, Clone)]
pub struct IndexRange {
    pub index: u32,
    pub lo: tern_client::Bound,
    pub hi: tern_client::Bound,
    /// The part of the table the range holds, estimated.
    pub fraction: f64,
}

/// Keeps, in every Tern scan, only the dynamic filters of hash joins (dropping, say, a TopK's
/// threshold filter): a join's filter is complete before its probe side is read, so the scan may
/// wait for it, whereas a TopK's filter tightens while the rows the scan sends arrive.
#[derive(Debug)]
pub struct JoinKeysRule;

impl PhysicalOptimizerRule for JoinKeysRule {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let mut joins = HashSet::new();
        plan.apply(|node| {
            if node.is::<HashJoinExec>() {
                node.apply_expressions(&mut |e| {
                    if e.is::<DynamicFilterPhysicalExpr>()
                        && let Some(id) = e.expression_id()
                    {
                        joins.insert(id);
                    }
                    Ok(TreeNodeRecursion::Continue)
                })?;
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        plan.transform_up(|node| {
            let Some(scan) = node.downcast_ref::<TernScanExec>() else { return Ok(Transformed::no(node)) };
            let kept: Vec<_> = scan
                .dynamic
                .iter()
                .filter(|d| d.expression_id().is_some_and(|id| joins.contains(&id)))
                .cloned()
                .collect();
            if kept.len() == scan.dynamic.len() {
                return Ok(Transformed::no(node));
            }
            let mut s = scan.clone();
            s.dynamic = kept;
            Ok(Transformed::yes(Arc::new(s) as Arc<dyn ExecutionPlan>))
        })
        .data()
    }

    fn name(&self) -> &str {
        "tern_join_keys"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Wraps every join in a `CooperativeExec`: a join whose input is all in memory (a cross join of
/// small tables read once) produces batch after batch without ever waiting, so without a yield
/// point its statement could not be stopped by KILL or its deadline (the task's abort waits for
/// a yield) and would hold one of the engine's threads until done — found when `tern-mysql`'s
/// limits tests hung after a killed 4-way cross join once row counts changed the join's sides.
#[derive(Debug)]
pub struct YieldingJoinsRule;

impl PhysicalOptimizerRule for YieldingJoinsRule {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        use datafusion::physical_plan::joins::{
            CrossJoinExec, NestedLoopJoinExec, SortMergeJoinExec, SymmetricHashJoinExec,
        };
        plan.transform_up(|node| {
            let join = node.is::<HashJoinExec>()
                || node.is::<CrossJoinExec>()
                || node.is::<NestedLoopJoinExec>()
                || node.is::<SortMergeJoinExec>()
                || node.is::<SymmetricHashJoinExec>();
            if join {
                Ok(Transformed::yes(Arc::new(CooperativeExec::new(node)) as Arc<dyn ExecutionPlan>))
            } else {
                Ok(Transformed::no(node))
            }
        })
        .data()
    }

    fn name(&self) -> &str {
        "tern_yielding_joins"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// A scan of one Tern table.
#[derive(Clone)]
pub struct TernScanExec {
    client: Client,
    handle: TableHandle,
    /// The output: the projected columns.
    schema: SchemaRef,
    /// Table columns read, one per output column (or the first key column when none is).
    read: Vec<u16>,
    types: Vec<ColumnType>,
    /// False when no column is output (COUNT(*)): only the number of rows matters.
    keep: bool,
    filter: Filter,
    limit: Option<usize>,
    /// Rows of the table, estimated (the data node's count).
    rows: Option<u64>,
    /// Dynamic filters pushed by hash joins above (`DynamicFilterPhysicalExpr`s; `JoinKeysRule`
    /// drops those of other operators).
    dynamic: Vec<Arc<dyn PhysicalExpr>>,
    props: Arc<PlanProperties>,
    /// Rows sent, and keys looked up by key reads and by index ranges (EXPLAIN ANALYZE).
    metrics: ExecutionPlanMetricsSet,
    /// What the join filters allow, worked out once for all partitions of an execution.
    keyed: Arc<OnceLock<Option<Keyed>>>,
    /// The range of an ordered index that holds every row the filter passes, when reading it
    /// beats a whole scan (`TernTable::narrow_range`).
    pub range: Option<IndexRange>,
}

impl fmt::Debug for TernScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TernScanExec({}.{})", self.handle.table.database, self.handle.table.name)
    }
}

impl TernScanExec {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        handle: TableHandle,
        schema: SchemaRef,
        read: Vec<u16>,
        keep: bool,
        filter: Filter,
        limit: Option<usize>,
        rows: Option<u64>,
    ) -> TernScanExec {
        let types = read.iter().map(|&c| handle.table.columns[c as usize].ty).collect();
        let parts = handle.table.partition_count.max(1) as usize;
        let props = Arc::new(
            PlanProperties::new(
                EquivalenceProperties::new(schema.clone()),
                Partitioning::UnknownPartitioning(parts),
                EmissionType::Incremental,
                Boundedness::Bounded,
            )
            .with_scheduling_type(SchedulingType::Cooperative),
        );
        TernScanExec {
            client,
            handle,
            schema,
            read,
            types,
            keep,
            filter,
            limit,
            rows,
            dynamic: Vec::new(),
            props,
            metrics: ExecutionPlanMetricsSet::new(),
            keyed: Arc::default(),
            range: None,
        }
    }

    fn partitions(&self) -> u32 {
        self.handle.table.partition_count.max(1)
    }

    /// What partition `p` reads, once the join filters are known.
    async fn access(&self, p: u32) -> Access {
        let mut exprs = Vec::new();
        for d in &self.dynamic {
            let Some(d) = d.downcast_ref::<DynamicFilterPhysicalExpr>() else { continue };
            if tokio::time::timeout(DYNAMIC_FILTER_WAIT, d.wait_complete()).await.is_err() {
                continue;
            }
            exprs.extend(d.current());
        }
        let keyed = self.keyed.get_or_init(|| {
            let mut sets = None;
            exprs.iter().find_map(|e| self.keyed(e, &mut sets)).or(sets)
        });
        match keyed {
            None => Access::Scans(VecDeque::from([self.ranged(self.spec(p, self.filter.clone()))])),
            Some(Keyed::Set(set, _)) => {
                let filter = match &self.filter {
                    Filter::True => set.clone(),
                    Filter::And(fs) => Filter::And(fs.iter().cloned().chain([set.clone()]).collect()),
                    f => Filter::And(vec![f.clone(), set.clone()]),
                };
                Access::Scans(VecDeque::from([self.ranged(self.spec(p, filter))]))
            }
            Some(Keyed::Empty) => Access::Empty,
            Some(Keyed::Keys(values)) => {
                let keys: Vec<Vec<Value>> = values
                    .iter()
                    .map(|v| vec![v.clone()])
                    .filter(|k| self.handle.partition_of(k).is_ok_and(|q| q == p))
                    .collect();
                Access::Keys(keys.chunks(KEY_READS_PER_BATCH).map(<[_]>::to_vec).collect())
            }
            Some(Keyed::Ranges(index, ranges)) => Access::Scans(
                ranges
                    .chunks(RANGES_PER_SCAN)
                    .map(|chunk| {
                        let mut spec = self.spec(p, self.filter.clone());
                        spec.index = Some(*index);
                        spec.ranges = chunk.to_vec();
                        spec.limit = 0;
                        spec
                    })
                    .collect(),
            ),
        }
    }

    /// A whole-partition scan narrowed to the static index range, if there is one.
    fn ranged(&self, mut spec: ScanSpec) -> ScanSpec {
        if let Some(r) = &self.range {
            spec.index = Some(r.index);
            spec.lo = Some(r.lo.clone());
            spec.hi = Some(r.hi.clone());
        }
        spec
    }

    fn spec(&self, p: u32, filter: Filter) -> ScanSpec {
        let mut spec = ScanSpec::table(self.handle.id());
        spec.projection = Some(self.read.clone());
        spec.limit = if filter == Filter::True { self.limit.unwrap_or(0) as u64 } else { 0 };
        spec.filter = filter;
        spec.batch_rows = SCAN_BATCH_ROWS;
        spec.partition = Some(p);
        spec
    }

    /// How the keys of one join filter read the table, when it lists them for a column the
    /// table can look up by. Otherwise the first key set of an integer or DATE column is left in
    /// `set` (when none is there yet), for a scan with it as a key-set filter
    /// (`Filter::Bloom`): the data node then sends only the rows whose key may join (TPC-H Q5:
    /// lineitem's rows of a year's orders). (The filter's key bounds alone are not used to narrow
    /// a full scan: the keys of a join's build side usually span the probe side's whole range,
    /// and each bound costs a comparison per row in the data node's thread; measured on TPC-H
    /// Q3, Q18, Q21, whose key columns the prepared filter reads through the slow path.)
    fn keyed(&self, expr: &Arc<dyn PhysicalExpr>, set: &mut Option<Keyed>) -> Option<Keyed> {
        let t = &self.handle.table;
        if !self.keep {
            return None;
        }
        for (c, &col) in self.read.iter().enumerate() {
            let ty = t.columns[col as usize].ty;
            if matches!(ty, ColumnType::Float | ColumnType::Double) {
                continue;
            }
            let Keys::Set(values) = keys_of(expr, c) else { continue };
            let Some(mut values) = values.iter().map(tern_value).collect::<Option<Vec<Value>>>() else { continue };
            if values.is_empty() {
                return Some(Keyed::Empty);
            }
            if let Some(k) = self.read_by(col, &mut values) {
                return Some(k);
            }
            if set.is_none()
                && (ty.is_integer() || ty == ColumnType::Date)
                && let Some(keys) = values.iter().map(KeyBloom::key_of).collect::<Option<Vec<i64>>>()
            {
                let n = keys.len();
                *set = Some(Keyed::Set(Filter::Bloom { col, set: KeyBloom::new(n, keys) }, n));
            }
        }
        None
    }

    /// Reading the rows whose column `col` has one of `values` by key, when that beats a scan.
    fn read_by(&self, col: u16, values: &mut Vec<Value>) -> Option<Keyed> {
        let t = &self.handle.table;
        // Keys that would read much of the table one by one: scan it (with the key set).
        if values.len() > JOIN_KEYS_READ_MAX
            || self.rows.is_some_and(|n| (values.len() as u64).saturating_mul(KEYED_FRACTION) > n)
        {
            return None;
        }
        // Key reads when the column is the whole primary key.
        if t.primary_key == [col] {
            values.sort_by(cmp_values);
            values.dedup();
            return Some(Keyed::Keys(std::mem::take(values)));
        }
        // A multi-range scan of an ordered index led by the column.
        let index = t.indexes.iter().find(|i| i.columns.first() == Some(&col))?;
        let mut ranges = values
            .iter()
            .map(|v| {
                let b = self.handle.index_bound(index, std::slice::from_ref(v), true).ok()?;
                Some((Some(b.clone()), Some(b)))
            })
            .collect::<Option<Vec<KeyRange>>>()?;
        ranges.sort_by(|a, b| a.0.as_ref().map(|x| &x.key).cmp(&b.0.as_ref().map(|x| &x.key)));
        ranges.dedup();
        Some(Keyed::Ranges(index.id, ranges))
    }
}

/// What a join filter's keys allow a scan to read.
enum Keyed {
    /// Rows whose key is in this set (a `Filter::Bloom` of so many keys), by scanning.
    Set(Filter, usize),
    /// Nothing can join.
    Empty,
    /// These primary keys (sorted, distinct).
    Keys(Vec<Value>),
    /// These ranges of an ordered index (ascending, distinct).
    Ranges(u32, Vec<KeyRange>),
}

/// How a partition is read.
enum Access {
    /// Nothing can join.
    Empty,
    /// Scans, one after the other.
    Scans(VecDeque<ScanSpec>),
    /// Primary keys read in batches.
    Keys(VecDeque<Vec<Vec<Value>>>),
}

impl DisplayAs for TernScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "TernScan: {}.{} partitions={}",
            self.handle.table.database,
            self.handle.table.name,
            self.partitions()
        )?;
        if self.filter != Filter::True {
            write!(f, " filter={:?}", self.filter)?;
        }
        if let Some(r) = &self.range {
            let name = self.handle.table.indexes.iter().find(|i| i.id == r.index).map_or("?", |i| i.name.as_str());
            write!(f, " index_range={name} (~{:.1}% of rows)", r.fraction * 100.0)?;
        }
        if !self.dynamic.is_empty() {
            // The filters' contents (up to 262,144 keys) are not shown: only that the scan reads
            // by the keys of that many hash joins when their lists allow.
            write!(f, " join_keys_from={}", self.dynamic.len())?;
        }
        Ok(())
    }
}

impl ExecutionPlan for TernScanExec {
    fn name(&self) -> &'static str {
        "TernScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        // The join finds its dynamic filter's consumers here.
        for d in &self.dynamic {
            if f(d)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() { Ok(self) } else { internal_err!("a Tern scan has no children") }
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(children, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))
    }

    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        // A join that runs again (a recursive CTE's step) drops its filter and makes a new one
        // this scan does not see: read everything rather than the old keys.
        let mut s = (*self).clone();
        s.dynamic.clear();
        s.keyed = Arc::default();
        Ok(Arc::new(s))
    }

    fn handle_child_pushdown_result(
        &self,
        phase: FilterPushdownPhase,
        result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        // Every filter stays where it is (`No`): the join and the filters above still check
        // every row. The join's dynamic filters are kept to choose what to read.
        let answers = vec![PushedDown::No; result.parent_filters.len()];
        let mut prop = FilterPushdownPropagation::with_parent_pushdown_result(answers);
        if phase != FilterPushdownPhase::Post {
            return Ok(prop);
        }
        let dynamic: Vec<Arc<dyn PhysicalExpr>> = result
            .parent_filters
            .iter()
            .map(|f| f.filter.clone())
            .filter(|f| f.downcast_ref::<DynamicFilterPhysicalExpr>().is_some())
            .collect();
        if !dynamic.is_empty() {
            let mut s = self.clone();
            s.dynamic.extend(dynamic);
            prop = prop.with_updated_node(Arc::new(s) as Arc<dyn ExecutionPlan>);
        }
        Ok(prop)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn statistics_from_inputs(&self, _input: &[Arc<Statistics>], args: &StatisticsArgs) -> Result<Arc<Statistics>> {
        let mut s = Statistics::new_unknown(&self.schema);
        if let Some(n) = self.rows {
            let n = match args.partition() {
                Some(_) => n / self.partitions() as u64,
                None => n,
            };
            s.num_rows = Precision::Inexact(n as usize);
        }
        Ok(Arc::new(s))
    }

    fn execute(&self, partition: usize, _ctx: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        if partition >= self.partitions() as usize {
            return internal_err!("Tern scan partition {partition} of {}", self.partitions());
        }
        let this = self.clone();
        let schema = self.schema.clone();
        let output = BaselineMetrics::new(&self.metrics, partition);
        let key_reads = MetricBuilder::new(&self.metrics).counter("key_reads", partition);
        let index_ranges = MetricBuilder::new(&self.metrics).counter("index_ranges", partition);
        let key_set = MetricBuilder::new(&self.metrics).counter("key_set", partition);
        let stream = futures::stream::once(async move {
            let access = this.access(partition as u32).await;
            if let Some(Some(Keyed::Set(_, n))) = this.keyed.get() {
                key_set.add(*n);
            }
            match &access {
                Access::Keys(chunks) => key_reads.add(chunks.iter().map(Vec::len).sum()),
                Access::Scans(specs) => index_ranges.add(specs.iter().map(|s| s.ranges.len()).sum()),
                Access::Empty => {}
            }
            Ok::<_, DataFusionError>(this.read(access))
        })
        .try_flatten()
        .inspect_ok(move |b: &RecordBatch| output.record_output(b.num_rows()));
        // Cooperative (tokio's budget): a pipeline whose input is always ready still yields, so
        // KILL and deadlines can stop it and other statements get the engine's threads.
        Ok(make_cooperative(Box::pin(RecordBatchStreamAdapter::new(schema, stream))))
    }
}

/// The state of a partition's reading.
enum Reading {
    Scans(VecDeque<ScanSpec>, Option<Box<tern_client::Scanner>>),
    Keys(VecDeque<Vec<Vec<Value>>>),
}

impl TernScanExec {
    /// The batches `access` reads.
    fn read(self, access: Access) -> futures::stream::BoxStream<'static, Result<RecordBatch>> {
        let state = match access {
            Access::Empty => return futures::stream::empty().boxed(),
            Access::Scans(specs) => Reading::Scans(specs, None),
            Access::Keys(keys) => Reading::Keys(keys),
        };
        futures::stream::unfold((self, Some(state)), |(this, state)| async move {
            let mut state = state?;
            loop {
                let rows = match &mut state {
                    Reading::Scans(specs, scanner) => {
                        let s = match scanner {
                            Some(s) => s,
                            None => match specs.pop_front() {
                                Some(spec) => scanner.insert(Box::new(this.client.scan(spec))),
                                None => return None,
                            },
                        };
                        match s.next_batch().await {
                            Ok(Some(rows)) => rows,
                            Ok(None) => {
                                *scanner = None;
                                continue;
                            }
                            Err(e) => return Some((Err(DataFusionError::External(Box::new(e))), (this, None))),
                        }
                    }
                    Reading::Keys(chunks) => {
                        let keys = chunks.pop_front()?;
                        match this.read_keys(keys).await {
                            Ok(rows) => rows,
                            Err(e) => return Some((Err(DataFusionError::External(Box::new(e))), (this, None))),
                        }
                    }
                };
                if rows.is_empty() {
                    continue;
                }
                let b = batch_of(&rows, &this.types, this.keep, &this.schema).map_err(DataFusionError::Execution);
                return Some((b, (this, Some(state))));
            }
        })
        .boxed()
    }

    /// The rows with these primary keys (those that exist).
    async fn read_keys(&self, keys: Vec<Vec<Value>>) -> tern_client::Result<Vec<Vec<u8>>> {
        let ops =
            keys.into_iter().filter_map(|k| self.handle.read_columns_owned(k, &self.read).ok()).collect::<Vec<_>>();
        let mut txn = self.client.begin();
        let results = txn.execute_with(ops, Exec::Commit, AbortOption::IgnoreError).await?;
        let mut rows = Vec::with_capacity(results.len());
        for r in results {
            match r {
                OpResult::Row(b) => rows.push(b),
                OpResult::Error(e) => return Err(e),
                _ => {}
            }
        }
        Ok(rows)
    }
}

/// What a join filter says about the values of output column `col` in the rows it keeps.
#[derive(Debug, Clone, PartialEq)]
enum Keys {
    /// Nothing is known.
    All,
    /// The value is one of these (none: no row passes).
    Set(Vec<ScalarValue>),
    /// The value lies between these (inclusive; an open end is `None`).
    Range(Option<ScalarValue>, Option<ScalarValue>),
}

/// A superset of the values of column `col` for which `e` can hold: the IN list, bounds and
/// per-partition CASE of DataFusion's join filters, combined through AND and OR.
fn keys_of(e: &Arc<dyn PhysicalExpr>, col: usize) -> Keys {
    let is_col = |x: &Arc<dyn PhysicalExpr>| x.downcast_ref::<Column>().is_some_and(|c| c.index() == col);
    let lit = |x: &Arc<dyn PhysicalExpr>| x.downcast_ref::<Literal>().map(|l| l.value().clone());
    if let Some(l) = e.downcast_ref::<Literal>() {
        return match l.value() {
            ScalarValue::Boolean(Some(false)) | ScalarValue::Boolean(None) => Keys::Set(Vec::new()),
            _ => Keys::All,
        };
    }
    if let Some(d) = e.downcast_ref::<DynamicFilterPhysicalExpr>() {
        return d.current().map_or(Keys::All, |inner| keys_of(&inner, col));
    }
    if let Some(l) = e.downcast_ref::<InListExpr>() {
        if l.negated() {
            return Keys::All;
        }
        // The list's items are the column's values, or (a join on several columns) structs of
        // the key columns' values, one field of which is the column's.
        let field = if is_col(l.expr()) {
            None
        } else if let Some(f) = l.expr().downcast_ref::<ScalarFunctionExpr>()
            && f.name() == "struct"
            && let Some(i) = f.args().iter().position(is_col)
        {
            Some(i)
        } else {
            return Keys::All;
        };
        let values: Option<Vec<ScalarValue>> = l
            .list()
            .iter()
            .map(|x| match (lit(x)?, field) {
                (v, None) => Some(v),
                (ScalarValue::Struct(a), Some(i))
                    if i < a.num_columns() && datafusion::arrow::array::Array::len(a.as_ref()) == 1 =>
                {
                    ScalarValue::try_from_array(a.column(i), 0).ok()
                }
                _ => None,
            })
            .collect();
        let Some(values) = values else { return Keys::All };
        let mut seen = HashSet::new();
        return Keys::Set(values.into_iter().filter(|v| !v.is_null() && seen.insert(v.clone())).collect());
    }
    if let Some(c) = e.downcast_ref::<CaseExpr>() {
        let mut k = match c.else_expr() {
            Some(x) => keys_of(x, col),
            None => Keys::Set(Vec::new()),
        };
        for (_, then) in c.when_then_expr() {
            k = union(k, keys_of(then, col));
        }
        return k;
    }
    if let Some(b) = e.downcast_ref::<BinaryExpr>() {
        let (l, r) = (b.left(), b.right());
        return match b.op() {
            Operator::And => intersect(keys_of(l, col), keys_of(r, col)),
            Operator::Or => union(keys_of(l, col), keys_of(r, col)),
            op => {
                let (op, v) = match (is_col(l), lit(r), lit(l), is_col(r)) {
                    (true, Some(v), _, _) => (*op, v),
                    (_, _, Some(v), true) => (op.swap().unwrap_or(*op), v),
                    _ => return Keys::All,
                };
                if v.is_null() {
                    return Keys::All;
                }
                match op {
                    Operator::Eq => Keys::Set(vec![v]),
                    Operator::Gt | Operator::GtEq => Keys::Range(Some(v), None),
                    Operator::Lt | Operator::LtEq => Keys::Range(None, Some(v)),
                    _ => Keys::All,
                }
            }
        };
    }
    Keys::All
}

fn intersect(a: Keys, b: Keys) -> Keys {
    match (a, b) {
        (Keys::All, k) | (k, Keys::All) => k,
        (Keys::Set(x), Keys::Set(y)) => Keys::Set(if x.len() <= y.len() { x } else { y }),
        (Keys::Set(x), Keys::Range(..)) | (Keys::Range(..), Keys::Set(x)) => Keys::Set(x),
        (Keys::Range(l1, h1), Keys::Range(l2, h2)) => {
            let lo = pick(l1, l2, std::cmp::Ordering::Greater);
            let hi = pick(h1, h2, std::cmp::Ordering::Less);
            Keys::Range(lo, hi)
        }
    }
}

fn union(a: Keys, b: Keys) -> Keys {
    match (a, b) {
        (Keys::All, _) | (_, Keys::All) => Keys::All,
        (Keys::Set(mut x), Keys::Set(y)) => {
            x.extend(y);
            Keys::Set(x)
        }
        (Keys::Set(x), Keys::Range(lo, hi)) | (Keys::Range(lo, hi), Keys::Set(x)) => {
            if x.is_empty() {
                return Keys::Range(lo, hi);
            }
            let (mut lo, mut hi) = (lo, hi);
            for v in x {
                lo = lo.and_then(|l| pick(Some(l), Some(v.clone()), std::cmp::Ordering::Less));
                hi = hi.and_then(|h| pick(Some(h), Some(v), std::cmp::Ordering::Greater));
            }
            Keys::Range(lo, hi)
        }
        (Keys::Range(l1, h1), Keys::Range(l2, h2)) => {
            let lo = match (l1, l2) {
                (Some(a), Some(b)) => pick(Some(a), Some(b), std::cmp::Ordering::Less),
                _ => None,
            };
            let hi = match (h1, h2) {
                (Some(a), Some(b)) => pick(Some(a), Some(b), std::cmp::Ordering::Greater),
                _ => None,
            };
            Keys::Range(lo, hi)
        }
    }
}

/// Of two bounds, the one ordered `want` against the other (the other when incomparable or
/// one is missing: for intersections the present one, see callers).
fn pick(a: Option<ScalarValue>, b: Option<ScalarValue>, want: std::cmp::Ordering) -> Option<ScalarValue> {
    match (a, b) {
        (Some(a), Some(b)) => match a.partial_cmp(&b) {
            Some(o) if o == want => Some(a),
            Some(_) => Some(b),
            None => None,
        },
        (a, None) => a,
        (None, b) => b,
    }
}

fn cmp_values(a: &Value, b: &Value) -> std::cmp::Ordering {
    a.cmp_sql(b).unwrap_or(std::cmp::Ordering::Equal)
}

/// A non-NULL constant as a Tern value.
pub(super) fn tern_value(s: &ScalarValue) -> Option<Value> {
    Some(match s {
        ScalarValue::Int8(Some(v)) => Value::Int(*v as i64),
        ScalarValue::Int16(Some(v)) => Value::Int(*v as i64),
        ScalarValue::Int32(Some(v)) => Value::Int(*v as i64),
        ScalarValue::Int64(Some(v)) => Value::Int(*v),
        ScalarValue::UInt8(Some(v)) => Value::UInt(*v as u64),
        ScalarValue::UInt16(Some(v)) => Value::UInt(*v as u64),
        ScalarValue::UInt32(Some(v)) => Value::UInt(*v as u64),
        ScalarValue::UInt64(Some(v)) => Value::UInt(*v),
        ScalarValue::Float32(Some(v)) => Value::Float(*v),
        ScalarValue::Float64(Some(v)) => Value::Double(*v),
        ScalarValue::Decimal128(Some(v), _, s) if *s >= 0 => Value::Decimal { v: *v, scale: *s as u8 },
        ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)) => {
            Value::Bytes(s.as_bytes().to_vec())
        }
        ScalarValue::Binary(Some(b)) | ScalarValue::LargeBinary(Some(b)) | ScalarValue::BinaryView(Some(b)) => {
            Value::Bytes(b.clone())
        }
        ScalarValue::Date32(Some(d)) => Value::Date(*d),
        ScalarValue::TimestampMicrosecond(Some(us), None) => Value::DateTime(*us),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_expr::expressions::lit;

    fn col(i: usize) -> Arc<dyn PhysicalExpr> {
        Arc::new(Column::new(&format!("c{i}"), i))
    }

    fn bin(l: Arc<dyn PhysicalExpr>, op: Operator, r: Arc<dyn PhysicalExpr>) -> Arc<dyn PhysicalExpr> {
        Arc::new(BinaryExpr::new(l, op, r))
    }

    fn schema() -> datafusion::arrow::datatypes::Schema {
        use datafusion::arrow::datatypes::{DataType, Field};
        let f = |n: &str, t| Field::new(n, t, true);
        datafusion::arrow::datatypes::Schema::new(vec![
            f("c0", DataType::UInt64),
            f("c1", DataType::Int32),
            f("c2", DataType::Int32),
        ])
    }

    fn in_list_of(c: usize, v: &[i32], negated: bool) -> Arc<dyn PhysicalExpr> {
        let list = v.iter().map(|&x| lit(x)).collect();
        Arc::new(InListExpr::try_new(col(c), list, negated, &schema()).unwrap())
    }

    fn in_list(c: usize, v: &[i32]) -> Arc<dyn PhysicalExpr> {
        in_list_of(c, v, false)
    }

    fn ints(v: &[i32]) -> Keys {
        Keys::Set(v.iter().map(|&x| ScalarValue::Int32(Some(x))).collect())
    }

    #[test]
    fn join_filters_give_key_sets_and_ranges() {
        // CollectLeft: bounds AND the list.
        let bounds = bin(bin(col(1), Operator::GtEq, lit(3)), Operator::And, bin(col(1), Operator::LtEq, lit(9)));
        let f = bin(bounds.clone(), Operator::And, in_list(1, &[3, 9, 5]));
        assert_eq!(keys_of(&f, 1), ints(&[3, 9, 5]));
        // Another column: nothing known.
        assert_eq!(keys_of(&f, 0), Keys::All);
        // Bounds alone.
        let three = Some(ScalarValue::Int32(Some(3)));
        let nine = Some(ScalarValue::Int32(Some(9)));
        assert_eq!(keys_of(&bounds, 1), Keys::Range(three.clone(), nine.clone()));
        // Literal on the left is mirrored.
        assert_eq!(
            keys_of(&bin(lit(4), Operator::Gt, col(1)), 1),
            Keys::Range(None, Some(ScalarValue::Int32(Some(4))))
        );
        // Partitioned: CASE over partitions unions the branches; an empty build side is `false`.
        let case: Arc<dyn PhysicalExpr> = Arc::new(
            CaseExpr::try_new(
                Some(col(0)),
                vec![(lit(0u64), in_list(1, &[1, 2])), (lit(1u64), in_list(1, &[7]))],
                Some(lit(false)),
            )
            .unwrap(),
        );
        assert_eq!(keys_of(&case, 1), ints(&[1, 2, 7]));
        assert_eq!(keys_of(&lit(false), 1), ints(&[]));
        // A branch without a list widens to a range, and an unknown one to everything.
        let wide = bin(in_list(1, &[5]), Operator::Or, bounds.clone());
        assert_eq!(keys_of(&wide, 1), Keys::Range(three, nine));
        let unknown = bin(in_list(1, &[5]), Operator::Or, bin(col(2), Operator::Eq, lit(1)));
        assert_eq!(keys_of(&unknown, 1), Keys::All);
        // A negated list says nothing.
        let not_in = in_list_of(1, &[1], true);
        assert_eq!(keys_of(&not_in, 1), Keys::All);
    }
}
