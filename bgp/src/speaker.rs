//! `bgp::speaker`: the RIB task. It owns the RIB and one Adj-RIB-Out per established
//! peer, runs a session task per configured peer plus the listener, and moves routes:
//! peer UPDATEs through import checks into the RIB, best-path changes out to every
//! other peer (export rules, packed UPDATEs) and to whoever installs routes (the FIB
//! task), locally originated routes (blocks, borrowed addresses) in as paths of our own.
//!
//! One owner for the routing state (docs/architecture.md): sessions talk to this task over
//! channels, nothing else touches the RIB.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use tokio::sync::{mpsc, oneshot};

use crate::fsm::{DownReason, Negotiated, SessionConfig, OPEN_HOLD_TIME};
use crate::rib::export::{AdjRibOut, ExportPolicy, Exported};
use crate::rib::import::ImportPolicy;
use crate::rib::{Best, BestChange, PeerSource, Rib};
use crate::session::listener::{Listener, Refused};
use crate::session::{self, Command, DriverConfig, SessionEvent, SessionHandle};
use crate::wire::{
    AddPathFamily, Capability, CodecOptions, Family, GracefulRestart, GracefulRestartFamily,
    Message, Nlri, PathAttributes, Update,
};

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
    /// suggestion); see [`SessionConfig::open_hold_time`].
    pub open_hold_time: Option<Duration>,
    /// Send hold time (RFC 9687; None: the RFC's default, at least 8 minutes).
    pub send_hold_time: Option<Duration>,
    /// Most paths taken from this peer (its Adj-RIB-In after the import checks); one
    /// more ends the session with Cease / Maximum Number of Prefixes Reached (RFC
    /// 4486) and keeps it down for [`LIMIT_HOLD_DOWN`] or longer. None: no limit.
    pub max_prefixes: Option<u32>,
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
            allowas_in: 0,
            restart_time: None,
            families: Vec::new(),
            open_hold_time: None,
            send_hold_time: None,
            max_prefixes: None,
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

/// How often UPDATEs held back for a session that stopped taking them are retried.
const BACKLOG_RETRY: Duration = Duration::from_millis(20);

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
    },
    /// Stop originating a route.
    Withdraw(IpNet),
    /// Start a session with a new peer (a configuration change); ignored if a peer
    /// with that address exists.
    AddPeer(PeerConfig),
    /// Close the session with a peer and forget it and its routes; the text goes into
    /// the NOTIFICATION (RFC 9003 shutdown message).
    RemovePeer(IpAddr, String),
    /// The current Loc-RIB.
    Routes(oneshot::Sender<Vec<(IpNet, Best)>>),
    /// Per-peer counters.
    PeerStats(oneshot::Sender<Vec<PeerStats>>),
    /// What one peer has been sent (its Adj-RIB-Out); `None` if it is not a peer or
    /// not established.
    Advertised(IpAddr, oneshot::Sender<Option<Vec<(IpNet, Exported)>>>),
    /// Stop every session with this message and end the task.
    Shutdown(Option<String>),
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
}

/// What the speaker tells whoever installs routes, on a channel of its own (see
/// [`spawn_routed`]) so that routes do not queue behind the owner's other work.
#[derive(Debug)]
pub enum RibNews {
    /// Loc-RIB changes.
    Changes(Vec<BestChange>),
    /// The Loc-RIB is complete: at once when we did not restart, else when our
    /// graceful restart is over (End-of-RIB from every peer, or the selection deferral
    /// timer). Routes an earlier run left in the kernel and nobody wants may go now.
    Converged,
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
    /// A peer's route was refused by the import checks.
    Rejected(SocketAddr, String),
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

struct Peer {
    cfg: PeerConfig,
    handle: SessionHandle,
    source: Option<Arc<PeerSource>>,
    out: Option<(AdjRibOut, CodecOptions, bool)>,
    /// The peer's graceful restart capability from the last session.
    graceful_restart: Option<GracefulRestart>,
    /// Families whose routes are stale, kept while the peer restarts (RFC 4724 helper).
    stale: Vec<Family>,
    /// Counts restarts, so the timer of an earlier restart cannot end a later one.
    restart_gen: u64,
    /// UPDATEs received.
    updates_in: u64,
    /// UPDATEs sent.
    updates_out: u64,
    /// The families negotiated with it and those it sent End-of-RIB for, this session.
    families: Vec<Family>,
    eor_in: Vec<Family>,
    /// While we restart: the session is up but its initial UPDATEs are held.
    held: Option<Negotiated>,
    /// Prefixes whose Loc-RIB changes the session could not take yet (its peer stopped
    /// reading and its queue is full). Only the prefixes are kept, not the UPDATEs, so
    /// memory stays bounded by the table however long the peer stalls; the UPDATEs are
    /// built from the Loc-RIB of the moment once the session takes commands again.
    deferred: BTreeSet<IpNet>,
    /// Route refresh requests waiting for the same reason (one per family).
    refreshes: Vec<Family>,
    /// Why we reset the session for passing a limit, said with its Down event.
    limit_reset: Option<String>,
    /// RFC 7606 errors already reported this session (attribute code, subcode): each
    /// kind is logged once with its bytes, not for every UPDATE a broken peer repeats.
    malformed_seen: Vec<(u8, u8)>,
}

/// Starts the speaker; returns its command channel. Sessions start at once. Loc-RIB
/// changes come as [`SpeakerEvent::Routes`] among the other events.
pub async fn spawn(
    cfg: SpeakerConfig,
    events: mpsc::Sender<SpeakerEvent>,
) -> std::io::Result<mpsc::Sender<SpeakerCommand>> {
    start(cfg, events, None).await
}

/// Starts the speaker with Loc-RIB changes on their own channel, for a FIB task that
/// takes them straight from the speaker.
pub async fn spawn_routed(
    cfg: SpeakerConfig,
    events: mpsc::Sender<SpeakerEvent>,
    routes: mpsc::Sender<RibNews>,
) -> std::io::Result<mpsc::Sender<SpeakerCommand>> {
    start(cfg, events, Some(routes)).await
}

async fn start(
    cfg: SpeakerConfig,
    events: mpsc::Sender<SpeakerEvent>,
    routes: Option<mpsc::Sender<RibNews>>,
) -> std::io::Result<mpsc::Sender<SpeakerCommand>> {
    let (ctx, crx) = mpsc::channel(64);
    let (stx, srx) = mpsc::channel(1024);
    let listener = match cfg.listen {
        Some(a) => Some(Listener::bind(a)?),
        None => None,
    };
    let listener = listener.map(Arc::new);
    let mut peers = HashMap::new();
    for p in &cfg.peers {
        let peer = start_peer(&cfg, p, &stx, listener.as_deref()).await?;
        peers.insert(p.address.ip(), peer);
    }
    let (rtx, rrx) = mpsc::channel(16);
    if let Some(l) = &listener {
        tokio::spawn(Arc::clone(l).run(rtx));
    }
    let me = Arc::new(PeerSource {
        address: IpAddr::V4(cfg.router_id),
        router_id: cfg.router_id,
        asn: cfg.local_as,
        ebgp: false,
        rr_client: false,
        local: true,
    });
    let (gtx, grx) = mpsc::channel(16);
    let deferral = cfg
        .peers
        .iter()
        .map(|p| Duration::from_secs(u64::from(p.restart_time.unwrap_or(DEFAULT_RESTART_TIME)) / 2))
        .fold(SELECTION_DEFERRAL, Duration::min);
    let own = own_addresses(&cfg.router_id, cfg.peers.iter());
    if let (Some(r), false) = (&routes, cfg.restarting) {
        let _ = r.send(RibNews::Converged).await;
    }
    let task = Task {
        routes,
        own,
        rib: Rib::new(cfg.max_paths),
        restarting: cfg.restarting,
        deferral_deadline: tokio::time::Instant::now() + deferral,
        cfg,
        peers,
        listener,
        sessions: stx,
        events,
        me,
        restart_timers: gtx,
    };
    tokio::spawn(task.run(crx, srx, rrx, grx));
    Ok(ctx)
}

/// Creates a peer's session task, registers it with the listener and starts it.
async fn start_peer(
    cfg: &SpeakerConfig,
    p: &PeerConfig,
    sessions: &mpsc::Sender<SessionEvent>,
    listener: Option<&Listener>,
) -> std::io::Result<Peer> {
    let fsm = SessionConfig {
        local_as: p.local_as.unwrap_or(cfg.local_as),
        peer_as: p.peer_as,
        router_id: cfg.router_id,
        hold_time: p.hold_time,
        keepalive: p.keepalive,
        connect_retry: p.connect_retry,
        passive: p.passive,
        delay_open: None,
        idle_hold: Duration::from_secs(1),
        idle_hold_max: Duration::from_secs(120),
        capabilities: capabilities(p, cfg.local_as, cfg.restarting, cfg.restarting),
        open_hold_time: p.open_hold_time.unwrap_or(OPEN_HOLD_TIME),
        send_hold_time: p.send_hold_time,
    };
    let dc = DriverConfig {
        fsm,
        peer: p.address,
        local_addr: p.local_address,
        password: p.password.clone(),
        ttl_security: p.ttl_security,
        write_high_water: session::DEFAULT_WRITE_HIGH_WATER,
    };
    let handle = session::spawn(dc, sessions.clone());
    if let Some(l) = listener {
        l.add_peer(handle.clone(), p.password.as_deref())?;
    }
    let _ = handle.send(Command::Start).await;
    Ok(Peer {
        cfg: p.clone(),
        handle,
        source: None,
        out: None,
        graceful_restart: None,
        stale: Vec::new(),
        restart_gen: 0,
        updates_in: 0,
        updates_out: 0,
        families: Vec::new(),
        eor_in: Vec::new(),
        held: None,
        deferred: BTreeSet::new(),
        refreshes: Vec::new(),
        limit_reset: None,
        malformed_seen: Vec::new(),
    })
}

/// The router id and every session's configured local addresses.
fn own_addresses<'a>(
    router_id: &Ipv4Addr,
    peers: impl Iterator<Item = &'a PeerConfig>,
) -> Arc<[IpAddr]> {
    let mut own = vec![IpAddr::V4(*router_id)];
    for p in peers {
        let v6 = p.local_v6.map(IpAddr::V6);
        for a in [p.local_address, v6].into_iter().flatten() {
            if !a.is_unspecified() && !own.contains(&a) {
                own.push(a);
            }
        }
    }
    own.into()
}

/// Graceful-restart time announced when the configuration names none (BIRD's and
/// Calico's default).
pub const DEFAULT_RESTART_TIME: u16 = 120;

/// What we advertise to peer `p`: its families (Multiprotocol), route refresh (plain
/// and enhanced), and graceful restart, so peers send End-of-RIB and keep our routes
/// for the restart time when our connection drops; `restarting` sets the R bit and
/// says our forwarding state was kept (F bits).
///
/// `forwarding_kept` stays true after our restart is over: our routes are still in
/// the kernel, so a peer whose session comes up only after the selection deferral
/// timer must still keep our routes until we send them again (with F clear it would
/// drop them at once and traffic to this node would stop until our table arrived).
fn capabilities(
    p: &PeerConfig,
    local_as: u32,
    restarting: bool,
    forwarding_kept: bool,
) -> Vec<Capability> {
    let families = if p.families.is_empty() {
        vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST]
    } else {
        p.families.clone()
    };
    let mut caps: Vec<Capability> = families
        .iter()
        .map(|f| Capability::Multiprotocol(*f))
        .collect();
    // ADD-PATH with iBGP peers, both ways: a reflector sends its clients the whole ECMP
    // set and takes several paths from them. eBGP peers get one path (we are their next
    // hop anyway) and are not offered the capability at all.
    if p.peer_as == p.local_as.unwrap_or(local_as) {
        caps.push(Capability::AddPath(
            families
                .iter()
                .map(|f| AddPathFamily {
                    family: *f,
                    receive: true,
                    send: true,
                })
                .collect(),
        ));
    }
    caps.extend([
        Capability::RouteRefresh,
        Capability::EnhancedRouteRefresh,
        Capability::GracefulRestart(GracefulRestart {
            restart_state: restarting,
            notification: false,
            restart_time: p.restart_time.unwrap_or(DEFAULT_RESTART_TIME).min(4095),
            families: families
                .into_iter()
                .map(|family| GracefulRestartFamily {
                    family,
                    forwarding_preserved: forwarding_kept,
                })
                .collect(),
        }),
    ]);
    caps
}

struct Task {
    cfg: SpeakerConfig,
    rib: Rib,
    peers: HashMap<IpAddr, Peer>,
    /// The listener, to register peers added later.
    listener: Option<Arc<Listener>>,
    /// Where session tasks report, for peers added later.
    sessions: mpsc::Sender<SessionEvent>,
    events: mpsc::Sender<SpeakerEvent>,
    /// Where Loc-RIB changes go when not among the events.
    routes: Option<mpsc::Sender<RibNews>>,
    me: Arc<PeerSource>,
    /// Restart timers of peers we help through a graceful restart report here.
    restart_timers: mpsc::Sender<(IpAddr, u64)>,
    /// Our own graceful restart is running (initial UPDATEs held).
    restarting: bool,
    /// When the selection deferral timer ends it.
    deferral_deadline: tokio::time::Instant,
    /// Our addresses, which no peer's route may have as next hop.
    own: Arc<[IpAddr]>,
}

/// Whether a session that went down this way keeps its routes while the peer restarts
/// (RFC 4724 §4.2): only a lost connection does. A NOTIFICATION either way ends graceful
/// restart because we do not advertise the RFC 8538 N bit, and an administrative stop
/// never keeps routes.
fn keeps_routes(reason: &DownReason) -> bool {
    matches!(reason, DownReason::ConnectionLost)
}

/// The families the peer's graceful restart capability covers: only those keep routes.
fn gr_families(gr: &GracefulRestart) -> Vec<Family> {
    [Family::IPV4_UNICAST, Family::IPV6_UNICAST]
        .into_iter()
        .filter(|f| gr.families.iter().any(|g| g.family == *f))
        .collect()
}

impl Task {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<SpeakerCommand>,
        mut sessions: mpsc::Receiver<SessionEvent>,
        mut refused: mpsc::Receiver<Refused>,
        mut restart_expired: mpsc::Receiver<(IpAddr, u64)>,
    ) {
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(self.deferral_deadline), if self.restarting => {
                    self.end_deferral(true).await;
                }
                Some((ip, generation)) = restart_expired.recv() => {
                    let current = self.peers.get(&ip).is_some_and(|p| p.restart_gen == generation);
                    if current {
                        self.end_restart(ip, None).await;
                    }
                }
                c = commands.recv() => match c {
                    None => return self.shutdown(None).await,
                    Some(SpeakerCommand::Shutdown(text)) => return self.shutdown(text).await,
                    Some(c) => self.command(c).await,
                },
                Some(e) = sessions.recv() => self.session(e).await,
                Some(r) = refused.recv() => {
                    let _ = self.events.send(SpeakerEvent::Refused(r.from)).await;
                }
                () = tokio::time::sleep(BACKLOG_RETRY), if self.backlogged() => {
                    self.flush_backlog();
                }
            }
        }
    }

    async fn shutdown(&mut self, text: Option<String>) {
        for p in self.peers.values() {
            send_soon(&p.handle, Command::Stop(text.clone()));
        }
    }

    /// Whether some session has UPDATEs or refreshes waiting for room in its queue.
    fn backlogged(&self) -> bool {
        self.peers
            .values()
            .any(|p| !p.deferred.is_empty() || !p.refreshes.is_empty())
    }

    /// Hands waiting changes and refreshes to the sessions that take commands again.
    fn flush_backlog(&mut self) {
        let rib = &self.rib;
        for p in self.peers.values_mut() {
            let Some((out, tx, enhanced)) = p.out.as_mut() else {
                p.deferred.clear();
                p.refreshes.clear();
                continue;
            };
            if !p.deferred.is_empty() {
                let Ok(permit) = p.handle.try_reserve() else {
                    continue;
                };
                let changes: Vec<BestChange> = std::mem::take(&mut p.deferred)
                    .into_iter()
                    .map(|prefix| BestChange {
                        prefix,
                        now: rib.best(&prefix).cloned(),
                    })
                    .collect();
                if let Ok(msgs) = out.apply(&changes, tx) {
                    if !msgs.is_empty() {
                        p.updates_out += msgs.len() as u64;
                        permit.send(Command::SendUpdates(msgs));
                    }
                }
            }
            // Refreshes after the deferred changes: they re-send what those set up.
            while let Some(&family) = p.refreshes.first() {
                let Ok(permit) = p.handle.try_reserve() else {
                    break;
                };
                p.refreshes.remove(0);
                if let Ok(msgs) = out.refresh(family, tx, *enhanced) {
                    p.updates_out += msgs.len() as u64;
                    permit.send(Command::SendUpdates(msgs));
                }
            }
        }
    }

    async fn command(&mut self, c: SpeakerCommand) {
        match c {
            SpeakerCommand::Originate { prefix, attrs } => {
                let nlri = Nlri::new(prefix);
                let next_hop = Some(self.cfg.router_id);
                let u = if prefix.addr().is_ipv4() {
                    Update {
                        attributes: PathAttributes { next_hop, ..attrs },
                        nlri: vec![nlri],
                        ..Update::default()
                    }
                } else {
                    Update {
                        attributes: attrs,
                        mp_reach: Some(crate::wire::MpReach {
                            family: Family::IPV6_UNICAST,
                            // Exported with the session's IPv6 address; never as IPv4.
                            next_hop: crate::wire::MpNextHop::V6 {
                                global: self.cfg.router_id.to_ipv6_mapped(),
                                link_local: None,
                            },
                            nlri: vec![nlri],
                            unparsed: None,
                        }),
                        ..Update::default()
                    }
                };
                let me = Arc::clone(&self.me);
                let changes = self.rib.apply_update(&me, &u);
                self.propagate(changes).await;
            }
            SpeakerCommand::Withdraw(prefix) => {
                let u = if prefix.addr().is_ipv4() {
                    Update {
                        withdrawn: vec![Nlri::new(prefix)],
                        ..Update::default()
                    }
                } else {
                    Update {
                        mp_unreach: Some(crate::wire::MpUnreach {
                            family: Family::IPV6_UNICAST,
                            withdrawn: vec![Nlri::new(prefix)],
                            unparsed: None,
                        }),
                        ..Update::default()
                    }
                };
                let me = Arc::clone(&self.me);
                let changes = self.rib.apply_update(&me, &u);
                self.propagate(changes).await;
            }
            SpeakerCommand::Routes(reply) => {
                let _ = reply.send(self.rib.iter().map(|(p, b)| (*p, b.clone())).collect());
            }
            SpeakerCommand::AddPeer(p) => {
                if self.peers.contains_key(&p.address.ip()) {
                    return;
                }
                match start_peer(&self.cfg, &p, &self.sessions, self.listener.as_deref()).await {
                    Ok(peer) => {
                        self.peers.insert(p.address.ip(), peer);
                        self.own =
                            own_addresses(&self.cfg.router_id, self.peers.values().map(|p| &p.cfg));
                    }
                    Err(e) => {
                        let _ = self
                            .events
                            .send(SpeakerEvent::PeerDown(
                                p.address,
                                format!("cannot start the session: {e}"),
                            ))
                            .await;
                    }
                }
            }
            SpeakerCommand::RemovePeer(ip, text) => {
                let Some(p) = self.peers.remove(&ip) else {
                    return;
                };
                if let Some(l) = &self.listener {
                    l.remove_peer(ip);
                }
                send_soon(&p.handle, Command::Stop(Some(text)));
                let changes = self.rib.peer_down(ip);
                self.propagate(changes).await;
            }
            SpeakerCommand::PeerStats(reply) => {
                let _ = reply.send(
                    self.peers
                        .iter()
                        .map(|(a, p)| PeerStats {
                            address: *a,
                            updates_in: p.updates_in,
                            updates_out: p.updates_out,
                            advertised: p.out.as_ref().map_or(0, |(o, _, _)| o.len() as u64),
                            received: self.rib.paths_from(*a),
                        })
                        .collect(),
                );
            }
            SpeakerCommand::Advertised(ip, reply) => {
                let sent = self
                    .peers
                    .get(&ip)
                    .and_then(|p| p.out.as_ref())
                    .map(|(o, _, _)| o.iter().map(|(n, e)| (*n, e.clone())).collect());
                let _ = reply.send(sent);
            }
            SpeakerCommand::Shutdown(_) => {}
        }
    }

    fn export_policy(&self, p: &PeerConfig) -> ExportPolicy {
        let local_as = p.local_as.unwrap_or(self.cfg.local_as);
        ExportPolicy {
            peer: p.address.ip(),
            ebgp: p.peer_as != local_as,
            local_as,
            router_id: self.cfg.router_id,
            cluster_id: self.cfg.cluster_id,
            peer_is_client: p.rr_client,
            next_hop_self: p.next_hop_self,
            local_v4: match p.local_address {
                Some(IpAddr::V4(a)) => Some(a),
                _ => p.local_v4,
            },
            local_v6: p.local_v6.or(match p.local_address {
                Some(IpAddr::V6(a)) => Some(a),
                _ => None,
            }),
        }
    }

    async fn session(&mut self, e: SessionEvent) {
        match e {
            SessionEvent::Up { peer, negotiated } => {
                let Some(cfg) = self.peers.get(&peer.ip()).map(|p| p.cfg.clone()) else {
                    return;
                };
                let local_as = cfg.local_as.unwrap_or(self.cfg.local_as);
                let source = Arc::new(PeerSource {
                    address: peer.ip(),
                    router_id: negotiated.peer_id,
                    asn: negotiated.peer_asn,
                    ebgp: negotiated.peer_asn != local_as,
                    rr_client: cfg.rr_client,
                    local: false,
                });
                // RFC 4724 §4.2: stale routes of a family whose forwarding state the
                // peer did not keep (or with no graceful restart at all now) go at once.
                let not_kept: Vec<Family> = match self.peers.get(&peer.ip()) {
                    Some(p) => p
                        .stale
                        .iter()
                        .copied()
                        .filter(|f| {
                            !negotiated.peer_graceful_restart.as_ref().is_some_and(|g| {
                                g.families
                                    .iter()
                                    .any(|x| x.family == *f && x.forwarding_preserved)
                            })
                        })
                        .collect(),
                    None => Vec::new(),
                };
                for f in not_kept {
                    self.end_restart(peer.ip(), Some(f)).await;
                }
                let restarting = self.restarting;
                if let Some(p) = self.peers.get_mut(&peer.ip()) {
                    p.graceful_restart = negotiated.peer_graceful_restart.clone();
                    p.source = Some(source);
                    p.families = negotiated.families.clone();
                    p.eor_in.clear();
                    p.malformed_seen.clear();
                    p.held = restarting.then(|| (*negotiated).clone());
                }
                if !restarting {
                    self.send_initial(peer.ip(), &negotiated).await;
                }
                let _ = self
                    .events
                    .send(SpeakerEvent::PeerUp(peer, negotiated))
                    .await;
                self.check_deferral().await;
            }
            SessionEvent::Down { peer, reason: down } => {
                let ip = peer.ip();
                let mut kept = None;
                let mut reason = down.to_string();
                if let Some(p) = self.peers.get_mut(&ip) {
                    if let Some(why) = p.limit_reset.take() {
                        reason = format!("{reason}: {why}");
                    }
                    let was_up = p.source.is_some();
                    p.source = None;
                    p.out = None;
                    p.held = None;
                    p.deferred.clear();
                    p.refreshes.clear();
                    match p.graceful_restart.as_ref() {
                        Some(gr) if was_up && keeps_routes(&down) => {
                            p.stale = gr_families(gr);
                            p.restart_gen += 1;
                            kept = Some((gr.restart_time, p.restart_gen, p.stale.clone()));
                        }
                        // A session that never came up again leaves the earlier
                        // restart (and its timer) as it was.
                        _ if !was_up && !p.stale.is_empty() => {}
                        _ => p.stale.clear(),
                    }
                }
                let text = match kept {
                    Some((secs, generation, families)) => {
                        self.rib.mark_stale(ip);
                        // Families the capability did not list are not kept.
                        for f in [Family::IPV4_UNICAST, Family::IPV6_UNICAST] {
                            if !families.contains(&f) {
                                let changes = self.rib.sweep_stale(ip, Some(f));
                                self.propagate(changes).await;
                            }
                        }
                        let timers = self.restart_timers.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_secs(u64::from(secs))).await;
                            let _ = timers.send((ip, generation)).await;
                        });
                        format!("{reason}; graceful restart: keeping its routes for up to {secs} s")
                    }
                    None if self.peers.get(&ip).is_some_and(|p| !p.stale.is_empty()) => {
                        format!("{reason}; still in graceful restart")
                    }
                    None => {
                        let changes = self.rib.peer_down(ip);
                        self.propagate(changes).await;
                        reason
                    }
                };
                let _ = self.events.send(SpeakerEvent::PeerDown(peer, text)).await;
            }
            SessionEvent::Update { peer, update } => {
                let Some(p) = self.peers.get_mut(&peer.ip()) else {
                    return;
                };
                p.updates_in += 1;
                let Some(source) = p.source.clone() else {
                    return;
                };
                let mut first_seen = Vec::new();
                for e in &update.errors {
                    if !p.malformed_seen.contains(&(e.code, e.subcode)) {
                        p.malformed_seen.push((e.code, e.subcode));
                        let n = update.announced_count();
                        let plural = if n == 1 { "" } else { "es" };
                        first_seen.push(format!(
                            "malformed UPDATE ({n} prefix{plural}): {e}; further ones like it this session are not logged"
                        ));
                    }
                }
                let local_as = p.cfg.local_as.unwrap_or(self.cfg.local_as);
                let policy = ImportPolicy {
                    local_as,
                    allowas_in: p.cfg.allowas_in,
                    ebgp: source.ebgp,
                    peer_as: source.asn,
                    router_id: self.cfg.router_id,
                    cluster_id: self.cfg.cluster_id,
                    own: Arc::clone(&self.own),
                };
                for text in first_seen {
                    let _ = self.events.send(SpeakerEvent::Rejected(peer, text)).await;
                }
                let end_of_rib = update.end_of_rib_family();
                let (changes, rejected) = self.rib.import_update(&source, &update, &policy);
                if let Some(r) = rejected {
                    let _ = self
                        .events
                        .send(SpeakerEvent::Rejected(peer, r.to_string()))
                        .await;
                }
                self.propagate(changes).await;
                if self.over_limit(peer.ip()).await {
                    return;
                }
                if let Some(f) = end_of_rib {
                    self.end_restart(peer.ip(), Some(f)).await;
                    if let Some(p) = self.peers.get_mut(&peer.ip()) {
                        p.eor_in.push(f);
                    }
                    self.check_deferral().await;
                }
            }
            SessionEvent::RouteRefresh { peer, refresh } => {
                let Some(p) = self.peers.get_mut(&peer.ip()) else {
                    return;
                };
                // Queued like the backlog: answered as soon as the session takes
                // commands (at once, normally), one pending answer per family at most.
                if p.out.is_some() && !p.refreshes.contains(&refresh.family) {
                    p.refreshes.push(refresh.family);
                }
                self.flush_backlog();
            }
            SessionEvent::StateChanged { peer, to, .. } => {
                if self.peers.contains_key(&peer.ip()) {
                    let _ = self.events.send(SpeakerEvent::PeerState(peer, to)).await;
                }
            }
        }
    }

    /// After an UPDATE from `ip`: if its paths or all paths together are now over a
    /// limit, ends its session with Cease / Maximum Number of Prefixes Reached and
    /// drops its routes at once (not when the session reports it is down), so the
    /// table never holds more than the limit plus one UPDATE.
    async fn over_limit(&mut self, ip: IpAddr) -> bool {
        let Some(p) = self.peers.get(&ip) else {
            return false;
        };
        let held = self.rib.paths_from(ip);
        let total = self.rib.paths_total();
        let (limit, why) = match (p.cfg.max_prefixes, self.cfg.max_routes) {
            (Some(max), _) if held > u64::from(max) => (
                max,
                format!("it sent {held} paths, more than its limit of {max}"),
            ),
            (_, Some(max)) if total > max => (
                u32::try_from(max).unwrap_or(u32::MAX),
                format!("the table holds {total} paths from all peers, more than the limit of {max} (this peer sent {held})"),
            ),
            _ => return false,
        };
        let family = p.families.first().copied().unwrap_or(Family::IPV4_UNICAST);
        let why = format!(
            "{why}; its routes are dropped and the session stays down for at least {} s",
            LIMIT_HOLD_DOWN.as_secs()
        );
        let _ = self
            .events
            .send(SpeakerEvent::Rejected(
                p.cfg.address,
                format!("prefix limit: {why}"),
            ))
            .await;
        if let Some(p) = self.peers.get_mut(&ip) {
            p.limit_reset = Some(why);
            // No graceful restart for these routes: the peer is the problem. Without
            // a source, UPDATEs still queued from the session are ignored.
            p.graceful_restart = None;
            p.stale.clear();
            p.source = None;
            p.out = None;
            p.deferred.clear();
            p.refreshes.clear();
            send_soon(
                &p.handle,
                Command::Reset(
                    crate::wire::Notification::max_prefixes(family, limit),
                    LIMIT_HOLD_DOWN,
                ),
            );
        }
        let changes = self.rib.peer_down(ip);
        self.propagate(changes).await;
        true
    }

    /// Sends a peer that just came up the whole table, then End-of-RIB per family.
    async fn send_initial(&mut self, ip: IpAddr, negotiated: &Negotiated) {
        let Some(cfg) = self.peers.get(&ip).map(|p| p.cfg.clone()) else {
            return;
        };
        let mut out = AdjRibOut::new(self.export_policy(&cfg))
            .with_families(&negotiated.families)
            .with_add_path(&negotiated.add_path_send);
        let all: Vec<BestChange> = self
            .rib
            .iter()
            .map(|(p, b)| BestChange {
                prefix: *p,
                now: Some(b.clone()),
            })
            .collect();
        let mut msgs = out.apply(&all, &negotiated.tx).unwrap_or_default();
        for f in &negotiated.families {
            if let Ok(b) = Message::Update(Update::end_of_rib(*f)).encode(&negotiated.tx) {
                msgs.push(b);
            }
        }
        if let Some(p) = self.peers.get_mut(&ip) {
            p.out = Some((out, negotiated.tx, negotiated.enhanced_route_refresh));
            p.deferred.clear();
            p.refreshes.clear();
            p.updates_out += msgs.len() as u64;
            let _ = p.handle.send(Command::SendUpdates(msgs)).await;
        }
    }

    /// While we restart: once every peer is up and has sent End-of-RIB for each of its
    /// families, our Loc-RIB is complete and the held UPDATEs can go.
    async fn check_deferral(&mut self) {
        if !self.restarting {
            return;
        }
        // A peer without graceful restart need not send End-of-RIB: its being up is
        // enough.
        let complete = self.peers.values().all(|p| {
            p.source.is_some()
                && (p.graceful_restart.is_none() || p.families.iter().all(|f| p.eor_in.contains(f)))
        });
        if complete {
            self.end_deferral(false).await;
        }
    }

    /// Ends our graceful restart: each held peer gets its table and End-of-RIB, and
    /// later OPENs no longer carry the R bit (the F bits stay: our routes are still in
    /// the kernel).
    async fn end_deferral(&mut self, by_timer: bool) {
        self.restarting = false;
        self.cfg.restarting = false;
        let held: Vec<(IpAddr, Negotiated)> = self
            .peers
            .iter_mut()
            .filter_map(|(ip, p)| p.held.take().map(|n| (*ip, n)))
            .collect();
        for (ip, n) in &held {
            self.send_initial(*ip, n).await;
        }
        for p in self.peers.values() {
            let caps = capabilities(&p.cfg, self.cfg.local_as, false, true);
            send_soon(&p.handle, Command::SetCapabilities(caps));
        }
        if let Some(r) = &self.routes {
            let _ = r.send(RibNews::Converged).await;
        }
        let _ = self
            .events
            .send(SpeakerEvent::RestartComplete {
                peers: held.len(),
                by_timer,
            })
            .await;
    }

    /// The peer re-sent a family's routes (End-of-RIB), did not keep its forwarding
    /// state, or its restart time ran out (`None`: every family): what it did not send
    /// again is withdrawn.
    async fn end_restart(&mut self, ip: IpAddr, family: Option<Family>) {
        let Some(p) = self.peers.get_mut(&ip) else {
            return;
        };
        let before = p.stale.len();
        p.stale.retain(|f| family.is_some_and(|x| x != *f));
        if p.stale.len() == before {
            return;
        }
        let changes = self.rib.sweep_stale(ip, family);
        self.propagate(changes).await;
    }

    /// Sends Loc-RIB changes to every established peer and to the owner.
    async fn propagate(&mut self, changes: Vec<BestChange>) {
        if changes.is_empty() {
            return;
        }
        for p in self.peers.values_mut() {
            let Some((out, tx, _)) = p.out.as_mut() else {
                continue;
            };
            if p.deferred.is_empty() {
                match p.handle.try_reserve() {
                    Ok(permit) => {
                        match out.apply(&changes, tx) {
                            Ok(msgs) if !msgs.is_empty() => {
                                p.updates_out += msgs.len() as u64;
                                permit.send(Command::SendUpdates(msgs));
                            }
                            _ => {}
                        }
                        continue;
                    }
                    Err(mpsc::error::TrySendError::Closed(())) => continue,
                    Err(mpsc::error::TrySendError::Full(())) => {}
                }
            }
            // The session's queue is full: its peer is not reading (RFC 9687; the send
            // hold timer ends it). Waiting here would stall every other peer, the FIB
            // and the control socket with it, so only the prefixes are noted.
            p.deferred.extend(changes.iter().map(|c| c.prefix));
        }
        match &self.routes {
            Some(r) => {
                let _ = r.send(RibNews::Changes(changes)).await;
            }
            None => {
                let _ = self.events.send(SpeakerEvent::Routes(changes)).await;
            }
        }
    }
}

/// Queues a command for a session without waiting; if its queue is full (the peer is
/// not reading), a task delivers it once there is room, so the RIB task never waits
/// on one session. Used for rare commands (stop, capabilities), never per UPDATE.
fn send_soon(handle: &SessionHandle, c: Command) {
    if let Err(mpsc::error::TrySendError::Full(c)) = handle.try_send(c) {
        let h = handle.clone();
        tokio::spawn(async move {
            let _ = h.send(c).await;
        });
    }
}
