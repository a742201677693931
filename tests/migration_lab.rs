//! The walk-through of docs/migrating-from-bird.md, in the lab: a mesh of one tern node
//! and three nodes running BIRD the way Calico's confd configures it, pods pinging
//! across all the while. Node 4 moves to tern (its BIRD killed as a calico-node pod's end
//! kills it, then tern started with the node's Calico configuration), restarted (as a
//! DaemonSet update restarts tern) and moved back (tern stopped with SIGTERM as kubelet
//! stops it, then BIRD started again). For each switch
//! it measures how long the other nodes' kernels were without node 4's block and how
//! many pings to node 4's pod went unanswered, and prints what `tern status`, `tern
//! peers`, `tern diagnose` and `birdc show protocols` said. The figures are in the guide.
//!
//! Every tern in the lab runs as the DaemonSet runs it: root with no_new_privs and only
//! the capabilities deploy/kubernetes/daemonset.yaml adds (setpriv).
//!
//! Skips without root, BIRD, ping or setpriv; fails under CI=true.
// Setup and probes unwrap: a lab that cannot be built or read is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tern_interop::lab::migrate::{PingCount, PingRun, RouteGaps, RouteWatch};
use tern_interop::lab::{probe, Lab, LabSpec, NodePlan};
use tern_interop::peers::{cli_at, wait_for, Kind};

#[path = "support/lab.rs"]
mod lab_support;

use lab_support::{available, converged, fail, record};

const TERN: &str = env!("CARGO_BIN_EXE_tern");
/// The node that moves (the last; nodes 2 to 4 start as BIRD nodes).
const MOVED: usize = 4;
/// Time to watch after a switch has converged: the end of graceful restart (End-of-RIB,
/// stale routes swept) falls inside it.
const SETTLE: Duration = Duration::from_secs(5);

/// Pings to the moved node's pod: from the tern node's pod and from a BIRD node's pod.
fn start_pings(lab: &Lab) -> Vec<(String, PingRun)> {
    let to = &lab.node(MOVED).unwrap().pods[0];
    [1, 2]
        .iter()
        .map(|&i| {
            let from = &lab.node(i).unwrap().pods[0];
            let what = format!("{} -> {}", from.ns, to.v4);
            (what, PingRun::start(&from.ns, &to.v4).unwrap())
        })
        .collect()
}

fn finish_pings(pings: Vec<(String, PingRun)>) -> Vec<(String, PingCount)> {
    pings
        .into_iter()
        .map(|(what, p)| (what, p.finish().unwrap()))
        .collect()
}

/// `birdc show protocols` on BIRD node `index`, the mesh sessions only.
fn bird_mesh(lab: &Lab, index: usize) -> String {
    let dir = &lab.node(index).unwrap().dir;
    let out = cli_at(Kind::Bird, dir, &["show", "protocols"]).unwrap_or_else(|e| e.to_string());
    out.lines()
        .filter(|l| l.starts_with("Mesh_") || l.starts_with("Name"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `ip route show proto <proto>` in `ns` (IPv4 and IPv6).
fn routes_of(ns: &str, proto: &str) -> String {
    ["-4", "-6"]
        .iter()
        .map(|f| {
            let o = std::process::Command::new("ip")
                .args(["-n", ns, f, "route", "show", "proto", proto])
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout).into_owned()
        })
        .collect()
}

/// How many paths BIRD node `index` has from the moved node's mesh session.
fn paths_from(lab: &Lab, index: usize, moved: &NodePlan) -> usize {
    let dir = &lab.node(index).unwrap().dir;
    let name = format!("Mesh_{}", moved.v4.replace('.', "_"));
    let out = cli_at(Kind::Bird, dir, &["show", "route", "protocol", &name]).unwrap_or_default();
    out.matches(&format!("[{name} ")).count()
}

/// Whether BIRD node `index` has its mesh session with the moved node Established.
fn bird_sees_moved_node(lab: &Lab, index: usize, moved: &NodePlan) -> bool {
    let name = format!("Mesh_{}", moved.v4.replace('.', "_"));
    bird_mesh(lab, index)
        .lines()
        .any(|l| l.starts_with(&name) && l.contains("Established"))
}

/// Waits for the lab to converge after a switch and for BIRD nodes 2 and 3 to have
/// their session with the moved node back; returns the time since `t0`.
fn wait_switched(test: &str, lab: &Lab, t0: Instant) -> Duration {
    let moved = lab.node(MOVED).unwrap().clone();
    if let Err(e) = lab.wait_converged(Duration::from_secs(90)) {
        fail(lab, &format!("{test}: {e}"));
    }
    let ok = wait_for(
        "BIRD's sessions with the moved node",
        Duration::from_secs(60),
        || [2, 3].iter().all(|&i| bird_sees_moved_node(lab, i, &moved)),
    );
    if let Err(e) = ok {
        fail(lab, &format!("{test}: {e}:\n{}", bird_mesh(lab, 2)));
    }
    t0.elapsed()
}

/// Prints and records what a switch cost; returns the longest time a node was without
/// the moved node's block and the pings lost.
fn report(test: &str, step: &str, gaps: &[RouteGaps], pings: &[(String, PingCount)]) -> (f64, u64) {
    let mut worst = 0.0_f64;
    for g in gaps {
        worst = worst.max(g.longest.as_secs_f64());
        let how = if g.changes == 0 {
            "untouched".to_string()
        } else {
            format!(
                "{} kernel route changes, {} re-installs, {} gaps, {:.1} ms without it in all, {:.1} ms at most",
                g.changes,
                g.reinstalls,
                g.gaps,
                g.without.as_secs_f64() * 1e3,
                g.longest.as_secs_f64() * 1e3
            )
        };
        let there = match (g.at_start, g.at_end) {
            (true, true) => "",
            (false, _) => "; NOT THERE AT THE START",
            (true, false) => "; GONE AT THE END",
        };
        record(&format!(
            "{test}: {step}: {}'s route to the moved node's block: {how}{there}",
            g.ns
        ));
    }
    let mut lost = 0;
    for (what, c) in pings {
        lost += c.lost();
        record(&format!(
            "{test}: {step}: ping {what}: {} sent, {} answered, {} lost",
            c.sent,
            c.answered,
            c.lost()
        ));
    }
    (worst, lost)
}

/// A wrapper that runs tern the way the DaemonSet's container runs it: as root with
/// no_new_privs (`allowPrivilegeEscalation: false`) and only the capabilities
/// deploy/kubernetes/daemonset.yaml adds, for the daemon and the CLI alike (the probes
/// run `tern health` in the same container).
fn tern_as_in_the_daemonset(dir: &Path) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/daemonset.yaml");
    let ds: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let sc = &ds["spec"]["template"]["spec"]["containers"][0]["securityContext"];
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    let caps: Vec<String> = sc["capabilities"]["add"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("+{}", c.as_str().unwrap().to_lowercase()))
        .collect();
    let wrapper = dir.join("tern-capped");
    let script = format!(
        "#!/bin/sh\nexec setpriv --no-new-privs --bounding-set=-all,{} --inh-caps=-all {TERN} \"$@\"\n",
        caps.join(",")
    );
    std::fs::write(&wrapper, script).unwrap();
    let mut perms = std::fs::metadata(&wrapper).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&wrapper, perms).unwrap();
    wrapper
}

#[test]
fn one_bird_node_moves_to_tern_and_back() {
    let test = "migration_walkthrough";
    if !available(test, &["bird", "birdc", "ping", "setpriv"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let tern = tern_as_in_the_daemonset(tmp.path());
    let mut spec = LabSpec::new("tmv-", tmp.path(), &tern, 4);
    spec.bird_nodes = 3;
    let mut lab = Lab::up(spec).unwrap_or_else(|e| panic!("{test}: {e}"));
    converged(test, &lab, "1 tern + 3 Calico-style BIRD nodes");
    let moved = lab.node(MOVED).unwrap().clone();
    let others: Vec<String> = (1..MOVED)
        .map(|i| lab.node(i).unwrap().ns.clone())
        .collect();
    eprintln!("== before: node-2's BIRD ==\n{}", bird_mesh(&lab, 2));

    // BIRD -> tern.
    let watch = RouteWatch::start(&others, &moved.block_v4, &moved.v4);
    let pings = start_pings(&lab);
    std::thread::sleep(Duration::from_secs(2));
    let t0 = Instant::now();
    lab.kill_bird_node(MOVED).unwrap();
    lab.start_tern_in_place_of_bird(MOVED).unwrap();
    let ok = wait_for("tern's sessions", Duration::from_secs(60), || {
        probe::sessions_down(&tern, &moved.socket()).is_none()
    });
    if let Err(e) = ok {
        fail(&lab, &format!("{test}: {e}"));
    }
    let established = t0.elapsed();
    // The wrapper worked: tern holds CAP_NET_BIND_SERVICE (10), CAP_NET_ADMIN (12) and
    // CAP_NET_RAW (13), nothing else, even in its bounding set.
    let pid = lab.tern_pid(MOVED).unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    for field in ["CapBnd:", "CapEff:"] {
        let line = status.lines().find(|l| l.starts_with(field)).unwrap();
        let mask = u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap();
        assert_eq!(mask, (1 << 10) | (1 << 12) | (1 << 13), "{line}");
    }
    let switched = wait_switched(test, &lab, t0);
    std::thread::sleep(SETTLE);
    let (gaps, pings) = (watch.finish(), finish_pings(pings));
    // tern took BIRD's kernel routes over: counted as the node's forwarding state (so
    // the peers kept its block until tern's End-of-RIB) and removed once tern's own
    // were in, so none of BIRD's outlives it at a metric that would beat tern's.
    let birds = routes_of(&moved.ns, "bird");
    assert!(birds.is_empty(), "BIRD's routes left on node 4:\n{birds}");
    record(&format!(
        "{test}: BIRD -> tern: every session Established {:.1} s after BIRD was killed, lab converged after {:.1} s",
        established.as_secs_f64(),
        switched.as_secs_f64()
    ));
    let (without, lost) = report(test, "BIRD -> tern", &gaps, &pings);
    for args in [
        &["status"][..],
        &["peers"],
        &["diagnose"],
        &["health", "--ready"],
    ] {
        let (code, out) = lab.tern_cli(MOVED, args);
        eprintln!("== node-4: tern {} (exit {code}) ==\n{out}", args.join(" "));
    }
    eprintln!("== node-2's BIRD ==\n{}", bird_mesh(&lab, 2));
    // tern answers on the socket the killed BIRD left behind, as BIRD would: what
    // `calicoctl node status` and calico-node's -bird-ready read on the moved node.
    let as_bird = bird_mesh(&lab, MOVED);
    eprintln!("== node-4: birdc show protocols (tern's BIRD socket) ==\n{as_bird}");
    assert_eq!(
        as_bird
            .lines()
            .filter(|l| l.contains("Established"))
            .count(),
        MOVED - 1,
        "{as_bird}"
    );
    let (code, _) = lab.tern_cli(MOVED, &["diagnose"]);
    assert_eq!(code, 0, "tern diagnose found an error on the moved node");
    // Graceful restart: the peers kept the block while the node's speaker changed.
    assert!(
        gaps.iter().all(RouteGaps::kept),
        "a node lost the moved node's block during BIRD -> tern: {gaps:?}"
    );
    assert!(pings.iter().all(|(_, c)| c.sent > 10), "{pings:?}");
    assert_eq!(
        lost, 0,
        "pings lost during BIRD -> tern: {pings:?} ({without:.1} s without the block)"
    );

    // tern restarts, as a DaemonSet update restarts its pod: SIGTERM, then a new tern.
    let watch = RouteWatch::start(&others, &moved.block_v4, &moved.v4);
    let pings = start_pings(&lab);
    std::thread::sleep(Duration::from_secs(2));
    let t0 = Instant::now();
    lab.stop_tern(MOVED, Duration::from_secs(15));
    lab.restart_migrated_tern(MOVED).unwrap();
    let switched = wait_switched(test, &lab, t0);
    std::thread::sleep(SETTLE);
    let (gaps, pings) = (watch.finish(), finish_pings(pings));
    record(&format!(
        "{test}: tern -> tern: lab converged {:.1} s after the SIGTERM",
        switched.as_secs_f64()
    ));
    let (without, lost) = report(test, "tern -> tern", &gaps, &pings);
    // SIGTERM ends graceful-restart sessions without a NOTIFICATION: the peers keep
    // the node's routes while its tern restarts.
    assert!(
        gaps.iter().all(RouteGaps::kept) && lost == 0,
        "tern's restart cost its peers the block: {without:.1} s, {lost} pings lost: {gaps:?}"
    );

    // tern -> BIRD (the rollback).
    let watch = RouteWatch::start(&others, &moved.block_v4, &moved.v4);
    let pings = start_pings(&lab);
    std::thread::sleep(Duration::from_secs(2));
    let t0 = Instant::now();
    lab.stop_tern(MOVED, Duration::from_secs(15));
    let stopped = t0.elapsed();
    lab.start_bird_in_place_of_tern(MOVED).unwrap();
    let switched = wait_switched(test, &lab, t0);
    std::thread::sleep(SETTLE);
    let (gaps, pings) = (watch.finish(), finish_pings(pings));
    record(&format!(
        "{test}: tern -> BIRD: tern stopped in {:.1} s, lab converged {:.1} s after the SIGTERM",
        stopped.as_secs_f64(),
        switched.as_secs_f64()
    ));
    let (without, lost) = report(test, "tern -> BIRD", &gaps, &pings);
    eprintln!(
        "== after rollback: node-2's BIRD ==\n{}",
        bird_mesh(&lab, 2)
    );
    // Back where it started: every FIB complete, every pod reachable.
    let m = lab.ping_matrix().unwrap();
    if !m.failures().is_empty() {
        fail(
            &lab,
            &format!("{test}: after the rollback:\n{}", m.render()),
        );
    }
    eprintln!("rollback: {without:.1} s without the block at worst, {lost} pings lost");
    assert!(
        gaps.iter().all(RouteGaps::kept) && lost == 0,
        "the rollback cost the peers the block: {without:.1} s, {lost} pings lost: {gaps:?}"
    );

    // The guide's last rollback step: the routes tern left on node 4 go. BIRD learns
    // them from the kernel (Calico's `protocol kernel` has `learn`) and advertises
    // them as node 4's own: node 2 hears of other nodes' blocks from node 4 too.
    let from_4 = || paths_from(&lab, 2, &moved);
    eprintln!(
        "before the clean-up, node 2 has {} paths from node 4; tern's routes on node 4:\n{}",
        from_4(),
        routes_of(&moved.ns, "201")
    );
    let watch = RouteWatch::start(&others, &moved.block_v4, &moved.v4);
    for family in ["-4", "-6"] {
        let ok = std::process::Command::new("ip")
            .args(["-n", &moved.ns, family, "route", "flush", "proto", "201"])
            .status()
            .unwrap();
        assert!(ok.success(), "ip route flush proto 201: {ok}");
    }
    let only_its_block = wait_for(
        "BIRD to forget tern's routes",
        Duration::from_secs(20),
        || from_4() == 1,
    );
    let gaps = watch.finish();
    report(test, "clean-up", &gaps, &[]);
    only_its_block.unwrap_or_else(|e| fail(&lab, &format!("{test}: {e}: {} paths", from_4())));
    assert!(
        gaps.iter().all(RouteGaps::kept),
        "the clean-up cost the peers the block: {gaps:?}"
    );
    let m = lab.ping_matrix().unwrap();
    if !m.failures().is_empty() {
        fail(
            &lab,
            &format!("{test}: after the clean-up:\n{}", m.render()),
        );
    }
}
