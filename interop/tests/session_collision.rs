//! Connection collisions (RFC 4271 §6.8) between tern's session driver and real BIRD 2
//! and GoBGP in network namespaces. tern listens on port 179 but accepts nothing until
//! the peer's connection is in its backlog (with the peer's OPEN behind it); then it
//! starts its accept loop and its own connect at the same moment, so each side has two
//! connections at once. The session must come up, stay up, and run over exactly one TCP
//! connection; which one it was is printed. Both identifier orders are tried. Skips
//! without root or the daemons; fails under CI=true.

#![cfg(target_os = "linux")]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{mpsc as std_mpsc, Arc};
use std::time::Duration;

use tern_bgp::fsm::{SessionConfig, State};
use tern_bgp::session::listener::Listener;
use tern_bgp::session::{self, Command, DriverConfig, SessionEvent};
use tern_bgp::wire::{Capability, Family};
use tern_interop::netns::Netns;
use tern_interop::peers::{Kind, Peer};
use tokio::time::Instant;

const TERN: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
/// The peer's BGP identifier; tern's is below or above it.
const PEER_ID: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 20);

fn config(kind: Kind) -> String {
    match kind {
        Kind::Bird => format!(
            r#"log stderr all;
router id {PEER_ID};
protocol device {{ }}
protocol bgp tern {{
  local as 64513; neighbor {TERN} as 64512; hold time 9; keepalive time 3;
  connect delay time 1; connect retry time 2; error wait time 1, 4;
  ipv4 {{ import all; export none; }};
}}
"#
        ),
        _ => format!(
            r#"[global.config]
  as = 64513
  router-id = "{PEER_ID}"
  local-address-list = ["{PEER}"]
[[neighbors]]
  [neighbors.config]
    neighbor-address = "{TERN}"
    peer-as = 64512
  [neighbors.timers.config]
    hold-time = 9
    keepalive-interval = 3
    connect-retry = 2
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv4-unicast"
"#
        ),
    }
}

/// Established TCP connections of this thread's namespace between `local` and
/// `remote`, as (local port, remote port).
fn connections(local: Ipv4Addr, remote: Ipv4Addr) -> Vec<(u16, u16)> {
    // /proc/self/net is the process's namespace; this thread entered another one.
    let text = std::fs::read_to_string("/proc/thread-self/net/tcp").unwrap_or_default();
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

/// What tern saw.
#[derive(Debug)]
struct Outcome {
    up: bool,
    downs_before_up: usize,
    downs_after_up: usize,
    /// Established connections at the end, as (local port, remote port).
    kept: Vec<(u16, u16)>,
}

/// `tern_first`: tern's own connection is up before it accepts the peer's; otherwise
/// it accepts the peer's while its own connect is in progress.
async fn tern(
    router_id: Ipv4Addr,
    listener: Listener,
    tern_first: bool,
) -> Result<Outcome, String> {
    let fsm = SessionConfig {
        local_as: 64512,
        peer_as: 64513,
        router_id,
        hold_time: 9,
        keepalive: None,
        connect_retry: Duration::from_secs(2),
        passive: false,
        delay_open: None,
        idle_hold: Duration::from_secs(1),
        idle_hold_max: Duration::from_secs(4),
        open_hold_time: tern_bgp::fsm::OPEN_HOLD_TIME,
        send_hold_time: None,
        capabilities: vec![Capability::Multiprotocol(Family::IPV4_UNICAST)],
    };
    let cfg = DriverConfig {
        fsm,
        peer: SocketAddr::new(IpAddr::V4(PEER), 179),
        local_addr: Some(IpAddr::V4(TERN)),
        password: None,
        ttl_security: None,
        write_high_water: session::DEFAULT_WRITE_HIGH_WATER,
    };
    let (etx, mut erx) = tokio::sync::mpsc::channel(64);
    let h = session::spawn(cfg, etx);
    listener
        .add_peer(h.clone(), None)
        .map_err(|e| e.to_string())?;
    // The peer's connection is accepted by the kernel into the backlog.
    let waited = Instant::now() + Duration::from_secs(20);
    while connections(TERN, PEER).is_empty() {
        if Instant::now() > waited {
            return Err("the peer never connected".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (rtx, _rrx) = tokio::sync::mpsc::channel(8);
    let listener = Arc::new(listener);
    let accept = if tern_first {
        h.send(Command::Start).await.map_err(|e| e.to_string())?;
        // OpenSent: tern's connection is up and carries its OPEN.
        loop {
            match tokio::time::timeout_at(waited, erx.recv()).await {
                Ok(Some(SessionEvent::StateChanged {
                    to: State::OpenSent,
                    ..
                })) => break,
                Ok(Some(_)) => {}
                _ => return Err("tern's connect never completed".into()),
            }
        }
        tokio::spawn(listener.run(rtx))
    } else {
        let accept = tokio::spawn(listener.run(rtx));
        h.send(Command::Start).await.map_err(|e| e.to_string())?;
        accept
    };
    let mut o = Outcome {
        up: false,
        downs_before_up: 0,
        downs_after_up: 0,
        kept: Vec::new(),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut stable_until = None;
    loop {
        let until = stable_until.unwrap_or(deadline);
        match tokio::time::timeout_at(until, erx.recv()).await {
            Ok(Some(SessionEvent::Up { .. })) => {
                o.up = true;
                // A collision resolved wrongly ends the session soon after.
                stable_until = Some(Instant::now() + Duration::from_secs(4));
            }
            Ok(Some(SessionEvent::Down { reason, .. })) => {
                eprintln!("down: {reason}");
                if o.up {
                    o.downs_after_up += 1;
                } else {
                    o.downs_before_up += 1;
                }
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    o.kept = connections(TERN, PEER);
    let _ = h.send(Command::Stop(None)).await;
    accept.abort();
    Ok(o)
}

fn collide_with(kind: Kind, tern_id: Ipv4Addr, tern_first: bool) {
    let test = format!("session_collision_{}", kind.name());
    if let Err(reason) = tern_interop::lab_available() {
        return tern_interop::skip_or_fail(&test, &reason);
    }
    if let Some(p) = kind
        .programs()
        .iter()
        .find(|p| !tern_interop::have_program(p))
    {
        return tern_interop::skip_or_fail(&test, &format!("{p} is not installed"));
    }
    let tag = format!(
        "{}{}{}",
        kind.name(),
        tern_id.octets()[3],
        if tern_first { "f" } else { "" }
    );
    let ours = Netns::create(&format!("tcol{tag}-t")).unwrap_or_else(|e| panic!("{e}"));
    let theirs = Netns::create(&format!("tcol{tag}-p")).unwrap_or_else(|e| panic!("{e}"));
    ours.veth_to("eth0", &theirs, "eth0")
        .unwrap_or_else(|e| panic!("{e}"));
    ours.add_addr("eth0", "198.51.100.1/24")
        .unwrap_or_else(|e| panic!("{e}"));
    theirs
        .add_addr("eth0", "198.51.100.2/24")
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (bound_tx, bound_rx) = std_mpsc::channel();
    let (peer_tx, peer_rx) = std_mpsc::channel::<()>();
    let ours = &ours;
    let (outcome, log) = std::thread::scope(|s| {
        let t = s.spawn(move || {
            ours.enter_current_thread()
                .unwrap_or_else(|e| panic!("{e}"));
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("{e}"));
            // Bound before the peer starts, so its first connect lands in the backlog.
            let listener =
                rt.block_on(async { Listener::bind(SocketAddr::new(IpAddr::V4(TERN), 179)) });
            let listener = listener.unwrap_or_else(|e| panic!("{e}"));
            let _ = bound_tx.send(());
            let _ = peer_rx.recv();
            rt.block_on(tern(tern_id, listener, tern_first))
        });
        let _ = bound_rx.recv();
        let mut peer =
            Peer::start(kind, &theirs, dir.path(), &config(kind)).unwrap_or_else(|e| panic!("{e}"));
        let _ = peer_tx.send(());
        let outcome = t
            .join()
            .unwrap_or_else(|_| panic!("tern's thread panicked"));
        let log = peer.log();
        peer.stop();
        (outcome, log)
    });
    let o = outcome.unwrap_or_else(|e| panic!("{kind:?}: {e}\n{log}"));
    let survivor = match o.kept.as_slice() {
        [(179, _)] => "the peer's",
        [(_, 179)] => "tern's",
        _ => "?",
    };
    eprintln!(
        "{kind:?}, tern's identifier {tern_id} vs {PEER_ID}, tern's connection first: {tern_first}: {o:?}; the session runs on {survivor} connection"
    );
    if o.downs_before_up > 0 {
        eprintln!("{kind:?}'s log:\n{log}");
    }
    assert!(o.up, "{kind:?}: no session\n{log}");
    assert_eq!(
        o.downs_before_up, 0,
        "{kind:?}: the collision cost a session attempt\n{log}"
    );
    assert_eq!(o.downs_after_up, 0, "{kind:?}: the session flapped\n{log}");
    assert_eq!(
        o.kept.len(),
        1,
        "{kind:?}: exactly one connection survives\n{log}"
    );
}

const LOWER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const HIGHER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 30);

#[test]
fn collision_with_bird() {
    for (id, first) in [
        (LOWER, false),
        (HIGHER, false),
        (LOWER, true),
        (HIGHER, true),
    ] {
        collide_with(Kind::Bird, id, first);
    }
}

/// GoBGP closes a connection it accepts while its own is in OpenSent, so the session
/// can only run on GoBGP's; with tern's first and tern's accept loop held back (not
/// what tern does outside this test), there is no collision to resolve.
#[test]
fn collision_with_gobgp() {
    for id in [LOWER, HIGHER] {
        collide_with(Kind::Gobgp, id, false);
    }
}
