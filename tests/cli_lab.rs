//! The operator's CLI against real peers: one `tern run` node and two BIRD routers on a
//! bridged LAN in network namespaces, both announcing 198.18.100.0/24 (the second with
//! a longer AS path). Checks `routes --all` (both paths, why the best won and the other
//! lost), `routes --count`, `--family`, `status -o wide` (vtysh's columns, messages
//! counted), `peers ADDR` (negotiated timers, router id, endpoints, messages by type,
//! the last NOTIFICATION after BIRD disables its session) and `-o yaml`. Skips without
//! root or BIRD; fails under CI=true.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is the verdict

use std::path::{Path, PathBuf};
use std::time::Duration;

use tern_interop::lab::probe::tern_cli;
use tern_interop::netns::lan;
use tern_interop::peers::{wait_for, Kind, Peer};
use tern_interop::process::Daemon;

const TERN: &str = env!("CARGO_BIN_EXE_tern");

/// A BIRD router at `id` in `asn` announcing 198.18.100.0/24, prepending `prepend`
/// extra times.
fn bird_conf(id: &str, asn: u32, prepend: usize) -> String {
    let prepends = format!("bgp_path.prepend({asn}); ").repeat(prepend);
    format!(
        r#"log stderr all;
router id {id};
protocol device {{ }}
protocol static {{ ipv4; route 198.18.100.0/24 blackhole; }}
protocol bgp tern {{ local as {asn}; neighbor 198.51.100.10 as 64512; hold time 9; keepalive time 3;
  connect retry time 1; error wait time 1,4;
  ipv4 {{ import all; export filter {{ if source = RTS_STATIC then {{ {prepends}accept; }} reject; }}; }}; }}
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
metadata: {name: tor-1}
spec: {peerIP: 198.51.100.1, asNumber: 65001, holdTime: 9s, keepaliveTime: 3s}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor-2}
spec: {peerIP: 198.51.100.2, asNumber: 65002, holdTime: 9s, keepaliveTime: 3s}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pods}
spec: {cidr: 198.18.0.0/16, blockSize: 26}
---
apiVersion: projectcalico.org/v3
kind: BlockAffinity
metadata: {name: node-a-198-18-4-0-26}
spec: {node: node-a, cidr: 198.18.4.0/26, state: confirmed}
"#;

struct Tern {
    socket: PathBuf,
    log: PathBuf,
}

impl Tern {
    fn cli(&self, args: &[&str]) -> (i32, String) {
        tern_cli(Path::new(TERN), &self.socket, args)
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        let (code, out) = self.cli(&a);
        assert_eq!(code, 0, "{args:?}: {out}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

#[test]
fn routes_all_count_status_wide_and_peer_details_against_bird() {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail("cli_lab", &reason);
        return;
    }
    if !tern_interop::have_program("bird") {
        tern_interop::skip_or_fail("cli_lab", "bird is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (_sw, nodes) = lan(
        "tcl-sw",
        &[
            ("tcl-a", "198.51.100.10/24"),
            ("tcl-tor1", "198.51.100.1/24"),
            ("tcl-tor2", "198.51.100.2/24"),
        ],
    )
    .unwrap();
    let [a, tor1, tor2] = &nodes[..] else {
        panic!("three namespaces")
    };
    let dirs: Vec<PathBuf> = ["a", "tor1", "tor2"]
        .iter()
        .map(|n| {
            let d = tmp.path().join(n);
            std::fs::create_dir_all(&d).unwrap();
            d
        })
        .collect();
    let cluster = tmp.path().join("cluster.yaml");
    std::fs::write(&cluster, CLUSTER).unwrap();
    let tern = Tern {
        socket: dirs[0].join("tern.sock"),
        log: dirs[0].join("tern.log"),
    };
    std::fs::write(
        dirs[0].join("tern.yaml"),
        format!(
            "node: node-a\ndatastore: {{type: file, path: {}}}\ncontrol_socket: {}\nlog: info\n",
            cluster.display(),
            tern.socket.display()
        ),
    )
    .unwrap();
    let bird1 = Peer::start(
        Kind::Bird,
        tor1,
        &dirs[1],
        &bird_conf("198.51.100.1", 65001, 0),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let _bird2 = Peer::start(
        Kind::Bird,
        tor2,
        &dirs[2],
        &bird_conf("198.51.100.2", 65002, 2),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut run = a.command(TERN);
    run.args(["run", "--config"]).arg(dirs[0].join("tern.yaml"));
    let _daemon = Daemon::spawn(a.name(), run, &tern.log).unwrap_or_else(|e| panic!("{e}"));

    let prefix = "198.18.100.0/24";
    wait_for(
        "two paths to the BIRD prefix",
        Duration::from_secs(60),
        || {
            let (code, out) = tern.cli(&["routes", "--all", prefix, "-o", "json"]);
            code == 0
                && serde_json::from_str::<serde_json::Value>(&out)
                    .map(|v| v["routes"][0]["paths"].as_array().map_or(0, Vec::len) == 2)
                    .unwrap_or(false)
        },
    )
    .unwrap_or_else(|e| panic!("{e}\n{}\n{}", tern.log(), bird1.log()));

    // routes --all: the best is tor-1's (shorter AS path), the other lost by it.
    let all = tern.json(&["routes", "--all", prefix]);
    let paths = &all["routes"][0]["paths"];
    assert_eq!(paths[0]["peer"], "198.51.100.1", "{all}");
    assert_eq!(paths[0]["best"], true, "{all}");
    assert_eq!(paths[0]["reason"], "as-path-length", "{all}");
    assert_eq!(paths[1]["peer"], "198.51.100.2", "{all}");
    assert_eq!(paths[1]["as_path"], "65002 65002 65002", "{all}");
    assert_eq!(paths[1]["best"], false, "{all}");
    assert_eq!(paths[1]["reason"], "as-path-length", "{all}");
    let (code, text) = tern.cli(&["routes", "--all", prefix]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("won: as-path-length") && text.contains("lost: as-path-length"),
        "{text}"
    );

    // routes --count: both peers' paths and our own block; --family narrows it.
    let count = tern.json(&["routes", "--count"]);
    let v4 = &count["families"][0];
    assert_eq!(v4["family"], "ipv4", "{count}");
    assert_eq!(v4["prefixes"], 2, "{count}");
    assert_eq!(v4["paths"], 3, "{count}");
    let row = |peer: &str| {
        count["peers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["peer"] == peer)
            .cloned()
            .unwrap_or_else(|| panic!("{peer} missing: {count}"))
    };
    assert_eq!(
        (
            row("198.51.100.1")["paths"].clone(),
            row("198.51.100.1")["best"].clone()
        ),
        (1.into(), 1.into())
    );
    assert_eq!(
        (
            row("198.51.100.2")["paths"].clone(),
            row("198.51.100.2")["best"].clone()
        ),
        (1.into(), 0.into())
    );
    assert_eq!(row("local")["best"], 1, "{count}");
    let v6 = tern.json(&["routes", "--family", "ipv6"]);
    assert_eq!(v6["routes"].as_array().map(Vec::len), Some(0), "{v6}");

    // status -o wide: vtysh's columns, with messages counted.
    let (code, wide) = tern.cli(&["-o", "wide", "status"]);
    assert_eq!(code, 0, "{wide}");
    for col in ["PFXRCD", "PFXSNT", "MSGRCVD", "MSGSENT", "UP/DOWN"] {
        assert!(wide.contains(col), "{col}: {wide}");
    }
    let peer = tern.json(&["peers", "198.51.100.1"]);
    let p = &peer["peers"][0];
    assert_eq!(p["hold_time"], 9, "{peer}");
    assert_eq!(p["keepalive"], 3, "{peer}");
    assert_eq!(p["remote_router_id"], "198.51.100.1", "{peer}");
    assert_eq!(p["local_address"], "198.51.100.10", "{peer}");
    // One of the two connected: 179 is at one end, an ephemeral port at the other.
    let ports = (p["local_port"].as_u64(), p["remote_port"].as_u64());
    assert!(
        matches!(ports, (Some(179), Some(r)) if r != 179)
            || matches!(ports, (Some(l), Some(179)) if l != 179),
        "{peer}"
    );
    assert_eq!(p["messages_received"]["open"], 1, "{peer}");
    assert!(
        p["messages_received"]["update"].as_u64() >= Some(1),
        "{peer}"
    );
    assert!(
        p["messages_sent"]["keepalive"].as_u64() >= Some(1),
        "{peer}"
    );
    assert_eq!(p["md5"], false, "{peer}");
    let (code, detail) = tern.cli(&["peers", "198.51.100.1"]);
    assert_eq!(code, 0, "{detail}");
    assert!(
        detail.contains("  timers        hold 9s, keepalive 3s (negotiated)")
            && detail.contains("  connection    local 198.51.100.10 port ")
            && detail.contains(", remote 198.51.100.1 port 179"),
        "{detail}"
    );

    // BIRD disables its session: the NOTIFICATION it sent is the last one received.
    bird1
        .cli(&["disable", "tern"])
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for("the Cease from BIRD", Duration::from_secs(20), || {
        let (_, out) = tern.cli(&["peers", "198.51.100.1", "-o", "json"]);
        out.contains("\"last_notification_received\": \"Cease")
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", tern.cli(&["peers", "198.51.100.1"]).1));

    // -o yaml: the same document as JSON.
    let (code, yaml) = tern.cli(&["routes", "--count", "-o", "yaml"]);
    assert_eq!(code, 0, "{yaml}");
    let from_yaml: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
    assert!(from_yaml["families"].is_array(), "{yaml}");
}

/// `tern routes` on a 100,000-route node, end to end (the CLI's process, the daemon's
/// answer, the decoding and the table): one simulated eBGP peer (the benchmark's
/// injector) announces 100,000 host routes. A measurement, printed; run it with
/// `cargo test --release -p tern --test cli_lab -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement: run with --release --ignored --nocapture"]
fn routes_on_a_100k_route_node() {
    use std::net::Ipv4Addr;
    use std::time::Instant;
    use tern_interop::bench::inject::{FeedPeer, Injector, Phase};

    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail("cli_lab", &reason);
        return;
    }
    const N: u32 = 100_000;
    let tmp = tempfile::tempdir().unwrap();
    let (_sw, nodes) = lan(
        "tcm-sw",
        &[
            ("tcm-a", "198.51.100.10/24"),
            ("tcm-tor", "198.51.100.1/24"),
        ],
    )
    .unwrap();
    let [a, tor] = &nodes[..] else {
        panic!("two namespaces")
    };
    let table: Vec<ipnet::IpNet> = (0..N)
        .map(|i| ipnet::IpNet::new(Ipv4Addr::from(0xC612_0000 + i).into(), 32).unwrap())
        .collect();
    let feed = FeedPeer::build(
        "198.51.100.1".parse().unwrap(),
        Ipv4Addr::new(198, 51, 100, 1),
        65001,
        true,
        &table,
        0,
    )
    .unwrap();
    let mut injector = Injector::start(tor, vec![feed]).unwrap();
    let cluster = tmp.path().join("cluster.yaml");
    // tor-2 is not there: its session just stays down. The injector sends a
    // KEEPALIVE every 20 s: a hold time it keeps.
    let long_hold = CLUSTER.replace("holdTime: 9s, keepaliveTime: 3s", "holdTime: 240s");
    std::fs::write(&cluster, long_hold).unwrap();
    let tern = Tern {
        socket: tmp.path().join("tern.sock"),
        log: tmp.path().join("tern.log"),
    };
    std::fs::write(
        tmp.path().join("tern.yaml"),
        format!(
            "node: node-a\ndatastore: {{type: file, path: {}}}\ncontrol_socket: {}\nlog: info\n",
            cluster.display(),
            tern.socket.display()
        ),
    )
    .unwrap();
    let mut run = a.command(TERN);
    run.args(["run", "--config"])
        .arg(tmp.path().join("tern.yaml"));
    let _daemon = Daemon::spawn(a.name(), run, &tern.log).unwrap_or_else(|e| panic!("{e}"));
    wait_for("the injector's session", Duration::from_secs(60), || {
        injector.established() == 1
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", tern.log()));
    injector.set_phase(Phase::Full);
    wait_for(
        "100,000 routes in the Loc-RIB",
        Duration::from_secs(300),
        || {
            let (code, out) = tern.cli(&["routes", "--count", "-o", "json"]);
            code == 0
                && serde_json::from_str::<serde_json::Value>(&out)
                    .is_ok_and(|v| v["families"][0]["prefixes"].as_u64() > Some(u64::from(N)))
        },
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", tern.log()));
    // And in the kernel: the FIB task's work is done, so it does not share the CPU
    // with what is measured.
    wait_for(
        "100,000 routes in the kernel",
        Duration::from_secs(300),
        || {
            let (_, out) = tern.cli(&["fib", "-o", "json"]);
            serde_json::from_str::<serde_json::Value>(&out)
                .is_ok_and(|v| v["installed"].as_array().map_or(0, Vec::len) >= N as usize)
        },
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", tern.log()));
    let timed = |args: &[&str]| {
        let t = Instant::now();
        let (code, out) = tern.cli(args);
        let took = t.elapsed();
        assert_eq!(code, 0, "{args:?}: {}", out.get(..400).unwrap_or(&out));
        // Each answer holds the whole table (a session that went down would not).
        assert!(
            out.len() > 1000 || !args.contains(&"--all"),
            "{args:?}: {out}"
        );
        (took, out.len())
    };
    for args in [
        &["routes"][..],
        &["routes", "-o", "json"],
        &["routes", "--count"],
        &["routes", "--all"],
        &["routes", "198.18.1.1"],
    ] {
        // Three runs: the slowest and the fastest.
        let runs: Vec<(Duration, usize)> = (0..3).map(|_| timed(args)).collect();
        let slowest = runs.iter().map(|r| r.0).max().unwrap_or_default();
        let fastest = runs.iter().map(|r| r.0).min().unwrap_or_default();
        eprintln!(
            "tern {}: {fastest:?} .. {slowest:?}, {} KB",
            args.join(" "),
            runs[0].1 / 1024
        );
    }
}
