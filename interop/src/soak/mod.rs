//! The soak: a Calico-style lab (`crate::lab`) kept busy for minutes with churn and
//! session flaps while every tern's memory and CPU are sampled, then checked whole.
//!
//! Each cycle:
//! 1. churn: a second block moves to another node (a `BlockAffinity` added to
//!    `cluster.yaml`, the previous one removed) and a node gets five new workload
//!    routes for addresses borrowed from its neighbour's block (kernel routes to a
//!    `cali*` interface, as Calico's CNI makes them; the previous five are deleted).
//!    Every other node's FIB must show exactly the new state (new routes via the right
//!    node, old ones gone) within [`CHURN_WAIT`];
//! 2. a flap, alternately: kill -9 of a tern and a restart a second later (graceful
//!    restart), or a node's link down for longer than the hold time, then up (its
//!    sessions die on every side and come back);
//! 3. the whole lab must converge again (every FIB, every session) within
//!    [`RECONVERGE_WAIT`].
//!
//! A node is flapped again only after its sessions have been up for [`REST`]: tern's
//! FSM backs off (idle hold 1 s doubling to 120 s, RFC 4271 DampPeerOscillations) for a
//! peer whose sessions keep dying within 60 s, and while backing off it refuses that
//! peer's connections; flapping the same node faster makes the lab measure that
//! back-off (up to two minutes without the session) instead of tern's recovery.
//!
//! Only the last quarter of the nodes are ever killed; the others keep one process for
//! the whole run, and their RSS must stay flat (see [`chart::flatness`]). At the end
//! the churn is undone: no churned route may remain anywhere, every FIB must be
//! complete and every pod must reach every other pod.

pub mod chart;
mod cycle;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use self::chart::{Flatness, Sample};
use crate::bench::measure::proc_stats;
use crate::lab::{Lab, LabSpec};
use crate::peers::Kind;
use crate::{Error, Result};

/// Longest wait for a churn step to show on every node.
pub const CHURN_WAIT: Duration = Duration::from_secs(30);
/// Longest wait for the lab to converge after a flap.
pub const RECONVERGE_WAIT: Duration = Duration::from_secs(90);
/// Hold time of the mesh sessions (a link flap outlasts it).
const MESH_HOLD: u32 = 6;
/// Graceful-restart time of the mesh sessions.
const RESTART_TIME: u32 = 10;
/// Least time between two flaps of the same node, counted from the end of the first
/// one's reconvergence (tern's FSM treats a session that lasted 60 s as stable).
pub const REST: Duration = Duration::from_secs(70);
/// Workload routes per churn step.
const WORKLOADS: usize = 5;
/// RSS of a stable node may end at most this ratio of its early peak ...
pub const RSS_RATIO: f64 = 1.10;
/// ... plus this many bytes.
pub const RSS_SLACK: f64 = 2.0 * 1024.0 * 1024.0;

/// How to run a soak.
#[derive(Debug, Clone)]
pub struct SoakOpts {
    /// Namespace name prefix.
    pub prefix: String,
    /// Configs, logs, the CSV.
    pub dir: PathBuf,
    /// The tern binary.
    pub tern: PathBuf,
    /// Nodes (at least 4).
    pub nodes: usize,
    /// How long to churn and flap.
    pub duration: Duration,
    /// How often every tern's RSS and CPU are read.
    pub sample_every: Duration,
}

/// What a soak did and saw.
#[derive(Debug, Clone, Default)]
pub struct SoakReport {
    /// Cycles completed.
    pub cycles: usize,
    /// Routing changes made: blocks added or removed, workload routes added or deleted.
    pub churn_changes: usize,
    /// Churn steps seen complete on every node in time / not.
    pub churn_ok: usize,
    /// Churn steps that did not show on every node in time, with what was wrong.
    pub churn_failed: Vec<String>,
    /// Slowest churn step to reach every node, seconds.
    pub churn_max_s: f64,
    /// kill -9 and restarts.
    pub kills: usize,
    /// Link down / up flaps.
    pub link_flaps: usize,
    /// Slowest reconvergence after a flap, seconds.
    pub reconverge_max_s: f64,
    /// Pings sent and unanswered at the end (twice: the first and a second try).
    pub pings: (usize, usize),
    /// Pings unanswered at the end but answered on a second try a second later: a
    /// transient, reported with how each end routes, not a failure.
    pub transient_pings: usize,
    /// Churned routes still present somewhere at the end.
    pub leftovers: Vec<String>,
    /// Nodes never killed (their RSS is judged).
    pub stable_nodes: Vec<usize>,
    /// Per stable node, the RSS verdict (None: run too short to judge).
    pub flatness: Vec<(usize, Option<Flatness>)>,
    /// Every sample.
    pub samples: Vec<Sample>,
    /// Every flap: seconds since the start, node, `kill` or `flap` (soak-events.csv).
    pub events: Vec<(f64, usize, &'static str)>,
    /// Seconds the churn and flaps ran.
    pub elapsed_s: f64,
    /// Warm-up excluded from the RSS verdict, seconds.
    pub warmup_s: f64,
}

impl SoakReport {
    /// Every reason the soak failed (empty: it passed).
    pub fn failures(&self) -> Vec<String> {
        let mut f = self.churn_failed.clone();
        f.extend(self.leftovers.iter().map(|l| format!("left over: {l}")));
        if self.pings.1 > 0 {
            f.push(format!(
                "{} of {} pings unanswered at the end",
                self.pings.1, self.pings.0
            ));
        }
        for (n, v) in &self.flatness {
            match v {
                Some(v) if !v.ok() => f.push(format!(
                    "node-{n}: RSS grew from {:.1} MB to {:.1} MB (limit {:.1} MB)",
                    v.first_max / 1e6,
                    v.last_max / 1e6,
                    v.limit / 1e6
                )),
                None => f.push(format!(
                    "node-{n}: too few samples to judge RSS (run longer or sample more often)"
                )),
                _ => {}
            }
        }
        f
    }

    /// Per sample time, the summed RSS (MB) of the stable nodes.
    pub fn stable_rss_series(&self) -> Vec<(f64, f64)> {
        let mut by_t: std::collections::BTreeMap<u64, (f64, f64)> = Default::default();
        for s in self
            .samples
            .iter()
            .filter(|s| self.stable_nodes.contains(&s.node))
        {
            let e = by_t.entry((s.t * 1000.0) as u64).or_insert((s.t, 0.0));
            e.1 += s.rss as f64 / 1e6;
        }
        by_t.into_values().collect()
    }

    /// Per node: mean CPU percent over the run and peak RSS (MB), from the samples.
    pub fn per_node(&self) -> Vec<(usize, f64, f64)> {
        let mut nodes: Vec<usize> = self.samples.iter().map(|s| s.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
            .into_iter()
            .map(|n| {
                let mine: Vec<&Sample> = self.samples.iter().filter(|s| s.node == n).collect();
                let (mut cpu, mut secs) = (0.0, 0.0);
                for w in mine.windows(2) {
                    // A restart gives a new pid whose counter starts again: skip that gap.
                    if w[0].pid == w[1].pid {
                        cpu += (w[1].cpu_s - w[0].cpu_s).max(0.0);
                        secs += w[1].t - w[0].t;
                    }
                }
                let peak = mine.iter().map(|s| s.rss).max().unwrap_or(0) as f64 / 1e6;
                (n, if secs > 0.0 { 100.0 * cpu / secs } else { 0.0 }, peak)
            })
            .collect()
    }

    /// The closing text: figures, the RSS chart, per-node CPU and memory, verdicts.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "soak: {:.0} s, {} cycles: {} routing changes ({} churn steps on every node, slowest {:.1} s), \
             {} kill -9 + restart, {} link flaps (slowest reconvergence {:.1} s); \
             end: {} pings, {} unanswered ({} more answered only on a second try); {} churned routes left over",
            self.elapsed_s,
            self.cycles,
            self.churn_changes,
            self.churn_ok,
            self.churn_max_s,
            self.kills,
            self.link_flaps,
            self.reconverge_max_s,
            self.pings.0,
            self.pings.1,
            self.transient_pings,
            self.leftovers.len()
        );
        let _ = writeln!(
            s,
            "\nRSS of the {} never-restarted terns, summed (nodes {:?}), MB:",
            self.stable_nodes.len(),
            self.stable_nodes
        );
        let series = self.stable_rss_series();
        s.push_str(&chart::ascii(&series, 64, 12, "MB"));
        if let Some(k) = chart::slope_per_min(&series, self.warmup_s) {
            let _ = writeln!(
                s,
                "trend after the warm-up: {:+.3} MB/min for the {} together (least squares)",
                k,
                self.stable_nodes.len()
            );
        }
        let _ = writeln!(
            s,
            "\nnode   mean CPU %   peak RSS MB   RSS verdict (after {:.0} s warm-up: last-quarter max <= first-quarter max x {RSS_RATIO} + {:.1} MB)",
            self.warmup_s,
            RSS_SLACK / 1e6
        );
        for (n, cpu, peak) in self.per_node() {
            let verdict = match self.flatness.iter().find(|(m, _)| *m == n) {
                Some((_, Some(f))) => format!(
                    "{} ({:.1} -> {:.1} MB, limit {:.1})",
                    if f.ok() { "flat" } else { "GREW" },
                    f.first_max / 1e6,
                    f.last_max / 1e6,
                    f.limit / 1e6
                ),
                Some((_, None)) => "too short to judge".into(),
                None => "killed and restarted (not judged)".into(),
            };
            let _ = writeln!(s, "{n:>4}   {cpu:>10.2}   {peak:>11.1}   {verdict}");
        }
        s
    }
}

/// Pids of every node's tern, shared with the sampler.
type Pids = Arc<Mutex<Vec<Option<u32>>>>;

fn refresh(pids: &Pids, lab: &Lab) {
    if let Ok(mut p) = pids.lock() {
        for (i, slot) in p.iter_mut().enumerate() {
            *slot = lab.tern_pid(i + 1);
        }
    }
}

/// Reads every tern's RSS and CPU every `every` until `stop`.
fn sampler(
    pids: Pids,
    every: Duration,
    stop: Arc<AtomicBool>,
    t0: Instant,
) -> std::thread::JoinHandle<Vec<Sample>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut next = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            let t = t0.elapsed().as_secs_f64();
            let now: Vec<Option<u32>> = pids.lock().map(|p| p.clone()).unwrap_or_default();
            for (i, pid) in now.iter().enumerate() {
                let Some(pid) = *pid else { continue };
                let st = proc_stats(&[pid]);
                if st.rss > 0 {
                    out.push(Sample {
                        t,
                        node: i + 1,
                        pid,
                        rss: st.rss,
                        cpu_s: st.cpu_s,
                    });
                }
            }
            next += every;
            while Instant::now() < next && !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        out
    })
}

/// Runs a soak (see the module doc). The lab is removed before this returns. An error
/// means the soak could not run or the lab broke beyond a single step (no
/// reconvergence); a completed run reports its failures in [`SoakReport::failures`].
pub fn run(opts: &SoakOpts, mut progress: impl FnMut(&str)) -> Result<SoakReport> {
    if opts.nodes < 4 {
        return Err(Error::Spec("a soak needs at least 4 nodes".into()));
    }
    let mut spec = LabSpec::new(&opts.prefix, &opts.dir, &opts.tern, opts.nodes);
    spec.tor = Some(Kind::Bird);
    spec.pods = 1;
    spec.borrowed = 1;
    spec.mesh_hold = Some(MESH_HOLD);
    spec.restart_time = Some(RESTART_TIME);
    let mut lab = Lab::up(spec)?;
    let t = lab.wait_converged(RECONVERGE_WAIT)?;
    progress(&format!(
        "{} nodes up, converged {:.1} s after start",
        opts.nodes,
        t.as_secs_f64()
    ));
    let n = opts.nodes;
    // The last quarter of the nodes take the kill -9s; the others are judged on RSS.
    let killable: Vec<usize> = ((n - (n / 4).max(1) + 1)..=n).collect();
    let mut report = SoakReport {
        stable_nodes: (1..=n).filter(|i| !killable.contains(i)).collect(),
        ..SoakReport::default()
    };
    let pids: Pids = Arc::new(Mutex::new(vec![None; n]));
    refresh(&pids, &lab);
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let sampling = sampler(pids.clone(), opts.sample_every, stop.clone(), t0);

    let result = cycle::cycles(
        opts,
        &mut lab,
        &pids,
        &killable,
        &mut report,
        t0,
        &mut progress,
    );
    report.elapsed_s = t0.elapsed().as_secs_f64();
    let finish = result.and_then(|()| finish(&mut lab, &mut report, &mut progress));
    stop.store(true, Ordering::SeqCst);
    report.samples = sampling.join().unwrap_or_default();
    finish?;
    let _ = std::fs::write(opts.dir.join("soak.csv"), chart::csv(&report.samples));
    let _ = std::fs::write(
        opts.dir.join("soak-events.csv"),
        chart::events_csv(&report.events),
    );
    report.warmup_s = (report.elapsed_s / 10.0).max(20.0);
    for &node in &report.stable_nodes {
        let series: Vec<(f64, f64)> = report
            .samples
            .iter()
            .filter(|s| s.node == node)
            .map(|s| (s.t, s.rss as f64))
            .collect();
        let v = chart::flatness(
            &series,
            report.warmup_s,
            report.elapsed_s,
            RSS_RATIO,
            RSS_SLACK,
        );
        report.flatness.push((node, v));
    }
    Ok(report)
}

fn finish(lab: &mut Lab, report: &mut SoakReport, progress: &mut impl FnMut(&str)) -> Result<()> {
    lab.wait_converged(RECONVERGE_WAIT)?;
    let m = lab.ping_matrix()?;
    report.pings = (m.sent(), 0);
    if !m.failures().is_empty() {
        progress(&m.render());
        let (text, lasting) = unanswered_detail(lab, &m);
        progress(&text);
        report.pings.1 = lasting;
        report.transient_pings = m.failures().len() - lasting;
    }
    Ok(())
}

/// For each unanswered IPv4 ping: how each end's node routes to the other end, and
/// whether a second ping a second later is answered (a transient or a lasting fault).
/// Returns the text and how many stayed unanswered (IPv6 ones are not tried again).
fn unanswered_detail(lab: &Lab, m: &crate::lab::probe::Matrix) -> (String, usize) {
    let pods = lab.pods();
    let route_get = |node: usize, to: &str| {
        let ns = lab.node(node).map(|n| n.ns.clone()).unwrap_or_default();
        std::process::Command::new("ip")
            .args(["-n", &ns, "route", "get", to])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let mut out = String::new();
    let v6_lost = m.ok.get(1).map_or(0, |rows| {
        rows.iter().flatten().filter(|c| **c == Some(false)).count()
    });
    let mut lasting = v6_lost;
    std::thread::sleep(std::time::Duration::from_secs(1));
    let rows = m.ok.first().map(Vec::as_slice).unwrap_or_default();
    for (i, row) in rows.iter().enumerate() {
        for (j, c) in row.iter().enumerate() {
            let (Some(from), Some(to)) = (pods.get(i), pods.get(j)) else {
                continue;
            };
            if *c != Some(false) {
                continue;
            }
            let again = crate::lab::probe::ping(&from.ns, &to.v4);
            lasting += usize::from(!again);
            out.push_str(&format!(
                "{} -> {}: again {}; node-{} routes {}: {}; node-{} routes {}: {}\n",
                from.name,
                to.name,
                if again { "answered" } else { "unanswered" },
                from.node,
                to.v4,
                route_get(from.node, &to.v4),
                to.node,
                from.v4,
                route_get(to.node, &from.v4)
            ));
        }
    }
    (out, lasting)
}
