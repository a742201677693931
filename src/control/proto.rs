//! Control-socket messages. One JSON object per line each way:
//! request `{"version":1,"command":"peers","address":null}`, response
//! `{"version":1,"ok":true,"result":{...}}` or `{"version":1,"ok":false,"error":"..."}`.
//! Field names of the results are the stable JSON of `-o json` (docs/json.md): fields
//! may be added, never renamed or removed.

use serde::{Deserialize, Serialize};

/// How the daemon renders a large answer for the CLI (`tern routes`): the answer is then
/// one JSON string holding what the CLI prints, so that 100,000 routes are encoded once
/// and never decoded into a tree again by the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Render {
    /// The text table.
    Table,
    /// The JSON document, pretty-printed as `-o json` prints it.
    Json,
}

/// Protocol version; a daemon refuses requests of another major version.
pub const VERSION: u32 = 1;

/// A request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case")]
pub enum Request {
    /// Daemon summary and every peer.
    Status,
    /// Peers, or one peer.
    Peers {
        /// Only this peer address.
        #[serde(default)]
        address: Option<String>,
    },
    /// Loc-RIB (or one peer's Adj-RIB-Out).
    Routes {
        /// Only this prefix (exact) or the routes covering this address.
        #[serde(default)]
        prefix: Option<String>,
        /// Only routes from (or, with `advertised`, to) this peer.
        #[serde(default)]
        peer: Option<String>,
        /// Adj-RIB-Out of `peer` instead of the Loc-RIB.
        #[serde(default)]
        advertised: bool,
        /// Every path of each prefix, each with why it won or lost (`paths` of each
        /// [`RouteInfo`]).
        #[serde(default)]
        all: bool,
        /// Totals per family and per peer ([`RoutesCountReply`]) instead of routes.
        #[serde(default)]
        count: bool,
        /// Only this family: `ipv4` or `ipv6`.
        #[serde(default)]
        family: Option<String>,
        /// What this peer sent ([`ReceivedReply`]): accepted paths and rejected ones
        /// with why, instead of the Loc-RIB.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        received: Option<String>,
        /// Answer with the output people see, as one JSON string, instead of the
        /// document: what the CLI asks for its text and JSON output.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        render: Option<Render>,
    },
    /// What tern installed and how it differs from the kernel.
    Fib,
    /// Layer-2, next-hop and kernel findings.
    Diagnose,
    /// Liveness and readiness.
    Health,
    /// Re-read the datastore now.
    Reload,
    /// An action on one peer (root only): `reset`, `soft-in`, `soft-out`, `disable`
    /// or `enable`.
    PeerAction {
        /// The peer's address.
        address: String,
        /// What to do.
        action: String,
        /// Text for the NOTIFICATION of a reset or a disable (RFC 9003).
        #[serde(default)]
        message: Option<String>,
    },
    /// A live stream of session and route changes (`tern monitor`): the answer is
    /// one line per event until the client closes, each a [`MonitorEvent`], the
    /// first `{"type":"subscribed"}`.
    Monitor {
        /// Only this peer's session changes and the routes it provides.
        #[serde(default)]
        peer: Option<String>,
        /// Only route changes of prefixes inside this one (or covering this address).
        #[serde(default)]
        prefix: Option<String>,
    },
    /// Drain (`on`: RFC 8326 GRACEFUL_SHUTDOWN on every route sent, LOCAL_PREF 0 to
    /// iBGP peers) or stop draining (root only).
    Drain {
        /// Drain, or stop.
        on: bool,
    },
    /// Change the log filter at run time (root only): a level (`debug`) or a filter
    /// (`tern=debug,info`), as `log:` in `tern.yaml`.
    LogLevel {
        /// The new filter.
        level: String,
    },
}

impl Request {
    /// The requests that change the daemon rather than read it: only root may send
    /// them, and each is logged with who asked.
    pub fn is_action(&self) -> bool {
        matches!(
            self,
            Request::PeerAction { .. } | Request::LogLevel { .. } | Request::Drain { .. }
        )
    }

    /// The command line the request stands for, for the log.
    pub fn describe(&self) -> String {
        match self {
            Request::PeerAction {
                address, action, ..
            } => format!("{action} {address}"),
            Request::LogLevel { level } => format!("log-level {level}"),
            Request::Drain { on: true } => "drain".into(),
            Request::Drain { on: false } => "undrain".into(),
            other => format!("{other:?}"),
        }
    }
}

/// One event of `tern monitor` (docs/json.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonitorEvent {
    /// When (RFC 3339, milliseconds, UTC).
    pub time: String,
    /// `session`, `route`, `subscribed` (the first line) or `lagged` (events were
    /// lost because the client read too slowly; `text` says how many).
    #[serde(rename = "type")]
    pub kind: String,
    /// The peer: the session's, or the one whose path is now best.
    #[serde(default)]
    pub peer: Option<String>,
    /// The route's prefix.
    #[serde(default)]
    pub prefix: Option<String>,
    /// What happened: `Established`, `down: <why>`, a state name, `best via <next
    /// hops> (<source>)`, `withdrawn`.
    pub text: String,
}

/// The answer to an action: what was done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionReply {
    /// One line on what was done.
    pub done: String,
}

/// A request with its version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestEnvelope {
    /// [`VERSION`].
    pub version: u32,
    /// The request.
    #[serde(flatten)]
    pub request: Request,
}

/// A response with its version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseEnvelope {
    /// [`VERSION`].
    pub version: u32,
    /// Whether `result` holds the answer.
    pub ok: bool,
    /// The answer (a `*Reply` below, as JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// What went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The daemon itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DaemonInfo {
    /// tern's version.
    pub version: String,
    /// Process id.
    pub pid: u32,
    /// Node name.
    pub node: String,
    /// Router id.
    pub router_id: String,
    /// AS.
    pub asn: u32,
    /// Start time (RFC 3339).
    pub started: String,
    /// Seconds since start.
    pub uptime_s: u64,
    /// `file <path>` or `etcdv3 <endpoints>`.
    pub datastore: String,
    /// Store revision of the intent in force.
    pub intent_revision: Option<i64>,
    /// The last rejected snapshot's error, if the newest one was rejected.
    pub config_error: Option<String>,
    /// Why the datastore cannot be read right now, while the configuration in force
    /// stays (since when, and the store's reason); `None` when it answers.
    #[serde(default)]
    pub datastore_error: Option<String>,
    /// `tern drain` is in force: every route sent carries GRACEFUL_SHUTDOWN.
    #[serde(default)]
    pub draining: bool,
}

/// `tern status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusReply {
    /// The daemon.
    pub daemon: DaemonInfo,
    /// Every peer.
    pub peers: Vec<PeerInfo>,
}

/// One peer (`tern peers -o json`, docs/json.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PeerInfo {
    /// Peer address.
    pub address: String,
    /// Peer port.
    pub port: u16,
    /// Peer AS.
    pub asn: u32,
    /// Our AS on the session.
    pub local_asn: u32,
    /// `node-to-node mesh`, `route reflector`, `route reflector client`, `global`,
    /// `node specific`.
    #[serde(rename = "type")]
    pub kind: String,
    /// RFC 4271 state name: Idle, Connect, Active, OpenSent, OpenConfirm, Established.
    pub state: String,
    /// When the state was entered (RFC 3339).
    pub since: String,
    /// Seconds Established (0 when not).
    pub uptime_s: u64,
    /// Negotiated families (`ipv4-unicast`, `ipv6-unicast`).
    pub families: Vec<String>,
    /// Negotiated capabilities, by name.
    pub capabilities: Vec<String>,
    /// Prefixes received.
    pub prefixes_received: u64,
    /// Prefixes accepted by import.
    pub prefixes_accepted: u64,
    /// Prefixes advertised.
    pub prefixes_advertised: u64,
    /// Why the session last went down.
    pub last_error: Option<String>,
    /// Times the session left Established since the daemon started.
    #[serde(default)]
    pub flaps: u64,
    /// UPDATE messages received since the peer was configured.
    #[serde(default)]
    pub updates_in: u64,
    /// UPDATE messages sent since the peer was configured.
    #[serde(default)]
    pub updates_out: u64,
    /// Routes from the peer its import policy rejected (BGPFilters), each announcement
    /// counted, since the peer was configured.
    #[serde(default)]
    pub policy_rejected_in: u64,
    /// Times its export policy (BGPFilters, then Calico's export rules) kept a route
    /// from it, since the peer was configured.
    #[serde(default)]
    pub policy_filtered_out: u64,
    /// Messages received since the peer was configured, by type.
    #[serde(default)]
    pub messages_received: MessageCounts,
    /// Messages sent since the peer was configured, by type.
    #[serde(default)]
    pub messages_sent: MessageCounts,
    /// Negotiated hold time in seconds, while Established.
    #[serde(default)]
    pub hold_time: Option<u16>,
    /// Negotiated keepalive interval in seconds, while Established.
    #[serde(default)]
    pub keepalive: Option<u16>,
    /// The peer's BGP identifier, while Established.
    #[serde(default)]
    pub remote_router_id: Option<String>,
    /// Our end of the session's TCP connection (address), while Established.
    #[serde(default)]
    pub local_address: Option<String>,
    /// Our TCP port on the connection; null when down.
    #[serde(default)]
    pub local_port: Option<u16>,
    /// The peer's TCP port on the connection (179 when we connected); null when down.
    #[serde(default)]
    pub remote_port: Option<u16>,
    /// The last NOTIFICATION the peer sent us (`Code / Subcode`, then any text).
    #[serde(default)]
    pub last_notification_received: Option<String>,
    /// The last NOTIFICATION we sent the peer.
    #[serde(default)]
    pub last_notification_sent: Option<String>,
    /// Graceful restart: the peer's capability as negotiated (restart time and the
    /// families whose forwarding it keeps), `None` when it sent none.
    #[serde(default)]
    pub graceful_restart: Option<String>,
    /// A TCP-MD5 password is configured.
    #[serde(default)]
    pub md5: bool,
    /// The operator disabled the session (`tern disable`); `tern enable` starts it.
    #[serde(default)]
    pub disabled: bool,
    /// GTSM (RFC 5082) is on, with this many hops at most.
    #[serde(default)]
    pub gtsm_hops: Option<u8>,
    /// BGPFilters applied to the session, in order.
    #[serde(default)]
    pub filters: Vec<String>,
    /// BFD with the peer; null when BFD is off in tern.yaml.
    #[serde(default)]
    pub bfd: Option<BfdInfo>,
}

/// One peer's BFD session (`tern peers`, docs/json.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BfdInfo {
    /// `Up`, `Init`, `Down`, `AdminDown` (RFC 5880's names, as FRR and BIRD print
    /// them), or `none` while no session runs (BFD starts once the BGP session is
    /// Established).
    pub state: String,
    /// The peer's state as it last said.
    pub remote_state: String,
    /// Why the session last changed, in RFC 5880's words (`control detection time
    /// expired`, `neighbor signaled session down`, `no diagnostic`).
    pub diagnostic: String,
    /// Multi-hop (RFC 5883, port 4784) rather than single hop (RFC 5881, port 3784).
    pub multihop: bool,
    /// How long silence lasts before the peer is declared down, in milliseconds.
    pub detect_time_ms: u64,
    /// How often we send, in milliseconds; null while the peer asks for nothing.
    pub tx_interval_ms: Option<u64>,
    /// Times a BFD session with the peer went from Up to Down since the daemon started.
    pub downs: u64,
}

/// Messages of one direction, by type (`tern peers ADDR`, `tern status -o wide`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageCounts {
    /// OPEN.
    pub open: u64,
    /// UPDATE (End-of-RIB markers included).
    pub update: u64,
    /// NOTIFICATION.
    pub notification: u64,
    /// KEEPALIVE.
    pub keepalive: u64,
    /// ROUTE-REFRESH.
    pub route_refresh: u64,
}

impl MessageCounts {
    /// Every message.
    pub fn total(&self) -> u64 {
        self.open + self.update + self.notification + self.keepalive + self.route_refresh
    }
}

/// `tern peers`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PeersReply {
    /// Peers.
    pub peers: Vec<PeerInfo>,
}

/// A path's attributes as `tern routes` shows them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PathInfo {
    /// Next hops (every ECMP member).
    pub next_hops: Vec<String>,
    /// AS path as text (`64513 64514`, sets in braces).
    pub as_path: String,
    /// `igp`, `egp`, `incomplete`.
    pub origin: String,
    /// LOCAL_PREF.
    pub local_pref: Option<u32>,
    /// MED.
    pub med: Option<u32>,
    /// Standard communities (`aa:nn`).
    pub communities: Vec<String>,
    /// Large communities (`a:b:c`).
    pub large_communities: Vec<String>,
    /// Peer address, or `local`.
    pub peer: String,
    /// `bgp`, `block`, `borrowed`, `service`, `kernel`.
    pub source: String,
}

/// One Loc-RIB entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteInfo {
    /// Prefix.
    pub prefix: String,
    /// Best path.
    pub best: PathInfo,
    /// More than one path shares traffic.
    pub ecmp: bool,
    /// tern installed it in the kernel.
    pub installed: bool,
    /// With `--all`: every path, the best first, each with why it won or lost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<RoutePath>,
}

/// One path of a prefix (`tern routes --all`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoutePath {
    /// Its attributes, next hop and source.
    #[serde(flatten)]
    pub path: PathInfo,
    /// It is the best path.
    pub best: bool,
    /// It shares traffic with the best (ECMP), the best included.
    pub multipath: bool,
    /// Kept from before its peer restarted (graceful restart), not yet refreshed.
    pub stale: bool,
    /// The decision step that settled it (`local-pref`, `as-path-length`, `origin`,
    /// `med`, `external-over-internal`, `igp-cost`, `router-id`,
    /// `cluster-list-length`, `peer-address`, `path-id`, `equal`): for the best path
    /// the step that beat the runner-up, for another the step by which the best beat it.
    pub reason: String,
}

/// Paths and best paths of one family (`tern routes --count`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FamilyCount {
    /// `ipv4` or `ipv6`.
    pub family: String,
    /// Prefixes in the Loc-RIB.
    pub prefixes: u64,
    /// Paths held (every peer's, and our own).
    pub paths: u64,
}

/// Paths from one peer in one family (`tern routes --count`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerCount {
    /// Peer address, or `local` for the node's own routes.
    pub peer: String,
    /// `ipv4` or `ipv6`.
    pub family: String,
    /// Paths held from it (after the import checks and policy).
    pub paths: u64,
    /// How many of them are the best path of their prefix.
    pub best: u64,
}

/// `tern routes --count`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutesCountReply {
    /// One row per family.
    pub families: Vec<FamilyCount>,
    /// One row per peer and family with paths, by peer.
    pub peers: Vec<PeerCount>,
}

/// `tern routes`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoutesReply {
    /// Routes, by prefix.
    pub routes: Vec<RouteInfo>,
}

/// One path a peer sent (`tern routes --received PEER`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReceivedPath {
    /// Prefix.
    pub prefix: String,
    /// Its attributes and next hop: as the RIB holds them for an accepted path
    /// (after import policy's changes), as received for a rejected one.
    #[serde(flatten)]
    pub path: PathInfo,
    /// ADD-PATH path identifier (0 without ADD-PATH).
    #[serde(default)]
    pub path_id: u32,
    /// It entered the RIB.
    pub accepted: bool,
    /// It is the best path of its prefix.
    pub best: bool,
    /// Kept from before the peer restarted (graceful restart), not yet refreshed.
    pub stale: bool,
    /// Why it did not enter the RIB (absent when accepted): the import policy
    /// statement, the RFC import check, or the malformed attribute (RFC 7606).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_by: Option<String>,
}

/// `tern routes --received PEER`: the peer's Adj-RIB-In.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReceivedReply {
    /// The peer.
    pub peer: String,
    /// Accepted paths listed.
    pub accepted: u64,
    /// Rejected paths listed.
    pub rejected: u64,
    /// Rejections this session that were not kept: at most 10,000 rejected paths are
    /// kept per peer (some of those not kept may have been withdrawn since).
    pub rejected_not_kept: u64,
    /// The paths, by prefix; an accepted path before a rejected one.
    pub routes: Vec<ReceivedPath>,
}

/// `tern fib` and its rows: the FIB task's answer, defined where the task is.
pub use tern_fib::task::{FibReply, FibRoute};

/// One diagnostic finding (`fib::diag::Finding` as JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindingInfo {
    /// Kind (e.g. `peer-not-on-connected-subnet`).
    pub kind: String,
    /// What it is about (a peer, a next hop, a prefix).
    pub subject: String,
    /// What was observed.
    pub evidence: String,
    /// What to do.
    pub suggestion: String,
    /// `error`, `warning`, `info`.
    pub severity: String,
}

/// `tern diagnose`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DiagnoseReply {
    /// Findings, most severe first.
    pub findings: Vec<FindingInfo>,
}

/// `tern health`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HealthReply {
    /// The daemon's loops are running.
    pub live: bool,
    /// calico-node's readiness rules hold.
    pub ready: bool,
    /// Why not ready (or `ready`).
    pub reason: String,
}

/// `tern reload`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReloadReply {
    /// The new snapshot was accepted.
    pub accepted: bool,
    /// What changed, or why it was rejected.
    pub message: String,
}
