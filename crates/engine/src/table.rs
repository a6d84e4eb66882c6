//! Tern's tables as the engine's: a catalog whose schemas are Tern databases, tables whose scans
//! are Tern scans (`scan::TernScanExec`: one stream per partition, so partitions are read in
//! parallel), with the projection, simple filters and (unfiltered) limits pushed to the data node.

use super::arrow::schema_of;
use super::scan::{IndexRange, TernScanExec, tern_value};
use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{CatalogProvider, SchemaProvider, Session, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use tern_client::{Client, TableHandle};
use tern_types::filter::{CmpOp, Filter};
use tern_types::{ColumnType, Value};

/// Every Tern database as a schema.
pub struct TernCatalog {
    pub client: Client,
    /// What the statement may read.
    pub allowed: super::Access,
    /// Rows per table id, as the data node counts them (the join planner's estimates).
    pub rows: Arc<HashMap<u32, u64>>,
}

impl CatalogProvider for TernCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.client.databases().into_iter().filter(|d| self.allowed.dbs.contains(d)).collect()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        let dbs = self.schema_names();
        let db = dbs.iter().find(|d| *d == name).or_else(|| dbs.iter().find(|d| d.eq_ignore_ascii_case(name)))?;
        Some(Arc::new(TernSchema {
            client: self.client.clone(),
            db: db.clone(),
            rows: self.rows.clone(),
            check: self.allowed.table_check.clone(),
        }))
    }
}

pub struct TernSchema {
    client: Client,
    db: String,
    rows: Arc<HashMap<u32, u64>>,
    check: Option<super::TableCheck>,
}

impl fmt::Debug for TernCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TernCatalog")
    }
}

impl fmt::Debug for TernSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TernSchema({})", self.db)
    }
}

#[async_trait]
impl SchemaProvider for TernSchema {
    fn table_names(&self) -> Vec<String> {
        self.client.tables(&self.db)
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        // Names as written, else the one table whose name matches ignoring case (the engine
        // folds unquoted names to lower case).
        let found = match self.client.table(&self.db, name) {
            Ok(h) => Some(h),
            Err(_) => {
                let names = self.client.tables(&self.db);
                let mut same = names.iter().filter(|t| t.eq_ignore_ascii_case(name));
                match (same.next(), same.next()) {
                    (Some(t), None) => self.client.table(&self.db, t).ok(),
                    _ => None,
                }
            }
        };
        if let (Some(h), Some(check)) = (&found, &self.check) {
            check(&self.db, &h.table.name).map_err(|e| DataFusionError::External(Box::new(e)))?;
        }
        Ok(found.map(|h| Arc::new(TernTable::new(self.client.clone(), h, self.rows.clone())) as Arc<dyn TableProvider>))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.client.tables(&self.db).iter().any(|t| t.eq_ignore_ascii_case(name))
    }
}

pub struct TernTable {
    client: Client,
    handle: TableHandle,
    schema: SchemaRef,
    rows: Arc<HashMap<u32, u64>>,
}

impl fmt::Debug for TernTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TernTable({}.{})", self.handle.table.database, self.handle.table.name)
    }
}

impl TernTable {
    pub fn new(client: Client, handle: TableHandle, rows: Arc<HashMap<u32, u64>>) -> TernTable {
        let schema = schema_of(&handle.table);
        TernTable { client, handle, schema, rows }
    }

    /// The table's rows as the data node counted them when the statement was planned.
    pub fn row_count(&self) -> Option<u64> {
        self.rows.get(&self.handle.id()).copied()
    }

    /// Sets of columns (names) whose values are unique: the primary key and unique indexes.
    pub fn unique_keys(&self) -> Vec<Vec<String>> {
        let t = &self.handle.table;
        let names = |cols: &[u16]| cols.iter().map(|&c| t.columns[c as usize].name.clone()).collect();
        std::iter::once(names(&t.primary_key))
            .chain(t.indexes.iter().filter(|i| i.unique).map(|i| names(&i.columns)))
            .collect()
    }
}

#[async_trait]
impl TableProvider for TernTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| match to_filter(f, &self.schema) {
                // The engine checks them again: the data node only narrows what it sends.
                Some(_) => TableProviderFilterPushDown::Inexact,
                None => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let all: Vec<usize> = (0..self.schema.fields().len()).collect();
        let cols = projection.unwrap_or(&all);
        let schema = Arc::new(self.schema.project(cols)?);
        // Reading no column (COUNT(*)): read the first key column and keep only the count.
        let keep = !cols.is_empty();
        let read: Vec<u16> =
            if keep { cols.iter().map(|&c| c as u16).collect() } else { vec![self.handle.table.primary_key[0]] };
        let pushed: Vec<Filter> = filters.iter().filter_map(|f| to_filter(f, &self.schema)).collect();
        let filter = match pushed.len() {
            0 => Filter::True,
            1 => pushed.into_iter().next().expect("one"),
            _ => Filter::And(pushed),
        };
        let limit = if filter == Filter::True { limit } else { None };
        let mut rows = self.rows.get(&self.handle.id()).copied();
        let range = match rows {
            Some(n) if n >= INDEX_RANGE_MIN_ROWS => self.narrow_range(&filter).await,
            _ => None,
        };
        if let (Some(n), Some(r)) = (rows, &range) {
            rows = Some(((n as f64 * r.fraction).ceil() as u64).max(1));
        }
        let mut scan =
            TernScanExec::new(self.client.clone(), self.handle.clone(), schema, read, keep, filter, limit, rows);
        scan.range = range;
        Ok(Arc::new(scan))
    }
}

/// Tables with fewer rows are scanned whole (an index range gains nothing worth two lookups).
const INDEX_RANGE_MIN_ROWS: u64 = 10_000;

/// An index range is read instead of the whole table when it holds at most this part of the
/// rows: each row read through an ordered index costs a random access and an index key, about
/// seven times a row of the partition's sequential scan (measured on TPC-H lineitem: Q6's 15 %
/// through `l_shipdate`'s index took as long as Q1's full scan).
const INDEX_FRACTION_MAX: f64 = 1.0 / 10.0;

/// One end of a range: the value as an ordinal (`ordinal`), and whether it is included.
type Side = Option<(i128, bool)>;

impl TernTable {
    /// The range of an ordered index led by a column the filter bounds on both sides
    /// (`d >= x AND d < y`, `BETWEEN`, `=`), when the range holds a small part of the table —
    /// estimated from the column's smallest and largest values, read from the index's two ends
    /// (values spread evenly between them, as dates and keys mostly are). TPC-H Q14 reads one
    /// month of lineitem's seven years so.
    async fn narrow_range(&self, filter: &Filter) -> Option<IndexRange> {
        let terms: Vec<&Filter> = match filter {
            Filter::And(fs) => fs.iter().collect(),
            f => vec![f],
        };
        let t = &self.handle.table;
        for index in &t.indexes {
            let Some(&col) = index.columns.first() else { continue };
            let ty = t.columns[col as usize].ty;
            let (mut lo, mut hi): (Side, Side) = (None, None);
            for f in &terms {
                let Filter::Cmp { col: c, op, value } = f else { continue };
                let Some(v) = ordinal(ty, value) else { continue };
                if *c != col {
                    continue;
                }
                let tighter_lo = |cur: Side, new: (i128, bool)| match cur {
                    Some(o) if o.0 > new.0 || (o.0 == new.0 && !o.1) => Some(o),
                    _ => Some(new),
                };
                let tighter_hi = |cur: Side, new: (i128, bool)| match cur {
                    Some(o) if o.0 < new.0 || (o.0 == new.0 && !o.1) => Some(o),
                    _ => Some(new),
                };
                match op {
                    CmpOp::Eq => {
                        lo = tighter_lo(lo, (v, true));
                        hi = tighter_hi(hi, (v, true));
                    }
                    CmpOp::Ge | CmpOp::Gt => lo = tighter_lo(lo, (v, *op == CmpOp::Ge)),
                    CmpOp::Le | CmpOp::Lt => hi = tighter_hi(hi, (v, *op == CmpOp::Le)),
                    CmpOp::Ne => {}
                }
            }
            let (Some(lo), Some(hi)) = (lo, hi) else { continue };
            let (min, max) = (self.index_end(index, false).await?, self.index_end(index, true).await?);
            let (min, max) = (ordinal(ty, &min)?, ordinal(ty, &max)?);
            let span = (max - min).max(0) as f64 + 1.0;
            let fraction = ((hi.0.min(max) - lo.0.max(min)).max(-1) as f64 + 1.0) / span;
            if fraction > INDEX_FRACTION_MAX {
                continue;
            }
            let bound = |(v, incl): (i128, bool)| -> Option<tern_client::Bound> {
                self.handle.index_bound(index, &[value_of(ty, v)?], incl).ok()
            };
            return Some(IndexRange { index: index.id, lo: bound(lo)?, hi: bound(hi)?, fraction: fraction.max(0.0) });
        }
        None
    }

    /// The smallest (or largest) non-NULL value of an ordered index's first column.
    async fn index_end(&self, index: &tern_client::Index, last: bool) -> Option<Value> {
        let col = *index.columns.first()?;
        let mut spec = tern_client::ScanSpec::table(self.handle.id());
        spec.index = Some(index.id);
        spec.ordered = true;
        spec.descending = last;
        spec.projection = Some(vec![col]);
        spec.filter = Filter::IsNotNull(col);
        spec.limit = 1;
        spec.batch_rows = 1;
        let rows = self.client.scan(spec).next_batch().await.ok()??;
        let row = rows.first()?;
        self.handle.decode_projection(&[col], row).ok()?.into_iter().next()
    }
}

/// A value of an integer, DATE or DATETIME column as a number that orders as the column does.
fn ordinal(ty: ColumnType, v: &Value) -> Option<i128> {
    match (ty, v) {
        (t, Value::Int(i)) if t.is_integer() => Some(*i as i128),
        (t, Value::UInt(u)) if t.is_integer() => Some(*u as i128),
        (ColumnType::Date, Value::Date(d)) => Some(*d as i128),
        (ColumnType::DateTime { .. }, Value::DateTime(us)) => Some(*us as i128),
        _ => None,
    }
}

fn value_of(ty: ColumnType, v: i128) -> Option<Value> {
    Some(match ty {
        t if t.is_integer() => match i64::try_from(v) {
            Ok(i) => Value::Int(i),
            Err(_) => Value::UInt(u64::try_from(v).ok()?),
        },
        ColumnType::Date => Value::Date(i32::try_from(v).ok()?),
        ColumnType::DateTime { .. } => Value::DateTime(i64::try_from(v).ok()?),
        _ => return None,
    })
}

/// A filter the data node can apply, when `e` is one (comparisons of a column with a constant,
/// IS [NOT] NULL, IN lists, BETWEEN, and AND / OR / NOT of those).
pub fn to_filter(e: &Expr, schema: &SchemaRef) -> Option<Filter> {
    let col = |e: &Expr| -> Option<u16> {
        match e {
            Expr::Column(c) => schema.index_of(&c.name).ok().map(|i| i as u16),
            _ => None,
        }
    };
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And | Operator::Or => {
                let (a, b) = (to_filter(left, schema)?, to_filter(right, schema)?);
                Some(if *op == Operator::And { Filter::And(vec![a, b]) } else { Filter::Or(vec![a, b]) })
            }
            _ => {
                let cmp = match op {
                    Operator::Eq => CmpOp::Eq,
                    Operator::NotEq => CmpOp::Ne,
                    Operator::Lt => CmpOp::Lt,
                    Operator::LtEq => CmpOp::Le,
                    Operator::Gt => CmpOp::Gt,
                    Operator::GtEq => CmpOp::Ge,
                    _ => return None,
                };
                if let (Some(c), Some(v)) = (col(left), literal(right)) {
                    Some(Filter::Cmp { col: c, op: cmp, value: v })
                } else if let (Some(v), Some(c)) = (literal(left), col(right)) {
                    let flipped = match cmp {
                        CmpOp::Lt => CmpOp::Gt,
                        CmpOp::Le => CmpOp::Ge,
                        CmpOp::Gt => CmpOp::Lt,
                        CmpOp::Ge => CmpOp::Le,
                        o => o,
                    };
                    Some(Filter::Cmp { col: c, op: flipped, value: v })
                } else if let (Some(a), Some(b)) = (col(left), col(right)) {
                    // Two columns of one numeric or temporal type (`l_commitdate <
                    // l_receiptdate`): compared as MySQL does, with no conversion.
                    use datafusion::arrow::datatypes::DataType as D;
                    let (ta, tb) = (schema.field(a as usize).data_type(), schema.field(b as usize).data_type());
                    let plain = matches!(
                        ta,
                        D::Int8 | D::Int16 | D::Int32 | D::Int64 | D::Date32 | D::Timestamp(..) | D::Decimal128(..)
                    );
                    (plain && ta == tb).then_some(Filter::CmpCols { a, op: cmp, b })
                } else {
                    None
                }
            }
        },
        Expr::Not(inner) => Some(Filter::Not(Box::new(to_filter(inner, schema)?))),
        Expr::IsNull(inner) => Some(Filter::IsNull(col(inner)?)),
        Expr::IsNotNull(inner) => Some(Filter::IsNotNull(col(inner)?)),
        Expr::InList(l) => {
            let c = col(&l.expr)?;
            let values = l.list.iter().map(literal).collect::<Option<Vec<_>>>()?;
            let f = Filter::In { col: c, values };
            Some(if l.negated { Filter::Not(Box::new(f)) } else { f })
        }
        Expr::Between(b) => {
            let c = col(&b.expr)?;
            let (lo, hi) = (literal(&b.low)?, literal(&b.high)?);
            let f = Filter::And(vec![
                Filter::Cmp { col: c, op: CmpOp::Ge, value: lo },
                Filter::Cmp { col: c, op: CmpOp::Le, value: hi },
            ]);
            Some(if b.negated { Filter::Not(Box::new(f)) } else { f })
        }
        _ => None,
    }
}

/// A non-NULL constant as a Tern value.
fn literal(e: &Expr) -> Option<Value> {
    let Expr::Literal(s, _) = e else { return None };
    tern_value(s)
}
