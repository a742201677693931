//! The daemon's kernel routes in the lab: one `tern run` node peering over eth0 with a
//! BIRD router, in namespaces the tests create.
//!
//! - A fault: the interface a learnt route's next hop sits on disappears. BIRD
//!   announces 198.18.200.0/24 with a next hop on a second link (eth1). Deleting eth1
//!   takes the kernel route with it, and the kernel then refuses tern's attempts to put
//!   it back: the BGP session and the RIB entry must stay, `tern fib` must list the
//!   route as missing and `tern diagnose` must say the kernel refused it, in the
//!   kernel's words. Re-creating the link must bring the route back by itself and
//!   packets must flow again: nothing lost. Namespaces `t9m-*`.
//! - IPIP pools: routes inside a pool with ipipMode Always, or CrossSubnet toward a
//!   next hop off the node's subnet, go `via NH dev tunl0 onlink`, as Calico's BIRD
//!   programs them; the rest go plainly. Without tunl0 they are reported, not sent
//!   plainly; once tunl0 exists they are installed. This kernel has no ipip module, so
//!   tunl0 is a stand-in veth: what is checked is the routes tern asks for, not the
//!   encapsulation. Namespaces `tip-*`.

#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tern_interop::netns::Netns;
use tern_interop::peers::{wait_for, Kind, Peer};
use tern_interop::process::Daemon;

const TERN: &str = env!("CARGO_BIN_EXE_tern");
const PREFIX: &str = "198.18.200.0/24";

/// BIRD announcing `statics` (BIRD `route ...;` lines), with `set` applied on export
/// (e.g. a different next hop).
fn bird_conf(statics: &str, set: &str) -> String {
    format!(
        r#"log stderr all;
router id 198.51.100.1;
protocol device {{ }}
protocol static {{ ipv4; {statics} }}
protocol bgp node {{ local as 65001; neighbor 198.51.100.10 as 64512; hold time 9; keepalive time 3;
  connect retry time 1; error wait time 1,4;
  ipv4 {{ import none; export filter {{ if source != RTS_STATIC then reject; {set} accept; }}; }}; }}
"#
    )
}

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
metadata: {name: tor}
spec: {peerIP: 198.51.100.1, asNumber: 65001, holdTime: 9s, keepaliveTime: 3s}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pods}
spec: {cidr: 198.18.0.0/20, blockSize: 26}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: ipip-always}
spec: {cidr: 198.18.16.0/20, blockSize: 26, ipipMode: Always}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: ipip-cross-subnet}
spec: {cidr: 198.18.32.0/20, blockSize: 26, ipipMode: CrossSubnet}
"#;

/// A tern node (`<p>-node`, eth0 198.51.100.10/24) peering with BIRD (`<p>-tor`,
/// 198.51.100.1), and what must live as long as the test.
struct Rig {
    node: Netns,
    tor: Netns,
    socket: PathBuf,
    log_path: PathBuf,
    cluster: PathBuf,
    bird: Peer,
    _tern: Daemon,
    _tmp: tempfile::TempDir,
}

impl Rig {
    /// None when the lab cannot run here (said loudly; a failure under CI=true).
    /// `wire` adds links and addresses before anything starts.
    fn start(
        test: &str,
        ns_prefix: &str,
        bird: &str,
        wire: impl FnOnce(&Netns, &Netns),
    ) -> Option<Rig> {
        if let Err(reason) = tern_interop::lab_available() {
            tern_interop::skip_or_fail(test, &reason);
            return None;
        }
        if !tern_interop::have_program("bird") {
            tern_interop::skip_or_fail(test, "bird is not installed");
            return None;
        }
        let tmp = ok(tempfile::tempdir());
        let node = ok(Netns::create(&format!("{ns_prefix}-node")));
        let tor = ok(Netns::create(&format!("{ns_prefix}-tor")));
        ok(node.veth_to("eth0", &tor, "eth0"));
        ok(node.add_addr("eth0", "198.51.100.10/24"));
        ok(tor.add_addr("eth0", "198.51.100.1/24"));
        wire(&node, &tor);
        let dir: PathBuf = tmp.path().to_path_buf();
        let socket = dir.join("tern.sock");
        ok(std::fs::write(dir.join("cluster.yaml"), CLUSTER));
        ok(std::fs::write(
            dir.join("tern.yaml"),
            format!(
                "node: node-a\ndatastore: {{type: file, path: {}}}\ncontrol_socket: {}\nlog: info\n",
                dir.join("cluster.yaml").display(),
                socket.display()
            ),
        ));
        let tor_dir = dir.join("tor");
        ok(std::fs::create_dir_all(&tor_dir));
        let bird = ok(Peer::start(Kind::Bird, &tor, &tor_dir, bird));
        let mut c = node.command(TERN);
        c.args(["run", "--config"]).arg(dir.join("tern.yaml"));
        let log_path = dir.join("tern.log");
        let tern = ok(Daemon::spawn(node.name(), c, &log_path));
        Some(Rig {
            node,
            tor,
            socket,
            log_path,
            cluster: dir.join("cluster.yaml"),
            bird,
            _tern: tern,
            _tmp: tmp,
        })
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn cli(&self, args: &[&str]) -> serde_json::Value {
        cli(&self.socket, args)
    }

    /// tern's kernel route for `prefix`, as `ip route` prints it.
    fn route(&self, prefix: &str) -> String {
        let o = ok(self
            .node
            .ip(&["-4", "route", "show", prefix, "proto", "201"]));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// Findings of `kind` about `prefix`.
    fn findings(&self, kind: &str, prefix: &str) -> Vec<serde_json::Value> {
        let d = self.cli(&["diagnose"]);
        d["findings"]
            .as_array()
            .map(|f| {
                f.iter()
                    .filter(|x| {
                        x["kind"] == kind
                            && x["subject"].as_str().is_some_and(|s| s.contains(prefix))
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

fn cli(socket: &Path, args: &[&str]) -> serde_json::Value {
    let out = ok(Command::new(TERN)
        .args(args)
        .args(["-o", "json", "--socket"])
        .arg(socket)
        .output());
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

/// The second link: node eth1 203.0.113.10/24 to router eth1 203.0.113.1/24.
fn link_eth1(node: &Netns, tor: &Netns) {
    ok(node.veth_to("eth1", tor, "eth1"));
    ok(node.add_addr("eth1", "203.0.113.10/24"));
    ok(tor.add_addr("eth1", "203.0.113.1/24"));
}

fn ping(node: &Netns) -> bool {
    node.exec("ping", &["-c", "1", "-W", "1", "198.18.200.1"])
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn in_list(v: &serde_json::Value, key: &str) -> bool {
    v[key]
        .as_array()
        .is_some_and(|a| a.iter().any(|r| r["prefix"] == PREFIX))
}

#[test]
fn a_vanished_interface_is_reported_and_its_route_comes_back_with_it() {
    let test = "fault_missing_interface";
    let conf = bird_conf(
        "route 198.18.200.0/24 blackhole;",
        "bgp_next_hop = 203.0.113.1;",
    );
    let Some(rig) = Rig::start(test, "t9m", &conf, |node, tor| {
        link_eth1(node, tor);
        ok(tor.add_addr("lo", "198.18.200.1/32"));
    }) else {
        return;
    };
    let (node, tor, socket, bird) = (&rig.node, &rig.tor, &rig.socket, &rig.bird);
    let log = || rig.log();

    let installed = || rig.route(PREFIX).contains("via 203.0.113.1 dev eth1");
    if wait_for(
        "the route in the kernel",
        Duration::from_secs(30),
        installed,
    )
    .is_err()
    {
        panic!(
            "{PREFIX} never installed: {:?}\ntern:\n{}\nBIRD:\n{}",
            rig.route(PREFIX),
            log(),
            bird.log()
        );
    }
    assert!(ping(node), "198.18.200.1 unreachable before the fault");

    // The fault: eth1 goes away (both ends of the veth).
    ok(node.ip(&["link", "del", "eth1"]));
    let refused = || {
        let d = cli(socket, &["diagnose"]);
        d["findings"].as_array().is_some_and(|f| {
            f.iter().any(|x| {
                x["kind"] == "route-refused"
                    && x["subject"].as_str().is_some_and(|s| s.contains(PREFIX))
            })
        })
    };
    if wait_for(
        "tern diagnose: route refused",
        Duration::from_secs(30),
        refused,
    )
    .is_err()
    {
        panic!(
            "no route-refused finding.\ndiagnose: {}\nfib: {}\nkernel: {:?}\ntern:\n{}",
            cli(socket, &["diagnose"]),
            cli(socket, &["fib"]),
            rig.route(PREFIX),
            log()
        );
    }
    let d = cli(socket, &["diagnose"]);
    let finding = d["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|x| x["kind"] == "route-refused").cloned())
        .unwrap_or_default();
    let evidence = finding["evidence"].as_str().unwrap_or_default();
    assert!(
        evidence.contains("the kernel refused to") && evidence.contains("errno"),
        "the kernel's own words are kept: {finding}"
    );
    println!(
        "{test}: tern diagnose: {evidence} / {}",
        finding["suggestion"]
    );
    assert!(
        in_list(&cli(socket, &["fib"]), "missing"),
        "tern fib lists the route as missing"
    );
    // Only the data plane is hurt: the session and the RIB entry stay.
    let status = cli(socket, &["status"]);
    assert_eq!(status["peers"][0]["state"], "Established", "{status}");
    let routes = cli(socket, &["routes", PREFIX]);
    assert_eq!(routes["routes"][0]["prefix"], PREFIX, "{routes}");
    assert!(
        log().contains("the kernel refused to add the route"),
        "the refusal is logged:\n{}",
        log()
    );

    // The interface comes back: the route must follow without anyone's help.
    let back = Instant::now();
    link_eth1(node, tor);
    if wait_for(
        "the route back in the kernel",
        Duration::from_secs(30),
        installed,
    )
    .is_err()
    {
        panic!(
            "{PREFIX} not reinstalled after eth1 came back: {:?}\nfib: {}\ntern:\n{}",
            rig.route(PREFIX),
            cli(socket, &["fib"]),
            log()
        );
    }
    let took = back.elapsed();
    assert!(
        wait_for("ping after recovery", Duration::from_secs(10), || ping(
            node
        ))
        .is_ok(),
        "198.18.200.1 unreachable after recovery"
    );
    assert!(!in_list(&cli(socket, &["fib"]), "missing"));
    assert!(
        !refused(),
        "the finding clears once the kernel takes the route"
    );
    println!(
        "{test}: route back {:.1} s after the interface",
        took.as_secs_f64()
    );
}

#[test]
fn ipip_pools_route_through_tunl0_onlink_once_it_exists() {
    let test = "ipip_routes";
    // 198.18.16.0/26: an Always pool; 198.18.32.0/26: CrossSubnet, next hop on our
    // subnet; 198.18.33.0/26: CrossSubnet, next hop on another subnet; 198.18.0.0/26:
    // a pool without IPIP.
    let conf = bird_conf(
        "route 198.18.16.0/26 blackhole; route 198.18.32.0/26 blackhole; \
         route 198.18.33.0/26 blackhole; route 198.18.0.0/26 blackhole;",
        "if net = 198.18.33.0/26 then bgp_next_hop = 203.0.113.77;",
    );
    let Some(rig) = Rig::start(test, "tip", &conf, |_, _| {}) else {
        return;
    };
    let plain = |p: &str| {
        rig.route(p).contains("via 198.51.100.1 dev eth0") && !rig.route(p).contains("onlink")
    };
    if wait_for("the plain routes", Duration::from_secs(30), || {
        plain("198.18.32.0/26") && plain("198.18.0.0/26")
    })
    .is_err()
    {
        panic!(
            "plain routes missing: {:?} {:?}\ntern:\n{}\nBIRD:\n{}",
            rig.route("198.18.32.0/26"),
            rig.route("198.18.0.0/26"),
            rig.log(),
            rig.bird.log()
        );
    }
    // No tunl0: the IPIP routes are held back and said to be, never sent in the clear.
    for p in ["198.18.16.0/26", "198.18.33.0/26"] {
        let reported = || !rig.findings("route-refused", p).is_empty();
        if wait_for(
            "the missing tunnel reported",
            Duration::from_secs(20),
            reported,
        )
        .is_err()
        {
            panic!("{p}: no finding\n{}\n{}", rig.cli(&["diagnose"]), rig.log());
        }
        assert_eq!(rig.route(p), "", "{p} installed without its tunnel");
        let f = rig.findings("route-refused", p);
        let evidence = f[0]["evidence"].as_str().unwrap_or_default();
        assert!(
            evidence.contains("no tunl0 device, and the IP pool asks for IPIP"),
            "{evidence}"
        );
    }
    println!(
        "{test}: without tunl0: {}",
        rig.findings("route-refused", "198.18.16.0/26")[0]["evidence"]
    );

    // tunl0 appears (a stand-in: this kernel has no ipip module).
    ok(rig.node.add_tunl0_standin());
    let t0 = Instant::now();
    let tunnelled = |p: &str, nh: &str| {
        let r = rig.route(p);
        r.contains(&format!("via {nh} dev tunl0")) && r.contains("onlink")
    };
    if wait_for("the IPIP routes on tunl0", Duration::from_secs(30), || {
        tunnelled("198.18.16.0/26", "198.51.100.1") && tunnelled("198.18.33.0/26", "203.0.113.77")
    })
    .is_err()
    {
        panic!(
            "IPIP routes not on tunl0: {:?} {:?}\nfib: {}\ntern:\n{}",
            rig.route("198.18.16.0/26"),
            rig.route("198.18.33.0/26"),
            rig.cli(&["fib"]),
            rig.log()
        );
    }
    println!(
        "{test}: {} / {} ({:.1} s after tunl0 appeared)",
        rig.route("198.18.16.0/26"),
        rig.route("198.18.33.0/26"),
        t0.elapsed().as_secs_f64()
    );
    assert!(
        plain("198.18.32.0/26") && plain("198.18.0.0/26"),
        "plain routes changed"
    );
    assert!(rig.findings("route-refused", "198.18.").is_empty());
    let fib = rig.cli(&["fib"]);
    assert_eq!(fib["missing"].as_array().map(Vec::len), Some(0), "{fib}");

    // The pool is edited to Never: its installed route is re-programmed plainly.
    let text = ok(std::fs::read_to_string(&rig.cluster));
    ok(std::fs::write(
        &rig.cluster,
        text.replace("ipipMode: Always", "ipipMode: Never"),
    ));
    if wait_for(
        "the edited pool's route in the clear",
        Duration::from_secs(20),
        || plain("198.18.16.0/26"),
    )
    .is_err()
    {
        panic!("{:?}\n{}", rig.route("198.18.16.0/26"), rig.log());
    }
    assert!(
        tunnelled("198.18.33.0/26", "203.0.113.77"),
        "the other pool is untouched"
    );
}
