//! Unit tests of the etcd store's pure part: key and value conversion, the key map and
//! the handling of watch responses. No etcd needed (the end-to-end test on a real etcd
//! is `config/tests/etcd_store.rs`).

use super::*;
use serde_json::{json, Value};

const BLOCK_KEY: &str = "/calico/ipam/v2/assignment/ipv4/block/198.18.4.0-26";
const BLOCK6_KEY: &str = "/calico/ipam/v2/assignment/ipv6/block/2001:db8:1::-122";
const AFFINITY_KEY: &str = "/calico/ipam/v2/host/node-a/ipv4/block/198.18.4.0-26";

fn doc(key: &str, value: &str) -> Option<Document> {
    document_for(key, value.as_bytes(), u64::MAX)
        .map(|d| d.unwrap_or_else(|e| panic!("{key} refused: {e}")))
}

/// The document's text as JSON (panics, naming the text, when it is not JSON).
fn json_of(document: &Document) -> Value {
    serde_json::from_str(&document.text)
        .unwrap_or_else(|e| panic!("{} is not JSON ({e}): {}", document.origin, document.text))
}

fn converted(key: &str, value: &str) -> Value {
    let document = doc(key, value).unwrap_or_else(|| panic!("{key} was ignored"));
    assert_eq!(document.origin, key);
    json_of(&document)
}

fn resource_key(rest: &str) -> String {
    format!("{RESOURCES_PREFIX}{rest}")
}

// --- IPAM blocks ------------------------------------------------------------------------

#[test]
fn block_becomes_ipamblock_document() {
    let value = json!({
        "cidr": "198.18.4.0/26",
        "affinity": "host:node-a",
        "strictAffinity": false,
        "allocations": [0, null, 1],
        "unallocated": [1, 3],
        "attributes": [
            {"handle_id": "k8s-pod-network.a", "secondary": {"node": "node-a"}},
            {"handle_id": "k8s-pod-network.b", "secondary": {"node": "node-b"}}
        ],
        "sequenceNumber": 7,
        "sequenceNumberForAllocation": {"0": 3},
        "deleted": false
    });
    let got = converted(BLOCK_KEY, &value.to_string());
    assert_eq!(
        got,
        json!({
            "apiVersion": "projectcalico.org/v3",
            "kind": "IPAMBlock",
            "metadata": {"name": "198-18-4-0-26"},
            "spec": {
                "cidr": "198.18.4.0/26",
                "affinity": "host:node-a",
                "strictAffinity": false,
                "allocations": [0, null, 1],
                "unallocated": [1, 3],
                "attributes": [
                    {"handle_id": "k8s-pod-network.a", "secondary": {"node": "node-a"}},
                    {"handle_id": "k8s-pod-network.b", "secondary": {"node": "node-b"}}
                ],
                "deleted": false
            }
        })
    );
}

#[test]
fn ipv6_block_name_replaces_colons() {
    let got = converted(
        BLOCK6_KEY,
        r#"{"cidr":"2001:db8:1::/122","affinity":"host:node-a","allocations":[],"unallocated":[],"attributes":[],"deleted":false}"#,
    );
    assert_eq!(got["metadata"]["name"], "2001-db8-1---122");
    assert_eq!(got["spec"]["cidr"], "2001:db8:1::/122");
}

#[test]
fn block_missing_fields_get_defaults_and_null_affinity_is_omitted() {
    let got = converted(BLOCK_KEY, r#"{"affinity":null,"allocations":null}"#);
    let spec = &got["spec"];
    // The CIDR comes from the key when the value lacks it.
    assert_eq!(spec["cidr"], "198.18.4.0/26");
    assert!(spec.get("affinity").is_none(), "{spec}");
    assert_eq!(spec["strictAffinity"], false);
    assert_eq!(spec["allocations"], json!([]));
    assert_eq!(spec["unallocated"], json!([]));
    assert_eq!(spec["attributes"], json!([]));
    assert_eq!(spec["deleted"], false);
}

#[test]
fn block_deprecated_host_affinity_becomes_affinity() {
    let got = converted(
        BLOCK_KEY,
        r#"{"cidr":"198.18.4.0/26","hostAffinity":"node-c"}"#,
    );
    assert_eq!(got["spec"]["affinity"], "host:node-c");
    // `affinity` wins over the deprecated field when both are there.
    let got = converted(
        BLOCK_KEY,
        r#"{"cidr":"198.18.4.0/26","affinity":"host:node-a","hostAffinity":"node-c"}"#,
    );
    assert_eq!(got["spec"]["affinity"], "host:node-a");
}

#[test]
fn block_fields_are_passed_through_unchecked() {
    // Validation is the model's job: odd values reach it unchanged.
    let got = converted(
        BLOCK_KEY,
        r#"{"cidr":"not-a-cidr","strictAffinity":"yes","allocations":"x"}"#,
    );
    assert_eq!(got["spec"]["cidr"], "not-a-cidr");
    assert_eq!(got["spec"]["strictAffinity"], "yes");
    assert_eq!(got["spec"]["allocations"], "x");
    assert_eq!(got["metadata"]["name"], "198-18-4-0-26");
}

#[test]
fn block_value_that_is_not_a_json_object_is_handed_on_raw() {
    for value in ["{not json", "[1,2]", "\"text\"", ""] {
        let document = doc(BLOCK_KEY, value).expect("not dropped");
        assert_eq!(document.origin, BLOCK_KEY);
        assert_eq!(document.text, value);
    }
}

#[test]
fn block_keys_of_other_shapes_are_ignored() {
    for key in [
        "/calico/ipam/v2/assignment/ipv4/block/",
        "/calico/ipam/v2/assignment/ipv4/198.18.4.0-26",
        "/calico/ipam/v2/assignment/ipv5/block/198.18.4.0-26",
        "/calico/ipam/v2/assignment/ipv4/block/198.18.4.0-26/x",
    ] {
        assert_eq!(doc(key, "{}"), None, "{key}");
    }
}

// --- Block affinities -------------------------------------------------------------------

#[test]
fn affinity_becomes_blockaffinity_document() {
    let got = converted(AFFINITY_KEY, r#"{"state":"confirmed","deleted":false}"#);
    assert_eq!(
        got,
        json!({
            "apiVersion": "projectcalico.org/v3",
            "kind": "BlockAffinity",
            "metadata": {"name": "node-a-198-18-4-0-26"},
            "spec": {
                "node": "node-a",
                "cidr": "198.18.4.0/26",
                "state": "confirmed",
                "deleted": "false"
            }
        })
    );
}

#[test]
fn affinity_states_pass_through() {
    for state in ["pending", "pendingDeletion", "confirmed"] {
        let value = json!({"state": state, "deleted": true}).to_string();
        let got = converted(AFFINITY_KEY, &value);
        assert_eq!(got["spec"]["state"], state);
        assert_eq!(got["spec"]["deleted"], "true");
    }
}

#[test]
fn affinity_without_state_is_confirmed() {
    for value in ["", "  \n", "{}", r#"{"state":""}"#, r#"{"state":null}"#] {
        let got = converted(AFFINITY_KEY, value);
        assert_eq!(got["spec"]["state"], "confirmed", "value {value:?}");
        assert_eq!(got["spec"]["deleted"], "false", "value {value:?}");
    }
}

#[test]
fn ipv6_affinity_name_and_cidr() {
    let key = "/calico/ipam/v2/host/node-b/ipv6/block/2001:db8:1::-122";
    let got = converted(key, r#"{"state":"confirmed"}"#);
    assert_eq!(got["metadata"]["name"], "node-b-2001-db8-1---122");
    assert_eq!(got["spec"]["cidr"], "2001:db8:1::/122");
    assert_eq!(got["spec"]["node"], "node-b");
}

#[test]
fn affinity_value_that_is_not_json_is_handed_on_raw() {
    let document = doc(AFFINITY_KEY, "confirmed").expect("not dropped");
    assert_eq!(document.origin, AFFINITY_KEY);
    assert_eq!(document.text, "confirmed");
}

#[test]
fn affinity_odd_state_is_left_for_the_model() {
    let got = converted(AFFINITY_KEY, r#"{"state":3,"deleted":"maybe"}"#);
    assert_eq!(got["spec"]["state"], 3);
    assert_eq!(got["spec"]["deleted"], "maybe");
}

#[test]
fn affinity_keys_of_other_shapes_are_ignored() {
    for key in [
        "/calico/ipam/v2/host/node-a",
        "/calico/ipam/v2/host//ipv4/block/198.18.4.0-26",
        "/calico/ipam/v2/host/node-a/ipv4/198.18.4.0-26",
        "/calico/ipam/v2/host/node-a/ipv4/block/",
    ] {
        assert_eq!(doc(key, "{}"), None, "{key}");
    }
}

// --- v3 resources -----------------------------------------------------------------------

#[test]
fn complete_resource_is_passed_through_verbatim() {
    let key = resource_key("bgpconfigurations/default");
    let value = r#"{"kind":"BGPConfiguration","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},"spec":{"asNumber":64512}}"#;
    let document = doc(&key, value).expect("read");
    assert_eq!(document.origin, key);
    assert_eq!(document.text, value);
}

#[test]
fn resource_gets_api_version_kind_and_name_from_the_key() {
    for (plural, kind) in [
        ("bgpconfigurations", "BGPConfiguration"),
        ("bgppeers", "BGPPeer"),
        ("nodes", "Node"),
        ("ippools", "IPPool"),
        ("bgpfilters", "BGPFilter"),
        ("felixconfigurations", "FelixConfiguration"),
    ] {
        let key = resource_key(&format!("{plural}/thing-1"));
        let got = converted(&key, r#"{"spec":{"x":1}}"#);
        assert_eq!(
            got,
            json!({
                "apiVersion": "projectcalico.org/v3",
                "kind": kind,
                "metadata": {"name": "thing-1"},
                "spec": {"x": 1}
            }),
            "{plural}"
        );
    }
}

#[test]
fn resource_keeps_its_own_fields() {
    let key = resource_key("nodes/node-a");
    let got = converted(
        &key,
        r#"{"kind":"Node","metadata":{"name":"other","labels":{"rack":"r1"}},"spec":{}}"#,
    );
    assert_eq!(got["apiVersion"], "projectcalico.org/v3");
    assert_eq!(got["kind"], "Node");
    assert_eq!(got["metadata"]["name"], "other");
    assert_eq!(got["metadata"]["labels"]["rack"], "r1");
}

#[test]
fn namespaced_resource_gets_namespace_from_the_key() {
    let key = resource_key("somethings/ns-1/thing-1");
    let got = converted(&key, r#"{"spec":{}}"#);
    assert_eq!(got["metadata"]["name"], "thing-1");
    assert_eq!(got["metadata"]["namespace"], "ns-1");
    // Unknown plural: used as the kind, so the model's unknown-kind warning names it.
    assert_eq!(got["kind"], "somethings");
}

#[test]
fn unknown_kind_passes_through() {
    let key = resource_key("frobnicators/f1");
    let value =
        r#"{"apiVersion":"projectcalico.org/v3","kind":"Frobnicator","metadata":{"name":"f1"}}"#;
    assert_eq!(doc(&key, value).expect("passed").text, value);
}

#[test]
fn resources_tern_never_uses_are_skipped() {
    for rest in [
        "workloadendpoints/default/node--a-k8s-pod-eth0",
        "networkpolicies/default/allow",
        "globalnetworkpolicies/deny",
        "profiles/kns.default",
        "clusterinformations/default",
    ] {
        assert_eq!(doc(&resource_key(rest), "{}"), None, "{rest}");
    }
}

#[test]
fn resource_value_that_is_not_a_json_object_is_handed_on_raw() {
    let key = resource_key("bgppeers/peer-1");
    for value in ["kind: BGPPeer\n  bad: [", "[]", "", "null"] {
        let document = doc(&key, value).expect("not dropped");
        assert_eq!(document.origin, key);
        assert_eq!(document.text, value);
    }
}

#[test]
fn resource_with_non_object_metadata_is_left_for_the_model() {
    let key = resource_key("bgppeers/peer-1");
    let got = converted(&key, r#"{"metadata":"peer-1"}"#);
    assert_eq!(got["metadata"], "peer-1");
    assert_eq!(got["kind"], "BGPPeer");
}

#[test]
fn resource_keys_of_other_shapes_are_ignored() {
    for rest in [
        "",
        "bgppeers",
        "bgppeers/",
        "/peer",
        "a/b/c/d",
        "bgppeers/ns//",
    ] {
        assert_eq!(doc(&resource_key(rest), "{}"), None, "{rest:?}");
    }
}

// --- Other keys -------------------------------------------------------------------------

#[test]
fn other_keys_are_ignored() {
    for key in [
        "/calico/ipam/v2/handle/k8s-pod-network.abc",
        "/calico/ipam/v2/config",
        "/calico/felix/v2/no-region/host/node-a/status",
        "/calico/resources/v3/projectcalico.org",
        "/calico/resources/v3/other.org/bgppeers/p",
        "/calico/v1/host/node-a/bird_ip",
        "/registry/pods/default/x",
    ] {
        assert_eq!(doc(key, "{}"), None, "{key}");
    }
}

#[test]
fn watch_range_covers_both_prefixes() {
    let inside = |key: &str| (IPAM_PREFIX..WATCH_RANGE_END).contains(&key);
    for key in [
        BLOCK_KEY,
        BLOCK6_KEY,
        AFFINITY_KEY,
        "/calico/ipam/v2/host/zzzz/ipv6/block/2001:db8::-122",
        "/calico/resources/v3/projectcalico.org/bgpconfigurations/default",
        "/calico/resources/v3/projectcalico.org/zzzz/\u{10FFFF}",
        RESOURCES_PREFIX,
    ] {
        assert!(inside(key), "{key} outside the watched range");
    }
    for key in ["/calico/felix/v2/x", "/calico/v1/host/x"] {
        assert!(!inside(key), "{key} inside the watched range");
    }
}

#[test]
fn cidr_segments_and_names() {
    assert_eq!(cidr_from_segment("198.18.4.0-26"), "198.18.4.0/26");
    assert_eq!(cidr_from_segment("2001:db8:1::-122"), "2001:db8:1::/122");
    assert_eq!(cidr_from_segment("garbage"), "garbage");
    assert_eq!(cidr_name("198.18.4.0/26"), "198-18-4-0-26");
    assert_eq!(cidr_name("2001:db8:1::/122"), "2001-db8-1---122");
}

// --- The key map and watch responses ----------------------------------------------------

fn put(key: &str, value: &str, revision: i64) -> KeyChange {
    KeyChange {
        key: key.to_string(),
        value: Some(value.as_bytes().to_vec()),
        revision,
    }
}

fn delete(key: &str, revision: i64) -> KeyChange {
    KeyChange {
        key: key.to_string(),
        value: None,
        revision,
    }
}

fn batch(changes: Vec<KeyChange>) -> WatchBatch {
    WatchBatch {
        changes,
        ..WatchBatch::default()
    }
}

fn origins(space: &KeySpace) -> Vec<String> {
    space.documents().into_iter().map(|d| d.origin).collect()
}

fn initial() -> KeySpace {
    KeySpace::from_entries(
        vec![
            (resource_key("nodes/node-b"), br#"{"spec":{}}"#.to_vec()),
            (
                AFFINITY_KEY.to_string(),
                br#"{"state":"confirmed"}"#.to_vec(),
            ),
            (
                "/calico/ipam/v2/handle/h1".to_string(),
                b"{}".to_vec(), // ignored
            ),
            (resource_key("nodes/node-a"), br#"{"spec":{}}"#.to_vec()),
        ],
        10,
        ReadLimits::default(),
    )
    .expect("small values are read")
}

#[test]
fn initial_read_keeps_converted_documents_in_key_order() {
    let space = initial();
    assert_eq!(space.revision(), 10);
    assert_eq!(
        origins(&space),
        vec![
            AFFINITY_KEY.to_string(),
            resource_key("nodes/node-a"),
            resource_key("nodes/node-b"),
        ]
    );
}

#[test]
fn put_and_delete_change_the_set_and_the_revision() {
    let mut space = initial();
    let peer = resource_key("bgppeers/tor");
    assert_eq!(
        space.apply(batch(vec![put(&peer, r#"{"spec":{}}"#, 11)])),
        WatchStep::Changed
    );
    assert_eq!(space.revision(), 11);
    assert!(origins(&space).contains(&peer));

    assert_eq!(
        space.apply(batch(vec![delete(&resource_key("nodes/node-b"), 12)])),
        WatchStep::Changed
    );
    assert_eq!(space.revision(), 12);
    assert!(!origins(&space).contains(&resource_key("nodes/node-b")));
}

#[test]
fn one_response_is_applied_whole() {
    // A transaction touching both prefixes: one response, one change of state.
    let mut space = initial();
    let peer = resource_key("bgppeers/tor");
    let step = space.apply(batch(vec![
        put(&peer, r#"{"spec":{}}"#, 11),
        put(BLOCK_KEY, r#"{"cidr":"198.18.4.0/26"}"#, 11),
    ]));
    assert_eq!(step, WatchStep::Changed);
    let now = origins(&space);
    assert!(now.contains(&peer) && now.contains(&BLOCK_KEY.to_string()));
    assert_eq!(space.revision(), 11);
}

#[test]
fn changes_in_one_response_apply_in_order() {
    let mut space = initial();
    let peer = resource_key("bgppeers/tor");
    space.apply(batch(vec![
        put(&peer, r#"{"spec":{"asNumber":1}}"#, 11),
        delete(&peer, 12),
        put(&resource_key("nodes/node-a"), r#"{"spec":{"v":1}}"#, 13),
        put(&resource_key("nodes/node-a"), r#"{"spec":{"v":2}}"#, 14),
    ]));
    assert!(!origins(&space).contains(&peer));
    let node_a = space
        .documents()
        .into_iter()
        .find(|d| d.origin == resource_key("nodes/node-a"))
        .expect("node-a");
    assert_eq!(json_of(&node_a)["spec"]["v"], 2);
    assert_eq!(space.revision(), 14);
}

#[test]
fn responses_that_change_no_document_are_unchanged() {
    let mut space = initial();
    let before = space.documents();
    // Watch created / progress notification: no events.
    assert_eq!(space.apply(batch(vec![])), WatchStep::Unchanged);
    // Keys tern ignores, a delete of a key it never had, a put of the same value.
    let step = space.apply(batch(vec![
        put("/calico/ipam/v2/handle/h2", "{}", 11),
        put(&resource_key("workloadendpoints/ns/w"), "{}", 12),
        delete(&resource_key("bgppeers/never"), 13),
        put(&resource_key("nodes/node-a"), r#"{"spec":{}}"#, 14),
    ]));
    assert_eq!(step, WatchStep::Unchanged);
    assert_eq!(space.documents(), before);
    // The revision still follows etcd, for the next snapshot's label.
    assert_eq!(space.revision(), 14);
}

#[test]
fn compaction_and_cancel_end_the_watch_without_touching_the_set() {
    let mut space = initial();
    let before = space.clone();
    let compacted = WatchBatch {
        canceled: true,
        compact_revision: 42,
        ..WatchBatch::default()
    };
    assert_eq!(
        space.apply(compacted),
        WatchStep::Compacted {
            compact_revision: 42
        }
    );
    // Some etcd versions set the compact revision without the canceled flag.
    let compacted = WatchBatch {
        compact_revision: 43,
        ..WatchBatch::default()
    };
    assert_eq!(
        space.apply(compacted),
        WatchStep::Compacted {
            compact_revision: 43
        }
    );
    let canceled = WatchBatch {
        canceled: true,
        cancel_reason: "permission denied".into(),
        ..WatchBatch::default()
    };
    assert_eq!(
        space.apply(canceled),
        WatchStep::Canceled {
            reason: "permission denied".into()
        }
    );
    let canceled = WatchBatch {
        canceled: true,
        ..WatchBatch::default()
    };
    assert!(matches!(space.apply(canceled), WatchStep::Canceled { reason } if !reason.is_empty()));
    assert_eq!(space, before);
}

// --- Size limits, checked before parsing ----------------------------------------------

/// A JSON resource value of exactly `bytes` bytes.
fn sized(bytes: usize) -> Vec<u8> {
    let value = format!(r#"{{"spec":{{}},"pad":"{}"}}"#, "x".repeat(bytes - 20));
    assert_eq!(value.len(), bytes);
    value.into_bytes()
}

#[test]
fn an_oversized_value_is_refused_unparsed_naming_the_key_and_the_limit() {
    let peer = resource_key("bgppeers/tor");
    // Not JSON: had it been parsed, it would come back as raw text for the model (as
    // the value at the limit does), not as a size error.
    let mut value = b"{ not json ".to_vec();
    value.resize(4097, b'x');
    for key in [peer.as_str(), BLOCK_KEY, AFFINITY_KEY] {
        match document_for(key, &value, 4096) {
            Some(Err(refused)) => assert_eq!(
                refused.to_string(),
                format!("key {key}: 4097 bytes, more than the 4096-byte limit for one datastore document (limits.datastore_document_bytes in tern.yaml); not read")
            ),
            other => panic!("{key}: {other:?}"),
        }
        let at_limit = value.get(..4096).expect("4097 bytes");
        match document_for(key, at_limit, 4096) {
            Some(Ok(d)) => assert_eq!(d.text.as_bytes(), at_limit, "{key}"),
            other => panic!("{key}: {other:?}"),
        }
    }
    // Keys tern does not read are not measured: they are ignored, whatever their size.
    assert_eq!(
        document_for(&resource_key("workloadendpoints/ns/pod"), &value, 4096),
        None
    );
    assert_eq!(
        document_for("/calico/ipam/v2/handle/h1", &value, 4096),
        None
    );

    // A read holding such a value is refused whole, naming the endpoint and the key.
    let limits = ReadLimits {
        value_bytes: 4096,
        ..ReadLimits::default()
    };
    let refused = KeySpace::from_entries(
        vec![
            (resource_key("nodes/node-a"), sized(100)),
            (peer.clone(), value.clone()),
        ],
        10,
        limits,
    )
    .expect_err("an oversized value was read");
    assert_eq!(
        refused,
        Refused::Value {
            key: peer.clone(),
            bytes: 4097,
            limit: 4096
        }
    );
    let err = EtcdError::Refused {
        endpoints: "http://127.0.0.1:2379".into(),
        cause: refused,
    };
    assert!(
        err.to_string().starts_with(&format!(
            "etcd at http://127.0.0.1:2379: key {peer}: 4097 bytes, more than the 4096-byte limit"
        )),
        "{err}"
    );

    // The same value arriving by watch ends the watch; nothing is sent.
    let mut space = KeySpace::from_entries(vec![], 10, limits).expect("empty");
    let step = space.apply(batch(vec![KeyChange {
        key: peer.clone(),
        value: Some(value),
        revision: 11,
    }]));
    assert_eq!(
        step,
        WatchStep::Refused(Refused::Value {
            key: peer,
            bytes: 4097,
            limit: 4096
        })
    );
}

#[test]
fn the_running_total_of_values_is_checked_before_parsing() {
    let limits = ReadLimits {
        value_bytes: 100,
        total_bytes: 150,
    };
    let (a, b, c) = (
        resource_key("nodes/a"),
        resource_key("nodes/b"),
        resource_key("nodes/c"),
    );
    // Each value is under its limit; together they are not.
    let refused = KeySpace::from_entries(
        vec![
            (a.clone(), sized(60)),
            (b.clone(), sized(60)),
            (c.clone(), sized(40)),
        ],
        10,
        limits,
    )
    .expect_err("read more than the total");
    assert_eq!(
        refused,
        Refused::Total {
            key: c.clone(),
            limit: 150
        }
    );
    assert!(refused.to_string().contains(&c), "{refused}");

    let mut space = KeySpace::from_entries(
        vec![(a.clone(), sized(60)), (b.clone(), sized(60))],
        10,
        limits,
    )
    .expect("120 bytes");
    // Ignored keys do not count; a new value replaces the old one's share.
    assert_eq!(
        space.apply(batch(vec![
            put("/calico/ipam/v2/handle/h1", &"x".repeat(1000), 11),
            KeyChange {
                key: a.clone(),
                value: Some(sized(80)),
                revision: 11,
            },
        ])),
        WatchStep::Changed
    );
    assert_eq!(
        space.apply(batch(vec![KeyChange {
            key: c.clone(),
            value: Some(sized(20)),
            revision: 12,
        }])),
        WatchStep::Refused(Refused::Total {
            key: c.clone(),
            limit: 150
        })
    );
    // After a delete there is room again.
    let mut space =
        KeySpace::from_entries(vec![(a, sized(80)), (b.clone(), sized(60))], 10, limits)
            .expect("140 bytes");
    assert_eq!(
        space.apply(batch(vec![
            delete(&b, 11),
            KeyChange {
                key: c,
                value: Some(sized(20)),
                revision: 11,
            },
        ])),
        WatchStep::Changed
    );
    assert_eq!(space.total_bytes, 100);
}

#[test]
fn backoff_doubles_to_ten_seconds_and_resets() {
    let mut backoff = Backoff::new();
    let delays: Vec<u64> = (0..7)
        .map(|_| backoff.next_delay().as_millis() as u64)
        .collect();
    assert_eq!(delays, [500, 1000, 2000, 4000, 8000, 10000, 10000]);
    backoff.reset();
    assert_eq!(backoff.next_delay(), Duration::from_millis(500));
}

#[tokio::test]
async fn connect_needs_endpoints_and_names_them() {
    let err = EtcdStore::connect(&EtcdOptions::new(vec![]))
        .await
        .expect_err("no endpoints");
    assert!(matches!(err, EtcdError::NoEndpoints));
    let err = EtcdStore::connect(&EtcdOptions::new(vec!["http://bad host:2379".to_string()]))
        .await
        .expect_err("bad URL");
    assert!(err.to_string().contains("http://bad host:2379"), "{err}");
}

#[tokio::test]
async fn unreachable_etcd_is_reported_once_naming_the_endpoint() {
    // A port nobody listens on: bind one, then close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let store = EtcdStore::connect(&EtcdOptions::new(vec![endpoint.clone()]))
        .await
        .expect("connect is lazy");
    let (tx, mut rx) = mpsc::channel(4);
    let task = tokio::spawn(store.run(tx));
    let first = tokio::time::timeout(Duration::from_secs(15), rx.recv())
        .await
        .expect("an event within 15 s");
    match first {
        Some(StoreEvent::Unavailable(text)) => {
            assert!(text.contains(&endpoint), "{text}")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    // Retries at 0.5 s and 1 s follow; none of them is reported again.
    let again = tokio::time::timeout(Duration::from_millis(1800), rx.recv()).await;
    assert!(again.is_err(), "reported twice: {again:?}");
    // Closing the channel ends the store.
    drop(rx);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("run ends when the channel closes")
        .expect("run did not panic");
}
