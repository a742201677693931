//! tern's Kubernetes datastore (`tern_config::datastore::kubernetes::KubeStore`, on the
//! `kube` crate) against the API server stand-in: a snapshot of the fixtures, changes,
//! recovery after history compaction and an API server restart, and RBAC limited to
//! `deploy/kubernetes/rbac.yaml`.

#![cfg(target_os = "linux")]
// Setup helpers outside #[test] functions: a failed setup is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::json;
use tern_config::datastore::kubernetes::{KubeSettings, KubeStore};
use tern_config::datastore::StoreEvent;
use tern_interop::kubeapi::{fixtures_dir, ApiServer, ApiServerOptions};
use tokio::sync::mpsc;

const TOKEN: &str = "kubestore-token";

fn start(rbac: Option<String>) -> (ApiServer, tempfile::TempDir) {
    let mut opts = ApiServerOptions::new("127.0.0.1:0".parse().unwrap(), TOKEN);
    opts.rbac_yaml = rbac;
    let s = ApiServer::start(opts).unwrap();
    s.load_fixtures(&fixtures_dir()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    s.write_kubeconfig(&dir.path().join("kubeconfig"), TOKEN)
        .unwrap();
    (s, dir)
}

async fn run_store(dir: &tempfile::TempDir) -> mpsc::Receiver<StoreEvent> {
    let settings = KubeSettings {
        kubeconfig: Some(dir.path().join("kubeconfig")),
        namespace: "calico-system".into(),
        ..KubeSettings::default()
    };
    let store = KubeStore::connect(&settings).await.unwrap();
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(store.run(tx));
    rx
}

/// The origins of the next snapshot whose documents satisfy `want` (60 s at most).
async fn snapshot_where(
    rx: &mut mpsc::Receiver<StoreEvent>,
    want: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut last = Vec::new();
    loop {
        let ev = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no snapshot as wanted in 60 s; last: {last:?}"))
            .expect("the store stopped");
        match ev {
            StoreEvent::Snapshot { documents, .. } => {
                last = documents.into_iter().map(|d| d.origin).collect();
                if want(&last) {
                    return last;
                }
            }
            StoreEvent::Unavailable(why) => eprintln!("store unavailable: {why}"),
        }
    }
}

fn has(origins: &[String], what: &str) -> bool {
    origins.iter().any(|o| o.contains(what))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubestore_reads_the_fixtures_and_follows_changes_through_compaction_and_restart() {
    let (mut s, dir) = start(None);
    let mut rx = run_store(&dir).await;
    let first = snapshot_where(&mut rx, |o| has(o, "BGPPeer tor-r1")).await;
    for want in [
        "BGPConfiguration default",
        "Node node-1",
        "IPPool default-ipv4-ippool",
        "IPAMBlock",
        "BlockAffinity",
        "Secret",
        "Service",
        "EndpointSlice",
    ] {
        assert!(has(&first, want), "{want} missing from {first:?}");
    }

    let peer = |name: &str| {
        json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "BGPPeer",
               "metadata": {"name": name}, "spec": {"peerIP": "203.0.113.7", "asNumber": 65007}})
    };
    s.apply(peer("added-1")).unwrap();
    snapshot_where(&mut rx, |o| has(o, "BGPPeer added-1")).await;

    // The server goes away; meanwhile things change and the history is compacted past
    // them. Back, resuming a watch from the version the store saw is 410 Gone: the
    // store must re-list to see what changed.
    s.stop();
    s.delete("crd.projectcalico.org/v1", "BGPPeer", None, "added-1")
        .unwrap();
    s.apply(peer("added-2")).unwrap();
    s.compact();
    s.restart().unwrap();
    let after = snapshot_where(&mut rx, |o| {
        has(o, "BGPPeer added-2") && !has(o, "BGPPeer added-1")
    })
    .await;
    assert!(has(&after, "Node node-3"), "{after:?}");
    // It saw the 410: it listed the peers again rather than only resuming its watch.
    let lists = s
        .requests()
        .iter()
        .filter(|r| r.verb == "list" && r.resource == "bgppeers")
        .count();
    assert!(lists >= 2, "bgppeers listed {lists} time(s)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubestore_needs_nothing_beyond_the_shipped_rbac() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/kubernetes/rbac.yaml"
    );
    let Ok(rbac) = std::fs::read_to_string(path) else {
        panic!("{path} is missing");
    };
    // The fixtures' Secret is where the Tigera operator runs calico-node; the manifest
    // says to change its namespace to match, as done here.
    let rbac = rbac.replace("namespace: kube-system", "namespace: calico-system");
    let (s, dir) = start(Some(rbac));
    let mut rx = run_store(&dir).await;
    let origins = snapshot_where(&mut rx, |o| has(o, "BGPPeer tor-r1")).await;
    assert!(has(&origins, "Secret"), "{origins:?}");
    let requests = s.requests();
    let denied: Vec<_> = requests.iter().filter(|r| r.status == 403).collect();
    assert!(denied.is_empty(), "denied: {denied:?}");
    // The store only reads, as the manifest assumes.
    assert!(requests
        .iter()
        .all(|r| r.verb == "list" || r.verb == "watch"));
}
