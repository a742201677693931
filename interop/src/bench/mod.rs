//! `tern-lab bench`: tern side by side with BIRD 2, FRR and GoBGP on the same load, in
//! one run, alternating the daemons, R repetitions each.
//!
//! Each run builds two namespaces joined by a veth: the daemon under test ([`dut`]) and
//! the injector ([`inject`]), which simulates the peers with pre-encoded UPDATEs. The
//! clock starts when the injector is told to send (every session already up); the
//! daemon has converged when its own CLI reports the whole table in its RIB (polled),
//! and its FIB is complete when a netlink listener in its namespace has seen every
//! route of its protocol arrive ([`measure`]). CPU seconds and memory come from /proc
//! for all of the daemon's processes. The null daemon (tern's decoder alone, in this
//! process) shows how fast the injector can deliver: it must be far ahead of every
//! daemon for the figures to mean anything.

pub mod dut;
pub mod inject;
pub mod measure;
pub mod reflect;
pub mod report;
mod run;
pub mod sink;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use self::dut::{DutKind, DUT_AS};
use crate::{Error, Result};

/// The AS of the eBGP feed.
pub const FEED_AS: u32 = 65001;
/// IPv4 /32s available for one peer's table (198.18.0.0/15).
pub const MAX_V4_PREFIXES: usize = 1 << 17;
/// IPv4 peers that fit on the link next to the daemon's address.
pub const MAX_V4_PEERS: usize = 244;
/// Peers in one run (IPv6 above [`MAX_V4_PEERS`]); each takes a socket on both sides.
pub const MAX_PEERS: usize = 10_000;

/// One benchmark scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// One eBGP peer announcing N prefixes (IPv4 /32s up to 131,072, IPv6 /64s above),
    /// then withdrawing them all.
    Prefixes(usize),
    /// The same table as `Prefixes`, into the RIB only (no daemon touches the kernel),
    /// with the daemon pinned to one core: work time to the last prefix counted, and
    /// CPU seconds up to then and once the daemon has settled.
    Rib(usize),
    /// N iBGP peers (Calico nodes of a full mesh), each announcing one block and ten
    /// borrowed addresses (IPv4 up to 244 peers, IPv6 above), then withdrawing them.
    Peers(usize),
    /// The same N peers as `Peers`, as route-reflector clients of the daemon (RIB only,
    /// pinned to one core like `Rib`): each client decodes what the daemon sends it,
    /// and the run times the reflection to the last client holding every other
    /// client's routes, then the withdrawal from all of them.
    Reflector(usize),
    /// N prefixes installed, then the daemon restarted (SIGTERM, start): kernel route
    /// deletions meanwhile, and the time back to a full RIB.
    Restart(usize),
    /// A table of `base` prefixes, of which the last `flap` are withdrawn and announced
    /// again every second for `secs` seconds.
    Churn {
        /// Table size.
        base: usize,
        /// Prefixes flapping.
        flap: usize,
        /// Duration.
        secs: u64,
    },
}

impl Scenario {
    /// Parses `prefixes:N`, `rib:N`, `peers:N`, `reflector:N`, `restart:N` or
    /// `churn:BASE:FLAP:SECS`.
    pub fn parse(s: &str) -> Result<Scenario> {
        let bad = || {
            Error::Spec(format!("unknown scenario {s:?}: use prefixes:N, rib:N, peers:N, reflector:N, restart:N or churn:BASE:FLAP:SECS"))
        };
        let parts: Vec<&str> = s.split(':').collect();
        let num = |i: usize| -> Result<usize> {
            parts
                .get(i)
                .and_then(|v| v.replace('_', "").parse::<usize>().ok())
                .filter(|n| *n > 0)
                .ok_or_else(bad)
        };
        let sc = match parts.first().copied() {
            Some("prefixes") if parts.len() == 2 => Scenario::Prefixes(num(1)?),
            Some("rib") if parts.len() == 2 => Scenario::Rib(num(1)?),
            Some("peers") if parts.len() == 2 => Scenario::Peers(num(1)?),
            Some("reflector") if parts.len() == 2 => Scenario::Reflector(num(1)?),
            Some("restart") if parts.len() == 2 => Scenario::Restart(num(1)?),
            Some("churn") if parts.len() == 4 => Scenario::Churn {
                base: num(1)?,
                flap: num(2)?,
                secs: num(3)? as u64,
            },
            _ => return Err(bad()),
        };
        if let Scenario::Churn { base, flap, .. } = sc {
            if flap > base || base > MAX_V4_PREFIXES {
                return Err(Error::Spec(format!(
                    "churn: the flapping set must be part of the table, and the table at most {MAX_V4_PREFIXES} IPv4 prefixes"
                )));
            }
        }
        if let Scenario::Peers(n) | Scenario::Reflector(n) = sc {
            if n > MAX_PEERS {
                return Err(Error::Spec(format!("{s}: at most {MAX_PEERS} peers")));
            }
        }
        Ok(sc)
    }

    /// Its name as given on the command line.
    pub fn name(&self) -> String {
        match self {
            Scenario::Prefixes(n) => format!("prefixes:{n}"),
            Scenario::Rib(n) => format!("rib:{n}"),
            Scenario::Peers(n) => format!("peers:{n}"),
            Scenario::Reflector(n) => format!("reflector:{n}"),
            Scenario::Restart(n) => format!("restart:{n}"),
            Scenario::Churn { base, flap, secs } => format!("churn:{base}:{flap}:{secs}"),
        }
    }

    /// The simulated peers: address, AS, router id and table.
    pub fn feeds(&self) -> Vec<(IpAddr, u32, Ipv4Addr, Vec<IpNet>)> {
        match *self {
            Scenario::Prefixes(n)
            | Scenario::Rib(n)
            | Scenario::Restart(n)
            | Scenario::Churn { base: n, .. } => {
                let (addr, table) = if n <= MAX_V4_PREFIXES {
                    (
                        IpAddr::V4(Ipv4Addr::new(198, 51, 100, 100)),
                        (0..n).map(v4_prefix).collect(),
                    )
                } else {
                    (IpAddr::V6(peer_v6(0)), (0..n).map(v6_prefix).collect())
                };
                vec![(addr, FEED_AS, Ipv4Addr::new(198, 51, 100, 100), table)]
            }
            Scenario::Peers(p) | Scenario::Reflector(p) => (0..p)
                .map(|i| {
                    if p <= MAX_V4_PEERS {
                        let a = peer_v4(i);
                        let block = offset_v4(Ipv4Addr::new(198, 18, 0, 0), 64 * i as u32);
                        let mut t = vec![v4net(block, 26)];
                        t.extend((0..10).map(|k| {
                            v4net(
                                offset_v4(Ipv4Addr::new(198, 19, 0, 0), (10 * i + k) as u32),
                                32,
                            )
                        }));
                        (IpAddr::V4(a), DUT_AS, a, t)
                    } else {
                        let base = u128::from(Ipv6Addr::new(0x2001, 0xdb8, 0x4000, 0, 0, 0, 0, 0));
                        let host = u128::from(Ipv6Addr::new(0x2001, 0xdb8, 0x4001, 0, 0, 0, 0, 0));
                        let mut t = vec![v6net(base + 64 * i as u128, 122)];
                        t.extend((0..10).map(|k| v6net(host + (10 * i + k) as u128, 128)));
                        let id = offset_v4(Ipv4Addr::new(198, 19, 128, 0), i as u32);
                        (IpAddr::V6(peer_v6(i)), DUT_AS, id, t)
                    }
                })
                .collect(),
        }
    }

    /// Whether the daemon installs the table in the kernel (all but `rib:N`).
    pub fn kernel(&self) -> bool {
        !matches!(self, Scenario::Rib(_) | Scenario::Reflector(_))
    }

    /// Prefixes in the whole load.
    pub fn total_prefixes(&self) -> usize {
        match *self {
            Scenario::Prefixes(n)
            | Scenario::Rib(n)
            | Scenario::Restart(n)
            | Scenario::Churn { base: n, .. } => n,
            Scenario::Peers(p) | Scenario::Reflector(p) => 11 * p,
        }
    }
}

fn offset_v4(a: Ipv4Addr, by: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(a).wrapping_add(by))
}

fn v4net(a: Ipv4Addr, len: u8) -> IpNet {
    Ipv4Net::new(a, len).map(IpNet::V4).unwrap_or_default()
}

fn v6net(a: u128, len: u8) -> IpNet {
    Ipv6Net::new(Ipv6Addr::from(a), len)
        .map(IpNet::V6)
        .unwrap_or_default()
}

/// The i-th IPv4 /32 of 198.18.0.0/15.
fn v4_prefix(i: usize) -> IpNet {
    v4net(offset_v4(Ipv4Addr::new(198, 18, 0, 0), i as u32), 32)
}

/// The i-th IPv6 /64 of 2001:db8:8000::/33.
fn v6_prefix(i: usize) -> IpNet {
    let base = u128::from(Ipv6Addr::new(0x2001, 0xdb8, 0x8000, 0, 0, 0, 0, 0));
    v6net(base + ((i as u128) << 64), 64)
}

/// The i-th simulated IPv4 peer: .100 to .254, then .10 to .98 (all textually below
/// the daemon's .99, so tern's mesh dials them).
fn peer_v4(i: usize) -> Ipv4Addr {
    let last = if i < 155 { 100 + i } else { 10 + (i - 155) };
    Ipv4Addr::new(198, 51, 100, u8::try_from(last).unwrap_or(98))
}

/// The i-th simulated IPv6 peer: 2001:db8:b::1:0 upwards. Every one is textually
/// below the daemon's 2001:db8:b::2 (tern's mesh dials only those, Calico's rule); the
/// earlier ::1000 upwards crossed it at ::2000, the 4,097th peer.
fn peer_v6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(
        0x2001,
        0xdb8,
        0xb,
        0,
        0,
        0,
        1,
        u16::try_from(i).unwrap_or(0),
    )
}

/// How a bench is run.
#[derive(Debug, Clone)]
pub struct BenchOpts {
    /// Scenarios, in order.
    pub scenarios: Vec<Scenario>,
    /// Daemons, alternated within each repetition.
    pub daemons: Vec<DutKind>,
    /// Repetitions.
    pub reps: usize,
    /// Where each run keeps its files.
    pub dir: PathBuf,
    /// The tern binary (a release build).
    pub tern: PathBuf,
    /// Namespace name prefix.
    pub prefix: String,
    /// How often the daemon's CLI is asked for its RIB size.
    pub poll: Duration,
    /// Longest wait for any phase.
    pub timeout: Duration,
    /// Percent of the BGP packets (TCP port 179) dropped at random in each direction
    /// at the daemon under test (nftables in its namespace); 0 for none.
    pub loss_percent: u8,
    /// TCP's minimum retransmission timeout on the link, both ends, in ms (a route
    /// attribute, `rto_min`); None keeps the kernel's 200 ms. With heavy loss, TCP's
    /// doubling back-off from 200 ms stretches a few unlucky runs past a minute.
    pub rto_min_ms: Option<u32>,
}

/// One run's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunResult {
    /// Scenario name.
    pub scenario: String,
    /// Daemon name.
    pub daemon: String,
    /// Repetition (0-based).
    pub rep: usize,
    /// Figures by name (seconds, bytes, counts).
    pub metrics: BTreeMap<String, f64>,
    /// Restart scenario: `[seconds since the stop, the daemon's routes in the kernel]`,
    /// sampled every 20 ms from 1 s before the stop (`tern-lab chart` draws it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<[f64; 2]>,
    /// Why the run failed, if it did.
    pub error: Option<String>,
}

/// Runs every scenario, printing a line per run to stderr; returns all runs.
pub fn run_all(opts: &BenchOpts, mut progress: impl FnMut(&RunResult)) -> Vec<RunResult> {
    let mut out = Vec::new();
    for sc in &opts.scenarios {
        for rep in 0..opts.reps {
            // Rotate the order each repetition so no daemon always runs first.
            let n = opts.daemons.len().max(1);
            for k in 0..opts.daemons.len() {
                let Some(&kind) = opts.daemons.get((k + rep) % n) else {
                    continue;
                };
                let mut metrics = BTreeMap::new();
                let mut timeline = Vec::new();
                let error = run::run_one(opts, sc, kind, rep, &mut metrics, &mut timeline)
                    .err()
                    .map(|e| e.to_string());
                let r = RunResult {
                    scenario: sc.name(),
                    daemon: kind.name().to_string(),
                    rep,
                    metrics,
                    timeline,
                    error,
                };
                progress(&r);
                out.push(r);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::dut::{DUT_V4, DUT_V6};
    use super::*;
    use crate::netns::check_lab_address;

    #[test]
    fn scenarios_parse_and_name_themselves() {
        for s in [
            "prefixes:100000",
            "rib:100000",
            "peers:200",
            "peers:5000",
            "reflector:1000",
            "restart:1000",
            "churn:10000:1000:60",
        ] {
            assert_eq!(Scenario::parse(s).unwrap().name(), s);
        }
        assert_eq!(
            Scenario::parse("prefixes:1_000_000").unwrap(),
            Scenario::Prefixes(1_000_000)
        );
        for bad in [
            "prefixes",
            "prefixes:0",
            "rib:",
            "rib:1:2",
            "peers:x",
            "churn:10:20:5",
            "flood:3",
            "peers:10001",
            "reflector:0",
        ] {
            assert!(Scenario::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn feeds_stay_in_the_lab_ranges_and_never_repeat_a_prefix() {
        for sc in [
            Scenario::Prefixes(MAX_V4_PREFIXES),
            Scenario::Prefixes(MAX_V4_PREFIXES + 1),
            Scenario::Peers(MAX_V4_PEERS),
            Scenario::Peers(1000),
            Scenario::Peers(MAX_PEERS),
        ] {
            let feeds = sc.feeds();
            let mut all = std::collections::HashSet::new();
            let mut addrs = std::collections::HashSet::new();
            for (addr, _, _, table) in &feeds {
                check_lab_address(&addr.to_string()).unwrap();
                assert!(addrs.insert(*addr), "{addr} twice");
                assert_ne!(addr.to_string(), DUT_V4.to_string());
                for p in table {
                    check_lab_address(&p.to_string()).unwrap();
                    assert!(all.insert(*p), "{p} twice in {}", sc.name());
                    assert_eq!(p.addr().is_ipv4(), addr.is_ipv4());
                }
            }
            assert_eq!(all.len(), sc.total_prefixes(), "{}", sc.name());
        }
    }

    #[test]
    fn mesh_peers_are_textually_below_the_daemon() {
        // tern's mesh waits for peers whose address sorts above its own (Calico's rule).
        for i in 0..MAX_V4_PEERS {
            assert!(
                peer_v4(i).to_string() < DUT_V4.to_string(),
                "{}",
                peer_v4(i)
            );
        }
        for i in 0..MAX_PEERS {
            assert!(
                peer_v6(i).to_string() < DUT_V6.to_string(),
                "{}",
                peer_v6(i)
            );
        }
    }
}
