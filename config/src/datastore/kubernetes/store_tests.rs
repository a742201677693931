//! The store end to end against a minimal API server stand-in on 127.0.0.1 (plain
//! HTTP/1.1: lists answered from fixtures, watches held open, or every request
//! refused): the first snapshot, the outage texts from real `kube` errors, and "once
//! per outage".

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::*;
use crate::datastore::StoreEvent;

/// What the stand-in answers to one request path.
#[derive(Clone)]
enum Reply {
    /// A status code and a JSON body.
    Json(u16, String),
    /// Headers of a chunked 200, then nothing: a watch with no events.
    Hang,
    /// A watch that sends these events after a pause, then nothing more.
    Events(Vec<Value>),
}

type Responder = Arc<dyn Fn(&str) -> Reply + Send + Sync>;

/// Serves `respond` on 127.0.0.1; returns the URL.
async fn stand_in(respond: Responder) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(connection(stream, respond.clone()));
        }
    });
    url
}

/// Answers the GET requests of one keep-alive connection.
async fn connection(mut stream: TcpStream, respond: Responder) {
    let mut buffer = Vec::new();
    loop {
        let end = loop {
            if let Some(i) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
        buffer.drain(..end);
        let path = head.split(' ').nth(1).unwrap_or("/").to_string();
        match respond(&path) {
            Reply::Json(code, body) => {
                let response = format!(
                    "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                if stream.write_all(response.as_bytes()).await.is_err() {
                    return;
                }
            }
            Reply::Hang => {
                let _ = stream.write_all(CHUNKED.as_bytes()).await;
                std::future::pending::<()>().await;
            }
            Reply::Events(events) => {
                let _ = stream.write_all(CHUNKED.as_bytes()).await;
                tokio::time::sleep(Duration::from_millis(500)).await;
                for event in events {
                    let line = format!("{event}\n");
                    let chunk = format!("{:x}\r\n{line}\r\n", line.len());
                    let _ = stream.write_all(chunk.as_bytes()).await;
                }
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The head of a streamed (watch) response.
const CHUNKED: &str =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";

/// A list of `items` for a request path.
fn list(items: Vec<Value>) -> Reply {
    let body = json!({
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": "100"},
        "items": items,
    });
    Reply::Json(200, body.to_string())
}

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/src/datastore/kubernetes/fixtures/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A store for `url` through a kubeconfig file.
async fn store(url: &str, dir: &tempfile::TempDir) -> KubeStore {
    let path = dir.path().join("kubeconfig");
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{url}\"}}\nusers:\n- name: u\n  user: {{token: test-token}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
    );
    std::fs::write(&path, kubeconfig).unwrap();
    let settings = KubeSettings {
        kubeconfig: Some(path),
        ..KubeSettings::default()
    };
    KubeStore::connect(&settings).await.unwrap()
}

/// Runs the store and collects what it sends for `window`.
async fn events_for(store: KubeStore, window: Duration) -> Vec<StoreEvent> {
    let (tx, mut rx) = mpsc::channel(64);
    let run = tokio::spawn(store.run(tx));
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + window;
    while let Ok(Some(event)) = tokio::time::timeout_at(deadline, rx.recv()).await {
        out.push(event);
    }
    drop(rx);
    // The store ends once the channel is closed.
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the store stops when the daemon stops listening")
        .unwrap();
    out
}

#[tokio::test]
async fn first_snapshot_after_every_kind_is_listed() {
    let respond: Responder = Arc::new(|path: &str| {
        if path.contains("watch=true") {
            return Reply::Hang;
        }
        let path = path.split('?').next().unwrap_or(path);
        match path {
            "/apis/crd.projectcalico.org/v1/bgppeers" => list(vec![fixture("bgppeer")]),
            "/apis/crd.projectcalico.org/v1/ippools" => list(vec![fixture("ippool")]),
            "/api/v1/nodes" => list(vec![json!({
                "apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata",
                "metadata": fixture("node")["metadata"],
            })]),
            "/api/v1/namespaces/kube-system/secrets" => list(vec![fixture("secret")]),
            _ => list(vec![]),
        }
    });
    let url = stand_in(respond).await;
    let dir = tempfile::tempdir().unwrap();
    let events = events_for(store(&url, &dir).await, Duration::from_secs(3)).await;
    let [StoreEvent::Snapshot {
        documents,
        revision,
    }] = events.as_slice()
    else {
        panic!("expected one snapshot, got {events:?}");
    };
    assert_eq!(*revision, 1);
    let origins: Vec<&str> = documents.iter().map(|d| d.origin.as_str()).collect();
    assert_eq!(
        origins,
        [
            "kubernetes BGPPeer tor-a",
            "kubernetes IPPool default-ipv4-ippool",
            "kubernetes Node node-1",
            "kubernetes Secret kube-system/bgp-secrets",
        ]
    );
}

#[tokio::test]
async fn refused_credentials_are_reported_once() {
    let respond: Responder = Arc::new(|_: &str| {
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": "Unauthorized", "reason": "Unauthorized", "code": 401,
        });
        Reply::Json(401, status.to_string())
    });
    let url = stand_in(respond).await;
    let dir = tempfile::tempdir().unwrap();
    // Long enough for the watchers to retry (0.8 s, then 1.6 s, …).
    let events = events_for(store(&url, &dir).await, Duration::from_secs(4)).await;
    assert_eq!(
        events,
        [StoreEvent::Unavailable(format!(
            "Kubernetes API {url}: the server refused tern's credentials (401 Unauthorized): check the service-account token / kubeconfig user"
        ))]
    );
}

#[tokio::test]
async fn an_unreachable_server_is_reported_in_plain_words() {
    // A port nobody listens on any more.
    let url = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let dir = tempfile::tempdir().unwrap();
    let events = events_for(store(&url, &dir).await, Duration::from_secs(3)).await;
    assert_eq!(
        events,
        [StoreEvent::Unavailable(format!(
            "Kubernetes API {url}: unreachable (connection refused); retrying"
        ))]
    );
}

#[tokio::test]
async fn a_watched_change_gives_a_new_snapshot() {
    let respond: Responder = Arc::new(|path: &str| {
        let pools = path.starts_with("/apis/crd.projectcalico.org/v1/ippools");
        if path.contains("watch=true") {
            if !pools {
                return Reply::Hang;
            }
            let mut pool = fixture("ippool");
            pool["metadata"]["name"] = "second".into();
            pool["metadata"]["resourceVersion"] = "101".into();
            pool["spec"]["cidr"] = "198.19.0.0/16".into();
            return Reply::Events(vec![json!({"type": "ADDED", "object": pool})]);
        }
        list(if pools {
            vec![fixture("ippool")]
        } else {
            vec![]
        })
    });
    let url = stand_in(respond).await;
    let dir = tempfile::tempdir().unwrap();
    let events = events_for(store(&url, &dir).await, Duration::from_secs(4)).await;
    // One snapshot, or two if the first went out before the watch event came.
    let Some(StoreEvent::Snapshot {
        documents,
        revision,
    }) = events.last()
    else {
        panic!("expected snapshots, got {events:?}");
    };
    assert!(
        events
            .iter()
            .all(|e| matches!(e, StoreEvent::Snapshot { .. })),
        "{events:?}"
    );
    assert_eq!(*revision, i64::try_from(events.len()).unwrap());
    let origins: Vec<&str> = documents.iter().map(|d| d.origin.as_str()).collect();
    assert_eq!(
        origins,
        [
            "kubernetes IPPool default-ipv4-ippool",
            "kubernetes IPPool second"
        ]
    );
}

#[tokio::test]
async fn recovery_after_an_outage_sends_a_snapshot() {
    let healthy = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = healthy.clone();
    let respond: Responder = Arc::new(move |path: &str| {
        if !flag.load(std::sync::atomic::Ordering::SeqCst) {
            let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": "bgppeers is forbidden", "reason": "Forbidden", "code": 403});
            return Reply::Json(403, status.to_string());
        }
        if path.contains("watch=true") {
            Reply::Hang
        } else {
            list(vec![])
        }
    });
    let url = stand_in(respond).await;
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(64);
    let run = tokio::spawn(store(&url, &dir).await.run(tx));
    let wait = Duration::from_secs(20);
    let first = tokio::time::timeout(wait, rx.recv())
        .await
        .unwrap()
        .unwrap();
    let StoreEvent::Unavailable(text) = first else {
        panic!("expected an outage, got {first:?}");
    };
    assert!(text.contains("forbidden (403) to list"), "{text}");
    healthy.store(true, std::sync::atomic::Ordering::SeqCst);
    // Every kind was refused; the outage is reported once, and its end by the next
    // snapshot.
    match tokio::time::timeout(wait, rx.recv())
        .await
        .unwrap()
        .unwrap()
    {
        StoreEvent::Snapshot {
            documents,
            revision,
        } => {
            assert!(documents.is_empty());
            assert_eq!(revision, 1);
        }
        other => panic!("expected the snapshot, got {other:?}"),
    }
    drop(rx);
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_missing_kubeconfig_is_named() {
    let settings = KubeSettings {
        kubeconfig: Some("/nonexistent/tern-kubeconfig".into()),
        ..KubeSettings::default()
    };
    let err = KubeStore::connect(&settings).await.unwrap_err().to_string();
    assert!(
        err.starts_with("Kubernetes: kubeconfig /nonexistent/tern-kubeconfig: "),
        "{err}"
    );
}
