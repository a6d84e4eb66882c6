//! Tern's tables as the engine's: a catalog whose schemas are Tern databases, tables whose scans
//! are Tern scans (`scan::TernScanExec`: one stream per partition, so partitions are read in
//! parallel), with the projection, simple filters and (unfiltered) limits pushed to the data node.

use super::arrow::schema_of;
use super::scan::{TernScanExec, tern_value};
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
use tern_types::Value;
use tern_types::filter::{CmpOp, Filter};

/// Every Tern database as a schema.
pub struct TernCatalog {
    pub client: Client,
    /// The databases the statement may read.
    pub allowed: Vec<String>,
    /// Rows per table id, as the data node counts them (the join planner's estimates).
    pub rows: Arc<HashMap<u32, u64>>,
}

impl CatalogProvider for TernCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.client.databases().into_iter().filter(|d| self.allowed.contains(d)).collect()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        let dbs = self.schema_names();
        let db = dbs.iter().find(|d| *d == name).or_else(|| dbs.iter().find(|d| d.eq_ignore_ascii_case(name)))?;
        Some(Arc::new(TernSchema { client: self.client.clone(), db: db.clone(), rows: self.rows.clone() }))
    }
}

pub struct TernSchema {
    client: Client,
    db: String,
    rows: Arc<HashMap<u32, u64>>,
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
        let rows = self.rows.get(&self.handle.id()).copied();
        Ok(Arc::new(TernScanExec::new(
            self.client.clone(),
            self.handle.clone(),
            schema,
            read,
            keep,
            filter,
            limit,
            rows,
        )))
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
    tern_value(s)
}
