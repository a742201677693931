use std::net::IpAddr;

use super::*;
use crate::cluster::AddressFamily;
use crate::datastore::Document;
use crate::diff::diff;
use tern_bgp::policy::{PeerType, RouteFacts, RouteSource};

fn cluster(text: &str) -> Cluster {
    Cluster::from_documents(&[Document {
        origin: "cluster.yaml".into(),
        text: text.into(),
    }])
    .unwrap_or_else(|e| panic!("{e}"))
    .0
}

fn example(name: &str) -> Cluster {
    cluster(&crate::cluster::tests::example(name))
}

fn of(c: &Cluster, node: &str) -> Intent {
    intent(c, node).unwrap_or_else(|e| panic!("{e}")).0
}

/// Whether `peer`'s compiled policy (crate::policy) passes `prefix`, learned from a
/// peer or originated here, on export or on import.
fn allowed(i: &Intent, peer: &PeerIntent, prefix: IpNet, from_peer: bool, export: bool) -> bool {
    let attrs = tern_bgp::wire::PathAttributes::default();
    let facts = RouteFacts {
        prefix,
        source: if from_peer {
            RouteSource::Bgp
        } else {
            RouteSource::Originated
        },
        interface: None,
        attrs: &attrs,
        kernel_metric: None,
        peer: if peer.is_ebgp() {
            PeerType::External
        } else {
            PeerType::Internal
        },
    };
    let p = i.peer_policy(peer);
    let program = if export { &p.export } else { &p.import };
    program.evaluate(&facts).accepted()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

/// (address, kind, passive) of each peer, in address order.
fn peer_table(i: &Intent) -> Vec<(String, &'static str, bool)> {
    i.peers
        .values()
        .map(|p| (p.address.to_string(), p.kind.as_str(), p.passive))
        .collect()
}

#[test]
fn three_node_mesh_dials_each_pair_once() {
    let c = example("mesh");
    let a = of(&c, "node-a");
    assert_eq!(a.router_id, "198.51.100.10".parse::<Ipv4Addr>().unwrap());
    assert_eq!(a.asn, 64512);
    assert_eq!(
        peer_table(&a),
        vec![
            ("198.51.100.11".into(), "node-to-node mesh", true),
            ("198.51.100.12".into(), "node-to-node mesh", true),
            ("2001:db8:100::11".into(), "node-to-node mesh", true),
            ("2001:db8:100::12".into(), "node-to-node mesh", true),
        ]
    );
    let b = of(&c, "node-b");
    assert_eq!(
        peer_table(&b),
        vec![
            ("198.51.100.10".into(), "node-to-node mesh", false),
            ("198.51.100.12".into(), "node-to-node mesh", true),
            ("2001:db8:100::10".into(), "node-to-node mesh", false),
            ("2001:db8:100::12".into(), "node-to-node mesh", true),
        ]
    );
    // For every pair exactly one side dials.
    let nodes = ["node-a", "node-b", "node-c"].map(|n| of(&c, n));
    for x in &nodes {
        for p in x.peers.values() {
            let other = nodes
                .iter()
                .find(|n| Some(&n.node) == p.peer_node.as_ref())
                .unwrap();
            let back = other
                .peers
                .values()
                .find(|q| {
                    q.peer_node.as_deref() == Some(&x.node)
                        && q.address.is_ipv4() == p.address.is_ipv4()
                })
                .unwrap();
            assert_ne!(p.passive, back.passive, "{} <-> {}", x.node, other.node);
        }
    }
    let p = &a.peers[&ip("198.51.100.11")];
    assert_eq!(p.source, Some(ip("198.51.100.10")));
    assert_eq!(p.peer_network, Some(net("198.51.100.0/24")));
    // One session per address family, as Calico configures BIRD.
    assert_eq!(p.families, vec![AddressFamily::Ipv4]);
    assert_eq!(
        a.peers[&ip("2001:db8:100::11")].families,
        vec![AddressFamily::Ipv6]
    );
    assert_eq!(p.restart_time, Some(Duration::from_secs(120)));
    assert_eq!(p.remote_as, 64512);
}

#[test]
fn mesh_passive_side_follows_calicos_text_comparison() {
    // Calico's confd compares the addresses as strings: "198.51.100.9" is greater
    // than "198.51.100.10", so .10 waits for .9 (a numeric comparison would make both
    // wait in a mesh with a Calico BIRD node).
    let c = cluster(
        "apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: 64512}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: n9}
spec: {bgp: {ipv4Address: 198.51.100.9/24}}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: n10}
spec: {bgp: {ipv4Address: 198.51.100.10/24}}
",
    );
    assert_eq!(
        peer_table(&of(&c, "n10")),
        vec![("198.51.100.9".into(), "node-to-node mesh", true)]
    );
    assert_eq!(
        peer_table(&of(&c, "n9")),
        vec![("198.51.100.10".into(), "node-to-node mesh", false)]
    );
}

#[test]
fn the_tor_example_gives_one_ebgp_peer_with_its_settings() {
    let a = of(&example("tor"), "node-a");
    assert_eq!(
        peer_table(&a),
        vec![("198.51.100.1".into(), "node specific", false)]
    );
    let p = &a.peers[&ip("198.51.100.1")];
    assert!(p.is_ebgp());
    assert_eq!((p.remote_as, p.local_as, p.port), (65001, 64512, 179));
    assert_eq!(p.hold, Some(Duration::from_secs(30)));
    assert_eq!(p.ttl_security, Some(1));
    assert_eq!(p.filters.len(), 1);
    assert_eq!(p.origin, "BGPPeer tor-rack-1");
    let o = &a.originated[&net("198.18.4.0/26")];
    assert_eq!(o.source, OriginSource::Block);
    assert!(o.blackhole && o.export);
    assert_eq!(
        o.communities,
        vec![crate::values::Community::Standard((64512 << 16) | 100)]
    );
}

#[test]
fn route_reflectors_are_outside_the_mesh_and_reflect_for_their_clients() {
    let c = example("route-reflectors");
    let rr1 = of(&c, "rr-1");
    assert_eq!(rr1.rr_cluster_id, Some("224.0.0.1".parse().unwrap()));
    assert_eq!(
        peer_table(&rr1),
        vec![
            ("198.51.100.3".into(), "node specific", false),
            ("198.51.100.10".into(), "route reflector client", false),
            ("198.51.100.11".into(), "route reflector client", false),
        ]
    );
    assert!(rr1.peers[&ip("198.51.100.10")].rr_client);
    assert!(!rr1.peers[&ip("198.51.100.3")].rr_client);
    let a = of(&c, "node-a");
    assert_eq!(
        peer_table(&a),
        vec![
            ("198.51.100.2".into(), "route reflector", false),
            ("198.51.100.3".into(), "route reflector", false),
        ]
    );
}

#[test]
fn the_mesh_skips_route_reflectors_when_both_are_configured() {
    let text = crate::cluster::tests::example("route-reflectors").replace(
        "nodeToNodeMeshEnabled: false",
        "nodeToNodeMeshEnabled: true",
    );
    let c = cluster(&text);
    let a = of(&c, "node-a");
    assert_eq!(
        peer_table(&a),
        vec![
            ("198.51.100.2".into(), "route reflector", false),
            ("198.51.100.3".into(), "route reflector", false),
            ("198.51.100.11".into(), "node-to-node mesh", true),
        ]
    );
    // A reflector takes no part in the mesh at all.
    assert!(of(&c, "rr-1")
        .peers
        .values()
        .all(|p| p.kind != PeerKind::Mesh));
}

#[test]
fn manual_reverse_peering_makes_no_session_back() {
    let text = crate::cluster::tests::example("route-reflectors").replace(
        "peerSelector: route-reflector == 'true'",
        "peerSelector: route-reflector == 'true'\n  reversePeering: Manual",
    );
    let c = cluster(&text);
    let rr1 = of(&c, "rr-1");
    // Forward only: rr-1 is selected by all() and peers with the other reflector.
    assert_eq!(
        peer_table(&rr1),
        vec![("198.51.100.3".into(), "node specific", false)]
    );
}

#[test]
fn borrowed_address_owner_keeps_the_block_borrower_advertises_the_host_route() {
    let c = example("borrowed");
    let a = of(&c, "node-a");
    let b = of(&c, "node-b");
    let cc = of(&c, "node-c");
    let block = net("198.18.4.0/26");
    let host = net("198.18.4.5/32");
    assert_eq!(a.originated[&block].source, OriginSource::Block);
    assert!(a.originated[&block].blackhole);
    assert!(!a.originated.contains_key(&host));
    assert_eq!(b.originated[&host].source, OriginSource::Borrowed);
    assert!(b.originated[&host].export && !b.originated[&host].blackhole);
    assert!(b.originated.contains_key(&net("198.18.4.64/26")));
    assert!(cc.originated.is_empty());
    // Every node's longest-prefix match over what the nodes originate sends the
    // borrowed address to node-b, its neighbour .6 to node-a.
    let all: Vec<(&str, IpNet)> = [&a, &b, &cc]
        .iter()
        .flat_map(|i| i.originated.keys().map(move |n| (i.node.as_str(), *n)))
        .collect();
    let lpm = |addr: &str| {
        let addr = ip(addr);
        all.iter()
            .filter(|(_, n)| n.contains(&addr))
            .max_by_key(|(_, n)| n.prefix_len())
            .map(|(who, _)| *who)
    };
    assert_eq!(lpm("198.18.4.5"), Some("node-b"));
    assert_eq!(lpm("198.18.4.6"), Some("node-a"));
    assert_eq!(lpm("198.18.4.70"), Some("node-b"));
    // The owner does not hide the borrower's /32 when it learns it: import accepts it.
    let peer_b = &a.peers[&ip("198.51.100.11")];
    assert!(allowed(&a, peer_b, host, true, false));
    // but node-a does not re-export a more-specific of its own block.
    assert!(!allowed(&a, peer_b, host, true, true));
}

#[test]
fn disabled_export_pools_are_originated_but_not_advertised() {
    let text = crate::cluster::tests::example("borrowed").replace(
        "spec: {cidr: 198.18.0.0/16, blockSize: 26}",
        "spec: {cidr: 198.18.0.0/16, blockSize: 26, disableBGPExport: true}",
    );
    let b = of(&cluster(&text), "node-b");
    let o = &b.originated[&net("198.18.4.5/32")];
    assert!(!o.export);
    let peer = &b.peers[&ip("198.51.100.10")];
    assert!(!allowed(&b, peer, net("198.18.4.64/26"), false, true));
}

#[test]
fn filters_apply_in_order_first_match_wins() {
    let a = of(&example("tor"), "node-a");
    let tor = &a.peers[&ip("198.51.100.1")];
    let export = |p: &str| allowed(&a, tor, net(p), false, true);
    let import = |p: &str| allowed(&a, tor, net(p), true, false);
    assert!(export("198.18.4.0/26"));
    assert!(!export("198.19.0.0/24"));
    assert!(import("0.0.0.0/0"));
    assert!(!import("198.51.100.0/24"));
    // No IPv6 rules: IPv6 routes are accepted.
    assert!(import("2001:db8::/32"));
    // The filter's final Reject decides before Calico's own statements.
    assert!(!export("203.0.113.0/24"));
}

#[test]
fn services_and_global_peers_with_ports() {
    let text = format!(
        "{}---\napiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {{name: edge}}\nspec: {{peerIP: \"[2001:db8:100::1]:1790\", asNumber: 65002}}\n",
        crate::cluster::tests::example("mesh").replace(
            "nodeMeshMaxRestartTime: 120s",
            "nodeMeshMaxRestartTime: 120s\n  serviceClusterIPs: [{cidr: 198.19.128.0/20}]"
        )
    );
    let a = of(&cluster(&text), "node-a");
    let edge = &a.peers[&ip("2001:db8:100::1")];
    assert_eq!((edge.port, edge.kind), (1790, PeerKind::Global));
    assert_eq!(edge.source, Some(ip("2001:db8:100::10")));
    assert_eq!(
        a.originated[&net("198.19.128.0/20")].source,
        OriginSource::Service(ServiceKind::ClusterIp)
    );
}

// Duplicate peerings: `peers_tests::duplicate_peerings_are_resolved_as_confd_resolves_them`.

#[test]
fn explicit_peers_replace_mesh_sessions_with_a_warning() {
    let text = format!(
        "{}---\napiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {{name: to-b}}\nspec: {{node: node-a, peerIP: 198.51.100.11, asNumber: 64512, holdTime: 9s}}\n",
        crate::cluster::tests::example("mesh")
    );
    let (a, w) = intent(&cluster(&text), "node-a").unwrap();
    assert_eq!(a.peers[&ip("198.51.100.11")].kind, PeerKind::NodeSpecific);
    assert_eq!(
        w,
        vec!["BGPPeer to-b replaces the node-to-node mesh session with 198.51.100.11".to_string()]
    );
}

#[test]
fn unknown_nodes_and_missing_router_ids_are_errors() {
    let c = example("mesh");
    let e = intent(&c, "node-z").unwrap_err();
    assert!(
        e.reason.contains("no Node resource named \"node-z\""),
        "{e}"
    );
    let text = "apiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {name: v6}\nspec: {bgp: {ipv6Address: \"2001:db8::5/64\"}}\n";
    let e = intent(&cluster(text), "v6").unwrap_err();
    assert!(
        e.reason.starts_with("the router id cannot be derived"),
        "{e}"
    );
}

#[test]
fn pending_and_deleted_affinities_originate_nothing() {
    let text = crate::cluster::tests::example("mesh")
        .replace(
            "spec: {node: node-b, cidr: 198.18.4.64/26, state: confirmed}",
            "spec: {node: node-b, cidr: 198.18.4.64/26, state: pending}",
        )
        .replace(
            "spec: {node: node-c, cidr: 198.18.4.128/26, state: confirmed}",
            "spec: {node: node-c, cidr: 198.18.4.128/26, state: confirmed, deleted: \"true\"}",
        );
    let c = cluster(&text);
    assert!(of(&c, "node-b").originated.is_empty());
    assert!(of(&c, "node-c").originated.is_empty());
}

#[test]
fn ipip_cross_subnet_follows_the_node_subnet() {
    let text = crate::cluster::tests::example("mesh").replace(
        "spec: {cidr: 198.18.0.0/16, blockSize: 26}",
        "spec: {cidr: 198.18.0.0/16, blockSize: 26, ipipMode: CrossSubnet}",
    );
    let a = of(&cluster(&text), "node-a");
    assert!(!a.ipip_toward(&net("198.18.4.64/26"), ip("198.51.100.11")));
    assert!(a.ipip_toward(&net("198.18.4.64/26"), ip("203.0.113.7")));
    assert!(!a.ipip_toward(&net("2001:db8:4000::40/122"), ip("2001:db8:100::11")));
}

#[test]
fn a_diff_touches_only_what_changed() {
    let c = example("mesh");
    let before = of(&c, "node-a");
    assert!(diff(&before, &before).is_empty());

    // A new node: one session per family added, nothing else touched.
    let text = format!(
        "{}---\napiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {{name: node-d}}\nspec: {{bgp: {{ipv4Address: 198.51.100.13/24}}}}\n",
        crate::cluster::tests::example("mesh")
    );
    let after = of(&cluster(&text), "node-a");
    let d = diff(&before, &after);
    assert_eq!(
        d.peers_added.iter().map(|p| p.address).collect::<Vec<_>>(),
        vec![ip("198.51.100.13")]
    );
    assert!(d.peers_changed.is_empty() && d.peers_removed.is_empty() && !d.identity_changed);
    assert!(d.originated.is_empty() && d.withdrawn.is_empty() && !d.policy_changed);

    // A mesh password: every mesh session changes.
    let text = crate::cluster::tests::example("mesh").replace(
        "nodeMeshMaxRestartTime: 120s",
        "nodeMeshMaxRestartTime: 120s\n  nodeMeshPassword: {env: MESH_PW}",
    );
    let d = diff(&before, &of(&cluster(&text), "node-a"));
    assert_eq!(d.peers_changed.len(), 4);

    // A block released: withdrawn; policy (own blocks) re-evaluated.
    let text = crate::cluster::tests::example("mesh").replace(
        "spec: {node: node-a, cidr: 198.18.4.0/26, state: confirmed}",
        "spec: {node: node-a, cidr: 198.18.4.0/26, state: pendingDeletion}",
    );
    let d = diff(&before, &of(&cluster(&text), "node-a"));
    assert_eq!(d.withdrawn, vec![net("198.18.4.0/26")]);
    assert!(d.policy_changed && d.peers_changed.is_empty());

    // The AS changes: identity.
    let text = crate::cluster::tests::example("mesh").replace("asNumber: 64512", "asNumber: 64513");
    assert!(diff(&before, &of(&cluster(&text), "node-a")).identity_changed);

    // Only a peer's BGPFilters change: relabelled (the session continues, its policy is
    // swapped), not changed (which would reset it).
    let mut filtered = before.clone();
    let (addr, peer) = filtered.peers.iter_mut().next().unwrap();
    let addr = *addr;
    peer.filters.push(crate::cluster::Filter {
        name: "tor-in".into(),
        ..Default::default()
    });
    let d = diff(&before, &filtered);
    assert!(d.peers_changed.is_empty(), "{d:?}");
    assert_eq!(
        d.peers_relabelled
            .iter()
            .map(|p| p.address)
            .collect::<Vec<_>>(),
        vec![addr]
    );
}
