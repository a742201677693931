//! Connection collisions (RFC 4271 §6.8) between two tern session drivers on loopback
//! (127.X.N.1 and 127.X.N.2, no root): both dial each other at the same moment, many
//! pairs at once with the identifiers either way round. Each pair must reach
//! Established on both ends, without a flap, over exactly one TCP connection — and when
//! both connections were up before either OPEN was read (the accept loops start late),
//! over the one opened by the side with the higher identifier (or, with equal
//! identifiers, the higher AS: RFC 6286).

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test setup: a failure is the test failing

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tern_bgp::fsm::{SessionConfig, State};
use tern_bgp::session::listener::Listener;
use tern_bgp::session::{self, Command, DriverConfig, SessionEvent, SessionHandle};
use tern_bgp::wire::{Capability, Family};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// One speaker of a pair.
struct End {
    addr: Ipv4Addr,
    id: Ipv4Addr,
    asn: u32,
}

struct Node {
    handle: SessionHandle,
    listener: Arc<Listener>,
    events: mpsc::Receiver<SessionEvent>,
}

fn node(me: &End, peer_addr: Ipv4Addr, peer_port: u16, peer_as: u32, listener: Listener) -> Node {
    let fsm = SessionConfig {
        local_as: me.asn,
        peer_as,
        router_id: me.id,
        hold_time: 9,
        keepalive: None,
        connect_retry: Duration::from_secs(1),
        passive: false,
        delay_open: None,
        idle_hold: Duration::from_millis(500),
        idle_hold_max: Duration::from_secs(2),
        open_hold_time: tern_bgp::fsm::OPEN_HOLD_TIME,
        send_hold_time: None,
        capabilities: vec![Capability::Multiprotocol(Family::IPV4_UNICAST)],
    };
    let cfg = DriverConfig {
        fsm,
        peer: SocketAddr::new(IpAddr::V4(peer_addr), peer_port),
        local_addr: Some(IpAddr::V4(me.addr)),
        password: None,
        ttl_security: None,
        write_high_water: session::DEFAULT_WRITE_HIGH_WATER,
    };
    let (tx, events) = mpsc::channel(64);
    let handle = session::spawn(cfg, tx);
    listener.add_peer(handle.clone(), None).unwrap();
    Node {
        handle,
        listener: Arc::new(listener),
        events,
    }
}

/// Established TCP connections from `local` to `remote` as (local port, remote port),
/// read from /proc/net/tcp (addresses there are the raw network-order word in hex).
fn connections(local: Ipv4Addr, remote: Ipv4Addr) -> Vec<(u16, u16)> {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let parse = |s: &str| -> Option<(Ipv4Addr, u16)> {
        let (ip, port) = s.split_once(':')?;
        let ip = u32::from_str_radix(ip, 16).ok()?;
        Some((
            Ipv4Addr::from(u32::from_be(ip)),
            u16::from_str_radix(port, 16).ok()?,
        ))
    };
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (la, lp) = parse(f.get(1)?)?;
            let (ra, rp) = parse(f.get(2)?)?;
            // State 01 is ESTABLISHED.
            (la == local && ra == remote && *f.get(3)? == "01").then_some((lp, rp))
        })
        .collect()
}

/// Waits for Up on `n`, counting Downs; returns how many Downs came before it.
async fn wait_up(n: &mut Node, until: Instant) -> Result<usize, String> {
    let mut downs = 0;
    let mut states = Vec::new();
    loop {
        match tokio::time::timeout_at(until, n.events.recv()).await {
            Ok(Some(SessionEvent::Up { .. })) => return Ok(downs),
            Ok(Some(SessionEvent::Down { reason, .. })) => {
                eprintln!("down before up: {reason}");
                downs += 1;
            }
            Ok(Some(SessionEvent::StateChanged { to, .. })) => states.push(to),
            Ok(Some(_)) => {}
            Ok(None) => return Err("the session task ended".into()),
            Err(_) => return Err(format!("not Established in time; states {states:?}")),
        }
    }
}

/// Which connection a pair kept: true if A opened it.
#[derive(Debug)]
struct Kept {
    a_opened: bool,
    downs: usize,
}

async fn pair(n: u8, a: End, b: End, late_accept: bool) -> Result<Kept, String> {
    let la = Listener::bind(SocketAddr::new(IpAddr::V4(a.addr), 0)).unwrap();
    let lb = Listener::bind(SocketAddr::new(IpAddr::V4(b.addr), 0)).unwrap();
    let (pa, pb) = (
        la.local_addr().unwrap().port(),
        lb.local_addr().unwrap().port(),
    );
    let mut na = node(&a, b.addr, pb, b.asn, la);
    let mut nb = node(&b, a.addr, pa, a.asn, lb);
    let (refused, _keep) = mpsc::channel(8);
    let accept = |n: &Node| tokio::spawn(n.listener.clone().run(refused.clone()));
    let mut tasks = Vec::new();
    if !late_accept {
        tasks.push(accept(&na));
        tasks.push(accept(&nb));
    }
    let (ra, rb) = tokio::join!(
        na.handle.send(Command::Start),
        nb.handle.send(Command::Start)
    );
    ra.unwrap();
    rb.unwrap();
    if late_accept {
        // Both connects complete in the kernel's backlog; each side then finds the
        // peer's connection with its OPEN already in while its own waits for one.
        tokio::time::sleep(Duration::from_millis(200)).await;
        tasks.push(accept(&na));
        tasks.push(accept(&nb));
    }
    let until = Instant::now() + Duration::from_secs(10);
    let (ua, ub) = tokio::join!(wait_up(&mut na, until), wait_up(&mut nb, until));
    let downs =
        ua.map_err(|e| format!("pair {n} A: {e}"))? + ub.map_err(|e| format!("pair {n} B: {e}"))?;
    // The loser's close takes a moment to reach both ends.
    let mut seen = Vec::new();
    while Instant::now() < until {
        seen = connections(a.addr, b.addr);
        if seen.len() == 1 && connections(b.addr, a.addr).len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A session that flaps after the collision would show here.
    tokio::time::sleep(Duration::from_millis(300)).await;
    while let Ok(ev) = na.events.try_recv().or_else(|_| nb.events.try_recv()) {
        if let SessionEvent::Down { reason, .. } = ev {
            return Err(format!("pair {n}: down after up: {reason}"));
        }
        if let SessionEvent::StateChanged { to, .. } = ev {
            if to != State::Established {
                return Err(format!("pair {n}: left Established for {to:?}"));
            }
        }
    }
    for t in tasks {
        t.abort();
    }
    match seen.as_slice() {
        [(local, remote)] if *remote == pb && *local != pa => Ok(Kept {
            a_opened: true,
            downs,
        }),
        [(local, remote)] if *local == pa && *remote != pb => Ok(Kept {
            a_opened: false,
            downs,
        }),
        other => Err(format!(
            "pair {n}: established connections A->B {other:?}, want one"
        )),
    }
}

/// The second octet of this run's loopback addresses: another run at the same time
/// (another copy of the test) must not count this one's connections.
fn net() -> u8 {
    u8::try_from(std::process::id() % 250).unwrap_or(0) + 1
}

/// The pairs: identifiers either way round, and equal identifiers between two ASes.
fn ends(n: u8) -> (End, End, bool) {
    let id = |x: u8| Ipv4Addr::new(198, 51, 100, x);
    let (a_id, b_id, a_as, b_as) = match n % 4 {
        0 => (id(1), id(2), 64512, 64512),
        1 => (id(2), id(1), 64512, 64512),
        2 => (id(7), id(7), 65001, 65002),
        _ => (id(7), id(7), 65002, 65001),
    };
    let a_wins = (u32::from(a_id), a_as) > (u32::from(b_id), b_as);
    let a = End {
        addr: Ipv4Addr::new(127, net(), n, 1),
        id: a_id,
        asn: a_as,
    };
    let b = End {
        addr: Ipv4Addr::new(127, net(), n, 2),
        id: b_id,
        asn: b_as,
    };
    (a, b, a_wins)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_dials_keep_the_connection_section_6_8_picks() {
    let mut runs = Vec::new();
    for n in 1..=16u8 {
        let (a, b, a_wins) = ends(n);
        runs.push(tokio::spawn(async move {
            (pair(n, a, b, true).await, a_wins, n)
        }));
    }
    for r in runs {
        let (kept, a_wins, n) = r.await.unwrap();
        let kept = kept.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(kept.downs, 0, "pair {n}: no Down on the way up");
        assert_eq!(
            kept.a_opened, a_wins,
            "pair {n}: the connection opened by the side with the higher identifier stays"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_dials_always_end_on_one_connection() {
    let mut runs = Vec::new();
    for n in 17..=48u8 {
        let (a, b, a_wins) = ends(n);
        runs.push(tokio::spawn(
            async move { (pair(n, a, b, false).await, a_wins) },
        ));
    }
    let (mut downs, mut by_identifier) = (0, 0);
    for r in runs {
        let (kept, a_wins) = r.await.unwrap();
        let kept = kept.unwrap_or_else(|e| panic!("{e}"));
        downs += kept.downs;
        by_identifier += usize::from(kept.a_opened == a_wins);
    }
    // Which connection stays here depends on timing (a connection still connecting
    // when the other's OPEN is in is no collision yet), so it is reported, not checked.
    eprintln!(
        "32 pairs: {by_identifier} on the higher identifier's connection, {downs} Downs on the way up"
    );
}
