//! `tern run` before it has a valid configuration: the control socket already answers,
//! `tern status` shows why nothing runs, `health --ready` is false, and fixing the file
//! starts BGP without a restart. Runs in its own namespace (tds-*) so the BGP listener
//! it opens once the file is fixed is not in the machine's namespace.

#![cfg(target_os = "linux")]

use std::path::Path;
use std::time::Duration;

use tern_interop::lab::probe::tern_cli;
use tern_interop::netns::Netns;
use tern_interop::peers::wait_for;
use tern_interop::process::Daemon;

const TERN: &str = env!("CARGO_BIN_EXE_tern");

const GOOD: &str = "apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: 64512}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 198.51.100.10/24}}
";

/// Writes `cluster` and a tern.yaml (file datastore, FIB off) into `dir` and starts
/// `tern run` in `ns`; returns the daemon and its control socket.
fn start_tern(ns: &Netns, dir: &Path, cluster: &str) -> (Daemon, std::path::PathBuf) {
    let cluster_file = dir.join("cluster.yaml");
    let socket = dir.join("tern.sock");
    std::fs::write(&cluster_file, cluster).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.join("tern.yaml"),
        format!(
            "node: node-a\ndatastore: {{type: file, path: {}}}\ncontrol_socket: {}\nfib: {{enabled: false}}\n",
            cluster_file.display(),
            socket.display()
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut c = ns.command(TERN);
    c.args(["run", "--config"]).arg(dir.join("tern.yaml"));
    let tern = Daemon::spawn("tern", c, &dir.join("tern.log")).unwrap_or_else(|e| panic!("{e}"));
    (tern, socket)
}

#[test]
fn a_bad_first_configuration_is_explained_and_a_fix_is_picked_up() {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail("daemon_start", &reason);
        return;
    }
    let ns = Netns::create("tds-a").unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let cluster = dir.path().join("cluster.yaml");
    let (mut tern, socket) = start_tern(
        &ns,
        dir.path(),
        &GOOD.replace("asNumber: 64512", "asNumber: 0"),
    );
    let cli = |args: &[&str]| tern_cli(Path::new(TERN), &socket, args);
    let log = || std::fs::read_to_string(dir.path().join("tern.log")).unwrap_or_default();
    wait_for(
        "the configuration error in status",
        Duration::from_secs(10),
        || cli(&["status"]).1.contains("AS 0 is reserved"),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}\n{}", cli(&["status"]).1, log()));
    let (code, out) = cli(&["status"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("configuration error: cluster.yaml") || out.contains("configuration error:"),
        "{out}"
    );
    let (code, out) = cli(&["health", "--ready"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("no valid configuration has been applied yet"),
        "{out}"
    );
    let (code, out) = cli(&["routes"]);
    assert_eq!(code, 5, "{out}");
    assert!(out.contains("BGP is not running yet"), "{out}");
    assert!(log().contains("configuration rejected"), "{}", log());

    std::fs::write(&cluster, GOOD).unwrap_or_else(|e| panic!("{e}"));
    wait_for("BGP started after the fix", Duration::from_secs(10), || {
        let (code, out) = cli(&["status"]);
        code == 0 && out.contains("router id 198.51.100.10") && !out.contains("configuration error")
    })
    .unwrap_or_else(|e| panic!("{e}\n{}\n{}", cli(&["status"]).1, log()));
    assert_eq!(cli(&["health", "--ready"]).0, 0, "no peers is ready");
    tern.stop(Duration::from_secs(5));
}

/// Mid-migration, calico-node's BIRD may still hold port 179 when tern starts: tern
/// waits (status says why, not ready) and starts BGP once the port is free, instead of
/// exiting into the kubelet's back-off.
#[test]
fn a_taken_bgp_port_is_waited_for() {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail("daemon_start", &reason);
        return;
    }
    let ns = Netns::create("tds-b").unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut bird = tern_interop::peers::Peer::start(
        tern_interop::peers::Kind::Bird,
        &ns,
        &dir.path().join("bird"),
        "router id 198.51.100.10;\nprotocol device { }\nprotocol bgp held {\n  local as 64512; neighbor 198.51.100.20 as 64512;\n  ipv4 { import none; export none; };\n}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (mut tern, socket) = start_tern(&ns, dir.path(), GOOD);
    let cli = |args: &[&str]| tern_cli(Path::new(TERN), &socket, args);
    let log = || std::fs::read_to_string(dir.path().join("tern.log")).unwrap_or_default();
    wait_for("the taken port in status", Duration::from_secs(10), || {
        cli(&["status"]).1.contains("trying again every 2 s")
    })
    .unwrap_or_else(|e| panic!("{e}\n{}\n{}", cli(&["status"]).1, log()));
    assert!(cli(&["status"]).1.contains("179"), "{}", cli(&["status"]).1);
    assert_eq!(
        cli(&["health", "--ready"]).0,
        1,
        "ready while BGP cannot start"
    );
    assert!(log().contains("another BGP daemon"), "{}", log());
    // Still waiting a few tries later, not exited.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(cli(&["health", "--live"]).0, 0, "{}", log());

    bird.kill();
    wait_for(
        "BGP started once the port is free",
        Duration::from_secs(15),
        || {
            let (code, out) = cli(&["status"]);
            code == 0 && out.contains("router id 198.51.100.10") && !out.contains("trying again")
        },
    )
    .unwrap_or_else(|e| panic!("{e}\n{}\n{}", cli(&["status"]).1, log()));
    assert_eq!(
        cli(&["health", "--ready"]).0,
        0,
        "{}",
        cli(&["health", "--ready"]).1
    );
    assert!(log().contains("is free now"), "{}", log());
    tern.stop(Duration::from_secs(5));
}
