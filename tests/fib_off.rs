//! `tern run` with `fib: { enabled: false }` and a configured ToR peer: `tern fib` says
//! the FIB is off (no "refused by the kernel" counts) and `tern diagnose` makes up no
//! findings (before, the memory backend behind a FIB that is off knew no interfaces,
//! so every peer was "unlikely to be on the same layer 2 network"). Runs in its own
//! namespace (tfo-a), where the peer's address is on a link, so a finding would be
//! false.

#![cfg(target_os = "linux")]

use std::path::Path;
use std::time::Duration;

use tern_interop::lab::probe::tern_cli;
use tern_interop::netns::Netns;
use tern_interop::peers::wait_for;
use tern_interop::process::Daemon;

const TERN: &str = env!("CARGO_BIN_EXE_tern");

const CLUSTER: &str = "apiVersion: projectcalico.org/v3
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
spec: {peerIP: 198.51.100.1, asNumber: 65001}
";

#[test]
fn with_the_fib_off_fib_and_diagnose_say_so_and_make_nothing_up() {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail("fib_off", &reason);
        return;
    }
    let ns = Netns::create("tfo-a").unwrap_or_else(|e| panic!("{e}"));
    let other = Netns::create("tfo-b").unwrap_or_else(|e| panic!("{e}"));
    ns.veth_to("eth0", &other, "eth0")
        .unwrap_or_else(|e| panic!("{e}"));
    ns.add_addr("eth0", "198.51.100.10/24")
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let cluster = dir.path().join("cluster.yaml");
    let socket = dir.path().join("tern.sock");
    std::fs::write(&cluster, CLUSTER).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.path().join("tern.yaml"),
        format!(
            "node: node-a\ndatastore: {{type: file, path: {}}}\ncontrol_socket: {}\nfib: {{enabled: false}}\n",
            cluster.display(),
            socket.display()
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut c = ns.command(TERN);
    c.args(["run", "--config"])
        .arg(dir.path().join("tern.yaml"));
    let mut tern =
        Daemon::spawn("tern", c, &dir.path().join("tern.log")).unwrap_or_else(|e| panic!("{e}"));
    let cli = |args: &[&str]| tern_cli(Path::new(TERN), &socket, args);
    let log = || std::fs::read_to_string(dir.path().join("tern.log")).unwrap_or_default();
    wait_for("the peer in tern peers", Duration::from_secs(15), || {
        cli(&["peers"]).1.contains("198.51.100.1")
    })
    .unwrap_or_else(|e| panic!("{e}\n{}\n{}", cli(&["peers"]).1, log()));

    let (code, out) = cli(&["fib"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("The FIB is off"), "{out}");
    assert!(!out.contains("refused"), "{out}");
    let (code, out) = cli(&["fib", "-o", "json"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("\"disabled\": true") || out.contains("\"disabled\":true"),
        "{out}"
    );

    let (code, out) = cli(&["diagnose"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out, "No problems found.\n", "{}", log());
    tern.stop(Duration::from_secs(5));
}
