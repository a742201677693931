//! The speaker's tokio driver on a paused clock, with channels standing in for the
//! sessions (`speaker::spawn_with` and `Link::Channel`): no sockets, no real time.
//! Checks the plumbing the scenario tests cannot see: the timers the core asks for
//! fire at their virtual time, and a session whose queue is full stalls only itself,
//! gets the batch that did not fit once there is room, and then what changed meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a panic is the test failing

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipnet::IpNet;
use tern_bgp::fsm::{DownReason, Negotiated};
use tern_bgp::session::{Command, SessionEvent};
use tern_bgp::speaker::{
    self, Link, PeerConfig, RibNews, SpeakerCommand, SpeakerConfig, SpeakerEvent,
};
use tern_bgp::wire::{
    AsPath, CodecOptions, Family, GracefulRestart, GracefulRestartFamily, Message, Nlri, Origin,
    PathAttributes, Update,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

const US: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);

fn peer_addr(last: u8) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, last)), 179)
}

/// The fake sessions: per peer, the command queue's far end and where its events go.
type Sessions = Arc<Mutex<HashMap<IpAddr, (mpsc::Receiver<Command>, mpsc::Sender<SessionEvent>)>>>;

struct Harness {
    commands: mpsc::Sender<SpeakerCommand>,
    events: mpsc::Receiver<SpeakerEvent>,
    routes: mpsc::Receiver<RibNews>,
    sessions: Sessions,
}

impl Harness {
    /// A speaker with peers .2, .3, ... (eBGP, AS 65000 + last octet), each session a
    /// channel of 64 commands, or of 2 for peer `slow`.
    async fn start(peers: &[u8], restarting: bool, slow: Option<u8>) -> Harness {
        let cfg = SpeakerConfig {
            router_id: US,
            local_as: 65000,
            listen: None,
            extra_listen: Vec::new(),
            cluster_id: None,
            max_paths: 1,
            peers: peers
                .iter()
                .map(|p| PeerConfig {
                    local_address: Some(IpAddr::V4(US)),
                    restart_time: Some(40),
                    ..PeerConfig::new(peer_addr(*p), 65000 + u32::from(*p))
                })
                .collect(),
            restarting,
            max_routes: None,
        };
        let sessions: Sessions = Arc::default();
        let made = Arc::clone(&sessions);
        let spawner: speaker::Spawner = Box::new(move |dc, events| {
            let slow = slow.is_some_and(|s| dc.peer == peer_addr(s));
            let (tx, rx) = mpsc::channel(if slow { 2 } else { 64 });
            made.lock().unwrap().insert(dc.peer.ip(), (rx, events));
            Link::Channel(tx)
        });
        let (etx, events) = mpsc::channel(256);
        let (rtx, routes) = mpsc::channel(256);
        let commands = speaker::spawn_with(cfg, etx, Some(rtx), spawner)
            .await
            .unwrap();
        Harness {
            commands,
            events,
            routes,
            sessions,
        }
    }

    /// Feeds a session event as peer `last`'s session would.
    async fn session(&self, last: u8, e: SessionEvent) {
        let tx = self.sessions.lock().unwrap()[&peer_addr(last).ip()]
            .1
            .clone();
        tx.send(e).await.unwrap();
    }

    /// The next command the speaker queued for peer `last`'s session.
    async fn command(&self, last: u8) -> Command {
        let ip = peer_addr(last).ip();
        let mut rx = self
            .sessions
            .lock()
            .unwrap()
            .get_mut(&ip)
            .unwrap()
            .0
            .try_recv();
        // The driver runs in its own task: give it turns until something arrives.
        for _ in 0..100 {
            if rx.is_ok() {
                break;
            }
            tokio::task::yield_now().await;
            rx = self
                .sessions
                .lock()
                .unwrap()
                .get_mut(&ip)
                .unwrap()
                .0
                .try_recv();
        }
        rx.unwrap_or_else(|e| panic!("no command for {ip}: {e}"))
    }

    /// Whether peer `last`'s queue is empty after the driver had its turns.
    async fn no_command(&self, last: u8) -> bool {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        let ip = peer_addr(last).ip();
        self.sessions
            .lock()
            .unwrap()
            .get_mut(&ip)
            .unwrap()
            .0
            .is_empty()
    }

    /// The next event that matches `f`.
    async fn event(&mut self, f: impl Fn(&SpeakerEvent) -> bool) -> SpeakerEvent {
        loop {
            let e = tokio::time::timeout(Duration::from_secs(600), self.events.recv())
                .await
                .expect("an event within 600 s (virtual)")
                .expect("the speaker runs");
            if f(&e) {
                return e;
            }
        }
    }

    /// The next Loc-RIB news that matches `f`.
    async fn news(&mut self, f: impl Fn(&RibNews) -> bool) -> RibNews {
        loop {
            let n = tokio::time::timeout(Duration::from_secs(600), self.routes.recv())
                .await
                .expect("news within 600 s (virtual)")
                .expect("the speaker runs");
            if f(&n) {
                return n;
            }
        }
    }

    async fn originate(&self, prefix: &str) {
        let attrs = PathAttributes {
            origin: Some(Origin::Igp),
            ..PathAttributes::default()
        };
        let prefix: IpNet = prefix.parse().unwrap();
        self.commands
            .send(SpeakerCommand::Originate {
                prefix,
                attrs,
                source: tern_bgp::policy::RouteSource::Originated,
                interface: None,
            })
            .await
            .unwrap();
    }
}

fn negotiated(last: u8, gr: Option<u16>) -> Box<Negotiated> {
    Box::new(Negotiated {
        peer_asn: 65000 + u32::from(last),
        peer_id: Ipv4Addr::new(198, 51, 100, last),
        hold_time: 90,
        keepalive: 30,
        families: vec![Family::IPV4_UNICAST],
        rx: CodecOptions::modern(),
        tx: CodecOptions::modern(),
        route_refresh: true,
        enhanced_route_refresh: false,
        extended_next_hop_ipv4: false,
        peer_graceful_restart: gr.map(|restart_time| GracefulRestart {
            restart_state: false,
            notification: false,
            restart_time,
            families: vec![GracefulRestartFamily {
                family: Family::IPV4_UNICAST,
                forwarding_preserved: true,
            }],
        }),
        add_path_receive: Vec::new(),
        add_path_send: Vec::new(),
        local_address: None,
        local_port: None,
        remote_port: None,
    })
}

fn up(last: u8, gr: Option<u16>) -> SessionEvent {
    SessionEvent::Up {
        peer: peer_addr(last),
        negotiated: negotiated(last, gr),
    }
}

/// The prefixes announced by the UPDATEs of a SendUpdates command.
fn announced(c: Command) -> Vec<String> {
    let Command::SendUpdates(msgs) = c else {
        panic!("expected SendUpdates, got {c:?}");
    };
    let mut v = Vec::new();
    for m in msgs {
        if let Message::Update(u) = Message::decode(m, &CodecOptions::modern()).unwrap() {
            v.extend(u.nlri.iter().map(|n| n.prefix.to_string()));
        }
    }
    v
}

#[tokio::test(start_paused = true)]
async fn the_restart_timer_of_a_helped_peer_fires_at_its_restart_time() {
    let mut h = Harness::start(&[2], false, None).await;
    assert!(matches!(h.command(2).await, Command::Start));
    h.session(2, up(2, Some(10))).await;
    h.event(|e| matches!(e, SpeakerEvent::PeerUp(..))).await;
    let update = Update {
        attributes: PathAttributes {
            origin: Some(Origin::Igp),
            as_path: Some(AsPath::from_sequence([65002])),
            next_hop: Some(Ipv4Addr::new(198, 51, 100, 2)),
            ..PathAttributes::default()
        },
        nlri: vec![Nlri::new("198.18.2.0/26".parse().unwrap())],
        ..Update::default()
    };
    h.session(
        2,
        SessionEvent::Update {
            peer: peer_addr(2),
            update: Box::new(update),
        },
    )
    .await;
    h.news(|n| matches!(n, RibNews::Changes(c) if c.iter().any(|c| c.now.is_some())))
        .await;
    let lost = Instant::now();
    h.session(
        2,
        SessionEvent::Down {
            peer: peer_addr(2),
            reason: DownReason::ConnectionLost,
        },
    )
    .await;
    h.event(|e| matches!(e, SpeakerEvent::PeerDown(..))).await;
    // The clock is paused: it moves only when every task waits, straight to the next
    // timer, so the withdrawal comes exactly when the restart time has run out.
    h.news(|n| matches!(n, RibNews::Changes(c) if c.iter().any(|c| c.now.is_none())))
        .await;
    let waited = lost.elapsed();
    assert!(
        (Duration::from_secs(10)..Duration::from_secs(11)).contains(&waited),
        "stale routes swept after {waited:?} (virtual), not after the 10 s restart time"
    );
}

#[tokio::test(start_paused = true)]
async fn the_selection_deferral_timer_ends_our_restart() {
    let mut h = Harness::start(&[2, 3], true, None).await;
    let started = Instant::now();
    assert!(matches!(h.command(2).await, Command::Start));
    h.originate("198.18.0.0/26").await;
    h.session(2, up(2, Some(120))).await;
    h.event(|e| matches!(e, SpeakerEvent::PeerUp(..))).await;
    assert!(
        h.no_command(2).await,
        "initial UPDATEs held while we restart"
    );
    // Peer .3 never comes up: the deferral timer (half the 40 s restart time) ends it.
    let e = h
        .event(|e| matches!(e, SpeakerEvent::RestartComplete { .. }))
        .await;
    assert!(matches!(
        e,
        SpeakerEvent::RestartComplete {
            peers: 1,
            by_timer: true
        }
    ));
    let waited = started.elapsed();
    assert!(
        (Duration::from_secs(20)..Duration::from_secs(21)).contains(&waited),
        "restart ended after {waited:?} (virtual), not after the 20 s deferral"
    );
    h.news(|n| matches!(n, RibNews::Converged)).await;
    assert_eq!(announced(h.command(2).await), vec!["198.18.0.0/26"]);
    assert!(matches!(h.command(2).await, Command::SetCapabilities(_)));
}

#[tokio::test(start_paused = true)]
async fn a_full_session_queue_stalls_only_that_session() {
    // Two commands fit into .3's queue.
    let mut h = Harness::start(&[2, 3], false, Some(3)).await;
    assert!(matches!(h.command(2).await, Command::Start));
    assert!(matches!(h.command(3).await, Command::Start));
    h.session(2, up(2, None)).await;
    h.session(3, up(3, None)).await;
    h.event(|e| matches!(e, SpeakerEvent::PeerUp(p, _) if *p == peer_addr(3)))
        .await;
    // .2 reads; .3 does not: its table (End-of-RIB) and A fill its queue, B does not
    // fit and is held by the driver, C and D are only noted as prefixes.
    assert!(announced(h.command(2).await).is_empty());
    for p in ["198.18.0.0/26", "198.18.0.64/26", "198.18.0.128/26"] {
        h.originate(p).await;
        h.news(|n| matches!(n, RibNews::Changes(_))).await;
    }
    h.commands
        .send(SpeakerCommand::Withdraw("198.18.0.128/26".parse().unwrap()))
        .await
        .unwrap();
    h.news(|n| matches!(n, RibNews::Changes(_))).await;
    h.originate("198.18.0.192/26").await;
    h.news(|n| matches!(n, RibNews::Changes(_))).await;
    // The peer that reads got everything, in order.
    for _ in 0..5 {
        let c = h.command(2).await;
        assert!(matches!(c, Command::SendUpdates(_)), "{c:?}");
    }
    assert!(h.no_command(2).await);
    // Now .3 reads: the End-of-RIB, A, the batch that did not fit (B), then what the
    // Loc-RIB holds for the noted prefixes: D only (C came and went meanwhile).
    assert!(announced(h.command(3).await).is_empty());
    assert_eq!(announced(h.command(3).await), vec!["198.18.0.0/26"]);
    assert_eq!(announced(h.command(3).await), vec!["198.18.0.64/26"]);
    assert_eq!(announced(h.command(3).await), vec!["198.18.0.192/26"]);
    assert!(
        h.no_command(3).await,
        "nothing more for .3 (no stale UPDATEs)"
    );
    // And it is no longer stalled: the next change goes straight to it.
    h.originate("198.18.1.0/26").await;
    assert_eq!(announced(h.command(3).await), vec!["198.18.1.0/26"]);
}
