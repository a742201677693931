//! Two tern nodes as a Calico node-to-node mesh: each listens on port 179 and connects
//! to the other at the same moment, so the connections collide (RFC 4271 §6.8). Both
//! must end up Established over exactly one TCP connection, stay up, and exchange a
//! route each way. A connection from an address that is not a peer is refused and
//! reported. Skips without root; fails under CI=true.

#![cfg(target_os = "linux")]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use tern_bgp::fsm::SessionConfig;
use tern_bgp::session::listener::Listener;
use tern_bgp::session::{self, Command, DriverConfig, SessionEvent};
use tern_bgp::wire::pack::{self, NextHop};
use tern_bgp::wire::{AsPath, Capability, Family, Nlri, Origin, PathAttributes};
use tern_interop::netns::Netns;

struct Outcome {
    ups: usize,
    downs: usize,
    got_route: bool,
    connections: usize,
    refused: Vec<IpAddr>,
}

async fn node(
    me: Ipv4Addr,
    other: Ipv4Addr,
    route: &str,
    want: &str,
    rogue: bool,
    both: &std::sync::Barrier,
) -> Outcome {
    let listener = Listener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 179))
        .unwrap_or_else(|e| panic!("{e}"));
    let fsm = SessionConfig {
        local_as: 64512,
        peer_as: 64512,
        router_id: me,
        hold_time: 9,
        keepalive: None,
        connect_retry: Duration::from_secs(1),
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
        peer: SocketAddr::new(IpAddr::V4(other), 179),
        local_addr: Some(IpAddr::V4(me)),
        password: None,
        ttl_security: None,
        write_high_water: session::DEFAULT_WRITE_HIGH_WATER,
    };
    let (etx, mut erx) = tokio::sync::mpsc::channel(64);
    let h = session::spawn(cfg, etx);
    listener
        .add_peer(h.clone(), None)
        .unwrap_or_else(|e| panic!("{e}"));
    let (rtx, mut rrx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(std::sync::Arc::new(listener).run(rtx));
    h.send(Command::Start)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let mut o = Outcome {
        ups: 0,
        downs: 0,
        got_route: false,
        connections: 0,
        refused: Vec::new(),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut sent = false;
    let mut stable_until = None;
    loop {
        let until = stable_until.unwrap_or(deadline);
        let ev = tokio::select! {
            e = erx.recv() => e,
            r = rrx.recv() => {
                if let Some(r) = r {
                    o.refused.push(r.from.ip());
                }
                continue;
            }
            _ = tokio::time::sleep_until(until) => break,
        };
        match ev {
            Some(SessionEvent::Up { negotiated, .. }) => {
                o.ups += 1;
                if !sent {
                    sent = true;
                    let attrs = PathAttributes {
                        origin: Some(Origin::Igp),
                        as_path: Some(AsPath::default()),
                        next_hop: Some(me),
                        local_pref: Some(100),
                        ..PathAttributes::default()
                    };
                    let mut msgs = Vec::new();
                    let ours = [Nlri::new(route.parse().unwrap_or_else(|e| panic!("{e}")))];
                    pack::announcements(
                        &attrs,
                        Family::IPV4_UNICAST,
                        &NextHop::Classic,
                        &ours,
                        &negotiated.tx,
                        &mut msgs,
                    )
                    .unwrap_or_else(|e| panic!("{e}"));
                    h.send(Command::SendUpdates(msgs))
                        .await
                        .unwrap_or_else(|e| panic!("{e}"));
                    if rogue {
                        // A connection from an address the other node has no peer for.
                        let s = socket2::Socket::new(
                            socket2::Domain::IPV4,
                            socket2::Type::STREAM,
                            None,
                        )
                        .unwrap_or_else(|e| panic!("{e}"));
                        let _ = s.bind(
                            &SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 9)), 0).into(),
                        );
                        let _ = s.connect_timeout(
                            &SocketAddr::new(IpAddr::V4(other), 179).into(),
                            Duration::from_secs(2),
                        );
                    }
                }
            }
            Some(SessionEvent::Down { reason, .. }) => {
                eprintln!("DOWN at {me}: {reason} (ups so far {})", o.ups);
                // A connection lost while collisions are resolved, before the session
                // was ever up, is not a flap; a Down after Up is.
                if o.ups > 0 {
                    o.downs += 1;
                }
            }
            Some(SessionEvent::Update { update, .. }) => {
                if update.nlri.iter().any(|n| n.prefix.to_string() == want) {
                    o.got_route = true;
                    // Stay a few seconds more: a collision handled wrongly flaps later.
                    stable_until = Some(tokio::time::Instant::now() + Duration::from_secs(4));
                }
            }
            Some(_) => {}
            None => break,
        }
    }
    // Count while both nodes still run: a node that finished first would drop its
    // runtime and close the connection under the other's count.
    both.wait();
    let ss = std::process::Command::new("ss")
        .args([
            "-Htn",
            "state",
            "established",
            "( sport = :179 or dport = :179 )",
        ])
        .output();
    o.connections = ss
        .map(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| !l.trim().is_empty())
                .count()
        })
        .unwrap_or(0);
    both.wait();
    o
}

#[test]
fn two_tern_nodes_form_a_mesh_session_through_a_collision() {
    if let Err(reason) = tern_interop::lab_available() {
        return tern_interop::skip_or_fail("session_mesh", &reason);
    }
    let a = Netns::create("tmesh-a").unwrap_or_else(|e| panic!("{e}"));
    let b = Netns::create("tmesh-b").unwrap_or_else(|e| panic!("{e}"));
    a.veth_to("eth0", &b, "eth0")
        .unwrap_or_else(|e| panic!("{e}"));
    a.add_addr("eth0", "198.51.100.1/24")
        .unwrap_or_else(|e| panic!("{e}"));
    a.add_addr("eth0", "198.51.100.9/24")
        .unwrap_or_else(|e| panic!("{e}"));
    b.add_addr("eth0", "198.51.100.2/24")
        .unwrap_or_else(|e| panic!("{e}"));
    let both = std::sync::Barrier::new(2);
    let run = |ns: &Netns,
               me: [u8; 4],
               other: [u8; 4],
               route: &'static str,
               want: &'static str,
               rogue: bool| {
        ns.block_on(|| node(me.into(), other.into(), route, want, rogue, &both))
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let (oa, ob) = std::thread::scope(|s| {
        let ta = s.spawn(|| {
            run(
                &a,
                [198, 51, 100, 1],
                [198, 51, 100, 2],
                "198.18.1.0/26",
                "198.18.2.0/26",
                true,
            )
        });
        let tb = s.spawn(|| {
            run(
                &b,
                [198, 51, 100, 2],
                [198, 51, 100, 1],
                "198.18.2.0/26",
                "198.18.1.0/26",
                false,
            )
        });
        (
            ta.join().unwrap_or_else(|_| panic!("node a panicked")),
            tb.join().unwrap_or_else(|_| panic!("node b panicked")),
        )
    });
    for (name, o) in [("a", &oa), ("b", &ob)] {
        assert!(o.got_route, "node {name} did not receive the other's route");
        assert_eq!(
            (o.ups, o.downs),
            (1, 0),
            "node {name}: one session, no flap"
        );
        assert_eq!(
            o.connections, 1,
            "node {name}: exactly one BGP connection survives the collision"
        );
    }
    assert_eq!(
        ob.refused,
        vec![IpAddr::V4(Ipv4Addr::new(198, 51, 100, 9))],
        "a non-peer is refused and reported"
    );
}
