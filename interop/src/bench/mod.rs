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
pub mod report;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use self::dut::{Dut, DutKind, DutSpec, DUT_AS, DUT_V4, DUT_V6};
use self::inject::{FeedPeer, Injector, Phase};
use self::measure::{proc_stats, FibWatch};
use crate::netns::{check_lab_address, Netns};
use crate::{Error, Result};

/// The AS of the eBGP feed.
pub const FEED_AS: u32 = 65001;
/// IPv4 /32s available for one peer's table (198.18.0.0/15).
pub const MAX_V4_PREFIXES: usize = 1 << 17;
/// IPv4 peers that fit on the link next to the daemon's address.
pub const MAX_V4_PEERS: usize = 244;

/// One benchmark scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// One eBGP peer announcing N prefixes (IPv4 /32s up to 131,072, IPv6 /64s above),
    /// then withdrawing them all.
    Prefixes(usize),
    /// N iBGP peers (Calico nodes of a full mesh), each announcing one block and ten
    /// borrowed addresses (IPv4 up to 244 peers, IPv6 above), then withdrawing them.
    Peers(usize),
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
    /// Parses `prefixes:N`, `peers:N`, `restart:N` or `churn:BASE:FLAP:SECS`.
    pub fn parse(s: &str) -> Result<Scenario> {
        let bad = || {
            Error::Spec(format!("unknown scenario {s:?}: use prefixes:N, peers:N, restart:N or churn:BASE:FLAP:SECS"))
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
            Some("peers") if parts.len() == 2 => Scenario::Peers(num(1)?),
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
        if let Scenario::Peers(n) = sc {
            if n > 4096 {
                return Err(Error::Spec("peers: at most 4096".into()));
            }
        }
        Ok(sc)
    }

    /// Its name as given on the command line.
    pub fn name(&self) -> String {
        match self {
            Scenario::Prefixes(n) => format!("prefixes:{n}"),
            Scenario::Peers(n) => format!("peers:{n}"),
            Scenario::Restart(n) => format!("restart:{n}"),
            Scenario::Churn { base, flap, secs } => format!("churn:{base}:{flap}:{secs}"),
        }
    }

    /// The simulated peers: address, AS, router id and table.
    pub fn feeds(&self) -> Vec<(IpAddr, u32, Ipv4Addr, Vec<IpNet>)> {
        match *self {
            Scenario::Prefixes(n) | Scenario::Restart(n) | Scenario::Churn { base: n, .. } => {
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
            Scenario::Peers(p) => (0..p)
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

    /// Prefixes in the whole load.
    pub fn total_prefixes(&self) -> usize {
        match *self {
            Scenario::Prefixes(n) | Scenario::Restart(n) | Scenario::Churn { base: n, .. } => n,
            Scenario::Peers(p) => 11 * p,
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

/// The i-th simulated IPv6 peer: 2001:db8:b::1000 upwards.
fn peer_v6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(
        0x2001,
        0xdb8,
        0xb,
        0,
        0,
        0,
        0,
        0x1000 + u16::try_from(i).unwrap_or(0),
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
                let error = run_one(opts, sc, kind, rep, &mut metrics, &mut timeline)
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

/// Samples the daemon's kernel route count every 20 ms from a thread of its own, so
/// the restart itself (which blocks the caller) is on the timeline too.
struct RouteSampler {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(Instant, u64)>>,
}

impl RouteSampler {
    fn start(probe: measure::FibProbe) -> RouteSampler {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut out = Vec::new();
            while !halt.load(std::sync::atomic::Ordering::SeqCst) {
                out.push((Instant::now(), probe.get().installed));
                std::thread::sleep(Duration::from_millis(20));
            }
            out
        });
        RouteSampler { stop, thread }
    }

    /// Stops sampling; the samples as `[seconds relative to t0, routes]`.
    fn finish(self, t0: Instant) -> Vec<[f64; 2]> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let samples = self.thread.join().unwrap_or_default();
        samples
            .into_iter()
            .map(|(t, n)| {
                let s = if t >= t0 {
                    t.duration_since(t0).as_secs_f64()
                } else {
                    -t0.duration_since(t).as_secs_f64()
                };
                [s, n as f64]
            })
            .collect()
    }
}

/// Adds the addresses in `cidrs` to `ifname` in `ns` with one `ip -batch`.
fn add_addresses(ns: &Netns, ifname: &str, cidrs: &[String], dir: &std::path::Path) -> Result<()> {
    let mut batch = String::new();
    for c in cidrs {
        check_lab_address(c)?;
        let nodad = if c.contains(':') { " nodad" } else { "" };
        batch.push_str(&format!("addr add {c} dev {ifname}{nodad}\n"));
    }
    let file = dir.join(format!("{}-addrs.batch", ns.name()));
    std::fs::write(&file, batch).map_err(|source| Error::Spawn {
        command: format!("write {}", file.display()),
        source,
    })?;
    ns.ip(&["-batch", &file.to_string_lossy()]).map(drop)
}

/// Drops `percent` % of the BGP packets in and out of `ns` at random (a lossy
/// session: TCP must retransmit, the daemon must neither lose a route nor the session).
fn drop_bgp_packets(ns: &Netns, percent: u8) -> Result<()> {
    // nftables' `numgen random mod 100` gives 0..=99 and refuses a bound of 100.
    let p = (percent.clamp(1, 100) - 1).to_string();
    ns.exec("nft", &["add", "table", "inet", "loss"])?;
    for (chain, hook) in [("in", "input"), ("out", "output")] {
        ns.exec(
            "nft",
            &[
                "add", "chain", "inet", "loss", chain, "{", "type", "filter", "hook", hook,
                "priority", "0", ";", "}",
            ],
        )?;
        for port in ["sport", "dport"] {
            ns.exec(
                "nft",
                &[
                    "add", "rule", "inet", "loss", chain, "tcp", port, "179", "numgen", "random",
                    "mod", "100", "<=", &p, "drop",
                ],
            )?;
        }
    }
    Ok(())
}

/// Polls until `done` holds, every `poll`; returns the instant it first held.
fn poll_until(
    what: &str,
    timeout: Duration,
    poll: Duration,
    mut done: impl FnMut() -> Result<bool>,
) -> Result<Instant> {
    let deadline = Instant::now() + timeout;
    loop {
        if done()? {
            return Ok(Instant::now());
        }
        if Instant::now() > deadline {
            return Err(Error::Lab(format!("{what}: not reached in {timeout:?}")));
        }
        std::thread::sleep(poll);
    }
}

/// The daemon's RIB size; None while its CLI does not answer (it may be starting).
fn rib(dut: &Dut) -> Option<u64> {
    dut.rib_count().ok()
}

fn secs(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64()
}

/// Everything of one run that must be dropped in order: daemons before namespaces.
struct Rig {
    dut: Dut,
    watch: Option<FibWatch>,
    inj: Injector,
    dut_ns: Netns,
    _inj_ns: Netns,
}

fn run_one(
    opts: &BenchOpts,
    sc: &Scenario,
    kind: DutKind,
    rep: usize,
    m: &mut BTreeMap<String, f64>,
    timeline: &mut Vec<[f64; 2]>,
) -> Result<()> {
    let dir = opts.dir.join(format!(
        "{}-{}-{rep}",
        sc.name().replace(':', "_"),
        kind.name()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|source| Error::Spawn {
        command: format!("mkdir {}", dir.display()),
        source,
    })?;
    let feeds = sc.feeds();
    let n = sc.total_prefixes();
    let churn = match sc {
        Scenario::Churn { flap, .. } => *flap,
        _ => 0,
    };
    let t_enc = Instant::now();
    let peers = feeds
        .iter()
        .map(|(a, asn, id, t)| FeedPeer::build(*a, *id, *asn, *asn != DUT_AS, t, churn))
        .collect::<Result<Vec<_>>>()?;
    m.insert("encode_s".into(), secs(t_enc, Instant::now()));

    let dut_ns = Netns::create(&format!("{}d", opts.prefix))?;
    let inj_ns = Netns::create(&format!("{}i", opts.prefix))?;
    dut_ns.veth_to("d0", &inj_ns, "i0")?;
    dut_ns.add_addr("d0", &format!("{DUT_V4}/24"))?;
    dut_ns.add_addr("d0", &format!("{DUT_V6}/64"))?;
    let cidrs: Vec<String> = feeds
        .iter()
        .map(|(a, ..)| match a {
            IpAddr::V4(a) => format!("{a}/24"),
            IpAddr::V6(a) => format!("{a}/64"),
        })
        .collect();
    add_addresses(&inj_ns, "i0", &cidrs, &dir)?;
    // Room for a million IPv6 routes and a thousand neighbours; where the kernel keeps
    // these per namespace. Failures leave the defaults (the run may then fail loudly).
    for s in [
        "net.ipv6.route.max_size=4194304",
        "net.ipv6.neigh.default.gc_thresh3=8192",
        "net.ipv4.neigh.default.gc_thresh3=8192",
    ] {
        let _ = dut_ns.exec("sysctl", &["-qw", s]);
    }
    if let Some(ms) = opts.rto_min_ms {
        // Host routes to each end with the attribute: more specific than the link's
        // own route, so they carry every BGP connection.
        let rto = format!("{ms}ms");
        for (a, ..) in &feeds {
            let host = if a.is_ipv4() {
                format!("{a}/32")
            } else {
                format!("{a}/128")
            };
            dut_ns.ip(&["route", "add", &host, "dev", "d0", "rto_min", &rto])?;
        }
        inj_ns.ip(&[
            "route",
            "add",
            &format!("{DUT_V4}/32"),
            "dev",
            "i0",
            "rto_min",
            &rto,
        ])?;
        inj_ns.ip(&[
            "route",
            "add",
            &format!("{DUT_V6}/128"),
            "dev",
            "i0",
            "rto_min",
            &rto,
        ])?;
        m.insert("rto_min_ms".into(), f64::from(ms));
    }
    if opts.loss_percent > 0 {
        drop_bgp_packets(&dut_ns, opts.loss_percent)?;
        m.insert("loss_percent".into(), f64::from(opts.loss_percent));
    }
    let inj = Injector::start(&inj_ns, peers)?;
    let watch = match kind.fib_protocol() {
        Some(p) => Some(FibWatch::start(&dut_ns, p)?),
        None => None,
    };
    let spec = DutSpec {
        kind,
        dir: dir.clone(),
        peers: feeds.iter().map(|(a, asn, ..)| (*a, *asn)).collect(),
        tern: opts.tern.clone(),
        frr_graceful_restart: matches!(sc, Scenario::Restart(_)),
    };
    let t_start = Instant::now();
    let dut = Dut::start(&dut_ns, &spec, false)?;
    let mut rig = Rig {
        dut,
        watch,
        inj,
        dut_ns,
        _inj_ns: inj_ns,
    };
    let r = measure(opts, sc, &mut rig, n, t_start, m, timeline);
    if r.is_err() {
        if let Ok(Some(e)) = rig.inj.errors().first().map(|e| Some(e.clone())).ok_or(()) {
            m.insert("injector_errors".into(), rig.inj.errors().len() as f64);
            let _ = std::fs::write(dir.join("injector-errors.txt"), e);
        }
        let _ = std::fs::write(dir.join("dut-log-tail.txt"), rig.dut.log_tail());
    }
    rig.dut.stop();
    r
}

fn measure(
    opts: &BenchOpts,
    sc: &Scenario,
    rig: &mut Rig,
    n: usize,
    t_start: Instant,
    m: &mut BTreeMap<String, f64>,
    timeline: &mut Vec<[f64; 2]>,
) -> Result<()> {
    let peers = sc.feeds().len();
    let n64 = n as u64;
    let t_up = poll_until(
        "every session established",
        opts.timeout,
        Duration::from_millis(10),
        || {
            if !rig.dut.alive() {
                return Err(Error::Lab(format!(
                    "{} exited:\n{}",
                    rig.dut.kind().name(),
                    rig.dut.log_tail()
                )));
            }
            Ok(rig.inj.established() >= peers)
        },
    )
    .map_err(|e| Error::Lab(format!("{e} ({} of {peers} up)", rig.inj.established())))?;
    m.insert("sessions_s".into(), secs(t_start, t_up));
    let base = rig.dut.rib_count().unwrap_or(0);
    let pids = rig.dut.pids();
    let s0 = proc_stats(&pids);
    let fib = |w: &Option<FibWatch>| w.as_ref().map(FibWatch::get).unwrap_or_default();

    // Announce everything.
    let (seq, t0) = rig.inj.set_phase(Phase::Full);
    let mut rib_at = None;
    let t_done = poll_until("the whole table", opts.timeout, opts.poll, || {
        if rib_at.is_none() && rib(&rig.dut).is_some_and(|c| c >= base + n64) {
            rib_at = Some(Instant::now());
        }
        let f = fib(&rig.watch);
        Ok(rib_at.is_some() && (rig.watch.is_none() || f.added >= n64))
    })
    .map_err(|e| {
        let f = fib(&rig.watch);
        Error::Lab(format!(
            "{e}: RIB {} of {n}, FIB {} added{}",
            rig.dut
                .rib_count()
                .map(|c| c.saturating_sub(base))
                .unwrap_or(0),
            f.added,
            if f.lost { " (notifications lost)" } else { "" }
        ))
    })?;
    let s1 = proc_stats(&pids);
    m.insert("converge_s".into(), secs(t0, rib_at.unwrap_or(t_done)));
    if rig.watch.is_some() {
        let f = fib(&rig.watch);
        m.insert("fib_s".into(), secs(t0, f.last.unwrap_or(t_done)));
    }
    if let Some(w) = rig.inj.written(seq) {
        m.insert("inject_s".into(), secs(t0, w));
    }
    if !pids.is_empty() {
        let cpu = s1.cpu_s - s0.cpu_s;
        m.insert("cpu_s".into(), cpu);
        m.insert("rss_mb".into(), s1.rss as f64 / 1e6);
        m.insert("peak_rss_mb".into(), s1.hwm as f64 / 1e6);
        m.insert(
            "bytes_per_route".into(),
            (s1.rss as f64 - s0.rss as f64) / n as f64,
        );
        if cpu > 0.0 {
            m.insert("routes_per_cpu_s".into(), n as f64 / cpu);
        }
    }

    match *sc {
        Scenario::Prefixes(_) | Scenario::Peers(_) => {
            let removed0 = fib(&rig.watch).removed;
            let s2 = proc_stats(&pids);
            let (_, t1) = rig.inj.set_phase(Phase::Empty);
            let mut rib_at = None;
            let t_done = poll_until("everything withdrawn", opts.timeout, opts.poll, || {
                if rib_at.is_none() && rib(&rig.dut).is_some_and(|c| c <= base) {
                    rib_at = Some(Instant::now());
                }
                let f = fib(&rig.watch);
                Ok(rib_at.is_some() && (rig.watch.is_none() || f.removed >= removed0 + n64))
            })?;
            let s3 = proc_stats(&pids);
            m.insert("withdraw_s".into(), secs(t1, rib_at.unwrap_or(t_done)));
            if rig.watch.is_some() {
                let f = fib(&rig.watch);
                m.insert("withdraw_fib_s".into(), secs(t1, f.last.unwrap_or(t_done)));
            }
            if !pids.is_empty() {
                m.insert("withdraw_cpu_s".into(), s3.cpu_s - s2.cpu_s);
            }
        }
        Scenario::Restart(_) => {
            // Let the kernel settle, then restart and count what the daemon deletes.
            let sampler = rig.watch.as_ref().map(|w| RouteSampler::start(w.probe()));
            std::thread::sleep(Duration::from_secs(1));
            let removed0 = fib(&rig.watch).removed;
            let t1 = Instant::now();
            rig.dut.restart(&rig.dut_ns)?;
            let t2 = Instant::now();
            let mut rib_at = None;
            poll_until(
                "the table after the restart",
                opts.timeout,
                opts.poll,
                || {
                    if rib_at.is_none() && rib(&rig.dut).is_some_and(|c| c >= n64) {
                        rib_at = Some(Instant::now());
                    }
                    Ok(rib_at.is_some())
                },
            )?;
            // Deletions that follow convergence (stale routes swept) count too.
            std::thread::sleep(Duration::from_secs(3));
            if let Some(s) = sampler {
                *timeline = s.finish(t1);
            }
            m.insert("restart_stop_s".into(), secs(t1, t2));
            m.insert("restart_converge_s".into(), secs(t2, rib_at.unwrap_or(t2)));
            if rig.watch.is_some() {
                m.insert(
                    "restart_deletions".into(),
                    (fib(&rig.watch).removed - removed0) as f64,
                );
            }
        }
        Scenario::Churn {
            flap, secs: dur, ..
        } => {
            let pids = rig.dut.pids();
            let s2 = proc_stats(&pids);
            let start = Instant::now();
            for k in 0..dur {
                let at = start + Duration::from_secs(k);
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                rig.inj.set_phase(Phase::ChurnOut);
                std::thread::sleep(
                    (at + Duration::from_millis(500)).saturating_duration_since(Instant::now()),
                );
                rig.inj.set_phase(Phase::Full);
            }
            let t_end = poll_until("the table after churn", opts.timeout, opts.poll, || {
                Ok(rib(&rig.dut).is_some_and(|c| c >= base + n64))
            })?;
            let s3 = proc_stats(&pids);
            m.insert("churn_updates".into(), (2 * flap as u64 * dur) as f64);
            m.insert(
                "churn_settle_s".into(),
                secs(start + Duration::from_secs(dur), t_end),
            );
            if !pids.is_empty() {
                m.insert("churn_cpu_s".into(), s3.cpu_s - s2.cpu_s);
                m.insert(
                    "churn_rss_growth_mb".into(),
                    (s3.rss as f64 - s2.rss as f64) / 1e6,
                );
                m.insert("peak_rss_mb".into(), s3.hwm as f64 / 1e6);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_parse_and_name_themselves() {
        for s in [
            "prefixes:100000",
            "peers:200",
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
            "peers:x",
            "churn:10:20:5",
            "flood:3",
            "peers:5000",
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
        for i in [0, 999, 4095] {
            assert!(
                peer_v6(i).to_string() < DUT_V6.to_string(),
                "{}",
                peer_v6(i)
            );
        }
    }
}
