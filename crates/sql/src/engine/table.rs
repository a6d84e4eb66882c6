//! Tern's tables as the engine's: a catalog whose schemas are Tern databases, tables whose scans
//! are Tern scans (one stream per partition, so partitions are read in parallel), with the
//! projection, simple filters and (unfiltered) limits pushed to the data node.

use super::arrow::{batch_of, schema_of};
use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{CatalogProvider, SchemaProvider, Session, TableProvider};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use std::fmt;
use std::sync::Arc;
use tern_client::{Client, ScanSpec, TableHandle};
use tern_types::filter::{CmpOp, Filter};
use tern_types::{ColumnType, Value};

/// Rows per scan batch the engine asks for.
const SCAN_BATCH_ROWS: u32 = 2048;

/// Every Tern database as a schema.
pub struct TernCatalog {
    pub client: Client,
    /// The databases the statement may read.
    pub allowed: Vec<String>,
}

impl CatalogProvider for TernCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.client.databases().into_iter().filter(|d| self.allowed.contains(d)).collect()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        let dbs = self.schema_names();
        let db = dbs.iter().find(|d| *d == name).or_else(|| dbs.iter().find(|d| d.eq_ignore_ascii_case(name)))?;
        Some(Arc::new(TernSchema { client: self.client.clone(), db: db.clone() }))
    }
}

pub struct TernSchema {
    client: Client,
    db: String,
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
        Ok(found.map(|h| Arc::new(TernTable::new(self.client.clone(), h)) as Arc<dyn TableProvider>))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.client.tables(&self.db).iter().any(|t| t.eq_ignore_ascii_case(name))
    }
}

pub struct TernTable {
    client: Client,
    handle: TableHandle,
    schema: SchemaRef,
}

impl fmt::Debug for TernTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TernTable({}.{})", self.handle.table.database, self.handle.table.name)
    }
}

impl TernTable {
    pub fn new(client: Client, handle: TableHandle) -> TernTable {
        let schema = schema_of(&handle.table);
        TernTable { client, handle, schema }
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
        let types: Vec<ColumnType> = read.iter().map(|&c| self.handle.table.columns[c as usize].ty).collect();
        let pushed: Vec<Filter> = filters.iter().filter_map(|f| to_filter(f, &self.schema)).collect();
        let filter = match pushed.len() {
            0 => Filter::True,
            1 => pushed.into_iter().next().expect("one"),
            _ => Filter::And(pushed),
        };
        let limit = if filter == Filter::True { limit } else { None };
        let parts = self.handle.table.partition_count.max(1);
        let streams: Vec<Arc<dyn PartitionStream>> = (0..parts)
            .map(|p| {
                let mut spec = ScanSpec::table(self.handle.id());
                spec.projection = Some(read.clone());
                spec.filter = filter.clone();
                spec.batch_rows = SCAN_BATCH_ROWS;
                spec.partition = Some(p);
                spec.limit = limit.unwrap_or(0) as u64;
                Arc::new(PartScan {
                    client: self.client.clone(),
                    spec,
                    types: types.clone(),
                    keep,
                    schema: schema.clone(),
                }) as Arc<dyn PartitionStream>
            })
            .collect();
        Ok(Arc::new(StreamingTableExec::try_new(schema, streams, None, Vec::new(), false, limit)?))
    }
}

/// One partition's scan as a stream of batches.
struct PartScan {
    client: Client,
    spec: ScanSpec,
    types: Vec<ColumnType>,
    keep: bool,
    schema: SchemaRef,
}

impl fmt::Debug for PartScan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PartScan(table {} partition {:?})", self.spec.table, self.spec.partition)
    }
}

impl PartitionStream for PartScan {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let scanner = self.client.scan(self.spec.clone());
        let (types, keep, schema) = (self.types.clone(), self.keep, self.schema.clone());
        let stream = futures::stream::unfold(Some(scanner), move |state| {
            let (types, schema) = (types.clone(), schema.clone());
            async move {
                let mut scanner = state?;
                loop {
                    match scanner.next_batch().await {
                        Ok(Some(rows)) if rows.is_empty() => continue,
                        Ok(Some(rows)) => {
                            let b = batch_of(&rows, &types, keep, &schema).map_err(DataFusionError::Execution);
                            return Some((b, Some(scanner)));
                        }
                        Ok(None) => return None,
                        Err(e) => return Some((Err(DataFusionError::External(Box::new(e))), None)),
                    }
                }
            }
        });
        Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), stream))
    }
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
