//! `bgp::speaker`: the RIB task. It owns the RIB and one Adj-RIB-Out per established
//! peer, runs a session task per configured peer plus the listener, and moves routes:
//! peer UPDATEs through import checks into the RIB, best-path changes out to every
//! other peer (export rules, packed UPDATEs) and to whoever installs routes (the FIB
//! task), locally originated routes (blocks, borrowed addresses) in as paths of our own.
//!
//! One owner for the routing state (docs/architecture.md): sessions talk to this task over
//! channels, nothing else touches the RIB. The decisions are made by the sans-IO
//! [`core::Speaker`] (inputs in, outputs out, no clock, no channels), with graceful
//! restart in [`gr`] and prefix limits in [`limits`]; `task` is the tokio driver that
//! owns the sessions, the listener and the timers and carries out the core's outputs.
//! This module holds the public types.

pub mod core;
mod deferred;
pub mod gr;
pub mod limits;
mod peer;
mod policy;
pub mod rejected;
mod task;

pub use crate::fsm::trouble::{Detail, NoticedBy, SessionTrouble};
pub use crate::session::{ConnectFailure, ConnectTrouble, Trouble};
pub use task::{set_release_freed, spawn, spawn_routed};
#[doc(hidden)]
pub use task::{spawn_with, Link, Spawner};

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use tokio::sync::oneshot;

use crate::fsm::counts::MessageCounts;
use crate::fsm::Negotiated;
use crate::policy::{PeerPolicy, RouteSource};
use crate::rib::export::Exported;
use crate::rib::{Best, BestChange};
use crate::wire::{Family, PathAttributes};

/// Hold time when the configuration sets none: RFC 4271's suggestion and what GoBGP and
/// FRR use (BIRD's default is 240 s), so a dead peer is noticed sooner. The one default:
/// the daemon's configuration uses it too.
pub const DEFAULT_HOLD_TIME: u16 = 90;

/// Time between connection attempts: short, so a node whose peers started a moment
/// after it (their listener not up yet: the connection was refused) reconverges in
/// seconds; long enough for a SYN retransmission on a lossy link (1 s) to complete.
pub const DEFAULT_CONNECT_RETRY: Duration = Duration::from_secs(3);

/// One configured peer.
#[derive(Debug, Clone)]
pub struct PeerConfig {
    /// Address and port.
    pub address: SocketAddr,
    /// The peer's AS.
    pub peer_as: u32,
    /// Our AS towards this peer, when not the speaker's (Calico's localASNumber).
    pub local_as: Option<u32>,
    /// Our address on this session (source address, and next hop we advertise).
    pub local_address: Option<IpAddr>,
    /// Our IPv6 address for IPv6 routes sent over this session.
    pub local_v6: Option<std::net::Ipv6Addr>,
    /// Our IPv4 address for IPv4 routes sent over this session when `local_address` is
    /// not IPv4 (IPv4 over an IPv6 session). None: such routes are not sent with us as
    /// next hop. Not the router id: with `CALICO_ROUTER_ID` (an address or `hash`) that
    /// need not be an address of this node.
    pub local_v4: Option<Ipv4Addr>,
    /// Hold time in seconds.
    pub hold_time: u16,
    /// Keepalive in seconds (None: a third of the hold time).
    pub keepalive: Option<u16>,
    /// Time between connection attempts.
    pub connect_retry: Duration,
    /// Only accept connections.
    pub passive: bool,
    /// TCP-MD5 password.
    pub password: Option<String>,
    /// GTSM maximum hops.
    pub ttl_security: Option<u8>,
    /// The peer is our route reflector client.
    pub rr_client: bool,
    /// Always advertise ourselves as next hop.
    pub next_hop_self: bool,
    /// Never advertise ourselves as next hop of a learnt route, also to an eBGP peer
    /// (Calico's `nextHopMode: Keep` / `keepOriginalNextHop`).
    pub next_hop_keep: bool,
    /// Calico's numAllowedLocalASNumbers.
    pub allowas_in: u8,
    /// Graceful-restart time we announce to this peer (seconds, at most 4095): how long
    /// it keeps our routes while we restart (Calico's nodeMeshMaxRestartTime /
    /// maxRestartTime). None: 120 s, BIRD's and Calico's default.
    pub restart_time: Option<u16>,
    /// Families offered on this session (Multiprotocol capabilities); empty means IPv4
    /// and IPv6 unicast.
    pub families: Vec<Family>,
    /// How long a connection may take to send its OPEN (None: 240 s, RFC 4271's
    /// suggestion); see [`crate::fsm::SessionConfig::open_hold_time`].
    pub open_hold_time: Option<Duration>,
    /// Send hold time (RFC 9687; None: the RFC's default, at least 8 minutes).
    pub send_hold_time: Option<Duration>,
    /// Most paths taken from this peer (its Adj-RIB-In after the import checks); one
    /// more ends the session with Cease / Maximum Number of Prefixes Reached (RFC
    /// 4486) and keeps it down for [`LIMIT_HOLD_DOWN`] or longer. None: no limit.
    pub max_prefixes: Option<u32>,
    /// Route policy (`tern_bgp::policy`): the import program runs on every route the
    /// peer sends, after the RFC import checks and before its Adj-RIB-In (a rejected
    /// route counts as a withdrawal of that prefix by the peer); the export program on
    /// every route we would send it (learnt, reflected and our own), before its
    /// Adj-RIB-Out, and its changes (communities, prepends, LOCAL_PREF) go into what is
    /// sent. None: accept everything unchanged (only the RFC rules apply).
    /// [`SpeakerCommand::SetPolicy`] replaces it on a running session.
    pub policy: Option<Arc<PeerPolicy>>,
}

impl PeerConfig {
    /// A peer at `address` in AS `peer_as` with the defaults: hold time
    /// [`DEFAULT_HOLD_TIME`] (keepalive a third), connect retry
    /// [`DEFAULT_CONNECT_RETRY`], active, no password, no GTSM, not a reflector client,
    /// both unicast families; callers override fields.
    pub fn new(address: SocketAddr, peer_as: u32) -> PeerConfig {
        PeerConfig {
            address,
            peer_as,
            local_as: None,
            local_address: None,
            local_v6: None,
            local_v4: None,
            hold_time: DEFAULT_HOLD_TIME,
            keepalive: None,
            connect_retry: DEFAULT_CONNECT_RETRY,
            passive: false,
            password: None,
            ttl_security: None,
            rr_client: false,
            next_hop_self: false,
            next_hop_keep: false,
            allowas_in: 0,
            restart_time: None,
            families: Vec::new(),
            open_hold_time: None,
            send_hold_time: None,
            max_prefixes: None,
            policy: None,
        }
    }
}

/// The speaker's settings.
#[derive(Debug, Clone)]
pub struct SpeakerConfig {
    /// Our BGP identifier.
    pub router_id: Ipv4Addr,
    /// Our AS.
    pub local_as: u32,
    /// Where to listen (None: do not accept connections).
    pub listen: Option<SocketAddr>,
    /// Further addresses to listen on beside `listen` (its port too, usually): with
    /// Calico's `bindMode: NodeIP` on a dual-stack node, the IPv6 address beside the
    /// IPv4 one, so peers of both families can dial in. Ignored without `listen`.
    pub extra_listen: Vec<SocketAddr>,
    /// Route reflector cluster id, when this node is a reflector.
    pub cluster_id: Option<Ipv4Addr>,
    /// Largest ECMP set.
    pub max_paths: usize,
    /// Peers.
    pub peers: Vec<PeerConfig>,
    /// We restarted with our forwarding state kept (our routes are still in the
    /// kernel): announce the graceful-restart R bit and F bits, and hold each peer's
    /// initial UPDATEs until every peer has sent End-of-RIB or the selection deferral
    /// timer runs out (RFC 4724 §4.1), so peers keep our routes meanwhile and never see
    /// a half table.
    pub restarting: bool,
    /// Most paths held from all peers together, so that peers cannot exhaust the
    /// node's memory between them: the peer whose UPDATE passes it is reset as for
    /// its own limit. None: no limit.
    pub max_routes: Option<u64>,
}

/// Shortest time a session ended for passing a prefix limit stays down (BIRD waits
/// 60 s before restarting a protocol after an error too); repeated resets back off
/// further, up to the FSM's longest idle hold.
pub const LIMIT_HOLD_DOWN: Duration = Duration::from_secs(60);

/// Longest time a restarting speaker holds its initial UPDATEs (RFC 4724's selection
/// deferral timer); never more than half the restart time announced to a peer, so no
/// helper gives up on our routes first.
pub const SELECTION_DEFERRAL: Duration = Duration::from_secs(30);

/// What the owner of the speaker can ask.
#[derive(Debug)]
pub enum SpeakerCommand {
    /// Originate a route of our own (an IPAM block, a borrowed address).
    Originate {
        /// The prefix.
        prefix: IpNet,
        /// Its attributes (ORIGIN, communities); AS_PATH empty.
        attrs: PathAttributes,
        /// Where it comes from, for export policy: `Originated` for blocks and
        /// service routes, `Kernel` for a workload's address borrowed from another
        /// node's block (BIRD learns those from the kernel).
        source: RouteSource,
        /// Its interface (a borrowed workload address: the workload's `cali*`
        /// interface), for policy's interface conditions.
        interface: Option<String>,
    },
    /// Stop originating a route.
    Withdraw(IpNet),
    /// Replace a peer's route policy without resetting its session: routes sent to it
    /// are judged again and only the difference is sent; paths it sent that the new
    /// import program rejects go at once, the rejected paths kept for `tern routes
    /// --received` are judged again (those now accepted enter at once), and the peer is
    /// asked to send its routes again (ROUTE-REFRESH, when negotiated) so that ones
    /// rejected before and not kept may pass.
    SetPolicy(IpAddr, Arc<PeerPolicy>),
    /// Start a session with a new peer (a configuration change); ignored if a peer
    /// with that address exists.
    AddPeer(PeerConfig),
    /// Close the session with a peer and forget it and its routes; the text goes into
    /// the NOTIFICATION (RFC 9003 shutdown message).
    RemovePeer(IpAddr, String),
    /// The current Loc-RIB.
    Routes(oneshot::Sender<Vec<(IpNet, Best)>>),
    /// The Loc-RIB entries `tern routes PREFIX|ADDR` asks for: the prefix itself, or,
    /// for an address with no route of its own, every route covering it.
    RoutesOf(IpNet, oneshot::Sender<Vec<(IpNet, Best)>>),
    /// Every path of these prefixes, for `tern routes --all PREFIX`.
    PathsOf(
        Vec<IpNet>,
        oneshot::Sender<Vec<(IpNet, Vec<Arc<crate::rib::Path>>)>>,
    ),
    /// Every path of every prefix (the Adj-RIBs-In after the import checks, our own
    /// routes included), in the RIB's order, for `tern routes --all|--count`.
    Paths(oneshot::Sender<Vec<(IpNet, Vec<Arc<crate::rib::Path>>)>>),
    /// Per-peer counters.
    PeerStats(oneshot::Sender<Vec<PeerStats>>),
    /// The Loc-RIB's size, without walking it.
    RibCounts(oneshot::Sender<RibCounts>),
    /// What one peer has been sent (its Adj-RIB-Out); `None` if it is not a peer or
    /// not established.
    Advertised(IpAddr, oneshot::Sender<Option<Vec<(IpNet, Exported)>>>),
    /// What one peer sent (`tern routes --received`): the paths it holds in the RIB and
    /// the rejected ones kept, only of this prefix if given; `None` if it is not a
    /// configured peer.
    Received(
        IpAddr,
        Option<IpNet>,
        oneshot::Sender<Option<rejected::Received>>,
    ),
    /// The next hops one peer has been sent, each with how many prefixes carry it and
    /// one of them (cheap: nothing of the Adj-RIB-Out is copied); `None` if it is not a
    /// peer or not established. For the diagnoser, which asks about once a second.
    AdvertisedNextHops(IpAddr, oneshot::Sender<Option<Vec<NextHopUse>>>),
    /// An operator's action on one peer, with the text for its NOTIFICATION; the
    /// answer says what was done, or why nothing was.
    Operate(
        IpAddr,
        PeerAction,
        String,
        oneshot::Sender<Result<String, String>>,
    ),
    /// Drain (`true`, RFC 8326 GRACEFUL_SHUTDOWN on every route) or stop draining;
    /// the answer says what was done.
    Drain(bool, oneshot::Sender<String>),
    /// Send the whole Loc-RIB to whoever installs routes as [`RibNews::Replay`], in
    /// pieces, after the news already sent (see there).
    Replay,
    /// Stop every session with this message and end the task.
    Shutdown(Option<String>),
    /// Stop because this speaker restarts (a daemon stopped by SIGTERM, its kernel
    /// routes left in place): sessions that negotiated graceful restart end without a
    /// NOTIFICATION, so their peers keep our routes for our restart time (RFC 4724
    /// §4.2); the others get this message, as with [`SpeakerCommand::Shutdown`].
    ShutdownForRestart(Option<String>),
}

/// What an operator asks of one peer (`tern reset`, `tern disable`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerAction {
    /// End the session with Cease / Administrative Reset; it starts again at once.
    Reset,
    /// Ask the peer to send its routes again (ROUTE-REFRESH), judged by the current
    /// import policy.
    SoftIn,
    /// Send the peer every route again under the current export policy.
    SoftOut,
    /// End the session with Cease / Administrative Shutdown and keep it down.
    Disable,
    /// Start a disabled peer's session again.
    Enable,
    /// BFD saw the peer go down (RFC 5882 §4.3): end the session with Cease / BFD
    /// Down (RFC 9384), its routes going at once, and let it start again.
    BfdDown,
}

/// Counters of one peer since it was configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerStats {
    /// The peer.
    pub address: IpAddr,
    /// UPDATE messages received.
    pub updates_in: u64,
    /// UPDATE messages sent (End-of-RIB markers included).
    pub updates_out: u64,
    /// Prefixes in its Adj-RIB-Out (0 when not established).
    pub advertised: u64,
    /// Paths held from it (its Adj-RIB-In after the import checks).
    pub received: u64,
    /// Routes from it its import policy rejected (each rejected announcement).
    pub rejected_import: u64,
    /// Routes its export policy kept from it (each time a route was judged).
    pub filtered_export: u64,
    /// NOTIFICATIONs it sent us, by error code name (`Cease`, `Hold Timer Expired`).
    pub notifications_in: BTreeMap<String, u64>,
    /// NOTIFICATIONs we sent it, by error code name.
    pub notifications_out: BTreeMap<String, u64>,
    /// The last NOTIFICATION it sent us, then the last we sent it (`Code / Subcode`,
    /// then any text), since it was configured.
    pub last_notification_in: Option<String>,
    /// See `last_notification_in`.
    pub last_notification_out: Option<String>,
    /// Messages (received, sent) by type since it was configured; filled in by the
    /// driver from the session task.
    pub messages: (MessageCounts, MessageCounts),
    /// What its session negotiated, while Established.
    pub negotiated: Option<Negotiated>,
    /// The operator disabled it (`tern disable`).
    pub disabled: bool,
}

/// The Loc-RIB's size, counted as paths come and go (the metrics ask each scrape).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RibCounts {
    /// IPv4 prefixes with a best path.
    pub ipv4_prefixes: u64,
    /// IPv6 prefixes with a best path.
    pub ipv6_prefixes: u64,
    /// Paths held from every source, our own included.
    pub paths: u64,
}

/// What the speaker tells whoever installs routes, on a channel of its own (see
/// [`spawn_routed`]) so that routes do not queue behind the owner's other work.
#[derive(Debug)]
pub enum RibNews {
    /// Loc-RIB changes.
    Changes(Vec<BestChange>),
    /// Loc-RIB entries as they are, not changes: a piece of the whole table, sent on
    /// [`SpeakerCommand::Replay`] because what turns entries into kernel routes changed
    /// (an IP pool, the normal route priority).
    Replay(Vec<BestChange>),
    /// The Loc-RIB is complete: at once when we did not restart, else when our
    /// graceful restart is over (End-of-RIB from every peer, or the selection deferral
    /// timer). Routes an earlier run left in the kernel and nobody wants may go now.
    Converged,
}

/// One next hop announced to a peer: how many prefixes carry it, and the first of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextHopUse {
    /// The next hop as sent.
    pub next_hop: IpAddr,
    /// A prefix sent with it.
    pub example: IpNet,
    /// How many prefixes were sent with it.
    pub prefixes: usize,
}

/// What the speaker reports.
#[derive(Debug)]
pub enum SpeakerEvent {
    /// Loc-RIB changes (for the FIB), when the speaker was started with [`spawn`];
    /// [`spawn_routed`] sends them as [`RibNews::Changes`] instead.
    Routes(Vec<BestChange>),
    /// A session came up.
    PeerUp(SocketAddr, Box<Negotiated>),
    /// A session went down.
    PeerDown(SocketAddr, String),
    /// Why a configured peer's session cannot get up, as data (connect attempts timed
    /// out or refused, with counts; a connect that succeeded after them; a
    /// NOTIFICATION before Established, decoded). [`SpeakerEvent::PeerDown`] still
    /// carries the text.
    Trouble(SocketAddr, Trouble),
    /// A peer's route was refused by the import checks, or one of its routes by its
    /// import or export policy (the first time per statement and direction, naming
    /// the statement); also malformed UPDATEs and prefix limits.
    Rejected(SocketAddr, String),
    /// A peer's route policy was replaced on its running session: what changed
    /// (paths withdrawn, differences sent, ROUTE-REFRESH asked for or not possible).
    PolicyChanged(SocketAddr, String),
    /// A connection from an address that is not a peer was refused.
    Refused(SocketAddr),
    /// A session's RFC 4271 state changed (`Connect`, `Active`, `OpenSent`, ...).
    PeerState(SocketAddr, crate::fsm::State),
    /// Our graceful restart is over: the initial UPDATEs went to `peers` peers, after
    /// End-of-RIB from every peer or (`by_timer`) after the selection deferral timer.
    RestartComplete {
        /// Peers whose initial UPDATEs had been held.
        peers: usize,
        /// The timer ended it, not End-of-RIB from every peer.
        by_timer: bool,
    },
}

/// Graceful-restart time announced when the configuration names none (BIRD's and
/// Calico's default).
pub const DEFAULT_RESTART_TIME: u16 = 120;
