//! The management protocol, spoken on the mgmd port by data nodes, API servers, `tern status` and
//! the other mgmds (Raft traffic), told apart by the role in `Hello` and the request kind.
//!
//! Framing: `[u32 LE payload length][payload]`, the payload a postcard-encoded `Request` or
//! `Reply`. A frame longer than `FRAME_MAX` is refused. The first request of a connection must be
//! `Hello` with `PROTOCOL_MAGIC` and `PROTOCOL_VERSION`; the server answers `Hello` or an `Error`.
//! Every request gets exactly one reply, in order. A bad frame (too long, undecodable, unknown kind,
//! not `Hello` first, too slow) gets an `Error` reply and the connection is closed.
//!
//! Cluster states travel in the types crate's own binary encoding (`ClusterState::encode`), so
//! this crate does not duplicate their layout.

use crate::state::{Applied, Command};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use tern_types::cluster::NodeId;

/// The largest frame either side accepts.
pub const FRAME_MAX: usize = 16 << 20;
/// "TMGM": identifies the protocol in `Hello`.
pub const PROTOCOL_MAGIC: u32 = 0x4d47_4d54;
pub const PROTOCOL_VERSION: u8 = 2;
/// The longest long poll a `WatchState` may ask for.
pub const WATCH_TIMEOUT_MS_MAX: u64 = 60_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    DataNode,
    Api,
    Admin,
    /// Another management node (Raft traffic).
    Peer,
}

/// A data node's heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatReq {
    pub node: NodeId,
    pub incarnation: u32,
    /// The cluster-state version the node has; the reply carries the state when it is newer.
    pub known_version: u64,
    /// Data nodes this node cannot reach.
    pub suspects: Vec<NodeId>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    Hello {
        magic: u32,
        version: u8,
        role: Role,
        /// The cluster secret's proof (`tern_types::secret`), when the caller has a secret.
        proof: Option<[u8; 32]>,
    },
    Heartbeat(HeartbeatReq),
    Propose(Command),
    GetState,
    GetCatalog,
    WatchState {
        known_version: u64,
        timeout_ms: u64,
    },
    Status,
    StopNode {
        node: NodeId,
    },
    StartNode {
        node: NodeId,
    },
    /// Raft RPCs between mgmds: postcard-encoded openraft requests.
    RaftAppend(Vec<u8>),
    RaftVote(Vec<u8>),
    RaftSnapshot(Vec<u8>),
}

/// Number of `Request` kinds (the postcard variant index is the first byte of a request).
pub const REQUEST_KINDS: u8 = 12;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatReply {
    /// How long the node may serve, counted from when it sent the heartbeat; 0 = no lease (the
    /// node is down, fenced or of an old incarnation, or leadership is not confirmed).
    pub lease_ms: u64,
    /// An operator asked this node to stop.
    pub stop: bool,
    /// The current version.
    pub version: u64,
    /// The encoded `ClusterState`, when newer than the heartbeat's `known_version`.
    pub state: Option<Vec<u8>>,
    /// The version of the catalog the management nodes hold (0: none).
    pub catalog_version: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateReply {
    /// Encoded `ClusterState` (it includes the `ClusterConfig`).
    pub state: Vec<u8>,
    pub catalog_version: u64,
    pub stop_requested: Vec<NodeId>,
    /// The failure detector of the answering leader (`None` from a follower).
    pub detector: Option<DetectorReport>,
}

/// What the leader's failure detector sees: the margins `tern status` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetectorReport {
    /// How long ago each data node's newest heartbeat arrived (nodes heard in this term).
    pub heard_ms: Vec<(NodeId, u64)>,
    /// The lease a heartbeat reply grants now.
    pub lease_ms: u64,
    /// The longest stretch the detector itself was not scheduled (credited to every node).
    pub late_ms_max: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberReply {
    pub id: u64,
    pub addr: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReply {
    /// The mgmd that answered.
    pub id: u64,
    pub leader: Option<u64>,
    pub term: u64,
    pub last_applied: u64,
    pub members: Vec<MemberReply>,
    pub state: StateReply,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    Hello {
        version: u8,
        mgmd: u64,
    },
    Heartbeat(HeartbeatReply),
    /// A proposal (or stop/start) was applied.
    Ok(Applied),
    /// This mgmd is not the leader; the leader's id and address when known.
    NotLeader {
        leader: Option<MemberReply>,
    },
    /// The command was applied and refused by the state machine (nothing changed).
    Rejected(String),
    /// A temporary failure (election in progress, timeout): try again.
    Unavailable(String),
    State(StateReply),
    /// `WatchState` ended without a newer version.
    Unchanged {
        version: u64,
    },
    Catalog {
        version: u64,
        bytes: Vec<u8>,
    },
    Status(StatusReply),
    Raft(Vec<u8>),
    /// A protocol error; the server closes the connection after it.
    Error(String),
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {0} bytes is over the {FRAME_MAX}-byte limit")]
    TooLarge(u64),
    #[error("empty frame")]
    Empty,
    #[error("connection closed")]
    Closed,
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    let mut out = postcard::to_extend(msg, vec![0u8; 4]).expect("serialising into a Vec cannot fail");
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&len.to_le_bytes());
    out
}

/// Decodes a request, telling an unknown kind from other malformed bytes.
pub fn decode_request(payload: &[u8]) -> Result<Request, String> {
    match payload.first() {
        Some(&kind) if kind >= REQUEST_KINDS => Err(format!("unknown request kind {kind}")),
        _ => postcard::from_bytes(payload).map_err(|e| format!("malformed request: {e}")),
    }
}

pub fn decode_reply(payload: &[u8]) -> Result<Reply, String> {
    postcard::from_bytes(payload).map_err(|e| format!("malformed reply: {e}"))
}

/// The payload length a frame header announces, checked against the limits.
pub fn frame_len(head: [u8; 4]) -> Result<usize, FrameError> {
    let len = u32::from_le_bytes(head) as usize;
    if len > FRAME_MAX {
        return Err(FrameError::TooLarge(len as u64));
    }
    if len == 0 {
        return Err(FrameError::Empty);
    }
    Ok(len)
}

/// Reads one frame from a blocking stream. Memory grows with the bytes that arrive, not with the
/// declared length.
pub fn read_frame_sync(r: &mut impl Read) -> Result<Vec<u8>, FrameError> {
    let mut head = [0u8; 4];
    if let Err(e) = r.read_exact(&mut head) {
        return Err(if e.kind() == std::io::ErrorKind::UnexpectedEof { FrameError::Closed } else { e.into() });
    }
    let len = frame_len(head)?;
    let mut buf = Vec::new();
    r.take(len as u64).read_to_end(&mut buf)?;
    if buf.len() != len {
        return Err(FrameError::Closed);
    }
    Ok(buf)
}

pub fn write_frame_sync(w: &mut impl Write, frame: &[u8]) -> std::io::Result<()> {
    w.write_all(frame)?;
    w.flush()
}

/// Reads one frame from an async stream (see `read_frame_sync`).
pub async fn read_frame<R: tokio::io::AsyncRead + Unpin>(r: &mut R) -> Result<Vec<u8>, FrameError> {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 4];
    if let Err(e) = r.read_exact(&mut head).await {
        return Err(if e.kind() == std::io::ErrorKind::UnexpectedEof { FrameError::Closed } else { e.into() });
    }
    let len = frame_len(head)?;
    let mut buf = Vec::new();
    r.take(len as u64).read_to_end(&mut buf).await?;
    if buf.len() != len {
        return Err(FrameError::Closed);
    }
    Ok(buf)
}

pub async fn write_frame<W: tokio::io::AsyncWrite + Unpin>(w: &mut W, frame: &[u8]) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    w.write_all(frame).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_kind_is_counted() {
        let samples = [
            Request::Hello { magic: PROTOCOL_MAGIC, version: 1, role: Role::DataNode, proof: Some([3; 32]) },
            Request::Heartbeat(HeartbeatReq { node: 1, incarnation: 2, known_version: 3, suspects: vec![4] }),
            Request::Propose(Command::StopNode { node: 1 }),
            Request::GetState,
            Request::GetCatalog,
            Request::WatchState { known_version: 1, timeout_ms: 2 },
            Request::Status,
            Request::StopNode { node: 1 },
            Request::StartNode { node: 1 },
            Request::RaftAppend(vec![1]),
            Request::RaftVote(vec![2]),
            Request::RaftSnapshot(vec![3]),
        ];
        assert_eq!(samples.len(), REQUEST_KINDS as usize);
        for (i, r) in samples.iter().enumerate() {
            let frame = encode(r);
            assert_eq!(frame[4] as usize, i);
            let payload = read_frame_sync(&mut &frame[..]).unwrap();
            assert_eq!(&decode_request(&payload).unwrap(), r);
        }
        assert!(decode_request(&[REQUEST_KINDS]).unwrap_err().contains("unknown request kind"));
        assert!(decode_request(&[1]).unwrap_err().contains("malformed"));
    }

    #[test]
    fn oversized_and_truncated_frames_fail_cleanly() {
        let huge = u32::MAX.to_le_bytes();
        assert!(matches!(read_frame_sync(&mut &huge[..]), Err(FrameError::TooLarge(_))));
        let mut short = 10u32.to_le_bytes().to_vec();
        short.extend_from_slice(&[1, 2, 3]);
        assert!(matches!(read_frame_sync(&mut &short[..]), Err(FrameError::Closed)));
        assert!(matches!(read_frame_sync(&mut &0u32.to_le_bytes()[..]), Err(FrameError::Empty)));
    }
}
