//! A fault in the lab: the interface a learnt route's next hop sits on disappears.
//! One `tern run` node peers over eth0 with a BIRD router, which announces
//! 198.18.200.0/24 with a next hop on a second link (eth1). Deleting eth1 takes the
//! kernel route with it, and the kernel then refuses tern's attempts to put it back
//! (no route to the next hop): the BGP session and the RIB entry must stay, `tern fib`
//! must list the route as missing and `tern diagnose` must say the kernel refused it
//! with the kernel's words. Re-creating the link must bring the route back by itself
//! and packets must flow again: nothing lost. Namespaces `t9m-*`.

#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tern_interop::netns::Netns;
use tern_interop::peers::{wait_for, Kind, Peer};
use tern_interop::process::Daemon;

const TERN: &str = env!("CARGO_BIN_EXE_tern");
const PREFIX: &str = "198.18.200.0/24";

const BIRD_CONF: &str = r#"log stderr all;
router id 198.51.100.1;
protocol device { }
protocol direct { ipv4; interface "eth1"; }
protocol static { ipv4; route 198.18.200.0/24 blackhole; }
protocol bgp node { local as 65001; neighbor 198.51.100.10 as 64512; hold time 9; keepalive time 3;
  connect retry time 1; error wait time 1,4;
  ipv4 { import none; export filter { if source = RTS_STATIC then { bgp_next_hop = 203.0.113.1; accept; } reject; }; }; }
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
metadata: {name: tor}
spec: {peerIP: 198.51.100.1, asNumber: 65001, holdTime: 9s, keepaliveTime: 3s}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pods}
spec: {cidr: 198.18.0.0/20, blockSize: 26}
"#;

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

fn kernel_route(node: &Netns) -> String {
    let o = ok(node.ip(&["-4", "route", "show", PREFIX, "proto", "201"]));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
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
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail(test, &reason);
        return;
    }
    if !tern_interop::have_program("bird") {
        tern_interop::skip_or_fail(test, "bird is not installed");
        return;
    }
    let tmp = ok(tempfile::tempdir());
    let node = ok(Netns::create("t9m-node"));
    let tor = ok(Netns::create("t9m-tor"));
    ok(node.veth_to("eth0", &tor, "eth0"));
    ok(node.add_addr("eth0", "198.51.100.10/24"));
    ok(tor.add_addr("eth0", "198.51.100.1/24"));
    link_eth1(&node, &tor);
    ok(tor.add_addr("lo", "198.18.200.1/32"));

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
    let bird = ok(Peer::start(Kind::Bird, &tor, &tor_dir, BIRD_CONF));
    let mut c = node.command(TERN);
    c.args(["run", "--config"]).arg(dir.join("tern.yaml"));
    let log_path = dir.join("tern.log");
    let _tern = ok(Daemon::spawn(node.name(), c, &log_path));
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    let installed = || kernel_route(&node).contains("via 203.0.113.1 dev eth1");
    if wait_for(
        "the route in the kernel",
        Duration::from_secs(30),
        installed,
    )
    .is_err()
    {
        panic!(
            "{PREFIX} never installed: {:?}\ntern:\n{}\nBIRD:\n{}",
            kernel_route(&node),
            log(),
            bird.log()
        );
    }
    assert!(ping(&node), "198.18.200.1 unreachable before the fault");

    // The fault: eth1 goes away (both ends of the veth).
    ok(node.ip(&["link", "del", "eth1"]));
    let refused = || {
        let d = cli(&socket, &["diagnose"]);
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
            cli(&socket, &["diagnose"]),
            cli(&socket, &["fib"]),
            kernel_route(&node),
            log()
        );
    }
    let d = cli(&socket, &["diagnose"]);
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
        in_list(&cli(&socket, &["fib"]), "missing"),
        "tern fib lists the route as missing"
    );
    // Only the data plane is hurt: the session and the RIB entry stay.
    let status = cli(&socket, &["status"]);
    assert_eq!(status["peers"][0]["state"], "Established", "{status}");
    let routes = cli(&socket, &["routes", PREFIX]);
    assert_eq!(routes["routes"][0]["prefix"], PREFIX, "{routes}");
    assert!(
        log().contains("the kernel refused to add the route"),
        "the refusal is logged:\n{}",
        log()
    );

    // The interface comes back: the route must follow without anyone's help.
    let back = Instant::now();
    link_eth1(&node, &tor);
    if wait_for(
        "the route back in the kernel",
        Duration::from_secs(30),
        installed,
    )
    .is_err()
    {
        panic!(
            "{PREFIX} not reinstalled after eth1 came back: {:?}\nfib: {}\ntern:\n{}",
            kernel_route(&node),
            cli(&socket, &["fib"]),
            log()
        );
    }
    let took = back.elapsed();
    assert!(
        wait_for("ping after recovery", Duration::from_secs(10), || ping(
            &node
        ))
        .is_ok(),
        "198.18.200.1 unreachable after recovery"
    );
    assert!(!in_list(&cli(&socket, &["fib"]), "missing"));
    assert!(
        !refused(),
        "the finding clears once the kernel takes the route"
    );
    println!(
        "{test}: route back {:.1} s after the interface",
        took.as_secs_f64()
    );
}
