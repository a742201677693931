//! End-to-end tests of the etcd store against a real etcd (Debian `etcd-server`).
//!
//! Each test starts its own etcd on 127.0.0.1 with free ports and a data dir in a temp
//! dir, writes Calico keys with the Rust client, and checks what `EtcdStore::run` sends:
//! the initial snapshot, snapshots after changes, one snapshot per transaction, recovery
//! after a compaction and after an etcd restart. etcd is stopped by its PID when the
//! test ends, however it ends.
//!
//! Without an `etcd` binary the tests print `SKIP` and pass, except under `CI=true`,
//! where they fail.
// Setup helpers outside #[test] functions: a failed setup is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use etcd_client::{Client, CompactionOptions, Txn, TxnOp};
use serde_json::{json, Value};
use tern_config::datastore::etcd::{EtcdOptions, EtcdStore};
use tern_config::datastore::{Document, StoreEvent};
use tokio::sync::mpsc;
use tokio::time::{timeout, Instant};

use common::Etcd;

const RES: &str = "/calico/resources/v3/projectcalico.org";
const BLOCK_KEY: &str = "/calico/ipam/v2/assignment/ipv4/block/198.18.4.0-26";
const AFFINITY_KEY: &str = "/calico/ipam/v2/host/node-a/ipv4/block/198.18.4.0-26";
/// How long any single wait may take before the test fails.
const WAIT: Duration = Duration::from_secs(10);

// --- the store's log ------------------------------------------------------------------

/// Collects the messages the store logs, so a test can tell which path it took (the
/// snapshots alone cannot show whether a catch-up came from a re-list or a long batch).
#[derive(Clone, Default)]
struct LogCapture {
    messages: Arc<Mutex<Vec<String>>>,
}

impl LogCapture {
    /// Installs the capture for the current thread; `#[tokio::test]` runs the test and
    /// the tasks it spawns on this one thread.
    fn install(&self) -> tracing::subscriber::DefaultGuard {
        tracing::subscriber::set_default(self.clone())
    }

    fn contains(&self, needle: &str) -> bool {
        self.messages
            .lock()
            .map(|m| m.iter().any(|line| line.contains(needle)))
            .unwrap_or(false)
    }

    fn dump(&self) -> String {
        self.messages
            .lock()
            .map(|m| m.join("\n"))
            .unwrap_or_default()
    }
}

/// Renders an event's fields as `name=value` text.
struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl tracing::Subscriber for LogCapture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(event.metadata().level().to_string());
        event.record(&mut fields);
        if let Ok(mut messages) = self.messages.lock() {
            messages.push(fields.0);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

// --- test data --------------------------------------------------------------------------

fn bgp_configuration() -> String {
    json!({
        "kind": "BGPConfiguration", "apiVersion": "projectcalico.org/v3",
        "metadata": {"name": "default"},
        "spec": {"asNumber": 64512, "nodeToNodeMeshEnabled": true}
    })
    .to_string()
}

fn node(name: &str, address: &str) -> String {
    json!({
        "kind": "Node", "apiVersion": "projectcalico.org/v3",
        "metadata": {"name": name},
        "spec": {"bgp": {"ipv4Address": address}}
    })
    .to_string()
}

fn peer(name: &str, address: &str) -> String {
    json!({
        "kind": "BGPPeer", "apiVersion": "projectcalico.org/v3",
        "metadata": {"name": name},
        "spec": {"peerIP": address, "asNumber": 64513}
    })
    .to_string()
}

fn block(cidr: &str, node: &str) -> String {
    json!({
        "cidr": cidr, "affinity": format!("host:{node}"), "strictAffinity": false,
        "allocations": [0, null, 1], "unallocated": [1],
        "attributes": [
            {"handle_id": "k8s-pod-network.a", "secondary": {"node": node}},
            {"handle_id": "k8s-pod-network.b", "secondary": {"node": "node-b"}}
        ],
        "sequenceNumber": 3, "deleted": false
    })
    .to_string()
}

/// A small cluster: BGP configuration, two nodes, a pool (whose value lacks apiVersion,
/// kind and name, as the key carries them), a block and its affinity, plus keys the
/// store must ignore. Returns the revision after the last write.
async fn load_cluster(client: &mut Client) -> i64 {
    let keys = [
        (
            format!("{RES}/bgpconfigurations/default"),
            bgp_configuration(),
        ),
        (
            format!("{RES}/nodes/node-a"),
            node("node-a", "198.18.0.1/24"),
        ),
        (
            format!("{RES}/nodes/node-b"),
            node("node-b", "198.18.0.2/24"),
        ),
        (
            format!("{RES}/ippools/pool-a"),
            json!({"spec": {"cidr": "198.18.4.0/22", "blockSize": 26}}).to_string(),
        ),
        (BLOCK_KEY.to_string(), block("198.18.4.0/26", "node-a")),
        (
            AFFINITY_KEY.to_string(),
            json!({"state": "confirmed", "deleted": false}).to_string(),
        ),
        // Ignored: a handle, a workload endpoint, felix status.
        (
            "/calico/ipam/v2/handle/k8s-pod-network.a".to_string(),
            "{}".to_string(),
        ),
        (
            format!("{RES}/workloadendpoints/default/node--a-k8s-pod-eth0"),
            "{}".to_string(),
        ),
        (
            "/calico/felix/v2/no-region/host/node-a/status".to_string(),
            "{}".to_string(),
        ),
    ];
    let mut revision = 0;
    for (key, value) in keys {
        let response = client.put(key, value, None).await.expect("put");
        revision = response.header().expect("header").revision();
    }
    revision
}

fn expected_cluster_origins() -> Vec<String> {
    let mut origins = vec![
        format!("{RES}/bgpconfigurations/default"),
        format!("{RES}/nodes/node-a"),
        format!("{RES}/nodes/node-b"),
        format!("{RES}/ippools/pool-a"),
        BLOCK_KEY.to_string(),
        AFFINITY_KEY.to_string(),
    ];
    origins.sort();
    origins
}

// --- watching the store -----------------------------------------------------------------

/// The store running against an etcd, and the channel it reports on.
struct Running {
    events: mpsc::Receiver<StoreEvent>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn start(etcd: &Etcd, capacity: usize) -> Running {
        let store = timeout(
            WAIT,
            EtcdStore::connect(&EtcdOptions::new(vec![etcd.endpoint()])),
        )
        .await
        .expect("connect in time")
        .expect("connect");
        let (tx, events) = mpsc::channel(capacity);
        let task = tokio::spawn(store.run(tx));
        Running { events, task }
    }

    async fn next(&mut self, what: &str) -> StoreEvent {
        match timeout(WAIT, self.events.recv()).await {
            Ok(Some(event)) => event,
            Ok(None) => panic!("store stopped while waiting for {what}"),
            Err(_) => panic!("no event within {WAIT:?} while waiting for {what}"),
        }
    }

    async fn snapshot(&mut self, what: &str) -> Snapshot {
        match self.next(what).await {
            StoreEvent::Snapshot {
                documents,
                revision,
            } => Snapshot {
                documents,
                revision,
            },
            StoreEvent::Unavailable(text) => {
                panic!("store unavailable while waiting for {what}: {text}")
            }
        }
    }

    /// Stops the store by closing its channel, and checks that it ends.
    async fn stop(self) {
        drop(self.events);
        timeout(WAIT, self.task)
            .await
            .expect("store ends when its channel closes")
            .expect("store did not panic");
    }
}

struct Snapshot {
    documents: Vec<Document>,
    revision: i64,
}

impl Snapshot {
    fn origins(&self) -> Vec<String> {
        let mut origins: Vec<String> = self.documents.iter().map(|d| d.origin.clone()).collect();
        origins.sort();
        origins
    }

    fn get(&self, key: &str) -> Option<Value> {
        let document = self.documents.iter().find(|d| d.origin == key)?;
        Some(serde_json::from_str(&document.text).expect("document is JSON"))
    }

    fn has(&self, key: &str) -> bool {
        self.documents.iter().any(|d| d.origin == key)
    }
}

async fn put_revision(client: &mut Client, key: &str, value: String) -> i64 {
    let response = timeout(WAIT, client.put(key, value, None))
        .await
        .expect("put in time")
        .expect("put");
    response.header().expect("header").revision()
}

// --- the scenarios ----------------------------------------------------------------------

/// (1) The initial snapshot holds the converted cluster, at the revision of the last
/// write, and nothing the store ignores.
#[tokio::test]
async fn initial_snapshot_holds_converted_cluster() {
    let Some(etcd) = Etcd::start("etcd_store", None, None).await else {
        return;
    };
    let mut client = etcd.client().await;
    let revision = load_cluster(&mut client).await;

    // The one-shot read agrees with what `run` sends.
    let mut store = EtcdStore::connect(&EtcdOptions::new(vec![etcd.endpoint()]))
        .await
        .expect("connect");
    let (documents, read_revision) = store.snapshot().await.expect("snapshot");
    assert_eq!(read_revision, revision);
    assert_eq!(documents.len(), expected_cluster_origins().len());

    let mut running = Running::start(&etcd, 8).await;
    let snapshot = running.snapshot("the initial snapshot").await;
    assert_eq!(snapshot.revision, revision);
    assert_eq!(snapshot.origins(), expected_cluster_origins());
    assert_eq!(snapshot.documents, documents);

    // Complete resources pass through unchanged.
    let config_key = format!("{RES}/bgpconfigurations/default");
    assert_eq!(
        snapshot
            .documents
            .iter()
            .find(|d| d.origin == config_key)
            .map(|d| d.text.clone()),
        Some(bgp_configuration())
    );
    // The pool is completed from its key.
    let pool = snapshot
        .get(&format!("{RES}/ippools/pool-a"))
        .expect("pool");
    assert_eq!(pool["apiVersion"], "projectcalico.org/v3");
    assert_eq!(pool["kind"], "IPPool");
    assert_eq!(pool["metadata"]["name"], "pool-a");
    assert_eq!(pool["spec"]["cidr"], "198.18.4.0/22");
    // The block and the affinity are converted to v3 resources.
    assert_eq!(
        snapshot.get(BLOCK_KEY).expect("block"),
        json!({
            "apiVersion": "projectcalico.org/v3", "kind": "IPAMBlock",
            "metadata": {"name": "198-18-4-0-26"},
            "spec": {
                "cidr": "198.18.4.0/26", "affinity": "host:node-a", "strictAffinity": false,
                "allocations": [0, null, 1], "unallocated": [1],
                "attributes": [
                    {"handle_id": "k8s-pod-network.a", "secondary": {"node": "node-a"}},
                    {"handle_id": "k8s-pod-network.b", "secondary": {"node": "node-b"}}
                ],
                "deleted": false
            }
        })
    );
    assert_eq!(
        snapshot.get(AFFINITY_KEY).expect("affinity"),
        json!({
            "apiVersion": "projectcalico.org/v3", "kind": "BlockAffinity",
            "metadata": {"name": "node-a-198-18-4-0-26"},
            "spec": {"node": "node-a", "cidr": "198.18.4.0/26", "state": "confirmed", "deleted": "false"}
        })
    );
    running.stop().await;
}

/// (2) A put and a delete each produce a new complete snapshot at a higher revision;
/// a change to keys the store ignores produces none.
#[tokio::test]
async fn changes_produce_new_snapshots() {
    let Some(etcd) = Etcd::start("etcd_store", None, None).await else {
        return;
    };
    let mut client = etcd.client().await;
    load_cluster(&mut client).await;
    let mut running = Running::start(&etcd, 8).await;
    let first = running.snapshot("the initial snapshot").await;

    let peer_key = format!("{RES}/bgppeers/tor-a");
    let peer_revision = put_revision(&mut client, &peer_key, peer("tor-a", "198.18.0.254")).await;
    let second = running.snapshot("the snapshot with the peer").await;
    assert_eq!(second.revision, peer_revision);
    assert!(second.revision > first.revision);
    assert_eq!(second.documents.len(), first.documents.len() + 1);
    assert_eq!(
        second.get(&peer_key).expect("peer")["spec"]["peerIP"],
        "198.18.0.254"
    );

    let node_b = format!("{RES}/nodes/node-b");
    let deleted = client.delete(node_b.clone(), None).await.expect("delete");
    let delete_revision = deleted.header().expect("header").revision();
    let third = running.snapshot("the snapshot without node-b").await;
    assert_eq!(third.revision, delete_revision);
    assert!(!third.has(&node_b));
    assert!(third.has(&peer_key), "a snapshot is complete, not a delta");
    assert_eq!(third.documents.len(), first.documents.len());

    // A handle changes (as with every pod): nothing tern reads changed, so no snapshot.
    // The next snapshot is the one of the following real change.
    put_revision(
        &mut client,
        "/calico/ipam/v2/handle/k8s-pod-network.z",
        "{}".into(),
    )
    .await;
    let node_c = format!("{RES}/nodes/node-c");
    let node_c_revision = put_revision(&mut client, &node_c, node("node-c", "198.18.0.3/24")).await;
    let fourth = running.snapshot("the snapshot with node-c").await;
    assert_eq!(fourth.revision, node_c_revision);
    assert!(fourth.has(&node_c));
    running.stop().await;
}

/// (3) A transaction that writes a resource and an IPAM block (both prefixes) gives
/// exactly one snapshot holding both.
#[tokio::test]
async fn transaction_gives_one_snapshot() {
    let Some(etcd) = Etcd::start("etcd_store", None, None).await else {
        return;
    };
    let mut client = etcd.client().await;
    load_cluster(&mut client).await;
    let mut running = Running::start(&etcd, 8).await;
    running.snapshot("the initial snapshot").await;

    let peer_key = format!("{RES}/bgppeers/tor-b");
    let block_key = "/calico/ipam/v2/assignment/ipv4/block/198.18.4.64-26";
    let txn = Txn::new().and_then(vec![
        TxnOp::put(peer_key.clone(), peer("tor-b", "198.18.0.253"), None),
        TxnOp::put(block_key, block("198.18.4.64/26", "node-b"), None),
    ]);
    let response = client.txn(txn).await.expect("txn");
    let txn_revision = response.header().expect("header").revision();
    let snapshot = running.snapshot("the snapshot of the transaction").await;
    assert_eq!(snapshot.revision, txn_revision);
    assert!(
        snapshot.has(&peer_key) && snapshot.has(block_key),
        "one snapshot holds both keys of the transaction: {:?}",
        snapshot.origins()
    );
    // And no second snapshot for it: the next one is the next write's.
    let marker = format!("{RES}/nodes/node-marker");
    let marker_revision =
        put_revision(&mut client, &marker, node("node-marker", "198.18.0.9/24")).await;
    let next = running.snapshot("the snapshot after the transaction").await;
    assert_eq!(
        next.revision, marker_revision,
        "an extra snapshot came between"
    );
    running.stop().await;
}

/// (4) While the daemon does not read, etcd moves on and compacts its history past the
/// store's watch. The store re-lists and the next snapshots end in the final state.
#[tokio::test]
async fn recovers_after_compaction() {
    let Some(etcd) = Etcd::start("etcd_store", None, None).await else {
        return;
    };
    let log = LogCapture::default();
    let _guard = log.install();
    let mut client = etcd.client().await;
    load_cluster(&mut client).await;
    // Capacity 1: the store blocks on the second unread snapshot and stops reading its
    // watch, so etcd's side of the watch backs up and falls behind the compaction.
    let mut running = Running::start(&etcd, 1).await;
    running.snapshot("the initial snapshot").await;

    let churn = format!("{RES}/bgppeers/churn");
    let padding = "x".repeat(32 * 1024);
    let writes = 600;
    let mut last = 0;
    for seq in 0..writes {
        let value = json!({
            "kind": "BGPPeer", "apiVersion": "projectcalico.org/v3",
            "metadata": {"name": "churn", "annotations": {"seq": seq.to_string(), "pad": padding}},
            "spec": {"peerIP": "198.18.0.250", "asNumber": 64514}
        });
        last = put_revision(&mut client, &churn, value.to_string()).await;
    }
    let final_key = format!("{RES}/nodes/node-final");
    last =
        last.max(put_revision(&mut client, &final_key, node("node-final", "198.18.0.8/24")).await);
    timeout(
        WAIT,
        client.compact(last, Some(CompactionOptions::new().with_physical())),
    )
    .await
    .expect("compact in time")
    .expect("compact");

    // Read until the final state arrives; every snapshot on the way must be complete.
    let started = Instant::now();
    let mut seen = 0;
    loop {
        let snapshot = running.snapshot("the final state after compaction").await;
        seen += 1;
        assert!(
            snapshot.has(&format!("{RES}/nodes/node-a")) && snapshot.has(BLOCK_KEY),
            "a snapshot lost the cluster: {:?}",
            snapshot.origins()
        );
        if snapshot.has(&final_key) {
            let peer = snapshot.get(&churn).expect("churn peer");
            assert_eq!(
                peer["metadata"]["annotations"]["seq"],
                (writes - 1).to_string()
            );
            assert_eq!(snapshot.revision, last);
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "final state not reached after {seen} snapshots"
        );
    }
    // The store caught up by re-listing after etcd canceled its watch for compaction.
    assert!(
        log.contains("etcd compacted past the watch; re-listing"),
        "the watch was never compacted away ({seen} snapshots for {writes} writes); log:\n{}",
        log.dump()
    );
    assert!(seen < writes, "{seen} snapshots for {writes} writes");
    assert!(
        !log.contains("etcd unavailable"),
        "a compaction is not an outage; log:\n{}",
        log.dump()
    );

    // And it watches again from the re-listed revision.
    let after = format!("{RES}/nodes/node-after");
    let after_revision =
        put_revision(&mut client, &after, node("node-after", "198.18.0.7/24")).await;
    let snapshot = running.snapshot("a snapshot after recovery").await;
    assert_eq!(snapshot.revision, after_revision);
    assert!(snapshot.has(&after));
    running.stop().await;
}

/// (5) etcd dies: the store reports Unavailable once, naming the endpoint. etcd comes
/// back on the same data: a fresh snapshot with the same data, and watching resumes.
#[tokio::test]
async fn recovers_after_etcd_restart() {
    let Some(mut etcd) = Etcd::start("etcd_store", None, None).await else {
        return;
    };
    let mut client = etcd.client().await;
    let revision = load_cluster(&mut client).await;
    drop(client);
    let mut running = Running::start(&etcd, 8).await;
    let before = running.snapshot("the initial snapshot").await;
    assert_eq!(before.revision, revision);

    etcd.kill();
    match running.next("Unavailable after etcd was killed").await {
        StoreEvent::Unavailable(text) => {
            assert!(
                text.contains(&etcd.endpoint()),
                "names the endpoint: {text}"
            )
        }
        StoreEvent::Snapshot { revision, .. } => {
            panic!("snapshot at {revision} while etcd was down")
        }
    }
    // It keeps retrying (0.5 s, 1 s, …) without reporting again.
    let quiet = timeout(Duration::from_millis(1600), running.events.recv()).await;
    assert!(quiet.is_err(), "reported again while still down: {quiet:?}");

    etcd.restart().await;
    let after = running.snapshot("the snapshot after etcd restarted").await;
    assert_eq!(after.revision, before.revision);
    assert_eq!(after.documents, before.documents);

    let mut client = etcd.client().await;
    let peer_key = format!("{RES}/bgppeers/tor-c");
    let peer_revision = put_revision(&mut client, &peer_key, peer("tor-c", "198.18.0.252")).await;
    let next = running.snapshot("a snapshot after the restart").await;
    assert_eq!(next.revision, peer_revision);
    assert!(next.has(&peer_key));
    running.stop().await;
}
