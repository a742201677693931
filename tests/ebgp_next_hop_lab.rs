//! The eBGP NEXT_HOP (RFC 4271 §5.1.3), with packets: one `tern run` node (node-a, AS
//! 64512) whose node IP 198.51.100.10 is on eth0 (a link to an otherwise empty
//! namespace: the cluster's network), and a BIRD 2 top-of-rack router (AS 65001) on a
//! second interface eth1, another subnet (203.0.113.0/24), in network namespaces.
//!
//! 1. `sourceAddress: None`: the kernel sources the session from tern's eth1 address,
//!    so that address is the next hop tern announces. BIRD's single-hop eBGP refuses a
//!    next hop that is not directly reachable, so it installs tern's block only with
//!    the right one; a ping from the ToR's LAN address to an address in the block is
//!    answered (before the fix tern announced the node IP and BIRD refused the route).
//! 2. `sourceAddress: UseNodeIP` (Calico's default) towards that ToR, which accepts the
//!    node IP by multihop: the next hop announced is the node IP, off the only network
//!    shared with the ToR, and `tern diagnose` reports ebgp-next-hop-unreachable (JSON,
//!    log line, metric). Switching the BGPPeer to `sourceAddress: None` moves the
//!    session to eth1 and the finding clears (log line, metric back to 0).
//!
//! Skips without root or BIRD; fails under CI=true.

#![cfg(target_os = "linux")]
// A lab test: a failed set-up step is the test failing, said by the panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use tern_interop::netns::Netns;
use tern_interop::peers::{wait_for, Kind, Peer};
use tern_interop::process::Daemon;

const TERN: &str = env!("CARGO_BIN_EXE_tern");
const KIND: &str = "ebgp-next-hop-unreachable";
const SUBJECT: &str = "global peer 203.0.113.1 (BGPPeer tor)";

/// The ToR: `eth1_peer` is the single-hop session with tern's eth1 address,
/// `nodeip_peer` a multihop one with the node IP; both passive, so tern's source
/// address picks which one comes up. It announces its LAN (198.19.200.0/24, its own address 198.19.200.1)
/// and installs what it learns.
const BIRD_TOR: &str = r#"log stderr all;
router id 203.0.113.1;
protocol device { }
protocol static lan { ipv4; route 198.19.200.0/24 blackhole; }
protocol kernel { ipv4 { import none; export where source = RTS_BGP; }; }
template bgp tor { local 203.0.113.1 as 65001; passive on; hold time 9; keepalive time 3;
  error wait time 1,4; ipv4 { import all; export where proto = "lan"; }; }
protocol bgp eth1_peer from tor { neighbor 203.0.113.2 as 64512; }
protocol bgp nodeip_peer from tor { neighbor 198.51.100.10 as 64512; multihop; }
"#;

/// `{SOURCE}` is the BGPPeer's `sourceAddress`.
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
spec: {peerIP: 203.0.113.1, asNumber: 65001, keepaliveTime: 3s, sourceAddress: {SOURCE}}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pods}
spec: {cidr: 198.18.0.0/16, blockSize: 26, ipipMode: Never, vxlanMode: Never}
---
apiVersion: projectcalico.org/v3
kind: BlockAffinity
metadata: {name: node-a-198-18-1-0-26}
spec: {node: node-a, cidr: 198.18.1.0/26, state: confirmed}
"#;

struct Lab {
    node: Netns,
    _lan: Netns,
    tor_ns: Netns,
    dir: PathBuf,
    cluster: PathBuf,
    bird: Peer,
    _tern: Daemon,
    _tmp: tempfile::TempDir,
}

/// tern on eth0 (node IP) + eth1 (203.0.113.2), the ToR on eth1 (203.0.113.1) with its
/// LAN address on lo; `prefix` keeps the namespaces of the two tests apart.
fn lab(prefix: &str, source: &str) -> Lab {
    let tmp = tempfile::tempdir().unwrap();
    let node = Netns::create(&format!("{prefix}-node")).unwrap();
    let lan = Netns::create(&format!("{prefix}-lan")).unwrap();
    let tor_ns = Netns::create(&format!("{prefix}-tor")).unwrap();
    node.veth_to("eth0", &lan, "n0").unwrap();
    node.add_addr("eth0", "198.51.100.10/24").unwrap();
    node.veth_to("eth1", &tor_ns, "eth1").unwrap();
    node.add_addr("eth1", "203.0.113.2/24").unwrap();
    // The pod address in tern's block that the ToR's LAN pings.
    node.add_addr("lo", "198.18.1.5/32").unwrap();
    tor_ns.add_addr("eth1", "203.0.113.1/24").unwrap();
    tor_ns.add_addr("lo", "198.19.200.1/32").unwrap();
    // The multihop session to the node IP needs a route to it.
    tor_ns
        .ip(&["route", "add", "198.51.100.0/24", "via", "203.0.113.2"])
        .unwrap();

    let dir = tmp.path().join("node");
    std::fs::create_dir_all(&dir).unwrap();
    let cluster = tmp.path().join("cluster.yaml");
    std::fs::write(&cluster, CLUSTER.replace("{SOURCE}", source)).unwrap();
    std::fs::write(
        dir.join("tern.yaml"),
        format!(
            "node: node-a\ndatastore: {{type: file, path: {}}}\ncontrol_socket: {}\nmetrics: 127.0.0.1:9477\nlog: info\n",
            cluster.display(),
            dir.join("tern.sock").display()
        ),
    )
    .unwrap();
    let bird = Peer::start(Kind::Bird, &tor_ns, &tmp.path().join("tor"), BIRD_TOR).unwrap();
    let mut c = node.command(TERN);
    c.args(["run", "--config"]).arg(dir.join("tern.yaml"));
    c.env("RUST_LOG", "info");
    let tern = Daemon::spawn(node.name(), c, &dir.join("tern.log")).unwrap();
    Lab {
        node,
        _lan: lan,
        tor_ns,
        dir,
        cluster,
        bird,
        _tern: tern,
        _tmp: tmp,
    }
}

impl Lab {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("tern.log")).unwrap_or_default()
    }

    /// The ToR's BIRD route to tern's block, as `show route` prints it.
    fn tor_route(&self) -> String {
        self.bird
            .cli(&["show", "route", "for", "198.18.1.5", "all"])
            .unwrap_or_default()
    }

    /// The ToR's kernel route to the block.
    fn tor_kernel(&self) -> String {
        self.tor_ns
            .ip(&["-4", "route", "show", "198.18.1.0/26"])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    fn ping_from_tor_lan(&self) -> bool {
        self.tor_ns
            .exec(
                "ping",
                &["-c", "1", "-W", "2", "-I", "198.19.200.1", "198.18.1.5"],
            )
            .is_ok_and(|o| o.status.success())
    }

    /// `tern diagnose -o json`'s findings of our kind: (subject, evidence, severity).
    fn findings(&self) -> Vec<(String, String, String)> {
        let out = Command::new(TERN)
            .args(["diagnose", "-o", "json", "--socket"])
            .arg(self.dir.join("tern.sock"))
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let text = |f: &serde_json::Value, k: &str| f[k].as_str().unwrap_or_default().to_string();
        v["findings"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|f| f["kind"] == KIND)
                    .map(|f| (text(f, "subject"), text(f, "evidence"), text(f, "severity")))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `tern_diagnostic_findings{kind="ebgp-next-hop-unreachable",severity="error"}`
    /// from the metrics endpoint inside the node's namespace.
    fn metric(&self) -> Option<String> {
        let ns = self.node.name().to_string();
        let body = std::thread::spawn(move || -> Option<String> {
            tern_interop::netns::enter_thread(&ns).ok()?;
            let mut s = std::net::TcpStream::connect("127.0.0.1:9477").ok()?;
            s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: tern\r\nConnection: close\r\n\r\n")
                .ok()?;
            let mut body = String::new();
            s.read_to_string(&mut body).ok()?;
            Some(body)
        })
        .join()
        .ok()??;
        let want = format!("tern_diagnostic_findings{{kind=\"{KIND}\",severity=\"error\"}}");
        body.lines()
            .find(|l| l.starts_with(&want))
            .and_then(|l| l.split_whitespace().last())
            .map(String::from)
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "{what}\nToR (BIRD) route to the block:\n{}\nToR kernel: {}\nBIRD protocols:\n{}\nfindings: {:?}\ntern log:\n{}\nBIRD log:\n{}",
            self.tor_route(),
            self.tor_kernel(),
            self.bird.cli(&["show", "protocols"]).unwrap_or_default(),
            self.findings(),
            self.log(),
            self.bird.log()
        )
    }
}

fn lab_ready(test: &str) -> bool {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail(test, &reason);
        return false;
    }
    if !tern_interop::have_program("bird") {
        tern_interop::skip_or_fail(test, "bird is not installed");
        return false;
    }
    true
}

#[test]
fn a_tor_on_another_interface_gets_the_sessions_own_address_and_the_block_answers() {
    if !lab_ready("ebgp_next_hop_lab") {
        return;
    }
    let lab = lab("tnh1", "None");
    let installed = || {
        lab.tor_route().contains("via 203.0.113.2") && lab.tor_kernel().contains("via 203.0.113.2")
    };
    if wait_for("the block on the ToR", Duration::from_secs(40), installed).is_err() {
        lab.fail("the ToR did not install 198.18.1.0/26 via tern's eth1 address 203.0.113.2");
    }
    let s = lab.tor_route();
    if !s.contains("BGP.next_hop: 203.0.113.2") {
        lab.fail("the NEXT_HOP tern announced is not its eth1 address");
    }
    // tern has the ToR's LAN (for the answer) and the ping goes through.
    if wait_for("the ping", Duration::from_secs(20), || {
        lab.ping_from_tor_lan()
    })
    .is_err()
    {
        lab.fail("198.18.1.5 does not answer a ping from the ToR's LAN (198.19.200.1)");
    }
    if !lab.findings().is_empty() {
        lab.fail("ebgp-next-hop-unreachable reported for a next hop on the shared network");
    }
}

#[test]
fn ebgp_next_hop_unreachable_appears_and_clears_when_the_session_moves_to_the_tors_network() {
    if !lab_ready("ebgp_next_hop_lab") {
        return;
    }
    let lab = lab("tnh2", "UseNodeIP");
    // The multihop session from the node IP: the next hop is the node IP.
    let nodeip_up = || {
        lab.bird
            .cli(&["show", "protocols", "nodeip_peer"])
            .is_ok_and(|s| s.contains("Established"))
    };
    if wait_for("the node-IP session", Duration::from_secs(40), nodeip_up).is_err() {
        lab.fail("the session from the node IP did not come up");
    }
    let appeared = || {
        lab.findings().iter().any(|(subject, evidence, severity)| {
            subject == SUBJECT
                && severity == "error"
                && evidence.contains("next hop 198.51.100.10")
                && evidence.contains("203.0.113.0/24 on eth1")
        })
    };
    let since_up = std::time::Instant::now();
    if wait_for("the finding", Duration::from_secs(30), appeared).is_err() {
        lab.fail("no ebgp-next-hop-unreachable finding naming the node IP and eth1");
    }
    println!(
        "[lab timing] ebgp_next_hop_lab: {KIND} appeared {:.1} s after the session from the node IP was up: {:?}",
        since_up.elapsed().as_secs_f64(),
        lab.findings()
    );
    let appear_line = format!("finding {KIND} for {SUBJECT}: ");
    if wait_for("its log line", Duration::from_secs(10), || {
        lab.log().contains(&appear_line)
    })
    .is_err()
    {
        lab.fail("the finding's appearance was not logged");
    }
    if wait_for("its metric", Duration::from_secs(10), || {
        lab.metric().as_deref() == Some("1")
    })
    .is_err()
    {
        lab.fail(&format!(
            "tern_diagnostic_findings for {KIND} is not 1: {:?}",
            lab.metric()
        ));
    }

    // The fix: the session moves to the interface facing the ToR.
    std::fs::write(&lab.cluster, CLUSTER.replace("{SOURCE}", "None")).unwrap();
    let out = Command::new(TERN)
        .args(["reload", "--socket"])
        .arg(lab.dir.join("tern.sock"))
        .output()
        .unwrap();
    assert!(out.status.success(), "tern reload: {out:?}");
    let fixed = || {
        lab.findings().is_empty()
            && lab
                .log()
                .contains(&format!("finding {KIND} for {SUBJECT} cleared"))
            && lab.tor_route().contains("via 203.0.113.2")
    };
    let reloaded = std::time::Instant::now();
    if wait_for("the finding to clear", Duration::from_secs(40), fixed).is_err() {
        lab.fail("the finding did not clear after sourceAddress: None");
    }
    println!(
        "[lab timing] ebgp_next_hop_lab: {KIND} cleared {:.1} s after tern reload (sourceAddress: None), the ToR's route via tern's eth1 address",
        reloaded.elapsed().as_secs_f64()
    );
    if lab.metric().as_deref() != Some("0") {
        lab.fail(&format!(
            "tern_diagnostic_findings for {KIND} is not back to 0: {:?}",
            lab.metric()
        ));
    }
    if wait_for("the ping", Duration::from_secs(20), || {
        lab.ping_from_tor_lan()
    })
    .is_err()
    {
        lab.fail("198.18.1.5 does not answer a ping from the ToR's LAN after the fix");
    }
}
