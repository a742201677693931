//! tern's listening sockets against BIRD 2 in network namespaces: IPv4 and IPv6 peers
//! with a TCP-MD5 password dial in to the default listener (`[::]:179`, a socket per
//! family) while tern stays passive, and GTSM (`ttlSecurity`) holds in both
//! directions: a directly connected peer comes up over IPv4 (it dials in) and IPv6
//! (tern dials), a peer one router away is refused with the TTL its SYN arrived with,
//! and comes up once tern allows two hops. Skips without root or BIRD; fails under
//! CI=true.

#![cfg(target_os = "linux")]
// A test: a panic on a bad literal or a failed lab step is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tern_bgp::speaker::{self, PeerConfig, SpeakerCommand, SpeakerConfig, SpeakerEvent};
use tern_interop::netns::Netns;
use tern_interop::peers::{Kind, Peer};

fn skip(test: &str) -> bool {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail(test, &reason);
        return true;
    }
    if !tern_interop::have_program("bird") {
        tern_interop::skip_or_fail(test, "bird is not installed");
        return true;
    }
    false
}

fn peer(addr: &str, passive: bool) -> PeerConfig {
    PeerConfig {
        hold_time: 9,
        connect_retry: Duration::from_secs(2),
        passive,
        ..PeerConfig::new(SocketAddr::new(addr.parse().unwrap(), 179), 64513)
    }
}

/// The daemon's default listener on a dual-stack node: the IPv6 wildcard.
fn speaker_config(peers: Vec<PeerConfig>) -> SpeakerConfig {
    SpeakerConfig {
        router_id: "198.51.100.1".parse().unwrap(),
        local_as: 64512,
        listen: Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 179)),
        extra_listen: Vec::new(),
        cluster_id: None,
        max_paths: 4,
        peers,
        restarting: false,
        max_routes: None,
    }
}

/// What happened to each peer within `limit`: whether it came up, and the reasons it
/// was reported down. Returns early once `done` holds.
async fn watch(
    cfg: SpeakerConfig,
    limit: Duration,
    done: impl Fn(&BTreeSet<IpAddr>, &BTreeMap<IpAddr, Vec<String>>) -> bool,
) -> (BTreeSet<IpAddr>, BTreeMap<IpAddr, Vec<String>>) {
    let (etx, mut erx) = tokio::sync::mpsc::channel(256);
    let c = speaker::spawn(cfg, etx).await.unwrap();
    let mut up = BTreeSet::new();
    let mut down: BTreeMap<IpAddr, Vec<String>> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + limit;
    while !done(&up, &down) {
        match tokio::time::timeout_at(deadline, erx.recv()).await {
            Ok(Some(SpeakerEvent::PeerUp(p, _))) => {
                up.insert(p.ip());
            }
            Ok(Some(SpeakerEvent::PeerDown(p, why))) => down.entry(p.ip()).or_default().push(why),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    let _ = c.send(SpeakerCommand::Shutdown(None)).await;
    (up, down)
}

/// Two namespaces on one link, `tern` at .1 / ::1 and the peer at .2 / ::2.
fn pair(prefix: &str) -> (Netns, Netns) {
    let t = Netns::create(&format!("{prefix}-t")).unwrap();
    let p = Netns::create(&format!("{prefix}-p")).unwrap();
    t.veth_to("eth0", &p, "eth0").unwrap();
    for (ns, v4, v6) in [
        (&t, "198.51.100.1/24", "2001:db8:100::1/64"),
        (&p, "198.51.100.2/24", "2001:db8:100::2/64"),
    ] {
        ns.add_addr("eth0", v4).unwrap();
        ns.add_addr("eth0", v6).unwrap();
    }
    (t, p)
}

const MD5_BIRD: &str = r#"log stderr all;
router id 198.51.100.2;
protocol device { }
protocol bgp v4 {
  local as 64513; neighbor 198.51.100.1 as 64512; hold time 9; keepalive time 3;
  connect retry time 2; error wait time 1,4; password "ipv4-Secret";
  ipv4 { import all; export none; };
}
protocol bgp v6 {
  local as 64513; neighbor 2001:db8:100::1 as 64512; hold time 9; keepalive time 3;
  connect retry time 2; error wait time 1,4; password "ipv6-Secret";
  ipv6 { import all; export none; };
}
"#;

/// IPv4 and IPv6 peers with a password dial in to `[::]:179` (tern is passive) and
/// come up: a listening socket without the peer's key would drop its signed SYN.
#[test]
fn md5_peers_of_both_families_dial_in_to_the_default_listener() {
    if skip("listener_md5") {
        return;
    }
    let (t, p) = pair("tlsnmd5");
    let dir = tempfile::tempdir().unwrap();
    let bird = Peer::start(Kind::Bird, &p, dir.path(), MD5_BIRD).unwrap();
    let v4: IpAddr = "198.51.100.2".parse().unwrap();
    let v6: IpAddr = "2001:db8:100::2".parse().unwrap();
    let cfg = speaker_config(vec![
        PeerConfig {
            password: Some("ipv4-Secret".into()),
            ..peer("198.51.100.2", true)
        },
        PeerConfig {
            password: Some("ipv6-Secret".into()),
            ..peer("2001:db8:100::2", true)
        },
    ]);
    let (up, down) = t
        .block_on(|| {
            watch(cfg, Duration::from_secs(60), |up, _| {
                up.contains(&v4) && up.contains(&v6)
            })
        })
        .unwrap();
    let log = format!(
        "{}\n{}",
        bird.log(),
        bird.cli(&["show", "protocols", "all"]).unwrap_or_default()
    );
    assert!(
        up.contains(&v4),
        "IPv4 MD5 peer not up: {down:?}\nBIRD:\n{log}"
    );
    assert!(
        up.contains(&v6),
        "IPv6 MD5 peer not up: {down:?}\nBIRD:\n{log}"
    );
}

/// The far peer's namespace: `r` routes between tern (203.0.113.0/24) and the peer
/// (198.18.0.0/24), decrementing the TTL.
fn via_router(t: &Netns) -> (Netns, Netns) {
    let r = Netns::create("tlsngtsm-r").unwrap();
    let far = Netns::create("tlsngtsm-f").unwrap();
    t.veth_to("eth1", &r, "eth0").unwrap();
    r.veth_to("eth1", &far, "eth0").unwrap();
    t.add_addr("eth1", "203.0.113.1/24").unwrap();
    r.add_addr("eth0", "203.0.113.2/24").unwrap();
    r.add_addr("eth1", "198.18.0.1/24").unwrap();
    far.add_addr("eth0", "198.18.0.2/24").unwrap();
    r.exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"]).unwrap();
    t.ip(&["route", "add", "198.18.0.0/24", "via", "203.0.113.2"])
        .unwrap();
    far.ip(&["route", "add", "default", "via", "198.18.0.1"])
        .unwrap();
    (r, far)
}

const GTSM_NEAR_BIRD: &str = r#"log stderr all;
router id 198.51.100.2;
protocol device { }
protocol bgp v4 {
  local as 64513; neighbor 198.51.100.1 as 64512; hold time 9; keepalive time 3;
  connect retry time 2; error wait time 1,4; ttl security yes;
  ipv4 { import all; export none; };
}
protocol bgp v6 {
  local as 64513; neighbor 2001:db8:100::1 as 64512; hold time 9; keepalive time 3;
  connect retry time 2; error wait time 1,4; ttl security yes; passive yes;
  ipv6 { import all; export none; };
}
"#;

/// Two hops away: it sends with 255 and accepts 254 or more.
const GTSM_FAR_BIRD: &str = r#"log stderr all;
router id 198.18.0.2;
protocol device { }
protocol bgp tern {
  local as 64513; neighbor 203.0.113.1 as 64512; multihop 2; hold time 9; keepalive time 3;
  connect retry time 2; error wait time 1,4; ttl security yes;
  ipv4 { import all; export none; };
}
"#;

/// GTSM: a directly connected peer comes up over IPv4 (it dials in: the accepted
/// connection is checked) and IPv6 (tern dials: SYN with hop limit 255); a peer one
/// router away is refused (tern names the TTL its SYN came with), although both sides
/// try to connect, until tern allows two hops.
#[test]
fn gtsm_accepts_the_peer_next_door_and_refuses_one_hop_too_far() {
    if skip("listener_gtsm") {
        return;
    }
    let (t, p) = pair("tlsngtsm");
    let (_r, far) = via_router(&t);
    let dir = tempfile::tempdir().unwrap();
    let _near = Peer::start(Kind::Bird, &p, &dir.path().join("near"), GTSM_NEAR_BIRD).unwrap();
    let far_bird = Peer::start(Kind::Bird, &far, &dir.path().join("far"), GTSM_FAR_BIRD).unwrap();
    let v4: IpAddr = "198.51.100.2".parse().unwrap();
    let v6: IpAddr = "2001:db8:100::2".parse().unwrap();
    let too_far: IpAddr = "198.18.0.2".parse().unwrap();
    let cfg = speaker_config(vec![
        PeerConfig {
            ttl_security: Some(1),
            ..peer("198.51.100.2", true)
        },
        PeerConfig {
            ttl_security: Some(1),
            ..peer("2001:db8:100::2", false)
        },
        PeerConfig {
            ttl_security: Some(1),
            local_address: Some("203.0.113.1".parse().unwrap()),
            ..peer("198.18.0.2", false)
        },
    ]);
    let refused = |down: &BTreeMap<IpAddr, Vec<String>>| {
        down.get(&too_far)
            .is_some_and(|w| w.iter().any(|w| w.contains("arrived with TTL 254")))
    };
    let (up, down) = t
        .block_on(|| {
            watch(cfg, Duration::from_secs(60), |up, down| {
                up.contains(&v4) && up.contains(&v6) && refused(down)
            })
        })
        .unwrap();
    assert!(up.contains(&v4), "IPv4 GTSM peer not up: {down:?}");
    assert!(up.contains(&v6), "IPv6 GTSM peer not up: {down:?}");
    assert!(
        refused(&down),
        "no refusal naming the TTL for the far peer: {down:?}\n{}",
        far_bird.log()
    );
    assert!(
        !up.contains(&too_far),
        "the far peer came up with ttlSecurity 1"
    );

    // The control: the same path with two hops allowed comes up, so the refusal was
    // GTSM's and not the lab's.
    let cfg = speaker_config(vec![PeerConfig {
        ttl_security: Some(2),
        local_address: Some("203.0.113.1".parse().unwrap()),
        ..peer("198.18.0.2", false)
    }]);
    let (up, down) = t
        .block_on(|| watch(cfg, Duration::from_secs(60), |up, _| up.contains(&too_far)))
        .unwrap();
    assert!(
        up.contains(&too_far),
        "the far peer with ttlSecurity 2 did not come up: {down:?}\n{}",
        far_bird.log()
    );
}
