//! Graceful restart, tern as the restarting speaker (RFC 4724 §4.1), two tern speakers
//! on loopback (127.0.0.0/8, distinct ports: no kernel routes, no namespace needed).
//! Speaker A restarts with its forwarding state kept: its OPEN carries the R and F
//! bits, and its initial UPDATEs are held until every peer has sent End-of-RIB, or,
//! when a peer never comes up, until the selection deferral timer (half the restart
//! time) runs out. And a speaker stopped for a restart ends its graceful-restart
//! sessions without a NOTIFICATION, so its peer keeps its routes; stopped for good,
//! its Cease makes the peer flush them.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use tern_bgp::speaker::{self, PeerConfig, SpeakerCommand, SpeakerConfig, SpeakerEvent};
use tern_bgp::wire::{Origin, PathAttributes};
use tokio::sync::mpsc;

fn addr(last: u8, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)), port)
}

fn peer(to: SocketAddr, me: u8, restart_time: u16) -> PeerConfig {
    PeerConfig {
        local_address: Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, me))),
        hold_time: 9,
        connect_retry: Duration::from_secs(1),
        restart_time: Some(restart_time),
        ..PeerConfig::new(to, 64512)
    }
}

fn config(me: SocketAddr, peers: Vec<PeerConfig>, restarting: bool) -> SpeakerConfig {
    let IpAddr::V4(id) = me.ip() else {
        panic!("IPv4 only here")
    };
    SpeakerConfig {
        router_id: id,
        local_as: 64512,
        listen: Some(me),
        extra_listen: Vec::new(),
        cluster_id: None,
        max_paths: 1,
        peers,
        restarting,
        max_routes: None,
    }
}

async fn has(c: &mpsc::Sender<SpeakerCommand>, prefix: &str) -> bool {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let _ = c.send(SpeakerCommand::Routes(tx)).await;
    rx.await
        .unwrap_or_default()
        .iter()
        .any(|(p, _)| p.to_string() == prefix)
}

async fn originate(c: &mpsc::Sender<SpeakerCommand>, prefix: &str) {
    let prefix: IpNet = prefix.parse().unwrap_or_else(|e| panic!("{e}"));
    let _ = c
        .send(SpeakerCommand::Originate {
            prefix,
            attrs: PathAttributes {
                origin: Some(Origin::Igp),
                ..PathAttributes::default()
            },
            source: tern_bgp::policy::RouteSource::Originated,
            interface: None,
        })
        .await;
}

/// Waits for A's RestartComplete; returns (peers, by_timer, when).
async fn restart_complete(events: &mut mpsc::Receiver<SpeakerEvent>) -> (usize, bool, Instant) {
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_secs(20), events.recv()).await {
        if let SpeakerEvent::RestartComplete { peers, by_timer } = e {
            return (peers, by_timer, Instant::now());
        }
    }
    panic!("no RestartComplete within 20 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarting_speaker_sends_its_table_after_every_end_of_rib() {
    let (a, b) = (addr(2, 17911), addr(3, 17912));
    let (aev, mut a_events) = mpsc::channel(256);
    let (bev, mut b_events) = mpsc::channel(256);
    let sa = speaker::spawn(config(a, vec![peer(b, 2, 120)], true), aev)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    originate(&sa, "198.18.21.0/26").await;
    let sb = speaker::spawn(config(b, vec![peer(a, 3, 120)], false), bev)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(async move { while b_events.recv().await.is_some() {} });
    let (peers, by_timer, _) = restart_complete(&mut a_events).await;
    assert_eq!((peers, by_timer), (1, false));
    let mut seen = false;
    for _ in 0..50 {
        if has(&sb, "198.18.21.0/26").await {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen, "B never got A's route after A's restart completed");
    let _ = sa.send(SpeakerCommand::Shutdown(None)).await;
    let _ = sb.send(SpeakerCommand::Shutdown(None)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_comes_up_holds_the_table_until_the_deferral_timer() {
    // A has two peers: B, and C at an address where nothing listens. Its restart time
    // is 4 s, so the deferral timer is 2 s: until then B must not get A's route.
    let (a, b, c) = (addr(2, 17921), addr(3, 17922), addr(4, 17923));
    let (aev, mut a_events) = mpsc::channel(256);
    let (bev, mut b_events) = mpsc::channel(256);
    let start = Instant::now();
    let sa = speaker::spawn(config(a, vec![peer(b, 2, 4), peer(c, 2, 4)], true), aev)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    originate(&sa, "198.18.22.0/26").await;
    let sb = speaker::spawn(config(b, vec![peer(a, 3, 120)], false), bev)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut b_up = false;
    let deadline = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < deadline {
        if let Ok(Some(SpeakerEvent::PeerUp(..))) =
            tokio::time::timeout(Duration::from_millis(100), b_events.recv()).await
        {
            b_up = true;
        }
    }
    assert!(b_up, "B's session with A did not come up");
    assert!(
        !has(&sb, "198.18.22.0/26").await,
        "A sent its table before the deferral timer although C never sent End-of-RIB"
    );
    tokio::spawn(async move { while b_events.recv().await.is_some() {} });
    let (peers, by_timer, at) = restart_complete(&mut a_events).await;
    assert_eq!((peers, by_timer), (1, true));
    let waited = at - start;
    assert!(
        waited >= Duration::from_millis(1900) && waited < Duration::from_secs(6),
        "deferral ended after {waited:?}, want about 2 s"
    );
    let mut seen = false;
    for _ in 0..50 {
        if has(&sb, "198.18.22.0/26").await {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen, "B never got A's route after the deferral timer");
    let _ = sa.send(SpeakerCommand::Shutdown(None)).await;
    let _ = sb.send(SpeakerCommand::Shutdown(None)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_comes_up_after_the_deferral_timer_still_sees_forwarding_kept() {
    // A restarts (forwarding kept) with peers B and C; C never answers, so the
    // deferral timer (2 s, half of the 4 s restart time) ends A's restart. B comes up
    // only after that: A's OPEN must no longer carry R but must still carry F, or B
    // (a helper holding A's routes) would drop them at once, and traffic to A with
    // them, until A's table arrived (found by tests/lab_faults.rs under load).
    let (a, b, c) = (addr(2, 17931), addr(3, 17932), addr(4, 17933));
    let (aev, mut a_events) = mpsc::channel(256);
    let (bev, mut b_events) = mpsc::channel(256);
    let sa = speaker::spawn(config(a, vec![peer(b, 2, 4), peer(c, 2, 4)], true), aev)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    originate(&sa, "198.18.23.0/26").await;
    let (peers, by_timer, _) = restart_complete(&mut a_events).await;
    assert_eq!((peers, by_timer), (0, true));
    tokio::spawn(async move { while a_events.recv().await.is_some() {} });
    let sb = speaker::spawn(config(b, vec![peer(a, 3, 120)], false), bev)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let negotiated = loop {
        match tokio::time::timeout(Duration::from_secs(10), b_events.recv()).await {
            Ok(Some(SpeakerEvent::PeerUp(_, n))) => break n,
            Ok(Some(_)) => continue,
            _ => panic!("B's session with A did not come up"),
        }
    };
    let gr = negotiated
        .peer_graceful_restart
        .clone()
        .unwrap_or_else(|| panic!("A sent no graceful restart capability"));
    assert!(!gr.restart_state, "A's restart is over: no R bit");
    assert!(
        !gr.families.is_empty() && gr.families.iter().all(|f| f.forwarding_preserved),
        "A's routes are still in its kernel: F bits expected, got {gr:?}"
    );
    let _ = sa.send(SpeakerCommand::Shutdown(None)).await;
    let _ = sb.send(SpeakerCommand::Shutdown(None)).await;
}

/// Whether B has `prefix` within `secs` seconds (polled).
async fn has_within(c: &mpsc::Sender<SpeakerCommand>, prefix: &str, secs: u64) -> bool {
    for _ in 0..secs * 10 {
        if has(c, prefix).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// A learns nothing; B learns A's route; then A stops with `stop`. Returns whether B
/// still holds the route 2 s after A's sessions ended.
async fn b_keeps_route_after(stop: SpeakerCommand, a: SocketAddr, b: SocketAddr) -> bool {
    let (aev, mut a_events) = mpsc::channel(256);
    let (bev, mut b_events) = mpsc::channel(256);
    let sa = speaker::spawn(config(a, vec![peer(b, a_last(a), 120)], false), aev)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(async move { while a_events.recv().await.is_some() {} });
    let sb = speaker::spawn(config(b, vec![peer(a, a_last(b), 120)], false), bev)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    originate(&sa, "198.18.22.0/26").await;
    assert!(
        has_within(&sb, "198.18.22.0/26", 20).await,
        "B never learned A's route"
    );
    let _ = sa.send(stop).await;
    // B sees the session end (by a NOTIFICATION or by the connection closing).
    let down = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(e) = b_events.recv().await {
            if matches!(e, SpeakerEvent::PeerDown { .. }) {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    assert!(down, "B never saw the session with A end");
    tokio::spawn(async move { while b_events.recv().await.is_some() {} });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kept = has(&sb, "198.18.22.0/26").await;
    let _ = sb.send(SpeakerCommand::Shutdown(None)).await;
    kept
}

fn a_last(a: SocketAddr) -> u8 {
    match a.ip() {
        IpAddr::V4(v4) => v4.octets()[3],
        IpAddr::V6(_) => panic!("IPv4 only here"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_speaker_stopped_for_a_restart_leaves_its_routes_with_its_graceful_restart_peers() {
    // Stopped for a restart (SIGTERM): no NOTIFICATION, so B, a graceful-restart
    // helper, keeps A's route (stale) for A's restart time (RFC 4724 §4.2).
    let kept = b_keeps_route_after(
        SpeakerCommand::ShutdownForRestart(Some("restarting".into())),
        addr(4, 17921),
        addr(5, 17922),
    )
    .await;
    assert!(kept, "B dropped A's route although A only restarted");
    // Stopped for good: the Cease makes B flush A's routes at once.
    let kept = b_keeps_route_after(
        SpeakerCommand::Shutdown(Some("gone".into())),
        addr(6, 17923),
        addr(7, 17924),
    )
    .await;
    assert!(!kept, "B kept A's route after A's Cease");
}
