//! Felix's routes stay Felix's, with a real kernel: one `tern run` node (node-a,
//! 198.51.100.10, AS 64512) and an eBGP router (BIRD, AS 65001) announcing a block of
//! each of three pools, in network namespaces. A VXLAN pool (198.18.0.0/24, Felix's
//! `vxlan.calico`), an IPIP pool (198.18.2.0/24; `tunl0` is a veth stand-in, this
//! kernel may have no ipip module) and a plain pool (198.18.3.0/24);
//! `ipv4NormalRoutePriority: 300`.
//!
//! A metric-0 route of tern's for the plain block is in the kernel before tern starts
//! (an earlier version's). Checks, in the node's namespace (`ip route show proto 201`):
//! the VXLAN block is in
//! tern's RIB but not in the kernel; the IPIP block goes `via … dev tunl0 onlink` and the
//! plain one `via … dev eth0` (the metric-0 route gone), both with metric 2147483547
//! (what v3.32's BIRD sets as `krt_metric` for an eBGP route: `BIRD_INT_MAX - 100`, the
//! LOCAL_PREF BIRD gives eBGP routes; the normal priority, 300 here, is for routes
//! without one); 198.18.9.0/24, outside every pool, gets 77 from a
//! BGPFilter's import `setPriority` (BIRD's `krt_metric` set on import, which the
//! kernel export keeps).
//!
//! Then, live (the cluster file edited, no restart, no session reset): the normal
//! priority becomes 500 and the IPIP pool turns VXLAN. The IPIP block's route goes
//! (now Felix's) and the plain block's stays as it was (its metric comes from its
//! LOCAL_PREF), with the BGP session still up. Then tern is restarted with `programClusterRoutes: Disabled` (v3.32:
//! Felix programs every pool's routes): the plain route it had installed is removed,
//! while the route outside every pool stays.
//! Skips without root or BIRD; fails under CI=true.

#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tern_interop::netns::Netns;
use tern_interop::peers::{wait_for, Kind, Peer};
use tern_interop::process::Daemon;

const TERN: &str = env!("CARGO_BIN_EXE_tern");

const BIRD: &str = r#"log stderr all;
router id 198.51.100.1;
protocol device { }
protocol static { ipv4; route 198.18.0.0/26 blackhole; route 198.18.2.0/26 blackhole;
  route 198.18.3.0/26 blackhole; route 198.18.9.0/24 blackhole; }
protocol bgp tern { local as 65001; neighbor 198.51.100.10 as 64512; hold time 9;
  keepalive time 3; connect retry time 1; error wait time 1,4;
  ipv4 { import none; export where source = RTS_STATIC; }; }
"#;

/// The cluster; `{PCR}` is the BGPConfiguration's `programClusterRoutes`.
const CLUSTER: &str = r#"apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: 64512, ipv4NormalRoutePriority: {PRIO}, programClusterRoutes: {PCR}}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 198.51.100.10/24}}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor}
spec: {peerIP: 198.51.100.1, asNumber: 65001, holdTime: 9s, keepaliveTime: 3s, filters: [fabric]}
---
apiVersion: projectcalico.org/v3
kind: BGPFilter
metadata: {name: fabric}
spec:
  importV4:
  - {cidr: 198.18.9.0/24, matchOperator: Equal, action: Accept, operations: [{setPriority: {value: 77}}]}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: vxlan}
spec: {cidr: 198.18.0.0/24, blockSize: 26, vxlanMode: Always}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: ipip}
spec: {cidr: 198.18.2.0/24, blockSize: 26, {IPIP}}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: plain}
spec: {cidr: 198.18.3.0/24, blockSize: 26}
"#;

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

struct Host {
    ns: Netns,
    dir: PathBuf,
}

fn host(name: &str, sw: &Netns, dir: &Path, addr: &str) -> Host {
    let ns = ok(Netns::create(&format!("tfr-{name}")));
    ok(ns.veth_to("eth0", sw, &format!("sw-{name}")));
    ok(sw.ip(&["link", "set", &format!("sw-{name}"), "master", "br0"]));
    ok(ns.add_addr("eth0", addr));
    let dir = dir.join(name);
    ok(std::fs::create_dir_all(&dir));
    Host { ns, dir }
}

/// tern's route to `prefix` in the node's kernel (`ip route show` line, or "").
fn route(n: &Host, prefix: &str) -> String {
    let o = ok(n.ns.ip(&["-4", "route", "show", "proto", "201", prefix]));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn all_routes(n: &Host) -> String {
    let o = ok(n.ns.ip(&["-4", "route", "show", "table", "all"]));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn log(n: &Host, run: &str) -> String {
    std::fs::read_to_string(n.dir.join(format!("tern-{run}.log"))).unwrap_or_default()
}

/// Whether tern's Loc-RIB holds `prefix` (`tern routes`).
fn in_rib(n: &Host, prefix: &str) -> bool {
    let out = ok(Command::new(TERN)
        .args(["routes", prefix, "-o", "json", "--socket"])
        .arg(n.dir.join("tern.sock"))
        .output());
    String::from_utf8_lossy(&out.stdout).contains(prefix)
}

/// The cluster with `programClusterRoutes: pcr`, the normal priority `prio`, and the
/// second pool IPIP (else VXLAN).
fn cluster(pcr: &str, prio: u32, ipip: bool) -> String {
    let mode = if ipip {
        "ipipMode: Always"
    } else {
        "vxlanMode: Always"
    };
    CLUSTER
        .replace("{PCR}", pcr)
        .replace("{PRIO}", &prio.to_string())
        .replace("{IPIP}", mode)
}

fn start_tern(node: &Host, cluster_file: &Path, pcr: &str, prio: u32, ipip: bool) -> Daemon {
    ok(std::fs::write(cluster_file, cluster(pcr, prio, ipip)));
    let mut c = node.ns.command(TERN);
    c.args(["run", "--config"]).arg(node.dir.join("tern.yaml"));
    c.env("RUST_LOG", "info");
    ok(Daemon::spawn(
        node.ns.name(),
        c,
        &node.dir.join(format!("tern-{pcr}.log")),
    ))
}

#[test]
fn felix_pools_get_no_kernel_route_and_the_others_get_the_configured_metric() {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail("felix_routes_lab", &reason);
        return;
    }
    if !tern_interop::have_program("bird") {
        tern_interop::skip_or_fail("felix_routes_lab", "bird is not installed");
        return;
    }
    let tmp = ok(tempfile::tempdir());
    let sw = ok(Netns::create("tfr-sw"));
    ok(sw.add_bridge());
    let node = host("a", &sw, tmp.path(), "198.51.100.10/24");
    let tor = host("t", &sw, tmp.path(), "198.51.100.1/24");
    // The tunl0 stand-in.
    ok(node.ns.add_tunl0_standin());
    let cluster_file = tmp.path().join("cluster.yaml");
    ok(std::fs::write(
        node.dir.join("tern.yaml"),
        format!(
            "node: node-a\ndatastore: {{type: file, path: {}}}\ncontrol_socket: {}\nmetrics: 127.0.0.1:9478\nlog: info\n",
            cluster_file.display(),
            node.dir.join("tern.sock").display()
        ),
    ));
    // A route left by an earlier tern that wrote metric 0: the new metric must replace
    // it, not sit beside it (the kernel keys routes by metric too).
    ok(node.ns.ip(&[
        "route",
        "add",
        "198.18.3.0/26",
        "via",
        "198.51.100.1",
        "proto",
        "201",
    ]));
    let _bird = ok(Peer::start(Kind::Bird, &tor.ns, &tor.dir, BIRD));
    let tern = start_tern(&node, &cluster_file, "Enabled", 300, true);
    let fail = |what: &str| -> ! {
        panic!(
            "{what}\nkernel routes:\n{}\ntern log:\n{}",
            all_routes(&node),
            log(&node, "Enabled")
        )
    };

    let ipip = || {
        let r = route(&node, "198.18.2.0/26");
        r.contains("via 198.51.100.1 dev tunl0")
            && r.contains("onlink")
            && r.contains("metric 2147483547")
    };
    let plain = || {
        let r = route(&node, "198.18.3.0/26");
        r.contains("via 198.51.100.1 dev eth0")
            && !r.contains("onlink")
            && r.contains("metric 2147483547")
            && r.lines().count() == 1
    };
    let outside = || route(&node, "198.18.9.0/24").contains("metric 77");
    if wait_for("the IPIP and plain routes", Duration::from_secs(40), || {
        ipip() && plain() && outside()
    })
    .is_err()
    {
        fail("the IPIP route (tunl0, onlink) or the plain route, with metric 2147483547, or the fabric route with the import setPriority's 77, is missing");
    }
    // The VXLAN block was received (it is in the RIB) but is Felix's to program.
    if !in_rib(&node, "198.18.0.0/26") {
        fail("the VXLAN block never reached tern's RIB: the check below would prove nothing");
    }
    if !route(&node, "198.18.0.0/26").is_empty() || all_routes(&node).contains("198.18.0.0/26") {
        fail("tern installed a kernel route for the VXLAN pool's block");
    }
    println!(
        "felix_routes_lab: Enabled:\n  {}\n  {}\n  {}",
        route(&node, "198.18.2.0/26"),
        route(&node, "198.18.3.0/26"),
        route(&node, "198.18.9.0/24")
    );

    // Live: priority 500, the IPIP pool turned VXLAN. The file datastore sees the
    // edit; routes change without a restart or a session reset.
    let up_before = log(&node, "Enabled").matches("session established").count();
    ok(std::fs::write(
        &cluster_file,
        cluster("Enabled", 500, false),
    ));
    let live = || {
        let r = route(&node, "198.18.3.0/26");
        route(&node, "198.18.2.0/26").is_empty()
            && r.contains("metric 2147483547")
            && r.lines().count() == 1
            && outside()
    };
    if wait_for("the live change", Duration::from_secs(30), live).is_err() {
        fail("after the live edit (priority 500, IPIP pool turned VXLAN) the plain route changed, or the old IPIP block's route is still there");
    }
    if !in_rib(&node, "198.18.2.0/26") {
        fail("the old IPIP block left tern's RIB: its kernel route going proves nothing");
    }
    let up_after = log(&node, "Enabled").matches("session established").count();
    assert_eq!(
        up_before,
        up_after,
        "the live change reset the session\n{}",
        log(&node, "Enabled")
    );
    println!(
        "felix_routes_lab: live edit:\n  {}\n  {}",
        route(&node, "198.18.3.0/26"),
        route(&node, "198.18.9.0/24")
    );

    // Restarted with programClusterRoutes: Disabled: the pool routes it left behind go
    // once the restart has settled; the fabric route stays.
    drop(tern);
    let _tern = start_tern(&node, &cluster_file, "Disabled", 500, true);
    let settled = || {
        route(&node, "198.18.2.0/26").is_empty()
            && route(&node, "198.18.3.0/26").is_empty()
            && route(&node, "198.18.0.0/26").is_empty()
            && outside()
    };
    if wait_for(
        "Felix's routes left to Felix",
        Duration::from_secs(60),
        settled,
    )
    .is_err()
    {
        panic!(
            "with programClusterRoutes: Disabled tern still has pool routes (or lost the fabric route)\nkernel routes:\n{}\ntern log:\n{}",
            all_routes(&node),
            log(&node, "Disabled")
        );
    }
    if !in_rib(&node, "198.18.2.0/26") {
        panic!("the IPIP block is not in tern's RIB after the restart: nothing was tested");
    }
}
