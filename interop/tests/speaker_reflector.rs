//! A tern speaker as an iBGP route reflector (cluster id 198.51.100.250) with a GoBGP
//! client and an FRR client on one LAN in namespaces. Each client's route reaches the
//! other with its originator as ORIGINATOR_ID, tern's cluster id in CLUSTER_LIST and
//! its next hop unchanged, read back from the clients' own CLIs (`gobgp -j`, `vtysh`
//! JSON); no client gets its own route back; a withdrawal at GoBGP leaves FRR.
//! Skips without root or the daemons; fails under CI=true.

#![cfg(target_os = "linux")]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use tern_bgp::speaker::{self, PeerConfig, SpeakerCommand, SpeakerConfig};
use tern_interop::netns::lan;
use tern_interop::peers::{Kind, Peer};

const RR: &str = "198.51.100.1";
const GOBGP: &str = "198.51.100.2";
const FRR: &str = "198.51.100.3";
const CLUSTER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 250);
const GOBGP_ROUTE: &str = "198.18.21.0/24";
const FRR_ROUTE: &str = "198.18.22.0/24";

const GOBGP_CONF: &str = r#"[global.config]
  as = 64512
  router-id = "198.51.100.2"
  local-address-list = ["198.51.100.2"]
[[neighbors]]
  [neighbors.config]
    neighbor-address = "198.51.100.1"
    peer-as = 64512
  [neighbors.timers.config]
    connect-retry = 1
    hold-time = 9
    keepalive-interval = 3
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv4-unicast"
"#;

const FRR_CONF: &str = "frr defaults traditional
hostname frr
log stdout
router bgp 64512
 bgp router-id 198.51.100.3
 no bgp ebgp-requires-policy
 no bgp network import-check
 timers bgp 3 9
 neighbor 198.51.100.1 remote-as 64512
 neighbor 198.51.100.1 timers connect 1
 address-family ipv4 unicast
  network 198.18.22.0/24
 exit-address-family
";

fn client(addr: &str) -> PeerConfig {
    PeerConfig {
        local_address: Some(RR.parse().unwrap_or_else(|e| panic!("{e}"))),
        hold_time: 9,
        connect_retry: Duration::from_secs(1),
        rr_client: true,
        ..PeerConfig::new(
            SocketAddr::new(addr.parse().unwrap_or_else(|e| panic!("{e}")), 179),
            64512,
        )
    }
}

fn wait(what: &str, secs: u64, mut ok: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("timed out waiting for {what}");
    false
}

#[test]
fn tern_reflects_between_gobgp_and_frr_clients() {
    let test = "speaker_reflector";
    if let Err(reason) = tern_interop::lab_available() {
        return tern_interop::skip_or_fail(test, &reason);
    }
    for p in ["gobgpd", "gobgp", "/usr/lib/frr/bgpd", "vtysh"] {
        if !tern_interop::have_program(p) {
            return tern_interop::skip_or_fail(test, &format!("{p} is not installed"));
        }
    }
    let (_lan, nodes) = lan(
        "tsrr-lan",
        &[
            ("tsrr-rr", "198.51.100.1/24"),
            ("tsrr-gobgp", "198.51.100.2/24"),
            ("tsrr-frr", "198.51.100.3/24"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let gobgp = Peer::start(
        Kind::Gobgp,
        &nodes[1],
        &dir.path().join("gobgp"),
        GOBGP_CONF,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let frr = Peer::start(Kind::Frr, &nodes[2], &dir.path().join("frr"), FRR_CONF)
        .unwrap_or_else(|e| panic!("{e}"));
    gobgp
        .cli(&["global", "rib", "add", GOBGP_ROUTE, "-a", "ipv4"])
        .unwrap_or_else(|e| panic!("{e}"));

    // The reflector runs on its own thread inside its namespace until told to stop.
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let (routes_tx, routes_rx) = std::sync::mpsc::channel::<Vec<String>>();
    let rr_ns = &nodes[0];
    std::thread::scope(|s| {
        s.spawn(move || {
            let reflector = rr_ns.block_on(move || async move {
                let (etx, mut erx) = tokio::sync::mpsc::channel(256);
                let cfg = SpeakerConfig {
                    router_id: Ipv4Addr::new(198, 51, 100, 1),
                    local_as: 64512,
                    listen: Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 179)),
                    extra_listen: Vec::new(),
                    cluster_id: Some(CLUSTER),
                    max_paths: 4,
                    peers: vec![client(GOBGP), client(FRR)],
                    restarting: false,
                    max_routes: None,
                };
                let c = speaker::spawn(cfg, etx)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                tokio::spawn(async move { while erx.recv().await.is_some() {} });
                while let Err(std::sync::mpsc::TryRecvError::Empty) = stop_rx.try_recv() {
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    let _ = c.send(SpeakerCommand::Routes(tx)).await;
                    let now: Vec<String> = rx
                        .await
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(p, _)| p.to_string())
                        .collect();
                    let _ = routes_tx.send(now);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                let _ = c.send(SpeakerCommand::Shutdown(None)).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            });
            reflector.unwrap_or_else(|e| panic!("{e}"));
        });

        let frr_json = |p: &str| -> serde_json::Value {
            let out = frr
                .cli(&[&format!("show bgp ipv4 unicast {p} json")])
                .unwrap_or_default();
            serde_json::from_str(&out).unwrap_or(serde_json::Value::Null)
        };
        let gobgp_json = |p: &str| -> String {
            gobgp
                .cli(&["global", "rib", "-a", "ipv4", p, "-j"])
                .unwrap_or_default()
        };
        let mut rr_routes = Vec::new();
        let both = wait("the reflector to hold both clients' routes", 40, || {
            while let Ok(r) = routes_rx.try_recv() {
                rr_routes = r;
            }
            rr_routes.iter().any(|p| p == GOBGP_ROUTE) && rr_routes.iter().any(|p| p == FRR_ROUTE)
        });
        let at_frr = wait("FRR to learn GoBGP's route", 30, || {
            frr_json(GOBGP_ROUTE)
                .get("paths")
                .and_then(|p| p.as_array())
                .is_some_and(|p| !p.is_empty())
        });
        let at_gobgp = wait("GoBGP to learn FRR's route", 30, || {
            gobgp_json(FRR_ROUTE).contains(FRR_ROUTE)
        });
        let frr_view = frr_json(GOBGP_ROUTE);
        let gobgp_view = gobgp_json(FRR_ROUTE);
        let gobgp_own = gobgp_json(GOBGP_ROUTE);
        let frr_own = frr_json(FRR_ROUTE);

        // A withdrawal at GoBGP must leave FRR.
        gobgp
            .cli(&["global", "rib", "del", GOBGP_ROUTE, "-a", "ipv4"])
            .unwrap_or_else(|e| panic!("{e}"));
        let gone = wait("GoBGP's withdrawal to reach FRR", 30, || {
            frr_json(GOBGP_ROUTE)
                .get("paths")
                .and_then(|p| p.as_array())
                .is_none_or(|p| p.is_empty())
        });
        let _ = stop_tx.send(());

        let diag = || {
            format!(
                "reflector holds {rr_routes:?}\nFRR: {}\nGoBGP: {}\n{}",
                frr.cli(&["show bgp summary"]).unwrap_or_default(),
                gobgp.cli(&["neighbor"]).unwrap_or_default(),
                gobgp.log()
            )
        };
        assert!(
            both && at_frr && at_gobgp,
            "routes did not cross the reflector\n{}",
            diag()
        );
        // FRR's view of GoBGP's route: reflected, not rewritten.
        let path = &frr_view["paths"][0];
        assert_eq!(
            path["originatorId"], GOBGP,
            "ORIGINATOR_ID at FRR: {frr_view:#}"
        );
        let clusters = path["clusterList"]["list"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            clusters,
            vec![serde_json::json!(CLUSTER.to_string())],
            "{frr_view:#}"
        );
        assert_eq!(
            path["nexthops"][0]["ip"], GOBGP,
            "next hop at FRR: {frr_view:#}"
        );
        assert!(
            path["aspath"]["string"]
                .as_str()
                .is_some_and(|s| s.is_empty() || s == "Local"),
            "iBGP reflection must not touch the AS path: {frr_view:#}"
        );
        // GoBGP's view of FRR's route (attribute type 9 ORIGINATOR_ID, 10 CLUSTER_LIST).
        let g: serde_json::Value = serde_json::from_str(&gobgp_view).unwrap_or_default();
        let attrs = g[FRR_ROUTE][0]["attrs"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let attr = |t: u64| attrs.iter().find(|a| a["type"] == t).cloned();
        assert_eq!(
            attr(9).map(|a| a["value"].clone()),
            Some(serde_json::json!(FRR)),
            "ORIGINATOR_ID at GoBGP: {gobgp_view}"
        );
        assert_eq!(
            attr(10).map(|a| a["value"].clone()),
            Some(serde_json::json!([CLUSTER.to_string()])),
            "CLUSTER_LIST at GoBGP: {gobgp_view}"
        );
        assert_eq!(
            attr(3).map(|a| a["nexthop"].clone()),
            Some(serde_json::json!(FRR)),
            "next hop at GoBGP: {gobgp_view}"
        );
        // Neither client got its own route back (split horizon towards the originator).
        let own_paths = serde_json::from_str::<serde_json::Value>(&gobgp_own)
            .ok()
            .and_then(|v| v[GOBGP_ROUTE].as_array().map(Vec::len));
        assert_eq!(
            own_paths,
            Some(1),
            "GoBGP holds its route twice: {gobgp_own}"
        );
        let frr_own_paths = frr_own["paths"].as_array().map(Vec::len);
        assert_eq!(
            frr_own_paths,
            Some(1),
            "FRR holds its route twice: {frr_own:#}"
        );
        assert!(gone, "the withdrawal did not reach FRR\n{}", diag());
    });
}
