//! The statements and expressions the parser produces (the MySQL subset Tern serves).

use tern_types::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    IntDiv,
    Mod,
    Eq,
    NullSafeEq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    Xor,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
    BitNot,
}

/// Target of CAST/CONVERT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CastTy {
    Signed,
    Unsigned,
    Char,
    Binary,
    Decimal(u8, u8),
    Double,
    Date,
    DateTime,
    Time,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Lit(Value),
    Param(usize),
    Column {
        table: Option<String>,
        name: String,
    },
    SysVar {
        global: bool,
        name: String,
    },
    UserVar(String),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    IsNull {
        e: Box<Expr>,
        neg: bool,
    },
    /// `IS [NOT] TRUE|FALSE`
    IsBool {
        e: Box<Expr>,
        value: bool,
        neg: bool,
    },
    In {
        e: Box<Expr>,
        list: Vec<Expr>,
        neg: bool,
    },
    InSelect {
        e: Box<Expr>,
        q: Box<Select>,
        neg: bool,
    },
    Exists {
        q: Box<Select>,
        neg: bool,
    },
    Subquery(Box<Select>),
    Between {
        e: Box<Expr>,
        lo: Box<Expr>,
        hi: Box<Expr>,
        neg: bool,
    },
    Like {
        e: Box<Expr>,
        pat: Box<Expr>,
        neg: bool,
    },
    /// Function call; the name is upper-cased. `star` for COUNT(*).
    Func {
        name: String,
        args: Vec<Expr>,
        distinct: bool,
        star: bool,
    },
    Case {
        operand: Option<Box<Expr>>,
        whens: Vec<(Expr, Expr)>,
        else_: Option<Box<Expr>>,
    },
    Cast {
        e: Box<Expr>,
        ty: CastTy,
    },
    /// `INTERVAL n unit` (only inside date arithmetic); unit upper-cased.
    Interval {
        e: Box<Expr>,
        unit: String,
    },
    /// `DEFAULT` in VALUES lists and SET.
    Default,
}

impl Expr {
    pub fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Binary(op, Box::new(a), Box::new(b))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum SelectItem {
    /// `*` or `t.*`
    Star(Option<String>),
    /// An expression, its alias, and its text as written (the column name without an alias).
    Expr { e: Expr, alias: Option<String>, text: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TableRef {
    pub db: Option<String>,
    pub name: String,
    pub alias: Option<String>,
    /// How it joins the tables before it (None for the first table).
    pub join: Option<(JoinKind, Option<Expr>)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    Shared,
    Exclusive,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Select {
    pub distinct: bool,
    pub items: Vec<SelectItem>,
    pub from: Vec<TableRef>,
    pub filter: Option<Expr>,
    pub group_by: Vec<Expr>,
    pub having: Option<Expr>,
    /// (expression, descending)
    pub order_by: Vec<(Expr, bool)>,
    pub limit: Option<Expr>,
    pub offset: Option<Expr>,
    pub lock: Option<Lock>,
    /// `UNION [ALL]` continuations: (all, select).
    pub unions: Vec<(bool, Select)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ObjName {
    pub db: Option<String>,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum InsertSource {
    Values(Vec<Vec<Expr>>),
    Select(Box<Select>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Insert {
    pub table: ObjName,
    pub columns: Option<Vec<String>>,
    pub source: InsertSource,
    pub replace: bool,
    pub ignore: bool,
    pub on_dup: Vec<(String, Expr)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub table: ObjName,
    pub sets: Vec<(String, Expr)>,
    pub filter: Option<Expr>,
    pub order_by: Vec<(Expr, bool)>,
    pub limit: Option<Expr>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Delete {
    pub table: ObjName,
    pub filter: Option<Expr>,
    pub order_by: Vec<(Expr, bool)>,
    pub limit: Option<Expr>,
}

/// A column type as written: its name (upper-case) and arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeName {
    pub name: String,
    pub args: Vec<String>,
    pub unsigned: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ColumnSpec {
    pub name: String,
    pub ty: TypeName,
    pub not_null: Option<bool>,
    pub default: Option<Expr>,
    pub auto_increment: bool,
    pub primary_key: bool,
    pub unique: bool,
    pub comment: Option<String>,
    /// A column-level REFERENCES or CHECK accepted and not enforced.
    pub ignored: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct IndexSpec {
    pub name: Option<String>,
    pub columns: Vec<String>,
    pub unique: bool,
    pub primary: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CreateTable {
    pub table: ObjName,
    pub if_not_exists: bool,
    pub columns: Vec<ColumnSpec>,
    pub indexes: Vec<IndexSpec>,
    /// Table options: (upper-cased name, value).
    pub options: Vec<(String, String)>,
    pub partition_by_key: Option<Vec<String>>,
    pub partitions: Option<u32>,
    /// `CREATE TABLE t LIKE other`
    pub like: Option<ObjName>,
    /// FOREIGN KEY and CHECK constraints accepted but not enforced (what they were), for the
    /// warnings of the statement.
    pub ignored: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AlterOp {
    AddColumn(ColumnSpec),
    DropColumn(String),
    AddIndex(IndexSpec),
    DropIndex(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum ShowKind {
    Databases {
        like: Option<String>,
    },
    Tables {
        db: Option<String>,
        like: Option<String>,
        full: bool,
    },
    Columns {
        table: ObjName,
        full: bool,
        like: Option<String>,
    },
    CreateTable(ObjName),
    CreateDatabase(String),
    Index(ObjName),
    Variables {
        global: bool,
        like: Option<String>,
        filter: Option<Expr>,
    },
    Status {
        like: Option<String>,
    },
    Warnings,
    Errors,
    Engines,
    Collation {
        like: Option<String>,
    },
    CharacterSet {
        like: Option<String>,
    },
    Processlist {
        full: bool,
    },
    TableStatus {
        like: Option<String>,
    },
    Grants(Option<String>),
    /// Objects Tern does not have (events, triggers, stored routines): their columns, no rows.
    Empty(&'static [&'static str]),
}

/// `SET` targets.
#[derive(Debug, Clone, PartialEq)]
pub enum SetTarget {
    Sys { global: bool, name: String },
    User(String),
}

/// Where a grant applies.
#[derive(Debug, Clone, PartialEq)]
pub enum GrantLevel {
    /// `*.*`
    Global,
    /// `db.*` (None: `*`, the current database).
    Database(Option<String>),
    /// `db.t` (db None: `t`, in the current database).
    Table(Option<String>, String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    Select(Box<Select>),
    Insert(Box<Insert>),
    Update(Box<Update>),
    Delete(Box<Delete>),
    CreateTable(Box<CreateTable>),
    CreateIndex {
        table: ObjName,
        index: IndexSpec,
    },
    DropTable {
        tables: Vec<ObjName>,
        if_exists: bool,
    },
    DropIndex {
        table: ObjName,
        name: String,
    },
    AlterTable {
        table: ObjName,
        ops: Vec<AlterOp>,
    },
    Truncate(ObjName),
    CreateDatabase {
        name: String,
        if_not_exists: bool,
    },
    DropDatabase {
        name: String,
        if_exists: bool,
    },
    Use(String),
    Set(Vec<(SetTarget, Expr)>),
    SetNames,
    SetTransaction,
    Show(ShowKind),
    Begin,
    Commit,
    Rollback,
    Prepare {
        name: String,
        sql: Expr,
    },
    Execute {
        name: String,
        using: Vec<String>,
    },
    Deallocate(String),
    /// `KILL [CONNECTION | QUERY] id`
    Kill {
        id: Expr,
        query: bool,
    },
    /// Users as (user, host, password, authentication plugin).
    CreateUser {
        users: Vec<(String, String, Option<String>, Option<String>)>,
        if_not_exists: bool,
    },
    DropUser {
        users: Vec<(String, String)>,
        if_exists: bool,
    },
    /// GRANT privileges ON level TO user@host [WITH GRANT OPTION], or REVOKE ... FROM.
    Grant {
        /// `tern_sql::privs` bits (GRANT OPTION included).
        privs: u16,
        /// None: every level (`REVOKE ALL PRIVILEGES, GRANT OPTION FROM u`).
        level: Option<GrantLevel>,
        user: String,
        host: String,
        revoke: bool,
    },
    AlterUser {
        user: String,
        host: String,
        password: String,
        /// `IDENTIFIED WITH plugin BY ...`.
        plugin: Option<String>,
    },
    LoadData(Box<LoadData>),
    /// Statements accepted and ignored (LOCK TABLES, FLUSH, ANALYZE, ...).
    Noop,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LoadData {
    pub file: String,
    pub local: bool,
    pub table: ObjName,
    pub replace: bool,
    pub ignore: bool,
    pub fields_terminated: Vec<u8>,
    pub enclosed: Option<u8>,
    pub escaped: Option<u8>,
    pub lines_terminated: Vec<u8>,
    /// `LINES STARTING BY`: each record begins after this prefix (empty: none).
    pub lines_starting: Vec<u8>,
    pub ignore_lines: u64,
    pub columns: Option<Vec<String>>,
}
