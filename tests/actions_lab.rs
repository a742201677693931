//! The operator's actions against a real peer: one `tern run` node and a BIRD router
//! on a LAN in network namespaces, BIRD announcing 198.18.100.0/24. `tern reset`
//! (BIRD logs the Administrative Reset with the operator's text, the session comes
//! back; two `tern monitor` streams, one filtered by prefix, see it happen), `--soft in` (a ROUTE-REFRESH goes out and BIRD sends its routes again),
//! `--soft out` (tern sends its routes again), `disable` (the session stays down and
//! the route goes, whatever BIRD tries) and `enable`, `drain` / `undrain` (BIRD sees
//! our block with GRACEFUL_SHUTDOWN, then without, the session untouched), `log-level`
//! (debug lines appear; a bad filter is refused). Skips without root or BIRD; fails under CI=true.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is the verdict

use std::path::{Path, PathBuf};
use std::time::Duration;

use tern_interop::lab::probe::tern_cli;
use tern_interop::netns::lan;
use tern_interop::peers::{wait_for, Kind, Peer};
use tern_interop::process::Daemon;

const TERN: &str = env!("CARGO_BIN_EXE_tern");
const BIRD_IP: &str = "198.51.100.1";
const PREFIX: &str = "198.18.100.0/24";

const BIRD: &str = r#"log stderr all;
router id 198.51.100.1;
protocol device { }
protocol static { ipv4; route 198.18.100.0/24 blackhole; }
protocol bgp tern { local as 65001; neighbor 198.51.100.10 as 64512; hold time 9; keepalive time 3;
  connect retry time 1; error wait time 1,4;
  ipv4 { import all; export where source = RTS_STATIC; }; }
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

    /// `tern peers BIRD -o json`'s peer, once the daemon answers.
    fn peer_now(&self) -> Option<serde_json::Value> {
        let (code, out) = self.cli(&["peers", BIRD_IP, "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).ok().filter(|_| code == 0)?;
        Some(v["peers"][0].clone())
    }

    /// The same, which must be there.
    fn peer(&self) -> serde_json::Value {
        self.peer_now()
            .unwrap_or_else(|| panic!("{}", self.cli(&["peers", BIRD_IP]).1))
    }

    fn established(&self) -> bool {
        self.peer_now().is_some_and(|p| p["state"] == "Established")
    }

    fn has_route(&self) -> bool {
        let (code, out) = self.cli(&["routes", PREFIX, "-o", "json"]);
        code == 0 && out.contains("\"198.18.100.0/24\"")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A `tern monitor -o json` process and the events it printed so far.
struct Monitor {
    child: std::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
}

impl Monitor {
    fn start(tern: &Tern, args: &[&str]) -> Monitor {
        let mut child = std::process::Command::new(TERN)
            .arg("monitor")
            .args(args)
            .args(["-o", "json", "--socket"])
            .arg(&tern.socket)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = std::sync::Arc::clone(&lines);
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&l) {
                    into.lock().unwrap().push(v);
                }
            }
        });
        // Subscribed before anything happens.
        let m = Monitor { child, lines };
        wait_for("the monitor to subscribe", Duration::from_secs(10), || {
            !m.lines().is_empty()
        })
        .unwrap();
        m
    }

    fn lines(&self) -> Vec<serde_json::Value> {
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn count(p: &serde_json::Value, dir: &str, kind: &str) -> u64 {
    p[dir][kind].as_u64().unwrap_or(0)
}

#[test]
fn reset_soft_disable_enable_and_log_level_against_bird() {
    let test = "actions_lab";
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail(test, &reason);
        return;
    }
    if !tern_interop::have_program("bird") {
        tern_interop::skip_or_fail(test, "bird is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (_sw, nodes) = lan(
        "tac-sw",
        &[
            ("tac-a", "198.51.100.10/24"),
            ("tac-tor", "198.51.100.1/24"),
        ],
    )
    .unwrap();
    let [a, tor] = &nodes[..] else {
        panic!("two namespaces")
    };
    let (dir_a, dir_tor) = (tmp.path().join("a"), tmp.path().join("tor"));
    for d in [&dir_a, &dir_tor] {
        std::fs::create_dir_all(d).unwrap();
    }
    let cluster = tmp.path().join("cluster.yaml");
    std::fs::write(&cluster, CLUSTER).unwrap();
    let tern = Tern {
        socket: dir_a.join("tern.sock"),
        log: dir_a.join("tern.log"),
    };
    std::fs::write(
        dir_a.join("tern.yaml"),
        format!(
            "node: node-a\ndatastore: {{type: file, path: {}}}\ncontrol_socket: {}\nlog: info\nfib: {{enabled: false}}\n",
            cluster.display(),
            tern.socket.display()
        ),
    )
    .unwrap();
    let bird = Peer::start(Kind::Bird, tor, &dir_tor, BIRD).unwrap_or_else(|e| panic!("{e}"));
    let mut run = a.command(TERN);
    run.args(["run", "--config"]).arg(dir_a.join("tern.yaml"));
    let _daemon = Daemon::spawn(a.name(), run, &tern.log).unwrap_or_else(|e| panic!("{e}"));
    let fail = |what: &str| -> ! {
        panic!(
            "{test}: {what}\n--- tern ---\n{}\n--- bird ---\n{}",
            tern.log(),
            bird.log()
        )
    };
    let up = |what: &str| {
        wait_for(what, Duration::from_secs(60), || {
            tern.established() && tern.has_route()
        })
        .unwrap_or_else(|e| fail(&e.to_string()));
    };
    up("the session and BIRD's route");

    // `tern monitor` sees what follows: one stream of everything, one of the prefix.
    let all = Monitor::start(&tern, &[]);
    let only_prefix = Monitor::start(&tern, &["--prefix", PREFIX]);

    // Hard reset: BIRD hears an Administrative Reset with our text; the session and
    // the route come back.
    let flaps = tern.peer()["flaps"].as_u64().unwrap_or(0);
    let (code, out) = tern.cli(&["reset", BIRD_IP, "--message", "planned maintenance"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("Administrative Reset"), "{out}");
    wait_for("BIRD to log the reset", Duration::from_secs(20), || {
        let l = bird.log().to_lowercase();
        l.contains("administrative reset") && l.contains("planned maintenance")
    })
    .unwrap_or_else(|e| fail(&e.to_string()));
    wait_for("the session to flap", Duration::from_secs(30), || {
        tern.peer()["flaps"].as_u64().unwrap_or(0) > flaps
    })
    .unwrap_or_else(|e| fail(&e.to_string()));
    up("the session back after the reset");
    assert!(
        tern.log()
            .contains("control: `reset 198.51.100.1` asked by uid 0"),
        "{}",
        tern.log()
    );
    // The monitor saw the session go down and come back, and the route go and come
    // back; the prefix's stream saw the route only.
    let seen = |m: &Monitor, kind: &str, subject: &str, text: &str| {
        m.lines().iter().any(|e| {
            e["type"] == kind
                && (e["peer"] == subject || e["prefix"] == subject)
                && e["text"].as_str().is_some_and(|t| t.starts_with(text))
        })
    };
    wait_for("the monitor's events", Duration::from_secs(20), || {
        seen(
            &all,
            "session",
            BIRD_IP,
            "down: sent NOTIFICATION Cease / Administrative Reset",
        ) && seen(&all, "session", BIRD_IP, "Established")
            && seen(&all, "route", PREFIX, "withdrawn")
            && seen(&all, "route", PREFIX, "best via 198.51.100.1")
            && seen(&only_prefix, "route", PREFIX, "withdrawn")
            && seen(&only_prefix, "route", PREFIX, "best via")
    })
    .unwrap_or_else(|e| fail(&format!("{e}: {:#?}", all.lines())));
    let first = &all.lines()[0];
    assert_eq!(first["type"], "subscribed", "{first}");
    assert!(
        only_prefix
            .lines()
            .iter()
            .all(|e| e["type"] != "session" && (e["type"] != "route" || e["prefix"] == PREFIX)),
        "{:#?}",
        only_prefix.lines()
    );
    drop((all, only_prefix));

    // Soft in: a ROUTE-REFRESH goes out, and BIRD answers with its routes again.
    let before = tern.peer();
    let (code, out) = tern.cli(&["reset", BIRD_IP, "--soft", "in"]);
    assert_eq!(code, 0, "{out}");
    wait_for("BIRD's routes again", Duration::from_secs(20), || {
        let p = tern.peer();
        count(&p, "messages_sent", "route_refresh")
            > count(&before, "messages_sent", "route_refresh")
            && count(&p, "messages_received", "update")
                > count(&before, "messages_received", "update")
    })
    .unwrap_or_else(|e| fail(&format!("{e}: {}", tern.peer())));

    // Soft out: our block goes out again.
    let before = tern.peer();
    let (code, out) = tern.cli(&["reset", BIRD_IP, "--soft", "out"]);
    assert_eq!(code, 0, "{out}");
    wait_for("our routes sent again", Duration::from_secs(20), || {
        count(&tern.peer(), "messages_sent", "update") > count(&before, "messages_sent", "update")
    })
    .unwrap_or_else(|e| fail(&format!("{e}: {}", tern.peer())));

    // Disable: the session goes down and stays down while BIRD keeps trying (every
    // second); BIRD's route goes.
    let (code, out) = tern.cli(&["disable", BIRD_IP, "--message", "draining the rack"]);
    assert_eq!(code, 0, "{out}");
    wait_for(
        "the session down and the route gone",
        Duration::from_secs(20),
        || !tern.established() && !tern.has_route(),
    )
    .unwrap_or_else(|e| fail(&e.to_string()));
    std::thread::sleep(Duration::from_secs(5));
    let p = tern.peer();
    assert_ne!(p["state"], "Established", "{p}");
    assert_eq!(p["disabled"], true, "{p}");
    let (_, detail) = tern.cli(&["peers", BIRD_IP]);
    assert!(detail.contains("disabled by the operator"), "{detail}");
    assert!(bird.log().contains("draining the rack"), "{}", bird.log());
    // A reset of a disabled peer is refused, naming the way out.
    let (code, out) = tern.cli(&["reset", BIRD_IP]);
    assert_eq!(code, 5, "{out}");
    assert!(out.contains("tern enable 198.51.100.1"), "{out}");

    // Enable: back up.
    let (code, out) = tern.cli(&["enable", BIRD_IP]);
    assert_eq!(code, 0, "{out}");
    up("the session back after enable");
    assert_eq!(tern.peer()["disabled"], false);

    // Drain: BIRD sees our block with GRACEFUL_SHUTDOWN (65535,0) while the session
    // stays up; undrain takes it off.
    let block = || {
        bird.cli(&["show", "route", "all", "for", "198.18.4.0/26"])
            .unwrap_or_default()
    };
    let flaps = tern.peer()["flaps"].as_u64().unwrap_or(0);
    let (code, out) = tern.cli(&["drain"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("GRACEFUL_SHUTDOWN"), "{out}");
    wait_for("the community at BIRD", Duration::from_secs(20), || {
        block().contains("(65535,0)")
    })
    .unwrap_or_else(|e| fail(&format!("{e}: {}", block())));
    let (_, status) = tern.cli(&["status"]);
    assert!(status.contains("draining"), "{status}");
    let (code, out) = tern.cli(&["undrain"]);
    assert_eq!(code, 0, "{out}");
    wait_for(
        "the community gone at BIRD",
        Duration::from_secs(20),
        || {
            let b = block();
            b.contains("198.18.4.0/26") && !b.contains("(65535,0)")
        },
    )
    .unwrap_or_else(|e| fail(&format!("{e}: {}", block())));
    assert_eq!(
        tern.peer()["flaps"].as_u64().unwrap_or(0),
        flaps,
        "drain reset the session"
    );
    let (_, status) = tern.cli(&["status"]);
    assert!(!status.contains("draining"), "{status}");

    // A peer that is not configured, and a soft reset with no such peer.
    let (code, out) = tern.cli(&["reset", "198.51.100.99"]);
    assert_eq!(code, 5, "{out}");
    assert!(out.contains("not a configured peer"), "{out}");

    // log-level: the session's state changes are logged at debug; with `log: info`
    // they appear only between `log-level debug` and `log-level info`. A bad filter is
    // refused.
    let debug_lines = || tern.log().lines().filter(|l| l.contains("DEBUG")).count();
    assert_eq!(debug_lines(), 0, "{}", tern.log());
    let (code, out) = tern.cli(&["log-level", "debug"]);
    assert_eq!(code, 0, "{out}");
    tern.cli(&["reset", BIRD_IP]);
    wait_for("debug lines", Duration::from_secs(20), || debug_lines() > 0)
        .unwrap_or_else(|e| fail(&e.to_string()));
    up("the session back after the debug reset");
    let (code, out) = tern.cli(&["log-level", "tern=[nonsense"]);
    assert_eq!(code, 5, "{out}");
    assert!(out.contains("not a log level or filter"), "{out}");
    let (code, out) = tern.cli(&["log-level", "info"]);
    assert_eq!(code, 0, "{out}");
    let loud = debug_lines();
    let flaps = tern.peer()["flaps"].as_u64().unwrap_or(0);
    tern.cli(&["reset", BIRD_IP]);
    wait_for("the last flap", Duration::from_secs(30), || {
        tern.peer()["flaps"].as_u64().unwrap_or(0) > flaps
    })
    .unwrap_or_else(|e| fail(&e.to_string()));
    up("the session back after the last reset");
    assert_eq!(debug_lines(), loud, "debug lines after `log-level info`");
}
