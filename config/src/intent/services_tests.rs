//! Service host routes (confd's rule) and Secret rotation, from cluster text to
//! intent and diff.

use std::path::Path;

use ipnet::IpNet;

use crate::cluster::Cluster;
use crate::datastore::Document;
use crate::diff::diff;
use crate::intent::{intent, Intent, OriginSource};

fn cluster(text: &str) -> Cluster {
    Cluster::from_documents(&[Document {
        origin: "cluster.yaml".into(),
        text: text.into(),
    }])
    .unwrap_or_else(|e| panic!("{e}"))
    .0
}

fn of(c: &Cluster, node: &str) -> Intent {
    intent(c, node).unwrap_or_else(|e| panic!("{e}")).0
}

const BASE: &str = "apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec:
  asNumber: 64512
  serviceClusterIPs: [{cidr: 198.19.128.0/20}, {cidr: '2001:db8:5::/112'}]
  serviceExternalIPs: [{cidr: 203.0.113.0/28}, {cidr: 203.0.113.99/32}]
  serviceLoadBalancerIPs: [{cidr: 203.0.113.64/27}, {cidr: 203.0.113.100/32}]
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 198.51.100.10/24, ipv6Address: '2001:db8:100::10/64'}}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-b}
spec: {bgp: {ipv4Address: 198.51.100.11/24, ipv6Address: '2001:db8:100::11/64'}}
";

/// A dual-stack LoadBalancer service with `policy`; 203.0.113.200 is in no range.
fn service(policy: &str) -> String {
    format!(
        "---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: shop}}
spec:
  type: LoadBalancer
  clusterIP: 198.19.128.10
  clusterIPs: [198.19.128.10, '2001:db8:5::10']
  externalIPs: [203.0.113.5, 203.0.113.200]
  externalTrafficPolicy: {policy}
status: {{loadBalancer: {{ingress: [{{ip: 203.0.113.70}}]}}}}
"
    )
}

/// An EndpointSlice of `web` with one endpoint on `node`.
fn slice(family: &str, node: &str, ready: &str) -> String {
    let addr = if family == "IPv4" {
        "198.18.0.5"
    } else {
        "'2001:db8:7::5'"
    };
    format!(
        "---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-{family}
  namespace: shop
  labels: {{kubernetes.io/service-name: web}}
addressType: {family}
endpoints:
- addresses: [{addr}]
  nodeName: {node}
  conditions: {{ready: {ready}}}
"
    )
}

/// The host routes (/32, /128) a node originates for services, beside the configured
/// ranges (some of which are single addresses themselves).
fn host_routes(c: &Cluster, node: &str) -> Vec<String> {
    of(c, node)
        .originated
        .iter()
        .filter(|(n, o)| {
            matches!(o.source, OriginSource::Service(_))
                && n.prefix_len() == n.max_prefix_len()
                && !c.bgp.services.iter().any(|(range, _)| range == *n)
        })
        .map(|(n, o)| {
            assert!(o.export && !o.blackhole);
            n.to_string()
        })
        .collect()
}

const ALL_ROUTES: [&str; 4] = [
    "198.19.128.10/32",
    "203.0.113.5/32",
    "203.0.113.70/32",
    "2001:db8:5::10/128",
];

#[test]
fn a_local_service_is_advertised_by_the_node_with_a_ready_endpoint() {
    let c = cluster(&format!(
        "{BASE}{}{}",
        service("Local"),
        slice("IPv4", "node-a", "true")
    ));
    // 203.0.113.200 lies outside every serviceExternalIPs range: no route.
    assert_eq!(host_routes(&c, "node-a"), ALL_ROUTES);
    // The endpoint is on another node.
    assert!(host_routes(&c, "node-b").is_empty());
    // The aggregate ranges stay originated everywhere.
    assert!(of(&c, "node-b")
        .originated
        .contains_key(&"198.19.128.0/20".parse::<IpNet>().unwrap()));
}

#[test]
fn a_not_ready_endpoint_advertises_nothing() {
    let c = cluster(&format!(
        "{BASE}{}{}",
        service("Local"),
        slice("IPv4", "node-a", "false")
    ));
    assert!(host_routes(&c, "node-a").is_empty());
}

#[test]
fn cluster_policy_relies_on_the_ranges() {
    let c = cluster(&format!(
        "{BASE}{}{}",
        service("Cluster"),
        slice("IPv4", "node-a", "true")
    ));
    assert!(host_routes(&c, "node-a").is_empty());
    assert!(host_routes(&c, "node-b").is_empty());
}

#[test]
fn cluster_policy_with_a_single_address_entry_is_advertised_everywhere() {
    let text = format!("{BASE}{}", service("Cluster")).replace("203.0.113.70", "203.0.113.100");
    let c = cluster(&text);
    // 203.0.113.100/32 is a configured entry, originated as a range anyway: the
    // service adds its other addresses.
    let expected = ["198.19.128.10/32", "203.0.113.5/32", "2001:db8:5::10/128"];
    assert_eq!(host_routes(&c, "node-a"), expected);
    assert_eq!(host_routes(&c, "node-b"), expected);
}

#[test]
fn an_ipv6_only_service_gets_a_128() {
    let text = format!(
        "{BASE}{}{}",
        service("Local"),
        slice("IPv6", "node-a", "true")
    )
    .replace("clusterIP: 198.19.128.10", "clusterIP: '2001:db8:5::10'")
    .replace(
        "clusterIPs: [198.19.128.10, '2001:db8:5::10']",
        "clusterIPs: ['2001:db8:5::10']",
    )
    .replace(
        "externalIPs: [203.0.113.5, 203.0.113.200]",
        "externalIPs: []",
    )
    .replace("ingress: [{ip: 203.0.113.70}]", "ingress: []");
    assert_eq!(
        host_routes(&cluster(&text), "node-a"),
        ["2001:db8:5::10/128"]
    );
    // An endpoint of a family the service does not have does not count.
    let text = text.replace("addressType: IPv6", "addressType: IPv4");
    assert!(host_routes(&cluster(&text), "node-a").is_empty());
}

#[test]
fn skipped_services_and_excluded_nodes() {
    let local = format!(
        "{BASE}{}{}",
        service("Local"),
        slice("IPv4", "node-a", "true")
    );
    let headless = local
        .replace("clusterIP: 198.19.128.10", "clusterIP: None")
        .replace(
            "clusterIPs: [198.19.128.10, '2001:db8:5::10']",
            "clusterIPs: [None]",
        );
    assert!(host_routes(&cluster(&headless), "node-a").is_empty());
    let alias = local.replace("type: LoadBalancer", "type: ExternalName");
    assert!(host_routes(&cluster(&alias), "node-a").is_empty());
    let excluded = local.replace(
        "metadata: {name: node-a}",
        "metadata: {name: node-a, labels: {node.kubernetes.io/exclude-from-external-load-balancers: 'true'}}",
    );
    assert!(host_routes(&cluster(&excluded), "node-a").is_empty());
    // Another service's endpoints, or the same name in another namespace, do not count.
    let other_ns = local.replace("namespace: shop\n  labels", "namespace: other\n  labels");
    assert!(host_routes(&cluster(&other_ns), "node-a").is_empty());
    // Without any service range configured, nothing at all.
    let no_ranges = local
        .replace(
            "  serviceClusterIPs: [{cidr: 198.19.128.0/20}, {cidr: '2001:db8:5::/112'}]\n",
            "",
        )
        .replace(
            "  serviceExternalIPs: [{cidr: 203.0.113.0/28}, {cidr: 203.0.113.99/32}]\n",
            "",
        )
        .replace(
            "  serviceLoadBalancerIPs: [{cidr: 203.0.113.64/27}, {cidr: 203.0.113.100/32}]\n",
            "",
        );
    assert!(host_routes(&cluster(&no_ranges), "node-a").is_empty());
}

#[test]
fn an_endpoint_moving_between_nodes_is_a_diff_of_originated_prefixes() {
    let before = cluster(&format!(
        "{BASE}{}{}",
        service("Local"),
        slice("IPv4", "node-a", "true")
    ));
    let after = cluster(&format!(
        "{BASE}{}{}",
        service("Local"),
        slice("IPv4", "node-b", "true")
    ));
    let d = diff(&of(&before, "node-a"), &of(&after, "node-a"));
    let withdrawn: Vec<String> = d.withdrawn.iter().map(|n| n.to_string()).collect();
    assert_eq!(withdrawn, ALL_ROUTES);
    assert!(d.originated.is_empty() && d.peers_changed.is_empty() && !d.policy_changed);
    let d = diff(&of(&before, "node-b"), &of(&after, "node-b"));
    let added: Vec<String> = d.originated.keys().map(|n| n.to_string()).collect();
    assert_eq!(added, ALL_ROUTES);
    assert!(d.withdrawn.is_empty());
}

const PEER: &str = "---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor}
spec: {peerIP: 198.51.100.1, asNumber: 64513, password: {secretKeyRef: {name: bgp-secrets, key: tor}}}
";

/// The Secret with `tor` set to this base64 value.
fn secret(b64: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata: {{name: bgp-secrets, namespace: calico-system}}\ndata: {{tor: '{b64}'}}\n"
    )
}

#[test]
fn a_rotated_secret_changes_the_session_without_printing_it() {
    let nowhere = Path::new("/nonexistent/tern-secrets");
    // "first-pw" and "second-pw".
    let one = of(
        &cluster(&format!("{BASE}{PEER}{}", secret("Zmlyc3QtcHc="))),
        "node-a",
    );
    let two = of(
        &cluster(&format!("{BASE}{PEER}{}", secret("c2Vjb25kLXB3"))),
        "node-a",
    );
    let tor = "198.51.100.1".parse().unwrap();
    let pw = |i: &Intent| {
        i.peers[&tor]
            .resolve_password(nowhere)
            .unwrap()
            .map(|s| s.expose().to_string())
    };
    assert_eq!(pw(&one).as_deref(), Some("first-pw"));
    assert_eq!(pw(&two).as_deref(), Some("second-pw"));
    let d = diff(&one, &two);
    assert_eq!(
        d.peers_changed
            .iter()
            .map(|p| p.address)
            .collect::<Vec<_>>(),
        vec![tor]
    );
    assert!(d.peers_relabelled.is_empty() && d.peers_added.is_empty());
    // The same value again: nothing to do.
    assert!(diff(
        &one,
        &of(
            &cluster(&format!("{BASE}{PEER}{}", secret("Zmlyc3QtcHc="))),
            "node-a"
        )
    )
    .is_empty());
    let printed = format!("{one:?}{two:?}{d:?}");
    for leak in ["first-pw", "second-pw", "Zmlyc3QtcHc=", "c2Vjb25kLXB3"] {
        assert!(!printed.contains(leak), "{leak} printed");
    }
}

#[test]
fn without_a_secret_document_the_mounted_file_is_read() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("bgp-secrets")).unwrap();
    std::fs::write(dir.path().join("bgp-secrets/tor"), "from-file\n").unwrap();
    let i = of(&cluster(&format!("{BASE}{PEER}")), "node-a");
    let p = &i.peers[&"198.51.100.1".parse().unwrap()];
    assert!(p.snapshot_password.is_none());
    let s = p.resolve_password(dir.path()).unwrap().unwrap();
    assert_eq!(s.expose(), "from-file");
    // A Secret document without the key is an error, not a silent fallback.
    let text =
        format!("{BASE}{PEER}{}", secret("eA==")).replace("{tor: 'eA=='}", "{other: 'eA=='}");
    let i = of(&cluster(&text), "node-a");
    let e = i.peers[&"198.51.100.1".parse().unwrap()]
        .resolve_password(dir.path())
        .unwrap_err();
    assert!(
        e.starts_with("secret calico-system/bgp-secrets key tor: no such key"),
        "{e}"
    );
}
