//! Local workload peers (BGPPeer `localWorkloadSelector`, Calico v3.30+), with packets:
//! one `tern run` node (node-a, AS 64512) and a workload in its own namespace (a
//! KubeVirt VM's stand-in: BIRD 2 in AS 65100, address 198.18.1.5 from node-a's
//! block) on a `cali…` veth, set up as Felix sets it up: the workload's host route on
//! the veth, and the peering address `localWorkloadPeeringIPV4` (203.0.113.179) on the
//! node's end, which the workload dials.
//!
//! tern starts with no endpoint status file: no session. Then the file Felix writes
//! for a selected workload appears (JSON with `bgpPeerName`): tern adds a passive
//! session with 198.18.1.5, BIRD's connection reaches Established, the VM's prefix
//! (198.19.200.0/24) is in node-a's kernel via 198.18.1.5, and the VM learns node-a's
//! block (Calico's export filter). `tern peers` names the session's kind. Then the
//! file goes (the endpoint went down): the session and the VM's route go. Skips
//! without root or BIRD; fails under CI=true.

#![cfg(target_os = "linux")]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use tern_interop::netns::Netns;
use tern_interop::peers::{wait_for, Kind, Peer};
use tern_interop::process::Daemon;

const TERN: &str = env!("CARGO_BIN_EXE_tern");

/// The workload's BIRD: dials the peering address from its own.
const BIRD_VM: &str = r#"log stderr all;
router id 198.18.1.5;
protocol device { }
protocol static { ipv4; route 198.19.200.0/24 blackhole; }
protocol bgp node { local 198.18.1.5 as 65100; neighbor 203.0.113.179 as 64512; multihop;
  hold time 9; keepalive time 3; connect retry time 1; error wait time 1,4;
  ipv4 { import all; export where source = RTS_STATIC; }; }
"#;

const CLUSTER: &str = r#"apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: 64512, nodeToNodeMeshEnabled: false, localWorkloadPeeringIPV4: 203.0.113.179}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 198.51.100.10/24}}
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
kind: BGPPeer
metadata: {name: vm-peers}
spec: {localWorkloadSelector: "kubevirt.io == 'virt-launcher'", asNumber: 65100}
"#;

/// What Felix writes for the selected workload (`epstatusfile.WorkloadEndpointStatus`).
const STATUS: &str = r#"{"ifaceName":"cali12ab","mac":"ee:ee:ee:ee:ee:ee","ipv4Nets":["198.18.1.5/32"],"bgpPeerName":"vm-peers"}"#;

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn tern(socket: &Path, args: &[&str]) -> String {
    let o = ok(Command::new(TERN)
        .args(args)
        .arg("--socket")
        .arg(socket)
        .output());
    text(&o)
}

#[test]
fn a_workload_felix_selected_peers_with_its_node() {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail("workload_peers_lab", &reason);
        return;
    }
    if !tern_interop::have_program("bird") {
        tern_interop::skip_or_fail("workload_peers_lab", "bird is not installed");
        return;
    }
    let tmp = ok(tempfile::tempdir());
    let (adir, vdir, status_dir) = (
        tmp.path().join("a"),
        tmp.path().join("vm"),
        tmp.path().join("endpoint-status"),
    );
    for d in [&adir, &vdir, &status_dir] {
        ok(std::fs::create_dir_all(d));
    }
    let a = ok(Netns::create("twp-a"));
    let vm = ok(Netns::create("twp-vm"));
    // What the CNI plugin and Felix set up.
    ok(a.veth_to("cali12ab", &vm, "eth0"));
    ok(vm.add_addr("eth0", "198.18.1.5/32"));
    ok(vm.ip(&[
        "route",
        "add",
        "203.0.113.179/32",
        "dev",
        "eth0",
        "scope",
        "link",
    ]));
    ok(a.add_addr("cali12ab", "203.0.113.179/32"));
    ok(a.ip(&[
        "route",
        "add",
        "198.18.1.5/32",
        "dev",
        "cali12ab",
        "scope",
        "link",
    ]));

    let cluster_file = tmp.path().join("cluster.yaml");
    ok(std::fs::write(&cluster_file, CLUSTER));
    let socket = adir.join("tern.sock");
    ok(std::fs::write(
        adir.join("tern.yaml"),
        format!(
            "node: node-a\ndatastore: {{type: file, path: {}}}\ncontrol_socket: {}\nmetrics: 127.0.0.1:9475\nendpoint_status_dir: {}\nlog: info\n",
            cluster_file.display(),
            socket.display(),
            status_dir.display()
        ),
    ));
    let bird = ok(Peer::start(Kind::Bird, &vm, &vdir, BIRD_VM));
    let mut c = a.command(TERN);
    c.args(["run", "--config"]).arg(adir.join("tern.yaml"));
    c.env("RUST_LOG", "info");
    let log_file = adir.join("tern.log");
    let _tern = ok(Daemon::spawn(a.name(), c, &log_file));
    let log = || std::fs::read_to_string(&log_file).unwrap_or_default();
    let vm_route = || {
        text(&ok(a.ip(&[
            "-4",
            "route",
            "show",
            "proto",
            "201",
            "198.19.200.0/24",
        ])))
    };
    let fail = |what: &str| -> ! {
        panic!(
            "{what}\nnode-a routes:\n{}\nBIRD (VM):\n{}\n{}\ntern log:\n{}",
            text(&ok(a.ip(&["-4", "route", "show", "table", "all"]))),
            bird.cli(&["show", "protocols", "all", "node"])
                .unwrap_or_default(),
            bird.cli(&["show", "route"]).unwrap_or_default(),
            log()
        )
    };
    if wait_for("tern answering", Duration::from_secs(20), || {
        tern(&socket, &["status"]).contains("node-a")
    })
    .is_err()
    {
        fail("tern never answered on its control socket");
    }
    if tern(&socket, &["peers"]).contains("198.18.1.5") {
        fail("a session with the workload before Felix selected it");
    }

    // Felix selects the workload: its endpoint status file names the BGPPeer.
    let status_file = status_dir.join("k8s default%2fvm-1 eth0");
    ok(std::fs::write(&status_file, STATUS));
    let up = || {
        bird.cli(&["show", "protocols", "node"])
            .is_ok_and(|s| s.contains("Established"))
            && vm_route().contains("via 198.18.1.5 dev cali12ab")
            && bird
                .cli(&["show", "route", "for", "198.18.1.1"])
                .is_ok_and(|s| s.contains("198.18.1.0/26"))
    };
    if wait_for("the workload's session", Duration::from_secs(40), up).is_err() {
        fail("the workload's session did not come up, or a route is missing either way");
    }
    let peers = tern(&socket, &["peers"]);
    if !peers.contains("local workload") {
        fail(&format!("`tern peers` does not name the kind:\n{peers}"));
    }
    // Reached through the workload's interface, not a shared subnet: no warning.
    let diagnose = tern(&socket, &["diagnose"]);
    if diagnose.contains("[warning] no-layer2-reachability") {
        fail(&format!(
            "a layer-2 warning for the workload peer:\n{diagnose}"
        ));
    }
    println!("workload_peers_lab: {}\n{peers}", vm_route().trim());

    // The endpoint goes down: Felix deletes the file; the session and its routes go.
    ok(std::fs::remove_file(&status_file));
    let gone = || vm_route().is_empty() && !tern(&socket, &["peers"]).contains("198.18.1.5");
    if wait_for("the session removed", Duration::from_secs(20), gone).is_err() {
        fail("the workload's session or its route stayed after its status file went");
    }
}
