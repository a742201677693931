//! Two tern speakers and BIRD on one LAN in namespaces: BIRD (AS 64513) peers with tern
//! A (AS 64512), which peers with tern B (AS 64514). Routes flow through A both ways
//! with the export rules applied (AS prepend, next hop self), A's own route reaches
//! both, and withdrawing it removes it from B. Skips without root or BIRD; fails under
//! CI=true.

#![cfg(target_os = "linux")]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use ipnet::IpNet;
use tern_bgp::speaker::{self, PeerConfig, SpeakerCommand, SpeakerConfig};
use tern_bgp::wire::{Origin, PathAttributes};
use tern_interop::netns::lan;
use tern_interop::peers::{Kind, Peer};

const BIRD_CONF: &str = r#"log stderr all;
router id 198.51.100.2;
protocol device { }
protocol static { ipv4; route 198.18.7.0/24 blackhole; }
protocol bgp a {
  local as 64513; neighbor 198.51.100.1 as 64512; hold time 9; keepalive time 3; connect retry time 1;
  error wait time 1,4;
  ipv4 { import all; export where source = RTS_STATIC; };
}
"#;

fn peer(addr: [u8; 4], peer_as: u32, me: [u8; 4]) -> PeerConfig {
    PeerConfig {
        local_address: Some(IpAddr::V4(me.into())),
        hold_time: 9,
        connect_retry: Duration::from_secs(1),
        ..PeerConfig::new(SocketAddr::new(IpAddr::V4(addr.into()), 179), peer_as)
    }
}

fn config(me: [u8; 4], asn: u32, peers: Vec<PeerConfig>) -> SpeakerConfig {
    SpeakerConfig {
        router_id: me.into(),
        local_as: asn,
        listen: Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 179)),
        extra_listen: Vec::new(),
        cluster_id: None,
        max_paths: 4,
        peers,
        restarting: false,
        max_routes: None,
    }
}

fn own_attrs() -> PathAttributes {
    PathAttributes {
        origin: Some(Origin::Igp),
        ..PathAttributes::default()
    }
}

async fn routes(c: &tokio::sync::mpsc::Sender<SpeakerCommand>) -> Vec<(String, String, String)> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let _ = c.send(SpeakerCommand::Routes(tx)).await;
    rx.await
        .unwrap_or_default()
        .into_iter()
        .map(|(p, b)| {
            let path = b
                .best
                .attrs
                .as_path
                .as_ref()
                .map(|a| a.to_string())
                .unwrap_or_default();
            (p.to_string(), path, b.best.next_hop.to_string())
        })
        .collect()
}

/// Node B: waits for BIRD's route via A and A's own route, then for A's withdrawal.
async fn node_b() -> (Vec<(String, String, String)>, bool) {
    let (etx, mut erx) = tokio::sync::mpsc::channel(256);
    let cfg = config(
        [198, 51, 100, 3],
        64514,
        vec![peer([198, 51, 100, 1], 64512, [198, 51, 100, 3])],
    );
    let c = speaker::spawn(cfg, etx)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = c
        .send(SpeakerCommand::Originate {
            prefix: "198.18.11.0/26".parse().unwrap_or_else(|e| panic!("{e}")),
            attrs: own_attrs(),
            source: tern_bgp::policy::RouteSource::Originated,
            interface: None,
        })
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    let mut seen = Vec::new();
    let mut withdrawn = false;
    while tokio::time::Instant::now() < deadline {
        let _ = tokio::time::timeout(Duration::from_millis(300), erx.recv()).await;
        let now = routes(&c).await;
        if now.iter().any(|r| r.0 == "198.18.7.0/24") && now.iter().any(|r| r.0 == "198.18.10.0/26")
        {
            seen = now.clone();
        }
        if !seen.is_empty() && !now.iter().any(|r| r.0 == "198.18.10.0/26") {
            withdrawn = true;
            break;
        }
    }
    let _ = c.send(SpeakerCommand::Shutdown(None)).await;
    (seen, withdrawn)
}

/// Node A: peers with BIRD and B, originates a route, and withdraws it once BIRD has
/// learnt both A's and B's routes.
async fn node_a(bird: &Peer) -> Vec<(String, String, String)> {
    let (etx, mut erx) = tokio::sync::mpsc::channel(256);
    let cfg = config(
        [198, 51, 100, 1],
        64512,
        vec![
            peer([198, 51, 100, 2], 64513, [198, 51, 100, 1]),
            peer([198, 51, 100, 3], 64514, [198, 51, 100, 1]),
        ],
    );
    let c = speaker::spawn(cfg, etx)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(async move { while erx.recv().await.is_some() {} });
    let own: IpNet = "198.18.10.0/26".parse().unwrap_or_else(|e| panic!("{e}"));
    let _ = c
        .send(SpeakerCommand::Originate {
            prefix: own,
            attrs: own_attrs(),
            source: tern_bgp::policy::RouteSource::Originated,
            interface: None,
        })
        .await;
    let bird_has = |p: &str| bird.cli(&["show", "route", p, "all"]).unwrap_or_default();
    let mut ok = false;
    for _ in 0..150 {
        let a = bird_has("198.18.10.0/26");
        let b = bird_has("198.18.11.0/26");
        if a.contains("BGP.as_path: 64512") && b.contains("BGP.as_path: 64512 64514") {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        ok,
        "BIRD did not learn A's and B's routes through A:\n{}\n{}",
        bird_has("198.18.10.0/26"),
        bird.log()
    );
    // BIRD's own route must have reached A too before A withdraws its route.
    for _ in 0..50 {
        if routes(&c).await.iter().any(|r| r.0 == "198.18.7.0/24") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let snapshot = routes(&c).await;
    if !snapshot.iter().any(|r| r.0 == "198.18.7.0/24") {
        eprintln!(
            "A lacks BIRD's route: A has {snapshot:?}\nBIRD: {}\n{}",
            bird.cli(&["show", "protocols", "all", "a"])
                .unwrap_or_default(),
            bird.log()
        );
    }
    let _ = c.send(SpeakerCommand::Withdraw(own)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _ = c.send(SpeakerCommand::Shutdown(None)).await;
    snapshot
}

#[test]
fn routes_flow_through_a_tern_speaker_between_bird_and_another_tern() {
    if let Err(reason) = tern_interop::lab_available() {
        return tern_interop::skip_or_fail("speaker_lab", &reason);
    }
    if !tern_interop::have_program("bird") {
        return tern_interop::skip_or_fail("speaker_lab", "bird is not installed");
    }
    let (_lan, nodes) = lan(
        "tspk-lan",
        &[
            ("tspk-a", "198.51.100.1/24"),
            ("tspk-bird", "198.51.100.2/24"),
            ("tspk-b", "198.51.100.3/24"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let bird =
        Peer::start(Kind::Bird, &nodes[1], dir.path(), BIRD_CONF).unwrap_or_else(|e| panic!("{e}"));

    let (a_routes, (b_routes, withdrawn)) = std::thread::scope(|s| {
        let ta = s.spawn(|| nodes[0].block_on(|| node_a(&bird)));
        let tb = s.spawn(|| nodes[2].block_on(node_b));
        (
            ta.join()
                .unwrap_or_else(|_| panic!("node a panicked"))
                .unwrap_or_else(|e| panic!("{e}")),
            tb.join()
                .unwrap_or_else(|_| panic!("node b panicked"))
                .unwrap_or_else(|e| panic!("{e}")),
        )
    });
    let find = |v: &[(String, String, String)], p: &str| v.iter().find(|r| r.0 == p).cloned();
    assert_eq!(
        find(&a_routes, "198.18.7.0/24"),
        Some((
            "198.18.7.0/24".into(),
            "64513".into(),
            "198.51.100.2".into()
        ))
    );
    assert_eq!(
        find(&a_routes, "198.18.11.0/26"),
        Some((
            "198.18.11.0/26".into(),
            "64514".into(),
            "198.51.100.3".into()
        ))
    );
    // At B: BIRD's route via A with A's AS prepended and A as next hop (eBGP), and A's own.
    assert_eq!(
        find(&b_routes, "198.18.7.0/24"),
        Some((
            "198.18.7.0/24".into(),
            "64512 64513".into(),
            "198.51.100.1".into()
        ))
    );
    assert_eq!(
        find(&b_routes, "198.18.10.0/26"),
        Some((
            "198.18.10.0/26".into(),
            "64512".into(),
            "198.51.100.1".into()
        ))
    );
    assert!(withdrawn, "A's withdrawal did not reach B");
}
