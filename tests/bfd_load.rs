//! BFD at scale, measured:
//! - tern's BFD driver with 1,000 single-hop IPv6 sessions at 100 ms × 3 against FRR's
//!   bfdd, in two network namespaces: the time for all to come Up and the CPU of
//!   tern's driver thread and of bfdd over 20 s of steady state, side by side;
//! - a BFD peer cut off while tern takes a million routes from another peer: when BFD
//!   detects it, when the session ends, when its route leaves the FIB.
//!
//! Long (about a minute) and a measurement, not a check: it runs only with
//! `TERN_BFD_LOAD=1` (`./test.sh --lab-bench` sets it). It fails only if the sessions
//! do not come Up.

#![cfg(target_os = "linux")]

use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

use tern_bfd::driver::{Command, Views};
use tern_bfd::session::Config;
use tern_bfd::State;
use tern_interop::netns;
use tern_interop::process::Daemon;

const SESSIONS: u16 = 1000;
const STEADY: Duration = Duration::from_secs(20);

/// Session `i`'s peer address, at bfdd.
fn peer(i: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0xbf, 1, 0, 0, 0, i + 1)
}

/// Session `i`'s address at tern: bfdd keys its sessions by the peer's address, so
/// each needs its own, which a route with `src` makes the kernel choose for packets to
/// `peer(i)` (tern's driver does not bind a source per session).
fn local(i: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0xbf, 2, 0, 0, 0, i + 1)
}

/// user + system CPU seconds of a process, from /proc.
fn process_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at ") ".
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15, i.e. 11 and 12 after the state field.
    (ticks(11) + ticks(12)) / 100.0
}

/// user + system CPU seconds of the calling thread.
fn thread_cpu() -> f64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD)
        .map(|u| {
            let t = |v: nix::sys::time::TimeVal| v.tv_sec() as f64 + v.tv_usec() as f64 / 1e6;
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or(0.0)
}

#[test]
fn bfd_cost_of_1000_sessions_against_frr_bfdd() {
    if std::env::var_os("TERN_BFD_LOAD").is_none() {
        eprintln!("bfd_load: set TERN_BFD_LOAD=1 to measure (about a minute)");
        return;
    }
    if let Err(reason) = tern_interop::lab_available() {
        return tern_interop::skip_or_fail("bfd_load", &reason);
    }
    if !tern_interop::have_program("/usr/lib/frr/bfdd") {
        return tern_interop::skip_or_fail("bfd_load", "FRR's bfdd is not installed");
    }
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path();
    let (_lan, mut nodes) = netns::lan(
        "tbl-lan",
        &[("tbl-a", "198.51.100.10/24"), ("tbl-b", "198.51.100.11/24")],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (Some(b_ns), Some(a_ns)) = (nodes.pop(), nodes.pop()) else {
        panic!("two namespaces");
    };
    // The neighbour table is shared by every namespace and holds 1,024 entries at most
    // by default: with one per address, 2,000 would overflow it. So every address is
    // reached through the other side's one link address: two neighbour entries in all.
    let mut a_batch = String::from("addr add 2001:db8:bf::10/64 dev eth0 nodad\n");
    let mut b_batch = String::from("addr add 2001:db8:bf::11/64 dev eth0 nodad\n");
    let mut conf = String::from("log stdout\nbfd\n");
    for i in 0..SESSIONS {
        a_batch += &format!("addr add {}/128 dev eth0 nodad\n", local(i));
        a_batch += &format!(
            "route add {}/128 via 2001:db8:bf::11 src {}\n",
            peer(i),
            local(i)
        );
        b_batch += &format!("addr add {}/128 dev eth0 nodad\n", peer(i));
        conf += &format!(
            " peer {} local-address {}\n  receive-interval 100\n  transmit-interval 100\n  detect-multiplier 3\n !\n",
            local(i),
            peer(i)
        );
    }
    b_batch += "route add 2001:db8:bf:2::/64 via 2001:db8:bf::10\n";
    conf += "!\n";
    for (ns, name, text) in [(&a_ns, "a.batch", a_batch), (&b_ns, "b.batch", b_batch)] {
        std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("{e}"));
        ns.ip(&["-6", "-batch", &dir.join(name).to_string_lossy()])
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let bfdd = tern_interop::peers::start_bfdd(&b_ns, dir, &conf).unwrap_or_else(|e| panic!("{e}"));
    let bfdd_pid = bfdd.pid().unwrap_or(0);

    let figures = a_ns
        .block_on(|| async move {
            let (tx, rx) = tokio::sync::mpsc::channel(4096);
            let (etx, mut erx) = tokio::sync::mpsc::channel(4096);
            let views = Views::default();
            let driver = tokio::spawn(tern_bfd::driver::run(rx, etx, views.clone()));
            tokio::spawn(async move { while erx.recv().await.is_some() {} });
            let cfg = Config {
                desired_min_tx: Duration::from_millis(100),
                required_min_rx: Duration::from_millis(100),
                detect_mult: 3,
            };
            let t0 = Instant::now();
            for i in 0..SESSIONS {
                let add = Command::Add {
                    peer: IpAddr::V6(peer(i)),
                    cfg,
                    multihop: false,
                };
                let _ = tx.send(add).await;
            }
            let count_up = || {
                views
                    .lock()
                    .map(|v| v.values().filter(|s| s.state == State::Up).count())
                    .unwrap_or(0)
            };
            while count_up() < usize::from(SESSIONS) && t0.elapsed() < Duration::from_secs(60) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let all_up = t0.elapsed();
            let up = count_up();
            let (cpu0, bfdd0, w0) = (thread_cpu(), process_cpu(bfdd_pid), Instant::now());
            tokio::time::sleep(STEADY).await;
            let (cpu1, bfdd1, wall) = (thread_cpu(), process_cpu(bfdd_pid), w0.elapsed());
            let still_up = count_up();
            drop(tx);
            let _ = driver.await;
            (up, all_up, still_up, cpu1 - cpu0, bfdd1 - bfdd0, wall)
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let (up, all_up, still_up, tern_cpu, bfdd_cpu, wall) = figures;
    let log = std::fs::read_to_string(dir.join("bfdd.log")).unwrap_or_default()
        + &tern_interop::peers::cli_at(
            tern_interop::peers::Kind::Frr,
            dir,
            &["show bfd peers brief"],
        )
        .unwrap_or_else(|e| e.to_string());
    assert_eq!(
        up,
        usize::from(SESSIONS),
        "only {up} of {SESSIONS} sessions came Up in {all_up:?}; bfdd log:\n{}",
        log.lines().rev().take(20).collect::<Vec<_>>().join("\n")
    );
    let pct = |cpu: f64| 100.0 * cpu / wall.as_secs_f64();
    eprintln!(
        "bfd_load: {SESSIONS} sessions at 100 ms x 3, all Up in {all_up:.1?}, {still_up} still Up after {wall:.1?}\n  \
         tern's BFD thread: {tern_cpu:.2} CPU-s = {:.1}% of a core\n  \
         FRR bfdd:          {bfdd_cpu:.2} CPU-s = {:.1}% of a core\n  \
         ratio tern/bfdd:   {:.2}",
        pct(tern_cpu),
        pct(bfdd_cpu),
        if bfdd_cpu > 0.0 { tern_cpu / bfdd_cpu } else { f64::NAN }
    );
}

/// node-b: BIRD 2 with BFD, announcing one route.
const BIRD_B: &str = r#"log stderr all;
router id 198.51.100.11;
protocol device { }
protocol bfd { interface "eth0" { interval 100 ms; multiplier 3; }; }
protocol static { ipv4; route 198.18.5.0/26 blackhole; }
protocol bgp tern { local 198.51.100.11 as 65001; neighbor 198.51.100.10 as 64512; bfd on;
  hold time 9; keepalive time 3; connect retry time 1; error wait time 1,4;
  ipv4 { import none; export all; }; }
"#;

const BURST_CLUSTER: &str = r#"apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: 64512, nodeToNodeMeshEnabled: false}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 198.51.100.10/24, ipv6Address: "2001:db8:bf::10/64"}}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: node-b}
spec: {peerIP: 198.51.100.11, asNumber: 65001, keepaliveTime: 3s}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: feeder}
spec: {peerIP: "2001:db8:bf::12", asNumber: 65002}
"#;

const BURST: usize = 1_000_000;

/// While tern takes a million routes from one peer (into its RIB and kernel FIB), a
/// BFD peer goes silent: how long until tern notices (its log), and until that peer's
/// route leaves the FIB, which is busy with the million.
#[test]
fn bfd_detection_during_a_million_route_burst() {
    use tern_interop::bench::inject::{FeedPeer, Injector, Phase};
    use tern_interop::peers::{wait_for, Kind, Peer};
    if std::env::var_os("TERN_BFD_LOAD").is_none() {
        eprintln!("bfd_load: set TERN_BFD_LOAD=1 to measure (about a minute)");
        return;
    }
    if let Err(reason) = tern_interop::lab_available() {
        return tern_interop::skip_or_fail("bfd_load", &reason);
    }
    for p in ["bird", "nft"] {
        if !tern_interop::have_program(p) {
            return tern_interop::skip_or_fail("bfd_load", &format!("{p} is not installed"));
        }
    }
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path();
    let (_lan, mut nodes) = netns::lan(
        "tbr-lan",
        &[
            ("tbr-a", "198.51.100.10/24"),
            ("tbr-b", "198.51.100.11/24"),
            ("tbr-i", "198.51.100.12/24"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (Some(i_ns), Some(b_ns), Some(a_ns)) = (nodes.pop(), nodes.pop(), nodes.pop()) else {
        panic!("three namespaces");
    };
    for (ns, a) in [(&a_ns, "2001:db8:bf::10/64"), (&i_ns, "2001:db8:bf::12/64")] {
        ns.ip(&["-6", "addr", "add", a, "dev", "eth0", "nodad"])
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let table: Vec<ipnet::IpNet> = (0..BURST)
        .map(|i| {
            let base = u128::from(Ipv6Addr::new(0x2001, 0xdb8, 0x8000, 0, 0, 0, 0, 0));
            let net = Ipv6Addr::from(base + ((i as u128) << 64));
            ipnet::IpNet::V6(ipnet::Ipv6Net::new(net, 64).unwrap_or_else(|e| panic!("{e}")))
        })
        .collect();
    let feeder = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0xbf, 0, 0, 0, 0, 0x12));
    let feed = FeedPeer::build(
        feeder,
        std::net::Ipv4Addr::new(198, 51, 100, 12),
        65002,
        true,
        &table,
        0,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    drop(table);
    let mut inj = Injector::start(&i_ns, vec![feed]).unwrap_or_else(|e| panic!("{e}"));
    let b =
        Peer::start(Kind::Bird, &b_ns, &dir.join("b"), BIRD_B).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("cluster.yaml"), BURST_CLUSTER).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.join("tern.yaml"),
        format!(
            "node: node-a\ndatastore: {{type: file, path: cluster.yaml}}\ncontrol_socket: {}\nlog: info\n\
             bfd: {{enabled: true, interval: 100ms, multiplier: 3, peers: [{{address: \"2001:db8:bf::12\", enabled: false}}]}}\n",
            dir.join("tern.sock").display()
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = a_ns.command(env!("CARGO_BIN_EXE_tern"));
    cmd.args(["run", "--config"]).arg(dir.join("tern.yaml"));
    let log = dir.join("tern.log");
    let _tern = Daemon::spawn(a_ns.name(), cmd, &log).unwrap_or_else(|e| panic!("{e}"));
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let has_b_route = || {
        a_ns.ip(&["-4", "route", "show", "198.18.5.0/26"])
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("198.18.5.0/26"))
    };
    let bfd_up = || {
        b.cli(&["show", "bfd", "sessions"]).is_ok_and(|s| {
            s.lines()
                .any(|l| l.contains("198.51.100.10") && l.contains(" Up "))
        })
    };
    let ready = || has_b_route() && bfd_up() && inj.established() == 1;
    if wait_for(
        "node-b up with BFD, the feeder established",
        Duration::from_secs(40),
        ready,
    )
    .is_err()
    {
        panic!("the lab did not come up:\n{}", read_log());
    }

    let (_, t0) = inj.set_phase(Phase::Full);
    // A second of burst: BFD must hold meanwhile (tern's side and BIRD's).
    let mut flapped = false;
    while t0.elapsed() < Duration::from_secs(1) {
        flapped |= !bfd_up();
        std::thread::sleep(Duration::from_millis(50));
    }
    let cut = dir.join("cut.nft");
    std::fs::write(
        &cut,
        "table inet tbr_cut {\n  chain in { type filter hook input priority 0; policy accept; ip saddr 198.51.100.10 drop; }\n  chain out { type filter hook output priority 0; policy accept; ip daddr 198.51.100.10 drop; }\n}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let t_cut = Instant::now();
    b_ns.exec("nft", &["-f", &cut.to_string_lossy()])
        .unwrap_or_else(|e| panic!("{e}"));
    let (mut detected, mut noticed, mut gone) = (None, None, None);
    while (noticed.is_none() || gone.is_none()) && t_cut.elapsed() < Duration::from_secs(60) {
        let l = read_log();
        if detected.is_none() && l.contains("BFD session Up -> Down") {
            detected = Some(t_cut.elapsed());
        }
        if noticed.is_none() && l.contains("Cease / BFD Down") {
            noticed = Some(t_cut.elapsed());
        }
        if gone.is_none() && !has_b_route() {
            gone = Some(t_cut.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let installed = a_ns
        .ip(&["-6", "route", "show", "proto", "201"])
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
        .unwrap_or(0);
    eprintln!(
        "bfd_load: a {BURST}-route burst from another peer, node-b cut 1 s into it:\n  \
         BFD held during the first second of the burst: {}\n  \
         BFD down detected (driver) after: {detected:?}\n  \
         BGP session ended (Cease / BFD Down in the log) after: {noticed:?}\n  \
         node-b's route out of the FIB after: {gone:?}\n  \
         feeder routes in the FIB by then: {installed}",
        !flapped
    );
    assert!(
        !flapped,
        "BFD went down during the burst, before the cut:\n{}",
        read_log()
    );
    assert!(
        noticed.is_some() && gone.is_some(),
        "node-b's cut was not acted on:\n{}",
        read_log()
    );
}
