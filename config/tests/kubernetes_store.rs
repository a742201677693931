//! The Kubernetes store against a running API server (the lab's stand-in, over HTTPS
//! with a bearer token and RBAC enforced from `deploy/kubernetes/rbac.yaml`):
//!
//! ```sh
//! tern-lab kube-apiserver --listen 127.0.0.1:16443 --rbac deploy/kubernetes/rbac.yaml \
//!     --kubeconfig /tmp/tern-kube/kubeconfig &
//! TERN_TEST_KUBECONFIG=/tmp/tern-kube/kubeconfig TERN_TEST_NAMESPACE=calico-system \
//!     cargo test -p tern-config --test kubernetes_store -- --ignored
//! ```
//!
//! The second test writes objects, which tern's role does not allow: give it a
//! stand-in started without `--rbac`, as `TERN_TEST_WRITABLE_KUBECONFIG`.
//!
//! Ignored by default: they need that server, which `tern-config` does not depend on.
// Setup helpers outside #[test] functions: a failed setup is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;
use tern_config::cluster::Cluster;
use tern_config::datastore::kubernetes::{KubeSettings, KubeStore};
use tern_config::datastore::StoreEvent;
use tokio::sync::mpsc;

fn settings() -> KubeSettings {
    let kubeconfig = std::env::var_os("TERN_TEST_KUBECONFIG")
        .expect("set TERN_TEST_KUBECONFIG to the stand-in's kubeconfig");
    KubeSettings {
        kubeconfig: Some(kubeconfig.into()),
        namespace: std::env::var("TERN_TEST_NAMESPACE").unwrap_or_else(|_| "calico-system".into()),
        ..KubeSettings::default()
    }
}

#[tokio::test]
#[ignore = "needs a Kubernetes API server: TERN_TEST_KUBECONFIG"]
async fn snapshot_from_a_real_protocol_server_is_accepted_by_the_model() {
    let store = KubeStore::connect(&settings()).await.unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let run = tokio::spawn(store.run(tx));
    let event = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("a first event within 30 s")
        .expect("the store keeps running");
    let StoreEvent::Snapshot {
        documents,
        revision,
    } = event
    else {
        panic!("expected a snapshot, got {event:?}");
    };
    assert_eq!(revision, 1);
    assert!(!documents.is_empty());
    for d in &documents {
        assert!(d.origin.starts_with("kubernetes "), "{}", d.origin);
    }
    let (cluster, _warnings) =
        Cluster::from_documents(&documents).unwrap_or_else(|e| panic!("{e}"));
    assert!(!cluster.nodes.is_empty(), "Nodes from the Kubernetes Nodes");
    drop(rx);
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .unwrap()
        .unwrap();
}

/// Waits for the next snapshot, skipping nothing else: an outage fails the test.
async fn next_snapshot(rx: &mut mpsc::Receiver<StoreEvent>) -> Vec<String> {
    let event = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("an event within 30 s")
        .expect("the store keeps running");
    match event {
        StoreEvent::Snapshot { documents, .. } => documents.into_iter().map(|d| d.origin).collect(),
        other => panic!("expected a snapshot, got {other:?}"),
    }
}

#[tokio::test]
#[ignore = "needs a writable Kubernetes API server: TERN_TEST_WRITABLE_KUBECONFIG"]
async fn created_and_deleted_objects_reach_the_snapshots() {
    let path = std::env::var_os("TERN_TEST_WRITABLE_KUBECONFIG")
        .expect("set TERN_TEST_WRITABLE_KUBECONFIG");
    let settings = KubeSettings {
        kubeconfig: Some(path.clone().into()),
        namespace: "calico-system".into(),
        ..KubeSettings::default()
    };
    let store = KubeStore::connect(&settings).await.unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let run = tokio::spawn(store.run(tx));
    let first = next_snapshot(&mut rx).await;
    let name = "kubernetes IPPool tern-test-pool";
    assert!(!first.iter().any(|o| o == name));

    let kubeconfig = kube::config::Kubeconfig::read_from(std::path::Path::new(&path)).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let gvk = GroupVersionKind::gvk("crd.projectcalico.org", "v1", "IPPool");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "ippools");
    let pools = kube::Api::<DynamicObject>::all_with(client, &resource);
    let pool: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "crd.projectcalico.org/v1",
        "kind": "IPPool",
        "metadata": {"name": "tern-test-pool"},
        "spec": {"cidr": "198.19.128.0/20", "blockSize": 26},
    }))
    .unwrap();
    pools.create(&PostParams::default(), &pool).await.unwrap();
    let added = next_snapshot(&mut rx).await;
    assert!(added.iter().any(|o| o == name), "{added:?}");
    assert_eq!(added.len(), first.len() + 1);

    pools
        .delete("tern-test-pool", &DeleteParams::default())
        .await
        .unwrap();
    let removed = next_snapshot(&mut rx).await;
    assert_eq!(removed, first);
    drop(rx);
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .unwrap()
        .unwrap();
}
