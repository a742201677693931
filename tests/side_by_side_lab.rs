//! tern and a Calico node side by side, in the same role, with packets: node-a runs
//! tern, node-c runs BIRD 1.6.8 (the base of the fork calico-node ships) with the text
//! Calico v3.32's confd renders for the same resources (`bird.cfg`, `bird_aggr.cfg`,
//! `bird_ipam.cfg`: the kernel filter with the route priority, `calico_aggr`,
//! `calico_export_to_bgp_peers`, the BGPFilter function, the v3.32 export preamble).
//! Both are in the node-to-node mesh with each other and with node-b (BIRD 2), and both
//! peer with two eBGP top-of-rack routers (BIRD 2): tor1 (AS 65001) announces a default
//! route and 198.19.8.0/24, tor2 (AS 65002) announces 198.19.9.0/24, which the BGPFilter
//! `tor2-in` rejects on import, and 198.19.10.0/24. One bridged LAN, 198.51.100.0/24.
//!
//! They must give the same routes: the same kernel routes learnt by BGP (prefix, next
//! hop and metric), the other node's block aside; the same prefixes to each ToR (every
//! pool route, no transit of the other ToR's routes, no default route); their own block
//! only to node-b (no ToR route into the mesh); and packets from both reach both ToRs.
//! Skips without root, BIRD 2 or BIRD 1.6 (`scripts/setup.sh` unpacks it in
//! /opt/tern/bird1.6, or set TERN_BIRD1_DIR); fails under CI=true.

#![cfg(target_os = "linux")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tern_interop::netns::Netns;
use tern_interop::peers::{wait_for, Kind, Peer};
use tern_interop::process::Daemon;

const TERN: &str = env!("CARGO_BIN_EXE_tern");

/// Where `scripts/setup.sh` unpacks Debian's `bird` (1.6.8).
const BIRD1_DIR: &str = "/opt/tern/bird1.6";

const TOR1: &str = r#"log stderr all;
router id 198.51.100.1;
protocol device { }
protocol static { ipv4; route 198.19.8.0/24 blackhole; route 0.0.0.0/0 blackhole; }
template bgp node { local as 65001; hold time 9; keepalive time 3; connect retry time 1;
  error wait time 1,4; ipv4 { import all; export where source = RTS_STATIC; }; }
protocol bgp tern_a from node { neighbor 198.51.100.10 as 64512; }
protocol bgp calico_c from node { neighbor 198.51.100.12 as 64512; }
"#;

const TOR2: &str = r#"log stderr all;
router id 198.51.100.2;
protocol device { }
protocol static { ipv4; route 198.19.9.0/24 blackhole; route 198.19.10.0/24 blackhole; }
template bgp node { local as 65002; hold time 9; keepalive time 3; connect retry time 1;
  error wait time 1,4; ipv4 { import all; export where source = RTS_STATIC; }; }
protocol bgp tern_a from node { neighbor 198.51.100.10 as 64512; }
protocol bgp calico_c from node { neighbor 198.51.100.12 as 64512; }
"#;

/// node-b: a mesh member announcing its block with the LOCAL_PREF Calico's export
/// preamble gives it (priority 1024).
const NODE_B: &str = r#"log stderr all;
router id 198.51.100.11;
protocol device { }
protocol static { ipv4; route 198.18.2.0/26 blackhole; }
template bgp mesh { local 198.51.100.11 as 64512; hold time 9; keepalive time 3;
  connect retry time 1; error wait time 1,4;
  ipv4 { import all; export filter { if source = RTS_STATIC then {
    bgp_local_pref = 2147482623; accept; } reject; }; }; }
protocol bgp Mesh_198_51_100_10 from mesh { neighbor 198.51.100.10 as 64512; }
protocol bgp Mesh_198_51_100_12 from mesh { neighbor 198.51.100.12 as 64512; }
"#;

/// node-c: what Calico v3.32's confd renders for it from the resources below, in
/// BIRD 1.x syntax, the three files in one (the `include`s inlined), IPv4 only. The
/// mesh peers' addresses are lower as text, so node-c dials both (none is passive).
const NODE_C: &str = r#"# bird_aggr.cfg
protocol static {
   # IP blocks for this host.
   route 198.18.3.0/26 blackhole;
}
function calico_aggr ()
{
      # Block 198.18.3.0/26 is confirmed
      if ( net = 198.18.3.0/26 ) then { accept; }
      if ( net ~ 198.18.3.0/26 ) then { reject; }
}
# bird_ipam.cfg
function apply_communities ()
{
}
function reject_tunnel_routes () {
  if (defined(ifname)) then {
     if ((ifname ~ "*.cali") || (ifname ~ "*.calico")) then {
        reject;
     }
  }
}
function calico_export_to_bgp_peers(bool internal_peer) {
  if (internal_peer) then {
    reject_tunnel_routes();
  }
  apply_communities();
  calico_aggr();
  if (net ~ 198.18.0.0/16) then { accept; }
}
filter calico_kernel_programming {
  if (defined(source) && (source = RTS_BGP) && !defined(krt_metric)) then {
      krt_metric = 1024;
      if (defined(bgp_local_pref)) then {
          krt_metric = 2147483647 - bgp_local_pref;
      }
      if (krt_metric < 1024) then {
          preference = 200;
      }
  }
  accept;
}
# bird.cfg
template kernel kernel_template {
  learn;
  persist;
  scan time 2;
  import all;
}
router id 198.51.100.12;
protocol kernel from kernel_template {
  export filter calico_kernel_programming;
  graceful restart;
  merge paths on;
}
protocol device {
  scan time 2;
}
protocol direct {
  interface -"cali*", -"kube-ipvs*", "*";
}
template bgp bgp_template {
  local as 64512;
  gateway recursive;
  add paths on;
  graceful restart;
  connect delay time 2;
  connect retry time 5;
  error wait time 5,30;
}
# -------------- BGP Filters ------------------
# v4 BGPFilter tor2-in
function bgp_tor2_in_importFilterV4() {
  if ((net = 198.19.9.0/24)) then { reject; }
}
# ------------- Node-to-node mesh -------------
protocol bgp Mesh_198_51_100_10 from bgp_template {
  neighbor 198.51.100.10 as 64512;
  source address 198.51.100.12;
  ttl security off;
  multihop;
  import filter {
    if (defined(bgp_local_pref)&&(bgp_local_pref > 2147482623)) then
      preference = 200;
    accept;
  };
  export filter {
    if (defined(source) && source = RTS_BGP && defined(bgp_local_pref)) then {
      krt_metric = 2147483647 - bgp_local_pref;
    } else {
      if (!defined(krt_metric)) then { krt_metric = 1024; }
      bgp_local_pref = 2147483647 - krt_metric;
    }
    calico_export_to_bgp_peers(true);
    reject;
  };
}
protocol bgp Mesh_198_51_100_11 from bgp_template {
  neighbor 198.51.100.11 as 64512;
  source address 198.51.100.12;
  ttl security off;
  multihop;
  import filter {
    if (defined(bgp_local_pref)&&(bgp_local_pref > 2147482623)) then
      preference = 200;
    accept;
  };
  export filter {
    if (defined(source) && source = RTS_BGP && defined(bgp_local_pref)) then {
      krt_metric = 2147483647 - bgp_local_pref;
    } else {
      if (!defined(krt_metric)) then { krt_metric = 1024; }
      bgp_local_pref = 2147483647 - krt_metric;
    }
    calico_export_to_bgp_peers(true);
    reject;
  };
}
# ------------- Global peers -------------
protocol bgp Global_198_51_100_1 from bgp_template {
  neighbor 198.51.100.1 as 65001;
  source address 198.51.100.12;
  ttl security off;
  multihop;
  import filter {
    if (defined(bgp_local_pref)&&(bgp_local_pref > 2147482623)) then
      preference = 200;
    accept;
  };
  export filter {
    if (defined(source) && source = RTS_BGP && defined(bgp_local_pref)) then {
      krt_metric = 2147483647 - bgp_local_pref;
    } else {
      if (!defined(krt_metric)) then { krt_metric = 1024; }
      bgp_local_pref = 2147483647 - krt_metric;
    }
    calico_export_to_bgp_peers(false);
    reject;
  };
}
protocol bgp Global_198_51_100_2 from bgp_template {
  neighbor 198.51.100.2 as 65002;
  source address 198.51.100.12;
  ttl security off;
  multihop;
  import filter {
    bgp_tor2_in_importFilterV4();
    if (defined(bgp_local_pref)&&(bgp_local_pref > 2147482623)) then
      preference = 200;
    accept;
  };
  export filter {
    if (defined(source) && source = RTS_BGP && defined(bgp_local_pref)) then {
      krt_metric = 2147483647 - bgp_local_pref;
    } else {
      if (!defined(krt_metric)) then { krt_metric = 1024; }
      bgp_local_pref = 2147483647 - krt_metric;
    }
    calico_export_to_bgp_peers(false);
    reject;
  };
}
"#;

/// The cluster both nodes are configured from.
const CLUSTER: &str = r#"apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: 64512, nodeToNodeMeshEnabled: true}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 198.51.100.10/24}}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-b}
spec: {bgp: {ipv4Address: 198.51.100.11/24}}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-c}
spec: {bgp: {ipv4Address: 198.51.100.12/24}}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pods}
spec: {cidr: 198.18.0.0/16, blockSize: 26}
---
apiVersion: projectcalico.org/v3
kind: BlockAffinity
metadata: {name: node-a-198-18-1-0-26}
spec: {node: node-a, cidr: 198.18.1.0/26, state: confirmed}
---
apiVersion: projectcalico.org/v3
kind: BlockAffinity
metadata: {name: node-b-198-18-2-0-26}
spec: {node: node-b, cidr: 198.18.2.0/26, state: confirmed}
---
apiVersion: projectcalico.org/v3
kind: BlockAffinity
metadata: {name: node-c-198-18-3-0-26}
spec: {node: node-c, cidr: 198.18.3.0/26, state: confirmed}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor1}
spec: {peerIP: 198.51.100.1, asNumber: 65001}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor2}
spec: {peerIP: 198.51.100.2, asNumber: 65002, filters: [tor2-in]}
---
apiVersion: projectcalico.org/v3
kind: BGPFilter
metadata: {name: tor2-in}
spec:
  importV4:
  - {cidr: 198.19.9.0/24, matchOperator: Equal, action: Reject}
"#;

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

struct Host {
    ns: Netns,
    dir: PathBuf,
}

fn host(name: &str, sw: &Netns, dir: &Path, addr: &str) -> Host {
    let ns = ok(Netns::create(&format!("tsb-{name}")));
    ok(ns.veth_to("eth0", sw, &format!("sw-{name}")));
    ok(sw.ip(&["link", "set", &format!("sw-{name}"), "master", "br0"]));
    ok(ns.add_addr("eth0", addr));
    let dir = dir.join(name);
    ok(std::fs::create_dir_all(&dir));
    Host { ns, dir }
}

/// A node's unicast kernel routes of protocol `proto` as "prefix via hop metric N"
/// (blackholes, the own block's, left out).
fn kernel(n: &Host, proto: &str) -> BTreeSet<String> {
    let o = ok(n.ns.ip(&["-4", "route", "show", "proto", proto]));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.starts_with("blackhole"))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let after = |k: &str| {
                w.iter()
                    .position(|x| *x == k)
                    .and_then(|i| w.get(i + 1))
                    .copied()
                    .unwrap_or("-")
            };
            let metric = if l.contains(" metric ") {
                after("metric")
            } else {
                "0"
            };
            format!(
                "{} via {} metric {metric}",
                w.first().copied().unwrap_or(""),
                after("via")
            )
        })
        .collect()
}

/// The prefixes BIRD 2 (`birdc` of `peer`) holds from protocol `proto`.
fn received(peer: &Peer, proto: &str) -> BTreeSet<String> {
    peer.cli(&["show", "route", "protocol", proto])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.contains('/'))
        .map(String::from)
        .collect()
}

/// `set` without the routes to `prefix`.
fn without(set: &BTreeSet<String>, prefix: &str) -> BTreeSet<String> {
    set.iter()
        .filter(|r| !r.starts_with(&format!("{prefix} ")))
        .cloned()
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn tern_and_a_calico_bird_node_give_the_same_routes() {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail("side_by_side_lab", &reason);
        return;
    }
    if !tern_interop::have_program("bird") {
        tern_interop::skip_or_fail("side_by_side_lab", "bird (BIRD 2) is not installed");
        return;
    }
    let bird1 = PathBuf::from(std::env::var("TERN_BIRD1_DIR").unwrap_or(BIRD1_DIR.into()));
    let (bird1_bin, birdc1) = (bird1.join("usr/sbin/bird"), bird1.join("usr/sbin/birdc"));
    if !bird1_bin.exists() {
        tern_interop::skip_or_fail(
            "side_by_side_lab",
            &format!(
                "BIRD 1.6 is not at {} (scripts/setup.sh unpacks it)",
                bird1_bin.display()
            ),
        );
        return;
    }
    let tmp = ok(tempfile::tempdir());
    let sw = ok(Netns::create("tsb-sw"));
    ok(sw.add_bridge());
    let a = host("a", &sw, tmp.path(), "198.51.100.10/24");
    let b = host("b", &sw, tmp.path(), "198.51.100.11/24");
    let c = host("c", &sw, tmp.path(), "198.51.100.12/24");
    let t1 = host("t1", &sw, tmp.path(), "198.51.100.1/24");
    let t2 = host("t2", &sw, tmp.path(), "198.51.100.2/24");
    // Addresses inside the ToRs' prefixes, to ping.
    ok(t1.ns.add_addr("lo", "198.19.8.1/32"));
    ok(t2.ns.add_addr("lo", "198.19.10.1/32"));

    let tor1 = ok(Peer::start(Kind::Bird, &t1.ns, &t1.dir, TOR1));
    let tor2 = ok(Peer::start(Kind::Bird, &t2.ns, &t2.dir, TOR2));
    let node_b = ok(Peer::start(Kind::Bird, &b.ns, &b.dir, NODE_B));
    // node-c: BIRD 1.6 with confd's text.
    ok(std::fs::write(c.dir.join("bird.conf"), NODE_C));
    let ctl = c.dir.join("bird.ctl");
    let mut cmd = c.ns.command(&bird1_bin.to_string_lossy());
    cmd.arg("-f")
        .arg("-c")
        .arg(c.dir.join("bird.conf"))
        .arg("-s")
        .arg(&ctl)
        .arg("-P")
        .arg(c.dir.join("bird.pid"));
    let _bird1 = ok(Daemon::spawn("bird1.6", cmd, &c.dir.join("bird.log")));
    let birdc = |args: &[&str]| -> String {
        Command::new(&birdc1)
            .arg("-s")
            .arg(&ctl)
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    // node-a: tern.
    let cluster_file = tmp.path().join("cluster.yaml");
    ok(std::fs::write(&cluster_file, CLUSTER));
    ok(std::fs::write(
        a.dir.join("tern.yaml"),
        format!(
            "node: node-a\ndatastore: {{type: file, path: {}}}\ncontrol_socket: {}\nmetrics: 127.0.0.1:9474\nlog: info\n",
            cluster_file.display(),
            a.dir.join("tern.sock").display()
        ),
    ));
    let mut t = a.ns.command(TERN);
    t.args(["run", "--config"]).arg(a.dir.join("tern.yaml"));
    t.env("RUST_LOG", "info");
    let tern_log = a.dir.join("tern.log");
    let _tern = ok(Daemon::spawn(a.ns.name(), t, &tern_log));

    let learnt = || {
        set(&[
            // `ip route` prints 0.0.0.0/0 so.
            "default",
            "198.19.8.0/24",
            "198.19.10.0/24",
            "198.18.2.0/26",
        ])
    };
    let prefixes = |s: &BTreeSet<String>| -> BTreeSet<String> {
        s.iter()
            .filter_map(|r| r.split_whitespace().next())
            .map(String::from)
            .collect()
    };
    let to_tor = || set(&["198.18.1.0/26", "198.18.2.0/26", "198.18.3.0/26"]);
    let settled = || {
        let (ka, kc) = (kernel(&a, "201"), kernel(&c, "bird"));
        let mut want_a = learnt();
        want_a.insert("198.18.3.0/26".into());
        let mut want_c = learnt();
        want_c.insert("198.18.1.0/26".into());
        prefixes(&ka) == want_a
            && prefixes(&kc) == want_c
            && [&tor1, &tor2]
                .iter()
                .all(|t| received(t, "tern_a") == to_tor() && received(t, "calico_c") == to_tor())
            && received(&node_b, "Mesh_198_51_100_10") == set(&["198.18.1.0/26"])
            && received(&node_b, "Mesh_198_51_100_12") == set(&["198.18.3.0/26"])
    };
    let report = |what: &str| -> String {
        format!(
            "{what}\nnode-a (tern) kernel: {:?}\nnode-c (BIRD 1.6) kernel: {:?}\n\
             tor1 from a: {:?}, from c: {:?}\ntor2 from a: {:?}, from c: {:?}\n\
             node-b from a: {:?}, from c: {:?}\nBIRD 1.6 protocols:\n{}\nBIRD 1.6 routes:\n{}\n\
             BIRD 1.6 log:\n{}\ntern log:\n{}",
            kernel(&a, "201"),
            kernel(&c, "bird"),
            received(&tor1, "tern_a"),
            received(&tor1, "calico_c"),
            received(&tor2, "tern_a"),
            received(&tor2, "calico_c"),
            received(&node_b, "Mesh_198_51_100_10"),
            received(&node_b, "Mesh_198_51_100_12"),
            birdc(&["show", "protocols"]),
            birdc(&["show", "route", "all"]),
            std::fs::read_to_string(c.dir.join("bird.log")).unwrap_or_default(),
            std::fs::read_to_string(&tern_log).unwrap_or_default()
        )
    };
    if wait_for("both nodes settled", Duration::from_secs(60), settled).is_err() {
        panic!(
            "{}",
            report("tern and the Calico BIRD node do not hold the expected routes")
        );
    }
    // The same kernel routes, next hops and metrics included, the other's block aside.
    let (ka, kc) = (kernel(&a, "201"), kernel(&c, "bird"));
    assert_eq!(
        without(&ka, "198.18.3.0/26"),
        without(&kc, "198.18.1.0/26"),
        "{}",
        report("the kernel routes differ")
    );
    // Each other's block: the same metric (the priority both derive from LOCAL_PREF).
    let metric = |s: &BTreeSet<String>, p: &str| {
        s.iter()
            .find(|r| r.starts_with(&format!("{p} ")))
            .and_then(|r| r.rsplit(' ').next().map(String::from))
    };
    assert_eq!(
        metric(&ka, "198.18.3.0/26"),
        metric(&kc, "198.18.1.0/26"),
        "{}",
        report("the metrics of each other's block differ")
    );
    // Packets through both nodes' routes.
    for (n, name) in [(&a, "node-a (tern)"), (&c, "node-c (BIRD 1.6)")] {
        for target in ["198.19.8.1", "198.19.10.1"] {
            let o = ok(n.ns.exec("ping", &["-c", "1", "-W", "2", target]));
            assert!(
                o.status.success(),
                "{name} cannot ping {target}\n{}",
                report("ping failed")
            );
        }
    }
    println!(
        "side_by_side_lab: node-a (tern):\n  {}\nnode-c (BIRD 1.6):\n  {}",
        ka.iter().cloned().collect::<Vec<_>>().join("\n  "),
        kc.iter().cloned().collect::<Vec<_>>().join("\n  ")
    );
}
