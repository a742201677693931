//! One row per confd behaviour: a cluster, a node's intent, a peer, a route, and what
//! Calico's BIRD filters (v3.32) decide for it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a bad fixture is a bug

use std::net::IpAddr;

use ipnet::IpNet;
use tern_bgp::policy::{PeerType, RouteFacts, RouteSource, Verdict, BIRD_INT_MAX};
use tern_bgp::wire::{AsPath, Community, PathAttributes};

use crate::datastore::Document;
use crate::intent::{intent, Intent};
use crate::Cluster;

/// node-a (AS 64512) meshes with node-b and peers with two ToRs over eBGP: tor-a
/// (65001, filter `tor-a`) and tor-b (65002, filter `tor-b`).
const CLUSTER: &str = r#"
apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec:
  asNumber: 64512
  communities: [{name: pods, value: "64512:100"}]
  prefixAdvertisements: [{cidr: 198.18.0.0/16, communities: [pods, "64512:1:2"]}]
  serviceClusterIPs: [{cidr: 203.0.113.128/25}]
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 198.51.100.10/24}}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-b}
spec: {bgp: {ipv4Address: 198.51.100.11/24}}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pods}
spec: {cidr: 198.18.0.0/16, blockSize: 26}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: quiet}
spec: {cidr: 198.19.0.0/24, blockSize: 26, disableBGPExport: true}
---
apiVersion: projectcalico.org/v3
kind: BlockAffinity
metadata: {name: a1}
spec: {node: node-a, cidr: 198.18.4.0/26, state: confirmed}
---
apiVersion: projectcalico.org/v3
kind: BlockAffinity
metadata: {name: a2}
spec: {node: node-a, cidr: 198.19.0.0/26, state: confirmed}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor-a}
spec: {node: node-a, peerIP: 198.51.100.1, asNumber: 65001, filters: [tor-a]}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor-b}
spec: {node: node-a, peerIP: 198.51.100.2, asNumber: 65002, filters: [tor-b, tor-b-late]}
---
apiVersion: projectcalico.org/v3
kind: BGPFilter
metadata: {name: tor-a}
spec:
  importV4:
    - {cidr: 198.51.100.0/24, matchOperator: Equal, action: Reject}
    - {cidr: 198.18.0.0/15, matchOperator: In, prefixLength: {min: 24, max: 26}, action: Reject}
    - {peerType: iBGP, action: Reject}
  exportV4:
    - {cidr: 203.0.113.0/24, matchOperator: Equal, action: Accept}
    - {cidr: 198.18.8.0/26, matchOperator: Equal, action: Accept, operations: [{addCommunity: {value: "65001:7"}}, {prependASPath: {prefix: [64512, 64512]}}]}
---
apiVersion: projectcalico.org/v3
kind: BGPFilter
metadata: {name: tor-b}
spec:
  exportV4:
    - {interface: "cali*", action: Accept}
    - {source: RemotePeers, cidr: 198.18.0.0/16, matchOperator: In, action: Reject}
    - {communities: {values: ["65002:666"]}, action: Reject}
    - {asPathPrefix: [65009], action: Reject}
---
apiVersion: projectcalico.org/v3
kind: BGPFilter
metadata: {name: tor-b-late}
spec:
  exportV4:
    - {cidr: 198.18.4.0/26, matchOperator: Equal, action: Reject}
"#;

pub(super) fn node_a() -> Intent {
    let (c, _) = Cluster::from_documents(&[Document {
        origin: "cluster.yaml".into(),
        text: CLUSTER.into(),
    }])
    .unwrap_or_else(|e| panic!("{e}"));
    intent(&c, "node-a").unwrap_or_else(|e| panic!("{e}")).0
}

/// Which way a row goes.
#[derive(Debug, Clone, Copy)]
enum Dir {
    Import,
    Export,
}
use Dir::{Export, Import};

/// One route as the speaker would describe it.
struct Route {
    prefix: &'static str,
    source: RouteSource,
    interface: Option<&'static str>,
    attrs: PathAttributes,
}

fn bgp(prefix: &'static str) -> Route {
    Route {
        prefix,
        source: RouteSource::Bgp,
        interface: None,
        attrs: PathAttributes {
            as_path: Some(AsPath::from_sequence([65001])),
            local_pref: Some(100),
            ..PathAttributes::default()
        },
    }
}

fn originated(prefix: &'static str) -> Route {
    Route {
        prefix,
        source: RouteSource::Originated,
        interface: None,
        attrs: PathAttributes::default(),
    }
}

fn kernel(prefix: &'static str, interface: &'static str) -> Route {
    Route {
        prefix,
        source: RouteSource::Kernel,
        interface: Some(interface),
        attrs: PathAttributes::default(),
    }
}

fn with(mut r: Route, f: impl FnOnce(&mut PathAttributes)) -> Route {
    f(&mut r.attrs);
    r
}

fn run(i: &Intent, peer: &str, dir: Dir, r: &Route) -> (Verdict, String) {
    let p = &i.peers[&peer.parse::<IpAddr>().unwrap()];
    let policy = i.peer_policy(p);
    let facts = RouteFacts {
        prefix: r.prefix.parse::<IpNet>().unwrap(),
        source: r.source,
        interface: r.interface,
        attrs: &r.attrs,
        kernel_metric: None,
        peer: if p.is_ebgp() {
            PeerType::External
        } else {
            PeerType::Internal
        },
    };
    let prog = match dir {
        Import => &policy.import,
        Export => &policy.export,
    };
    let v = prog.evaluate(&facts);
    let label = prog.label(v.decided_by).to_string();
    (v, label)
}

const TOR_A: &str = "198.51.100.1";
const TOR_B: &str = "198.51.100.2";
const MESH_B: &str = "198.51.100.11";

#[test]
fn confd_behaviours() {
    let i = node_a();
    // (what, peer, direction, route, accepted, deciding statement's label starts with)
    let rows: Vec<(&str, &str, Dir, Route, bool, &str)> = vec![
        (
            "transit between two eBGP peers refused",
            TOR_B,
            Export,
            bgp("203.0.113.0/25"),
            false,
            "default",
        ),
        (
            "ToR default route not re-advertised to the mesh",
            MESH_B,
            Export,
            bgp("0.0.0.0/0"),
            false,
            "default",
        ),
        (
            "ToR default route imported (Calico imports all)",
            TOR_A,
            Import,
            bgp("0.0.0.0/0"),
            true,
            "default",
        ),
        (
            "borrowed /32 not re-exported by the block's owner",
            TOR_A,
            Export,
            bgp("198.18.4.7/32"),
            false,
            "calico_aggr: inside own block",
        ),
        (
            "own block exported",
            TOR_A,
            Export,
            originated("198.18.4.0/26"),
            true,
            "calico_aggr: own block",
        ),
        (
            "own block of a disableBGPExport pool not exported",
            TOR_A,
            Export,
            originated("198.19.0.0/26"),
            false,
            "calico: pool quiet",
        ),
        (
            "learned route in a disableBGPExport pool not passed on",
            TOR_A,
            Export,
            bgp("198.19.0.64/26"),
            false,
            "calico: pool quiet",
        ),
        (
            "another node's block passed on (pool route)",
            TOR_A,
            Export,
            bgp("198.18.12.0/26"),
            true,
            "calico: pool pods",
        ),
        (
            "service range exported",
            TOR_A,
            Export,
            originated("203.0.113.128/25"),
            true,
            "calico: service route",
        ),
        (
            "filter reject on import (Equal)",
            TOR_A,
            Import,
            bgp("198.51.100.0/24"),
            false,
            "BGPFilter tor-a importV4[0]",
        ),
        (
            "filter Equal does not match a more-specific: falls through",
            TOR_A,
            Import,
            bgp("198.51.100.0/25"),
            true,
            "default",
        ),
        (
            "prefixLength range matches /24-/26 inside the CIDR",
            TOR_A,
            Import,
            bgp("198.18.9.0/24"),
            false,
            "BGPFilter tor-a importV4[1]",
        ),
        (
            "prefixLength range: a /27 falls through",
            TOR_A,
            Import,
            bgp("198.18.9.0/27"),
            true,
            "default",
        ),
        (
            "peerType iBGP rule skipped for an eBGP peer",
            TOR_A,
            Import,
            bgp("203.0.113.0/24"),
            true,
            "default",
        ),
        (
            "filter accept on export beats Calico's reject",
            TOR_A,
            Export,
            bgp("203.0.113.0/24"),
            true,
            "BGPFilter tor-a exportV4[0]",
        ),
        (
            "source RemotePeers: a learned pool route rejected",
            TOR_B,
            Export,
            bgp("198.18.12.0/26"),
            false,
            "BGPFilter tor-b exportV4[1]",
        ),
        (
            "source RemotePeers: an originated one is not learned",
            TOR_B,
            Export,
            originated("198.18.40.0/26"),
            true,
            "calico: pool pods",
        ),
        (
            "interface cali* accepts a workload route",
            TOR_B,
            Export,
            kernel("203.0.113.9/32", "cali0123"),
            true,
            "BGPFilter tor-b exportV4[0]",
        ),
        (
            "interface: another device falls through to reject",
            TOR_B,
            Export,
            kernel("203.0.113.9/32", "eth0"),
            false,
            "default",
        ),
        (
            "community match",
            TOR_B,
            Export,
            with(bgp("203.0.113.0/24"), |a| {
                a.communities.push(Community((65002 << 16) | 666))
            }),
            false,
            "BGPFilter tor-b exportV4[2]",
        ),
        (
            "asPathPrefix match",
            TOR_B,
            Export,
            with(originated("203.0.113.0/24"), |a| {
                a.as_path = Some(AsPath::from_sequence([65009]))
            }),
            false,
            "BGPFilter tor-b exportV4[3]",
        ),
        (
            "filters in the BGPPeer's order, second filter reached",
            TOR_B,
            Export,
            originated("198.18.4.0/26"),
            false,
            "BGPFilter tor-b-late exportV4[0]",
        ),
        (
            "Felix's VXLAN route not to iBGP peers",
            MESH_B,
            Export,
            kernel("198.18.12.0/26", "vxlan.calico"),
            false,
            "calico: Felix's tunnel route",
        ),
        (
            "Felix's VXLAN route to an eBGP peer (pool route)",
            TOR_A,
            Export,
            kernel("198.18.12.0/26", "vxlan.calico"),
            true,
            "calico: pool pods",
        ),
    ];
    let mut failures = Vec::new();
    for (what, peer, dir, route, want, by) in &rows {
        let (v, label) = run(&i, peer, *dir, route);
        if v.accepted() != *want || !label.starts_with(by) {
            failures.push(format!(
                "{what}: {dir:?} {} to/from {peer}: accepted {} by {label:?}, want {want} by {by:?}",
                route.prefix,
                v.accepted()
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn prefix_advertisements_reach_reflected_routes_and_filter_accepts_skip_them() {
    let i = node_a();
    let pods = Community((64512 << 16) | 100);
    // A route another node advertised, passed on: Calico's communities are added.
    let (v, _) = run(&i, TOR_A, Export, &bgp("198.18.12.0/26"));
    assert_eq!(v.changes.communities, vec![pods]);
    assert_eq!(v.changes.large_communities.len(), 1);
    // Own block: the same.
    let (v, _) = run(&i, TOR_A, Export, &originated("198.18.4.0/26"));
    assert_eq!(v.changes.communities, vec![pods]);
    // A BGPFilter accept ends the filter before apply_communities: only its own
    // operations apply, in order (prepends end up in the order listed).
    let (v, label) = run(&i, TOR_A, Export, &bgp("198.18.8.0/26"));
    assert!(v.accepted(), "{label}");
    assert_eq!(v.changes.communities, vec![Community((65001 << 16) | 7)]);
    assert_eq!(v.changes.prepend, vec![64512, 64512]);
}

#[test]
fn local_pref_carries_the_route_priority() {
    let i = node_a();
    // Originated: LOCAL_PREF = BIRD_INT_MAX - 1024 (the normal priority).
    let (v, _) = run(&i, MESH_B, Export, &originated("198.18.4.0/26"));
    assert!(v.accepted());
    assert_eq!(v.changes.local_pref, Some(BIRD_INT_MAX - 1024));
    // Learned: LOCAL_PREF kept, the priority derived from it.
    let (v, _) = run(&i, TOR_A, Export, &bgp("198.18.12.0/26"));
    assert_eq!(v.changes.local_pref, None);
    assert_eq!(v.changes.priority, Some(BIRD_INT_MAX - 100));
    // The family's normal priority (ipv4NormalRoutePriority / ipv6NormalRoutePriority).
    let mut i = node_a();
    i.normal_priority.v4 = 300;
    let (v, _) = run(&i, MESH_B, Export, &originated("198.18.4.0/26"));
    assert_eq!(v.changes.local_pref, Some(BIRD_INT_MAX - 300));
    i.normal_priority = crate::cluster::NormalPriority { v4: 1024, v6: 300 };
    let (v, _) = run(&i, MESH_B, Export, &originated("198.18.4.0/26"));
    assert_eq!(
        v.changes.local_pref,
        Some(BIRD_INT_MAX - 1024),
        "IPv4 keeps its own"
    );
}

#[test]
fn a_route_reflector_reflects_pool_routes_only() {
    let text = format!(
        "{CLUSTER}---\napiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {{name: rr}}\nspec: {{bgp: {{ipv4Address: 198.51.100.20/24, routeReflectorClusterID: 198.51.100.20}}}}\n---\napiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {{name: clients}}\nspec: {{nodeSelector: all(), peerSelector: all()}}\n"
    );
    let (c, _) = Cluster::from_documents(&[Document {
        origin: "cluster.yaml".into(),
        text,
    }])
    .unwrap_or_else(|e| panic!("{e}"));
    let rr = intent(&c, "rr").unwrap_or_else(|e| panic!("{e}")).0;
    let client = "198.51.100.10";
    assert!(rr.peers[&client.parse::<IpAddr>().unwrap()].rr_client);
    let (v, _) = run(&rr, client, Export, &bgp("198.18.12.0/26"));
    assert!(v.accepted(), "a client's block is reflected");
    assert_eq!(v.changes.communities, vec![Community((64512 << 16) | 100)]);
    let (v, label) = run(&rr, client, Export, &bgp("0.0.0.0/0"));
    assert!(!v.accepted(), "a ToR route is not reflected ({label})");
}
