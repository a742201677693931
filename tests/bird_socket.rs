//! tern's BIRD-compatible sockets as Calico's tools read them. A replica of
//! calico-node's readiness check (`node/pkg/health/health.go` `checkBIRDReady`, with
//! `node/pkg/health/bird/bird.go` `GetPeers` / `scanBIRDPeers` / `unmarshalBIRD` /
//! `GRInProgress`, the per-family socket variant that calicoctl's
//! `calicoctl/commands/node/status.go` also uses) must call tern ready exactly when
//! its sessions are Established and no graceful restart runs: first on rendered
//! replies (no root needed), then live: tern and a BIRD router in network
//! namespaces, with the real `birdc` and the replica on tern's sockets before and
//! after the peer is up, and after it goes away. The live part skips without root or
//! BIRD, and fails under CI=true.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a panic is the failure

use std::io::BufRead;
use std::time::{Duration, SystemTime};

use tern::birdsock::render::{parse, reply};
use tern::birdsock::{BirdPeer, BirdView, Family};
use tern_config::intent::PeerKind;

/// One peer row as calico-node's `bgpPeer` holds it.
#[derive(Debug, Clone, PartialEq)]
struct CalicoPeer {
    peer_ip: String,
    peer_type: String,
    state: String,
    since: String,
    bgp_state: String,
    info: String,
}

/// `unmarshalBIRD`: at least six whitespace-separated columns, proto `BGP`, a name
/// `(Global|Node|Mesh)_<ip with _>`; the IP's separators come back from the family.
fn unmarshal(line: &str, sep: &str) -> Option<CalicoPeer> {
    let c: Vec<&str> = line.split_whitespace().collect();
    if c.len() < 6 || c[1] != "BGP" {
        return None;
    }
    let (kind, ip) = c[0].split_once('_')?;
    let peer_type = match kind {
        "Global" => "global",
        "Mesh" => "node-to-node mesh",
        "Node" => "node specific",
        _ => return None,
    };
    if ip.is_empty() {
        return None;
    }
    Some(CalicoPeer {
        peer_ip: ip.replace('_', sep),
        peer_type: peer_type.into(),
        state: c[3].into(),
        since: c[4].into(),
        bgp_state: c[5].into(),
        info: c[6..].join(" "),
    })
}

/// `scanBIRDPeers` on the reply to `show protocols`: `0000` ends it, `0001` and a
/// `2002` heading of exactly the expected columns are skipped, `1002-` and ` ` lines
/// are rows; any other line is an error.
fn scan_peers(reply: impl BufRead, ipv6: bool) -> Result<Vec<CalicoPeer>, String> {
    let sep = if ipv6 { ":" } else { "." };
    let mut peers = Vec::new();
    for line in reply.lines() {
        let s = line.map_err(|e| e.to_string())?;
        if s.starts_with("0000") {
            break;
        } else if s.starts_with("0001") {
        } else if s.starts_with("2002") {
            let f: Vec<&str> = s.get(5..).unwrap_or("").split_whitespace().collect();
            if f != ["name", "proto", "table", "state", "since", "info"] {
                return Err("unknown BIRD table output format".into());
            }
        } else if s.starts_with("1002") {
            peers.extend(unmarshal(s.get(5..).unwrap_or(""), sep));
        } else if let Some(rest) = s.strip_prefix(' ') {
            peers.extend(unmarshal(rest, sep));
        } else {
            return Err(format!("unexpected output line from BIRD: '{s}'"));
        }
    }
    Ok(peers)
}

/// `GRInProgress` on the reply to `show status`: `0024` means a graceful restart
/// runs, `0013` ends the report; the other expected codes and ` ` rows are skipped.
fn gr_in_progress(reply: impl BufRead) -> Result<bool, String> {
    for line in reply.lines() {
        let s = line.map_err(|e| e.to_string())?;
        if s.starts_with("0013") {
            break;
        } else if s.starts_with("0024") {
            return Ok(true);
        } else if ["0001", "1000", "1011", " "]
            .iter()
            .any(|p| s.starts_with(p))
        {
        } else {
            return Err(format!("unexpected output line from BIRD: '{s}'"));
        }
    }
    Ok(false)
}

/// `checkBIRDReady` within the start-up threshold (the nodename file is recent):
/// no peers is ready; otherwise every peer must be Established and no graceful
/// restart in progress. After the threshold one Established peer is enough.
fn check_ready(
    peers: &[CalicoPeer],
    gr: impl FnOnce() -> Result<bool, String>,
    within_threshold: bool,
) -> Result<(), String> {
    let down: Vec<&str> = peers
        .iter()
        .filter(|p| p.bgp_state != "Established")
        .map(|p| p.peer_ip.as_str())
        .collect();
    if peers.is_empty() {
        Ok(())
    } else if within_threshold {
        if !down.is_empty() {
            return Err(format!("BGP not established with {}", down.join(",")));
        }
        if gr()? {
            return Err("graceful restart in progress".into());
        }
        Ok(())
    } else if down.len() < peers.len() {
        Ok(())
    } else {
        Err(format!("BGP not established with {}", down.join(",")))
    }
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_712_400 + secs)
}

fn peer(address: &str, kind: PeerKind, up: bool) -> BirdPeer {
    BirdPeer {
        address: address.parse().unwrap(),
        port: 179,
        kind,
        passive: false,
        remote_as: 64512,
        local_as: 64512,
        source: None,
        up,
        state: if up { "Established" } else { "Active" }.into(),
        since: at(1),
        last_error: (!up).then(|| "connection refused".to_string()),
        capabilities: Vec::new(),
        rr_client: false,
        received: 0,
        advertised: 0,
    }
}

/// The replica on rendered replies of `view`.
fn ready_from_render(view: &BirdView, family: Family) -> Result<(), String> {
    let now = at(10);
    let table = reply(&parse("show protocols"), Ok(view), family, now);
    let status = reply(&parse("show status"), Ok(view), family, now);
    let peers = scan_peers(table.as_bytes(), family == Family::V6)?;
    check_ready(&peers, || gr_in_progress(status.as_bytes()), true)
}

#[test]
fn calicos_readiness_parser_follows_sessions_and_graceful_restart() {
    let mut v = BirdView {
        router_id: Some("198.51.100.10".parse().unwrap()),
        started: at(0),
        in_grace: true,
        not_configured: None,
        peers: vec![
            peer("198.51.100.11", PeerKind::Mesh, false),
            peer("198.51.100.1", PeerKind::Global, false),
            peer("2001:db8:100::1", PeerKind::NodeSpecific, false),
        ],
    };
    let e = ready_from_render(&v, Family::V4).unwrap_err();
    assert_eq!(e, "BGP not established with 198.51.100.11,198.51.100.1");
    v.peers[0].up = true;
    v.peers[0].state = "Established".into();
    v.peers[1].up = true;
    v.peers[1].state = "Established".into();
    // IPv4 all up, but tern's restart grace still runs.
    assert_eq!(
        ready_from_render(&v, Family::V4).unwrap_err(),
        "graceful restart in progress"
    );
    v.in_grace = false;
    assert_eq!(ready_from_render(&v, Family::V4), Ok(()));
    // bird6.ctl shows only the IPv6 session, with its address rebuilt by the parser.
    assert_eq!(
        ready_from_render(&v, Family::V6).unwrap_err(),
        "BGP not established with 2001:db8:100::1"
    );
    v.peers[2].up = true;
    assert_eq!(ready_from_render(&v, Family::V6), Ok(()));
    // calicoctl's table: address, type, state, since, info.
    let table = reply(&parse("show protocols"), Ok(&v), Family::V4, at(10));
    let rows = scan_peers(table.as_bytes(), false).unwrap();
    assert_eq!(
        rows[0],
        CalicoPeer {
            peer_ip: "198.51.100.11".into(),
            peer_type: "node-to-node mesh".into(),
            state: "up".into(),
            since: "17:00:01".into(),
            bgp_state: "Established".into(),
            info: String::new(),
        }
    );
    // Before any configuration the probe fails instead of seeing "no peers".
    v.not_configured = Some("waiting for the datastore".into());
    assert!(ready_from_render(&v, Family::V4)
        .unwrap_err()
        .starts_with("unexpected output line from BIRD: '8002 "));
}

#[cfg(target_os = "linux")]
mod live {
    use super::*;
    use std::io::{BufReader, Write};
    use std::os::unix::net::UnixStream;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use tern_interop::netns::Netns;
    use tern_interop::peers::{wait_for, Kind, Peer};
    use tern_interop::process::Daemon;

    const TERN: &str = env!("CARGO_BIN_EXE_tern");

    const CLUSTER: &str = r#"apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: 64512, nodeToNodeMeshEnabled: true}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 198.51.100.10/24, ipv6Address: "2001:db8:100::10/64"}}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor}
spec: {peerIP: 198.51.100.1, asNumber: 65001, holdTime: 9s, keepaliveTime: 3s}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor6}
spec: {peerIP: "2001:db8:100::1", asNumber: 65001, holdTime: 9s, keepaliveTime: 3s}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pods}
spec: {cidr: 198.18.0.0/16, blockSize: 26}
"#;

    const BIRD_CONF: &str = r#"log stderr all;
router id 198.51.100.1;
protocol device { }
protocol static { ipv4; route 198.18.100.0/24 blackhole; }
template bgp tern { local as 65001; hold time 9; keepalive time 3; connect retry time 1; error wait time 1,4; }
protocol bgp a4 from tern { neighbor 198.51.100.10 as 64512; ipv4 { import all; export where source = RTS_STATIC; }; }
protocol bgp a6 from tern { neighbor 2001:db8:100::10 as 64512; ipv6 { import all; export none; }; }
"#;

    /// Sends one command the way calico-node does (its own connection, 2 s read
    /// timeout) and returns the reply's lines.
    fn ask(socket: &Path, command: &str) -> Result<Vec<u8>, String> {
        let mut c =
            UnixStream::connect(socket).map_err(|e| format!("{}: {e}", socket.display()))?;
        c.set_read_timeout(Some(Duration::from_secs(2)))
            .map_err(|e| e.to_string())?;
        c.write_all(format!("{command}\n").as_bytes())
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for line in BufReader::new(c).lines() {
            let line = line.map_err(|e| format!("{command}: {e}"))?;
            let last = line.len() > 4 && line.as_bytes()[4] == b' ' && !line.starts_with("0001");
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
            if last {
                break;
            }
        }
        Ok(out)
    }

    /// The replica against a live socket: `show protocols` then `show status`.
    fn probe(socket: &Path, ipv6: bool) -> Result<Vec<CalicoPeer>, String> {
        let peers = scan_peers(ask(socket, "show protocols")?.as_slice(), ipv6)?;
        check_ready(
            &peers,
            || gr_in_progress(ask(socket, "show status")?.as_slice()),
            true,
        )?;
        Ok(peers)
    }

    fn birdc(socket: &Path, args: &[&str]) -> String {
        let o = Command::new("birdc")
            .arg("-s")
            .arg(socket)
            .args(args)
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    }

    struct Lab {
        dir: PathBuf,
        tern: Daemon,
    }

    impl Lab {
        fn v4(&self) -> PathBuf {
            self.dir.join("calico/bird.ctl")
        }
        fn v6(&self) -> PathBuf {
            self.dir.join("calico/bird6.ctl")
        }
        fn log(&self) -> String {
            std::fs::read_to_string(self.dir.join("tern.log")).unwrap_or_default()
        }
    }

    fn start_tern(ns: &Netns, dir: &Path) -> Lab {
        std::fs::write(dir.join("cluster.yaml"), CLUSTER).unwrap();
        write_tern_yaml(dir);
        Lab {
            dir: dir.to_path_buf(),
            tern: spawn_tern(ns, dir),
        }
    }

    fn spawn_tern(ns: &Netns, dir: &Path) -> Daemon {
        let mut c = ns.command(TERN);
        c.args(["run", "--config"]).arg(dir.join("tern.yaml"));
        c.env("RUST_LOG", "info");
        Daemon::spawn(ns.name(), c, &dir.join("tern.log")).unwrap()
    }

    fn write_tern_yaml(dir: &Path) {
        std::fs::write(
            dir.join("tern.yaml"),
            format!(
                "node: node-a\ndatastore: {{type: file, path: {d}/cluster.yaml}}\ncontrol_socket: {d}/tern.sock\nbird_socket: {d}/calico/bird.ctl\nbird6_socket: {d}/calico/bird6.ctl\n",
                d = dir.display()
            ),
        )
        .unwrap();
    }

    #[test]
    fn birdc_and_calicos_probe_read_terns_bird_sockets() {
        if let Err(reason) = tern_interop::lab_available() {
            tern_interop::skip_or_fail("bird_socket", &reason);
            return;
        }
        for p in ["bird", "birdc"] {
            if !tern_interop::have_program(p) {
                tern_interop::skip_or_fail("bird_socket", &format!("{p} is not installed"));
                return;
            }
        }
        let tmp = tempfile::tempdir().unwrap();
        let sw = Netns::create("tbs-sw").unwrap();
        sw.add_bridge().unwrap();
        let a = Netns::create("tbs-a").unwrap();
        let tor = Netns::create("tbs-tor").unwrap();
        for (ns, port, v4, v6) in [
            (&a, "sw-a", "198.51.100.10/24", "2001:db8:100::10/64"),
            (&tor, "sw-tor", "198.51.100.1/24", "2001:db8:100::1/64"),
        ] {
            ns.veth_to("eth0", &sw, port).unwrap();
            sw.ip(&["link", "set", port, "master", "br0"]).unwrap();
            ns.add_addr("eth0", v4).unwrap();
            ns.add_addr("eth0", v6).unwrap();
        }
        let mut lab = start_tern(&a, tmp.path());
        before_the_peer(&lab);
        let tor_dir = tmp.path().join("tor");
        let bird = Peer::start(Kind::Bird, &tor, &tor_dir, BIRD_CONF).unwrap();
        peer_up(&lab, &bird);
        let mut bird = restart_in_grace(&mut lab, &a, bird, &tor, &tor_dir);

        // The peer goes away: not ready again.
        bird.stop();
        wait_for("calico-node's probe to fail", Duration::from_secs(30), || {
            matches!(probe(&lab.v4(), false), Err(e) if e == "BGP not established with 198.51.100.1")
        })
        .unwrap_or_else(|e| panic!("{e}: {:?}\n{}", probe(&lab.v4(), false), lab.log()));

        // tern stops: the socket files go with it.
        lab.tern.stop(Duration::from_secs(10));
        assert!(!lab.v4().exists() && !lab.v6().exists(), "{}", lab.log());
    }

    /// tern runs, its peer does not: the session is listed, not Established, not
    /// ready; the sockets refuse changes.
    fn before_the_peer(lab: &Lab) {
        let (v4, v6) = (lab.v4(), lab.v6());
        wait_for(
            "tern's BIRD sockets",
            Duration::from_secs(20),
            || matches!(probe(&v4, false), Err(e) if e.starts_with("BGP not established")),
        )
        .unwrap_or_else(|e| panic!("{e}: {:?}\n{}", probe(&v4, false), lab.log()));
        let table = birdc(&v4, &["show", "protocols"]);
        assert!(table.starts_with("BIRD 1.6.8 ready.\n"), "{table}");
        assert!(
            table.contains("name     proto    table    state  since       info")
                && table.contains("Global_198_51_100_1 BGP      master   start"),
            "{table}"
        );
        assert_eq!(
            probe(&v6, true).unwrap_err(),
            "BGP not established with 2001:db8:100::1"
        );
        let status = birdc(&v4, &["show", "status"]);
        assert!(
            status.contains("BIRD 1.6.8\nRouter ID is 198.51.100.10\n")
                && status.contains("Daemon is up and running"),
            "{status}"
        );
        for cmd in [
            &["configure"][..],
            &["disable", "Global_198_51_100_1"],
            &["restart", "all"],
        ] {
            let out = birdc(&v4, cmd);
            assert!(out.contains("Access denied"), "{cmd:?}: {out}");
        }
    }

    /// The peer comes up: ready on both sockets, as tern's own status says.
    fn peer_up(lab: &Lab, bird: &Peer) {
        let (v4, v6) = (lab.v4(), lab.v6());
        wait_for(
            "calico-node's probe to pass",
            Duration::from_secs(60),
            || probe(&v4, false).is_ok() && probe(&v6, true).is_ok(),
        )
        .unwrap_or_else(|e| {
            panic!(
                "{e}: {:?} {:?}\n{}\nBIRD:\n{}",
                probe(&v4, false),
                probe(&v6, true),
                lab.log(),
                bird.log()
            )
        });
        let peers = probe(&v4, false).unwrap();
        assert_eq!(peers.len(), 1, "{peers:?}");
        assert_eq!(
            (
                peers[0].peer_ip.as_str(),
                peers[0].peer_type.as_str(),
                peers[0].state.as_str()
            ),
            ("198.51.100.1", "global", "up")
        );
        let peers6 = probe(&v6, true).unwrap();
        assert_eq!(peers6[0].peer_ip, "2001:db8:100::1", "{peers6:?}");
        let out = Command::new(TERN)
            .args(["status", "--socket"])
            .arg(lab.dir.join("tern.sock"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Established"), "{text}");
        let all = birdc(&v4, &["show", "protocols", "all", "Global_198_51_100_1"]);
        assert!(
            all.contains("BGP state:          Established")
                && all.contains("Neighbor AS:      65001"),
            "{all}"
        );
        let v6_table = birdc(&v6, &["show", "protocols"]);
        assert!(
            v6_table.contains("Global_2001_db8_100__1 BGP      master   up")
                && !v6_table.contains("198_51_100"),
            "{v6_table}"
        );
    }

    /// tern is killed with the peer's route in the kernel and starts again (over its
    /// stale socket files) while the peer is down: its restart grace runs, `show
    /// status` says so, and the probe passes only once the peer is back and the grace
    /// is over.
    fn restart_in_grace(
        lab: &mut Lab,
        a: &Netns,
        mut bird: Peer,
        tor: &Netns,
        tor_dir: &Path,
    ) -> Peer {
        let kernel = || {
            let o = a.ip(&["route", "show", "proto", "201"]).unwrap();
            String::from_utf8_lossy(&o.stdout).into_owned()
        };
        wait_for(
            "the peer's route in the kernel",
            Duration::from_secs(30),
            || kernel().contains("198.18.100.0/24 via 198.51.100.1"),
        )
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", kernel(), lab.log()));
        lab.tern.kill();
        bird.stop();
        assert!(lab.v4().exists(), "a killed tern leaves its socket file");
        lab.tern = spawn_tern(a, &lab.dir);
        let v4 = lab.v4();
        let gr = || ask(&v4, "show status").and_then(|r| gr_in_progress(r.as_slice()));
        wait_for(
            "graceful restart in show status",
            Duration::from_secs(20),
            || gr() == Ok(true),
        )
        .unwrap_or_else(|e| panic!("{e}: {:?}\n{}", gr(), lab.log()));
        assert!(
            probe(&v4, false).is_err(),
            "ready while the peer is down and tern restarts"
        );
        let bird = Peer::start(Kind::Bird, tor, tor_dir, BIRD_CONF).unwrap();
        wait_for("ready after the restart", Duration::from_secs(60), || {
            probe(&v4, false).is_ok()
        })
        .unwrap_or_else(|e| panic!("{e}: {:?}\n{}", probe(&v4, false), lab.log()));
        assert_eq!(gr(), Ok(false));
        bird
    }
}
