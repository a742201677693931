//! etcd stopped and restarted while the intent changes (issue 9, part 4). Two tern
//! nodes read Calico's keys from a real etcd (Debian `etcd-server`) in its own
//! namespace on the nodes' LAN; they peer with each other (node-to-node mesh) and with
//! a BIRD top-of-rack router. Then:
//! 1. a new block for node-b is written and etcd is killed (SIGKILL) right after;
//! 2. for 20 s without etcd nothing may change: no kernel route deleted on either
//!    node, no session reset, the ToR keeps every block, pods keep answering, and each
//!    tern says the datastore is unavailable (its log, and `tern status` in text and
//!    in JSON, `daemon.datastore_error`), which it stops saying once etcd is back;
//! 3. etcd comes back and at once a block of node-a is withdrawn and another added:
//!    every node and the ToR end with exactly the new intent (node-b's block from
//!    before the crash included), still without a session reset.
//!
//! Skips without root, etcd or BIRD; fails under CI=true.

#![cfg(target_os = "linux")]
// Setup helpers outside #[test] functions: a failed setup is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use tern_interop::bench::measure::FibWatch;
use tern_interop::etcd::Etcd;
use tern_interop::lab::probe::tern_cli;
use tern_interop::netns::{self, Netns};
use tern_interop::peers::{wait_for, Kind, Peer};
use tern_interop::process::Daemon;

const TERN: &str = env!("CARGO_BIN_EXE_tern");
const RES: &str = "/calico/resources/v3/projectcalico.org";
const ETCD_ADDR: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 250);
const A: &str = "198.51.100.10";
const B: &str = "198.51.100.11";
const TOR: &str = "198.51.100.1";

const BIRD_CONF: &str = r#"log stderr all;
router id 198.51.100.1;
protocol device { }
protocol static { ipv4; route 198.18.100.0/24 blackhole; }
template bgp node { local as 65001; hold time 9; keepalive time 3; connect retry time 1; error wait time 1,4;
  ipv4 { import all; export where source = RTS_STATIC; }; }
protocol bgp a from node { neighbor 198.51.100.10 as 64512; }
protocol bgp b from node { neighbor 198.51.100.11 as 64512; }
"#;

fn affinity_key(node: &str, block: &str) -> String {
    format!(
        "/calico/ipam/v2/host/{node}/ipv4/block/{}",
        block.replace('/', "-")
    )
}

const CONFIRMED: &str = r#"{"state":"confirmed","deleted":false}"#;

/// The cluster in Calico's etcd layout: mesh on, two nodes, the ToR as a global peer,
/// a pool, and blocks 198.18.4.0/26 + 198.18.5.0/26 on node-a, 198.18.4.64/26 on node-b.
fn load(etcd: &Etcd) {
    let docs = [
        (
            format!("{RES}/bgpconfigurations/default"),
            r#"{"kind":"BGPConfiguration","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},"spec":{"asNumber":64512,"nodeToNodeMeshEnabled":true}}"#.to_string(),
        ),
        (format!("{RES}/nodes/node-a"), format!(r#"{{"spec":{{"bgp":{{"ipv4Address":"{A}/24"}}}}}}"#)),
        (format!("{RES}/nodes/node-b"), format!(r#"{{"spec":{{"bgp":{{"ipv4Address":"{B}/24"}}}}}}"#)),
        (
            format!("{RES}/bgppeers/tor"),
            format!(r#"{{"spec":{{"peerIP":"{TOR}","asNumber":65001,"holdTime":"9s","keepaliveTime":"3s"}}}}"#),
        ),
        (format!("{RES}/ippools/pods"), r#"{"spec":{"cidr":"198.18.0.0/16","blockSize":26}}"#.to_string()),
        (affinity_key("node-a", "198.18.4.0/26"), CONFIRMED.to_string()),
        (affinity_key("node-a", "198.18.5.0/26"), CONFIRMED.to_string()),
        (affinity_key("node-b", "198.18.4.64/26"), CONFIRMED.to_string()),
    ];
    for (k, v) in docs {
        etcd.put(&k, &v).unwrap_or_else(|e| panic!("put {k}: {e}"));
    }
}

struct Node {
    ns: Netns,
    dir: std::path::PathBuf,
    tern: Option<Daemon>,
}

impl Node {
    fn start(&mut self, name: &str, endpoint: &str) {
        let yaml = self.dir.join("tern.yaml");
        std::fs::write(
            &yaml,
            format!(
                "node: {name}\ndatastore: {{type: etcdv3, endpoints: [\"{endpoint}\"]}}\ncontrol_socket: {}\nlog: info\n",
                self.dir.join("tern.sock").display()
            ),
        )
        .expect("write tern.yaml");
        let mut c = self.ns.command(TERN);
        c.args(["run", "--config"]).arg(&yaml);
        c.env("RUST_LOG", "info");
        self.tern = Some(Daemon::spawn(name, c, &self.dir.join("tern.log")).expect("start tern"));
    }

    fn cli(&self, args: &[&str]) -> (i32, String) {
        tern_cli(Path::new(TERN), &self.dir.join("tern.sock"), args)
    }

    /// Each peer's state and the time it entered it (a reset changes `since`).
    fn sessions(&self) -> Vec<(String, String, String)> {
        let (_, out) = self.cli(&["peers", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        let mut s: Vec<(String, String, String)> = v["peers"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .map(|p| {
                        (
                            p["address"].as_str().unwrap_or("").to_string(),
                            p["state"].as_str().unwrap_or("").to_string(),
                            p["since"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        s.sort();
        s
    }

    /// tern's kernel routes: `dst via gw` or `blackhole dst`.
    fn routes(&self) -> BTreeSet<String> {
        let out = self
            .ns
            .ip(&["-4", "route", "show", "proto", "201"])
            .expect("ip route");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                match w.as_slice() {
                    ["blackhole", dst, ..] => format!("blackhole {dst}"),
                    [dst, "via", gw, ..] => format!("{dst} via {gw}"),
                    _ => l.trim().to_string(),
                }
            })
            .collect()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("tern.log")).unwrap_or_default()
    }

    fn ping(&self, src: &str, dst: &str) -> bool {
        self.ns
            .exec("ping", &["-c", "1", "-W", "2", "-I", src, dst])
            .is_ok()
    }
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// Whether the ToR has each of `want` (`prefix via owner`) among its paths and no other
/// prefix. Each node also passes the other's block on (Calico exports everything to
/// global peers), so a prefix may have a second path; the owner's must be there.
fn tor_has_exactly(tor: &Peer, want: &BTreeSet<String>) -> bool {
    let have = tor_routes(tor);
    let prefixes = |s: &BTreeSet<String>| -> BTreeSet<String> {
        s.iter()
            .filter_map(|r| r.split_whitespace().next().map(String::from))
            .collect()
    };
    want.is_subset(&have) && prefixes(&have) == prefixes(want)
}

/// The ToR's IPv4 BGP routes (every path) as `prefix via next-hop`.
fn tor_routes(tor: &Peer) -> BTreeSet<String> {
    let out = tor
        .cli(&["show", "route", "protocol", "a"])
        .unwrap_or_default()
        + &tor
            .cli(&["show", "route", "protocol", "b"])
            .unwrap_or_default();
    let mut s = BTreeSet::new();
    let mut prefix = String::new();
    for l in out.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if let Some(first) = w.first().filter(|f| f.starts_with("198.18.")) {
            prefix = first.to_string();
        }
        if let Some(i) = w.iter().position(|x| *x == "via") {
            if let Some(gw) = w.get(i + 1) {
                s.insert(format!("{prefix} via {gw}"));
            }
        }
    }
    s
}

#[test]
fn etcd_outage_while_the_intent_changes_loses_nothing() {
    let test = "etcd_outage";
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail(test, &reason);
        return;
    }
    for p in ["etcd", "bird"] {
        if !tern_interop::have_program(p) {
            tern_interop::skip_or_fail(test, &format!("{p} is not installed"));
            return;
        }
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    // etcd fsyncs every write: keep its data in memory when /dev/shm is there.
    let etcd_dir = tempfile::Builder::new()
        .prefix("tern-t9e-")
        .tempdir_in(if Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        })
        .expect("etcd dir");
    let (_sw, mut nss) = netns::lan(
        "t9e-sw",
        &[
            ("t9e-a", &format!("{A}/24")),
            ("t9e-b", &format!("{B}/24")),
            ("t9e-tor", &format!("{TOR}/24")),
            ("t9e-etcd", &format!("{ETCD_ADDR}/24")),
        ],
    )
    .expect("LAN");
    let etcd_ns = nss.pop().expect("etcd ns");
    let tor_ns = nss.pop().expect("tor ns");
    let mk = |ns: Netns, name: &str, pods: &[&str]| {
        for p in pods {
            ns.add_addr("lo", p).expect("pod address");
        }
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        Node {
            ns,
            dir,
            tern: None,
        }
    };
    let mut b = mk(
        nss.pop().expect("b"),
        "b",
        &["198.18.4.66/32", "198.18.6.1/32"],
    );
    let mut a = mk(
        nss.pop().expect("a"),
        "a",
        &["198.18.4.1/32", "198.18.7.1/32"],
    );

    let mut etcd = Etcd::start(&etcd_ns, ETCD_ADDR, etcd_dir.path()).expect("etcd");
    load(&etcd);
    let tor = Peer::start(Kind::Bird, &tor_ns, &tmp.path().join("tor"), BIRD_CONF).expect("BIRD");
    a.start("node-a", &etcd.endpoint());
    b.start("node-b", &etcd.endpoint());

    let tor_pfx = format!("198.18.100.0/24 via {TOR}");
    let a_want = set(&[
        &format!("198.18.4.64/26 via {B}"),
        &tor_pfx,
        "blackhole 198.18.4.0/26",
        "blackhole 198.18.5.0/26",
    ]);
    let b_want = set(&[
        &format!("198.18.4.0/26 via {A}"),
        &format!("198.18.5.0/26 via {A}"),
        &tor_pfx,
        "blackhole 198.18.4.64/26",
    ]);
    let tor_want = set(&[
        &format!("198.18.4.0/26 via {A}"),
        &format!("198.18.5.0/26 via {A}"),
        &format!("198.18.4.64/26 via {B}"),
    ]);
    let all_up = |n: &Node| {
        let s = n.sessions();
        s.len() == 2 && s.iter().all(|p| p.1 == "Established")
    };
    let t = Instant::now();
    if wait_for("the first convergence", Duration::from_secs(60), || {
        a.routes() == a_want
            && b.routes() == b_want
            && tor_has_exactly(&tor, &tor_want)
            && all_up(&a)
            && all_up(&b)
    })
    .is_err()
    {
        panic!(
            "not converged: a {:?} b {:?} tor {:?}\n--- a log\n{}\n--- b log\n{}",
            a.routes(),
            b.routes(),
            tor_routes(&tor),
            a.log(),
            b.log()
        );
    }
    eprintln!(
        "[etcd] converged {:.1} s after start",
        t.elapsed().as_secs_f64()
    );
    let sessions = (a.sessions(), b.sessions());
    let watches = [
        FibWatch::start(&a.ns, 201).expect("watch a"),
        FibWatch::start(&b.ns, 201).expect("watch b"),
    ];

    // 1. A change, then etcd killed right after it was committed.
    etcd.put(&affinity_key("node-b", "198.18.6.0/26"), CONFIRMED)
        .expect("put the new block");
    etcd.kill();
    let down = Instant::now();

    // 2. Twenty seconds without etcd: nothing may go.
    for n in [&a, &b] {
        wait_for("the outage noticed", Duration::from_secs(15), || {
            n.log().contains("datastore unavailable")
        })
        .unwrap_or_else(|e| panic!("{e}: tern did not report the outage:\n{}", n.log()));
    }
    eprintln!(
        "[etcd] both terns logged the datastore unavailable {:.1} s after the kill",
        down.elapsed().as_secs_f64()
    );
    let (_, status) = a.cli(&["status"]);
    let (_, diagnose) = a.cli(&["diagnose"]);
    eprintln!("[etcd] tern status and diagnose while etcd is down:\n{status}\n{diagnose}");
    assert!(
        status.contains("datastore unreachable, the configuration in force stays: since "),
        "tern status does not say etcd is down:\n{status}"
    );
    let datastore_error = |n: &Node| {
        let (_, json) = n.cli(&["status", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
        v["daemon"]["datastore_error"].as_str().map(String::from)
    };
    let e = datastore_error(&a).unwrap_or_default();
    assert!(e.starts_with("since ") && e.contains("etcd"), "{e:?}");
    while down.elapsed() < Duration::from_secs(20) {
        // node-b's new block may or may not have reached the terns before the kill.
        let mut a_now = a.routes();
        a_now.remove(&format!("198.18.6.0/26 via {B}"));
        let mut b_now = b.routes();
        b_now.remove("blackhole 198.18.6.0/26");
        assert_eq!(a_now, a_want, "node-a's routes changed while etcd was down");
        assert_eq!(b_now, b_want, "node-b's routes changed while etcd was down");
        assert!(
            tor_routes(&tor).is_superset(&tor_want),
            "the ToR lost routes: {:?}",
            tor_routes(&tor)
        );
        assert_eq!(
            (a.sessions(), b.sessions()),
            sessions,
            "a session was reset"
        );
        assert!(a.ping("198.18.4.1", "198.18.4.66"), "pod a -> pod b");
        assert_eq!(a.cli(&["health", "--live"]).0, 0, "not live without etcd");
        std::thread::sleep(Duration::from_secs(2));
    }
    for (w, n) in watches.iter().zip(["node-a", "node-b"]) {
        assert_eq!(
            w.get().removed,
            0,
            "{n} deleted kernel routes during the outage"
        );
    }

    // 3. etcd back; at once node-a loses 198.18.5.0/26 and gains 198.18.7.0/26.
    etcd.restart().expect("etcd restart");
    let back = Instant::now();
    etcd.delete(&affinity_key("node-a", "198.18.5.0/26"))
        .expect("delete a block");
    etcd.put(&affinity_key("node-a", "198.18.7.0/26"), CONFIRMED)
        .expect("put a block");
    let a_want = set(&[
        &format!("198.18.4.64/26 via {B}"),
        &format!("198.18.6.0/26 via {B}"),
        &tor_pfx,
        "blackhole 198.18.4.0/26",
        "blackhole 198.18.7.0/26",
    ]);
    let b_want = set(&[
        &format!("198.18.4.0/26 via {A}"),
        &format!("198.18.7.0/26 via {A}"),
        &tor_pfx,
        "blackhole 198.18.4.64/26",
        "blackhole 198.18.6.0/26",
    ]);
    let tor_want = set(&[
        &format!("198.18.4.0/26 via {A}"),
        &format!("198.18.7.0/26 via {A}"),
        &format!("198.18.4.64/26 via {B}"),
        &format!("198.18.6.0/26 via {B}"),
    ]);
    if wait_for("the new intent everywhere", Duration::from_secs(60), || {
        a.routes() == a_want && b.routes() == b_want && tor_has_exactly(&tor, &tor_want)
    })
    .is_err()
    {
        panic!(
            "after etcd came back: a {:?}\nb {:?}\ntor {:?}\n--- a log\n{}\n--- b log\n{}\n--- etcd\n{}",
            a.routes(),
            b.routes(),
            tor_routes(&tor),
            a.log(),
            b.log(),
            etcd.log_tail()
        );
    }
    eprintln!(
        "[etcd] new intent in every FIB and at the ToR {:.1} s after etcd was back",
        back.elapsed().as_secs_f64()
    );
    assert_eq!(
        (a.sessions(), b.sessions()),
        sessions,
        "a session was reset"
    );
    for n in [&a, &b] {
        assert!(n.log().contains("etcd available again"), "{}", n.log());
    }
    assert_eq!(
        datastore_error(&a),
        None,
        "tern status still says etcd is down"
    );
    assert!(a.ping("198.18.7.1", "198.18.6.1"), "new block to new block");
    assert!(
        b.ping("198.18.4.66", "198.18.4.1"),
        "old block to old block"
    );
    // Withdrawals are the only deletions: node-a's blackhole and node-b's route.
    let removed: Vec<u64> = watches.iter().map(|w| w.get().removed).collect();
    assert_eq!(removed, [1, 1], "kernel deletions on node-a, node-b");
    drop(watches);
    drop(tor);
    for n in [&mut a, &mut b] {
        if let Some(mut t) = n.tern.take() {
            t.stop(Duration::from_secs(5));
        }
    }
}
