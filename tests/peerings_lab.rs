//! Peerings Calico's confd accepts, with packets: one `tern run` node (node-a, AS
//! 64512, dual-stack, `bindMode: NodeIP`) and a BIRD 2 node (node-b) that peers with
//! it over IPv6 only, on one bridged LAN in network namespaces.
//!
//! node-b is a Calico node and the global BGPPeer names it by `peerIP`: as in confd,
//! the side whose peer has the greater address waits, so tern is passive and only
//! BIRD dials. The session reaching Established proves tern listens on its IPv6
//! address too (with one listener on the IPv4 address, BIRD's connection would be
//! refused). A second, node-specific BGPPeer to the same address with another
//! keepalive is a duplicate: confd keeps the global one, and so must tern, with a
//! warning naming both in its log.
//!
//! A second test puts a BIRD route server two hops away, reachable only through the
//! host route that BGPPeer `reachableBy` asks for. Skips without root or BIRD; fails
//! under CI=true.

#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::time::Duration;

use tern_interop::netns::Netns;
use tern_interop::peers::{wait_for, Kind, Peer};
use tern_interop::process::Daemon;

const TERN: &str = env!("CARGO_BIN_EXE_tern");

/// node-b: dials tern over IPv6 (BIRD is active by default).
const BIRD_NODE_B: &str = r#"log stderr all;
router id 198.51.100.11;
protocol device { }
protocol bgp tern { local 2001:db8:100::11 as 64512; neighbor 2001:db8:100::10 as 64512;
  hold time 9; keepalive time 3; connect retry time 1; error wait time 1,4;
  ipv6 { import all; export none; }; }
"#;

const CLUSTER: &str = r#"apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: 64512, nodeToNodeMeshEnabled: false, bindMode: NodeIP}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 198.51.100.10/24, ipv6Address: "2001:db8:100::10/64"}}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-b}
spec: {bgp: {ipv6Address: "2001:db8:100::11/64"}}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: to-b-global}
spec: {peerIP: "2001:db8:100::11", asNumber: 64512, keepaliveTime: 3s}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: a-to-b-node}
spec: {node: node-a, peerIP: "2001:db8:100::11", asNumber: 64512, keepaliveTime: 5s}
"#;

struct Host {
    ns: Netns,
    dir: PathBuf,
}

fn host(name: &str, sw: &Netns, dir: &Path, addrs: &[&str]) -> Host {
    let ns = Netns::create(&format!("tpe-{name}")).unwrap_or_else(|e| panic!("{e}"));
    ns.veth_to("eth0", sw, &format!("sw-{name}"))
        .unwrap_or_else(|e| panic!("{e}"));
    sw.ip(&["link", "set", &format!("sw-{name}"), "master", "br0"])
        .unwrap_or_else(|e| panic!("{e}"));
    for a in addrs {
        ns.add_addr("eth0", a).unwrap_or_else(|e| panic!("{e}"));
    }
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    Host { ns, dir }
}

fn log(n: &Host) -> String {
    std::fs::read_to_string(n.dir.join("tern.log")).unwrap_or_default()
}

#[test]
fn an_ipv6_peer_dials_a_node_ip_bound_dual_stack_node_and_a_duplicate_is_resolved() {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail("peerings_lab", &reason);
        return;
    }
    if !tern_interop::have_program("bird") {
        tern_interop::skip_or_fail("peerings_lab", "bird is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let sw = Netns::create("tpe-sw").unwrap_or_else(|e| panic!("{e}"));
    sw.add_bridge().unwrap_or_else(|e| panic!("{e}"));
    let node = host(
        "a",
        &sw,
        tmp.path(),
        &["198.51.100.10/24", "2001:db8:100::10/64"],
    );
    let b = host(
        "b",
        &sw,
        tmp.path(),
        &["198.51.100.11/24", "2001:db8:100::11/64"],
    );

    let cluster_file = tmp.path().join("cluster.yaml");
    std::fs::write(&cluster_file, CLUSTER).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        node.dir.join("tern.yaml"),
        format!(
            "node: node-a\ndatastore: {{type: file, path: {}}}\ncontrol_socket: {}\nmetrics: 127.0.0.1:9477\nlog: info\n",
            cluster_file.display(),
            node.dir.join("tern.sock").display()
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let bird =
        Peer::start(Kind::Bird, &b.ns, &b.dir, BIRD_NODE_B).unwrap_or_else(|e| panic!("{e}"));
    let mut c = node.ns.command(TERN);
    c.args(["run", "--config"]).arg(node.dir.join("tern.yaml"));
    c.env("RUST_LOG", "info");
    let _tern = Daemon::spawn(node.ns.name(), c, &node.dir.join("tern.log"))
        .unwrap_or_else(|e| panic!("{e}"));

    let fail = |what: &str| -> ! {
        let listening = node
            .ns
            .exec("ss", &["-ltnH"])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        panic!(
            "{what}\ntern listens on:\n{listening}\nBIRD:\n{}\n{}\ntern log:\n{}",
            bird.cli(&["show", "protocols", "all", "tern"])
                .unwrap_or_default(),
            bird.log(),
            log(&node)
        )
    };
    let up = || {
        log(&node).contains("BGP session established")
            && bird
                .cli(&["show", "protocols", "tern"])
                .is_ok_and(|s| s.contains("Established"))
    };
    if wait_for("the IPv6 session", Duration::from_secs(40), up).is_err() {
        fail("BIRD's IPv6 connection to tern did not reach Established");
    }
    // Both node addresses are bound, not the wildcard.
    let listening = node
        .ns
        .exec("ss", &["-ltnH"])
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    if !(listening.contains("198.51.100.10:179") && listening.contains("[2001:db8:100::10]:179")) {
        fail("tern does not listen on both node addresses");
    }
    // The duplicate: the global BGPPeer wins, the warning names both.
    let l = log(&node);
    let resolved = l.lines().any(|line| {
        line.contains("BGPPeer to-b-global is used")
            && line.contains("BGPPeer a-to-b-node is ignored")
            && line.contains("a global peering wins over a node-specific one")
    });
    if !resolved {
        fail("no warning naming both duplicate BGPPeers");
    }
}

/// The peer behind a router: BIRD at 203.0.113.2, two hops from tern.
const BIRD_BEHIND: &str = r#"log stderr all;
router id 203.0.113.2;
protocol device { }
protocol bgp tern { local 203.0.113.2 as 65010; neighbor 198.51.100.10 as 64512; multihop;
  hold time 9; keepalive time 3; connect retry time 1; error wait time 1,4;
  ipv4 { import none; export none; }; }
"#;

/// The cluster; `{RB}` is the BGPPeer's `reachableBy` setting (or nothing).
const CLUSTER_BEHIND: &str = r#"apiVersion: projectcalico.org/v3
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
spec: {peerIP: 203.0.113.2, asNumber: 65010, keepaliveTime: 3s{RB}}
"#;

/// BGPPeer `reachableBy` (confd's static `route <peerIP>/32 via <reachableBy>`): tern
/// (198.51.100.10) has no route to the route server 203.0.113.2 except the one
/// `reachableBy: 198.51.100.254` asks for, through a router namespace. The host route
/// is in the kernel (tern's protocol, 201), packets cross, the session comes up; the
/// field removed live, the route goes.
#[test]
fn a_peer_behind_a_gateway_is_reached_through_reachable_by() {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail("peerings_lab", &reason);
        return;
    }
    if !tern_interop::have_program("bird") {
        tern_interop::skip_or_fail("peerings_lab", "bird is not installed");
        return;
    }
    let ok = |r: Result<std::process::Output, _>| match r {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    };
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let a = Netns::create("tpr-a").unwrap_or_else(|e| panic!("{e}"));
    let r = Netns::create("tpr-r").unwrap_or_else(|e| panic!("{e}"));
    let p = Netns::create("tpr-p").unwrap_or_else(|e| panic!("{e}"));
    a.veth_to("eth0", &r, "eth0")
        .unwrap_or_else(|e| panic!("{e}"));
    r.veth_to("eth1", &p, "eth0")
        .unwrap_or_else(|e| panic!("{e}"));
    for (ns, ifname, addr) in [
        (&a, "eth0", "198.51.100.10/24"),
        (&r, "eth0", "198.51.100.254/24"),
        (&r, "eth1", "203.0.113.1/24"),
        (&p, "eth0", "203.0.113.2/24"),
    ] {
        ns.add_addr(ifname, addr).unwrap_or_else(|e| panic!("{e}"));
    }
    ok(r.exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"]));
    ok(p.ip(&["route", "add", "198.51.100.0/24", "via", "203.0.113.1"]));
    let dir = |n: &str| {
        let d = tmp.path().join(n);
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
        d
    };
    let (adir, pdir) = (dir("a"), dir("p"));
    let cluster_file = tmp.path().join("cluster.yaml");
    let write_cluster = |rb: &str| {
        std::fs::write(&cluster_file, CLUSTER_BEHIND.replace("{RB}", rb))
            .unwrap_or_else(|e| panic!("{e}"));
    };
    write_cluster(", reachableBy: 198.51.100.254");
    std::fs::write(
        adir.join("tern.yaml"),
        format!(
            "node: node-a\ndatastore: {{type: file, path: {}}}\ncontrol_socket: {}\nmetrics: 127.0.0.1:9476\nlog: info\n",
            cluster_file.display(),
            adir.join("tern.sock").display()
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let bird = Peer::start(Kind::Bird, &p, &pdir, BIRD_BEHIND).unwrap_or_else(|e| panic!("{e}"));
    let mut c = a.command(TERN);
    c.args(["run", "--config"]).arg(adir.join("tern.yaml"));
    c.env("RUST_LOG", "info");
    let tern_log = adir.join("tern.log");
    let _tern = Daemon::spawn(a.name(), c, &tern_log).unwrap_or_else(|e| panic!("{e}"));
    let host_route = || {
        let o = ok(a.ip(&["-4", "route", "show", "proto", "201", "203.0.113.2"]));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let fail = |what: &str| -> ! {
        let routes = a
            .ip(&["-4", "route", "show", "table", "all"])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        panic!(
            "{what}\nnode-a routes:\n{routes}\nBIRD:\n{}\ntern log:\n{}",
            bird.cli(&["show", "protocols", "all", "tern"])
                .unwrap_or_default(),
            std::fs::read_to_string(&tern_log).unwrap_or_default()
        )
    };
    let up = || {
        host_route().contains("via 198.51.100.254")
            && bird
                .cli(&["show", "protocols", "tern"])
                .is_ok_and(|s| s.contains("Established"))
    };
    if wait_for(
        "the session through the gateway",
        Duration::from_secs(40),
        up,
    )
    .is_err()
    {
        fail("no host route to 203.0.113.2 via 198.51.100.254, or no session through it");
    }
    let ping = ok(a.exec("ping", &["-c", "1", "-W", "2", "203.0.113.2"]));
    if !ping.status.success() {
        fail("203.0.113.2 does not answer a ping through the route");
    }
    // Reached through its gateway, as configured: no layer-2 warning.
    let diagnose = std::process::Command::new(TERN)
        .args(["diagnose", "--socket"])
        .arg(adir.join("tern.sock"))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    if diagnose.contains("[warning] no-layer2-reachability") {
        fail(&format!(
            "a layer-2 warning for the route server:\n{diagnose}"
        ));
    }
    println!("peerings_lab: reachableBy: {}", host_route());
    // Removed live: the route goes (the session, with no way to the peer left, will
    // follow by its hold timer; that is not waited for).
    write_cluster("");
    if wait_for("the host route removed", Duration::from_secs(20), || {
        host_route().is_empty()
    })
    .is_err()
    {
        fail("the host route stayed after reachableBy was removed");
    }
}
