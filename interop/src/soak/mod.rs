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
    /// Pings sent and unanswered at the end.
    pub pings: (usize, usize),
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
             end: {} pings, {} unanswered; {} churned routes left over",
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

/// The churn of one cycle: an extra block on `block_owner`, and workload routes on
/// `workload_node` for addresses of its neighbour's block.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Churn {
    block_owner: usize,
    workload_node: usize,
    /// Distinguishes each cycle's workload addresses.
    round: usize,
}

impl Churn {
    fn block(&self) -> String {
        format!("198.18.{}.128/26", self.block_owner)
    }

    /// The workload addresses: in the next node's block, above the lab's own pods
    /// (ordinals 40-59, cycling), as `ip` prints host routes.
    fn workloads(&self, nodes: usize) -> Vec<String> {
        let owner = self.workload_node % nodes + 1;
        (0..WORKLOADS)
            .map(|k| format!("198.18.{owner}.{}", 40 + (self.round % 4) * WORKLOADS + k))
            .collect()
    }
}

fn cluster_with(lab: &Lab, churn: Option<Churn>) -> String {
    let mut y = crate::lab::plan::cluster_yaml(lab.spec());
    if let Some(c) = churn {
        let _ = write!(
            y,
            "---\napiVersion: projectcalico.org/v3\nkind: BlockAffinity\nmetadata: {{name: soak-extra}}\n\
             spec:\n  node: node-{}\n  cidr: \"{}\"\n  state: confirmed\n",
            c.block_owner,
            c.block()
        );
    }
    y
}

/// Replaces `cluster.yaml` in one step (write, then rename), so no node reads half.
fn write_cluster(lab: &Lab, text: &str) -> Result<()> {
    let path = lab.spec().cluster_file();
    let tmp = path.with_extension("yaml.new");
    std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, &path))
        .map_err(|source| Error::Spawn {
            command: format!("write {}", path.display()),
            source,
        })
}

fn workload_routes(lab: &Lab, c: Churn, add: bool) -> Result<()> {
    let n = lab.node(c.workload_node)?.clone();
    let dev = n
        .pods
        .first()
        .map(|p| p.host_if.clone())
        .ok_or_else(|| Error::Lab(format!("{} has no pod interface", n.name)))?;
    for a in c.workloads(lab.nodes().len()) {
        let op = if add { "add" } else { "del" };
        lab.exec_on_node(
            c.workload_node,
            "ip",
            &[
                "route",
                op,
                &format!("{a}/32"),
                "dev",
                &dev,
                "scope",
                "link",
            ],
        )?;
    }
    Ok(())
}

/// What is wrong with the churn state on every node but the churn's own: `now` must be
/// there via the right node, `gone` must be absent. Empty: all good.
fn churn_state(lab: &Lab, now: Option<Churn>, gone: Option<Churn>) -> Vec<String> {
    let n = lab.nodes().len();
    let mut bad = Vec::new();
    for node in lab.nodes() {
        let Ok(r) = lab.routes(node.index) else {
            bad.push(format!("{}: cannot read routes", node.name));
            continue;
        };
        if let Some(c) = now {
            let via = |i: usize| lab.node(i).map(|x| x.v4.clone()).unwrap_or_default();
            if node.index != c.block_owner && !r.via(&c.block(), &via(c.block_owner)) {
                bad.push(format!(
                    "{}: no {} via node-{}",
                    node.name,
                    c.block(),
                    c.block_owner
                ));
            }
            if node.index != c.workload_node {
                for a in c.workloads(n) {
                    if !r.via(&a, &via(c.workload_node)) {
                        bad.push(format!(
                            "{}: no {a} via node-{}",
                            node.name, c.workload_node
                        ));
                    }
                }
            }
        }
        if let Some(g) = gone {
            // Skip what the current step re-used (same block owner, same addresses).
            let keep_block = now.is_some_and(|c| c.block() == g.block());
            if !keep_block
                && r.by_dst
                    .get(&g.block())
                    .is_some_and(|x| x.protocol == "201")
            {
                bad.push(format!("{}: {} still there", node.name, g.block()));
            }
            let reused: Vec<String> = now.map(|c| c.workloads(n)).unwrap_or_default();
            for a in g.workloads(n).into_iter().filter(|a| !reused.contains(a)) {
                if r.by_dst.contains_key(&a) {
                    bad.push(format!("{}: {a} still there", node.name));
                }
            }
        }
    }
    bad
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

    let result = cycles(
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

fn cycles(
    opts: &SoakOpts,
    lab: &mut Lab,
    pids: &Pids,
    killable: &[usize],
    report: &mut SoakReport,
    t0: Instant,
    progress: &mut impl FnMut(&str),
) -> Result<()> {
    let n = opts.nodes;
    let mut prev: Option<Churn> = None;
    let mut cycle = 0;
    // When each node's last flap was over (index 0 unused).
    let mut rested: Vec<Option<Instant>> = vec![None; n + 1];
    let mut next_link = 0;
    while t0.elapsed() < opts.duration {
        cycle += 1;
        // 1. Churn.
        let (c, took) = churn(lab, cycle, n, prev, report)?;
        prev = Some(c);

        // 2. A flap: kill -9 + restart, or a link down past the hold time; wait for
        // the victim if it has not rested enough.
        let victim = pick_victim(cycle, killable, &rested, &mut next_link, n);
        let wait = REST.saturating_sub(ready(&rested, victim));
        let left = opts.duration.saturating_sub(t0.elapsed());
        if wait > left {
            // No flap fits in the time left: churn only, until the end.
            report.cycles = cycle;
            progress(&format!(
                "{:>6.0} s  cycle {cycle}: churn seen everywhere in {took:.1} s (no flap: every candidate flapped less than {} s ago)",
                t0.elapsed().as_secs_f64(),
                REST.as_secs()
            ));
            std::thread::sleep(left.min(Duration::from_secs(5)));
            continue;
        }
        std::thread::sleep(wait);
        let what = flap(lab, pids, victim, cycle, report, t0)?;
        // 3. Everything back.
        let flapped = Instant::now();
        lab.wait_converged(RECONVERGE_WAIT)
            .map_err(|e| Error::Lab(format!("cycle {cycle} ({what}): {e}")))?;
        let back = flapped.elapsed().as_secs_f64();
        if let Some(r) = rested.get_mut(victim) {
            *r = Some(Instant::now());
        }
        report.reconverge_max_s = report.reconverge_max_s.max(back);
        report.cycles = cycle;
        progress(&format!(
            "{:>6.0} s  cycle {cycle}: churn seen everywhere in {took:.1} s, {what}, converged again in {back:.1} s",
            t0.elapsed().as_secs_f64()
        ));
    }
    // Undo the churn.
    write_cluster(lab, &cluster_with(lab, None))?;
    if let Some(p) = prev {
        workload_routes(lab, p, false)?;
        report.churn_changes += 1 + WORKLOADS;
        let started = Instant::now();
        while !churn_state(lab, None, Some(p)).is_empty() && started.elapsed() < CHURN_WAIT {
            std::thread::sleep(Duration::from_millis(200));
        }
        report.leftovers = churn_state(lab, None, Some(p));
    }
    Ok(())
}

/// How long node `i` has rested since its last flap (forever if it never flapped).
fn ready(rested: &[Option<Instant>], i: usize) -> Duration {
    rested
        .get(i)
        .copied()
        .flatten()
        .map_or(Duration::MAX, |t| t.elapsed())
}

/// Step 1 of a cycle: the churn. Nodes 2..=n take turns (node 1 never changes, so
/// some node always sees every step from outside). Returns the churn and how long it
/// took to be seen everywhere.
fn churn(
    lab: &mut Lab,
    cycle: usize,
    n: usize,
    prev: Option<Churn>,
    report: &mut SoakReport,
) -> Result<(Churn, f64)> {
    let c = Churn {
        block_owner: 2 + cycle % (n - 1),
        workload_node: 2 + (cycle + n / 2) % (n - 1),
        round: cycle,
    };
    write_cluster(lab, &cluster_with(lab, Some(c)))?;
    if let Some(p) = prev {
        workload_routes(lab, p, false)?;
    }
    workload_routes(lab, c, true)?;
    report.churn_changes += 2 * WORKLOADS + if prev.is_some() { 2 } else { 1 };
    let started = Instant::now();
    let mut bad = churn_state(lab, Some(c), prev);
    while !bad.is_empty() && started.elapsed() < CHURN_WAIT {
        std::thread::sleep(Duration::from_millis(200));
        bad = churn_state(lab, Some(c), prev);
    }
    let took = started.elapsed().as_secs_f64();
    if bad.is_empty() {
        report.churn_ok += 1;
        report.churn_max_s = report.churn_max_s.max(took);
    } else {
        report.churn_failed.push(format!(
            "cycle {cycle}: churn not seen everywhere after {took:.0} s: {}",
            bad.join("; ")
        ));
    }
    Ok((c, took))
}

/// Step 2's victim: odd cycles kill the candidate that rested longest; even cycles
/// flap the links of nodes 2..=n in turn, skipping any that has not rested.
fn pick_victim(
    cycle: usize,
    killable: &[usize],
    rested: &[Option<Instant>],
    next_link: &mut usize,
    n: usize,
) -> usize {
    if cycle % 2 == 1 {
        killable
            .iter()
            .copied()
            .max_by_key(|&i| ready(rested, i))
            .unwrap_or(n)
    } else {
        // Nodes 2..=n in turn, skipping any that has not rested.
        let mut v = 2 + *next_link % (n - 1);
        for k in 0..(n - 1) {
            let c = 2 + (*next_link + k) % (n - 1);
            if ready(rested, c) >= REST {
                v = c;
                *next_link += k;
                break;
            }
        }
        *next_link += 1;
        v
    }
}

/// Step 2: kill -9 and restart `victim`, or take its link down past the hold time;
/// says which.
fn flap(
    lab: &mut Lab,
    pids: &Pids,
    victim: usize,
    cycle: usize,
    report: &mut SoakReport,
    t0: Instant,
) -> Result<String> {
    if cycle % 2 == 1 {
        report
            .events
            .push((t0.elapsed().as_secs_f64(), victim, "kill"));
        lab.kill_tern(victim);
        refresh(pids, lab);
        std::thread::sleep(Duration::from_secs(1));
        lab.start_tern(victim)?;
        refresh(pids, lab);
        report.kills += 1;
        Ok(format!("kill -9 node-{victim}"))
    } else {
        report
            .events
            .push((t0.elapsed().as_secs_f64(), victim, "flap"));
        lab.exec_on_node(victim, "ip", &["link", "set", "eth0", "down"])?;
        std::thread::sleep(Duration::from_secs(u64::from(MESH_HOLD) + 2));
        lab.exec_on_node(victim, "ip", &["link", "set", "eth0", "up"])?;
        lab.exec_on_node(
            victim,
            "ip",
            &[
                "route",
                "replace",
                "default",
                "via",
                crate::lab::plan::GATEWAY_V4,
            ],
        )?;
        report.link_flaps += 1;
        Ok(format!("link flap node-{victim}"))
    }
}

fn finish(lab: &mut Lab, report: &mut SoakReport, progress: &mut impl FnMut(&str)) -> Result<()> {
    lab.wait_converged(RECONVERGE_WAIT)?;
    let m = lab.ping_matrix()?;
    report.pings = (m.sent(), m.failures().len());
    if !m.failures().is_empty() {
        progress(&m.render());
    }
    Ok(())
}
