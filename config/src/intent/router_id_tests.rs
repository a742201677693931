//! The router id from `CALICO_ROUTER_ID` (an address or `hash`), and IPv6-only nodes:
//! with the setting they get an intent whose every path works without IPv4.

use std::net::{IpAddr, Ipv4Addr};

use super::*;
use crate::cluster::AddressFamily;
use crate::datastore::Document;

fn cluster(text: &str) -> Cluster {
    Cluster::from_documents(&[Document {
        origin: "cluster.yaml".into(),
        text: text.into(),
    }])
    .unwrap_or_else(|e| panic!("{e}"))
    .0
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Three IPv6-only nodes in a mesh, bound to their addresses, with an IPv6 pool, a
/// block on node-a and a ToR peer (next hop self, carrying both families).
const V6_ONLY: &str = "apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: 64512, bindMode: NodeIP}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a, labels: {rack: r1}}
spec: {bgp: {ipv6Address: \"2001:db8:100::10/64\"}}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-b}
spec: {bgp: {ipv6Address: \"2001:db8:100::11/64\"}}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-c}
spec: {bgp: {ipv6Address: \"2001:db8:100::9/64\"}}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor, annotations: {tern/families: \"IPv4,IPv6\"}}
spec: {nodeSelector: rack == 'r1', peerIP: \"2001:db8:100::1\", asNumber: 65001, nextHopMode: Self}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pods-v6}
spec: {cidr: \"2001:db8:4000::/48\"}
---
apiVersion: projectcalico.org/v3
kind: BlockAffinity
metadata: {name: node-a-block}
spec: {node: node-a, cidr: \"2001:db8:4000::/122\", state: confirmed}
";

#[test]
fn the_hash_is_calicos_for_its_own_test_vectors() {
    // confd's template_funcs_test.go: a valid first octet, and one above 223 lowered.
    assert_eq!(
        hashed_router_id("nodeTest"),
        Ipv4Addr::new(109, 174, 215, 226)
    );
    assert_eq!(
        hashed_router_id("Testrobin123"),
        Ipv4Addr::new(207, 94, 5, 27)
    );
    assert_ne!(hashed_router_id("node-a"), hashed_router_id("node-b"));
    for n in ["node-a", "node-b", "a", "", "very-long.example.com"] {
        assert!(hashed_router_id(n).octets()[0] <= 223, "{n}");
    }
}

#[test]
fn an_ipv6_only_node_without_the_setting_is_told_to_set_calico_router_id() {
    let c = cluster(V6_ONLY);
    let e = intent(&c, "node-a").unwrap_err();
    assert_eq!(e.node, "node-a");
    let text = e.to_string();
    assert!(
        text.starts_with(
            "node node-a: the router id cannot be derived: the Node has no spec.bgp.ipv4Address"
        ),
        "{text}"
    );
    assert!(
        text.contains("on an IPv6-only node set CALICO_ROUTER_ID") && text.contains("`hash`"),
        "{text}"
    );
    assert_eq!(intent_with(&c, "node-a", None), Err(e));
}

#[test]
fn an_ipv6_only_node_runs_with_the_hashed_router_id_and_peers_over_ipv6() {
    let c = cluster(V6_ONLY);
    let (a, _) = intent_with(&c, "node-a", Some(RouterIdSetting::Hash)).unwrap();
    assert_eq!(a.router_id, hashed_router_id("node-a"));
    assert_eq!(a.ipv4, None);
    // bindMode NodeIP: the IPv6 address only.
    assert_eq!(a.listen.addresses, vec![ip("2001:db8:100::10")]);
    let table: Vec<(String, PeerKind, bool, Option<IpAddr>)> = a
        .peers
        .values()
        .map(|p| (p.address.to_string(), p.kind, p.passive, p.source))
        .collect();
    let me = Some(ip("2001:db8:100::10"));
    assert_eq!(
        table,
        vec![
            ("2001:db8:100::1".into(), PeerKind::NodeSpecific, false, me),
            // Compared as text, as Calico does: "…::9" and "…::11" are both above
            // "…::10", so node-a waits for both.
            ("2001:db8:100::9".into(), PeerKind::Mesh, true, me),
            ("2001:db8:100::11".into(), PeerKind::Mesh, true, me),
        ]
    );
    for p in a.peers.values() {
        assert!(p.address.is_ipv6(), "{p:?}");
    }
    let mesh = &a.peers[&ip("2001:db8:100::11")];
    assert_eq!(mesh.families, vec![AddressFamily::Ipv6]);
    let tor = &a.peers[&ip("2001:db8:100::1")];
    assert_eq!(tor.families, vec![AddressFamily::Ipv4, AddressFamily::Ipv6]);
    assert_eq!(tor.next_hop, NextHopMode::SelfHop);
    // The block is originated; encapsulation decisions need no IPv4 address.
    let block: IpNet = "2001:db8:4000::/122".parse().unwrap();
    assert!(a.originated.contains_key(&block));
    assert!(!a.ipip_toward(&block, ip("2001:db8:100::11")));
    assert!(!a.encapsulation().any());

    // Each pair dials once: node-b ("…::11") dials node-a ("…::10"), which waits.
    let (b, _) = intent_with(&c, "node-b", Some(RouterIdSetting::Hash)).unwrap();
    assert!(!b.peers[&ip("2001:db8:100::10")].passive);
    assert!(b.peers[&ip("2001:db8:100::9")].passive);
    assert_ne!(b.router_id, a.router_id);
}

#[test]
fn a_fixed_router_id_wins_over_the_ipv4_address() {
    let c = cluster(&crate::cluster::tests::example("mesh"));
    let fixed = Ipv4Addr::new(203, 0, 113, 7);
    let (i, _) = intent_with(&c, "node-a", Some(RouterIdSetting::Address(fixed))).unwrap();
    assert_eq!(i.router_id, fixed);
    // Everything else is as without the setting.
    let (plain, _) = intent(&c, "node-a").unwrap();
    assert_eq!(plain.router_id, Ipv4Addr::new(198, 51, 100, 10));
    assert_eq!(
        Intent {
            router_id: fixed,
            ..plain
        },
        i
    );

    let (h, _) = intent_with(&c, "node-a", Some(RouterIdSetting::Hash)).unwrap();
    assert_eq!(h.router_id, hashed_router_id("node-a"));

    let e = intent_with(
        &c,
        "node-a",
        Some(RouterIdSetting::Address(Ipv4Addr::UNSPECIFIED)),
    )
    .unwrap_err();
    assert!(e.to_string().contains("0.0.0.0"), "{e}");
}

#[test]
fn a_dual_stack_node_meshes_with_an_ipv6_only_one_over_ipv6_only() {
    let text = format!(
        "{}---\napiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {{name: node-d}}\nspec: {{bgp: {{ipv4Address: 198.51.100.13/24, ipv6Address: \"2001:db8:100::13/64\"}}}}\n",
        V6_ONLY
    );
    let c = cluster(&text);
    // node-d has IPv4: no setting needed.
    let (d, _) = intent(&c, "node-d").unwrap();
    assert_eq!(d.router_id, Ipv4Addr::new(198, 51, 100, 13));
    assert_eq!(
        d.listen.addresses,
        vec![ip("198.51.100.13"), ip("2001:db8:100::13")]
    );
    let mesh: Vec<IpAddr> = d
        .peers
        .values()
        .filter(|p| p.kind == PeerKind::Mesh)
        .map(|p| p.address)
        .collect();
    assert_eq!(
        mesh,
        vec![
            ip("2001:db8:100::9"),
            ip("2001:db8:100::10"),
            ip("2001:db8:100::11")
        ]
    );
    let (a, _) = intent_with(&c, "node-a", Some(RouterIdSetting::Hash)).unwrap();
    assert!(a.peers.contains_key(&ip("2001:db8:100::13")));
    assert!(!a.peers.keys().any(IpAddr::is_ipv4));
}
