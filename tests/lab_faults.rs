//! Faults in namespaces (issue 9, part 4), each asserting that no route is lost and
//! none is left stale:
//! - tern killed (SIGKILL) in the middle of a full-table transfer and started again:
//!   the whole table ends in its RIB and kernel FIB, exactly, and the routes it had
//!   installed before the crash are adopted (no kernel deletion); then a crash while
//!   the peer's table shrinks: exactly the routes the peer no longer has are removed;
//! - a session losing 30 % of its packets each way: a table arrives whole and is
//!   withdrawn whole;
//! - etcd stopped and restarted while the intent changes (see `etcd_outage`).
//!
//! The injector and the FIB watcher come from the benchmark (`tern_interop::bench`).
//! Skips without root (and etcd, nftables where needed); fails under CI=true.

#![cfg(target_os = "linux")]
// Setup helpers outside #[test] functions: a failed setup is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tern_interop::bench::dut::{Dut, DutKind, DutSpec, DUT_V4, TERN_PROTO};
use tern_interop::bench::inject::{FeedPeer, Injector, Phase};
use tern_interop::bench::measure::FibWatch;
use tern_interop::bench::{self, BenchOpts, Scenario, FEED_AS, MAX_V4_PREFIXES};
use tern_interop::netns::Netns;

const TERN: &str = env!("CARGO_BIN_EXE_tern");

fn can_run(test: &str, programs: &[&str]) -> bool {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail(test, &reason);
        return false;
    }
    if let Some(p) = programs.iter().find(|p| !tern_interop::have_program(p)) {
        tern_interop::skip_or_fail(test, &format!("{p} is not installed"));
        return false;
    }
    true
}

/// Polls `ok` every `every` until it holds or `timeout` passes.
fn wait(what: &str, timeout: Duration, every: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(
            Instant::now() < deadline,
            "{what}: not reached in {timeout:?}"
        );
        std::thread::sleep(every);
    }
}

/// tern's routes in the kernel of `ns` (main table, IPv4), as prefixes `a.b.c.d/len`.
fn kernel_routes(ns: &Netns) -> BTreeSet<String> {
    let out = ns
        .ip(&["-4", "route", "show", "proto", &TERN_PROTO.to_string()])
        .expect("ip route show");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(|p| {
            if p.contains('/') {
                p.to_string()
            } else {
                format!("{p}/32")
            }
        })
        .collect()
}

/// The rig of the kill test: namespaces, injector, watcher and tern. Fields drop in
/// order: tern first, the namespaces last.
struct Rig {
    dut: Dut,
    watch: FibWatch,
    inj: Injector,
    dut_ns: Netns,
    _inj_ns: Netns,
}

impl Rig {
    /// Stops tern with SIGKILL (by its PID) and checks it is gone.
    fn crash(&mut self) {
        let pids = self.dut.pids();
        assert_eq!(pids.len(), 1, "one tern process");
        self.dut.kill();
        for p in pids {
            assert!(
                !std::path::Path::new(&format!("/proc/{p}")).exists(),
                "tern {p} survived SIGKILL"
            );
        }
    }

    fn start(&mut self) {
        let spec = self.dut.spec().clone();
        self.dut = Dut::start(&self.dut_ns, &spec, true).expect("start tern again");
    }

    /// Waits until tern's kernel routes are exactly `want`, then waits `settle` more
    /// (a stale sweep would come then) and checks again; also tern's own RIB count.
    fn wait_exact(&self, want: &BTreeSet<String>, what: &str) -> Duration {
        let t = Instant::now();
        let deadline = t + Duration::from_secs(120);
        loop {
            let have = kernel_routes(&self.dut_ns);
            if have == *want {
                break;
            }
            if Instant::now() > deadline {
                let missing = want.difference(&have).count();
                let extra: Vec<&String> = have.difference(want).take(5).collect();
                panic!(
                    "{what}: kernel holds {} routes, want {}: {missing} missing, {} stale (e.g. {extra:?})\n{}",
                    have.len(),
                    want.len(),
                    have.difference(want).count(),
                    self.dut.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let took = t.elapsed();
        std::thread::sleep(Duration::from_secs(4));
        let have = kernel_routes(&self.dut_ns);
        assert!(
            have == *want,
            "{what}: the kernel changed after converging: {} routes, want {}",
            have.len(),
            want.len()
        );
        wait(
            "tern's RIB count",
            Duration::from_secs(30),
            Duration::from_millis(200),
            || self.dut.rib_count().ok() == Some(want.len() as u64),
        );
        took
    }
}

#[test]
fn kill_9_during_a_full_table_transfer_loses_nothing_and_leaves_nothing_stale() {
    let test = "kill_9_during_a_full_table_transfer";
    if !can_run(test, &[]) {
        return;
    }
    const N: usize = MAX_V4_PREFIXES;
    // The last CHURN prefixes leave the peer's table while tern is down (second crash).
    const CHURN: usize = 10_000;
    let feeds = Scenario::Prefixes(N).feeds();
    let (addr, asn, id, table) = feeds.into_iter().next().expect("one feed");
    assert_eq!(asn, FEED_AS);
    let all: BTreeSet<String> = table.iter().map(|p| p.to_string()).collect();
    let base: BTreeSet<String> = table[..N - CHURN].iter().map(|p| p.to_string()).collect();
    let peer = FeedPeer::build(addr, id, asn, true, &table, CHURN).expect("encode the table");

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fault-kill");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let dut_ns = Netns::create("t9k-d").expect("namespace");
    let inj_ns = Netns::create("t9k-i").expect("namespace");
    dut_ns.veth_to("d0", &inj_ns, "i0").expect("veth");
    dut_ns
        .add_addr("d0", &format!("{DUT_V4}/24"))
        .expect("addr");
    let IpAddr::V4(a) = addr else {
        panic!("an IPv4 feed")
    };
    inj_ns.add_addr("i0", &format!("{a}/24")).expect("addr");
    let inj = Injector::start(&inj_ns, vec![peer]).expect("injector");
    let watch = FibWatch::start(&dut_ns, TERN_PROTO).expect("FIB watcher");
    let spec = DutSpec {
        kind: DutKind::Tern,
        dir: dir.clone(),
        peers: vec![(addr, asn)],
        tern: PathBuf::from(TERN),
        frr_graceful_restart: false,
        reflector: false,
    };
    let dut = Dut::start(&dut_ns, &spec, false).expect("start tern");
    let mut rig = Rig {
        dut,
        watch,
        inj,
        dut_ns,
        _inj_ns: inj_ns,
    };
    wait(
        "the session",
        Duration::from_secs(60),
        Duration::from_millis(20),
        || rig.inj.established() == 1,
    );

    // 1. The full table, and a crash once a fifth of it is in the kernel.
    let t0 = Instant::now();
    rig.inj.set_phase(Phase::Full);
    let mut rib_seen = None;
    loop {
        let added = rig.watch.get().added as usize;
        // tern's own count once the first routes reach the kernel.
        if rib_seen.is_none() && added >= 1 {
            rib_seen = rig.dut.rib_count().ok();
        }
        if added >= N / 5 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the transfer did not start: {added} routes in 120 s\n{}",
            rig.dut.log_tail()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    rig.crash();
    let killed_after = t0.elapsed();
    std::thread::sleep(Duration::from_millis(300));
    let before = kernel_routes(&rig.dut_ns);
    let rib = rib_seen.unwrap_or(0) as usize;
    eprintln!(
        "[fault] SIGKILL {:.2} s into the transfer: RIB had {rib} of {N} (when the first routes reached the kernel), kernel holds {} of {N}",
        killed_after.as_secs_f64(),
        before.len()
    );
    assert!(
        !before.is_empty() && before.len() < N,
        "not killed mid-transfer: {} of {N} routes in the kernel",
        before.len()
    );
    // The RIB takes a 131,072-route table in less time than the first kernel batch
    // needs, so whether it was still filling when polled is a race (a fresh-machine run saw
    // 131,072 of 131,072): it must have routes; the kernel count above shows the kill
    // came mid-transfer.
    assert!(rib > 0, "tern's RIB was empty when polled");
    assert!(before.is_subset(&all), "routes that the peer never sent");
    let c0 = rig.watch.get();

    // Start again: the peer sends the whole table to the new session.
    rig.start();
    let took = rig.wait_exact(&all, "after the crash mid-transfer");
    let c1 = rig.watch.get();
    assert!(
        !c1.lost,
        "the FIB watcher lost notifications: counts unreliable"
    );
    let deleted = c1.removed - c0.removed;
    let added = c1.added - c0.added;
    eprintln!(
        "[fault] restarted: all {N} routes in RIB and kernel {:.1} s later; kernel deletions {deleted}, additions {added} (missing before: {})",
        took.as_secs_f64(),
        N - before.len()
    );
    assert_eq!(deleted, 0, "routes installed before the crash were deleted");
    // Adopted: each route missing at the crash is added once, the others not again.
    assert_eq!(
        added as usize,
        N - before.len(),
        "additions after the restart vs routes missing at the crash"
    );
    let fib: serde_json::Value = serde_json::from_str(
        &std::process::Command::new(TERN)
            .args(["fib", "-o", "json", "--socket"])
            .arg(dir.join("tern.sock"))
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default(),
    )
    .expect("tern fib -o json");
    for k in ["missing", "unexpected"] {
        assert_eq!(fib[k].as_array().map(Vec::len), Some(0), "tern fib: {k}");
    }

    // 2. A crash with the whole table installed; while tern is down the peer drops
    // CHURN prefixes. The restarted tern must remove exactly those (stale after the
    // peer's End-of-RIB) and keep, without touching, all the others.
    rig.crash();
    rig.inj.set_phase(Phase::ChurnOut);
    let c2 = rig.watch.get();
    rig.start();
    let took = rig.wait_exact(&base, "after the crash with a shrunk table");
    let c3 = rig.watch.get();
    assert!(
        !c3.lost,
        "the FIB watcher lost notifications: counts unreliable"
    );
    let (deleted, added) = (c3.removed - c2.removed, c3.added - c2.added);
    eprintln!(
        "[fault] restarted with {CHURN} prefixes gone from the peer: exact table {:.1} s later; kernel deletions {deleted}, additions {added}",
        took.as_secs_f64()
    );
    assert_eq!(deleted as usize, CHURN, "only the stale routes go");
    assert_eq!(added, 0, "routes still wanted were re-added");
}

/// 30 % of the BGP packets dropped each way (nftables at tern): a table still arrives
/// whole in the RIB and the kernel, and is withdrawn whole. TCP's minimum
/// retransmission timeout is lowered to 10 ms on the link: with the kernel's 200 ms,
/// the doubling back-off made 1 run in 20 take 31 s to deliver and 148 s to withdraw
/// (a hold-timer reset included), too close to any timeout CI can afford. With 10 ms,
/// 30 release runs took at most 7.9 s to bring the session up, 5.7 s to deliver and
/// 8.7 s to withdraw; the timeout (180 s per phase) is 20 times that.
#[test]
fn thirty_percent_loss_delivers_and_withdraws_the_whole_table() {
    let test = "thirty_percent_loss";
    if !can_run(test, &["nft"]) {
        return;
    }
    let opts = BenchOpts {
        scenarios: vec![Scenario::Prefixes(LOSS_PREFIXES)],
        daemons: vec![DutKind::Tern],
        reps: 1,
        dir: PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fault-loss"),
        tern: PathBuf::from(TERN),
        prefix: "t9l-".into(),
        poll: Duration::from_millis(100),
        timeout: Duration::from_secs(180),
        loss_percent: 30,
        rto_min_ms: Some(10),
    };
    let t = Instant::now();
    let runs = bench::run_all(&opts, |r| eprintln!("{r:?}"));
    let r = &runs[0];
    assert!(r.error.is_none(), "over 30 % loss: {:?}", r.error);
    for k in ["converge_s", "fib_s", "withdraw_s", "withdraw_fib_s"] {
        assert!(r.metrics.contains_key(k), "no {k}: {:?}", r.metrics);
    }
    assert_eq!(r.metrics.get("loss_percent"), Some(&30.0));
    eprintln!(
        "[fault] {LOSS_PREFIXES} prefixes over 30 % loss: session up {:.1} s, RIB {:.1} s, FIB {:.1} s, withdrawn {:.1} s (run {:.0} s)",
        r.metrics["sessions_s"],
        r.metrics["converge_s"],
        r.metrics["fib_s"],
        r.metrics["withdraw_s"],
        t.elapsed().as_secs_f64()
    );
}

/// Prefixes of the lossy-session test.
const LOSS_PREFIXES: usize = 2000;

/// A node whose tern crashes and restarts several times in a row must not be shut out
/// by its peers: each restart is a graceful restart (its routes kept for the restart
/// time, 15 s here), so each peer must take the new session within that time, or the
/// node's block leaves every FIB although its tern is back. (15 s leaves a loaded
/// machine room to restart tern; the bug below still fails it: an idle hold doubling
/// from 1 s passes 15 s at the fifth crash.)
///
/// Found by the soak: tern's FSM doubled its idle hold (1 s up to 120 s,
/// DampPeerOscillations) for a peer whose sessions kept dying within 60 s, and refused
/// that peer's connections meanwhile; from the fourth quick crash on, the wait (8 s)
/// outlasted the 6 s restart time. Fixed in `bgp/src/fsm`: an established session whose
/// connection drops starts the back-off over.
#[test]
fn a_peer_that_crashes_repeatedly_is_taken_back_within_its_restart_time() {
    use tern_interop::lab::{Lab, LabSpec};
    let test = "repeated_crash";
    if !can_run(test, &[]) {
        return;
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut spec = LabSpec::new("t9r-", tmp.path(), std::path::Path::new(TERN), 3);
    spec.restart_time = Some(15);
    spec.mesh_hold = Some(6);
    let mut lab = Lab::up(spec).expect("lab");
    lab.wait_converged(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}"));
    let (block, via) = {
        let n = lab.node(3).expect("node-3");
        (n.block_v4.clone(), n.v4.clone())
    };
    let has_block = |lab: &Lab| lab.routes(1).is_ok_and(|r| r.via(&block, &via));
    for crash in 1..=6 {
        lab.kill_tern(3);
        lab.start_tern(3).expect("start node-3");
        let t = Instant::now();
        // Back when node-1 and node-3 both see every session Established.
        loop {
            if !has_block(&lab) {
                let gone = t.elapsed().as_secs_f64();
                let first = lab.routes(1).map(|r| format!("{r:?}"));
                std::thread::sleep(Duration::from_millis(300));
                panic!(
                    "crash {crash}: node-3's block left node-1 {gone:.1} s after the restart\nnode-1 routes then: {first:?}\n300 ms later it is {}there\n--- node-1\n{}\n--- node-3\n{}",
                    if has_block(&lab) { "" } else { "still not " },
                    lab.tern_log(1),
                    lab.tern_log(3)
                );
            }
            if lab.not_converged().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!(
            "[fault] crash {crash} of node-3: taken back after {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
}
