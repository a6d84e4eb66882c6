//! `caching_sha2_password`'s full authentication without TLS (MySQL 8's RSA key exchange, as
//! its manual describes "Caching SHA-2 Pluggable Authentication"): the client asks for the
//! server's RSA public key (a single byte 2), the server sends it as PEM after a 0x01 byte, and
//! the client sends RSA-OAEP (SHA-1, MGF1 with SHA-1: OpenSSL's RSA_PKCS1_OAEP_PADDING) of its
//! password and a NUL, XORed with the 20-byte scramble. The key pair is read from
//! `caching_sha2_password_private_key_path` or made at the first need (2048 bits).
//!
//! The `rsa` crate's decryption is not constant-time (RUSTSEC-2023-0071, the Marvin attack): an
//! attacker who can time many decryptions on this server could recover a password sent this
//! way. TLS avoids the exchange altogether and stays the recommended transport.

use rsa::pkcs8::{DecodePrivateKey, EncodePublicKey, LineEnding};
use rsa::{Oaep, RsaPrivateKey, RsaPublicKey};

/// The byte a client sends to ask for the public key.
pub const REQUEST_PUBLIC_KEY: u8 = 2;
/// Bits of a generated key (MySQL's default).
const BITS: usize = 2048;

pub struct RsaKeys {
    private: RsaPrivateKey,
    pem: String,
}

impl RsaKeys {
    fn from_private(private: RsaPrivateKey) -> Result<RsaKeys, String> {
        let pem = RsaPublicKey::from(&private).to_public_key_pem(LineEnding::LF).map_err(|e| e.to_string())?;
        Ok(RsaKeys { private, pem })
    }

    /// A fresh key pair (takes a fraction of a second: run it off the event loop).
    pub fn generate() -> Result<RsaKeys, String> {
        let private = RsaPrivateKey::new(&mut rand_core::OsRng, BITS).map_err(|e| e.to_string())?;
        RsaKeys::from_private(private)
    }

    /// A private key from a PEM file (PKCS#8 `BEGIN PRIVATE KEY` or PKCS#1 `BEGIN RSA PRIVATE KEY`).
    pub fn load(path: &std::path::Path) -> Result<RsaKeys, String> {
        use rsa::pkcs1::DecodeRsaPrivateKey;
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let private = RsaPrivateKey::from_pkcs8_pem(&text)
            .or_else(|_| RsaPrivateKey::from_pkcs1_pem(&text))
            .map_err(|e| format!("{} holds no RSA private key in PEM: {e}", path.display()))?;
        RsaKeys::from_private(private)
    }

    /// The public key as the client receives it (SubjectPublicKeyInfo PEM).
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// The password a client sent encrypted (without its trailing NUL); None when it does not
    /// decrypt.
    pub fn password(&self, sent: &[u8], scramble: &[u8]) -> Option<Vec<u8>> {
        let mut p = self.private.decrypt(Oaep::new::<sha1::Sha1>(), sent).ok()?;
        let salt = &scramble[..scramble.len().min(20)];
        if salt.is_empty() {
            return None;
        }
        for (i, b) in p.iter_mut().enumerate() {
            *b ^= salt[i % salt.len()];
        }
        if p.last() == Some(&0) {
            p.pop();
        }
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_encrypted_as_clients_do_comes_back() {
        let keys = RsaKeys::generate().unwrap();
        assert!(keys.pem().starts_with("-----BEGIN PUBLIC KEY-----"), "{}", keys.pem());
        let public = RsaPublicKey::from(&keys.private);
        let scramble: Vec<u8> = (1..=20).collect();
        let mut msg = b"s3cret-passw0rd-longer-than-the-scramble\0".to_vec();
        for (i, b) in msg.iter_mut().enumerate() {
            *b ^= scramble[i % 20];
        }
        let sent = public.encrypt(&mut rand_core::OsRng, Oaep::new::<sha1::Sha1>(), &msg).unwrap();
        assert_eq!(keys.password(&sent, &scramble).as_deref(), Some(&b"s3cret-passw0rd-longer-than-the-scramble"[..]));
        assert_eq!(keys.password(&sent[1..], &scramble), None);
        // A PEM file of the private key loads.
        use rsa::pkcs8::EncodePrivateKey;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("private_key.pem");
        std::fs::write(&path, keys.private.to_pkcs8_pem(LineEnding::LF).unwrap().as_bytes()).unwrap();
        assert_eq!(RsaKeys::load(&path).unwrap().pem(), keys.pem());
        assert!(RsaKeys::load(&dir.path().join("missing.pem")).is_err());
    }
}
