//! openraft glue: the type configuration, the Raft timing, and the network between management
//! nodes. Raft RPCs travel on the mgmd port like every other request (`Request::RaftAppend` and
//! friends after a `Hello` with `Role::Peer`), their openraft payloads postcard-encoded. Nothing
//! outside this crate sees openraft types.

use crate::proto::{self, MemberReply, Reply, Request, Role};
use crate::state::{Command, CommandResult};
use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{BasicNode, RaftNetwork, RaftNetworkFactory};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::Cursor;
use std::time::Duration;
use tokio::net::TcpStream;

openraft::declare_raft_types!(
    /// Tern's Raft types: commands in, command results out, mgmd ids as node ids.
    pub TypeConfig:
        D = Command,
        R = CommandResult,
        NodeId = u64,
        Node = BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type Raft = openraft::Raft<TypeConfig>;

/// Raft timing between mgmds (independent of the data nodes' heartbeats): a leader heartbeats
/// every 100 ms and a follower that hears nothing for 0.6–1.2 s starts an election, so a dead
/// leader is replaced within about 1.5 s while a busy test machine does not trigger elections.
pub fn raft_config() -> openraft::Config {
    openraft::Config {
        cluster_name: "tern".into(),
        heartbeat_interval: 100,
        election_timeout_min: 600,
        election_timeout_max: 1200,
        install_snapshot_timeout: 2000,
        max_payload_entries: 64,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(1000),
        max_in_snapshot_log_to_keep: 100,
        snapshot_max_chunk_size: 1 << 20,
        ..Default::default()
    }
}

/// Creates one `PeerClient` per target mgmd.
pub struct Network {
    /// The cluster secret's proof this mgmd sends its peers.
    pub proof: Option<[u8; 32]>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerClient {
        PeerClient { target, addr: node.addr.clone(), stream: None, proof: self.proof }
    }
}

/// A connection to one other mgmd, opened on first use and again after any error.
pub struct PeerClient {
    target: u64,
    addr: String,
    stream: Option<TcpStream>,
    proof: Option<[u8; 32]>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct PeerError(String);

type RpcResult<T, E> = Result<T, RPCError<u64, BasicNode, RaftError<u64, E>>>;

impl PeerClient {
    async fn connect(&mut self, ttl: Duration) -> Result<TcpStream, std::io::Error> {
        let mut stream = tokio::time::timeout(ttl, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
        stream.set_nodelay(true)?;
        let hello = Request::Hello {
            magic: proto::PROTOCOL_MAGIC,
            version: proto::PROTOCOL_VERSION,
            role: Role::Peer,
            proof: self.proof,
        };
        proto::write_frame(&mut stream, &proto::encode(&hello)).await?;
        let reply = tokio::time::timeout(ttl, proto::read_frame(&mut stream))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "hello timed out"))?
            .map_err(std::io::Error::other)?;
        match proto::decode_reply(&reply) {
            Ok(Reply::Hello { .. }) => Ok(stream),
            other => Err(std::io::Error::other(format!("unexpected hello reply {other:?}"))),
        }
    }

    /// Sends one request and returns the `Raft` reply bytes.
    async fn call(&mut self, req: Request, ttl: Duration) -> Result<Vec<u8>, (bool, String)> {
        let mut stream = match self.stream.take() {
            Some(s) => s,
            None => self.connect(ttl).await.map_err(|e| (true, format!("connect to {}: {e}", self.addr)))?,
        };
        let frame = proto::encode(&req);
        let exchange = async {
            proto::write_frame(&mut stream, &frame).await.map_err(|e| e.to_string())?;
            proto::read_frame(&mut stream).await.map_err(|e| e.to_string())
        };
        let reply = match tokio::time::timeout(ttl, exchange).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(e)) => return Err((false, format!("{}: {e}", self.addr))),
            Err(_) => return Err((false, format!("{}: no reply within {ttl:?}", self.addr))),
        };
        match proto::decode_reply(&reply) {
            Ok(Reply::Raft(bytes)) => {
                self.stream = Some(stream);
                Ok(bytes)
            }
            Ok(other) => Err((false, format!("{}: unexpected reply {other:?}", self.addr))),
            Err(e) => Err((false, e)),
        }
    }

    async fn rpc<Req: Serialize, Resp: DeserializeOwned, E: std::error::Error + DeserializeOwned>(
        &mut self,
        wrap: fn(Vec<u8>) -> Request,
        req: &Req,
        option: &RPCOption,
    ) -> RpcResult<Resp, E> {
        let payload = postcard::to_allocvec(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let bytes = self.call(wrap(payload), option.hard_ttl()).await.map_err(|(unreachable, text)| {
            if unreachable {
                RPCError::Unreachable(Unreachable::new(&PeerError(text)))
            } else {
                RPCError::Network(NetworkError::new(&PeerError(text)))
            }
        })?;
        let result: Result<Resp, RaftError<u64, E>> =
            postcard::from_bytes(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<u64>, openraft::error::Infallible> {
        // One entry always fits (a catalog is at most CATALOG_BYTES_MAX); a batch may not.
        let size: usize = rpc.entries.iter().map(entry_size).sum();
        if size > proto::FRAME_MAX / 2 && rpc.entries.len() > 1 {
            let hint = (rpc.entries.len() / 2).max(1) as u64;
            return Err(RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(hint)));
        }
        self.rpc(Request::RaftAppend, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<u64>, InstallSnapshotError> {
        self.rpc(Request::RaftSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<u64>, openraft::error::Infallible> {
        self.rpc(Request::RaftVote, &rpc, &option).await
    }
}

/// An upper bound of an entry's encoded size.
fn entry_size(e: &openraft::Entry<TypeConfig>) -> usize {
    match &e.payload {
        openraft::EntryPayload::Normal(Command::SetCatalog { bytes, .. }) => bytes.len() + 64,
        _ => 256,
    }
}

/// Serves a Raft RPC received from a peer: decode, hand to openraft, encode the result.
pub async fn serve_raft(raft: &Raft, req: &Request) -> Result<Vec<u8>, String> {
    fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
        postcard::from_bytes(bytes).map_err(|e| format!("malformed raft request: {e}"))
    }
    fn encode<T: Serialize>(v: &T) -> Vec<u8> {
        postcard::to_allocvec(v).expect("serialising into a Vec cannot fail")
    }
    Ok(match req {
        Request::RaftAppend(b) => encode(&raft.append_entries(decode(b)?).await),
        Request::RaftVote(b) => encode(&raft.vote(decode(b)?).await),
        Request::RaftSnapshot(b) => encode(&raft.install_snapshot(decode(b)?).await),
        _ => return Err("not a raft request".into()),
    })
}

/// The leader named by a NotLeader answer, if known.
pub fn member(id: Option<u64>, node: Option<&BasicNode>) -> Option<MemberReply> {
    Some(MemberReply { id: id?, addr: node?.addr.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::error::Fatal;
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LeaderId, LogId, Membership, SnapshotMeta, Vote};
    use std::collections::{BTreeMap, BTreeSet};

    fn round_trip<T: Serialize + DeserializeOwned>(v: &T) -> T {
        postcard::from_bytes(&postcard::to_allocvec(v).unwrap()).unwrap()
    }

    /// Every openraft message crossing the network survives postcard (no serde feature postcard
    /// cannot express), including the remote errors.
    #[test]
    fn raft_messages_round_trip_through_postcard() {
        let members: BTreeMap<u64, BasicNode> = [(65, BasicNode::new("a:1")), (66, BasicNode::new("b:2"))].into();
        let membership = Membership::new(vec![BTreeSet::from([65, 66])], members);
        let log_id = LogId::new(CommittedLeaderId::new(3, 65), 9);
        let append = AppendEntriesRequest::<TypeConfig> {
            vote: Vote::new_committed(3, 65),
            prev_log_id: Some(log_id),
            entries: vec![
                Entry { log_id, payload: EntryPayload::Membership(membership.clone()) },
                Entry {
                    log_id,
                    payload: EntryPayload::Normal(Command::SetCatalog { version: 2, bytes: vec![1; 300] }),
                },
                Entry { log_id, payload: EntryPayload::Blank },
            ],
            leader_commit: Some(log_id),
        };
        assert_eq!(format!("{:?}", round_trip(&append)), format!("{append:?}"));
        let snapshot = InstallSnapshotRequest::<TypeConfig> {
            vote: Vote::new(4, 66),
            meta: SnapshotMeta {
                last_log_id: Some(log_id),
                last_membership: openraft::StoredMembership::new(Some(log_id), membership),
                snapshot_id: "3-9-1".into(),
            },
            offset: 5,
            data: vec![7; 10],
            done: true,
        };
        assert_eq!(format!("{:?}", round_trip(&snapshot)), format!("{snapshot:?}"));
        let vote = VoteRequest { vote: Vote { leader_id: LeaderId::new(5, 67), committed: false }, last_log_id: None };
        assert_eq!(round_trip(&vote), vote);
        let fatal: Result<VoteResponse<u64>, RaftError<u64>> = Err(RaftError::Fatal(Fatal::Stopped));
        assert_eq!(format!("{:?}", round_trip(&fatal)), format!("{fatal:?}"));
        let mismatch: Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>> =
            Err(RaftError::APIError(InstallSnapshotError::SnapshotMismatch(openraft::error::SnapshotMismatch {
                expect: openraft::SnapshotSegmentId { id: "a".into(), offset: 0 },
                got: openraft::SnapshotSegmentId { id: "b".into(), offset: 4 },
            })));
        assert_eq!(format!("{:?}", round_trip(&mismatch)), format!("{mismatch:?}"));
    }
}
