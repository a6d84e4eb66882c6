//! Digests, the HMAC and the CRC-32 Tern computes, from RustCrypto's `md-5`, `sha1`, `sha2` and
//! `hmac` and from `crc`: MySQL's MD5/SHA1/SHA2/CRC32 functions and its authentication
//! (`mysql_native_password` on SHA-1, `caching_sha2_password` on SHA-256), REST API keys, Redis
//! ACL passwords (SHA-256 hex) and the cluster secret's proof (HMAC-SHA256, `secret`).

use hmac::Mac;
use sha2::Digest;

pub fn md5(data: &[u8]) -> [u8; 16] {
    md5::Md5::digest(data).into()
}

pub fn sha1(data: &[u8]) -> [u8; 20] {
    sha1::Sha1::digest(data).into()
}

pub fn sha224(data: &[u8]) -> [u8; 28] {
    sha2::Sha224::digest(data).into()
}

pub fn sha256(data: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(data).into()
}

/// Lowercase hex of SHA-256 (Redis ACL's stored passwords, API-key hashes).
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&sha256(data))
}

pub fn sha384(data: &[u8]) -> [u8; 48] {
    sha2::Sha384::digest(data).into()
}

pub fn sha512(data: &[u8]) -> [u8; 64] {
    sha2::Sha512::digest(data).into()
}

/// HMAC-SHA256 of `msg` keyed with `key` (RFC 2104).
pub fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    m.update(msg);
    m.finalize().into_bytes().into()
}

/// CRC-32 as zlib's `crc32()` (MySQL's `CRC32()`): CRC-32/ISO-HDLC.
pub fn crc32(data: &[u8]) -> u32 {
    const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
    CRC.checksum(data)
}

/// Lowercase hex of `bytes` (as MySQL's MD5/SHA functions and API-key hashes print digests).
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One published vector per function: the crates are wired to the right algorithm and the
    /// digests come out whole.
    #[test]
    fn digests_of_published_vectors() {
        // RFC 1321 A.5, FIPS 180-4's "abc" examples.
        assert_eq!(hex(&md5(b"message digest")), "f96b697d7cb7938d525a2f31aaf161d0");
        assert_eq!(hex(&sha1(b"abc")), "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(hex(&sha224(b"abc")), "23097d223405d8228642a477bda255b32aadbce4bda0b3f7e36c9da7");
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(
            hex(&sha384(b"abc")),
            "cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed8086072ba1e7cc2358baeca134c825a7"
        );
        assert_eq!(
            hex(&sha512(b"abc")),
            "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f"
        );
        // zlib's check value, and MySQL's manual: CRC32('MySQL') = 3259397556.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b"MySQL"), 3_259_397_556);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // RFC 4231 test case 2.
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(hex(&mac), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        // Test case 6: a key longer than the block.
        let mac = hmac_sha256(&[0xaa; 131], b"Test Using Larger Than Block-Size Key - Hash Key First");
        assert_eq!(hex(&mac), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    }
}
