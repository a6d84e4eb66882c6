//! What a result set's columns are, in MySQL's type system (Protocol::ColumnDefinition41's
//! fields): the MySQL front end sends them, RonSQL's formats read them.

/// Column types (`enum_field_types`).
pub mod ty {
    pub const DECIMAL: u8 = 0;
    pub const TINY: u8 = 1;
    pub const SHORT: u8 = 2;
    pub const LONG: u8 = 3;
    pub const FLOAT: u8 = 4;
    pub const DOUBLE: u8 = 5;
    pub const NULL: u8 = 6;
    pub const TIMESTAMP: u8 = 7;
    pub const LONGLONG: u8 = 8;
    pub const INT24: u8 = 9;
    pub const DATE: u8 = 10;
    pub const TIME: u8 = 11;
    pub const DATETIME: u8 = 12;
    pub const YEAR: u8 = 13;
    pub const VARCHAR: u8 = 15;
    pub const BIT: u8 = 16;
    pub const NEWDECIMAL: u8 = 246;
    pub const BLOB: u8 = 252;
    pub const VAR_STRING: u8 = 253;
    pub const STRING: u8 = 254;
}

/// Column definition flags.
pub mod flag {
    pub const NOT_NULL: u16 = 1;
    pub const PRI_KEY: u16 = 2;
    pub const UNIQUE_KEY: u16 = 4;
    pub const MULTIPLE_KEY: u16 = 8;
    pub const BLOB: u16 = 16;
    pub const UNSIGNED: u16 = 32;
    pub const ZEROFILL: u16 = 64;
    pub const BINARY: u16 = 128;
    pub const ENUM: u16 = 256;
    pub const AUTO_INCREMENT: u16 = 512;
    pub const SET: u16 = 2048;
    pub const NUM: u16 = 32768;
}

/// Character set ids used in handshakes and column definitions.
pub mod charset {
    pub const UTF8MB4_GENERAL_CI: u8 = 45;
    pub const BINARY: u8 = 63;
}

/// A column of a result set (Protocol::ColumnDefinition41).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnDef {
    pub schema: String,
    pub table: String,
    pub org_table: String,
    pub name: String,
    pub org_name: String,
    pub charset: u16,
    pub length: u32,
    pub ty: u8,
    pub flags: u16,
    pub decimals: u8,
}

impl ColumnDef {
    /// A computed column (no table) of type `ty`.
    pub fn expr(name: &str, ty: u8, length: u32) -> ColumnDef {
        let binary = !matches!(ty, ty::VAR_STRING | ty::STRING | ty::VARCHAR | ty::BLOB);
        ColumnDef {
            schema: String::new(),
            table: String::new(),
            org_table: String::new(),
            name: name.into(),
            org_name: String::new(),
            charset: if binary { charset::BINARY as u16 } else { charset::UTF8MB4_GENERAL_CI as u16 },
            length,
            ty,
            flags: if binary { flag::BINARY | flag::NUM } else { 0 },
            // 31: no fixed fraction digits (strings; doubles print in shortest form).
            decimals: if binary && !matches!(ty, ty::DOUBLE | ty::FLOAT) { 0 } else { 31 },
        }
    }
}

use tern_types::value::format_g6;
use tern_types::{Value, time};

/// A value's text-protocol form for a column (None for NULL): BIT as big-endian bytes,
/// temporal values with the column's fractional digits, doubles in shortest form.
pub fn text_value(v: &Value, c: &ColumnDef) -> Option<Vec<u8>> {
    let fsp = if c.decimals <= 6 { c.decimals } else { 6 };
    Some(match v {
        Value::Null => return None,
        Value::Bit(b) => {
            let n = (c.length as usize).div_ceil(8).clamp(1, 8);
            b.to_be_bytes()[8 - n..].to_vec()
        }
        Value::DateTime(t) | Value::Timestamp(t) => {
            let fsp = if c.ty == ty::DATETIME || c.ty == ty::TIMESTAMP {
                fsp
            } else if t % 1_000_000 != 0 {
                6
            } else {
                0
            };
            time::format_datetime(*t, fsp).into_bytes()
        }
        Value::Time(t) => {
            let fsp = if c.ty == ty::TIME {
                fsp
            } else if t % 1_000_000 != 0 {
                6
            } else {
                0
            };
            time::format_time(*t, fsp).into_bytes()
        }
        Value::Float(f) => format_g6(*f as f64).into_bytes(),
        Value::Double(d) if c.ty == ty::FLOAT => format_g6(*d).into_bytes(),
        // A double column with fixed fraction digits (DOUBLE(M,D), VARIANCE of exact numbers).
        Value::Double(d) if c.ty == ty::DOUBLE && c.decimals < 31 && d.is_finite() => {
            format!("{:.*}", c.decimals as usize, d).into_bytes()
        }
        other => crate::eval::text(other).unwrap_or_default(),
    })
}
