//! The lab's Calico v3 resources (`cluster.yaml`), as `calicoctl get -o yaml` prints
//! them: the BGPConfiguration, a Node per node, the BGPPeers of the topology, the
//! IPPools, and each node's BlockAffinity and IPAMBlock (borrowed addresses included).

use std::fmt::Write as _;

use super::plan::{
    LabSpec, NodePlan, Topology, BIRD_RR_V4, BIRD_RR_V6, CLUSTER_AS, NODE_COMMUNITY,
    NODE_LARGE_COMMUNITY, POOL_V4, POOL_V6, RR_CLUSTER_ID, TOR_AS, TOR_V4, TOR_V6,
};

/// The Calico v3 resources of the lab, as `calicoctl get -o yaml` prints them.
pub fn cluster_yaml(spec: &LabSpec) -> String {
    let nodes = spec.node_plans();
    let mut y = String::new();
    let (bgp_meta, bgp) = bgp_configuration(spec);
    doc(&mut y, "BGPConfiguration", &bgp_meta, &bgp);
    node_docs(&mut y, &nodes);
    peer_docs(&mut y, spec);
    pool_docs(&mut y, spec);
    block_docs(&mut y, &nodes);
    y
}

/// Appends one resource document.
fn doc(y: &mut String, kind: &str, meta: &str, spec: &str) {
    let _ = write!(
        y,
        "---\napiVersion: projectcalico.org/v3\nkind: {kind}\nmetadata: {meta}\nspec:\n{spec}"
    );
}

/// The `default` BGPConfiguration: (metadata, spec).
fn bgp_configuration(spec: &LabSpec) -> (String, String) {
    let mut bgp = format!(
        "  asNumber: {CLUSTER_AS}\n  nodeToNodeMeshEnabled: {}\n",
        spec.topology == Topology::Mesh
    );
    if let Some(t) = spec.restart_time {
        let _ = writeln!(bgp, "  nodeMeshMaxRestartTime: {t}s");
    }
    if spec.communities {
        let _ = writeln!(
            bgp,
            "  communities:\n    - {{name: pods, value: \"{NODE_COMMUNITY}\"}}\n    - {{name: big, value: \"{NODE_LARGE_COMMUNITY}\"}}\n  prefixAdvertisements:\n    - {{cidr: {POOL_V4}, communities: [pods, big]}}"
        );
        if spec.ipv6 {
            let _ = writeln!(
                bgp,
                "    - {{cidr: \"{POOL_V6}\", communities: [pods, big]}}"
            );
        }
    }
    // tern's own settings are annotations: Calico's spec has no field for them.
    let bgp_meta = match spec.mesh_hold {
        Some(h) => format!(
            "{{name: default, annotations: {{tern/node-mesh-hold-time: {h}s, tern/node-mesh-keepalive-time: {}s}}}}",
            (h / 3).max(1)
        ),
        None => "{name: default}".to_string(),
    };
    (bgp_meta, bgp)
}

/// A Node per lab node (reflectors labelled and with their cluster id).
fn node_docs(y: &mut String, nodes: &[NodePlan]) {
    for n in nodes {
        let meta = if n.reflector {
            format!(
                "{{name: {}, labels: {{route-reflector: \"true\"}}}}",
                n.name
            )
        } else {
            format!("{{name: {}}}", n.name)
        };
        let mut s = format!("  bgp:\n    ipv4Address: {}/24\n", n.v4);
        if let Some(v6) = &n.v6 {
            let _ = writeln!(s, "    ipv6Address: \"{v6}/64\"");
        }
        if n.reflector {
            let _ = writeln!(s, "    routeReflectorClusterID: {RR_CLUSTER_ID}");
        }
        doc(y, "Node", &meta, &s);
    }
}

/// The BGPPeers: the ToR, a BIRD reflector, or the route reflectors' selector peering.
fn peer_docs(y: &mut String, spec: &LabSpec) {
    let mut peer = |name: &str, ip: &str, asn: u32, annotations: &str, extra: &str| {
        let s = format!("  peerIP: \"{ip}\"\n  asNumber: {asn}\n  keepaliveTime: 3s\n{extra}");
        let meta = format!("{{name: {name}, annotations: {{tern/hold-time: 9s{annotations}}}}}");
        doc(y, "BGPPeer", &meta, &s);
    };
    if spec.tor.is_some() {
        let mut extra = String::new();
        let mut annotations = String::new();
        if spec.tor_password.is_some() {
            let _ = write!(
                annotations,
                ", tern/password-file: \"{}\"",
                spec.tor_password_file().display()
            );
        }
        if spec.tor_ttl_security {
            extra.push_str("  ttlSecurity: 1\n");
        }
        peer("tor", TOR_V4, TOR_AS, &annotations, &extra);
        if spec.ipv6 {
            peer("tor-v6", TOR_V6, TOR_AS, &annotations, &extra);
        }
    }
    if spec.topology == Topology::BirdReflector {
        peer("bird-rr", BIRD_RR_V4, CLUSTER_AS, "", "");
        if spec.ipv6 {
            peer("bird-rr-v6", BIRD_RR_V6, CLUSTER_AS, "", "");
        }
    }
    if let Topology::RouteReflectors(_) = spec.topology {
        doc(
            y,
            "BGPPeer",
            "{name: peer-with-route-reflectors}",
            "  nodeSelector: all()\n  peerSelector: route-reflector == 'true'\n",
        );
    }
}

/// The IPPools.
fn pool_docs(y: &mut String, spec: &LabSpec) {
    doc(
        y,
        "IPPool",
        "{name: pods}",
        &format!("  cidr: {POOL_V4}\n  blockSize: 26\n  ipipMode: Never\n"),
    );
    if spec.ipv6 {
        doc(
            y,
            "IPPool",
            "{name: pods-v6}",
            &format!("  cidr: \"{POOL_V6}\"\n  blockSize: 122\n"),
        );
    }
}

/// Each node's BlockAffinity and IPAMBlock per family.
fn block_docs(y: &mut String, nodes: &[NodePlan]) {
    for n in nodes {
        let mut blocks = vec![("v4", n.block_v4.clone())];
        if let Some(b) = &n.block_v6 {
            blocks.push(("v6", b.clone()));
        }
        for (fam, block) in blocks {
            doc(
                y,
                "BlockAffinity",
                &format!("{{name: {}-{fam}}}", n.name),
                &format!(
                    "  node: {}\n  cidr: \"{block}\"\n  state: confirmed\n",
                    n.name
                ),
            );
            doc(
                y,
                "IPAMBlock",
                &format!("{{name: {}-{fam}}}", n.name),
                &ipam_block(nodes, n, &block, fam == "v6"),
            );
        }
    }
}

/// An IPAMBlock: every pod whose address lies in `owner`'s block, allocated to the
/// node it runs on (Calico's `secondary.node` attribute: a borrowed address).
fn ipam_block(nodes: &[NodePlan], owner: &NodePlan, block: &str, v6: bool) -> String {
    // A /26 and a /122 both hold 64 addresses.
    let mut allocations = vec!["null".to_string(); 64];
    let mut attributes = String::new();
    let mut index = 0;
    for pod in nodes.iter().flat_map(|n| n.pods.iter()) {
        if pod.owner != owner.index || (v6 && pod.v6.is_none()) {
            continue;
        }
        if let Some(slot) = allocations.get_mut(pod.ordinal) {
            *slot = index.to_string();
            let _ = writeln!(
                attributes,
                "    - {{handle_id: \"{}{}\", secondary: {{node: node-{}}}}}",
                pod.name.replace('/', "-"),
                if v6 { "-v6" } else { "" },
                pod.node
            );
            index += 1;
        }
    }
    let mut s = format!(
        "  cidr: \"{block}\"\n  affinity: \"host:{}\"\n  allocations: [{}]\n",
        owner.name,
        allocations.join(", ")
    );
    if attributes.is_empty() {
        s.push_str("  attributes: []\n");
    } else {
        s.push_str("  attributes:\n");
        s.push_str(&attributes);
    }
    s
}
