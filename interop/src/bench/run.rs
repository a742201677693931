//! One bench run: the two namespaces, the daemon and the injector ([`Rig`]), loading
//! the table, then what the scenario does with it (withdraw, restart, churn, or wait
//! for the daemon to settle), each figure into the run's metrics.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipnet::IpNet;

use super::dut::{Dut, DutKind, DutSpec, DUT_AS, DUT_V4, DUT_V6};
use super::inject::{FeedPeer, Injector, Phase};
use super::measure::{self, proc_stats, FibWatch, ProcStats};
use super::reflect::Universe;
use super::{BenchOpts, Scenario};
use crate::netns::{check_lab_address, Netns};
use crate::{Error, Result};

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
    ip_batch(ns, "addrs", &batch, dir)
}

/// Runs `batch` (`ip` commands, one per line) in `ns`, from a file `dir` keeps.
fn ip_batch(ns: &Netns, what: &str, batch: &str, dir: &std::path::Path) -> Result<()> {
    let file = dir.join(format!("{}-{what}.batch", ns.name()));
    std::fs::write(&file, batch).map_err(|source| Error::Spawn {
        command: format!("write {}", file.display()),
        source,
    })?;
    ns.ip(&["-batch", &file.to_string_lossy()]).map(drop)
}

/// Permanent neighbour entries in `ns` on `ifname` for each of `addrs`, at the MAC of
/// `other`'s `other_if` (the far end of the veth). The kernel's neighbour table is
/// shared by every namespace and its limit (`gc_thresh3`, 1,024 by default) can only be
/// raised in the machine's own namespace: beyond it, resolved entries are evicted and
/// thousands of peers on one link get "No route to host". Permanent entries are exempt.
fn pin_neighbours(
    ns: &Netns,
    ifname: &str,
    other: &Netns,
    other_if: &str,
    addrs: &[IpAddr],
    dir: &std::path::Path,
) -> Result<()> {
    let out = other.exec("cat", &[&format!("/sys/class/net/{other_if}/address")])?;
    let mac = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if mac.split(':').count() != 6 {
        return Err(Error::Lab(format!(
            "no MAC address for {other_if} in {}: {mac:?}",
            other.name()
        )));
    }
    let mut batch = String::new();
    for a in addrs {
        batch.push_str(&format!(
            "neigh replace {a} lladdr {mac} dev {ifname} nud permanent\n"
        ));
    }
    ip_batch(ns, "neigh", &batch, dir)
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

pub(super) fn run_one(
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

    let reflector = matches!(sc, Scenario::Reflector(_));
    if reflector && kind == DutKind::Null {
        return Err(Error::Spec(
            "the null daemon reflects nothing: leave it out of reflector runs".into(),
        ));
    }
    let universe = reflector.then(|| Arc::new(Universe::new(feeds.iter().map(|f| f.3.as_slice()))));
    let (dut_ns, inj_ns) = namespaces(opts, &feeds, &dir, m)?;
    let inj = Injector::start_counting(&inj_ns, peers, universe)?;
    let watch = match kind.fib_protocol().filter(|_| sc.kernel()) {
        Some(p) => Some(FibWatch::start(&dut_ns, p)?),
        None => None,
    };
    let spec = DutSpec {
        kind,
        dir: dir.clone(),
        peers: feeds.iter().map(|(a, asn, ..)| (*a, *asn)).collect(),
        tern: opts.tern.clone(),
        frr_graceful_restart: matches!(sc, Scenario::Restart(_)),
        reflector,
    };
    let t_start = Instant::now();
    let dut = Dut::start_with(&dut_ns, &spec, false, sc.kernel())?;
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
    if !sc.kernel() {
        // One core for the daemon (the last; the injector and the poller share the
        // rest), so its CPU seconds and work time compare with a single-threaded one.
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpus > 1 {
            rig.dut.pin(cpus - 1)?;
            m.insert("pinned_cpu".into(), (cpus - 1) as f64);
        }
    }
    let base = rig.dut.rib_count().unwrap_or(0);
    let pids = rig.dut.pids();
    let s0 = proc_stats(&pids);

    // Announce everything.
    let (seq, t0) = rig.inj.set_phase(Phase::Full);
    let (mut rib_at, mut reflected_at) = (None, None);
    let t_done = poll_until("the whole table", opts.timeout, opts.poll, || {
        if rib_at.is_none() && rib(&rig.dut).is_some_and(|c| c >= base + n64) {
            rib_at = Some(Instant::now());
        }
        match rig.inj.reflected() {
            Some((0, _)) if reflected_at.is_none() => reflected_at = Some(Instant::now()),
            Some(_) if reflected_at.is_none() => return Ok(false),
            _ => {}
        }
        let f = fib(&rig.watch);
        Ok(rib_at.is_some() && (rig.watch.is_none() || f.added >= n64))
    })
    .map_err(|e| {
        let f = fib(&rig.watch);
        let clients = match rig.inj.reflected() {
            Some((missing, held)) => format!(
                ", clients hold {held} and miss {missing} (and got {} not in the load)",
                rig.inj.unknown_received()
            ),
            None => String::new(),
        };
        Error::Lab(format!(
            "{e}: RIB {} of {n}, FIB {} added{}{clients}",
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
    if let Some(t) = reflected_at {
        m.insert("reflect_s".into(), secs(t0, t));
        m.insert("unknown_received".into(), rig.inj.unknown_received() as f64);
    }
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

    let table = Table {
        base,
        n,
        pids: &pids,
        empty_rss: s0.rss,
    };
    match *sc {
        // The table's memory once the daemon has settled too: taken at once, the
        // figure caught daemons still freeing what the load left.
        Scenario::Prefixes(_) => {
            settle(opts, &table, s0, rib_at.unwrap_or(t_done), m)?;
            withdraw(opts, rig, &table, m)
        }
        Scenario::Peers(_) | Scenario::Reflector(_) => withdraw(opts, rig, &table, m),
        Scenario::Rib(_) => settle(opts, &table, s0, rib_at.unwrap_or(t_done), m),
        Scenario::Restart(_) => restart(opts, rig, &table, m, timeline),
        Scenario::Churn {
            flap, secs: dur, ..
        } => churn(opts, rig, &table, flap, dur, m),
    }
}

/// The two namespaces of a run, joined by a veth, with the peers' addresses, room
/// for the table, and the options that shape the link (`rto_min`, packet loss).
fn namespaces(
    opts: &BenchOpts,
    feeds: &[(IpAddr, u32, Ipv4Addr, Vec<IpNet>)],
    dir: &Path,
    m: &mut BTreeMap<String, f64>,
) -> Result<(Netns, Netns)> {
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
    add_addresses(&inj_ns, "i0", &cidrs, dir)?;
    let peer_addrs: Vec<IpAddr> = feeds.iter().map(|f| f.0).collect();
    pin_neighbours(&dut_ns, "d0", &inj_ns, "i0", &peer_addrs, dir)?;
    pin_neighbours(
        &inj_ns,
        "i0",
        &dut_ns,
        "d0",
        &[IpAddr::V4(DUT_V4), IpAddr::V6(DUT_V6)],
        dir,
    )?;
    // Room for a million IPv6 routes (per namespace; a failure leaves the default and
    // the run may then fail loudly).
    let _ = dut_ns.exec("sysctl", &["-qw", "net.ipv6.route.max_size=4194304"]);
    if let Some(ms) = opts.rto_min_ms {
        // Host routes to each end with the attribute: more specific than the link's
        // own route, so they carry every BGP connection.
        let rto = format!("{ms}ms");
        for (a, ..) in feeds {
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
    Ok((dut_ns, inj_ns))
}

/// The table a run loaded: the RIB count before it, its size, the daemon's processes.
struct Table<'a> {
    base: u64,
    n: usize,
    pids: &'a [u32],
    /// The daemon's RSS with every session up and no table yet, in bytes.
    empty_rss: u64,
}

/// The daemon's kernel route counts, where it has a FIB.
fn fib(w: &Option<FibWatch>) -> measure::FibCount {
    w.as_ref().map(FibWatch::get).unwrap_or_default()
}

/// CPU seconds below this over [`QUIET`]: the daemon has settled (1% of a core).
const IDLE_CPU_S: f64 = 0.02;
/// How long the CPU must stay still.
const QUIET: Duration = Duration::from_secs(2);
/// Longest wait for it.
const SETTLE_MAX: Duration = Duration::from_secs(60);

/// Samples the daemon's CPU every 50 ms until it has moved less than [`IDLE_CPU_S`]
/// in [`QUIET`]; returns when it last moved and the figures then. Marks
/// `settle_timeout` when [`SETTLE_MAX`] went by first.
fn quiet(opts: &BenchOpts, pids: &[u32], m: &mut BTreeMap<String, f64>) -> (Instant, ProcStats) {
    let deadline = Instant::now() + SETTLE_MAX.min(opts.timeout);
    // The last time the CPU moved by more than the idle amount, and its value then.
    let mut anchor = (Instant::now(), proc_stats(pids).cpu_s);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = proc_stats(pids);
        let t = Instant::now();
        if now.cpu_s - anchor.1 > IDLE_CPU_S {
            anchor = (t, now.cpu_s);
        } else if t.duration_since(anchor.0) >= QUIET {
            return (anchor.0, now);
        }
        if t > deadline {
            m.insert("settle_timeout".into(), 1.0);
            return (t, now);
        }
    }
}

/// After the table is in: samples the daemon's CPU every 50 ms until it has moved less
/// than [`IDLE_CPU_S`] in [`QUIET`], then records the CPU seconds since the first
/// UPDATE (the settling included), how long after the table it settled, and memory.
fn settle(
    opts: &BenchOpts,
    table: &Table<'_>,
    s0: ProcStats,
    t_in: Instant,
    m: &mut BTreeMap<String, f64>,
) -> Result<()> {
    if table.pids.is_empty() {
        return Ok(());
    }
    let (quiet_since, now) = quiet(opts, table.pids, m);
    m.insert("settled_cpu_s".into(), now.cpu_s - s0.cpu_s);
    m.insert("settle_s".into(), secs(t_in, quiet_since));
    m.insert("settled_rss_mb".into(), now.rss as f64 / 1e6);
    m.insert(
        "settled_bytes_per_route".into(),
        (now.rss as f64 - s0.rss as f64) / table.n as f64,
    );
    m.insert("peak_rss_mb".into(), now.hwm as f64 / 1e6);
    Ok(())
}

/// Withdraws the whole table: time to the RIB and the FIB, CPU.
fn withdraw(
    opts: &BenchOpts,
    rig: &mut Rig,
    table: &Table<'_>,
    m: &mut BTreeMap<String, f64>,
) -> Result<()> {
    let removed0 = fib(&rig.watch).removed;
    let s2 = proc_stats(table.pids);
    let (_, t1) = rig.inj.set_phase(Phase::Empty);
    let (mut rib_at, mut clients_at) = (None, None);
    let t_done = poll_until("everything withdrawn", opts.timeout, opts.poll, || {
        if rib_at.is_none() && rib(&rig.dut).is_some_and(|c| c <= table.base) {
            rib_at = Some(Instant::now());
        }
        match rig.inj.reflected() {
            Some((_, 0)) if clients_at.is_none() => clients_at = Some(Instant::now()),
            Some(_) if clients_at.is_none() => return Ok(false),
            _ => {}
        }
        let f = fib(&rig.watch);
        Ok(rib_at.is_some() && (rig.watch.is_none() || f.removed >= removed0 + table.n as u64))
    })?;
    let s3 = proc_stats(table.pids);
    m.insert("withdraw_s".into(), secs(t1, rib_at.unwrap_or(t_done)));
    if let Some(t) = clients_at {
        m.insert("withdraw_reflect_s".into(), secs(t1, t));
    }
    if rig.watch.is_some() {
        let f = fib(&rig.watch);
        m.insert("withdraw_fib_s".into(), secs(t1, f.last.unwrap_or(t_done)));
    }
    if !table.pids.is_empty() {
        m.insert("withdraw_cpu_s".into(), s3.cpu_s - s2.cpu_s);
        // The peak of the whole run: taking a table down can cost more than taking
        // it in (tern's FIB task once held every route waiting to be deleted whole).
        let peak = m.get("peak_rss_mb").copied().unwrap_or(0.0);
        m.insert("peak_rss_mb".into(), peak.max(s3.hwm as f64 / 1e6));
        // What is left once everything is withdrawn and the daemon has settled,
        // against the daemon before the table came: freed memory the daemon or its
        // allocator keeps. Taken at once, it caught daemons still freeing.
        if table.empty_rss > 0 {
            let (_, s4) = quiet(opts, table.pids, m);
            m.insert(
                "withdrawn_rss_pct".into(),
                100.0 * (s4.rss as f64 - table.empty_rss as f64) / table.empty_rss as f64,
            );
        }
    }
    Ok(())
}

/// Restarts the daemon with the table in: how long it is gone, how long to the table
/// again, how many kernel routes it deletes (and the route count over time).
fn restart(
    opts: &BenchOpts,
    rig: &mut Rig,
    table: &Table<'_>,
    m: &mut BTreeMap<String, f64>,
    timeline: &mut Vec<[f64; 2]>,
) -> Result<()> {
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
            if rib_at.is_none() && rib(&rig.dut).is_some_and(|c| c >= table.n as u64) {
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
    Ok(())
}

/// Flaps `flap` prefixes every second for `dur` seconds: settling time, CPU, memory.
fn churn(
    opts: &BenchOpts,
    rig: &mut Rig,
    table: &Table<'_>,
    flap: usize,
    dur: u64,
    m: &mut BTreeMap<String, f64>,
) -> Result<()> {
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
        Ok(rib(&rig.dut).is_some_and(|c| c >= table.base + table.n as u64))
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
    Ok(())
}
