//! tern on the Kubernetes API datastore, end to end: a lab whose nodes read the cluster
//! from the API server stand-in (`tern_interop::kubeapi`, in the switch namespace,
//! enforcing `deploy/kubernetes/rbac.yaml`) in the shapes a KDD cluster keeps it. Each
//! step asserts on kernel FIBs, sessions and what `tern status` says:
//! the first snapshot (pings between every pod), RBAC (nothing denied, nothing asked
//! beyond the store's list), live changes (a new block, a moved block, a borrowed
//! address, a new peer, a rotated Secret), an API server restart with a compaction
//! while it was down (410 Gone, re-list), a refused token (401); and a scale run with
//! 5,000 more Nodes and IPAM blocks, whose figures go to `target/tmp/lab-timings.txt`.
//!
//! Skips without root or BIRD; fails under CI=true.

#![cfg(target_os = "linux")]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tern_config::datastore::kubernetes::API_CALLS;
use tern_interop::lab::{kdd, kube, plan, Lab, LabDatastore, LabSpec};
use tern_interop::peers::Kind;

#[path = "support/lab.rs"]
mod lab_support;

use lab_support::{available, converged, fail, record};

const TERN: &str = env!("CARGO_BIN_EXE_tern");
const WAIT: Duration = Duration::from_secs(30);

/// A converged lab on the Kubernetes datastore; None: skipped.
fn up(test: &str, prefix: &str, nodes: usize, tune: impl FnOnce(&mut LabSpec)) -> Option<Lab> {
    if !available(test, &["bird"]) {
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(test);
    let _ = std::fs::remove_dir_all(&dir);
    let mut spec = LabSpec::new(prefix, &dir, Path::new(TERN), nodes);
    spec.datastore = LabDatastore::Kubernetes {
        separate_process: false,
    };
    tune(&mut spec);
    let lab = Lab::up(spec).unwrap_or_else(|e| panic!("{test}: {e}"));
    converged(
        test,
        &lab,
        &format!("{nodes} nodes on the Kubernetes datastore"),
    );
    Some(lab)
}

/// Polls `ok` every 20 ms until it holds; returns how long that took.
fn until(lab: &Lab, what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while t.elapsed() < timeout {
        if ok() {
            return t.elapsed();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    fail(lab, &format!("{what}: not within {timeout:?}"))
}

/// Whether node `index`'s FIB routes `dst` via `gateway`.
fn via(lab: &Lab, index: usize, dst: &str, gateway: &str) -> bool {
    lab.routes(index).is_ok_and(|r| r.via(dst, gateway))
}

/// `tern status` on node `index`.
fn status(lab: &Lab, index: usize) -> String {
    lab.tern_cli(index, &["status"]).1
}

/// Whether node `index`'s session to `peer` is Established.
fn established(lab: &Lab, index: usize, peer: &str) -> bool {
    status(lab, index)
        .lines()
        .any(|l| l.contains(&format!("| {peer} ")) && l.contains("Established"))
}

/// An IPAM block and its affinity for `node`, as Calico's IPAM writes them.
fn block(cidr: &str, node: &str) -> [Value; 2] {
    let name = cidr.replace(['.', '/'], "-");
    [
        json!({
            "apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMBlock",
            "metadata": {"name": name},
            "spec": {"cidr": cidr, "affinity": format!("host:{node}"), "allocations": [0],
                     "unallocated": [], "attributes": [{"handle_id": "h", "secondary": {"node": node}}],
                     "strictAffinity": false, "deleted": false},
        }),
        json!({
            "apiVersion": "crd.projectcalico.org/v1", "kind": "BlockAffinity",
            "metadata": {"name": format!("{node}-{name}")},
            "spec": {"node": node, "cidr": cidr, "state": "confirmed", "deleted": "false"},
        }),
    ]
}

fn apply(lab: &mut Lab, objects: impl IntoIterator<Item = Value>) {
    let server = lab
        .kube()
        .unwrap_or_else(|| panic!("no in-process API server"));
    for o in objects {
        server.apply(o).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn kubernetes_datastore_end_to_end() {
    let test = "kubernetes_datastore_end_to_end";
    let Some(mut lab) = up(test, "tk-", 3, |s| {
        s.tor = Some(Kind::Bird);
        s.tor_password = Some("kube-secret-1".into());
        s.tor_peer_password = s.tor_password.clone();
        s.pods = 1;
        s.borrowed = 1;
        s.ipv6 = true;
    }) else {
        return;
    };
    let m = lab.ping_matrix().unwrap_or_else(|e| panic!("{e}"));
    if !m.failures().is_empty() {
        fail(&lab, &format!("pings unanswered:\n{}", m.render()));
    }
    record(&format!("{test}: {} pings, all answered", m.sent()));
    let (n2, n3) = (
        lab.node(2).unwrap().v4.clone(),
        lab.node(3).unwrap().v4.clone(),
    );

    // RBAC: tern needed nothing the role does not grant, and asked only for what the
    // store's API_CALLS list says (which a unit test checks against the role).
    let requests = lab.kube().unwrap().requests();
    assert!(!requests.is_empty());
    for r in &requests {
        assert_ne!(r.status, 403, "denied: {r:?}");
        assert!(
            API_CALLS.iter().any(|c| c.verb == r.verb
                && c.api_group == r.api_group
                && c.resource == r.resource),
            "a call outside API_CALLS: {r:?}"
        );
    }

    // A new block on node-2, then moved to node-3.
    apply(&mut lab, block("198.18.60.0/26", "node-2"));
    let t = until(&lab, "new block in node-1's FIB", WAIT, || {
        via(&lab, 1, "198.18.60.0/26", &n2)
    });
    record(&format!(
        "{test}: new IPAM block → node-1's FIB in {} ms",
        t.as_millis()
    ));
    let server = lab.kube().unwrap();
    server
        .delete(
            "crd.projectcalico.org/v1",
            "BlockAffinity",
            None,
            "node-2-198-18-60-0-26",
        )
        .unwrap();
    apply(&mut lab, block("198.18.60.0/26", "node-3"));
    let t = until(&lab, "moved block in node-1's FIB", WAIT, || {
        via(&lab, 1, "198.18.60.0/26", &n3)
    });
    record(&format!(
        "{test}: moved IPAM block → node-1's FIB in {} ms",
        t.as_millis()
    ));

    // An address of node-2's block borrowed by node-3.
    let mut b2 = kube::objects(lab.spec())
        .unwrap()
        .into_iter()
        .find(|o| o["kind"] == "IPAMBlock" && o["metadata"]["name"] == "node-2-v4")
        .unwrap();
    let index = b2["spec"]["attributes"].as_array().unwrap().len();
    b2["spec"]["allocations"][50] = json!(index);
    b2["spec"]["attributes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"handle_id": "borrowed-50", "secondary": {"node": "node-3"}}));
    apply(&mut lab, [b2]);
    let t = until(&lab, "borrowed /32 in node-1's FIB", WAIT, || {
        via(&lab, 1, "198.18.2.50", &n3)
    });
    record(&format!(
        "{test}: borrowed address → node-1's FIB in {} ms",
        t.as_millis()
    ));

    // A new peer.
    apply(
        &mut lab,
        [
            json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "BGPPeer",
                "metadata": {"name": "extra"},
                "spec": {"peerIP": "203.0.113.77", "asNumber": 65077}}),
        ],
    );
    until(&lab, "the new peer in tern status", WAIT, || {
        status(&lab, 1).contains("203.0.113.77")
    });

    // The ToR's password rotated in the Secret only: tern follows it, the ToR (still on
    // the old one) no longer accepts the session; rotated back, it comes up again.
    let tor = plan::TOR_V4;
    until(&lab, "the ToR session", WAIT, || established(&lab, 1, tor));
    apply(
        &mut lab,
        [kdd::secret("tor-bgp-password", "password", "rotated-2")],
    );
    until(&lab, "the ToR session down after rotation", WAIT, || {
        !established(&lab, 1, tor)
    });
    apply(
        &mut lab,
        [kdd::secret("tor-bgp-password", "password", "kube-secret-1")],
    );
    until(
        &lab,
        "the ToR session back",
        Duration::from_secs(60),
        || established(&lab, 1, tor),
    );

    // An API server restart, with changes and a compaction while it was down: tern
    // says so, keeps its routes, then re-lists (410 Gone) and applies the change.
    lab.kube().unwrap().stop();
    until(&lab, "tern status reporting the outage", WAIT, || {
        status(&lab, 1).contains("datastore unreachable")
    });
    assert!(
        via(&lab, 1, "198.18.60.0/26", &n3),
        "routes stay while the API is down"
    );
    let diagnose = lab.tern_cli(1, &["diagnose"]).1;
    assert!(diagnose.contains("Kubernetes API https://"), "{diagnose}");
    let metrics = lab
        .exec_on_node(
            1,
            "bash",
            &["-c", "exec 3<>/dev/tcp/127.0.0.1/9477; printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3"],
        )
        .unwrap_or_default();
    assert!(metrics.contains("tern_datastore_up 0"), "{metrics}");
    apply(&mut lab, block("198.18.61.0/26", "node-2"));
    lab.kube().unwrap().compact();
    lab.kube().unwrap().restart().unwrap();
    let t = until(
        &lab,
        "the change made while the API was down",
        Duration::from_secs(60),
        || via(&lab, 1, "198.18.61.0/26", &n2),
    );
    record(&format!(
        "{test}: API server restart + 410 → change in node-1's FIB {} ms after the restart",
        t.as_millis()
    ));
    until(&lab, "the outage cleared", WAIT, || {
        !status(&lab, 1).contains("datastore unreachable")
    });

    // A refused token: said in plain words, the routes stay; accepted again, it recovers.
    lab.kube().unwrap().set_token("not-terns-token");
    lab.kube().unwrap().restart().unwrap();
    // The watchers reconnect with back-off (as they would to a real API server).
    until(
        &lab,
        "tern status reporting the refused credentials",
        Duration::from_secs(90),
        || {
            let s = status(&lab, 1);
            s.contains("datastore unreachable") && s.contains("401")
        },
    );
    assert!(
        via(&lab, 1, "198.18.61.0/26", &n2),
        "routes stay with a refused token"
    );
    lab.kube().unwrap().set_token(plan::KUBE_TOKEN);
    apply(&mut lab, block("198.18.62.0/26", "node-3"));
    until(
        &lab,
        "recovery after the token is accepted",
        Duration::from_secs(90),
        || via(&lab, 1, "198.18.62.0/26", &n3),
    );
    // tern said what was wrong; the client library's own retry noise stays out.
    let log = lab.tern_log(1);
    assert!(log.contains("401 Unauthorized"), "{log}");
    assert!(!log.contains("kube_client"), "{log}");
}

/// Resident memory of node `index`'s tern, in MiB.
fn rss_mib(lab: &Lab, index: usize) -> f64 {
    let pid = lab
        .tern_pid(index)
        .unwrap_or_else(|| panic!("tern on node-{index} not running"));
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or_else(|| panic!("no VmRSS for pid {pid}"))
}

#[test]
fn kubernetes_datastore_at_scale() {
    let test = "kubernetes_datastore_at_scale";
    let Some(mut lab) = up(test, "tks-", 2, |s| s.pods = 1) else {
        return;
    };
    let n2 = lab.node(2).unwrap().v4.clone();
    let before = rss_mib(&lab, 1);
    let extra = kdd::synthetic(5000);
    let objects = extra.len();
    let t = Instant::now();
    apply(&mut lab, extra);
    apply(&mut lab, block("198.18.70.0/26", "node-2"));
    let first = until(
        &lab,
        "the first change behind 5,000 nodes",
        Duration::from_secs(120),
        || via(&lab, 1, "198.18.70.0/26", &n2),
    );
    record(&format!(
        "{test}: {objects} objects added (5,000 Nodes, 5,000 IPAMBlocks, 5,000 BlockAffinities) in {} ms; with them, a new block → node-1's FIB in {} ms",
        (t.elapsed() - first).as_millis(),
        first.as_millis()
    ));
    let mut times = Vec::new();
    for i in 0..3 {
        let cidr = format!("198.18.{}.0/26", 71 + i);
        apply(&mut lab, block(&cidr, "node-2"));
        times.push(until(
            &lab,
            "a change at scale",
            Duration::from_secs(60),
            || via(&lab, 1, &cidr, &n2),
        ));
    }
    times.sort();
    let after = rss_mib(&lab, 1);
    record(&format!(
        "{test}: at 5,000 nodes, change → FIB {} / {} / {} ms (min/median/max of 3); tern RSS {before:.1} MiB → {after:.1} MiB",
        times[0].as_millis(),
        times[1].as_millis(),
        times[2].as_millis()
    ));
    let s = status(&lab, 1);
    assert!(!s.contains("datastore unreachable"), "{s}");
}
