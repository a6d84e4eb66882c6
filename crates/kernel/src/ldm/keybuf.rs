//! A primary key's encoded bytes as the ldm's lock and change records hold them: inline up to
//! `INLINE` bytes (integer keys, short strings), so taking a lock or staging a change allocates
//! nothing for most keys; longer keys are boxed. Compares, orders and hashes as its bytes.

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// Key bytes kept inline (the whole value is 40 bytes).
const INLINE: usize = 38;

#[derive(Clone)]
pub(crate) enum KeyBuf {
    Inline { len: u8, buf: [u8; INLINE] },
    Boxed(Box<[u8]>),
}

impl KeyBuf {
    #[inline]
    pub(crate) fn new(key: &[u8]) -> KeyBuf {
        if key.len() <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..key.len()].copy_from_slice(key);
            KeyBuf::Inline { len: key.len() as u8, buf }
        } else {
            KeyBuf::Boxed(key.into())
        }
    }
}

impl Deref for KeyBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            KeyBuf::Inline { len, buf } => &buf[..*len as usize],
            KeyBuf::Boxed(b) => b,
        }
    }
}

impl PartialEq for KeyBuf {
    #[inline]
    fn eq(&self, other: &KeyBuf) -> bool {
        **self == **other
    }
}

impl Eq for KeyBuf {}

impl PartialOrd for KeyBuf {
    fn partial_cmp(&self, other: &KeyBuf) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for KeyBuf {
    #[inline]
    fn cmp(&self, other: &KeyBuf) -> Ordering {
        (**self).cmp(&**other)
    }
}

impl Hash for KeyBuf {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state)
    }
}

impl std::fmt::Debug for KeyBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

/// Hashes and compares as its bytes, so sets of keys can be asked with a slice.
impl std::borrow::Borrow<[u8]> for KeyBuf {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_boxed_keys_behave_as_their_bytes() {
        let short = KeyBuf::new(b"abc");
        let edge = KeyBuf::new(&[7u8; INLINE]);
        let long = KeyBuf::new(&[7u8; INLINE + 1]);
        assert!(matches!(short, KeyBuf::Inline { .. }) && matches!(edge, KeyBuf::Inline { .. }));
        assert!(matches!(long, KeyBuf::Boxed(_)));
        assert_eq!(&*short, b"abc");
        assert_eq!(edge.len(), INLINE);
        assert_eq!(long.len(), INLINE + 1);
        // Order is the bytes' order whatever the representation.
        assert!(edge < long && short < KeyBuf::new(b"abd") && KeyBuf::new(b"") < short);
        assert_eq!(KeyBuf::new(&[7u8; INLINE + 1]), long);
        let h = |k: &KeyBuf| {
            let mut s = std::collections::hash_map::DefaultHasher::new();
            k.hash(&mut s);
            s.finish()
        };
        let mut s = std::collections::hash_map::DefaultHasher::new();
        b"abc"[..].hash(&mut s);
        assert_eq!(h(&short), s.finish());
        assert_eq!(std::mem::size_of::<KeyBuf>(), 40);
    }
}
