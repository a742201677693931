//! The kernel side of the intent: which pools' routes are Felix's, the metric, the
//! workload interface prefixes, from cluster documents.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

use crate::cluster::Cluster;
use crate::datastore::Document;
use crate::intent::{intent, Intent};

const NODE: &str = "apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 198.51.100.10/24, ipv6Address: \"2001:db8::10/64\"}}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: vxlan}
spec: {cidr: 198.18.0.0/24, vxlanMode: Always}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: vxlan-cross}
spec: {cidr: 198.18.1.0/24, vxlanMode: CrossSubnet}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: ipip}
spec: {cidr: 198.18.2.0/24, ipipMode: Always}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: plain}
spec: {cidr: 198.18.3.0/24}
";

fn load(extra: &str) -> Result<Intent, String> {
    let text = format!("{NODE}{extra}");
    let (c, _) = Cluster::from_documents(&[Document {
        origin: "cluster.yaml".into(),
        text,
    }])
    .map_err(|e| e.to_string())?;
    Ok(intent(&c, "node-a").map_err(|e| e.to_string())?.0)
}

fn net(s: &str) -> ipnet::IpNet {
    s.parse().unwrap()
}

#[test]
fn vxlan_pools_are_felixs_and_the_others_terns_by_default() {
    let e = load("").unwrap().encapsulation();
    assert!(!e.programs(&net("198.18.0.64/26")), "vxlanMode Always");
    assert!(!e.programs(&net("198.18.1.64/26")), "vxlanMode CrossSubnet");
    assert!(e.programs(&net("198.18.2.64/26")), "ipip");
    assert!(e.programs(&net("198.18.3.64/26")), "plain");
    assert!(e.programs(&net("203.0.113.0/24")), "outside every pool");
    // The node's own subnets: the kernel's connected routes, as with BIRD.
    assert!(!e.programs(&net("198.51.100.0/24")));
    assert!(!e.programs(&net("2001:db8::/64")));
    assert!(e.programs(&net("198.51.100.0/25")));
}

#[test]
fn program_cluster_routes_disabled_leaves_every_pool_to_felix() {
    let bgp = "---\napiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata: {name: default}\nspec: {programClusterRoutes: Disabled}\n";
    let e = load(bgp).unwrap().encapsulation();
    for p in ["198.18.0.64/26", "198.18.2.64/26", "198.18.3.64/26"] {
        assert!(!e.programs(&net(p)), "{p}");
    }
    assert!(
        e.programs(&net("203.0.113.0/24")),
        "a fabric route stays tern's"
    );
    let enabled = load(&bgp.replace("Disabled", "Enabled"))
        .unwrap()
        .encapsulation();
    assert!(enabled.programs(&net("198.18.2.64/26")));
}

#[test]
fn later_program_cluster_routes_values_are_errors_naming_the_field() {
    for v in ["EnabledIPIPOnly", "EnabledNoEncapOnly", "Sometimes"] {
        let bgp = format!("---\napiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata: {{name: default}}\nspec: {{programClusterRoutes: {v}}}\n");
        let e = load(&bgp).unwrap_err();
        assert!(
            e.contains("field `spec.programClusterRoutes`") && e.contains(v),
            "{v}: {e}"
        );
    }
}

#[test]
fn the_metric_is_the_normal_priority_or_derived_from_local_pref() {
    let e = load("").unwrap().encapsulation();
    let v4 = net("198.18.3.64/26");
    let v6 = net("2001:db8:1::/64");
    assert_eq!(e.metric(&v4, None), 1024);
    assert_eq!(e.metric(&v6, None), 1024);
    // A v3.32 node's route: LOCAL_PREF = BIRD_INT_MAX - its priority.
    assert_eq!(e.metric(&v4, Some(2_147_483_647 - 512)), 512);
    // An eBGP route: the speaker gave it BIRD's default LOCAL_PREF.
    assert_eq!(e.metric(&v4, Some(100)), 2_147_483_547);
    let bgp = "---\napiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata: {name: default}\nspec: {ipv4NormalRoutePriority: 300, ipv6NormalRoutePriority: 400}\n";
    let e = load(bgp).unwrap().encapsulation();
    assert_eq!(e.metric(&v4, None), 300);
    assert_eq!(e.metric(&v6, None), 400);
}

#[test]
fn priorities_out_of_range_are_errors() {
    for (field, v) in [
        ("ipv4NormalRoutePriority", "0"),
        ("ipv6NormalRoutePriority", "2147483647"),
        ("ipv4NormalRoutePriority", "-5"),
    ] {
        let bgp = format!("---\napiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata: {{name: default}}\nspec: {{{field}: {v}}}\n");
        let e = load(&bgp).unwrap_err();
        assert!(
            e.contains(&format!("field `spec.{field}`: {v} is out of range")),
            "{e}"
        );
    }
}

#[test]
fn workload_interfaces_follow_felixs_interface_prefix() {
    let i = load("").unwrap();
    assert!(i.is_workload_interface("cali0123"));
    assert!(!i.is_workload_interface("tap0123"));
    let felix = "---\napiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\nspec: {interfacePrefix: \"tap,veth\", bpfEnabled: false}\n";
    let i = load(felix).unwrap();
    assert!(i.is_workload_interface("tap0123"));
    assert!(i.is_workload_interface("veth9"));
    assert!(!i.is_workload_interface("cali0123"));
    // A per-node FelixConfiguration is not read.
    let node = felix.replace("name: default", "name: node.node-a");
    assert!(load(&node).unwrap().is_workload_interface("cali0123"));
}
