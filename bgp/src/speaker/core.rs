//! The speaker's decisions, sans-IO: [`Speaker::handle`] takes one [`Input`] (a session
//! event, a command, a timer that expired, a session's queue filling up or draining)
//! with the time of the moment and returns the [`Output`]s to carry out, in order. It
//! reads no clock, spawns nothing, awaits nothing and holds no channel: the driver
//! (`task`) does all of that, and tests replay inputs against it directly
//! (`bgp/tests/scenarios`).
//!
//! Flow control: the core sends to a session only while it believes the session takes
//! commands. When the driver finds a session's queue full it says [`Input::Stalled`];
//! from then on only the prefixes of later changes are noted (memory bounded by the
//! table), and [`Input::Writable`] sends what the Loc-RIB holds for them at that moment.

mod operate;
mod pack;
mod policy;
mod queries;
mod send;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ipnet::IpNet;

use crate::fsm::Negotiated;
use crate::policy::{PeerPolicy, RouteSource};
use crate::rib::export::{AdjRibOut, Exports};
use crate::rib::{PeerSource, Rib};
use crate::session::{DriverConfig, SessionEvent};
use crate::wire::{Capability, Family, Notification, PathAttributes, RefreshSubtype, Update};

use super::gr::{Down, OwnRestart, Progress};
use super::peer::{self, Feed, Out, Peer};
use super::policy::{OwnRoute, OwnRoutes};
use super::{PeerConfig, RibNews, SpeakerConfig, SpeakerEvent, LIMIT_HOLD_DOWN};

/// A timer the core asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TimerId {
    /// The restart time of a peer we help through a graceful restart, for its restart
    /// number `generation`.
    Restart {
        /// The peer.
        peer: IpAddr,
        /// Which restart.
        generation: u64,
    },
    /// Our own selection deferral timer.
    Deferral,
    /// The Loc-RIB's table kept its prefixes for a while: pack it (`core/pack.rs`).
    Pack,
}

/// What the core is told.
#[derive(Debug)]
pub enum Input {
    /// A session reported something.
    Session(SessionEvent),
    /// Originate a route of our own.
    Originate {
        /// The prefix.
        prefix: IpNet,
        /// Its attributes (ORIGIN, communities); AS_PATH empty.
        attrs: PathAttributes,
        /// Where it comes from, for export policy.
        source: RouteSource,
        /// Its interface, for export policy.
        interface: Option<String>,
    },
    /// Replace a peer's route policy (see [`super::SpeakerCommand::SetPolicy`]).
    SetPolicy(IpAddr, Arc<PeerPolicy>),
    /// Stop originating a route.
    Withdraw(IpNet),
    /// A new peer (ignored if a peer with that address exists).
    AddPeer(PeerConfig),
    /// Forget a peer and its routes; the text goes into the NOTIFICATION.
    RemovePeer(IpAddr, String),
    /// The session of an added peer could not be started: forget the peer.
    StartFailed(IpAddr),
    /// A timer expired.
    Timer(TimerId),
    /// The session's queue was full: an [`Output::Send`] to it did not fit.
    Stalled(IpAddr),
    /// The session takes commands again.
    Writable(IpAddr),
}

/// Rare commands for a session, queued without waiting on it.
#[derive(Debug, Clone)]
pub enum Control {
    /// Stop, with this shutdown message (RFC 9003).
    Stop(Option<String>),
    /// End the session with this NOTIFICATION and stay down at least this long.
    Reset(Notification, Duration),
    /// Capabilities for the next OPEN.
    SetCapabilities(Vec<Capability>),
}

/// What the core asks for, to be carried out in order.
#[derive(Debug)]
pub enum Output {
    /// Queue these UPDATEs (encoded) for the session of this peer.
    Send(IpAddr, Vec<Bytes>),
    /// Say [`Input::Writable`] for this peer once its session has taken what was sent
    /// to it so far: at once if it has.
    Wake(IpAddr),
    /// A rare command for the session of this peer.
    Control(IpAddr, Control),
    /// Start a session for a peer (a configured or added one) and register it with
    /// the listener.
    StartSession(Box<DriverConfig>),
    /// Stop a removed peer's session with this message and forget it.
    DropSession(IpAddr, String),
    /// Loc-RIB news for whoever installs routes.
    Rib(RibNews),
    /// An event for the owner.
    Event(SpeakerEvent),
    /// The Loc-RIB's table was packed (`core/pack.rs`): the memory its old nodes held
    /// is free, for the driver to give back to the system.
    Packed,
    /// Arm timer `id` for `at`, or cancel it (`None`).
    Timer {
        /// Which.
        id: TimerId,
        /// When it expires.
        at: Option<Instant>,
    },
}

impl Output {
    /// The bytes of the UPDATEs it sends, if it sends any.
    pub fn encoded_len(&self) -> usize {
        match self {
            Output::Send(_, msgs) => msgs.iter().map(Bytes::len).sum(),
            _ => 0,
        }
    }
}

/// The speaker's state: the RIB, every peer, our own restart.
pub struct Speaker {
    cfg: SpeakerConfig,
    rib: Rib,
    /// Ordered, so outputs come in the same order every run.
    peers: BTreeMap<IpAddr, Peer>,
    /// Our routes' source.
    me: Arc<PeerSource>,
    /// Our addresses, which no peer's route may have as next hop.
    own: Arc<[IpAddr]>,
    restart: OwnRestart,
    /// Our own routes' kinds, for export policy.
    origins: OwnRoutes,
    /// Draining (`tern drain`): every export carries GRACEFUL_SHUTDOWN.
    draining: bool,
    /// Inside [`Speaker::handle_batch`]: the prefixes whose Loc-RIB changes wait to be
    /// sent together.
    batch: Option<Vec<IpNet>>,
    /// The batch's size this [`Speaker::handle_batch`] (see `core/send.rs`).
    batch_limit: usize,
    /// Whether a batch was sent since [`Speaker::handle_batch`] began.
    batch_sent: bool,
    /// What peers were sent, each distinct export once.
    exports: Exports,
    /// When to pack the Loc-RIB's table.
    packing: pack::Packing,
    out: Vec<Output>,
}

impl Speaker {
    /// A speaker at `now`, with the outputs that start it (a session per configured
    /// peer; convergence at once, or the selection deferral timer when restarting).
    pub fn new(cfg: SpeakerConfig, now: Instant) -> (Speaker, Vec<Output>) {
        let me = Arc::new(PeerSource {
            address: IpAddr::V4(cfg.router_id),
            router_id: cfg.router_id,
            asn: cfg.local_as,
            ebgp: false,
            rr_client: false,
            local: true,
        });
        let mut out = Vec::new();
        let mut peers = BTreeMap::new();
        for p in &cfg.peers {
            out.push(Output::StartSession(Box::new(peer::driver_config(&cfg, p))));
            peers.insert(p.address.ip(), Peer::new(p.clone()));
        }
        if cfg.restarting {
            let at = now + OwnRestart::deferral(cfg.peers.iter());
            out.push(Output::Timer {
                id: TimerId::Deferral,
                at: Some(at),
            });
        } else {
            out.push(Output::Rib(RibNews::Converged));
        }
        let speaker = Speaker {
            own: peer::own_addresses(&cfg.router_id, cfg.peers.iter()),
            rib: Rib::new(cfg.max_paths),
            restart: OwnRestart::new(cfg.restarting),
            cfg,
            peers,
            me,
            origins: OwnRoutes::new(),
            draining: false,
            batch: None,
            batch_limit: usize::MAX,
            batch_sent: false,
            exports: Exports::default(),
            packing: pack::Packing::default(),
            out: Vec::new(),
        };
        (speaker, out)
    }

    /// Takes one input at time `now`; returns what to do, in order.
    pub fn handle(&mut self, now: Instant, input: Input) -> Vec<Output> {
        match input {
            Input::Session(e) => self.session(now, e),
            Input::Originate {
                prefix,
                attrs,
                source,
                interface,
            } => {
                self.origins.insert(prefix, OwnRoute { source, interface });
                let u = peer::own_route(self.cfg.router_id, prefix, attrs);
                let me = Arc::clone(&self.me);
                let changes = self.rib.apply_update(&me, &u);
                self.propagate(changes);
            }
            Input::Withdraw(prefix) => {
                self.origins.remove(&prefix);
                let u = peer::own_withdrawal(prefix);
                let me = Arc::clone(&self.me);
                let changes = self.rib.apply_update(&me, &u);
                self.propagate(changes);
            }
            Input::SetPolicy(ip, policy) => self.set_policy(ip, policy),
            Input::AddPeer(p) => {
                if !self.peers.contains_key(&p.address.ip()) {
                    let dc = peer::driver_config(&self.cfg, &p);
                    self.peers.insert(p.address.ip(), Peer::new(p));
                    self.own_changed();
                    self.out.push(Output::StartSession(Box::new(dc)));
                }
            }
            Input::StartFailed(ip) => {
                if self.peers.remove(&ip).is_some() {
                    self.own_changed();
                }
            }
            Input::RemovePeer(ip, text) => {
                if self.peers.remove(&ip).is_some() {
                    self.out.push(Output::DropSession(ip, text));
                    let changes = self.rib.peer_down(ip);
                    self.propagate(changes);
                }
            }
            Input::Timer(TimerId::Deferral) => {
                if self.restart.running() {
                    self.end_deferral(true);
                }
            }
            Input::Timer(TimerId::Pack) => self.pack_timer(now),
            Input::Timer(TimerId::Restart { peer, generation }) => {
                if self
                    .peers
                    .get(&peer)
                    .is_some_and(|p| p.gr.is_current(generation))
                {
                    self.end_restart(peer, None);
                }
            }
            Input::Stalled(ip) => {
                if let Some(p) = self.peers.get_mut(&ip) {
                    p.stalled = true;
                }
            }
            Input::Writable(ip) => {
                if let Some(p) = self.peers.get_mut(&ip) {
                    p.stalled = false;
                }
                self.flush(ip);
            }
        }
        self.note_shape(now);
        std::mem::take(&mut self.out)
    }

    fn own_changed(&mut self) {
        self.own = peer::own_addresses(&self.cfg.router_id, self.peers.values().map(|p| &p.cfg));
    }

    pub(super) fn event(&mut self, e: SpeakerEvent) {
        self.out.push(Output::Event(e));
    }

    fn session(&mut self, now: Instant, e: SessionEvent) {
        match e {
            SessionEvent::Up { peer, negotiated } => self.session_up(peer, negotiated),
            SessionEvent::Down { peer, reason } => self.session_down(now, peer, &reason),
            SessionEvent::Update { peer, update } => self.update(peer, &update),
            // Reported as the peer's last error; the session itself goes on waiting.
            SessionEvent::ConnectFailed { peer, why } => {
                self.event(SpeakerEvent::PeerDown(peer, why))
            }
            SessionEvent::RouteRefresh { peer, refresh } => {
                // Only a request is answered. BoRR / EoRR mark the peer's own answer to
                // a request of ours (RFC 7313; answering them would ping-pong between
                // two speakers), and other subtypes are ignored, as §5 says.
                if refresh.subtype != RefreshSubtype::Request {
                    return;
                }
                let Some(p) = self.peers.get_mut(&peer.ip()) else {
                    return;
                };
                // Answered as soon as the session takes commands (at once, normally),
                // one pending answer per family at most.
                if p.out.is_some() && !p.refreshes.contains(&refresh.family) {
                    p.refreshes.push(refresh.family);
                }
                self.flush(peer.ip());
            }
            SessionEvent::Trouble { peer, trouble } => {
                if self.peers.contains_key(&peer.ip()) {
                    self.event(SpeakerEvent::Trouble(peer, trouble));
                }
            }
            SessionEvent::StateChanged { peer, to, .. } => {
                if self.peers.contains_key(&peer.ip()) {
                    self.event(SpeakerEvent::PeerState(peer, to));
                }
            }
        }
    }

    fn session_up(&mut self, peer: SocketAddr, negotiated: Box<Negotiated>) {
        let ip = peer.ip();
        let Some(p) = self.peers.get(&ip) else {
            return;
        };
        let local_as = p.cfg.local_as.unwrap_or(self.cfg.local_as);
        let source = Arc::new(PeerSource {
            address: ip,
            router_id: negotiated.peer_id,
            asn: negotiated.peer_asn,
            ebgp: negotiated.peer_asn != local_as,
            rr_client: p.cfg.rr_client,
            local: false,
        });
        for f in p.gr.not_kept(negotiated.peer_graceful_restart.as_ref()) {
            self.end_restart(ip, Some(f));
        }
        let restarting = self.restart.running();
        if let Some(p) = self.peers.get_mut(&ip) {
            p.gr.session_up(&negotiated);
            p.source = Some(source);
            p.families = negotiated.families.clone();
            p.eor_in.clear();
            p.malformed_seen.clear();
            p.route_refresh = negotiated.route_refresh || negotiated.enhanced_route_refresh;
            p.negotiated = Some((*negotiated).clone());
            p.held = restarting.then(|| (*negotiated).clone());
        }
        if !restarting {
            self.send_initial(ip, &negotiated);
        }
        self.event(SpeakerEvent::PeerUp(peer, negotiated));
        self.check_deferral();
    }

    fn session_down(&mut self, now: Instant, peer: SocketAddr, reason: &crate::fsm::DownReason) {
        let ip = peer.ip();
        let mut text = reason.to_string();
        let Some(p) = self.peers.get_mut(&ip) else {
            let changes = self.rib.peer_down(ip);
            self.propagate(changes);
            self.event(SpeakerEvent::PeerDown(peer, text));
            return;
        };
        if let Some(why) = p.limit_reset.take() {
            text = format!("{text}: {why}");
        }
        // The text starts with the code's name ("Cease / Administrative Shutdown").
        let code = |t: &str| t.split(" / ").next().unwrap_or(t).to_string();
        match reason {
            crate::fsm::DownReason::NotificationReceived(t) => {
                *p.notifications_in.entry(code(t)).or_default() += 1;
                p.last_notification_in = Some(t.clone());
            }
            crate::fsm::DownReason::NotificationSent(t) => {
                *p.notifications_out.entry(code(t)).or_default() += 1;
                p.last_notification_out = Some(t.clone());
            }
            _ => {}
        }
        let was_up = p.source.is_some();
        p.clear_session();
        let text = match p.gr.session_down(was_up, reason) {
            Down::Kept {
                restart_time,
                generation,
                families,
            } => {
                self.rib.mark_stale(ip);
                // Families the capability did not list are not kept.
                for f in [Family::IPV4_UNICAST, Family::IPV6_UNICAST] {
                    if !families.contains(&f) {
                        let changes = self.rib.sweep_stale(ip, Some(f));
                        self.propagate(changes);
                    }
                }
                self.out.push(Output::Timer {
                    id: TimerId::Restart {
                        peer: ip,
                        generation,
                    },
                    at: Some(now + Duration::from_secs(u64::from(restart_time))),
                });
                if families.is_empty() {
                    // BIRD's default (`graceful restart aware`): a capability with no
                    // family, so nothing is kept (RFC 4724 §3).
                    format!(
                        "{text}; its graceful restart capability lists no family: no route kept"
                    )
                } else {
                    format!(
                        "{text}; graceful restart: keeping its routes for up to {restart_time} s"
                    )
                }
            }
            Down::StillRestarting => format!("{text}; still in graceful restart"),
            Down::Ended => {
                let changes = self.rib.peer_down(ip);
                self.propagate(changes);
                text
            }
        };
        self.event(SpeakerEvent::PeerDown(peer, text));
    }

    fn update(&mut self, peer: SocketAddr, update: &Update) {
        let ip = peer.ip();
        let Some(p) = self.peers.get_mut(&ip) else {
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
        for text in first_seen {
            self.event(SpeakerEvent::Rejected(peer, text));
        }
        let end_of_rib = update.end_of_rib_family();
        let Some(p) = self.peers.get_mut(&ip) else {
            return;
        };
        let (changes, rejected, refused) =
            peer::import(&mut self.rib, &self.cfg, &self.own, &p.cfg, &source, update);
        p.rejected.after_update(update, rejected.as_ref(), &refused);
        let texts = p.refused(false, refused);
        if let Some(r) = rejected {
            self.event(SpeakerEvent::Rejected(peer, r.to_string()));
        }
        for text in texts {
            self.event(SpeakerEvent::Rejected(peer, text));
        }
        self.propagate(changes);
        if self.over_limit(ip) {
            return;
        }
        if let Some(f) = end_of_rib {
            self.end_restart(ip, Some(f));
            if let Some(p) = self.peers.get_mut(&ip) {
                p.eor_in.push(f);
            }
            self.check_deferral();
        }
    }

    /// After an UPDATE from `ip`: if its paths or all paths together are now over a
    /// limit, ends its session with Cease / Maximum Number of Prefixes Reached and
    /// drops its routes at once (not when the session reports it is down), so the
    /// table never holds more than the limit plus one UPDATE.
    fn over_limit(&mut self, ip: IpAddr) -> bool {
        let Some(p) = self.peers.get_mut(&ip) else {
            return false;
        };
        let held = self.rib.paths_from(ip);
        let total = self.rib.paths_total();
        let Some(breach) =
            super::limits::check(held, total, p.cfg.max_prefixes, self.cfg.max_routes)
        else {
            return false;
        };
        let family = p.families.first().copied().unwrap_or(Family::IPV4_UNICAST);
        let address = p.cfg.address;
        p.limit_reset = Some(breach.why.clone());
        // No graceful restart for these routes: the peer is the problem. Without a
        // source, UPDATEs still queued from the session are ignored.
        p.gr.abandon();
        p.clear_session();
        self.event(SpeakerEvent::Rejected(
            address,
            format!("prefix limit: {}", breach.why),
        ));
        self.out.push(Output::Control(
            ip,
            Control::Reset(
                Notification::max_prefixes(family, breach.limit),
                LIMIT_HOLD_DOWN,
            ),
        ));
        let changes = self.rib.peer_down(ip);
        self.propagate(changes);
        true
    }

    /// Starts sending a peer that just came up the whole table, then End-of-RIB per
    /// family, a piece at a time ([`Speaker::feed`]). The first piece goes out even to a
    /// session believed stalled: the driver queues it behind what waits there.
    fn send_initial(&mut self, ip: IpAddr, negotiated: &Negotiated) {
        let Some(p) = self.peers.get_mut(&ip) else {
            return;
        };
        let mut rib = AdjRibOut::new(peer::export_policy(
            &self.cfg,
            &p.cfg,
            negotiated.local_address,
        ))
        .with_families(&negotiated.families)
        .with_add_path(&negotiated.add_path_send);
        rib.set_graceful_shutdown(self.draining);
        p.out = Some(Out {
            rib,
            tx: negotiated.tx,
            enhanced: negotiated.enhanced_route_refresh,
        });
        p.deferred.clear();
        p.refreshes.clear();
        p.feed = Some(Feed {
            after: None,
            families: negotiated.families.clone(),
        });
        self.feed(ip);
    }

    /// While we restart: once every peer is up and has sent End-of-RIB for each of its
    /// families, our Loc-RIB is complete and the held UPDATEs can go.
    fn check_deferral(&mut self) {
        let progress = self.peers.values().map(|p| Progress {
            up: p.source.is_some(),
            graceful: p.gr.negotiated(),
            families: &p.families,
            eor_in: &p.eor_in,
        });
        if self.restart.complete(progress) {
            self.out.push(Output::Timer {
                id: TimerId::Deferral,
                at: None,
            });
            self.end_deferral(false);
        }
    }

    /// Ends our graceful restart: each held peer gets its table and End-of-RIB, and
    /// later OPENs no longer carry the R bit (the F bits stay: our routes are still in
    /// the kernel).
    fn end_deferral(&mut self, by_timer: bool) {
        self.restart.finish();
        self.cfg.restarting = false;
        let held: Vec<(IpAddr, Negotiated)> = self
            .peers
            .iter_mut()
            .filter_map(|(ip, p)| p.held.take().map(|n| (*ip, n)))
            .collect();
        for (ip, n) in &held {
            self.send_initial(*ip, n);
        }
        for (ip, p) in &self.peers {
            let caps = peer::capabilities(&p.cfg, self.cfg.local_as, false, true);
            self.out
                .push(Output::Control(*ip, Control::SetCapabilities(caps)));
        }
        self.out.push(Output::Rib(RibNews::Converged));
        self.event(SpeakerEvent::RestartComplete {
            peers: held.len(),
            by_timer,
        });
    }

    /// The peer re-sent a family's routes (End-of-RIB), did not keep its forwarding
    /// state, or its restart time ran out (`None`: every family): what it did not send
    /// again is withdrawn.
    fn end_restart(&mut self, ip: IpAddr, family: Option<Family>) {
        if self.peers.get_mut(&ip).is_some_and(|p| p.gr.end(family)) {
            let changes = self.rib.sweep_stale(ip, family);
            self.propagate(changes);
        }
    }
}
