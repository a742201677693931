//! tern's session (state machine + tokio driver) against real BIRD 2, GoBGP and FRR in
//! network namespaces: the session comes up, their routes arrive (IPv4, and IPv6 by
//! MP-BGP on the same session) with End-of-RIB, a route we send is learnt by them, and
//! our shutdown message ends the session. Skips without root or the daemons; fails
//! under CI=true.

#![cfg(target_os = "linux")]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tern_bgp::fsm::SessionConfig;
use tern_bgp::rib::{PeerSource, Rib};
use tern_bgp::session::{self, Command, DriverConfig, SessionEvent};
use tern_bgp::wire::pack::{self, NextHop};
use tern_bgp::wire::{
    AsPath, Capability, Family, GracefulRestart, GracefulRestartFamily, Message, Nlri, Origin,
    PathAttributes, Update,
};
use tern_interop::netns::Netns;
use tern_interop::peers::{Kind, Peer};

const TERN: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);

fn config(kind: Kind) -> String {
    match kind {
        Kind::Bird => r#"log stderr all;
router id 198.51.100.2;
protocol device { }
protocol static { ipv4; route 198.18.7.0/24 blackhole; }
protocol static { ipv6; route 2001:db8:7::/48 blackhole; }
protocol bgp tern {
  local as 64513; neighbor 198.51.100.1 as 64512; hold time 9; keepalive time 3; connect retry time 2;
  ipv4 { import all; export where source = RTS_STATIC; };
  ipv6 { import all; export where source = RTS_STATIC; };
}
"#
        .into(),
        Kind::Gobgp => r#"[global.config]
  as = 64513
  router-id = "198.51.100.2"
  local-address-list = ["198.51.100.2"]
[[neighbors]]
  [neighbors.config]
    neighbor-address = "198.51.100.1"
    peer-as = 64512
  [neighbors.timers.config]
    hold-time = 9
    keepalive-interval = 3
    connect-retry = 2
  [neighbors.graceful-restart.config]
    enabled = true
    restart-time = 120
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv4-unicast"
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv6-unicast"
"#
        .into(),
        Kind::Frr => r#"frr defaults traditional
hostname frr-peer
log stdout
router bgp 64513
 bgp router-id 198.51.100.2
 no bgp ebgp-requires-policy
 no bgp network import-check
 timers bgp 3 9
 neighbor 198.51.100.1 remote-as 64512
 neighbor 198.51.100.1 timers connect 2
 address-family ipv4 unicast
  network 198.18.7.0/24
 exit-address-family
 address-family ipv6 unicast
  network 2001:db8:7::/48
  neighbor 198.51.100.1 activate
 exit-address-family
"#
        .into(),
    }
}

/// Whether the peer's table holds 198.18.8.0/24 (the route tern sent).
fn learnt(peer: &Peer, kind: Kind) -> bool {
    let out = match kind {
        Kind::Bird => peer.cli(&["show", "route", "198.18.8.0/24"]),
        Kind::Gobgp => peer.cli(&["global", "rib", "198.18.8.0/24"]),
        Kind::Frr => peer.cli(&["show ip bgp 198.18.8.0/24"]),
    };
    out.map(|s| s.contains("198.18.8.0/24") && !s.contains("not in table"))
        .unwrap_or(false)
}

fn session_against(kind: Kind) {
    let test = format!("session_{}", kind.name());
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
    let ours = Netns::create(&format!("tsess{}-t", kind.name())).unwrap_or_else(|e| panic!("{e}"));
    let theirs =
        Netns::create(&format!("tsess{}-p", kind.name())).unwrap_or_else(|e| panic!("{e}"));
    ours.veth_to("eth0", &theirs, "eth0")
        .unwrap_or_else(|e| panic!("{e}"));
    for (ns, v4, v6) in [
        (&ours, "198.51.100.1/24", "2001:db8:100::1/64"),
        (&theirs, "198.51.100.2/24", "2001:db8:100::2/64"),
    ] {
        ns.add_addr("eth0", v4).unwrap_or_else(|e| panic!("{e}"));
        ns.add_addr("eth0", v6).unwrap_or_else(|e| panic!("{e}"));
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut peer =
        Peer::start(kind, &theirs, dir.path(), &config(kind)).unwrap_or_else(|e| panic!("{e}"));
    if kind == Kind::Gobgp {
        // GoBGP originates routes through its API, not its config file.
        for args in [
            &["global", "rib", "add", "198.18.7.0/24"][..],
            &[
                "global",
                "rib",
                "-a",
                "ipv6",
                "add",
                "2001:db8:7::/48",
                "nexthop",
                "2001:db8:100::2",
            ],
        ] {
            peer.cli(args).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    // Our side runs on a thread inside our namespace.
    let (received, shutdown_seen) = ours
        .block_on(|| drive(&peer, kind))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        received
            .iter()
            .any(|n| n.prefix.to_string() == "198.18.7.0/24"),
        "{kind:?} IPv4 route: {received:?}"
    );
    assert!(
        received
            .iter()
            .any(|n| n.prefix.to_string() == "2001:db8:7::/48"),
        "{kind:?} IPv6 route: {received:?}"
    );
    assert!(
        shutdown_seen,
        "{kind:?} session did not go down on our shutdown"
    );
    peer.stop();
}

/// Brings the session up, collects the peer's routes until End-of-RIB for both
/// families, sends one route and waits until the peer has it, then shuts down.
async fn drive(peer: &Peer, kind: Kind) -> (Vec<Nlri>, bool) {
    let fsm = SessionConfig {
        local_as: 64512,
        peer_as: 64513,
        router_id: TERN,
        hold_time: 9,
        keepalive: None,
        connect_retry: Duration::from_secs(2),
        passive: false,
        delay_open: None,
        idle_hold: Duration::from_secs(1),
        idle_hold_max: Duration::from_secs(8),
        open_hold_time: tern_bgp::fsm::OPEN_HOLD_TIME,
        send_hold_time: None,
        capabilities: vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::Multiprotocol(Family::IPV6_UNICAST),
            Capability::RouteRefresh,
            // FRR and GoBGP send End-of-RIB only to graceful-restart-capable peers.
            Capability::GracefulRestart(GracefulRestart {
                restart_state: false,
                notification: false,
                restart_time: 120,
                families: vec![
                    GracefulRestartFamily {
                        family: Family::IPV4_UNICAST,
                        forwarding_preserved: false,
                    },
                    GracefulRestartFamily {
                        family: Family::IPV6_UNICAST,
                        forwarding_preserved: false,
                    },
                ],
            }),
        ],
    };
    let cfg = DriverConfig {
        fsm,
        peer: SocketAddr::new(IpAddr::V4(PEER), 179),
        local_addr: Some(IpAddr::V4(TERN)),
        password: None,
        ttl_security: None,
        write_high_water: session::DEFAULT_WRITE_HIGH_WATER,
    };
    let (etx, mut erx) = tokio::sync::mpsc::channel(256);
    let h = session::spawn(cfg, etx);
    h.send(Command::Start)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let mut negotiated = None;
    let mut received = Vec::new();
    let mut rib = Rib::new(4);
    let mut source = None;
    let mut eor = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    while eor.len() < 2 {
        let ev = tokio::time::timeout_at(deadline, erx.recv()).await;
        match ev {
            Ok(Some(SessionEvent::Up {
                negotiated: n,
                peer: addr,
            })) => {
                source = Some(Arc::new(PeerSource {
                    address: addr.ip(),
                    router_id: n.peer_id,
                    asn: n.peer_asn,
                    ebgp: true,
                    rr_client: false,
                    local: false,
                }));
                negotiated = Some(n);
            }
            Ok(Some(SessionEvent::Update { update, .. })) => {
                if let Some(f) = update.end_of_rib_family() {
                    eor.push(f);
                }
                if let Some(src) = &source {
                    rib.apply_update(src, &update);
                }
                received.extend(update.nlri.iter().copied());
                received.extend(update.mp_reach.iter().flat_map(|m| m.nlri.iter().copied()));
            }
            Ok(Some(SessionEvent::Down { reason, .. })) => {
                panic!("{kind:?}: session down: {reason}\n{}", peer.log())
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => panic!(
                "{kind:?}: no End-of-RIB for both families (got {eor:?}, routes {received:?})\n{}",
                peer.log()
            ),
        }
    }
    let n = negotiated.unwrap_or_else(|| panic!("{kind:?}: no Up event"));
    // Their routes are in the RIB as best paths, with their AS path and next hop.
    for (prefix, next_hop) in [
        ("198.18.7.0/24", "198.51.100.2"),
        ("2001:db8:7::/48", "2001:db8:100::2"),
    ] {
        let best = rib
            .best(&prefix.parse().unwrap_or_else(|e| panic!("{e}")))
            .map(|b| {
                (
                    b.best.attrs.as_path.as_ref().map(|p| p.to_string()),
                    b.best.next_hop.to_string(),
                )
            });
        // FRR sends IPv6 next hops over an IPv4 session as IPv4-mapped addresses.
        let want_nh = if kind == Kind::Frr && prefix.contains(':') {
            "::ffff:198.51.100.2"
        } else {
            next_hop
        };
        assert_eq!(
            best,
            Some((Some("64513".to_string()), want_nh.to_string())),
            "{kind:?} {prefix}"
        );
    }
    assert_eq!(n.peer_asn, 64513);
    assert!(
        n.families.contains(&Family::IPV6_UNICAST),
        "{kind:?}: {:?}",
        n.families
    );

    let attrs = PathAttributes {
        origin: Some(Origin::Igp),
        as_path: Some(AsPath::from_sequence([64512])),
        next_hop: Some(TERN),
        ..PathAttributes::default()
    };
    let mut msgs = Vec::new();
    let ours = [Nlri::new(
        "198.18.8.0/24".parse().unwrap_or_else(|e| panic!("{e}")),
    )];
    pack::announcements(
        &attrs,
        Family::IPV4_UNICAST,
        &NextHop::Classic,
        &ours,
        &n.tx,
        &mut msgs,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for f in [Family::IPV4_UNICAST, Family::IPV6_UNICAST] {
        msgs.push(
            Message::Update(Update::end_of_rib(f))
                .encode(&n.tx)
                .unwrap_or_else(|e| panic!("{e}")),
        );
    }
    h.send(Command::SendUpdates(msgs))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The daemon's CLI is a blocking call: poll it off the runtime's thread.
    let learnt_in_time = {
        let mut ok = false;
        for _ in 0..75 {
            if learnt(peer, kind) {
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        ok
    };
    assert!(
        learnt_in_time,
        "{kind:?} did not learn 198.18.8.0/24\n{}",
        peer.log()
    );

    h.send(Command::Stop(Some("tern test over".into())))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut down = false;
    while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_secs(5), erx.recv()).await {
        if matches!(ev, SessionEvent::Down { .. }) {
            down = true;
            break;
        }
    }
    (received, down)
}

#[test]
fn session_with_bird() {
    session_against(Kind::Bird);
}

#[test]
fn session_with_gobgp() {
    session_against(Kind::Gobgp);
}

#[test]
fn session_with_frr() {
    session_against(Kind::Frr);
}
