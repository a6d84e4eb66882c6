//! SHA-256 and SHA-224 (FIPS 180-4), for API-key hashes and MySQL's `SHA2`. Written from the
//! standard's description.

const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
    0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
    0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
    0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2,
];

const H0: [u32; 8] = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

/// The SHA-2 compression of one block into `h` (FIPS 180-4 §6.2.2 / §6.4.2): SHA-224/256 on
/// 32-bit words and SHA-384/512 on 64-bit words differ only in the word, the round count, the
/// constants and the rotation amounts (σ0, σ1 of the schedule; Σ0, Σ1 of the rounds).
macro_rules! sha2_compress {
    ($name:ident, $w:ty, $rounds:expr, $k:expr, [$a0:expr, $a1:expr, $a2:expr], [$b0:expr, $b1:expr, $b2:expr],
     [$c0:expr, $c1:expr, $c2:expr], [$d0:expr, $d1:expr, $d2:expr]) => {
        fn $name(h: &mut [$w; 8], block: &[u8]) {
            const N: usize = std::mem::size_of::<$w>();
            let mut w = [0 as $w; $rounds];
            for (i, c) in block.chunks_exact(N).enumerate() {
                w[i] = <$w>::from_be_bytes(c.try_into().expect("one word"));
            }
            for i in 16..$rounds {
                let s0 = w[i - 15].rotate_right($a0) ^ w[i - 15].rotate_right($a1) ^ (w[i - 15] >> $a2);
                let s1 = w[i - 2].rotate_right($b0) ^ w[i - 2].rotate_right($b1) ^ (w[i - 2] >> $b2);
                w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
            }
            let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = *h;
            for i in 0..$rounds {
                let s1 = e.rotate_right($d0) ^ e.rotate_right($d1) ^ e.rotate_right($d2);
                let ch = (e & f) ^ (!e & g);
                let t1 = hh.wrapping_add(s1).wrapping_add(ch).wrapping_add($k[i]).wrapping_add(w[i]);
                let s0 = a.rotate_right($c0) ^ a.rotate_right($c1) ^ a.rotate_right($c2);
                let maj = (a & b) ^ (a & c) ^ (b & c);
                let t2 = s0.wrapping_add(maj);
                hh = g;
                g = f;
                f = e;
                e = d.wrapping_add(t1);
                d = c;
                c = b;
                b = a;
                a = t1.wrapping_add(t2);
            }
            for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
                *x = x.wrapping_add(y);
            }
        }
    };
}
pub(crate) use sha2_compress;

sha2_compress!(compress, u32, 64, K, [7, 18, 3], [17, 19, 10], [2, 13, 22], [6, 11, 25]);

/// SHA-224's start: the second 32 bits of the fractional parts of the square roots of the 9th
/// to 16th primes.
const H224: [u32; 8] = [0xc1059ed8, 0x367cd507, 0x3070dd17, 0xf70e5939, 0xffc00b31, 0x68581511, 0x64f98fa7, 0xbefa4fa4];

/// The SHA-256 digest of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    digest(H0, data)
}

/// The SHA-224 digest of `data` (SHA-256 from another start, cut to 28 bytes).
pub fn sha224(data: &[u8]) -> [u8; 28] {
    let mut out = [0u8; 28];
    out.copy_from_slice(&digest(H224, data)[..28]);
    out
}

fn digest(mut h: [u32; 8], data: &[u8]) -> [u8; 32] {
    crate::digest::blocks(data, 64, 8, true, |b| compress(&mut h, b));
    let mut out = [0u8; 32];
    for (o, v) in out.chunks_exact_mut(4).zip(h) {
        o.copy_from_slice(&v.to_be_bytes());
    }
    out
}

/// Lower-case hex of the SHA-256 digest.
pub fn sha256_hex(data: &[u8]) -> String {
    crate::digest::hex(&sha256(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SHA-224 of inputs around the padding boundary (checked against Python's hashlib).
    #[test]
    fn sha224_of_known_inputs() {
        use crate::digest::hex;
        assert_eq!(hex(&sha224(b"")), "d14a028c2a3a2bc9476102bb288234c415a2b01f828ea62ac5b3e42f");
        assert_eq!(hex(&sha224(b"abc")), "23097d223405d8228642a477bda255b32aadbce4bda0b3f7e36c9da7");
        assert_eq!(hex(&sha224(&[b'a'; 55])), "fb0bd626a70c28541dfa781bb5cc4d7d7f56622a58f01a0b1ddd646f");
        assert_eq!(hex(&sha224(&[b'a'; 56])), "d40854fc9caf172067136f2e29e1380b14626bf6f0dd06779f820dcd");
        assert_eq!(hex(&sha224(&[b'a'; 64])), "a88cd5cde6d6fe9136a4e58b49167461ea95d388ca2bdb7afdc3cbf4");
    }

    #[test]
    fn published_test_vectors() {
        assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(
            sha256_hex(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        assert_eq!(sha256_hex(&[b'a'; 1000]), "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
    }
}
