//! BFD with packets, tern (`bfd: 100ms × 3`) against real BFD implementations in
//! network namespaces:
//!
//! - BIRD 2, IPv4, single hop: node-b runs `protocol bfd` with `bfd on`; node-c has no
//!   BFD at all and keeps its session and route throughout (RFC 5882 §4.2). `tern
//!   peers` and the metrics show the sessions. Last, node-b's BIRD is killed: its
//!   graceful restart keeps its route, which BFD must not flush early.
//! - FRR's bfdd, IPv6, single hop, beside FRR's bgpd.
//! - BIRD 2 as a route server two hops away (BGPPeer `reachableBy`): multi-hop BFD
//!   (RFC 5883, port 4784), at 200 ms for global peers by a `bfd.peers` override.
//!
//! In each, the peer is cut off silently three times (nftables drops everything to and
//! from tern at the peer, both ways, no TCP reset): its route must leave tern's kernel
//! FIB within a second, where the BGP hold timer (9 s here, 90 s with Calico's
//! defaults) would take far longer; the session ends with Cease / BFD Down (RFC 9384);
//! once the link is back, the session, BFD and the route come back. The detection
//! times are printed (3 × 100 ms after the last packet heard).
//!
//! Skips without root, BIRD, FRR or nft; fails under CI=true.

#![cfg(target_os = "linux")]

use std::path::Path;
use std::time::{Duration, Instant};

use tern_interop::netns::{self, Netns};
use tern_interop::peers::{wait_for, Kind, Peer};
use tern_interop::process::Daemon;

const TERN: &str = env!("CARGO_BIN_EXE_tern");
const TEST: &str = "bfd_lab";

const BIRD_B: &str = r#"log stderr all;
router id 198.51.100.11;
protocol device { }
protocol bfd { interface "eth0" { interval 100 ms; multiplier 3; }; }
protocol static { ipv4; route 198.18.5.0/26 blackhole; }
protocol bgp tern { local 198.51.100.11 as 65001; neighbor 198.51.100.10 as 64512; bfd on;
  hold time 9; keepalive time 3; connect retry time 1; error wait time 1,4;
  graceful restart on;
  ipv4 { import none; export all; }; }
"#;

const BIRD_C: &str = r#"log stderr all;
router id 198.51.100.12;
protocol device { }
protocol static { ipv4; route 198.18.6.0/26 blackhole; }
protocol bgp tern { local 198.51.100.12 as 65002; neighbor 198.51.100.10 as 64512;
  hold time 9; keepalive time 3; connect retry time 1; error wait time 1,4;
  ipv4 { import none; export all; }; }
"#;

const CLUSTER: &str = r#"apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: 64512, nodeToNodeMeshEnabled: false}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 198.51.100.10/24}}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: node-b}
spec: {peerIP: 198.51.100.11, asNumber: 65001, keepaliveTime: 3s}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: node-c}
spec: {peerIP: 198.51.100.12, asNumber: 65002, keepaliveTime: 3s}
"#;

/// Drops everything between node-b and tern, at node-b, both ways.
const CUT: &str = "table inet tbf_cut {
  chain in { type filter hook input priority 0; policy accept; ip saddr 198.51.100.10 drop; }
  chain out { type filter hook output priority 0; policy accept; ip daddr 198.51.100.10 drop; }
}
";

const ROUTE_B: &str = "198.18.5.0/26";
const ROUTE_C: &str = "198.18.6.0/26";

fn has_route(ns: &Netns, prefix: &str) -> bool {
    let family = if prefix.contains(':') { "-6" } else { "-4" };
    ns.ip(&[family, "route", "show", prefix])
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(prefix))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Writes tern's files in `dir` (the cluster, tern.yaml with BFD at 100 ms × 3 and
/// `overrides` as its `peers:` list) and starts it in `ns`.
fn start_tern(ns: &Netns, dir: &Path, cluster: &str, overrides: &str) -> Daemon {
    std::fs::write(dir.join("cluster.yaml"), cluster).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.join("tern.yaml"),
        format!(
            "node: node-a\ndatastore: {{type: file, path: cluster.yaml}}\ncontrol_socket: {}\n\
             log: info\nmetrics: 127.0.0.1:9477\n\
             bfd: {{enabled: true, interval: 100ms, multiplier: 3, peers: [{overrides}]}}\n",
            dir.join("tern.sock").display()
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = ns.command(TERN);
    cmd.args(["run", "--config"]).arg(dir.join("tern.yaml"));
    Daemon::spawn(ns.name(), cmd, &dir.join("tern.log")).unwrap_or_else(|e| panic!("{e}"))
}

/// Cuts `victim` off with the nft file `cut` (its table named `table`) three times,
/// measuring how long `prefix` stays in tern's FIB after each cut; `check` runs after
/// each removal, `up_again` must hold after the link is back. An error when the route
/// stays longer than a second or does not come back.
#[allow(clippy::too_many_arguments)] // a test helper: each is one part of the lab
fn cut_three_times(
    tern: &Netns,
    victim: &Netns,
    cut: &Path,
    table: &str,
    prefix: &str,
    check: &dyn Fn(),
    up_again: &dyn Fn() -> bool,
) -> Result<Vec<Duration>, String> {
    let mut detections = Vec::new();
    for round in 1..=3 {
        let t = Instant::now();
        victim
            .exec("nft", &["-f", &cut.to_string_lossy()])
            .unwrap_or_else(|e| panic!("{e}"));
        while has_route(tern, prefix) && t.elapsed() < Duration::from_secs(12) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let gone = t.elapsed();
        if has_route(tern, prefix) {
            return Err(format!(
                "round {round}: {prefix} still in the FIB 12 s after the cut"
            ));
        }
        detections.push(gone);
        if gone > Duration::from_secs(1) {
            return Err(format!(
                "round {round}: {prefix} left the FIB after {gone:?}, not within 1 s"
            ));
        }
        check();
        victim
            .exec("nft", &["delete", "table", "inet", table])
            .unwrap_or_else(|e| panic!("{e}"));
        if wait_for("the route back", Duration::from_secs(40), || {
            has_route(tern, prefix)
        })
        .is_err()
        {
            return Err(format!(
                "round {round}: {prefix} was not learnt again after the link came back"
            ));
        }
        if wait_for("BFD Up again", Duration::from_secs(20), up_again).is_err() {
            return Err(format!("round {round}: BFD did not come Up again"));
        }
    }
    Ok(detections)
}

/// Waits for `prefix` in tern's FIB (in `tern`), then for the peer's BFD session Up.
fn wait_ready(tern: &Netns, prefix: &str, bfd_up: &dyn Fn() -> bool) -> Result<(), String> {
    if wait_for("the route in tern's FIB", Duration::from_secs(40), || {
        has_route(tern, prefix)
    })
    .is_err()
    {
        return Err(format!("{prefix} did not reach tern's FIB"));
    }
    if wait_for("BFD up at the peer", Duration::from_secs(20), bfd_up).is_err() {
        return Err("the peer's BFD session with tern did not come Up".into());
    }
    Ok(())
}

fn ms(d: &[Duration]) -> String {
    d.iter()
        .map(|d| format!("{} ms", d.as_millis()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn bfd_takes_a_silent_bird_peer_s_routes_out_within_a_second() {
    if let Err(reason) = tern_interop::lab_available() {
        return tern_interop::skip_or_fail(TEST, &reason);
    }
    for p in ["bird", "nft"] {
        if !tern_interop::have_program(p) {
            return tern_interop::skip_or_fail(TEST, &format!("{p} is not installed"));
        }
    }
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (_lan, mut nodes) = netns::lan(
        "tbf-lan",
        &[
            ("tbf-a", "198.51.100.10/24"),
            ("tbf-b", "198.51.100.11/24"),
            ("tbf-c", "198.51.100.12/24"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (Some(c_ns), Some(b_ns), Some(a_ns)) = (nodes.pop(), nodes.pop(), nodes.pop()) else {
        panic!("three namespaces");
    };
    let dir = tmp.path();
    std::fs::write(dir.join("cut.nft"), CUT).unwrap_or_else(|e| panic!("{e}"));
    let b =
        Peer::start(Kind::Bird, &b_ns, &dir.join("b"), BIRD_B).unwrap_or_else(|e| panic!("{e}"));
    let c =
        Peer::start(Kind::Bird, &c_ns, &dir.join("c"), BIRD_C).unwrap_or_else(|e| panic!("{e}"));
    let _tern = start_tern(&a_ns, dir, CLUSTER, "");

    let fail = |what: &str| -> ! {
        panic!(
            "{what}\nnode-b BFD:\n{}\nnode-b:\n{}\nnode-c:\n{}\ntern peers:\n{}\ntern log:\n{}",
            b.cli(&["show", "bfd", "sessions"]).unwrap_or_default(),
            b.cli(&["show", "protocols", "all", "tern"])
                .unwrap_or_default(),
            c.cli(&["show", "protocols", "tern"]).unwrap_or_default(),
            tern_cli(&a_ns, dir, &["peers"]),
            read(&dir.join("tern.log"))
        )
    };
    let bfd_up = || {
        b.cli(&["show", "bfd", "sessions"]).is_ok_and(|s| {
            s.lines()
                .any(|l| l.contains("198.51.100.10") && l.contains(" Up "))
        })
    };
    let both_routes = || has_route(&a_ns, ROUTE_B) && has_route(&a_ns, ROUTE_C);
    if wait_for(
        "both routes in tern's FIB",
        Duration::from_secs(40),
        both_routes,
    )
    .is_err()
    {
        fail("the routes of node-b and node-c did not reach tern's FIB");
    }
    if wait_for("BFD Up at node-b", Duration::from_secs(20), bfd_up).is_err() {
        fail("BIRD's BFD session with tern did not come Up");
    }
    // tern's side: `tern peers` and the metrics show the session Up.
    let up_in_peers = || {
        tern_cli(&a_ns, dir, &["peers", "198.51.100.11"])
            .contains("bfd           Up, single hop, peer Up")
    };
    if wait_for("BFD Up in tern peers", Duration::from_secs(10), up_in_peers).is_err() {
        fail("`tern peers 198.51.100.11` does not show the BFD session Up");
    }
    let status = tern_cli(&a_ns, dir, &["status"]);
    if !status.contains("Established, BFD Up") || !status.contains("Established, BFD Down") {
        fail(&format!(
            "`tern status` does not show BFD beside BGP:\n{status}"
        ));
    }
    // node-c does not answer: its BFD session stays Down, and BGP does not care.
    let c_peers = tern_cli(&a_ns, dir, &["peers", "198.51.100.12"]);
    if !c_peers.contains("bfd           Down, single hop, peer Down")
        || !c_peers.contains("; 0 downs;")
    {
        fail(&format!(
            "`tern peers 198.51.100.12` should show a BFD session that never came Up:\n{c_peers}"
        ));
    }
    // ... and `tern diagnose` says so once BGP has been up 10 s without it.
    let c_silent = || {
        tern_cli(&a_ns, dir, &["diagnose"])
            .contains("[info] bfd-not-answering: global peer 198.51.100.12")
    };
    if wait_for(
        "bfd-not-answering for node-c",
        Duration::from_secs(20),
        c_silent,
    )
    .is_err()
    {
        fail(&format!(
            "no bfd-not-answering finding for node-c:\n{}",
            tern_cli(&a_ns, dir, &["diagnose"])
        ));
    }
    if tern_cli(&a_ns, dir, &["diagnose"]).contains("bfd-not-answering: global peer 198.51.100.11")
    {
        fail("node-b answers BFD, yet it is reported as not answering");
    }
    let metrics = scrape(&a_ns);
    for want in [
        r#"tern_bfd_session_state{peer="198.51.100.11",state="Up"} 1"#,
        r#"tern_bfd_detect_time_seconds{peer="198.51.100.11"} 0.3"#,
    ] {
        if !metrics.contains(want) {
            fail(&format!("the metrics lack {want}:\n{metrics}"));
        }
    }

    let check = || {
        if !has_route(&a_ns, ROUTE_C) {
            fail("node-c's route (no BFD) went with node-b's");
        }
        let log = read(&dir.join("tern.log"));
        if !log.contains("BFD down") || !log.contains("Cease / BFD Down") {
            fail("tern's log does not say BFD ended the session with Cease / BFD Down");
        }
    };
    let cut = dir.join("cut.nft");
    let detections = cut_three_times(&a_ns, &b_ns, &cut, "tbf_cut", ROUTE_B, &check, &bfd_up)
        .unwrap_or_else(|e| fail(&e));
    let metrics = scrape(&a_ns);
    let want = r#"tern_bfd_session_downs_total{peer="198.51.100.11"} 3"#;
    if !metrics.contains(want) {
        fail(&format!("the metrics lack {want}:\n{metrics}"));
    }
    // node-c never went down.
    let log = read(&dir.join("tern.log"));
    if log
        .lines()
        .any(|l| l.contains("BGP session down") && l.contains("198.51.100.12"))
    {
        fail("node-c's session went down: BFD must leave a peer without BFD alone");
    }
    let peers = tern_cli(&a_ns, dir, &["peers", "198.51.100.11"]);
    eprintln!(
        "bfd_lab: BIRD 2, IPv4: route gone after the cut (100 ms × 3, hold time 9 s): {}\n{peers}",
        ms(&detections)
    );

    // BIRD's control plane dies (kill -9: its kernel closes the connection at once)
    // and its BFD with it: graceful restart keeps its route; BFD does not flush it,
    // since the BGP session went down first and took the BFD session with it.
    // By its PID, as a crash would (the guard still owns it and reaps it).
    if let Some(pid) = b.pid().and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let kept = |l: &str| l.contains("graceful restart: keeping its routes");
    if wait_for("the restart seen", Duration::from_secs(10), || {
        kept(&read(&dir.join("tern.log")))
    })
    .is_err()
    {
        fail("tern did not keep node-b's routes for its graceful restart after BIRD died");
    }
    std::thread::sleep(Duration::from_secs(1));
    if !has_route(&a_ns, ROUTE_B) {
        fail(&format!(
            "node-b's route left the FIB during its graceful restart: BFD flushed it early\n{}\n{}",
            tern_cli(&a_ns, dir, &["routes", "--all"]),
            tern_cli(&a_ns, dir, &["fib"])
        ));
    }
}

/// FRR's bgpd, its session over IPv6.
const FRR_BGPD: &str = "frr defaults traditional
hostname frr-bfd
log stdout
router bgp 65003
 bgp router-id 198.51.100.13
 no bgp ebgp-requires-policy
 no bgp network import-check
 no bgp default ipv4-unicast
 timers bgp 3 9
 neighbor 2001:db8:bf::10 remote-as 64512
 neighbor 2001:db8:bf::10 timers connect 1
 address-family ipv6 unicast
  network 2001:db8:f5::/48
  neighbor 2001:db8:bf::10 activate
 exit-address-family
";

/// FRR's bfdd on its own, with a configured single-hop peer.
const FRR_BFDD: &str = "log stdout
bfd
 peer 2001:db8:bf::10 local-address 2001:db8:bf::13
  receive-interval 100
  transmit-interval 100
  detect-multiplier 3
 !
!
";

const CLUSTER_V6: &str = r#"apiVersion: projectcalico.org/v3
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
metadata: {name: frr}
spec: {peerIP: "2001:db8:bf::13", asNumber: 65003, keepaliveTime: 3s}
"#;

const CUT_V6: &str = "table inet tbg_cut {
  chain in { type filter hook input priority 0; policy accept; ip6 saddr 2001:db8:bf::10 drop; }
  chain out { type filter hook output priority 0; policy accept; ip6 daddr 2001:db8:bf::10 drop; }
}
";

const ROUTE_FRR: &str = "2001:db8:f5::/48";

#[test]
fn bfd_takes_a_silent_frr_peer_s_ipv6_routes_out_within_a_second() {
    if let Err(reason) = tern_interop::lab_available() {
        return tern_interop::skip_or_fail(TEST, &reason);
    }
    for p in ["/usr/lib/frr/bgpd", "/usr/lib/frr/bfdd", "vtysh", "nft"] {
        if !tern_interop::have_program(p) {
            return tern_interop::skip_or_fail(TEST, &format!("{p} is not installed"));
        }
    }
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (_lan, mut nodes) = netns::lan(
        "tbg-lan",
        &[("tbg-a", "198.51.100.10/24"), ("tbg-d", "198.51.100.13/24")],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (Some(d_ns), Some(a_ns)) = (nodes.pop(), nodes.pop()) else {
        panic!("two namespaces");
    };
    for (ns, a) in [(&a_ns, "2001:db8:bf::10/64"), (&d_ns, "2001:db8:bf::13/64")] {
        ns.add_addr("eth0", a).unwrap_or_else(|e| panic!("{e}"));
    }
    let dir = tmp.path();
    std::fs::write(dir.join("cut.nft"), CUT_V6).unwrap_or_else(|e| panic!("{e}"));
    let frr_dir = dir.join("d");
    let d = Peer::start(Kind::Frr, &d_ns, &frr_dir, FRR_BGPD).unwrap_or_else(|e| panic!("{e}"));
    let _bfdd = tern_interop::peers::start_bfdd(&d_ns, &frr_dir, FRR_BFDD)
        .unwrap_or_else(|e| panic!("{e}"));
    let _tern = start_tern(&a_ns, dir, CLUSTER_V6, "");

    let fail = |what: &str| -> ! {
        panic!(
            "{what}\nFRR BFD:\n{}\nFRR BGP:\n{}\nbfdd log:\n{}\ntern peers:\n{}\ntern log:\n{}",
            d.cli(&["show bfd peers"]).unwrap_or_default(),
            d.cli(&["show bgp summary"]).unwrap_or_default(),
            read(&frr_dir.join("bfdd.log")),
            tern_cli(&a_ns, dir, &["peers"]),
            read(&dir.join("tern.log"))
        )
    };
    let bfd_up = || {
        d.cli(&["show bfd peers brief"]).is_ok_and(|s| {
            s.lines()
                .any(|l| l.contains("2001:db8:bf::10") && l.contains("up"))
        })
    };
    wait_ready(&a_ns, ROUTE_FRR, &bfd_up).unwrap_or_else(|e| fail(&e));
    let peers = tern_cli(&a_ns, dir, &["peers", "2001:db8:bf::13"]);
    if !peers.contains("bfd           Up, single hop, peer Up; detection 300 ms") {
        fail(&format!(
            "`tern peers` does not show BFD Up at 100 ms × 3:\n{peers}"
        ));
    }
    let check = || {
        if !read(&dir.join("tern.log")).contains("Cease / BFD Down") {
            fail("tern's log does not say BFD ended the session");
        }
    };
    let cut = dir.join("cut.nft");
    let detections = cut_three_times(&a_ns, &d_ns, &cut, "tbg_cut", ROUTE_FRR, &check, &bfd_up)
        .unwrap_or_else(|e| fail(&e));
    eprintln!(
        "bfd_lab: FRR bfdd, IPv6: route gone after the cut (100 ms × 3, hold time 9 s): {}",
        ms(&detections)
    );
}

/// A route server two hops away (RFC 5883): BIRD at 203.0.113.2 behind a router.
const BIRD_MULTIHOP: &str = r#"log stderr all;
router id 203.0.113.2;
protocol device { }
protocol bfd { multihop { interval 100 ms; multiplier 3; }; }
protocol static { ipv4; route 198.18.7.0/26 blackhole; }
protocol bgp tern { local 203.0.113.2 as 65010; neighbor 198.51.100.10 as 64512; multihop; bfd on;
  hold time 9; keepalive time 3; connect retry time 1; error wait time 1,4;
  ipv4 { import none; export all; next hop address 198.51.100.254; }; }
"#;

const CLUSTER_MULTIHOP: &str = r#"apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: 64512, nodeToNodeMeshEnabled: false}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 198.51.100.10/24}}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: route-server}
spec: {peerIP: 203.0.113.2, asNumber: 65010, keepaliveTime: 3s, reachableBy: 198.51.100.254}
"#;

const CUT_MULTIHOP: &str = "table inet tbm_cut {
  chain in { type filter hook input priority 0; policy accept; ip saddr 198.51.100.10 drop; }
  chain out { type filter hook output priority 0; policy accept; ip daddr 198.51.100.10 drop; }
}
";

const ROUTE_RS: &str = "198.18.7.0/26";

#[test]
fn multihop_bfd_with_a_route_server_behind_a_router() {
    if let Err(reason) = tern_interop::lab_available() {
        return tern_interop::skip_or_fail(TEST, &reason);
    }
    for p in ["bird", "nft"] {
        if !tern_interop::have_program(p) {
            return tern_interop::skip_or_fail(TEST, &format!("{p} is not installed"));
        }
    }
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path();
    let ns = |n: &str| Netns::create(n).unwrap_or_else(|e| panic!("{e}"));
    let (a, r, p) = (ns("tbm-a"), ns("tbm-r"), ns("tbm-p"));
    a.veth_to("eth0", &r, "eth0")
        .unwrap_or_else(|e| panic!("{e}"));
    r.veth_to("eth1", &p, "eth0")
        .unwrap_or_else(|e| panic!("{e}"));
    for (n, ifname, addr) in [
        (&a, "eth0", "198.51.100.10/24"),
        (&r, "eth0", "198.51.100.254/24"),
        (&r, "eth1", "203.0.113.1/24"),
        (&p, "eth0", "203.0.113.2/24"),
    ] {
        n.add_addr(ifname, addr).unwrap_or_else(|e| panic!("{e}"));
    }
    r.exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"])
        .unwrap_or_else(|e| panic!("{e}"));
    p.ip(&["route", "add", "198.51.100.0/24", "via", "203.0.113.1"])
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("cut.nft"), CUT_MULTIHOP).unwrap_or_else(|e| panic!("{e}"));
    let bird = Peer::start(Kind::Bird, &p, &dir.join("p"), BIRD_MULTIHOP)
        .unwrap_or_else(|e| panic!("{e}"));
    let _tern = start_tern(
        &a,
        dir,
        CLUSTER_MULTIHOP,
        "{type: global, interval: 200ms}, {address: 203.0.113.99, enabled: false}",
    );
    let fail = |what: &str| -> ! {
        panic!(
            "{what}\nBIRD BFD:\n{}\nBIRD:\n{}\ntern peers:\n{}\ntern log:\n{}",
            bird.cli(&["show", "bfd", "sessions"]).unwrap_or_default(),
            bird.cli(&["show", "protocols", "all", "tern"])
                .unwrap_or_default(),
            tern_cli(&a, dir, &["peers", "203.0.113.2"]),
            read(&dir.join("tern.log"))
        )
    };
    let bfd_up = || {
        bird.cli(&["show", "bfd", "sessions"]).is_ok_and(|s| {
            s.lines()
                .any(|l| l.contains("198.51.100.10") && l.contains(" Up "))
        })
    };
    wait_ready(&a, ROUTE_RS, &bfd_up).unwrap_or_else(|e| fail(&e));
    let peers = tern_cli(&a, dir, &["peers", "203.0.113.2"]);
    // tern.yaml asks 200 ms for global peers: the slower end sets the detection time.
    if !peers.contains("bfd           Up, multi-hop, peer Up; detection 600 ms, sent every 200 ms")
    {
        fail("`tern peers` does not show a multi-hop BFD session Up at 200 ms × 3");
    }
    let check = || {
        if !read(&dir.join("tern.log")).contains("Cease / BFD Down") {
            fail("tern's log does not say BFD ended the session");
        }
    };
    let cut = dir.join("cut.nft");
    let detections = cut_three_times(&a, &p, &cut, "tbm_cut", ROUTE_RS, &check, &bfd_up)
        .unwrap_or_else(|e| fail(&e));
    eprintln!(
        "bfd_lab: BIRD 2, multi-hop IPv4: route gone after the cut (200 ms × 3 by a per-type override): {}",
        ms(&detections)
    );
}

/// tern's /metrics, from inside its namespace.
fn scrape(ns: &Netns) -> String {
    let script =
        "exec 3<>/dev/tcp/127.0.0.1/9477; printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3";
    ns.exec("bash", &["-c", script])
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// `tern ARGS…` against this node's control socket; its output, or the error.
fn tern_cli(ns: &Netns, dir: &Path, args: &[&str]) -> String {
    let mut c = ns.command(TERN);
    c.arg("--socket").arg(dir.join("tern.sock")).args(args);
    match c.output() {
        Ok(o) => format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => format!("cannot run tern: {e}"),
    }
}
