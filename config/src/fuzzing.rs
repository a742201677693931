//! Invariants of the configuration loaders on arbitrary input, shared by the cargo-fuzz
//! targets (`config/fuzz`: `cluster`, `tern_yaml`) and the stable-Rust smoke test that
//! runs in CI (`tests/fuzz_smoke.rs`). Panics when an invariant is broken; that is how
//! a fuzzer learns of it. Besides never panicking:
//!
//! - every error and warning names the file (or etcd key) it is about, and says why;
//! - a cluster that validates gives each of its nodes the same verdict directly
//!   (`intent`) and through the daemon's tracker, and applying the same snapshot
//!   twice changes nothing the second time.

use crate::daemon::limits::DEFAULT_DATASTORE_DOCUMENT_BYTES;
use crate::datastore::etcd::document_for;
use crate::datastore::Document;
use crate::intent::intent;
use crate::tracker::Tracker;
use crate::{Cluster, DaemonConfig};

#[cfg(feature = "arbitrary")]
pub mod structured;

/// Text as a datastore would hand it over: the bytes if they are UTF-8, else the same
/// with replacement characters (the file store rejects invalid UTF-8 before parsing,
/// so the lossy form reaches more of the parser).
fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// etcd keys whose values go through the etcd store's conversion (Calico's layout).
const ETCD_KEYS: [&str; 3] = [
    "/calico/resources/v3/projectcalico.org/bgppeers/fuzz",
    "/calico/ipam/v2/assignment/ipv4/block/198.18.4.0-26",
    "/calico/ipam/v2/host/node-a/ipv4/block/198.18.4.0-26",
];

/// `data` as the cluster file (the daemon's and `tern check-config`'s path: load,
/// validate, intent per node, tracker), and as an etcd value under each key kind.
pub fn check_cluster(data: &[u8]) {
    let docs = [Document {
        origin: "cluster.yaml".into(),
        text: text(data),
    }];
    check_documents(&docs, "cluster.yaml");
    // etcd holds JSON; anything else would only repeat the file's checks under
    // another name (a value that is not a JSON object is handed on as raw text).
    if data.trim_ascii_start().first() != Some(&b'{') {
        return;
    }
    for key in ETCD_KEYS {
        match document_for(key, data, DEFAULT_DATASTORE_DOCUMENT_BYTES) {
            Some(Ok(d)) => {
                assert_eq!(d.origin, key, "etcd document named after another key");
                check_documents(&[d], key);
            }
            Some(Err(refused)) => {
                assert!(refused.to_string().contains(key), "{refused}");
            }
            None => {}
        }
    }
}

fn check_documents(docs: &[Document], origin: &str) {
    let (cluster, warnings) = match Cluster::from_documents(docs) {
        Ok(v) => v,
        Err(errors) => {
            assert!(!errors.0.is_empty(), "{origin}: rejected with no error");
            for e in &errors.0 {
                assert_eq!(e.file, origin, "an error names another file: {e}");
                assert!(!e.reason.is_empty(), "an error without a reason: {e:?}");
                assert!(e.to_string().starts_with(origin), "{e}");
            }
            return;
        }
    };
    for w in &warnings {
        assert_eq!(w.file, origin, "a warning names another file: {w}");
        assert!(!w.message.is_empty(), "a warning without a message: {w:?}");
    }
    // The daemon follows one node: the intent of each of a few of the file's nodes, and
    // of one it does not have, must not panic. The first goes through the daemon's
    // tracker too (which parses again, so only once: parsing dominates the cost).
    let names: Vec<String> = cluster
        .nodes
        .keys()
        .take(3)
        .cloned()
        .chain(["no-such-node".to_string()])
        .collect();
    for (i, name) in names.iter().enumerate() {
        let direct = intent(&cluster, name);
        if let Err(e) = &direct {
            assert!(
                !e.to_string().is_empty(),
                "node {name}: an empty intent error"
            );
        }
        if i > 0 {
            continue;
        }
        let mut tracker = Tracker::new(name.clone());
        let first = tracker.apply(docs, 1);
        assert_eq!(
            direct.is_ok(),
            first.is_ok(),
            "{origin}: node {name}: intent and tracker disagree: {:?} / {:?}",
            direct.as_ref().err(),
            first.as_ref().err()
        );
        if first.is_ok() {
            match tracker.apply(docs, 2) {
                Ok(again) => assert!(
                    again.diff.is_empty(),
                    "{origin}: node {name}: the same snapshot twice changed {:?}",
                    again.diff
                ),
                Err(e) => panic!("{origin}: node {name}: accepted once, then rejected: {e}"),
            }
        }
    }
}

/// `data` as the daemon's own file (`tern.yaml`).
pub fn check_daemon(data: &[u8]) {
    match DaemonConfig::parse(&text(data), "tern.yaml") {
        Ok((cfg, warnings)) => {
            for w in &warnings {
                assert_eq!(w.file, "tern.yaml", "a warning names another file: {w}");
            }
            assert!(!cfg.node.is_empty(), "accepted without a node name");
        }
        Err(e) => {
            assert_eq!(e.file, "tern.yaml", "an error names another file: {e}");
            assert!(!e.reason.is_empty(), "an error without a reason: {e:?}");
        }
    }
}
