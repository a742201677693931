//! The session driver's trouble reports on loopback: connect attempts refused (nothing
//! listens), unanswered (the listener's accept queue is full, so the kernel drops the
//! SYN as a firewall would), a connect that succeeds after failures, and an OPEN
//! refused for its AS, each as structured data with counts.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test setup: a failure is the test failing

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::time::Duration;

use tern_bgp::fsm::{Detail, NoticedBy, SessionConfig, OPEN_HOLD_TIME};
use tern_bgp::session::{
    self, Command, ConnectFailure, ConnectTrouble, DriverConfig, SessionEvent, Trouble,
};
use tern_bgp::wire::{Capability, CodecOptions, Family, Message, Open};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

fn driver(peer: SocketAddr) -> DriverConfig {
    DriverConfig {
        fsm: SessionConfig {
            local_as: 64512,
            peer_as: 65001,
            router_id: Ipv4Addr::new(198, 51, 100, 11),
            hold_time: 90,
            keepalive: None,
            connect_retry: Duration::from_secs(1),
            passive: false,
            delay_open: None,
            idle_hold: Duration::from_secs(1),
            idle_hold_max: Duration::from_secs(2),
            capabilities: vec![Capability::Multiprotocol(Family::IPV4_UNICAST)],
            open_hold_time: OPEN_HOLD_TIME,
            send_hold_time: None,
        },
        peer,
        local_addr: None,
        password: None,
        ttl_security: None,
        write_high_water: session::DEFAULT_WRITE_HIGH_WATER,
    }
}

/// The next trouble report, within a generous timeout.
async fn next_trouble(rx: &mut mpsc::Receiver<SessionEvent>) -> Trouble {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(SessionEvent::Trouble { trouble, .. })) => return trouble,
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => panic!("no trouble reported within 15 s"),
        }
    }
}

async fn next_connect_trouble(rx: &mut mpsc::Receiver<SessionEvent>) -> ConnectTrouble {
    match next_trouble(rx).await {
        Trouble::Connect(t) => t,
        other => panic!("expected a connect failure, got {other:?}"),
    }
}

/// A loopback port nothing listens on (bound, then closed).
fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

#[tokio::test]
async fn refused_attempts_are_counted_and_a_later_connect_clears_them() {
    let addr = closed_port();
    let (tx, mut rx) = mpsc::channel(64);
    let h = session::spawn(driver(addr), tx);
    h.send(Command::Start).await.unwrap();
    let first = next_connect_trouble(&mut rx).await;
    assert_eq!(first.failure, ConnectFailure::Refused);
    assert_eq!((first.in_a_row, first.attempts), (1, 1));
    let second = next_connect_trouble(&mut rx).await;
    assert_eq!(second.failure, ConnectFailure::Refused);
    assert_eq!((second.in_a_row, second.attempts), (2, 2));
    assert_eq!(second.since, first.since, "since the first failure");
    assert!(second.last > first.last);

    // BGP starts listening there: the next attempt connects.
    let l = tokio::net::TcpListener::bind(addr).await.unwrap();
    let accept = tokio::spawn(async move { l.accept().await.map(|(s, _)| s) });
    assert_eq!(next_trouble(&mut rx).await, Trouble::Connected);
    drop(accept);
    let _ = h.send(Command::Stop(None)).await;
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn unanswered_attempts_time_out_at_the_connect_retry_time() {
    // Backlog 0 holds one connection; two unaccepted ones fill it and the kernel
    // drops further SYNs unanswered, as a firewall dropping TCP 179 does.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    sock.bind(&any.into()).unwrap();
    sock.listen(0).unwrap();
    let addr = sock.local_addr().unwrap().as_socket().unwrap();
    let mut fill = Vec::new();
    for _ in 0..2 {
        if let Ok(Ok(s)) = tokio::time::timeout(
            Duration::from_millis(500),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            fill.push(s);
        }
    }
    let (tx, mut rx) = mpsc::channel(64);
    let h = session::spawn(driver(addr), tx);
    h.send(Command::Start).await.unwrap();
    let first = next_connect_trouble(&mut rx).await;
    let ConnectFailure::TimedOut(waited) = first.failure else {
        panic!("expected a time-out, got {first:?}");
    };
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(10),
        "bounded by the 1 s connect-retry time: {waited:?}"
    );
    let second = next_connect_trouble(&mut rx).await;
    assert!(matches!(second.failure, ConnectFailure::TimedOut(_)));
    assert_eq!((second.in_a_row, second.attempts), (2, 2));
    let _ = h.send(Command::Stop(None)).await;
    drop(fill);
}

/// A peer that accepts, reads our OPEN, and answers with an OPEN from AS 65002.
#[tokio::test]
async fn an_open_from_another_as_is_reported_with_both_numbers() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let peer = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let _ = s.read(&mut buf).await.unwrap();
        let open = Open::new(65002, 90, Ipv4Addr::new(198, 51, 100, 1), vec![]);
        let b = Message::Open(open)
            .encode(&CodecOptions::default())
            .unwrap();
        s.write_all(&b).await.unwrap();
        // Keep the connection until our NOTIFICATION closes it.
        let _ = s.read(&mut buf).await;
    });
    let (tx, mut rx) = mpsc::channel(64);
    let h = session::spawn(driver(addr), tx);
    h.send(Command::Start).await.unwrap();
    let t = loop {
        match next_trouble(&mut rx).await {
            Trouble::Notification(t) => break t,
            Trouble::Connected | Trouble::Connect(_) | Trouble::Closed(_) => {}
        }
    };
    assert_eq!(t.by, NoticedBy::Us);
    assert_eq!(
        t.detail,
        Detail::PeerAs {
            offered: 65002,
            expected: 65001
        }
    );
    let _ = h.send(Command::Stop(None)).await;
    let _ = peer.await;
}

/// A peer that accepts, reads our OPEN and closes without a word (BIRD, FRR and
/// GoBGP do so with an address they have no neighbour for).
#[tokio::test]
async fn a_peer_closing_before_its_open_is_reported_with_the_state() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let peer = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let _ = s.read(&mut buf).await;
        drop(s);
    });
    let (tx, mut rx) = mpsc::channel(64);
    let h = session::spawn(driver(addr), tx);
    h.send(Command::Start).await.unwrap();
    assert_eq!(
        next_trouble(&mut rx).await,
        Trouble::Closed(tern_bgp::fsm::State::OpenSent)
    );
    let _ = h.send(Command::Stop(None)).await;
    let _ = peer.await;
}

/// Through the speaker: troubles of a configured peer come out as
/// `SpeakerEvent::Trouble`, beside `PeerDown`'s text.
#[tokio::test]
async fn the_speaker_passes_troubles_on() {
    use tern_bgp::speaker::{self, PeerConfig, SpeakerConfig, SpeakerEvent};
    let addr = closed_port();
    let cfg = SpeakerConfig {
        router_id: Ipv4Addr::new(198, 51, 100, 11),
        local_as: 64512,
        listen: None,
        extra_listen: Vec::new(),
        cluster_id: None,
        max_paths: 1,
        peers: vec![PeerConfig {
            connect_retry: Duration::from_secs(1),
            ..PeerConfig::new(addr, 65001)
        }],
        restarting: false,
        max_routes: None,
    };
    let (tx, mut rx) = mpsc::channel(64);
    let _c = speaker::spawn(cfg, tx).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let (mut trouble, mut down) = (None, None);
    while trouble.is_none() || down.is_none() {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(SpeakerEvent::Trouble(p, t))) if p == addr => trouble = Some(t),
            Ok(Some(SpeakerEvent::PeerDown(p, why))) if p == addr => down = Some(why),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    match trouble {
        Some(Trouble::Connect(c)) => assert_eq!(c.failure, ConnectFailure::Refused),
        other => panic!("expected a refused connect, got {other:?}"),
    }
    assert!(down.unwrap_or_default().contains("refused"));
}
