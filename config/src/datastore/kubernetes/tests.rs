//! Unit tests of the conversion of objects as a cluster returns them (fixtures), and
//! of the model's acceptance of the result.

use serde_json::{json, Value};

use super::convert::{convert, Item, Link};
use super::*;
use crate::cluster::Cluster;
use crate::datastore::Document;

pub(super) fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/src/datastore/kubernetes/fixtures/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap()
}

pub(super) fn item(kind: Kind, name: &str) -> Item {
    convert(kind, &fixture(name)).unwrap()
}

fn json_of(item: &Item) -> Value {
    serde_json::from_str(&item.document.text).unwrap()
}

/// Every Calico kind, from fixtures, as the model's input.
pub(super) fn calico_items() -> Vec<Item> {
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
                "annotations": {"tern/hold-time": "30s"},
            },
            "spec": fixture["spec"],
        })
    );
}

#[test]
fn node_annotations_become_spec_bgp() {
    let mut object = fixture("node");
    object["metadata"]["annotations"]["tern/rack"] = "a".into();
    let node = convert(Kind::Node, &object).unwrap();
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
    let (cluster, warnings) = Cluster::from_documents(&docs).unwrap();
    // Warnings about spec fields tern ignores are the model's business; the converted
    // metadata (labels, tern/ annotations) gives none.
    for w in &warnings {
        assert!(!w.field.starts_with("metadata"), "{w:?}");
    }
    let node = &cluster.nodes["node-1"];
    assert_eq!(node.ipv4, Some(("198.51.100.11".parse().unwrap(), 24)));
    assert_eq!(node.as_number, Some(64512));
    assert_eq!(node.rr_cluster_id, Some("198.18.255.1".parse().unwrap()));
    assert_eq!(node.labels["rack"], "a");
    assert_eq!(cluster.nodes["node-2"].ipv4, None);
    assert_eq!(cluster.peers.len(), 1);
    assert!(cluster.peers[0].password.is_some());
    assert_eq!(
        cluster.peers[0].hold,
        Some(std::time::Duration::from_secs(30)),
        "the tern/ annotation reaches the model"
    );
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
    // Cluster policy: wanted only for its external and load-balancer addresses.
    let mut cluster_wide = fixture("service");
    cluster_wide["spec"]["externalTrafficPolicy"] = "Cluster".into();
    assert_eq!(
        convert(Kind::Service, &cluster_wide).unwrap().link,
        Link::Service { local: true }
    );
    cluster_wide["spec"]["externalIPs"] = json!([]);
    assert_eq!(
        convert(Kind::Service, &cluster_wide).unwrap().link,
        Link::Service { local: true },
        "the load-balancer address still counts"
    );
    cluster_wide["status"] = json!({});
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

#[test]
fn tern_annotations_written_by_calicoctl_are_read_from_calicos_metadata_annotation() {
    let peer = json!({
        "apiVersion": "crd.projectcalico.org/v1",
        "kind": "BGPPeer",
        "metadata": {
            "name": "tor",
            "annotations": {
                "projectcalico.org/metadata": "{\"annotations\":{\"tern/hold-time\":\"30s\",\"tern/families\":\"IPv4\"}}",
                "tern/families": "IPv4,IPv6",
            },
        },
        "spec": {"peerIP": "198.51.100.1", "asNumber": 65001},
    });
    let doc = json_of(&convert(Kind::BgpPeer, &peer).unwrap());
    let a = &doc["metadata"]["annotations"];
    assert_eq!(a["tern/hold-time"], "30s");
    assert_eq!(a["tern/families"], "IPv4,IPv6", "the object's own wins");
    assert!(a.get("projectcalico.org/metadata").is_none());
}

#[test]
fn the_mesh_password_secret_is_wanted() {
    let config = json!({
        "apiVersion": "crd.projectcalico.org/v1",
        "kind": "BGPConfiguration",
        "metadata": {"name": "default"},
        "spec": {"nodeMeshPassword": {"secretKeyRef": {"name": "mesh", "key": "pw"}}},
    });
    assert_eq!(
        convert(Kind::BgpConfiguration, &config).unwrap().link,
        Link::PeerSecrets(vec!["mesh".into()])
    );
}

#[test]
fn felix_configuration_gives_the_workload_interface_prefixes() {
    let felix = json!({
        "apiVersion": "crd.projectcalico.org/v1",
        "kind": "FelixConfiguration",
        "metadata": {"name": "default", "resourceVersion": "7"},
        "spec": {"interfacePrefix": "tap,cali", "bpfEnabled": false, "logSeverityScreen": "Info"},
    });
    let item = convert(Kind::FelixConfiguration, &felix).unwrap();
    assert_eq!(
        item.document.origin,
        "kubernetes FelixConfiguration default"
    );
    let (cluster, warnings) = Cluster::from_documents(&[item.document]).unwrap();
    assert_eq!(cluster.interface_prefixes, ["tap", "cali"]);
    // Felix's own settings are not tern's to warn about.
    assert!(warnings.is_empty(), "{warnings:?}");
}
