//! REST errors: an HTTP status and a plain-text message (clients match the message text, so the
//! texts of interfaces.md §1.4 are kept verbatim).

use tern_client::TernError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestError {
    pub status: u16,
    pub message: String,
}

impl RestError {
    pub fn new(status: u16, message: impl Into<String>) -> RestError {
        RestError { status, message: message.into() }
    }
    pub fn bad_request(message: impl Into<String>) -> RestError {
        RestError::new(400, message)
    }
    pub fn not_found(message: impl Into<String>) -> RestError {
        RestError::new(404, message)
    }
}

impl From<TernError> for RestError {
    fn from(e: TernError) -> RestError {
        RestError::new(e.code.http_status(), e.message)
    }
}
