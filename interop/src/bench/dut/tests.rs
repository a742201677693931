//! The daemons' CLI answers as the bench reads them.

use super::*;

#[test]
fn parses_each_daemons_count() {
    assert_eq!(
        parse_bird_count(
            "BIRD 2.0.12 ready.\n100000 of 100000 routes for 100000 networks in table master4\n0 of 0 routes for 0 networks in table master6\n"
        ),
        100000
    );
    assert_eq!(
        parse_zebra_bgp_count(
            r#"{"routes":[{"fib":2,"rib":2,"type":"connected"},{"fib":99000,"rib":100000,"type":"ebgp"},{"fib":5,"rib":5,"type":"ibgp"}],"routesTotal":100007}"#
        ),
        100005
    );
    assert_eq!(
        parse_gobgp_count("Table ipv4-unicast\nDestination: 131072, Path: 131072\n"),
        131072
    );
    assert_eq!(parse_gobgp_count("garbage"), 0);
}

fn spec(peers: Vec<(IpAddr, u32)>) -> DutSpec {
    DutSpec {
        kind: DutKind::Tern,
        dir: PathBuf::from("/tmp/x"),
        peers,
        tern: PathBuf::from("tern"),
        frr_graceful_restart: false,
        reflector: false,
    }
}

#[test]
fn ebgp_feed_is_a_bgppeer_and_mesh_feeds_are_nodes() {
    let e = spec(vec![("198.51.100.100".parse().unwrap(), 65001)]);
    let y = e.tern_cluster();
    assert!(y.contains("kind: BGPPeer") && y.contains("nodeToNodeMeshEnabled: false"));
    let m = spec(vec![
        ("198.51.100.100".parse().unwrap(), DUT_AS),
        ("198.51.100.101".parse().unwrap(), DUT_AS),
    ]);
    let y = m.tern_cluster();
    assert!(!y.contains("BGPPeer") && y.contains("name: peer-1"));
    assert!(m.bird_conf().contains("direct;"));
    assert!(m.frr_conf().contains("remote-as internal"));
    assert!(!e.bird_conf().contains("direct;"));
}

#[test]
fn rib_only_configurations_leave_the_kernel_alone() {
    let e = spec(vec![("198.51.100.100".parse().unwrap(), 65001)]);
    assert!(e.bird_conf().contains("protocol kernel"));
    let rib_only = e.bird_conf_for(false);
    assert!(!rib_only.contains("protocol kernel"), "{rib_only}");
    assert!(rib_only.contains("neighbor 198.51.100.100 as 65001"));
    assert_eq!(
        parse_bgpd_rib_count(
            r#"{"routerId":"198.51.100.99","as":64512,"ribCount":100000,"peers":{}}"#
        ),
        100000
    );
    assert_eq!(parse_bgpd_rib_count("{}"), 0);
}

#[test]
fn a_reflector_makes_every_peer_a_client_and_exports() {
    let mut r = spec(vec![
        ("2001:db8:b::1000".parse().unwrap(), DUT_AS),
        ("2001:db8:b::1001".parse().unwrap(), DUT_AS),
    ]);
    r.reflector = true;
    let y = r.tern_cluster();
    assert!(
        y.contains("nodeToNodeMeshEnabled: false")
            && y.contains("routeReflectorClusterID: 198.51.100.99")
            && y.contains("peerSelector: all()")
            && y.contains("name: peer-1"),
        "{y}"
    );
    let b = r.bird_conf_for(false);
    assert_eq!(b.matches("rr client;").count(), 2, "{b}");
    assert!(
        b.contains("export all;") && !b.contains("export none;"),
        "{b}"
    );
    assert!(r
        .frr_conf()
        .contains("neighbor FEED route-reflector-client"));
    assert_eq!(
        r.gobgp_conf()
            .matches("route-reflector-client = true")
            .count(),
        2
    );
    // Not a reflector: nothing of it.
    r.reflector = false;
    assert!(!r.bird_conf().contains("rr client") && !r.tern_cluster().contains("ClusterID"));
}
