//! The operator's CLI against real peers: one `tern run` node and two BIRD routers on a
//! bridged LAN in network namespaces, both announcing 198.18.100.0/24 (the second with
//! a longer AS path). Checks `routes --all` (both paths, why the best won and the other
//! lost), `routes --count`, `--family`, `routes --received` (the first BIRD also sends a
//! route tern's BGPFilter rejects and one with tern's AS in its path), `status -o
//! wide` (vtysh's columns, messages counted), `peers ADDR` (negotiated timers, router
//! id, endpoints, messages by type, the last NOTIFICATION after BIRD disables its
//! session) and `-o yaml`. Skips without root or BIRD; fails under CI=true.

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
/// extra times; with `refused`, also 198.18.101.0/24 (tern's import filter rejects it)
/// and 198.18.102.0/24 with tern's AS in its path (tern's loop check rejects it).
fn bird_conf(id: &str, asn: u32, prepend: usize, refused: bool) -> String {
    let prepends = format!("bgp_path.prepend({asn}); ").repeat(prepend);
    let (routes, looped) = if refused {
        (
            "route 198.18.101.0/24 blackhole; route 198.18.102.0/24 blackhole; ",
            "if net = 198.18.102.0/24 then bgp_path.prepend(64512); ",
        )
    } else {
        ("", "")
    };
    format!(
        r#"log stderr all;
router id {id};
protocol device {{ }}
protocol static {{ ipv4; route 198.18.100.0/24 blackhole; {routes}}}
protocol bgp tern {{ local as {asn}; neighbor 198.51.100.10 as 64512; hold time 9; keepalive time 3;
  connect retry time 1; error wait time 1,4;
  ipv4 {{ import all; export filter {{ if source = RTS_STATIC then {{ {prepends}{looped}accept; }} reject; }}; }}; }}
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
spec: {peerIP: 198.51.100.1, asNumber: 65001, holdTime: 9s, keepaliveTime: 3s, filters: [no-101]}
---
apiVersion: projectcalico.org/v3
kind: BGPFilter
metadata: {name: no-101}
spec:
  importV4:
    - {action: Reject, matchOperator: Equal, cidr: 198.18.101.0/24}
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
        &bird_conf("198.51.100.1", 65001, 0, true),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let _bird2 = Peer::start(
        Kind::Bird,
        tor2,
        &dirs[2],
        &bird_conf("198.51.100.2", 65002, 2, false),
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

    // routes --received: what tor-1 sent, the two rejected paths with why.
    wait_for(
        "tor-1's two rejected paths",
        Duration::from_secs(20),
        || tern.json(&["routes", "--received", "198.51.100.1"])["rejected"] == 2,
    )
    .unwrap_or_else(|e| {
        panic!(
            "{e}\n{}",
            tern.cli(&["routes", "--received", "198.51.100.1"]).1
        )
    });
    let got = tern.json(&["routes", "--received", "198.51.100.1"]);
    assert_eq!(got["accepted"], 1, "{got}");
    let routes = got["routes"].as_array().unwrap();
    let by = |p: &str| {
        routes
            .iter()
            .find(|r| r["prefix"] == p)
            .unwrap_or_else(|| panic!("{p}: {got}"))
    };
    assert_eq!(by(prefix)["accepted"], true, "{got}");
    assert_eq!(by(prefix)["best"], true, "{got}");
    assert_eq!(by("198.18.101.0/24")["accepted"], false, "{got}");
    let reason = by("198.18.101.0/24")["rejected_by"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.starts_with("import policy: ") && reason.contains("no-101"),
        "{got}"
    );
    assert_eq!(by("198.18.102.0/24")["as_path"], "65001 64512", "{got}");
    let reason = by("198.18.102.0/24")["rejected_by"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.starts_with("our AS appears 1 times in AS_PATH"),
        "{got}"
    );
    let (code, text) = tern.cli(&["routes", "--received", "198.51.100.1"]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.starts_with("Received from 198.51.100.1: 1 accepted, 2 rejected."),
        "{text}"
    );
    let one = tern.json(&["routes", "--received", "198.51.100.1", "198.18.101.0/24"]);
    assert_eq!(one["routes"].as_array().map(Vec::len), Some(1), "{one}");
    let (code, err) = tern.cli(&["routes", "--received", "198.51.100.77"]);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("198.51.100.77 is not a configured peer"),
        "{err}"
    );

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
/// `cargo test --release -p tern --test cli_lab -- --ignored --nocapture`, with
/// `TERN_ROUTES_N=1000000` for a million: more than 131,072 routes are IPv6 /128s
/// (the IPv4 benchmarking range holds no more host routes), over an IPv6 session.
#[test]
#[ignore = "a measurement: run with --release --ignored --nocapture"]
fn routes_on_a_100k_route_node() {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use std::time::Instant;
    use tern_interop::bench::inject::{FeedPeer, Injector, Phase};

    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail("cli_lab", &reason);
        return;
    }
    let n: u32 = std::env::var("TERN_ROUTES_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let v6 = n > 131_072;
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
    let (peer, table): (IpAddr, Vec<ipnet::IpNet>) = if v6 {
        for (ns, addr) in [(a, "2001:db8::10/64"), (tor, "2001:db8::1/64")] {
            ns.ip(&["-6", "addr", "add", addr, "dev", "eth0", "nodad"])
                .unwrap();
        }
        let base = u128::from("2001:db8:100::".parse::<Ipv6Addr>().unwrap());
        let table = (0..n)
            .map(|i| ipnet::IpNet::new(Ipv6Addr::from(base + u128::from(i)).into(), 128).unwrap())
            .collect();
        ("2001:db8::1".parse().unwrap(), table)
    } else {
        let table = (0..n)
            .map(|i| ipnet::IpNet::new(Ipv4Addr::from(0xC612_0000 + i).into(), 32).unwrap())
            .collect();
        ("198.51.100.1".parse().unwrap(), table)
    };
    let feed =
        FeedPeer::build(peer, Ipv4Addr::new(198, 51, 100, 1), 65001, true, &table, 0).unwrap();
    let mut injector = Injector::start(tor, vec![feed]).unwrap();
    let cluster = tmp.path().join("cluster.yaml");
    // tor-2 is not there: its session just stays down. The injector sends a
    // KEEPALIVE every 20 s: a hold time it keeps.
    let mut doc = CLUSTER.replace("holdTime: 9s, keepaliveTime: 3s", "holdTime: 240s");
    if v6 {
        doc = doc.replace(
            "ipv4Address: 198.51.100.10/24}",
            "ipv4Address: 198.51.100.10/24, ipv6Address: \"2001:db8::10/64\"}",
        );
        doc.push_str(
            "---\napiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {name: tor-v6}\n\
             spec: {peerIP: \"2001:db8::1\", asNumber: 65001, holdTime: 240s}\n",
        );
    }
    std::fs::write(&cluster, doc).unwrap();
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
    let daemon = Daemon::spawn(a.name(), run, &tern.log).unwrap_or_else(|e| panic!("{e}"));
    wait_for("the injector's session", Duration::from_secs(60), || {
        injector.established() == 1
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", tern.log()));
    let loaded = Instant::now();
    injector.set_phase(Phase::Full);
    let family = usize::from(v6);
    wait_for(
        "every route in the Loc-RIB",
        Duration::from_secs(600),
        || {
            let (code, out) = tern.cli(&["routes", "--count", "-o", "json"]);
            code == 0
                && serde_json::from_str::<serde_json::Value>(&out)
                    .is_ok_and(|v| v["families"][family]["prefixes"].as_u64() >= Some(u64::from(n)))
        },
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", tern.log()));
    // And in the kernel: the FIB task's work is done, so it does not share the CPU
    // with what is measured.
    wait_for(
        "every route in the kernel",
        Duration::from_secs(600),
        || {
            let family = if v6 { "-6" } else { "-4" };
            a.ip(&[family, "route", "show", "proto", "201"])
                .is_ok_and(|o| o.stdout.split(|b| *b == b'\n').count() > n as usize)
        },
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", tern.log()));
    eprintln!(
        "{n} routes in the RIB and the kernel after {:?}",
        loaded.elapsed()
    );
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
    // The daemon's memory: settled, and its peak while answering (VmHWM).
    let memory = |field: &str| {
        let pid = daemon.pid().unwrap_or_default();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with(field))
            .map(|l| l.trim_start_matches(field).trim().to_string())
            .unwrap_or_default()
    };
    eprintln!(
        "daemon before the queries: VmRSS {}, VmHWM {}",
        memory("VmRSS:"),
        memory("VmHWM:")
    );
    let (peer, one) = (
        peer.to_string(),
        table
            .get(1)
            .map(|p| p.addr().to_string())
            .unwrap_or_default(),
    );
    for args in [
        &["routes"][..],
        &["routes", "-o", "json"],
        &["routes", "--count"],
        &["routes", "--all"],
        &["routes", "--all", "-o", "json"],
        &["routes", "--received", &peer],
        &["routes", &one],
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
    eprintln!(
        "daemon after the queries: VmRSS {}, VmHWM {}",
        memory("VmRSS:"),
        memory("VmHWM:")
    );
}
