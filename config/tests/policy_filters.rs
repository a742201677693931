//! BGPFilter rules: every field of Calico v3.32's BGPFilterRuleV4/V6 is read, and a
//! field tern cannot honour is an error naming the field and the BGPFilter.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a bad fixture is a bug

use tern_config::cluster::{Action, MatchOperator, Operation};
use tern_config::datastore::Document;
use tern_config::values::Community;
use tern_config::Cluster;

fn load(rules: &str) -> Result<Cluster, String> {
    let text = format!(
        "apiVersion: projectcalico.org/v3\nkind: BGPFilter\nmetadata: {{name: edge}}\nspec:\n{rules}"
    );
    Cluster::from_documents(&[Document {
        origin: "filters.yaml".into(),
        text,
    }])
    .map(|(c, _)| c)
    .map_err(|e| e.to_string())
}

#[test]
fn every_v3_32_rule_field_is_read() {
    let c = load(
        "  exportV4:\n    - cidr: 198.18.0.0/15\n      matchOperator: In\n      prefixLength: {min: 8, max: 26}\n      source: RemotePeers\n      interface: \"cali*\"\n      peerType: eBGP\n      communities: {values: [\"65001:100\"]}\n      asPathPrefix: [65001, \"1.10\"]\n      priority: 512\n      action: Accept\n      operations:\n        - addCommunity: {value: \"65001:1:2\"}\n        - prependASPath: {prefix: [64512]}\n        - setPriority: {value: 100}\n",
    )
    .unwrap();
    let r = &c.filters["edge"].export_v4[0];
    assert_eq!(
        r.cidr,
        Some(("198.18.0.0/15".parse().unwrap(), MatchOperator::In))
    );
    // min is at least the CIDR's own length, as confd renders it.
    assert_eq!(r.prefix_length, Some((15, 26)));
    assert!(r.remote_peers_only);
    assert_eq!(r.interface.as_deref(), Some("cali*"));
    assert_eq!(r.ebgp, Some(true));
    assert_eq!(
        r.communities,
        vec![Community::Standard((65001 << 16) | 100)]
    );
    assert_eq!(r.as_path_prefix, vec![65001, 65546]);
    assert_eq!(r.priority, Some(512));
    assert_eq!(
        r.operations,
        vec![
            Operation::AddCommunity(Community::Large(65001, 1, 2)),
            Operation::PrependAsPath(vec![64512]),
            Operation::SetPriority(100),
        ]
    );
    assert_eq!(r.action, Action::Accept);
}

#[test]
fn a_field_tern_cannot_honour_is_an_error_naming_it() {
    // (rules, text the error must contain)
    let rows = [
        ("  exportV4:\n    - {cidr: 198.18.0.0/16, matchOperator: In, nextHop: self, action: Reject}\n", "spec.exportV4[0].nextHop"),
        ("  exportV5:\n    - {action: Reject}\n", "spec.exportV5"),
        ("  importV4:\n    - {cidr: 198.18.0.0/16, matchOperator: Equal, prefixLength: {max: 24}, action: Reject}\n", "Equal or NotEqual"),
        ("  importV4:\n    - {prefixLength: {max: 24}, action: Reject}\n", "needs a cidr"),
        ("  importV4:\n    - {cidr: 198.18.0.0/16, matchOperator: In, prefixLength: {max: 8}, action: Reject}\n", "BIRD refuses an empty range"),
        ("  importV4:\n    - {cidr: 198.18.0.0/16, matchOperator: In, prefixLength: {max: 33}, action: Reject}\n", "0 to 32"),
        ("  importV4:\n    - {communities: {values: [\"1:1\", \"1:2\"]}, action: Reject}\n", "exactly one community"),
        ("  importV4:\n    - {priority: 0, action: Reject}\n", "spec.importV4[0].priority"),
        ("  importV4:\n    - {asPathPrefix: [0], action: Reject}\n", "spec.importV4[0].asPathPrefix[0]"),
        ("  importV4:\n    - {action: Reject, operations: [{setPriority: {value: 5}}]}\n", "only to a rule whose action is Accept"),
        ("  importV4:\n    - {action: Accept, operations: [{}]}\n", "exactly one of addCommunity"),
        ("  importV4:\n    - {action: Accept, operations: [{setPriority: {value: 5}, addCommunity: {value: \"1:1\"}}]}\n", "exactly one of addCommunity"),
        ("  importV4:\n    - {action: Accept, operations: [{addCommunity: {value: \"1:x\"}}]}\n", "operations[0].addCommunity.value"),
        ("  importV4:\n    - {interface: \"cali \\\"x\", action: Reject}\n", "spec.importV4[0].interface"),
        ("  importV4:\n    - {peerType: internal, action: Reject}\n", "use eBGP or iBGP"),
        ("  importV6:\n    - {cidr: 198.18.0.0/16, matchOperator: In, action: Reject}\n", "not an IPv6 prefix"),
    ];
    let mut failures = Vec::new();
    for (rules, want) in rows {
        match load(rules) {
            Ok(_) => failures.push(format!("accepted: {rules}")),
            Err(e) if !(e.contains(want) && e.contains("BGPFilter edge")) => failures.push(
                format!("{rules}: error {e:?} lacks {want:?} or the filter's name"),
            ),
            Err(_) => {}
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}
