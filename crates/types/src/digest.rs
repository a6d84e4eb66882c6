//! What MD5, SHA-1 and the SHA-2 family share: the Merkle–Damgård padding (RFC 1321 §3.1–3.2,
//! FIPS 180-4 §5.1) and lowercase hex of a digest.

/// Feeds `data` to `compress` in `block`-byte blocks, then the padding: a 1 bit, zeros, and the
/// message length in bits in the last `len_bytes` bytes of the final block (big-endian for the
/// SHA family, little-endian for MD5).
pub(crate) fn blocks(data: &[u8], block: usize, len_bytes: usize, big_endian: bool, mut compress: impl FnMut(&[u8])) {
    let mut chunks = data.chunks_exact(block);
    for b in &mut chunks {
        compress(b);
    }
    let rest = chunks.remainder();
    let mut tail = [0u8; 256];
    tail[..rest.len()].copy_from_slice(rest);
    tail[rest.len()] = 0x80;
    let end = if rest.len() < block - len_bytes { block } else { 2 * block };
    let bits = (data.len() as u128).wrapping_mul(8);
    if big_endian {
        tail[end - len_bytes..end].copy_from_slice(&bits.to_be_bytes()[16 - len_bytes..]);
    } else {
        tail[end - len_bytes..end].copy_from_slice(&bits.to_le_bytes()[..len_bytes]);
    }
    for b in tail[..end].chunks_exact(block) {
        compress(b);
    }
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
