//! Unit tests of the Kubernetes store without a server: the conversion of objects as a
//! cluster returns them (fixtures), the snapshot assembly, the outage texts, and the
//! RBAC manifest against [`API_CALLS`].

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::assembly::{Assembly, Entry, Input, Outcome, Refusal, Step};
use super::convert::{convert, Item, Link};
use super::*;
use crate::cluster::Cluster;
use crate::datastore::Document;

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/src/datastore/kubernetes/fixtures/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn item(kind: Kind, name: &str) -> Item {
    convert(kind, &fixture(name)).unwrap()
}

fn json_of(item: &Item) -> Value {
    serde_json::from_str(&item.document.text).unwrap()
}

/// Every Calico kind, from fixtures, as the model's input.
fn calico_items() -> Vec<Item> {
    vec![
        item(Kind::BgpConfiguration, "bgpconfiguration"),
        item(Kind::BgpPeer, "bgppeer"),
        item(Kind::BgpFilter, "bgpfilter"),
        item(Kind::IpPool, "ippool"),
        item(Kind::IpamBlock, "ipamblock"),
        item(Kind::BlockAffinity, "blockaffinity"),
        item(Kind::Node, "node"),
        item(Kind::Node, "node-plain"),
    ]
}

#[test]
fn bgppeer_becomes_v3_with_reduced_metadata() {
    let peer = item(Kind::BgpPeer, "bgppeer");
    assert_eq!(peer.key, "tor-a");
    assert_eq!(peer.document.origin, "kubernetes BGPPeer tor-a");
    assert_eq!(peer.link, Link::PeerSecrets(vec!["bgp-secrets".into()]));
    let fixture = fixture("bgppeer");
    assert_eq!(
        json_of(&peer),
        json!({
            "apiVersion": "projectcalico.org/v3",
            "kind": "BGPPeer",
            "metadata": {
                "name": "tor-a",
                "labels": {"rack": "a"},
                "annotations": {"tern/hold-time-note": "set by the network team"},
            },
            "spec": fixture["spec"],
        })
    );
}

#[test]
fn node_annotations_become_spec_bgp() {
    let node = item(Kind::Node, "node");
    assert_eq!(node.document.origin, "kubernetes Node node-1");
    let v = json_of(&node);
    assert_eq!(v["apiVersion"], "projectcalico.org/v3");
    assert_eq!(
        v["spec"],
        json!({"bgp": {
            "ipv4Address": "198.51.100.11/24",
            "ipv6Address": "2001:db8:100::11/64",
            "asNumber": 64512,
            "routeReflectorClusterID": "198.18.255.1",
        }})
    );
    assert_eq!(v["metadata"]["labels"]["route-reflector"], "true");
    assert_eq!(v["metadata"]["annotations"], json!({"tern/rack": "a"}));

    let plain = json_of(&item(Kind::Node, "node-plain"));
    assert_eq!(plain["spec"], json!({}));
    assert!(plain["metadata"].get("annotations").is_none());
}

#[test]
fn node_metadata_only_object_converts_the_same() {
    // What the metadata-only watch returns: a PartialObjectMetadata with the same
    // metadata.
    let full = fixture("node");
    let partial = json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": full["metadata"],
    });
    assert_eq!(
        convert(Kind::Node, &partial).unwrap(),
        item(Kind::Node, "node")
    );
}

#[test]
fn invalid_node_annotations_are_left_out() {
    let mut node = fixture("node");
    let annotations = node["metadata"]["annotations"].as_object_mut().unwrap();
    annotations.insert(NODE_IPV4_ANNOTATION.into(), "not-an-address".into());
    annotations.insert(NODE_ASN_ANNOTATION.into(), "4294967296".into());
    let v = json_of(&convert(Kind::Node, &node).unwrap());
    assert!(v["spec"]["bgp"].get("ipv4Address").is_none());
    assert!(v["spec"]["bgp"].get("asNumber").is_none());
    assert_eq!(v["spec"]["bgp"]["ipv6Address"], "2001:db8:100::11/64");
}

#[test]
fn asdot_as_number_is_kept_as_text() {
    let mut node = fixture("node-plain");
    node["metadata"]["annotations"][NODE_ASN_ANNOTATION] = "1.10".into();
    let v = json_of(&convert(Kind::Node, &node).unwrap());
    assert_eq!(v["spec"]["bgp"], json!({"asNumber": "1.10"}));
}

/// The etcd store's document for the same block, as etcd would hold it.
fn etcd_text(key: &str, value: &Value) -> String {
    let bytes = serde_json::to_vec(value).unwrap();
    crate::datastore::etcd::document_for(key, &bytes, u64::MAX)
        .unwrap()
        .unwrap()
        .text
}

#[test]
fn ipamblock_is_what_the_etcd_store_produces() {
    let block = item(Kind::IpamBlock, "ipamblock");
    assert_eq!(block.document.origin, "kubernetes IPAMBlock 198-18-1-0-26");
    let spec = fixture("ipamblock")["spec"].clone();
    assert_eq!(
        block.document.text,
        etcd_text("/calico/ipam/v2/assignment/ipv4/block/198.18.1.0-26", &spec)
    );
    let v = json_of(&block);
    assert_eq!(v["kind"], "IPAMBlock");
    assert_eq!(v["metadata"]["name"], "198-18-1-0-26");
    assert_eq!(v["spec"]["affinity"], "host:node-1");
    assert_eq!(v["spec"]["allocations"], json!([0, null, 1, null]));
}

#[test]
fn blockaffinity_is_what_the_etcd_store_produces() {
    let affinity = item(Kind::BlockAffinity, "blockaffinity");
    assert_eq!(
        affinity.document.text,
        etcd_text(
            "/calico/ipam/v2/host/node-1/ipv4/block/198.18.1.0-26",
            &json!({"state": "confirmed", "deleted": "false"})
        )
    );
    let v = json_of(&affinity);
    assert_eq!(v["metadata"]["name"], "node-1-198-18-1-0-26");
    assert_eq!(
        v["spec"],
        json!({"node": "node-1", "cidr": "198.18.1.0/26", "state": "confirmed", "deleted": "false"})
    );
}

#[test]
fn ipv6_block_and_affinity_keep_their_names() {
    let mut block = fixture("ipamblock");
    block["metadata"]["name"] = "2001-db8-4000-1---122".into();
    block["spec"]["cidr"] = "2001:db8:4000:1::/122".into();
    let v = json_of(&convert(Kind::IpamBlock, &block).unwrap());
    assert_eq!(v["metadata"]["name"], "2001-db8-4000-1---122");
    assert_eq!(v["spec"]["cidr"], "2001:db8:4000:1::/122");
}

#[test]
fn the_model_accepts_every_calico_kind() {
    let docs: Vec<Document> = calico_items().into_iter().map(|i| i.document).collect();
    let (cluster, _warnings) = Cluster::from_documents(&docs).unwrap();
    let node = &cluster.nodes["node-1"];
    assert_eq!(node.ipv4, Some(("198.51.100.11".parse().unwrap(), 24)));
    assert_eq!(node.as_number, Some(64512));
    assert_eq!(node.rr_cluster_id, Some("198.18.255.1".parse().unwrap()));
    assert_eq!(node.labels["rack"], "a");
    assert_eq!(cluster.nodes["node-2"].ipv4, None);
    assert_eq!(cluster.peers.len(), 1);
    assert!(cluster.peers[0].password.is_some());
    assert_eq!(cluster.pools.len(), 1);
    assert!(cluster.filters.contains_key("no-default"));
    assert_eq!(cluster.blocks.len(), 1);
    let block = &cluster.blocks[0];
    assert_eq!(block.affinity.as_deref(), Some("node-1"));
    assert_eq!(
        block.allocations,
        vec![
            ("198.18.1.0".parse().unwrap(), Some("node-1".into())),
            ("198.18.1.2".parse().unwrap(), Some("node-1".into())),
        ]
    );
    assert_eq!(cluster.affinities.len(), 1);
    assert!(!cluster.affinities[0].deleted);
}

#[test]
fn deleted_flags_reach_the_model() {
    let mut affinity = fixture("blockaffinity");
    affinity["spec"]["deleted"] = "true".into();
    let mut block = fixture("ipamblock");
    block["spec"]["deleted"] = true.into();
    let docs = vec![
        item(Kind::IpPool, "ippool").document,
        convert(Kind::BlockAffinity, &affinity).unwrap().document,
        convert(Kind::IpamBlock, &block).unwrap().document,
    ];
    let (cluster, _) = Cluster::from_documents(&docs).unwrap();
    assert!(cluster.affinities[0].deleted);
    assert!(cluster.blocks[0].deleted);
}

#[test]
fn a_bad_spec_is_rejected_naming_the_object() {
    let mut pool = fixture("ippool");
    pool["spec"]["cidr"] = "198.18.0.0/33".into();
    let docs = vec![convert(Kind::IpPool, &pool).unwrap().document];
    let err = Cluster::from_documents(&docs).unwrap_err().to_string();
    assert!(
        err.contains("kubernetes IPPool default-ipv4-ippool"),
        "{err}"
    );
}

#[test]
fn secret_keeps_kubernetes_shape() {
    let secret = item(Kind::Secret, "secret");
    assert_eq!(secret.key, "kube-system/bgp-secrets");
    assert_eq!(
        secret.document.origin,
        "kubernetes Secret kube-system/bgp-secrets"
    );
    assert_eq!(secret.link, Link::Secret);
    assert_eq!(
        json_of(&secret),
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "bgp-secrets", "namespace": "kube-system"},
            "data": {"tor-a": "c2VjcmV0LXBhc3N3b3JkLWE=", "tor-b": "c2VjcmV0LXBhc3N3b3JkLWI="},
        })
    );
}

#[test]
fn service_is_compact() {
    let service = item(Kind::Service, "service");
    assert_eq!(service.key, "shop/web");
    assert_eq!(service.link, Link::Service { local: true });
    assert_eq!(
        json_of(&service),
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {
                "type": "LoadBalancer",
                "clusterIP": "198.18.130.10",
                "clusterIPs": ["198.18.130.10"],
                "externalIPs": ["203.0.113.20"],
                "externalTrafficPolicy": "Local",
                "internalTrafficPolicy": "Cluster",
            },
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}},
        })
    );
    let mut cluster_wide = fixture("service");
    cluster_wide["spec"]["externalTrafficPolicy"] = "Cluster".into();
    assert_eq!(
        convert(Kind::Service, &cluster_wide).unwrap().link,
        Link::Service { local: false }
    );
}

#[test]
fn endpointslice_is_compact() {
    let slice = item(Kind::EndpointSlice, "endpointslice");
    assert_eq!(slice.key, "shop/web-8x7kq");
    assert_eq!(
        slice.link,
        Link::Slice {
            service: Some("shop/web".into())
        }
    );
    assert_eq!(
        json_of(&slice),
        json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "web-8x7kq",
                "namespace": "shop",
                "labels": {"kubernetes.io/service-name": "web"},
            },
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["198.18.1.2"], "nodeName": "node-1", "conditions": {"ready": true}},
                {"addresses": ["198.18.2.7"], "nodeName": "node-2", "conditions": {"ready": false}},
            ],
        })
    );
}

#[test]
fn an_object_without_a_name_is_not_converted() {
    assert!(convert(Kind::IpPool, &json!({"spec": {}})).is_err());
}

// ---------------------------------------------------------------------------------------
// The snapshot assembly.
// ---------------------------------------------------------------------------------------

/// Lists every kind with the given items (kinds not named: empty).
fn list_all(assembly: &mut Assembly, items: &[(Kind, Item)]) {
    for kind in Kind::ALL {
        assembly.apply(Input::Init(*kind));
        for (k, item) in items {
            if k == kind {
                assembly.apply(Input::InitApply(*kind, Ok(item.clone())));
            }
        }
        assembly.apply(Input::InitDone(*kind));
    }
}

fn snapshot_docs(outcome: Outcome) -> Vec<Document> {
    match outcome {
        Outcome::Snapshot { documents, .. } => documents,
        other => panic!("expected a snapshot, got {other:?}"),
    }
}

fn origins(docs: &[Document]) -> Vec<&str> {
    docs.iter().map(|d| d.origin.as_str()).collect()
}

#[test]
fn no_snapshot_until_every_kind_is_listed() {
    let mut assembly = Assembly::new();
    for kind in &Kind::ALL[..Kind::ALL.len() - 1] {
        assembly.apply(Input::Init(*kind));
        assembly.apply(Input::InitDone(*kind));
        assert_eq!(assembly.snapshot(false), Outcome::Nothing);
    }
    let last = Kind::ALL[Kind::ALL.len() - 1];
    assembly.apply(Input::Init(last));
    assert_eq!(assembly.apply(Input::InitDone(last)), Step::Changed);
    assert_eq!(
        assembly.snapshot(false),
        Outcome::Snapshot {
            documents: vec![],
            revision: 1
        }
    );
    // The same state again: nothing new to hand on.
    assert_eq!(assembly.snapshot(false), Outcome::Nothing);
}

#[test]
fn changes_and_deletes_give_new_snapshots() {
    let mut assembly = Assembly::new();
    list_all(
        &mut assembly,
        &[(Kind::IpPool, item(Kind::IpPool, "ippool"))],
    );
    assert_eq!(
        origins(&snapshot_docs(assembly.snapshot(false))),
        ["kubernetes IPPool default-ipv4-ippool"]
    );
    let peer = item(Kind::BgpPeer, "bgppeer");
    assert_eq!(
        assembly.apply(Input::Apply(Kind::BgpPeer, Ok(peer.clone()))),
        Step::Changed
    );
    // The same object again changes nothing.
    assert_eq!(
        assembly.apply(Input::Apply(Kind::BgpPeer, Ok(peer))),
        Step::Unchanged
    );
    match assembly.snapshot(false) {
        Outcome::Snapshot {
            documents,
            revision,
        } => {
            assert_eq!(revision, 2);
            assert_eq!(
                origins(&documents),
                [
                    "kubernetes BGPPeer tor-a",
                    "kubernetes IPPool default-ipv4-ippool"
                ]
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        assembly.apply(Input::Delete(Kind::IpPool, "default-ipv4-ippool".into())),
        Step::Changed
    );
    assert_eq!(
        origins(&snapshot_docs(assembly.snapshot(false))),
        ["kubernetes BGPPeer tor-a"]
    );
}

#[test]
fn a_relisted_kind_keeps_its_old_contents_until_init_done() {
    let mut assembly = Assembly::new();
    let pool = item(Kind::IpPool, "ippool");
    list_all(&mut assembly, &[(Kind::IpPool, pool.clone())]);
    let first = snapshot_docs(assembly.snapshot(false));

    // A re-list (after 410 Gone) starts; another kind changes meanwhile.
    assembly.apply(Input::Init(Kind::IpPool));
    assembly.apply(Input::Apply(
        Kind::BgpPeer,
        Ok(item(Kind::BgpPeer, "bgppeer")),
    ));
    let during = snapshot_docs(assembly.snapshot(false));
    assert!(origins(&during).contains(&"kubernetes IPPool default-ipv4-ippool"));
    assert_eq!(during.len(), first.len() + 1);

    // The re-list finds the pool gone: swapped in at InitDone only.
    assert_eq!(assembly.apply(Input::InitDone(Kind::IpPool)), Step::Changed);
    assert_eq!(
        origins(&snapshot_docs(assembly.snapshot(false))),
        ["kubernetes BGPPeer tor-a"]
    );
}

#[test]
fn a_failing_kind_holds_snapshots_until_it_recovers() {
    let mut assembly = Assembly::new();
    list_all(&mut assembly, &[]);
    snapshot_docs(assembly.snapshot(false));
    let step = assembly.apply(Input::Failed(Kind::BgpPeer, "forbidden".into()));
    assert_eq!(step, Step::Failed("forbidden".into()));
    assembly.apply(Input::Apply(Kind::IpPool, Ok(item(Kind::IpPool, "ippool"))));
    assert_eq!(assembly.snapshot(false), Outcome::Nothing);
    // The watcher re-lists: `Init` comes before the list request, so it proves
    // nothing; the completed list does. The snapshot goes out (forced: even an
    // unchanged one tells the daemon the outage is over).
    assert_eq!(assembly.apply(Input::Init(Kind::BgpPeer)), Step::Unchanged);
    assert_eq!(assembly.snapshot(false), Outcome::Nothing);
    assert_eq!(
        assembly.apply(Input::InitDone(Kind::BgpPeer)),
        Step::Changed
    );
    let docs = snapshot_docs(assembly.snapshot(true));
    assert_eq!(origins(&docs), ["kubernetes IPPool default-ipv4-ippool"]);
    assert_eq!(
        snapshot_docs(assembly.snapshot(true)),
        docs,
        "forced: handed on again"
    );
}

#[test]
fn an_oversized_object_makes_the_store_unavailable_until_it_goes() {
    let mut assembly = Assembly::new();
    list_all(&mut assembly, &[]);
    snapshot_docs(assembly.snapshot(false));
    let refused: Entry = Err(Refusal {
        key: "huge".into(),
        text: "IPPool huge: too big".into(),
    });
    assembly.apply(Input::Apply(Kind::IpPool, refused));
    assert_eq!(
        assembly.snapshot(false),
        Outcome::Refused("IPPool huge: too big".into())
    );
    assembly.apply(Input::Delete(Kind::IpPool, "huge".into()));
    assert_eq!(
        assembly.snapshot(true),
        Outcome::Snapshot {
            documents: vec![],
            revision: 2
        }
    );
}

#[test]
fn only_referenced_secrets_are_passed_on() {
    let secret = item(Kind::Secret, "secret");
    let mut other = fixture("secret");
    other["metadata"]["name"] = "unrelated".into();
    let other = convert(Kind::Secret, &other).unwrap();
    let mut assembly = Assembly::new();
    list_all(
        &mut assembly,
        &[(Kind::Secret, secret), (Kind::Secret, other)],
    );
    assert!(snapshot_docs(assembly.snapshot(false)).is_empty());
    assembly.apply(Input::Apply(
        Kind::BgpPeer,
        Ok(item(Kind::BgpPeer, "bgppeer")),
    ));
    assert_eq!(
        origins(&snapshot_docs(assembly.snapshot(false))),
        [
            "kubernetes BGPPeer tor-a",
            "kubernetes Secret kube-system/bgp-secrets"
        ]
    );
}

#[test]
fn only_local_services_and_their_slices_are_passed_on() {
    let mut cluster_service = fixture("service");
    cluster_service["spec"]["externalTrafficPolicy"] = "Cluster".into();
    let cluster_service = convert(Kind::Service, &cluster_service).unwrap();
    let slice = item(Kind::EndpointSlice, "endpointslice");
    let mut assembly = Assembly::new();
    list_all(
        &mut assembly,
        &[
            (Kind::Service, cluster_service),
            (Kind::EndpointSlice, slice),
        ],
    );
    assert!(snapshot_docs(assembly.snapshot(false)).is_empty());
    assembly.apply(Input::Apply(
        Kind::Service,
        Ok(item(Kind::Service, "service")),
    ));
    assert_eq!(
        origins(&snapshot_docs(assembly.snapshot(false))),
        [
            "kubernetes Service shop/web",
            "kubernetes EndpointSlice shop/web-8x7kq"
        ]
    );
}

// ---------------------------------------------------------------------------------------
// Outage texts.
// ---------------------------------------------------------------------------------------

const URL: &str = "https://198.51.100.1:6443";

fn api_error(code: u16) -> kube::runtime::watcher::Error {
    let status = kube::core::Status::failure("refused", "Test").with_code(code);
    kube::runtime::watcher::Error::InitialListFailed(kube::Error::Api(status.boxed()))
}

#[test]
fn outage_texts_say_what_to_do() {
    let (text, restart) =
        watch::failure(Kind::BgpPeer, &api_error(401), URL, "kube-system").unwrap();
    assert_eq!(text, "Kubernetes API https://198.51.100.1:6443: the server refused tern's credentials (401 Unauthorized): check the service-account token / kubeconfig user");
    assert!(!restart, "a failed list is retried by the watcher itself");

    let (text, _) = watch::failure(Kind::BgpPeer, &api_error(403), URL, "kube-system").unwrap();
    assert_eq!(text, "Kubernetes API https://198.51.100.1:6443: forbidden (403) to list crd.projectcalico.org/v1 bgppeers: the ClusterRole tern in deploy/kubernetes/rbac.yaml grants it");

    let (text, _) = watch::failure(Kind::Secret, &api_error(403), URL, "calico-system").unwrap();
    assert!(
        text.contains("v1 secrets in namespace calico-system"),
        "{text}"
    );
    assert!(
        text.contains("the Role tern in namespace calico-system"),
        "{text}"
    );

    let (text, _) = watch::failure(Kind::BgpFilter, &api_error(404), URL, "kube-system").unwrap();
    assert!(
        text.contains("the CRD bgpfilters.crd.projectcalico.org is not installed"),
        "{text}"
    );

    // 410 Gone is no outage: the watcher re-lists.
    assert!(watch::failure(Kind::Node, &api_error(410), URL, "kube-system").is_none());
}

#[test]
fn a_refused_connection_is_reported_as_unreachable() {
    let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    let err = kube::runtime::watcher::Error::WatchFailed(kube::Error::ReadEvents(io));
    let (text, restart) = watch::failure(Kind::Node, &err, URL, "kube-system").unwrap();
    assert_eq!(
        text,
        "Kubernetes API https://198.51.100.1:6443: unreachable (connection refused); retrying"
    );
    assert!(restart, "a failed watch starts over with a list");
}

// ---------------------------------------------------------------------------------------
// RBAC.
// ---------------------------------------------------------------------------------------

#[test]
fn api_calls_cover_every_kind() {
    let from_kinds: BTreeSet<(&str, &str, bool)> = Kind::ALL
        .iter()
        .map(|k| {
            let (group, _, plural) = k.resource();
            (group, plural, k.in_one_namespace())
        })
        .collect();
    let from_calls: BTreeSet<(&str, &str, bool)> = API_CALLS
        .iter()
        .map(|c| (c.api_group, c.resource, c.namespaced))
        .collect();
    assert_eq!(from_kinds, from_calls);
}

/// `(apiGroup, resource, verb, namespaced)` granted by the rules of `role`.
fn grants(role: &Value, namespaced: bool) -> Vec<(String, String, String, bool)> {
    let mut out = Vec::new();
    for rule in role["rules"].as_array().unwrap() {
        let strings = |field: &str| -> Vec<String> {
            rule[field]
                .as_array()
                .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
                .unwrap_or_default()
        };
        assert!(
            rule.get("resourceNames").is_none() && rule.get("nonResourceURLs").is_none(),
            "unexpected rule {rule}"
        );
        for group in strings("apiGroups") {
            for resource in strings("resources") {
                for verb in strings("verbs") {
                    out.push((group.clone(), resource.clone(), verb, namespaced));
                }
            }
        }
    }
    out
}

#[test]
fn rbac_yaml_grants_exactly_the_api_calls() {
    let path = format!(
        "{}/../deploy/kubernetes/rbac.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let by_kind =
        |kind: &str| -> Vec<&Value> { docs.iter().filter(|d| d["kind"] == kind).collect() };

    let mut granted = Vec::new();
    for role in by_kind("ClusterRole") {
        assert_eq!(role["metadata"]["name"], "tern");
        granted.extend(grants(role, false));
    }
    let namespace = by_kind("ServiceAccount")[0]["metadata"]["namespace"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(namespace, DEFAULT_NAMESPACE);
    for role in by_kind("Role") {
        assert_eq!(role["metadata"]["namespace"], namespace.as_str());
        granted.extend(grants(role, true));
    }
    let granted_set: BTreeSet<_> = granted.iter().cloned().collect();
    assert_eq!(granted.len(), granted_set.len(), "a grant is repeated");
    let wanted: BTreeSet<_> = API_CALLS
        .iter()
        .map(|c| {
            (
                c.api_group.to_string(),
                c.resource.to_string(),
                c.verb.to_string(),
                c.namespaced,
            )
        })
        .collect();
    assert_eq!(granted_set, wanted);

    // Both roles are bound to the service account.
    for (binding, role) in [
        ("ClusterRoleBinding", "ClusterRole"),
        ("RoleBinding", "Role"),
    ] {
        let b = by_kind(binding);
        assert_eq!(b.len(), 1, "{binding}");
        assert_eq!(b[0]["roleRef"]["kind"], role);
        assert_eq!(b[0]["roleRef"]["name"], "tern");
        assert_eq!(b[0]["subjects"][0]["kind"], "ServiceAccount");
        assert_eq!(b[0]["subjects"][0]["name"], "tern");
        assert_eq!(b[0]["subjects"][0]["namespace"], namespace.as_str());
    }
}
