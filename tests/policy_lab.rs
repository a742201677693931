//! Calico's routing policy applied by the daemon, with packets: one `tern run` node
//! (node-a, AS 64512) with two eBGP top-of-rack routers (BIRD in AS 65001, FRR in AS
//! 65002, each announcing a prefix from 198.18.0.0/15 and a default route) and one
//! iBGP mesh peer (BIRD as node-b), on one bridged LAN in network namespaces.
//!
//! Checks: neither ToR learns the other's prefix from tern (no transit) while both get
//! tern's block; the mesh peer gets the block but none of the ToRs' routes; a BGPFilter
//! `importV4` rule rejecting the FRR ToR's prefix keeps it out of tern's kernel table
//! while the BIRD ToR's prefix is installed and pingable; removing the rule from the
//! file datastore (`tern reload`) brings the prefix in with no session reset (no new
//! "BGP session established" in tern's log); before, `tern routes --received` shows
//! the prefix rejected by the rule, and at the edit the kept path is judged again. Skips without root, BIRD or FRR; fails
//! under CI=true.

#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tern_interop::netns::Netns;
use tern_interop::peers::{wait_for, Kind, Peer};
use tern_interop::process::Daemon;

const TERN: &str = env!("CARGO_BIN_EXE_tern");

const BIRD_TOR: &str = r#"log stderr all;
router id 198.51.100.1;
protocol device { }
protocol static { ipv4; route 198.18.8.0/24 blackhole; route 0.0.0.0/0 blackhole; }
protocol bgp tern { local as 65001; neighbor 198.51.100.10 as 64512; hold time 9;
  keepalive time 3; connect retry time 1; error wait time 1,4;
  ipv4 { import all; export where source = RTS_STATIC; }; }
"#;

const FRR_TOR: &str = "frr defaults traditional
hostname tor2
log stdout
router bgp 65002
 bgp router-id 198.51.100.2
 no bgp ebgp-requires-policy
 no bgp network import-check
 no bgp default ipv4-unicast
 timers bgp 3 9
 neighbor 198.51.100.10 remote-as 64512
 neighbor 198.51.100.10 timers connect 1
 address-family ipv4 unicast
  network 198.18.9.0/24
  network 0.0.0.0/0
  neighbor 198.51.100.10 activate
 exit-address-family
";

const BIRD_MESH: &str = r#"log stderr all;
router id 198.51.100.11;
protocol device { }
protocol bgp tern { local as 64512; neighbor 198.51.100.10 as 64512; hold time 9;
  keepalive time 3; connect retry time 1; error wait time 1,4;
  ipv4 { import all; export none; }; }
"#;

/// The cluster; `{FILTER}` is the BGPFilter's rule list.
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
kind: BGPPeer
metadata: {name: tor-1}
spec: {peerIP: 198.51.100.1, asNumber: 65001, holdTime: 9s, keepaliveTime: 3s}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor-2}
spec: {peerIP: 198.51.100.2, asNumber: 65002, holdTime: 9s, keepaliveTime: 3s, filters: [tor-2-in]}
---
apiVersion: projectcalico.org/v3
kind: BGPFilter
metadata: {name: tor-2-in}
spec:
  importV4: {FILTER}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pods}
spec: {cidr: 198.18.4.0/24, blockSize: 26}
---
apiVersion: projectcalico.org/v3
kind: BlockAffinity
metadata: {name: node-a-198-18-4-0-26}
spec: {node: node-a, cidr: 198.18.4.0/26, state: confirmed}
"#;

const REJECT_TOR2: &str = "[{cidr: 198.18.9.0/24, matchOperator: Equal, action: Reject}]";

fn cluster(filter: &str) -> String {
    CLUSTER.replace("{FILTER}", filter)
}

struct Host {
    ns: Netns,
    dir: PathBuf,
}

fn host(name: &str, sw: &Netns, dir: &Path, addr: &str) -> Host {
    let ns = Netns::create(&format!("tpl-{name}")).unwrap_or_else(|e| panic!("{e}"));
    ns.veth_to("eth0", sw, &format!("sw-{name}"))
        .unwrap_or_else(|e| panic!("{e}"));
    sw.ip(&["link", "set", &format!("sw-{name}"), "master", "br0"])
        .unwrap_or_else(|e| panic!("{e}"));
    ns.add_addr("eth0", addr).unwrap_or_else(|e| panic!("{e}"));
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    Host { ns, dir }
}

/// tern's routes in the node's kernel.
fn tern_routes(n: &Host) -> String {
    let o =
        n.ns.ip(&["-4", "route", "show", "proto", "201"])
            .unwrap_or_else(|e| panic!("{e}"));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn log(n: &Host) -> String {
    std::fs::read_to_string(n.dir.join("tern.log")).unwrap_or_default()
}

fn established(n: &Host) -> usize {
    log(n).matches("BGP session established").count()
}

/// `tern ARGS` against the node's socket; its output (exit code 0 asserted).
fn cli(n: &Host, args: &[&str]) -> String {
    let out = Command::new(TERN)
        .args(args)
        .arg("--socket")
        .arg(n.dir.join("tern.sock"))
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "tern {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn reload(n: &Host) {
    let out = Command::new(TERN)
        .args(["reload", "--socket"])
        .arg(n.dir.join("tern.sock"))
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "tern reload: {out:?}");
}

/// What each router has, as its CLI prints it.
struct Tables {
    tor1: String,
    tor2: String,
    mesh: String,
}

fn tables(tor1: &Peer, tor2: &Peer, mesh: &Peer) -> Tables {
    Tables {
        tor1: tor1.cli(&["show", "route"]).unwrap_or_default(),
        tor2: tor2.cli(&["show bgp ipv4 unicast"]).unwrap_or_default(),
        mesh: mesh.cli(&["show", "route"]).unwrap_or_default(),
    }
}

#[test]
fn calico_policy_filters_transit_and_a_bgpfilter_edit_applies_live() {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail("policy_lab", &reason);
        return;
    }
    for p in ["bird", "/usr/lib/frr/bgpd", "vtysh"] {
        if !tern_interop::have_program(p) {
            tern_interop::skip_or_fail("policy_lab", &format!("{p} is not installed"));
            return;
        }
    }
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let sw = Netns::create("tpl-sw").unwrap_or_else(|e| panic!("{e}"));
    sw.add_bridge().unwrap_or_else(|e| panic!("{e}"));
    let node = host("a", &sw, tmp.path(), "198.51.100.10/24");
    node.ns
        .add_addr("lo", "198.18.4.1/32")
        .unwrap_or_else(|e| panic!("{e}"));
    let t1 = host("t1", &sw, tmp.path(), "198.51.100.1/24");
    // The BIRD ToR answers pings from the node's pod address.
    t1.ns
        .add_addr("lo", "198.18.8.1/32")
        .unwrap_or_else(|e| panic!("{e}"));
    t1.ns
        .ip(&["route", "add", "198.18.4.0/26", "via", "198.51.100.10"])
        .unwrap_or_else(|e| panic!("{e}"));
    let t2 = host("t2", &sw, tmp.path(), "198.51.100.2/24");
    let mesh = host("b", &sw, tmp.path(), "198.51.100.11/24");

    let cluster_file = tmp.path().join("cluster.yaml");
    std::fs::write(&cluster_file, cluster(REJECT_TOR2)).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        node.dir.join("tern.yaml"),
        format!(
            "node: node-a\ndatastore: {{type: file, path: {}}}\ncontrol_socket: {}\nmetrics: 127.0.0.1:9477\nlog: info\n",
            cluster_file.display(),
            node.dir.join("tern.sock").display()
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let bird1 =
        Peer::start(Kind::Bird, &t1.ns, &t1.dir, BIRD_TOR).unwrap_or_else(|e| panic!("{e}"));
    let frr = Peer::start(Kind::Frr, &t2.ns, &t2.dir, FRR_TOR).unwrap_or_else(|e| panic!("{e}"));
    let bird_mesh =
        Peer::start(Kind::Bird, &mesh.ns, &mesh.dir, BIRD_MESH).unwrap_or_else(|e| panic!("{e}"));
    let mut c = node.ns.command(TERN);
    c.args(["run", "--config"]).arg(node.dir.join("tern.yaml"));
    c.env("RUST_LOG", "info");
    let _tern = Daemon::spawn(node.ns.name(), c, &node.dir.join("tern.log"))
        .unwrap_or_else(|e| panic!("{e}"));

    // Converged: every router has tern's block, tern has the BIRD ToR's prefix.
    let ready = || {
        let t = tables(&bird1, &frr, &bird_mesh);
        t.tor1.contains("198.18.4.0/26")
            && t.tor2.contains("198.18.4.0/26")
            && t.mesh.contains("198.18.4.0/26")
            && tern_routes(&node).contains("198.18.8.0/24 via 198.51.100.1")
            && established(&node) == 3
    };
    let fail = |what: &str| -> ! {
        let t = tables(&bird1, &frr, &bird_mesh);
        panic!(
            "{what}\ntern's kernel routes:\n{}\nBIRD ToR:\n{}\nFRR ToR:\n{}\nmesh peer:\n{}\ntern log:\n{}",
            tern_routes(&node),
            t.tor1,
            t.tor2,
            t.mesh,
            log(&node)
        )
    };
    if wait_for("the lab", Duration::from_secs(40), ready).is_err() {
        fail("not converged");
    }
    // The filter: the FRR ToR's prefix is not installed; the default route is (from
    // either ToR), and the BIRD ToR's prefix answers pings.
    let routes = tern_routes(&node);
    if routes.contains("198.18.9.0/24") || !routes.contains("default") {
        fail("the BGPFilter rejects 198.18.9.0/24 only");
    }
    let ping = node
        .ns
        .exec(
            "ping",
            &["-c", "1", "-W", "2", "-I", "198.18.4.1", "198.18.8.1"],
        )
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ping {
        fail("198.18.8.1 (the BIRD ToR's prefix) does not answer from the pod address");
    }
    // No transit, and nothing of the ToRs for the mesh peer.
    let no_leaks = |t: &Tables| {
        !t.tor1.contains("198.18.9.0/24")
            && !t.tor2.contains("198.18.8.0/24")
            && !t.mesh.contains("198.18.8.0/24")
            && !t.mesh.contains("198.18.9.0/24")
            && !t.mesh.contains("0.0.0.0/0")
    };
    if !no_leaks(&tables(&bird1, &frr, &bird_mesh)) {
        fail("a ToR route left tern toward another peer");
    }

    // What the FRR ToR sent, its prefix rejected by the BGPFilter rule.
    let received = cli(
        &node,
        &["routes", "--received", "198.51.100.2", "-o", "json"],
    );
    if !received.contains("\"rejected_by\": \"import policy: BGPFilter tor-2-in importV4[0]\"") {
        fail(&format!(
            "tern routes --received 198.51.100.2 does not show the rejection:\n{received}"
        ));
    }

    // The rule removed live: the prefix comes in, no session is reset.
    let sessions = established(&node);
    std::fs::write(&cluster_file, cluster("[]")).unwrap_or_else(|e| panic!("{e}"));
    reload(&node);
    if wait_for(
        "198.18.9.0/24 in tern's FIB",
        Duration::from_secs(20),
        || tern_routes(&node).contains("198.18.9.0/24 via 198.51.100.2"),
    )
    .is_err()
    {
        fail("the prefix did not come in after the filter edit");
    }
    if established(&node) != sessions || log(&node).contains("BGP session down") {
        fail("a session was reset by the filter edit");
    }
    if !log(&node).contains("route policy replaced") {
        fail("no policy replacement logged");
    }
    // The kept rejected path was judged again at once, before any ROUTE-REFRESH answer.
    if !log(&node).contains("1 kept path(s) rejected before judged again, 1 now accepted") {
        fail("the kept rejected path was not judged again");
    }
    // Still no transit for the newly accepted prefix.
    std::thread::sleep(Duration::from_secs(1));
    if !no_leaks(&tables(&bird1, &frr, &bird_mesh)) {
        fail("a ToR route left tern after the filter edit");
    }
}
