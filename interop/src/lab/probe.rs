//! Looking at a lab the way its user would: each node's kernel routes (`ip -j route`),
//! tern's own view (`tern status -o json`), and packets between pods (`ping` from inside
//! each pod's namespace), with the ping matrix `tern-lab ping` prints.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::plan::{self, LabSpec, NodeKind, NodePlan, PodPlan};
use crate::netns::{run, Netns};
use crate::Result;

/// Runs `tern ARGS --socket SOCKET`; (exit code, stdout + stderr).
pub fn tern_cli(tern: &Path, socket: &Path, args: &[&str]) -> (i32, String) {
    match Command::new(tern)
        .args(args)
        .arg("--socket")
        .arg(socket)
        .output()
    {
        Ok(out) => (
            out.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ),
        Err(e) => (-1, format!("cannot run {}: {e}", tern.display())),
    }
}

/// Why not every session of the tern behind `socket` is Established (None: all are).
pub fn sessions_down(tern: &Path, socket: &Path) -> Option<String> {
    let (code, out) = tern_cli(tern, socket, &["status", "-o", "json"]);
    if code != 0 {
        return Some(format!("tern status failed ({code}): {}", out.trim()));
    }
    let v: serde_json::Value = match serde_json::from_str(&out) {
        Ok(v) => v,
        Err(e) => return Some(format!("tern status -o json: {e}")),
    };
    let peers = v["peers"].as_array().cloned().unwrap_or_default();
    if peers.is_empty() {
        return Some("no peers yet".into());
    }
    let down: Vec<String> = peers
        .iter()
        .filter(|p| p["state"] != "Established")
        .map(|p| {
            format!(
                "{} {}",
                p["address"].as_str().unwrap_or("?"),
                p["state"].as_str().unwrap_or("?")
            )
        })
        .collect();
    (!down.is_empty()).then(|| format!("sessions not up: {}", down.join(", ")))
}

/// One kernel route, as `ip -j route` describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Route {
    /// `unicast`, `blackhole`, …
    pub kind: String,
    /// Gateways (several for ECMP).
    pub gateways: Vec<String>,
    /// Device, when one is named.
    pub dev: Option<String>,
    /// The route protocol (`201` for tern's, `bird`, `kernel`, …).
    pub protocol: String,
}

/// A node's main routing table, both families, by destination as `ip` prints it
/// (`198.18.2.0/26`, host routes without `/32`).
#[derive(Debug, Clone, Default)]
pub struct Routes {
    /// Destination → route.
    pub by_dst: BTreeMap<String, Route>,
}

impl Routes {
    /// Reads the main table of `ns`.
    pub fn read(ns: &Netns) -> Result<Routes> {
        let mut r = Routes::default();
        for fam in ["-4", "-6"] {
            let out = ns.ip(&["-j", fam, "route", "show", "table", "main"])?;
            r.parse(&String::from_utf8_lossy(&out.stdout));
        }
        Ok(r)
    }

    /// Adds the routes of one `ip -j route` answer.
    pub fn parse(&mut self, json: &str) {
        let Ok(serde_json::Value::Array(list)) = serde_json::from_str(json) else {
            return;
        };
        for r in list {
            let Some(dst) = r["dst"].as_str() else {
                continue;
            };
            let mut gateways: Vec<String> = r["gateway"]
                .as_str()
                .map(String::from)
                .into_iter()
                .collect();
            if let Some(hops) = r["nexthops"].as_array() {
                gateways.extend(
                    hops.iter()
                        .filter_map(|h| h["gateway"].as_str().map(String::from)),
                );
            }
            let text = |v: &serde_json::Value| match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                _ => String::new(),
            };
            self.by_dst.insert(
                dst.to_string(),
                Route {
                    kind: r["type"].as_str().unwrap_or("unicast").to_string(),
                    gateways,
                    dev: r["dev"].as_str().map(String::from),
                    protocol: text(&r["protocol"]),
                },
            );
        }
    }

    /// Whether `dst` is routed via `gateway`.
    pub fn via(&self, dst: &str, gateway: &str) -> bool {
        self.by_dst
            .get(dst)
            .is_some_and(|r| r.gateways.iter().any(|g| g == gateway))
    }

    /// Whether `dst` is a blackhole.
    pub fn blackhole(&self, dst: &str) -> bool {
        self.by_dst.get(dst).is_some_and(|r| r.kind == "blackhole")
    }
}

/// The routes node `me` must have once the lab has converged, each missing one in
/// words: every other node's blocks via that node, every address another node borrowed
/// via the borrower, the ToR's prefixes via the ToR, and (tern nodes) a blackhole for
/// each own block. Nodes on different subnets are not expected to reach each other.
pub fn missing_routes(
    spec: &LabSpec,
    nodes: &[NodePlan],
    me: &NodePlan,
    routes: &Routes,
) -> Vec<String> {
    let mut want: Vec<(String, String)> = Vec::new();
    for m in nodes
        .iter()
        .filter(|m| m.index != me.index && m.far == me.far)
    {
        want.push((m.block_v4.clone(), m.v4.clone()));
        if let (Some(b), Some(v6), Some(_)) = (&m.block_v6, &m.v6, &me.v6) {
            want.push((b.clone(), v6.clone()));
        }
        for p in m.pods.iter().filter(|p| p.borrowed()) {
            want.push((p.v4.clone(), m.v4.clone()));
            if let (Some(a), Some(v6)) = (&p.v6, &m.v6) {
                want.push((a.clone(), v6.clone()));
            }
        }
    }
    if spec.tor.is_some() && !me.far {
        want.push((plan::TOR_PREFIX_V4.into(), plan::TOR_V4.into()));
        if me.v6.is_some() {
            want.push((plan::TOR_PREFIX_V6.into(), plan::TOR_V6.into()));
        }
    }
    // BIRD installs IPv6 routes learned over a direct eBGP session via the peer's
    // link-local address (sent alongside the global one); that is the same router.
    let link_local_ok = |dst: &str| {
        me.kind == NodeKind::CalicoBird
            && routes
                .by_dst
                .get(dst)
                .is_some_and(|r| r.gateways.iter().any(|g| g.starts_with("fe80:")))
    };
    let mut missing: Vec<String> = want
        .into_iter()
        .filter(|(dst, gw)| !(routes.via(dst, gw) || dst.contains(':') && link_local_ok(dst)))
        .map(|(dst, gw)| match routes.by_dst.get(&dst) {
            Some(r) => format!("{dst} via {:?}, want via {gw}", r.gateways),
            None => format!("no route to {dst} (want via {gw})"),
        })
        .collect();
    if me.kind == NodeKind::Tern {
        for b in std::iter::once(&me.block_v4).chain(me.block_v6.iter()) {
            if !routes.blackhole(b) {
                missing.push(format!("no blackhole for its own block {b}"));
            }
        }
    }
    missing
}

/// Whether a ping from `from` (a pod's namespace) to `to` gets an answer.
pub fn ping(from_ns: &str, to: &str) -> bool {
    run(
        "ip",
        &[
            "netns", "exec", from_ns, "ping", "-c", "1", "-W", "2", "-q", to,
        ],
    )
    .is_ok()
}

/// The result of pinging every pod from every other pod.
#[derive(Debug, Clone)]
pub struct Matrix {
    /// Pod names, row and column order.
    pub pods: Vec<String>,
    /// `ok[family][from][to]` (family 0: IPv4, 1: IPv6); None on the diagonal.
    pub ok: Vec<Vec<Vec<Option<bool>>>>,
}

impl Matrix {
    /// Pings sent.
    pub fn sent(&self) -> usize {
        self.cells().count()
    }

    /// Pings that got no answer, as `from -> to (IPvN)`.
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (f, rows) in self.ok.iter().enumerate() {
            for (i, row) in rows.iter().enumerate() {
                for (j, c) in row.iter().enumerate() {
                    if *c == Some(false) {
                        out.push(format!(
                            "{} -> {} (IPv{})",
                            self.pods.get(i).map_or("?", String::as_str),
                            self.pods.get(j).map_or("?", String::as_str),
                            if f == 0 { 4 } else { 6 }
                        ));
                    }
                }
            }
        }
        out
    }

    fn cells(&self) -> impl Iterator<Item = bool> + '_ {
        self.ok.iter().flatten().flatten().filter_map(|c| *c)
    }

    /// The matrix as text: one table per family, rows are sources, columns
    /// destinations (numbered as the legend says), `✓` answered, `✗` no answer.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (i, p) in self.pods.iter().enumerate() {
            let _ = writeln!(s, "  {:>2}  {p}", i + 1);
        }
        for (f, rows) in self.ok.iter().enumerate() {
            let _ = write!(s, "\nIPv{} from\\to", if f == 0 { 4 } else { 6 });
            for j in 0..self.pods.len() {
                let _ = write!(s, "{:>3}", j + 1);
            }
            s.push('\n');
            for (i, row) in rows.iter().enumerate() {
                let _ = write!(s, "{:>11}", i + 1);
                for c in row {
                    let mark = match c {
                        None => "·",
                        Some(true) => "✓",
                        Some(false) => "✗",
                    };
                    let _ = write!(s, "{mark:>3}");
                }
                s.push('\n');
            }
        }
        let failed = self.failures().len();
        let _ = writeln!(
            s,
            "\n{} pings, {} answered, {failed} unanswered",
            self.sent(),
            self.sent() - failed
        );
        s
    }
}

/// Pings every pod from every other pod, a few at a time.
pub fn ping_matrix(pods: &[PodPlan], ipv6: bool) -> Result<Matrix> {
    let n = pods.len();
    let families = if ipv6 { 2 } else { 1 };
    let mut jobs = Vec::new();
    for f in 0..families {
        for (i, a) in pods.iter().enumerate() {
            for (j, b) in pods.iter().enumerate() {
                let to = if f == 0 { Some(&b.v4) } else { b.v6.as_ref() };
                if let (true, Some(to)) = (i != j, to) {
                    jobs.push((f, i, j, a.ns.clone(), to.clone()));
                }
            }
        }
    }
    let ok = Mutex::new(vec![vec![vec![None; n]; n]; families]);
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some((f, i, j, from, to)) = jobs.get(k) else {
                    break;
                };
                let answered = ping(from, to);
                if let Ok(mut m) = ok.lock() {
                    if let Some(c) = m
                        .get_mut(*f)
                        .and_then(|r| r.get_mut(*i))
                        .and_then(|r| r.get_mut(*j))
                    {
                        *c = Some(answered);
                    }
                }
            });
        }
    });
    Ok(Matrix {
        pods: pods
            .iter()
            .map(|p| {
                let mut s = format!("{} {}", p.name, p.v4);
                if let Some(v6) = &p.v6 {
                    let _ = write!(s, " {v6}");
                }
                if p.borrowed() {
                    let _ = write!(s, " (borrowed from node-{}'s block)", p.owner);
                }
                s
            })
            .collect(),
        ok: ok.into_inner().unwrap_or_default(),
    })
}
