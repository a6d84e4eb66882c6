//! The Redis front end (Rondis, interfaces.md §2). This crate grows with issue 4; so far it holds
//! the RESP2 wire codec (`resp`), which the server will drive.

pub mod resp;
