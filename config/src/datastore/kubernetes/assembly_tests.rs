//! Unit tests without a server: the snapshot assembly, the outage texts, and the RBAC
//! manifest against [`API_CALLS`].

use std::collections::BTreeSet;

use serde_json::Value;

use super::assembly::{Assembly, Entry, Failure, Input, Outcome, Refusal, Step};
use super::convert::{convert, Item};
use super::tests::{calico_items, fixture, item};
use super::*;
use crate::cluster::Cluster;
use crate::datastore::Document;

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
    let failure = Failure {
        class: "403",
        text: "forbidden".into(),
    };
    let step = assembly.apply(Input::Failed(Kind::BgpPeer, failure.clone()));
    assert_eq!(step, Step::Failed(failure));
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
    // Without external or load-balancer addresses, a Cluster-policy service gives no
    // route of its own.
    cluster_service["spec"]["externalIPs"] = serde_json::json!([]);
    cluster_service["status"] = serde_json::json!({});
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

#[test]
fn a_whole_snapshot_is_accepted_by_the_model() {
    let mut items: Vec<(Kind, Item)> = calico_items()
        .into_iter()
        .map(|i| {
            let kind = match i.document.origin.split(' ').nth(1).unwrap() {
                "BGPConfiguration" => Kind::BgpConfiguration,
                "BGPPeer" => Kind::BgpPeer,
                "BGPFilter" => Kind::BgpFilter,
                "IPPool" => Kind::IpPool,
                "IPAMBlock" => Kind::IpamBlock,
                "BlockAffinity" => Kind::BlockAffinity,
                _ => Kind::Node,
            };
            (kind, i)
        })
        .collect();
    items.push((Kind::Secret, item(Kind::Secret, "secret")));
    items.push((Kind::Service, item(Kind::Service, "service")));
    items.push((
        Kind::EndpointSlice,
        item(Kind::EndpointSlice, "endpointslice"),
    ));
    let mut assembly = Assembly::new();
    list_all(&mut assembly, &items);
    let docs = snapshot_docs(assembly.snapshot(false));
    assert_eq!(docs.len(), items.len());
    let (cluster, warnings) = Cluster::from_documents(&docs).unwrap_or_else(|e| panic!("{e}"));
    for w in &warnings {
        assert!(
            !w.file.contains("Secret")
                && !w.file.contains("Service")
                && !w.file.contains("EndpointSlice"),
            "{w:?}"
        );
    }
    let password = cluster.peers[0].password.as_ref().unwrap();
    let secret = cluster.secrets.lookup(password).unwrap().unwrap();
    assert_eq!(secret.expose(), "secret-password-a");
    assert_eq!(cluster.services.len(), 1);
    assert_eq!(cluster.endpoint_slices.len(), 1);
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
    let (Failure { text, .. }, restart) =
        watch::failure(Kind::BgpPeer, &api_error(401), URL, "kube-system").unwrap();
    assert_eq!(text, "Kubernetes API https://198.51.100.1:6443: the server refused tern's credentials (401 Unauthorized): check the service-account token / kubeconfig user");
    assert!(!restart, "a failed list is retried by the watcher itself");

    let (Failure { text, .. }, _) =
        watch::failure(Kind::BgpPeer, &api_error(403), URL, "kube-system").unwrap();
    assert_eq!(text, "Kubernetes API https://198.51.100.1:6443: forbidden (403) to list crd.projectcalico.org/v1 bgppeers: the ClusterRole tern in deploy/kubernetes/rbac.yaml grants it");

    let (Failure { text, .. }, _) =
        watch::failure(Kind::Secret, &api_error(403), URL, "calico-system").unwrap();
    assert!(
        text.contains("v1 secrets in namespace calico-system"),
        "{text}"
    );
    assert!(
        text.ends_with("the Role tern in deploy/kubernetes/rbac.yaml grants it, applied in namespace calico-system"),
        "{text}"
    );

    let (Failure { text, .. }, _) =
        watch::failure(Kind::BgpFilter, &api_error(404), URL, "kube-system").unwrap();
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
    let (Failure { text, .. }, restart) =
        watch::failure(Kind::Node, &err, URL, "kube-system").unwrap();
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
