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
    /// Sends all of `reqs` (in order) at once, e.g. with one wake-up of the data node's worker.
    fn send_all(&self, reqs: &mut Vec<(u64, Request)>) {
        for (id, r) in reqs.drain(..) {
            self.send(id, r);
        }
    }
}

/// What one pass of a hosted worker's loop found (see `HostedWorker`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    Worked,
    Idle,
    Stopped,
}

/// A data-node worker whose loop an async runtime drives on the worker's own thread, next to
/// front-end tasks (the layout with front ends on the worker): the runtime implements it, the
/// client library's `hosted` module drives it, and neither depends on the other. The driver
/// calls `turn` while it finds work, yields to the other tasks between turns, and when idle
/// parks with `park` until the mailbox gets a push (`probe`), the descriptor `fd` turns
/// readable, or the timeout.
pub trait HostedWorker: Send {
    /// Call once, on the thread that drives the worker.
    fn bind_thread(&self);
    /// The worker's epoll descriptor: readable when a socket, a shared-memory client or a push
    /// from another thread (while armed) wants the worker. Open until `finish`.
    fn fd(&self) -> std::os::fd::RawFd;
    /// The node's longest idle spin (µs; 0: never spin).
    fn spin_max_us(&self) -> u64;
    /// One pass; `io`: whether the descriptor turned readable since the last pass.
    fn turn(&mut self, io: bool) -> Turn;
    /// Whether the turns since the last call answered an in-process client (whose task may be
    /// waiting on this thread): the driver yields to the tasks between turns only then (and
    /// now and then regardless), so a turn of timers or node signals costs no extra wake-up.
    fn replied_to_tasks(&mut self) -> bool;
    /// Prepares to wait: `waker` is woken by pushes. None: work arrived, do not wait (no
    /// `unpark` needed). Some(t): wait at most t, then call `unpark`; `Duration::MAX`: no
    /// timeout needed (the descriptor `fd` turns readable when the worker's next timer is due).
    fn park(&mut self, waker: &std::task::Waker) -> Option<std::time::Duration>;
    fn unpark(&mut self);
    fn probe(&self) -> std::sync::Arc<dyn MailProbe>;
    /// After `Turn::Stopped`: tells in-process clients the node stopped.
    fn finish(self: Box<Self>);
}

/// A hosted worker's mailbox as its thread's park hook sees it.
pub trait MailProbe: Send + Sync {
    /// Pushes wait (cheap; any thread).
    fn waiting(&self) -> bool;
    /// Wakes the parked worker task if pushes wait; true if so.
    fn kick(&self) -> bool;
    /// The thread is about to sleep: later pushes from other threads wake it through the
    /// worker's eventfd. False (and the task woken) when pushes arrived meanwhile.
    fn arm(&self) -> bool;
}

/// Where an in-process connection's replies are delivered.
pub type ReplySink = std::sync::Arc<dyn Fn(u64, Reply) + Send + Sync>;

/// The first frame a data node sends on a connection to another data node (the node-to-node
/// transporter): `[PEER_HELLO_KIND][node u16][worker u16][incarnation u32][target incarnation
/// u32]`, then the cluster secret's 32-byte proof when the sender has a secret. Every later frame
/// on that connection carries one signal (`tern_kernel::codec`). Client request kinds are below
/// 0x80, so a data node tells the two kinds of connection apart by the first byte.
pub const PEER_HELLO_KIND: u8 = 0xF0;

/// A peer connection's greeting: which node and which of its workers sends, the sender's
/// incarnation (bumped by every restart, so a restarted node's old connections are told apart)
/// and the incarnation of the receiver the sender means (a node that restarted before the sender
/// learned of it refuses signals meant for its previous life).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerHello {
    pub node: u16,
    pub worker: u16,
    pub incarnation: u32,
    pub target_incarnation: u32,
    /// The cluster secret's proof (`tern_types::secret`).
    pub proof: Option<[u8; 32]>,
}

impl PeerHello {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(PEER_HELLO_KIND);
        out.extend_from_slice(&self.node.to_le_bytes());
        out.extend_from_slice(&self.worker.to_le_bytes());
        out.extend_from_slice(&self.incarnation.to_le_bytes());
        out.extend_from_slice(&self.target_incarnation.to_le_bytes());
        if let Some(p) = &self.proof {
            out.extend_from_slice(p);
        }
    }

    /// `None` unless `payload` is exactly a peer greeting.
    pub fn decode(payload: &[u8]) -> Option<PeerHello> {
        if (payload.len() != 13 && payload.len() != 45) || payload[0] != PEER_HELLO_KIND {
            return None;
        }
        Some(PeerHello {
            node: u16::from_le_bytes([payload[1], payload[2]]),
            worker: u16::from_le_bytes([payload[3], payload[4]]),
            incarnation: u32::from_le_bytes(payload[5..9].try_into().ok()?),
            target_incarnation: u32::from_le_bytes(payload[9..13].try_into().ok()?),
            proof: payload.get(13..45).map(|p| p.try_into().expect("32 bytes")),
        })
    }
}

/// The environment variable naming the file that holds the cluster secret (read by
/// `tern_client::secret`).
pub const SECRET_FILE_ENV: &str = "TERN_CLUSTER_SECRET_FILE";

/// Whether listening on `addr` exposes a port beyond this host.
pub fn beyond_loopback(addr: &std::net::SocketAddr) -> bool {
    !addr.ip().is_loopback()
}

#[cfg(test)]
mod peer_tests {
    use super::*;

    #[test]
    fn peer_hello_round_trips_and_is_not_a_request() {
        for proof in [None, Some([5u8; 32])] {
            let h = PeerHello { node: 7, worker: 3, incarnation: 9, target_incarnation: 4, proof };
            let mut b = Vec::new();
            h.encode(&mut b);
            assert_eq!(PeerHello::decode(&b), Some(h));
            assert_eq!(PeerHello::decode(&b[..8]), None);
            assert_eq!(PeerHello::decode(&b[..b.len().min(20)]), if b.len() == 13 { Some(h) } else { None });
            assert!(Request::decode(&b).is_err(), "a peer greeting must never parse as a client request");
        }
    }
}
