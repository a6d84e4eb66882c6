//! Standard base64 with padding (RFC 4648 §4), from the `base64` crate: binary values in REST
//! JSON and the feature store's encoded features.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// Appends the standard base64 of `bytes` to `out`.
pub fn base64_encode(bytes: &[u8], out: &mut String) {
    STANDARD.encode_string(bytes, out);
}

/// Decodes standard base64 with padding; None when malformed.
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    STANDARD.decode(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_rejects_garbage() {
        for data in [&b""[..], b"f", b"fo", b"foo", b"foob", b"fooba", b"foobar", &[0, 255, 128]] {
            let mut s = String::new();
            base64_encode(data, &mut s);
            assert_eq!(base64_decode(&s).unwrap(), data);
        }
        let mut s = String::new();
        base64_encode(b"foobar", &mut s);
        assert_eq!(s, "Zm9vYmFy");
        assert!(base64_decode("Zm9=YmFy").is_none());
        assert!(base64_decode("Zm9").is_none());
        assert!(base64_decode("Zm9v!mFy").is_none());
    }
}
