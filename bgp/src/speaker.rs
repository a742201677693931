//! `bgp::speaker`: the RIB task. It owns the RIB and one Adj-RIB-Out per established
//! peer, runs a session task per configured peer plus the listener, and moves routes:
//! peer UPDATEs through import checks into the RIB, best-path changes out to every
//! other peer (export rules, packed UPDATEs) and to whoever installs routes (the FIB
//! task), locally originated routes (blocks, borrowed addresses) in as paths of our own.
//!
//! One owner for the routing state, as DESIGN.md asks: sessions talk to this task over
//! channels, nothing else touches the RIB.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use tokio::sync::{mpsc, oneshot};

use crate::fsm::{Negotiated, SessionConfig};
use crate::rib::export::{AdjRibOut, ExportPolicy};
use crate::rib::import::ImportPolicy;
use crate::rib::{Best, BestChange, PeerSource, Rib};
use crate::session::listener::{Listener, Refused};
use crate::session::{self, Command, DriverConfig, SessionEvent, SessionHandle};
use crate::wire::{
    Capability, CodecOptions, Family, GracefulRestart, GracefulRestartFamily, Message, Nlri,
    PathAttributes, Update,
};

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
}

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
    /// The current Loc-RIB.
    Routes(oneshot::Sender<Vec<(IpNet, Best)>>),
    /// Stop every session with this message and end the task.
    Shutdown(Option<String>),
}

/// What the speaker reports.
#[derive(Debug)]
pub enum SpeakerEvent {
    /// Loc-RIB changes (for the FIB).
    Routes(Vec<BestChange>),
    /// A session came up.
    PeerUp(SocketAddr, Box<Negotiated>),
    /// A session went down.
    PeerDown(SocketAddr, String),
    /// A peer's route was refused by the import checks.
    Rejected(SocketAddr, String),
    /// A connection from an address that is not a peer was refused.
    Refused(SocketAddr),
}

struct Peer {
    cfg: PeerConfig,
    handle: SessionHandle,
    source: Option<Arc<PeerSource>>,
    out: Option<(AdjRibOut, CodecOptions, bool)>,
}

/// Starts the speaker; returns its command channel. Sessions start at once.
pub async fn spawn(
    cfg: SpeakerConfig,
    events: mpsc::Sender<SpeakerEvent>,
) -> std::io::Result<mpsc::Sender<SpeakerCommand>> {
    let (ctx, crx) = mpsc::channel(64);
    let (stx, srx) = mpsc::channel(1024);
    let listener = match cfg.listen {
        Some(a) => Some(Listener::bind(a)?),
        None => None,
    };
    let mut peers = HashMap::new();
    for p in &cfg.peers {
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
            capabilities: capabilities(),
        };
        let dc = DriverConfig {
            fsm,
            peer: p.address,
            local_addr: p.local_address,
            password: p.password.clone(),
            ttl_security: p.ttl_security,
            write_high_water: session::DEFAULT_WRITE_HIGH_WATER,
        };
        let handle = session::spawn(dc, stx.clone());
        if let Some(l) = &listener {
            l.add_peer(handle.clone(), p.password.as_deref())?;
        }
        let _ = handle.send(Command::Start).await;
        peers.insert(
            p.address.ip(),
            Peer {
                cfg: p.clone(),
                handle,
                source: None,
                out: None,
            },
        );
    }
    let (rtx, rrx) = mpsc::channel(16);
    if let Some(l) = listener {
        tokio::spawn(l.run(rtx));
    }
    let me = Arc::new(PeerSource {
        address: IpAddr::V4(cfg.router_id),
        router_id: cfg.router_id,
        asn: cfg.local_as,
        ebgp: false,
        rr_client: false,
        local: true,
    });
    let task = Task {
        rib: Rib::new(cfg.max_paths),
        cfg,
        peers,
        events,
        me,
    };
    tokio::spawn(task.run(crx, srx, rrx));
    Ok(ctx)
}

/// What we advertise: IPv4 and IPv6 unicast, route refresh (plain and enhanced), and
/// graceful restart awareness, so peers send End-of-RIB.
fn capabilities() -> Vec<Capability> {
    vec![
        Capability::Multiprotocol(Family::IPV4_UNICAST),
        Capability::Multiprotocol(Family::IPV6_UNICAST),
        Capability::RouteRefresh,
        Capability::EnhancedRouteRefresh,
        Capability::GracefulRestart(GracefulRestart {
            restart_state: false,
            notification: false,
            restart_time: 120,
            families: [Family::IPV4_UNICAST, Family::IPV6_UNICAST]
                .into_iter()
                .map(|family| GracefulRestartFamily {
                    family,
                    forwarding_preserved: false,
                })
                .collect(),
        }),
    ]
}

struct Task {
    cfg: SpeakerConfig,
    rib: Rib,
    peers: HashMap<IpAddr, Peer>,
    events: mpsc::Sender<SpeakerEvent>,
    me: Arc<PeerSource>,
}

impl Task {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<SpeakerCommand>,
        mut sessions: mpsc::Receiver<SessionEvent>,
        mut refused: mpsc::Receiver<Refused>,
    ) {
        loop {
            tokio::select! {
                c = commands.recv() => match c {
                    None => return self.shutdown(None).await,
                    Some(SpeakerCommand::Shutdown(text)) => return self.shutdown(text).await,
                    Some(c) => self.command(c).await,
                },
                Some(e) = sessions.recv() => self.session(e).await,
                Some(r) = refused.recv() => {
                    let _ = self.events.send(SpeakerEvent::Refused(r.from)).await;
                }
            }
        }
    }

    async fn shutdown(&mut self, text: Option<String>) {
        for p in self.peers.values() {
            let _ = p.handle.send(Command::Stop(text.clone())).await;
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
                _ => Some(self.cfg.router_id),
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
                // The whole table, then End-of-RIB for each family.
                let mut out = AdjRibOut::new(self.export_policy(&cfg));
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
                if let Some(p) = self.peers.get_mut(&peer.ip()) {
                    p.source = Some(source);
                    p.out = Some((out, negotiated.tx, negotiated.enhanced_route_refresh));
                    let _ = p.handle.send(Command::SendUpdates(msgs)).await;
                }
                let _ = self
                    .events
                    .send(SpeakerEvent::PeerUp(peer, negotiated))
                    .await;
            }
            SessionEvent::Down { peer, reason } => {
                if let Some(p) = self.peers.get_mut(&peer.ip()) {
                    p.source = None;
                    p.out = None;
                }
                let changes = self.rib.peer_down(peer.ip());
                self.propagate(changes).await;
                let _ = self
                    .events
                    .send(SpeakerEvent::PeerDown(peer, reason.to_string()))
                    .await;
            }
            SessionEvent::Update { peer, update } => {
                let Some(p) = self.peers.get(&peer.ip()) else {
                    return;
                };
                let Some(source) = p.source.clone() else {
                    return;
                };
                let local_as = p.cfg.local_as.unwrap_or(self.cfg.local_as);
                let policy = ImportPolicy {
                    local_as,
                    allowas_in: p.cfg.allowas_in,
                    ebgp: source.ebgp,
                    peer_as: source.asn,
                    router_id: self.cfg.router_id,
                    cluster_id: self.cfg.cluster_id,
                };
                let (changes, rejected) = self.rib.import_update(&source, &update, &policy);
                if let Some(r) = rejected {
                    let _ = self
                        .events
                        .send(SpeakerEvent::Rejected(peer, r.to_string()))
                        .await;
                }
                self.propagate(changes).await;
            }
            SessionEvent::RouteRefresh { peer, refresh } => {
                let Some(p) = self.peers.get(&peer.ip()) else {
                    return;
                };
                if let Some((out, tx, enhanced)) = &p.out {
                    if let Ok(msgs) = out.refresh(refresh.family, tx, *enhanced) {
                        let _ = p.handle.send(Command::SendUpdates(msgs)).await;
                    }
                }
            }
            SessionEvent::StateChanged { .. } => {}
        }
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
            match out.apply(&changes, tx) {
                Ok(msgs) if !msgs.is_empty() => {
                    let _ = p.handle.send(Command::SendUpdates(msgs)).await;
                }
                _ => {}
            }
        }
        let _ = self.events.send(SpeakerEvent::Routes(changes)).await;
    }
}
