//! The soak's cycles: each one churns (a block moves, workload routes come and go) and
//! waits to see it on every node, flaps one node (kill -9 and restart, or its link
//! down past the hold time) and waits for the lab to converge again.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::{
    refresh, Pids, SoakOpts, SoakReport, CHURN_WAIT, MESH_HOLD, RECONVERGE_WAIT, REST, WORKLOADS,
};
use crate::lab::Lab;
use crate::{Error, Result};

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

/// Runs cycles until the soak's time is up, then undoes the churn.
pub(super) fn cycles(
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
