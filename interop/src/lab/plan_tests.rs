use std::path::Path;

use super::*;
use crate::lab::peerconf;

fn spec(nodes: usize) -> LabSpec {
    LabSpec::new("t-", Path::new("/tmp/lab"), Path::new("/bin/tern"), nodes)
}

fn intents(s: &LabSpec) -> Vec<tern_config::intent::Intent> {
    let (cluster, warnings) =
        tern_config::cluster::Cluster::from_documents(&[tern_config::datastore::Document {
            origin: "cluster.yaml".into(),
            text: cluster_yaml(s),
        }])
        .unwrap_or_else(|e| panic!("{e}\n{}", cluster_yaml(s)));
    assert!(warnings.is_empty(), "{warnings:?}");
    s.node_plans()
        .iter()
        .map(|n| {
            tern_config::intent::intent(&cluster, &n.name)
                .unwrap_or_else(|e| panic!("{e}"))
                .0
        })
        .collect()
}

#[test]
fn addresses_blocks_and_pods_follow_the_plan() {
    let mut s = spec(3);
    s.pods = 2;
    s.borrowed = 1;
    s.ipv6 = true;
    let n = s.node_plans();
    assert_eq!(n[1].v4, "198.51.100.12");
    assert_eq!(n[1].v6.as_deref(), Some("2001:db8:100::12"));
    assert_eq!(n[1].block_v4, "198.18.2.0/26");
    assert_eq!(n[1].block_v6.as_deref(), Some("2001:db8:4000:2::/122"));
    let pods: Vec<(&str, &str, bool)> = n[2]
        .pods
        .iter()
        .map(|p| (p.ns.as_str(), p.v4.as_str(), p.borrowed()))
        .collect();
    // node-3 borrows from node-1 (the next node, wrapping).
    assert_eq!(
        pods,
        vec![
            ("t-n3p1", "198.18.3.1", false),
            ("t-n3p2", "198.18.3.2", false),
            ("t-n3b1", "198.18.1.33", true)
        ]
    );
    assert_eq!(n[2].pods[2].v6.as_deref(), Some("2001:db8:4000:1::21"));
    for n in &n {
        for p in &n.pods {
            crate::netns::check_lab_address(&p.v4).unwrap_or_else(|e| panic!("{e}"));
            assert!(p.host_if.len() <= 15, "{}", p.host_if);
        }
    }
}

#[test]
fn the_cluster_file_is_valid_calico_and_gives_the_intended_peers_and_prefixes() {
    let mut s = spec(3);
    s.borrowed = 1;
    s.ipv6 = true;
    s.tor = Some(Kind::Bird);
    s.restart_time = Some(7);
    s.mesh_hold = Some(6);
    let i = intents(&s);
    // Mesh: two other nodes in each family, plus the ToR in each family.
    assert_eq!(i[0].peers.len(), 6, "{:?}", i[0].peers.keys());
    let mesh = &i[0].peers[&"198.51.100.12".parse().unwrap()];
    assert_eq!(mesh.restart_time, Some(std::time::Duration::from_secs(7)));
    assert_eq!(mesh.hold, Some(std::time::Duration::from_secs(6)));
    assert_eq!(mesh.keepalive, Some(std::time::Duration::from_secs(2)));
    let originated: Vec<String> = i[0].originated.keys().map(|p| p.to_string()).collect();
    // node-1 holds its blocks and the address it borrowed from node-2's block.
    assert_eq!(
        originated,
        vec![
            "198.18.1.0/26",
            "198.18.2.33/32",
            "2001:db8:4000:1::/122",
            "2001:db8:4000:2::21/128"
        ]
    );
}

#[test]
fn route_reflector_and_bird_reflector_topologies() {
    let mut s = spec(4);
    s.topology = Topology::RouteReflectors(2);
    let i = intents(&s);
    assert!(i[0].rr_cluster_id.is_some());
    assert!(i[3].rr_cluster_id.is_none());
    // A client peers with the two reflectors only.
    let peers: Vec<String> = i[3].peers.keys().map(|a| a.to_string()).collect();
    assert_eq!(peers, vec!["198.51.100.11", "198.51.100.12"]);

    let mut s = spec(3);
    s.topology = Topology::BirdReflector;
    let i = intents(&s);
    let peers: Vec<String> = i[1].peers.keys().map(|a| a.to_string()).collect();
    assert_eq!(peers, vec![plan_rr()]);
    let conf = peerconf::bird_reflector_config(&s);
    assert_eq!(conf.matches("rr client").count(), 1, "{conf}");
    assert_eq!(conf.matches("protocol bgp c").count(), 3, "{conf}");
}

fn plan_rr() -> String {
    BIRD_RR_V4.to_string()
}

#[test]
fn bad_specs_are_refused_with_the_option_named() {
    let mut s = spec(1);
    s.borrowed = 1;
    assert!(s.check().unwrap_err().to_string().contains("--borrowed"));
    let s = spec(0);
    assert!(s.check().unwrap_err().to_string().contains("--nodes"));
    let mut s = spec(3);
    s.topology = Topology::RouteReflectors(3);
    assert!(s
        .check()
        .unwrap_err()
        .to_string()
        .contains("--route-reflectors"));
    let mut s = spec(3);
    s.prefix = "much-too-long-".into();
    assert!(s.check().unwrap_err().to_string().contains("--prefix"));
}

#[test]
fn a_calico_bird_node_is_passive_toward_textually_greater_peers() {
    let mut s = spec(10);
    s.bird_nodes = 1;
    s.tor = Some(Kind::Bird);
    let plans = s.node_plans();
    let bird = &plans[9];
    assert_eq!(bird.kind, NodeKind::CalicoBird);
    assert_eq!(bird.v4, "198.51.100.20");
    let conf = peerconf::calico_bird_config(&s, bird);
    // "198.51.100.11" < "198.51.100.20" as text: BIRD dials it; "198.51.100.9" would
    // be greater, but here every peer is .11 to .19: all smaller, none passive.
    assert!(!conf.contains("passive on"), "{conf}");
    assert!(
        conf.contains("if ( net ~ 198.18.10.0/26 ) then reject;"),
        "{conf}"
    );
    assert!(conf.contains("neighbor 198.51.100.1 as 65001"), "{conf}");
    assert!(
        conf.contains("bgp_local_pref = 2147483647 - krt_metric;"),
        "{conf}"
    );
    let first = peerconf::calico_bird_config(&s, &plans[0]);
    assert_eq!(first.matches("passive on").count(), 9, "{first}");
}

#[test]
fn tor_configs_name_every_node() {
    let mut s = spec(2);
    s.ipv6 = true;
    for kind in [Kind::Bird, Kind::Frr, Kind::Gobgp] {
        let c = peerconf::tor_config(kind, &s);
        for addr in ["198.51.100.11", "198.51.100.12", "2001:db8:100::12"] {
            assert!(c.contains(addr), "{kind:?} lacks {addr}:\n{c}");
        }
    }
}
