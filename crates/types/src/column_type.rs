//! Column types (the MySQL types Tern supports): their names, sizes and binary encoding. Apart
//! from `schema` so that values (`value`) can be typed without the schema structs, which hold
//! values (defaults).

use crate::bin::{Dec, DecodeError, DecodeResult, Enc};
use crate::error::{ErrorCode, TernResult, err};

pub const ROW_MAX_BYTES: usize = 16 * 1024 * 1024;
pub const DECIMAL_PRECISION_MAX: u8 = 38;

/// Column types (the MySQL types Tern supports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    TinyInt {
        unsigned: bool,
    },
    SmallInt {
        unsigned: bool,
    },
    MediumInt {
        unsigned: bool,
    },
    Int {
        unsigned: bool,
    },
    BigInt {
        unsigned: bool,
    },
    Float,
    Double,
    /// precision 1..=38, scale 0..=precision; stored as a scaled i128. `unsigned`: negative
    /// values are out of range (MySQL's DECIMAL UNSIGNED).
    Decimal {
        precision: u8,
        scale: u8,
        unsigned: bool,
    },
    /// Length in characters (utf8mb4); trailing spaces are stripped on store.
    Char {
        len: u32,
    },
    VarChar {
        len: u32,
    },
    /// Fixed length in bytes, zero padded.
    Binary {
        len: u32,
    },
    VarBinary {
        len: u32,
    },
    Text,
    Blob,
    Date,
    /// Fractional-second precision 0..=6.
    Time {
        fsp: u8,
    },
    DateTime {
        fsp: u8,
    },
    Timestamp {
        fsp: u8,
    },
    Year,
    /// 1..=64 bits.
    Bit {
        bits: u8,
    },
}

impl ColumnType {
    /// Bytes the value takes in a row's fixed area, or None for variable-length types.
    pub fn fixed_width(self) -> Option<usize> {
        use ColumnType::*;
        Some(match self {
            TinyInt { .. } => 1,
            SmallInt { .. } | Year => 2,
            MediumInt { .. } | Int { .. } | Float | Date => 4,
            BigInt { .. } | Double | Time { .. } | DateTime { .. } | Timestamp { .. } | Bit { .. } => 8,
            Decimal { .. } => 16,
            Binary { len } => len as usize,
            Char { .. } | VarChar { .. } | VarBinary { .. } | Text | Blob => return None,
        })
    }

    /// Largest stored byte length for variable-length types.
    pub fn max_bytes(self) -> usize {
        use ColumnType::*;
        match self {
            Char { len } | VarChar { len } => len as usize * 4,
            VarBinary { len } => len as usize,
            Text | Blob => ROW_MAX_BYTES,
            other => other.fixed_width().unwrap_or(0),
        }
    }

    pub fn is_integer(self) -> bool {
        use ColumnType::*;
        matches!(self, TinyInt { .. } | SmallInt { .. } | MediumInt { .. } | Int { .. } | BigInt { .. })
    }

    pub fn is_unsigned(self) -> bool {
        use ColumnType::*;
        matches!(
            self,
            TinyInt { unsigned: true }
                | SmallInt { unsigned: true }
                | MediumInt { unsigned: true }
                | Int { unsigned: true }
                | BigInt { unsigned: true }
                | Decimal { unsigned: true, .. }
        )
    }

    pub fn is_text(self) -> bool {
        matches!(self, ColumnType::Char { .. } | ColumnType::VarChar { .. } | ColumnType::Text)
    }

    /// Inclusive integer range of an integer type.
    pub fn int_range(self) -> Option<(i128, i128)> {
        use ColumnType::*;
        Some(match self {
            TinyInt { unsigned: false } => (i8::MIN as i128, i8::MAX as i128),
            TinyInt { unsigned: true } => (0, u8::MAX as i128),
            SmallInt { unsigned: false } => (i16::MIN as i128, i16::MAX as i128),
            SmallInt { unsigned: true } => (0, u16::MAX as i128),
            MediumInt { unsigned: false } => (-(1 << 23), (1 << 23) - 1),
            MediumInt { unsigned: true } => (0, (1 << 24) - 1),
            Int { unsigned: false } => (i32::MIN as i128, i32::MAX as i128),
            Int { unsigned: true } => (0, u32::MAX as i128),
            BigInt { unsigned: false } => (i64::MIN as i128, i64::MAX as i128),
            BigInt { unsigned: true } => (0, u64::MAX as i128),
            _ => return None,
        })
    }

    /// Whether the type may be part of a primary key or index.
    pub fn indexable(self) -> bool {
        !matches!(self, ColumnType::Text | ColumnType::Blob)
    }

    /// The MySQL spelling, as `SHOW CREATE TABLE` prints it.
    pub fn sql_name(self) -> String {
        use ColumnType::*;
        let u = |unsigned: bool| if unsigned { " unsigned" } else { "" };
        match self {
            TinyInt { unsigned } => format!("tinyint{}", u(unsigned)),
            SmallInt { unsigned } => format!("smallint{}", u(unsigned)),
            MediumInt { unsigned } => format!("mediumint{}", u(unsigned)),
            Int { unsigned } => format!("int{}", u(unsigned)),
            BigInt { unsigned } => format!("bigint{}", u(unsigned)),
            Float => "float".into(),
            Double => "double".into(),
            Decimal { precision, scale, unsigned } => format!("decimal({precision},{scale}){}", u(unsigned)),
            Char { len } => format!("char({len})"),
            VarChar { len } => format!("varchar({len})"),
            Binary { len } => format!("binary({len})"),
            VarBinary { len } => format!("varbinary({len})"),
            Text => "text".into(),
            Blob => "blob".into(),
            Date => "date".into(),
            Time { fsp } => fsp_name("time", fsp),
            DateTime { fsp } => fsp_name("datetime", fsp),
            Timestamp { fsp } => fsp_name("timestamp", fsp),
            Year => "year".into(),
            Bit { bits } => format!("bit({bits})"),
        }
    }

    /// Checks the type's own parameters.
    pub fn validate(self) -> TernResult<()> {
        use ColumnType::*;
        match self {
            Decimal { precision, scale, .. }
                if precision == 0 || precision > DECIMAL_PRECISION_MAX || scale > precision =>
            {
                return err(
                    ErrorCode::Unsupported,
                    format!(
                        "DECIMAL({precision},{scale}) is not supported: precision must be 1..=38 and scale <= precision"
                    ),
                );
            }
            Time { fsp } | DateTime { fsp } | Timestamp { fsp } if fsp > 6 => {
                return err(ErrorCode::InvalidSchema, format!("fractional seconds precision {fsp} is over 6"));
            }
            Bit { bits } if bits == 0 || bits > 64 => {
                return err(ErrorCode::InvalidSchema, format!("BIT({bits}) must have 1..=64 bits"));
            }
            Char { len } | Binary { len } if len > 255 => {
                return err(ErrorCode::InvalidSchema, format!("{} is too long (max 255)", self.sql_name()));
            }
            VarChar { len } | VarBinary { len } if len > 65535 => {
                return err(ErrorCode::InvalidSchema, format!("{} is too long (max 65535)", self.sql_name()));
            }
            _ => {}
        }
        Ok(())
    }

    pub(crate) fn encode(self, e: &mut Enc) {
        use ColumnType::*;
        let (tag, a, b): (u8, u32, u32) = match self {
            TinyInt { unsigned } => (1, unsigned as u32, 0),
            SmallInt { unsigned } => (2, unsigned as u32, 0),
            MediumInt { unsigned } => (3, unsigned as u32, 0),
            Int { unsigned } => (4, unsigned as u32, 0),
            BigInt { unsigned } => (5, unsigned as u32, 0),
            Float => (6, 0, 0),
            Double => (7, 0, 0),
            Decimal { precision, scale, unsigned: false } => (8, precision as u32, scale as u32),
            Decimal { precision, scale, unsigned: true } => (21, precision as u32, scale as u32),
            Char { len } => (9, len, 0),
            VarChar { len } => (10, len, 0),
            Binary { len } => (11, len, 0),
            VarBinary { len } => (12, len, 0),
            Text => (13, 0, 0),
            Blob => (14, 0, 0),
            Date => (15, 0, 0),
            Time { fsp } => (16, fsp as u32, 0),
            DateTime { fsp } => (17, fsp as u32, 0),
            Timestamp { fsp } => (18, fsp as u32, 0),
            Year => (19, 0, 0),
            Bit { bits } => (20, bits as u32, 0),
        };
        e.u8(tag);
        e.u32(a);
        e.u32(b);
    }

    pub(crate) fn decode(d: &mut Dec) -> DecodeResult<ColumnType> {
        use ColumnType::*;
        let tag = d.u8()?;
        let a = d.u32()?;
        let b = d.u32()?;
        let small = |v: u32| u8::try_from(v).map_err(|_| DecodeError("bad type parameter"));
        Ok(match tag {
            1 => TinyInt { unsigned: a != 0 },
            2 => SmallInt { unsigned: a != 0 },
            3 => MediumInt { unsigned: a != 0 },
            4 => Int { unsigned: a != 0 },
            5 => BigInt { unsigned: a != 0 },
            6 => Float,
            7 => Double,
            8 => Decimal { precision: small(a)?, scale: small(b)?, unsigned: false },
            21 => Decimal { precision: small(a)?, scale: small(b)?, unsigned: true },
            9 => Char { len: a },
            10 => VarChar { len: a },
            11 => Binary { len: a },
            12 => VarBinary { len: a },
            13 => Text,
            14 => Blob,
            15 => Date,
            16 => Time { fsp: small(a)? },
            17 => DateTime { fsp: small(a)? },
            18 => Timestamp { fsp: small(a)? },
            19 => Year,
            20 => Bit { bits: small(a)? },
            _ => return Err(DecodeError("unknown column type")),
        })
    }
}

fn fsp_name(base: &str, fsp: u8) -> String {
    if fsp == 0 { base.to_string() } else { format!("{base}({fsp})") }
}
