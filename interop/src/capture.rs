//! The capture lab: BIRD 2, GoBGP and FRR peered in network namespaces, driven through
//! announcements, withdrawals, route refreshes and an administrative shutdown, with
//! tcpdump recording every BGP message on the shared bridge. Its output is the golden
//! fixture set of the codec (`bgp/tests/fixtures/`), and CI re-runs it live.
//!
//! Topology (all inside namespaces named `<prefix>…`, deleted on return):
//! ```text
//!   <prefix>lan: bridge br0 ── eth0 of each peer; tcpdump -i br0
//!   bird  203.0.113.1 2001:db8::1 AS 64501  eBGP to gobgp and frr, iBGP to bird-ibgp
//!   gobgp 203.0.113.2 2001:db8::2 AS 64502
//!   frr   203.0.113.3 2001:db8::3 AS 64503
//!   bird-ibgp 203.0.113.4 2001:db8::4 AS 64501
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::netns::Netns;
use crate::peers::{wait_for, Kind, Peer};
use crate::process::Daemon;
use crate::{Error, Result};

const BIRD_CONF: &str = r#"log stderr all;
router id 203.0.113.1;
protocol device { }
protocol direct { ipv4; ipv6; }
protocol static {
  ipv4;
  route 198.18.1.0/24 blackhole { bgp_med = 20; bgp_community.add((64501,100)); bgp_large_community.add((64501,1,2)); bgp_ext_community.add((rt,64501,7)); };
  route 198.18.1.128/25 blackhole;
}
protocol static { ipv6; route 2001:db8:1::/48 blackhole { bgp_community.add((64501,600)); }; }
template bgp peers {
  local as 64501; hold time 9; keepalive time 3; connect retry time 2;
  graceful restart on; enable extended messages on;
  # FRR 8.4.4 now and then resets this session with "Invalid network field" on a
  # well-formed UPDATE; retry within seconds rather than BIRD's default 60-300 s.
  error wait time 1,4;
  ipv4 { import all; export where source ~ [RTS_STATIC, RTS_BGP]; add paths on; extended next hop on; };
  ipv6 { import all; export where source ~ [RTS_STATIC, RTS_BGP]; add paths on; };
}
protocol bgp gobgp from peers { neighbor 203.0.113.2 as 64502; }
# FRR 8.4.4 answered BIRD's ADD-PATH UPDATEs with "Invalid network field" every time, and
# BIRD's IPv6 UPDATEs over this IPv4 session most of the time: IPv4 only, no ADD-PATH.
protocol bgp frr from peers {
  neighbor 203.0.113.3 as 64503;
  ipv4 { import all; export where source ~ [RTS_STATIC, RTS_BGP]; add paths off; extended next hop on; };
  ipv6 { import none; export none; };
}
protocol bgp rrclient from peers { neighbor 203.0.113.4 as 64501; }
"#;

const BIRD_IBGP_CONF: &str = r#"log stderr all;
router id 203.0.113.4;
protocol device { }
protocol static { ipv4; route 198.18.4.0/26 blackhole { bgp_local_pref = 250; bgp_origin = ORIGIN_INCOMPLETE; }; }
protocol bgp core {
  local as 64501; neighbor 203.0.113.1 as 64501; hold time 9; keepalive time 3; connect retry time 2;
  ipv4 { import all; export where source = RTS_STATIC; };
}
"#;

const GOBGP_CONF: &str = r#"[global.config]
  as = 64502
  router-id = "203.0.113.2"
  local-address-list = ["203.0.113.2"]
[[neighbors]]
  [neighbors.config]
    neighbor-address = "203.0.113.1"
    peer-as = 64501
  [neighbors.timers.config]
    hold-time = 9
    keepalive-interval = 3
    connect-retry = 2
  [neighbors.graceful-restart.config]
    enabled = true
    restart-time = 120
  [neighbors.add-paths.config]
    receive = true
    send-max = 4
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv4-unicast"
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv6-unicast"
[[neighbors]]
  [neighbors.config]
    neighbor-address = "203.0.113.3"
    peer-as = 64503
  [neighbors.timers.config]
    hold-time = 9
    keepalive-interval = 3
    connect-retry = 2
  [neighbors.graceful-restart.config]
    enabled = true
    restart-time = 120
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv4-unicast"
  [[neighbors.afi-safis]]
    [neighbors.afi-safis.config]
      afi-safi-name = "ipv6-unicast"
"#;

const FRR_CONF: &str = r#"frr defaults traditional
hostname frr-tor
log stdout
route-map TAG permit 10
 set community 64503:300
 set large-community 64503:3:3
 set extcommunity rt 64503:9
 set metric 30
exit
router bgp 64503
 bgp router-id 203.0.113.3
 no bgp ebgp-requires-policy
 no bgp network import-check
 bgp graceful-restart
 timers bgp 3 9
 neighbor 203.0.113.1 remote-as 64501
 neighbor 203.0.113.1 timers connect 2
 neighbor 203.0.113.1 capability extended-nexthop
 neighbor 203.0.113.2 remote-as 64502
 neighbor 203.0.113.2 timers connect 2
 address-family ipv4 unicast
  network 198.18.3.0/24 route-map TAG
  aggregate-address 198.18.0.0/22
 exit-address-family
 address-family ipv6 unicast
  network 2001:db8:3::/48 route-map TAG
  neighbor 203.0.113.2 activate
 exit-address-family
"#;

/// Namespaces and processes of one run; dropping it stops and removes everything
/// (processes first, then namespaces: fields drop in declaration order).
struct Lab {
    peers: Vec<Peer>,
    tcpdump: Option<Daemon>,
    namespaces: Vec<Netns>,
}

impl Lab {
    fn ns(&self, i: usize) -> Result<&Netns> {
        self.namespaces
            .get(i)
            .ok_or_else(|| Error::NotInTestNamespace(format!("namespace {i} missing")))
    }

    /// Peers in start order: BIRD, BIRD-iBGP, GoBGP, FRR.
    fn peer(&self, i: usize) -> Result<&Peer> {
        self.peers
            .get(i)
            .ok_or_else(|| Error::NotInTestNamespace(format!("peer {i} missing")))
    }
}

/// Runs the lab and writes `bird-gobgp-frr.pcap` into `out_dir`; returns the files
/// written. Namespaces are named `<prefix>lan`, `<prefix>bird`, … so parallel runs
/// with different prefixes do not collide.
pub fn capture_fixtures(out_dir: &Path, prefix: &str) -> Result<Vec<PathBuf>> {
    for p in [
        "bird",
        "birdc",
        "gobgpd",
        "gobgp",
        "vtysh",
        "/usr/lib/frr/bgpd",
        "tcpdump",
    ] {
        if !crate::have_program(p) {
            return Err(Error::Command {
                command: p.into(),
                status: "missing".into(),
                stderr: format!("{p} is not installed"),
            });
        }
    }
    let dir = std::env::temp_dir().join(format!("{prefix}capture-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("frr")).map_err(|source| Error::Spawn {
        command: format!("mkdir {}", dir.display()),
        source,
    })?;
    std::fs::create_dir_all(out_dir).map_err(|source| Error::Spawn {
        command: format!("mkdir {}", out_dir.display()),
        source,
    })?;
    match run_lab(out_dir, prefix, &dir) {
        Ok(files) => {
            let _ = std::fs::remove_dir_all(&dir);
            Ok(files)
        }
        // Keep the daemons' configs and logs: they say why.
        Err(e) => Err(Error::Command {
            command: "capture lab".into(),
            status: "failed".into(),
            stderr: format!("{e}; configs and logs kept in {}", dir.display()),
        }),
    }
}

fn run_lab(out_dir: &Path, prefix: &str, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut lab = lan(prefix)?;
    let pcap = start_capture(&mut lab, out_dir, dir)?;
    start_peers(&mut lab, dir)?;
    let (bird, gobgp, frr) = (lab.peer(0)?, lab.peer(2)?, lab.peer(3)?);
    play(bird, gobgp, frr)?;
    for p in lab.peers.iter_mut() {
        p.stop();
    }
    if let Some(t) = lab.tcpdump.as_mut() {
        t.stop(Duration::from_secs(5));
    }
    drop(lab);
    Ok(vec![pcap])
}

/// The namespaces: a LAN bridge and the four peers on it.
fn lan(prefix: &str) -> Result<Lab> {
    let names = ["lan", "bird", "gobgp", "frr", "bibgp"];
    let mut lab = Lab {
        peers: Vec::new(),
        tcpdump: None,
        namespaces: Vec::new(),
    };
    for n in names {
        lab.namespaces.push(Netns::create(&format!("{prefix}{n}"))?);
    }
    let lan = lab.ns(0)?;
    lan.add_bridge()?;
    for (i, host) in [(1usize, 1), (2, 2), (3, 3), (4, 4)] {
        let ns = lab.ns(i)?;
        let port = format!("p{host}");
        lan.veth_to(&port, ns, "eth0")?;
        lan.ip(&["link", "set", &port, "master", "br0"])?;
        ns.add_addr("eth0", &format!("203.0.113.{host}/24"))?;
        ns.add_addr("eth0", &format!("2001:db8::{host}/64"))?;
    }

    Ok(lab)
}

/// tcpdump on the bridge, BGP only, into the pcap it returns once it listens.
fn start_capture(lab: &mut Lab, out_dir: &Path, dir: &Path) -> Result<PathBuf> {
    let lan = lab.ns(0)?;
    let pcap = out_dir.join("bird-gobgp-frr.pcap");
    let _ = std::fs::remove_file(&pcap);
    let mut cmd = lan.command("tcpdump");
    cmd.args(["-i", "br0", "-s", "0", "-U", "-w"])
        .arg(&pcap)
        .arg("tcp port 179");
    lab.tcpdump = Some(Daemon::spawn("tcpdump", cmd, &dir.join("tcpdump.log"))?);
    wait_for("tcpdump to start", Duration::from_secs(10), || {
        std::fs::read_to_string(dir.join("tcpdump.log"))
            .map(|l| l.contains("listening"))
            .unwrap_or(false)
    })?;

    Ok(pcap)
}

/// BIRD (eBGP and iBGP), GoBGP and FRR, each in its namespace.
fn start_peers(lab: &mut Lab, dir: &Path) -> Result<()> {
    for (i, kind, sub, conf) in [
        (1, Kind::Bird, "bird", BIRD_CONF),
        (4, Kind::Bird, "bird-ibgp", BIRD_IBGP_CONF),
        (2, Kind::Gobgp, "gobgp", GOBGP_CONF),
        (3, Kind::Frr, "frr", FRR_CONF),
    ] {
        let peer = Peer::start(kind, lab.ns(i)?, &dir.join(sub), conf)?;
        lab.peers.push(peer);
    }
    Ok(())
}

/// What the capture records: sessions up, announcements and withdrawals, route
/// refresh from each implementation, administrative shutdowns with RFC 9003 messages.
fn play(bird: &Peer, gobgp: &Peer, frr: &Peer) -> Result<()> {
    // Phase 1: sessions come up and exchange their tables.
    wait_for(
        "BIRD's three sessions to be Established",
        Duration::from_secs(40),
        || {
            bird.cli(&["show", "protocols"])
                .map(|s| s.matches("Established").count() >= 3)
                .unwrap_or(false)
        },
    )?;
    wait_for(
        "GoBGP's sessions to be Established",
        Duration::from_secs(20),
        || {
            gobgp
                .cli(&["neighbor"])
                .map(|s| s.matches("Establ").count() >= 2)
                .unwrap_or(false)
        },
    )?;
    std::thread::sleep(Duration::from_secs(2));

    // Phase 2: announcements and withdrawals while up.
    gobgp.cli(&[
        "global",
        "rib",
        "add",
        "198.18.2.0/24",
        "community",
        "64502:200",
        "large-community",
        "64502:2:2",
        "med",
        "40",
    ])?;
    gobgp.cli(&["global", "rib", "add", "198.18.2.64/26"])?;
    gobgp.cli(&[
        "global",
        "rib",
        "-a",
        "ipv6",
        "add",
        "2001:db8:2::/48",
        "nexthop",
        "2001:db8::2",
    ])?;
    gobgp.cli(&[
        "global",
        "rib",
        "-a",
        "ipv6",
        "add",
        "2001:db8:2:1::/64",
        "nexthop",
        "2001:db8::2",
    ])?;
    std::thread::sleep(Duration::from_secs(2));
    gobgp.cli(&["global", "rib", "del", "198.18.2.64/26"])?;
    gobgp.cli(&["global", "rib", "-a", "ipv6", "del", "2001:db8:2:1::/64"])?;
    std::thread::sleep(Duration::from_secs(1));

    // Phase 3: route refresh from each implementation.
    bird.cli(&["reload", "in", "gobgp"])?;
    gobgp.cli(&["neighbor", "203.0.113.1", "softresetin"])?;
    frr.cli(&["clear bgp 203.0.113.1 soft in"])?;
    std::thread::sleep(Duration::from_secs(2));

    // Phase 4: administrative shutdowns with RFC 9003 messages.
    bird.cli(&["disable", "frr", "\"maintenance window\""])?;
    frr.cli(&[
        "configure terminal",
        "router bgp 64503",
        "neighbor 203.0.113.2 shutdown message rack 7 power work",
    ])?;
    std::thread::sleep(Duration::from_secs(2));

    Ok(())
}
