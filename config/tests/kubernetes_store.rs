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
//! Ignored by default: it needs that server, which `tern-config` does not depend on.

use std::time::Duration;

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
