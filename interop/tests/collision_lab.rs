//! The fault sequence that left tern in a Cease / Connection Collision Resolution
//! loop, against FRR's bgpd over TCP-MD5 in network namespaces: an AS mismatch (FRR
//! expects another AS for tern), corrected; an interface flap toward FRR; FRR's
//! password wrong (FRR resets the session: Cease / Other Configuration Change), then
//! fixed. Before the fix tern sat out the back-off the AS mismatch had built (16 s)
//! and answered each of FRR's connections, one a second, with Cease / Connection
//! Collision Resolution; now the session must be back within a few seconds of the
//! repair, with no such Cease. Set `COLLISION_LAB_LOG` to print FRR's log. Skips
//! without root or FRR; fails under CI=true.

#![cfg(target_os = "linux")]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{mpsc as std_mpsc, Arc};
use std::time::Duration;

use tern_bgp::fsm::SessionConfig;
use tern_bgp::session::listener::Listener;
use tern_bgp::session::{self, Command, DriverConfig, SessionEvent};
use tern_bgp::wire::{Capability, Family};
use tern_interop::netns::Netns;
use tern_interop::peers::{Kind, Peer};
use tokio::time::Instant;

const TERN: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
const TERN_ID: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const PEER_ID: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 20);
const PASSWORD: &str = "s3cret";

fn frr_config(tern_as: u32) -> String {
    format!(
        "frr defaults traditional\nhostname tor\nlog stdout\n\
         debug bgp neighbor-events\n\
         router bgp 64513\n bgp router-id {PEER_ID}\n no bgp ebgp-requires-policy\n \
         no bgp default ipv4-unicast\n timers bgp 3 9\n \
         neighbor {TERN} remote-as {tern_as}\n neighbor {TERN} timers connect 1\n \
         neighbor {TERN} password {PASSWORD}\n \
         address-family ipv4 unicast\n  neighbor {TERN} activate\n exit-address-family\n"
    )
}

/// What tern's session reported, with the time since the start.
#[derive(Debug)]
enum Seen {
    Up(Duration),
    /// Anything else, as printed.
    Other(String),
}

/// tern's side: a session driver with the speaker's timers and the password, and the
/// listener, both in tern's namespace; its events go to `seen` until `stop` says so.
async fn tern(listener: Listener, seen: std_mpsc::Sender<Seen>, stop: std_mpsc::Receiver<()>) {
    let fsm = SessionConfig {
        local_as: 64512,
        peer_as: 64513,
        router_id: TERN_ID,
        hold_time: 9,
        keepalive: None,
        connect_retry: tern_bgp::speaker::DEFAULT_CONNECT_RETRY,
        passive: false,
        delay_open: None,
        // What the speaker gives every peer.
        idle_hold: Duration::from_secs(1),
        idle_hold_max: Duration::from_secs(120),
        open_hold_time: tern_bgp::fsm::OPEN_HOLD_TIME,
        send_hold_time: None,
        capabilities: vec![Capability::Multiprotocol(Family::IPV4_UNICAST)],
    };
    let cfg = DriverConfig {
        fsm,
        peer: SocketAddr::new(IpAddr::V4(PEER), 179),
        local_addr: Some(IpAddr::V4(TERN)),
        password: Some(PASSWORD.to_string()),
        ttl_security: None,
        write_high_water: session::DEFAULT_WRITE_HIGH_WATER,
    };
    let (etx, mut erx) = tokio::sync::mpsc::channel(64);
    let h = session::spawn(cfg, etx);
    listener
        .add_peer(h.clone(), Some(PASSWORD))
        .unwrap_or_else(|e| panic!("{e}"));
    let (rtx, _rrx) = tokio::sync::mpsc::channel(8);
    let accept = tokio::spawn(Arc::new(listener).run(rtx));
    let _ = h.send(Command::Start).await;
    let t0 = Instant::now();
    loop {
        if stop.try_recv().is_ok() {
            break;
        }
        let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(100), erx.recv()).await else {
            continue;
        };
        let at = t0.elapsed();
        let s = match e {
            SessionEvent::Up { .. } => Seen::Up(at),
            SessionEvent::Down { reason, .. } => Seen::Other(format!("{at:?} down: {reason}")),
            SessionEvent::StateChanged { to, .. } => Seen::Other(format!("{at:?} {to:?}")),
            _ => continue,
        };
        let _ = seen.send(s);
    }
    let _ = h.send(Command::Stop(None)).await;
    accept.abort();
}

fn vtysh(frr: &Peer, lines: &[&str]) {
    let mut args = vec!["configure terminal", "router bgp 64513"];
    args.extend_from_slice(lines);
    frr.cli(&args).unwrap_or_else(|e| panic!("vtysh: {e}"));
}

/// Waits for tern's session to come up; returns when, or None after `within`.
fn wait_up(seen: &std_mpsc::Receiver<Seen>, within: Duration) -> Option<Duration> {
    let until = std::time::Instant::now() + within;
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        match seen.recv_timeout(left) {
            Ok(Seen::Up(at)) => {
                eprintln!("{at:?} up");
                return Some(at);
            }
            Ok(Seen::Other(s)) => eprintln!("{s}"),
            Err(_) => return None,
        }
    }
}

fn drain(seen: &std_mpsc::Receiver<Seen>, for_: Duration) {
    let until = std::time::Instant::now() + for_;
    while let Ok(s) = seen.recv_timeout(until.saturating_duration_since(std::time::Instant::now()))
    {
        eprintln!("{s:?}");
    }
}

/// Cease / Connection Collision Resolution notifications FRR received so far.
fn collisions_received(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("received") && l.contains("6/7"))
        .count()
}

#[test]
fn session_recovers_after_as_mismatch_flap_and_md5_fix() {
    let test = "collision_lab";
    if let Err(reason) = tern_interop::lab_available() {
        return tern_interop::skip_or_fail(test, &reason);
    }
    if let Some(p) = Kind::Frr
        .programs()
        .iter()
        .find(|p| !tern_interop::have_program(p))
    {
        return tern_interop::skip_or_fail(test, &format!("{p} is not installed"));
    }
    let ours = Netns::create("tcfl-t").unwrap_or_else(|e| panic!("{e}"));
    let theirs = Netns::create("tcfl-p").unwrap_or_else(|e| panic!("{e}"));
    ours.veth_to("eth0", &theirs, "eth0")
        .unwrap_or_else(|e| panic!("{e}"));
    ours.add_addr("eth0", "198.51.100.1/24")
        .unwrap_or_else(|e| panic!("{e}"));
    theirs
        .add_addr("eth0", "198.51.100.2/24")
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (seen_tx, seen) = std_mpsc::channel();
    let (stop_tx, stop_rx) = std_mpsc::channel();
    let ours = &ours;
    std::thread::scope(|s| {
        s.spawn(move || {
            ours.enter_current_thread()
                .unwrap_or_else(|e| panic!("{e}"));
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("{e}"));
            let listener = rt
                .block_on(async { Listener::bind(SocketAddr::new(IpAddr::V4(TERN), 179)) })
                .unwrap_or_else(|e| panic!("{e}"));
            rt.block_on(tern(listener, seen_tx, stop_rx));
        });
        // 1. FRR expects tern in AS 64999: every OPEN ends in Bad Peer AS.
        let mut frr = Peer::start(Kind::Frr, &theirs, dir.path(), &frr_config(64999))
            .unwrap_or_else(|e| panic!("{e}"));
        drain(&seen, Duration::from_secs(8));
        vtysh(&frr, &[&format!("neighbor {TERN} remote-as 64512")]);
        let up = wait_up(&seen, Duration::from_secs(130));
        eprintln!("after the AS fix: {up:?}");
        // 2. FRR's password goes wrong, and the link flaps.
        vtysh(&frr, &[&format!("neighbor {TERN} password wrong")]);
        ours.ip(&["link", "set", "eth0", "down"])
            .unwrap_or_else(|e| panic!("{e}"));
        drain(&seen, Duration::from_secs(2));
        ours.ip(&["link", "set", "eth0", "up"])
            .unwrap_or_else(|e| panic!("{e}"));
        drain(&seen, Duration::from_secs(5));
        // 3. The password is fixed: the session must follow.
        let before = collisions_received(&frr.log());
        let fixed = std::time::Instant::now();
        vtysh(&frr, &[&format!("neighbor {TERN} password {PASSWORD}")]);
        let up = wait_up(&seen, Duration::from_secs(30));
        let took = fixed.elapsed();
        let log = frr.log();
        let refused = collisions_received(&log) - before;
        let _ = stop_tx.send(());
        frr.stop();
        if std::env::var_os("COLLISION_LAB_LOG").is_some() {
            eprintln!("{log}");
        }
        eprintln!("after the password fix: up {up:?} in {took:?}, {refused} Cease/collision");
        assert!(
            up.is_some(),
            "no session 30 s after the password fix\n{log}"
        );
        // The password change alone recovers in about 1 s (FRR retries every second);
        // the back-off left by the AS mismatch made it 9 s here, 7 refusals on the way.
        assert!(
            took < Duration::from_secs(4),
            "the session took {took:?} to come back\n{log}"
        );
        assert_eq!(
            refused, 0,
            "tern answered the repaired peer with Cease / Connection Collision Resolution\n{log}"
        );
    });
}
