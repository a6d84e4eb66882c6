//! Frame header codec (performance-critical: runs for every message).

pub use thiserror_free::FrameError;

pub const FRAME_HEADER_LEN: usize = 16;
pub const FRAME_MAGIC: u16 = 0x4E54;
pub const PROTOCOL_VERSION: u8 = 1;
/// Largest payload accepted: bounds per-connection buffering.
pub const FRAME_PAYLOAD_MAX: usize = 64 * 1024 * 1024;

mod thiserror_free {
    /// Why a frame was rejected.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum FrameError {
        BadMagic,
        BadVersion(u8),
        TooLarge(usize),
        BadChecksum,
    }

    impl std::fmt::Display for FrameError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                FrameError::BadMagic => write!(f, "not a Tern frame (bad magic)"),
                FrameError::BadVersion(v) => write!(f, "unsupported protocol version {v}"),
                FrameError::TooLarge(n) => {
                    write!(f, "frame payload of {n} bytes is over the limit")
                }
                FrameError::BadChecksum => write!(f, "frame checksum mismatch"),
            }
        }
    }

    impl std::error::Error for FrameError {}
}

/// Appends a frame holding `payload` to `out`.
pub fn encode_frame(payload: &[u8], out: &mut Vec<u8>) {
    assert!(payload.len() <= FRAME_PAYLOAD_MAX, "payload over the frame limit");
    out.extend_from_slice(&FRAME_MAGIC.to_le_bytes());
    out.push(PROTOCOL_VERSION);
    out.push(0);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(payload);
}

/// Starts a frame in `out` whose payload will be appended by the caller; finish with `finish_frame`.
pub fn begin_frame(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER_LEN]);
    at
}

/// Completes a frame started with `begin_frame` at `at`.
pub fn finish_frame(out: &mut [u8], at: usize) {
    let payload_len = out.len() - at - FRAME_HEADER_LEN;
    assert!(payload_len <= FRAME_PAYLOAD_MAX, "payload over the frame limit");
    let crc = crc32c::crc32c(&out[at + FRAME_HEADER_LEN..]);
    let h = &mut out[at..at + FRAME_HEADER_LEN];
    h[0..2].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
    h[2] = PROTOCOL_VERSION;
    h[3] = 0;
    h[4..8].copy_from_slice(&(payload_len as u32).to_le_bytes());
    h[8..12].copy_from_slice(&crc.to_le_bytes());
    h[12..16].copy_from_slice(&[0; 4]);
}

/// Total length of the frame at the start of `buf`, if its header is complete and valid.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, FrameError> {
    if buf.len() < FRAME_HEADER_LEN {
        return Ok(None);
    }
    if u16::from_le_bytes([buf[0], buf[1]]) != FRAME_MAGIC {
        return Err(FrameError::BadMagic);
    }
    if buf[2] != PROTOCOL_VERSION {
        return Err(FrameError::BadVersion(buf[2]));
    }
    let n = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes")) as usize;
    if n > FRAME_PAYLOAD_MAX {
        return Err(FrameError::TooLarge(n));
    }
    Ok(Some(FRAME_HEADER_LEN + n))
}

/// Splits one complete frame off the front of `buf`: Ok(Some((payload, consumed))).
pub fn decode_frame(buf: &[u8]) -> Result<Option<(&[u8], usize)>, FrameError> {
    let Some(total) = frame_len(buf)? else {
        return Ok(None);
    };
    if buf.len() < total {
        return Ok(None);
    }
    let payload = &buf[FRAME_HEADER_LEN..total];
    let crc = u32::from_le_bytes(buf[8..12].try_into().expect("4 bytes"));
    if crc32c::crc32c(payload) != crc {
        return Err(FrameError::BadChecksum);
    }
    Ok(Some((payload, total)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_reject_damage() {
        let mut buf = Vec::new();
        encode_frame(b"hello", &mut buf);
        let at = begin_frame(&mut buf);
        buf.extend_from_slice(b"world!");
        finish_frame(&mut buf, at);
        let (p, n) = decode_frame(&buf).unwrap().unwrap();
        assert_eq!(p, b"hello");
        let (p2, _) = decode_frame(&buf[n..]).unwrap().unwrap();
        assert_eq!(p2, b"world!");
        assert_eq!(decode_frame(&buf[..10]).unwrap(), None);
        assert_eq!(decode_frame(&buf[..n - 1]).unwrap(), None);
        let mut bad = buf.clone();
        bad[FRAME_HEADER_LEN] ^= 1;
        assert_eq!(decode_frame(&bad), Err(FrameError::BadChecksum));
        let mut bad = buf.clone();
        bad[0] = 0;
        assert_eq!(decode_frame(&bad), Err(FrameError::BadMagic));
        let mut bad = buf;
        bad[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode_frame(&bad), Err(FrameError::TooLarge(_))));
    }
}
