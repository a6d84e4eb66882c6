//! The message catalogue and frame codec for traffic between clients and data nodes.
//!
//! **Frames** (TCP transporter): a 16-byte header `[magic u16 = 0x4E54 "TN"][version u8]
//! [flags u8][payload_len u32][crc32c(payload) u32][reserved u32]` followed by the payload, one
//! message per frame. Many frames are written to a socket in one write, which is how traffic is
//! batched per destination. A frame with a wrong magic, version or checksum, or a length over
//! `FRAME_PAYLOAD_MAX`, is a protocol error: the connection is closed, nothing is executed.
//!
//! **Messages**: `[kind u8][request id u64][body]`, encoded with `tern_types::bin`. Decoding never
//! panics and bounds every collection length.

mod frame;
mod msg;

pub use frame::{
    FRAME_HEADER_LEN, FRAME_PAYLOAD_MAX, FrameError, PROTOCOL_VERSION, begin_frame, decode_frame, encode_frame,
    finish_frame, frame_len,
};
pub use msg::*;

/// An in-process connection to a data node (the local transporter): the runtime implements it,
/// the client library uses it, and neither depends on the other.
pub trait LocalTransport: Send + Sync {
    fn send(&self, req_id: u64, req: Request);
}

/// Where an in-process connection's replies are delivered.
pub type ReplySink = std::sync::Arc<dyn Fn(u64, Reply) + Send + Sync>;
