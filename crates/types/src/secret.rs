//! The cluster secret: what every process that talks to a data node or a management node proves
//! it knows when it connects (native clients, API servers, other data nodes, other mgmds, the
//! `tern` tools). Reading it from a file or the environment is the callers' business (this crate
//! does no I/O); here is the proof and its check.
//!
//! The proof is HMAC-SHA256 (RFC 2104) keyed with the secret over a fixed label, so the secret
//! itself never crosses the network. Without TLS between the processes the proof is a bearer
//! credential, like Redis' `AUTH` on a plain connection: it keeps out whoever reaches a port but
//! cannot read the cluster's traffic.

use crate::digest::hmac_sha256;

/// The shortest secret accepted (bytes).
pub const SECRET_MIN: usize = 16;
/// The longest secret accepted (bytes).
pub const SECRET_MAX: usize = 4096;
const LABEL: &[u8] = b"tern cluster hello v1";

#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret {
    proof: [u8; 32],
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

impl ClusterSecret {
    /// A secret from its text; leading and trailing white space (a file's newline) is not part
    /// of it.
    pub fn new(secret: &[u8]) -> Result<ClusterSecret, String> {
        let s = secret.trim_ascii();
        if s.len() < SECRET_MIN {
            return Err(format!("the cluster secret must be at least {SECRET_MIN} bytes long"));
        }
        if s.len() > SECRET_MAX {
            return Err(format!("the cluster secret must be at most {SECRET_MAX} bytes long"));
        }
        Ok(ClusterSecret { proof: hmac_sha256(s, LABEL) })
    }

    /// What a connecting process sends.
    pub fn proof(&self) -> [u8; 32] {
        self.proof
    }

    /// Whether `proof` is this secret's (compared in constant time).
    pub fn verify(&self, proof: &[u8]) -> bool {
        proof.len() == 32 && proof.iter().zip(self.proof).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_check_and_short_secrets_are_refused() {
        let a = ClusterSecret::new(b"correct horse battery staple\n").unwrap();
        let b = ClusterSecret::new(b"correct horse battery staple").unwrap();
        assert!(a.verify(&b.proof()));
        let c = ClusterSecret::new(b"correct horse battery stapler").unwrap();
        assert!(!a.verify(&c.proof()));
        assert!(!a.verify(&a.proof()[..31]));
        assert!(ClusterSecret::new(b"short").unwrap_err().contains("at least 16"));
        assert_eq!(format!("{a:?}"), "ClusterSecret(..)");
    }
}
