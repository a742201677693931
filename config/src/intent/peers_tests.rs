//! Table tests of the peer set against confd's peering rules (`updatePeersV1` in
//! `confd/pkg/backends/calico/client.go`, `buildPeerFromData` in `bgp_processor.go`):
//! resources in, sessions and warnings out.

use std::net::IpAddr;

use crate::cluster::Cluster;
use crate::datastore::endpoint_status::LocalWorkload;
use crate::datastore::Document;
use crate::intent::{intent, PeerKind};

/// Two dual-stack nodes in AS 64512 with the mesh off; node-b is labelled `rack: r1`.
const NODES: &str = "apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: 64512, nodeToNodeMeshEnabled: false}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 198.51.100.10/24, ipv6Address: \"2001:db8:100::10/64\"}}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-b, labels: {rack: r1}}
spec: {bgp: {ipv4Address: 198.51.100.11/24, ipv6Address: \"2001:db8:100::11/64\"}}
";

fn peer(name: &str, spec: &str) -> String {
    format!("---\napiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {{name: {name}}}\nspec: {{{spec}}}\n")
}

fn cluster_of(extra: &str) -> (Cluster, Vec<String>) {
    let (c, w) = Cluster::from_documents(&[Document {
        origin: "cluster.yaml".into(),
        text: format!("{NODES}{extra}"),
    }])
    .unwrap_or_else(|e| panic!("{e}"));
    (c, w.iter().map(ToString::to_string).collect())
}

/// One session of the table: address, port, kind, passive, remote AS, origin.
type Row = (IpAddr, u16, PeerKind, bool, u32, String);

/// The sessions of `node` and every warning (the snapshot's, then the intent's).
fn sessions(extra: &str, node: &str) -> (Vec<Row>, Vec<String>) {
    let (c, mut warnings) = cluster_of(extra);
    let (i, w) = intent(&c, node).unwrap_or_else(|e| panic!("{e}"));
    warnings.extend(w);
    let rows = i
        .peers
        .values()
        .map(|p| {
            (
                p.address,
                p.port,
                p.kind,
                p.passive,
                p.remote_as,
                p.origin.clone(),
            )
        })
        .collect();
    (rows, warnings)
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn row(a: &str, port: u16, kind: PeerKind, passive: bool, asn: u32, origin: &str) -> Row {
    (ip(a), port, kind, passive, asn, origin.to_string())
}

/// A workload Felix selected for BGPPeer `peer` (its endpoint status file).
fn workload(peer: &str, v4: Option<&str>, v6: Option<&str>) -> LocalWorkload {
    LocalWorkload {
        file: format!("k8s default%2f{peer} eth0"),
        bgp_peer: peer.to_string(),
        interface: "cali12ab".into(),
        ipv4: v4.map(|a| a.parse().unwrap_or_else(|e| panic!("{e}"))),
        ipv6: v6.map(|a| a.parse().unwrap_or_else(|e| panic!("{e}"))),
    }
}

#[test]
fn workloads_felix_selected_are_passive_sessions_per_family_and_the_rest_applies() {
    let extra = format!(
        "{}{}{}",
        peer(
            "vms",
            "localWorkloadSelector: \"kubevirt.io == 'virt-launcher'\", asNumber: 65100, password: {secretKeyRef: {name: s, key: k}}, keepaliveTime: 5s"
        ),
        peer(
            "elsewhere",
            "node: node-b, localWorkloadSelector: all(), asNumber: 65200"
        ),
        peer("tor", "peerIP: 198.51.100.1, asNumber: 65001"),
    );
    let (c, _) = cluster_of(&extra);
    let local = [
        workload("vms", Some("198.18.1.5"), Some("2001:db8:1::5")),
        // Selected by a BGPPeer that does not apply to node-a, and by none at all.
        workload("elsewhere", Some("198.18.1.6"), None),
        workload("nobody", Some("198.18.1.7"), None),
    ];
    let (i, _) =
        crate::intent::intent_of(&c, "node-a", None, &local).unwrap_or_else(|e| panic!("{e}"));
    let got: Vec<(String, PeerKind, bool, u32, Option<IpAddr>, String)> = i
        .peers
        .values()
        .map(|p| {
            (
                p.address.to_string(),
                p.kind,
                p.passive,
                p.remote_as,
                p.source,
                p.origin.clone(),
            )
        })
        .collect();
    let vm = |a: &str| {
        (
            a.to_string(),
            PeerKind::LocalWorkload,
            true,
            65100,
            None,
            "BGPPeer vms (workload cali12ab)".to_string(),
        )
    };
    assert_eq!(
        got,
        vec![
            vm("198.18.1.5"),
            (
                "198.51.100.1".to_string(),
                PeerKind::Global,
                false,
                65001,
                Some(ip("198.51.100.10")),
                "BGPPeer tor".to_string()
            ),
            vm("2001:db8:1::5"),
        ]
    );
    // confd's local peer data carries no password nor timers.
    let p = &i.peers[&ip("198.18.1.5")];
    assert!(p.password.is_none() && p.keepalive.is_none(), "{p:?}");
    // Reached through the workload's interface: no layer-2 warning for it.
    assert!(p.off_link_expected());
    assert!(!i.peers[&ip("198.51.100.1")].off_link_expected());
    // Without workloads, no session and no warning: the BGPPeer is valid.
    let (rows, w) = sessions(&extra, "node-a");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(w.is_empty(), "{w:?}");
}

#[test]
fn a_local_workload_selector_calico_refuses_is_an_error_naming_it() {
    for (spec, field, words) in [
        (
            "localWorkloadSelector: all(), peerIP: 198.51.100.1, asNumber: 65100",
            "spec.localWorkloadSelector",
            "without peerIP",
        ),
        (
            "localWorkloadSelector: all()",
            "spec.asNumber",
            "workload peers",
        ),
        (
            "localWorkloadSelector: \"a ==\", asNumber: 65100",
            "spec.localWorkloadSelector",
            "",
        ),
    ] {
        let text = format!("{NODES}{}", peer("vms", spec));
        let e = Cluster::from_documents(&[Document {
            origin: "cluster.yaml".into(),
            text,
        }])
        .err()
        .unwrap_or_else(|| panic!("{spec}: accepted"))
        .to_string();
        assert!(e.contains(field) && e.contains(words), "{spec}: {e}");
    }
}

#[test]
fn duplicate_peerings_are_resolved_as_confd_resolves_them() {
    // (resources, the origin that must win, words the warning must hold)
    let cases: &[(String, &str, &str)] = &[
        // A global peering beats a node-specific one, whatever the names.
        (
            format!(
                "{}{}",
                peer(
                    "a-node",
                    "node: node-a, peerIP: 198.51.100.1, asNumber: 65001, keepaliveTime: 5s"
                ),
                peer("z-global", "peerIP: 198.51.100.1, asNumber: 65001"),
            ),
            "BGPPeer z-global",
            "a global peering wins over a node-specific one",
        ),
        // Two global peerings: the first by name.
        (
            format!(
                "{}{}",
                peer("b", "peerIP: 198.51.100.1, asNumber: 65002"),
                peer("a", "peerIP: 198.51.100.1, asNumber: 65001"),
            ),
            "BGPPeer a",
            "the first by name wins",
        ),
        // An explicit peering beats the reverse of another node's peering.
        (
            format!(
                "{}{}",
                peer(
                    "a-reverse",
                    "node: node-b, peerSelector: \"all()\", keepaliveTime: 7s"
                ),
                peer(
                    "z-explicit",
                    "node: node-a, peerIP: 198.51.100.11, asNumber: 64512"
                ),
            ),
            "BGPPeer z-explicit",
            "an explicit peering wins over a reverse one",
        ),
    ];
    for (extra, winner, why) in cases {
        let (rows, w) = sessions(extra, "node-a");
        let origins: Vec<&str> = rows.iter().map(|r| r.5.as_str()).collect();
        assert!(origins.contains(winner), "{extra}: {rows:?}");
        let dup: Vec<&String> = w
            .iter()
            .filter(|w| w.contains("different settings"))
            .collect();
        assert_eq!(dup.len(), 1, "{extra}: {w:?}");
        assert!(dup[0].contains(why), "{extra}: {}", dup[0]);
        assert!(dup[0].contains(&format!("{winner} is used")), "{}", dup[0]);
    }
}

#[test]
fn a_peer_ip_that_is_a_calico_node_gets_its_port_passive_rule_and_a_reverse_peering() {
    let extra = format!(
        "{}{}",
        peer("to-b", "peerIP: 198.51.100.11, asNumber: 64512"),
        "---\napiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata: {name: node.node-b}\nspec: {listenPort: 1790}\n",
    );
    // node-a: the port is node-b's listenPort, and as in the mesh the side whose peer
    // has the greater address (as text) waits: node-a waits, node-b dials.
    let (rows, _) = sessions(&extra, "node-a");
    assert_eq!(
        rows,
        vec![row(
            "198.51.100.11",
            1790,
            PeerKind::Global,
            true,
            64512,
            "BGPPeer to-b"
        )]
    );
    // node-b: the reverse peering toward node-a, IPv4 only (the peerIP's family).
    let (rows, _) = sessions(&extra, "node-b");
    assert_eq!(
        rows,
        vec![row(
            "198.51.100.10",
            179,
            PeerKind::NodeSpecific,
            false,
            64512,
            "BGPPeer to-b"
        )]
    );
}

#[test]
fn reverse_peering_manual_gives_no_reverse_session() {
    let extra = peer(
        "to-b",
        "peerIP: 198.51.100.11, asNumber: 64512, reversePeering: Manual",
    );
    let (rows, _) = sessions(&extra, "node-b");
    assert_eq!(rows, vec![]);
}

#[test]
fn an_ibgp_peer_ip_on_a_route_reflector_is_its_client() {
    let extra = format!(
        "{}{}",
        "---\napiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {name: rr}\nspec: {bgp: {ipv4Address: 198.51.100.20/24, routeReflectorClusterID: 203.0.113.1}}\n",
        peer("clients", "node: rr, peerIP: 198.51.100.30, asNumber: 64512"),
    );
    let (rows, _) = sessions(&extra, "rr");
    assert_eq!(
        rows,
        vec![row(
            "198.51.100.30",
            179,
            PeerKind::RouteReflectorClient,
            false,
            64512,
            "BGPPeer clients"
        )]
    );
    // An eBGP peerIP is not a client.
    let extra = extra.replace("asNumber: 64512", "asNumber: 65030");
    let (rows, _) = sessions(&extra, "rr");
    assert_eq!(rows[0].2, PeerKind::NodeSpecific, "{rows:?}");
}

#[test]
fn unknown_v3_fields_are_listed_never_dropped_silently() {
    // (resources, the field each warning must name)
    let cases: &[(String, &str)] = &[
        (
            peer("tor", "peerIP: 198.51.100.1, asNumber: 65001, someLaterField: 1"),
            "spec.someLaterField",
        ),
        (
            "---\napiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata: {name: node.node-a}\nspec: {listenPort: 1790, someLaterField: x}\n".to_string(),
            "spec.someLaterField",
        ),
    ];
    for (extra, field) in cases {
        let (_, w) = sessions(extra, "node-a");
        assert!(
            w.iter().any(|w| w.contains(&format!("field `{field}`"))),
            "{extra}: {w:?}"
        );
    }
}

#[test]
fn reachable_by_is_a_host_route_to_the_peer_and_not_a_session_setting() {
    let with = |gw: &str| {
        let extra = format!(
            "{}{}",
            peer("rs", &format!("peerIP: 203.0.113.2, asNumber: 65010{gw}")),
            peer(
                "rs6",
                "peerIP: \"2001:db8:9::2\", asNumber: 65010, reachableBy: \"2001:db8::fe\""
            ),
        );
        let (c, w) = cluster_of(&extra);
        assert!(w.iter().all(|w| !w.contains("reachableBy")), "{w:?}");
        intent(&c, "node-a").unwrap_or_else(|e| panic!("{e}")).0
    };
    let i = with(", reachableBy: 198.51.100.254");
    assert!(i.peers.values().all(|p| p.off_link_expected()));
    let routes: Vec<(String, String)> = i
        .peer_routes()
        .iter()
        .map(|(n, g)| (n.to_string(), g.to_string()))
        .collect();
    assert_eq!(
        routes,
        vec![
            ("203.0.113.2/32".into(), "198.51.100.254".into()),
            ("2001:db8:9::2/128".into(), "2001:db8::fe".into()),
        ]
    );
    // Another gateway, or none: the route changes, the session is not restarted.
    for (other, want) in [
        (", reachableBy: 198.51.100.253", Some("198.51.100.253")),
        ("", None),
    ] {
        let d = crate::diff::diff(&i, &with(other));
        assert!(d.peers_changed.is_empty(), "{d:?}");
        assert!(d.policy_changed);
        let now: Vec<(String, Option<String>)> = d
            .peer_routes
            .iter()
            .map(|(n, g)| (n.to_string(), g.map(|g| g.to_string())))
            .collect();
        assert_eq!(now, vec![("203.0.113.2/32".into(), want.map(String::from))]);
    }
}

#[test]
fn reachable_by_that_calico_refuses_is_an_error_naming_it() {
    for (spec, words) in [
        (
            "peerIP: 203.0.113.2, asNumber: 65010, reachableBy: 198.51.100.0/24",
            "is not an IP address",
        ),
        (
            "peerIP: 203.0.113.2, asNumber: 65010, reachableBy: \"2001:db8::fe\"",
            "different address families",
        ),
        (
            "peerSelector: all(), reachableBy: 198.51.100.254",
            "needs peerIP",
        ),
    ] {
        let text = format!("{NODES}{}", peer("rs", spec));
        let e = Cluster::from_documents(&[Document {
            origin: "cluster.yaml".into(),
            text,
        }])
        .err()
        .unwrap_or_else(|| panic!("{spec}: accepted"))
        .to_string();
        assert!(
            e.contains("spec.reachableBy") && e.contains(words),
            "{spec}: {e}"
        );
    }
}

#[test]
fn a_reflector_reflects_to_ibgp_nodes_only() {
    let extra = format!(
        "{}{}{}",
        "---\napiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {name: rr}\nspec: {bgp: {ipv4Address: 198.51.100.20/24, routeReflectorClusterID: 203.0.113.1}}\n",
        "---\napiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {name: other-as}\nspec: {bgp: {ipv4Address: 198.51.100.30/24, asNumber: 65030}}\n",
        peer("from-rr", "node: rr, peerSelector: \"all()\", reversePeering: Manual"),
    );
    let (rows, _) = sessions(&extra, "rr");
    let kinds: Vec<(IpAddr, PeerKind)> = rows.iter().map(|r| (r.0, r.2)).collect();
    assert_eq!(
        kinds,
        vec![
            (ip("198.51.100.10"), PeerKind::RouteReflectorClient),
            (ip("198.51.100.11"), PeerKind::RouteReflectorClient),
            (ip("198.51.100.30"), PeerKind::NodeSpecific),
        ]
    );
}

#[test]
fn identical_duplicates_make_one_session_with_a_warning() {
    let extra = format!(
        "{}{}",
        peer("tor-a", "peerIP: 198.51.100.1, asNumber: 65001"),
        peer("tor-b", "peerIP: 198.51.100.1, asNumber: 65001"),
    );
    let (rows, w) = sessions(&extra, "node-a");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(
        w.iter()
            .any(|w| w.contains("BGPPeer tor-a and BGPPeer tor-b") && w.contains("they agree")),
        "{w:?}"
    );
}
