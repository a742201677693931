//! The FIB task: the one owner of the kernel view. It receives wanted-route changes in
//! batches, sends the kernel only what differs from what is already there (so a
//! restart adopts the routes it left behind instead of deleting and re-adding them),
//! keeps unwanted tern routes until the restart grace is over, and answers `tern fib`
//! and `tern diagnose` from the kernel's own state.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;

use ipnet::IpNet;
use tern_fib::diag::{self, Finding, NextHopFacts, PeerFacts, Resolution};
use tern_fib::{Fib, Route, RouteChange, RouteFailure, RouteKind};
use tokio::sync::{mpsc, oneshot};

use super::convert::fib_route;
use crate::control::proto::FibReply;

/// A FIB backend plus the one question diagnostics ask that the trait does not.
pub trait Backend: Fib + Send + 'static {
    /// How the kernel reaches `addr` (`ip route get`), when the platform can tell.
    fn resolve(&self, addr: IpAddr) -> impl Future<Output = Option<Resolution>> + Send;
}

#[cfg(target_os = "linux")]
impl Backend for tern_fib::linux::LinuxFib {
    async fn resolve(&self, addr: IpAddr) -> Option<Resolution> {
        self.route_to(addr).await.ok().flatten()
    }
}

impl Backend for tern_fib::memory::MemoryFib {
    async fn resolve(&self, _addr: IpAddr) -> Option<Resolution> {
        None
    }
}

#[cfg(windows)]
impl Backend for tern_fib::windows::WindowsFib {
    async fn resolve(&self, _addr: IpAddr) -> Option<Resolution> {
        None
    }
}

/// What the daemon asks of the FIB task.
#[derive(Debug)]
pub enum FibMsg {
    /// Wanted routes changed: `None` means the prefix is no longer wanted.
    Want(Vec<(IpNet, Option<Route>)>),
    /// The restart grace is over: remove tern's routes that are not wanted.
    EndGrace,
    /// `tern fib`.
    Report(oneshot::Sender<FibReply>),
    /// `tern diagnose`: peers to check.
    Diagnose(Vec<PeerFacts>, oneshot::Sender<Vec<Finding>>),
    /// Prefixes installed, for `tern routes`.
    Installed(oneshot::Sender<Vec<IpNet>>),
}

struct Task<B: Backend> {
    backend: B,
    wanted: BTreeMap<IpNet, Route>,
    /// tern's routes as the kernel has them (as far as this task knows).
    kernel: BTreeMap<IpNet, Route>,
    failures: BTreeMap<IpNet, RouteFailure>,
    grace: bool,
    /// Duration of the last kernel batch.
    last_apply: std::time::Duration,
}

/// Runs the FIB task until `rx` closes. Starts by reading tern's routes from the
/// kernel; they stay until wanted again (adopted) or until [`FibMsg::EndGrace`].
pub async fn run<B: Backend>(mut backend: B, mut rx: mpsc::Receiver<FibMsg>) {
    let kernel = match backend.own_routes().await {
        Ok(r) => {
            if !r.is_empty() {
                tracing::info!(
                    routes = r.len(),
                    "found tern routes in the kernel from an earlier run; keeping them while peers reconverge"
                );
            }
            r.into_iter().map(|r| (r.prefix, r)).collect()
        }
        Err(e) => {
            tracing::error!("cannot read tern's routes from the kernel: {e}");
            BTreeMap::new()
        }
    };
    let mut t = Task {
        backend,
        wanted: BTreeMap::new(),
        kernel,
        failures: BTreeMap::new(),
        grace: true,
        last_apply: std::time::Duration::ZERO,
    };
    while let Some(msg) = rx.recv().await {
        match msg {
            FibMsg::Want(mut batch) => {
                // Coalesce whatever else is queued into one kernel batch.
                while let Ok(FibMsg::Want(more)) = rx.try_recv() {
                    batch.extend(more);
                }
                for (p, r) in batch {
                    match r {
                        Some(r) => t.wanted.insert(p, r),
                        None => t.wanted.remove(&p),
                    };
                    t.sync(&[p]).await;
                }
            }
            FibMsg::EndGrace => {
                t.grace = false;
                let stale: Vec<IpNet> = t
                    .kernel
                    .keys()
                    .filter(|p| !t.wanted.contains_key(p))
                    .copied()
                    .collect();
                if !stale.is_empty() {
                    tracing::info!(
                        routes = stale.len(),
                        "restart grace over: removing tern routes no longer wanted"
                    );
                }
                t.sync(&stale).await;
            }
            FibMsg::Report(reply) => {
                let _ = reply.send(t.report().await);
            }
            FibMsg::Diagnose(peers, reply) => {
                let _ = reply.send(t.diagnose(&peers).await);
            }
            FibMsg::Installed(reply) => {
                let _ = reply.send(
                    t.kernel
                        .iter()
                        .filter(|(p, r)| t.wanted.get(p) == Some(r))
                        .map(|(p, _)| *p)
                        .collect(),
                );
            }
        }
    }
}

impl<B: Backend> Task<B> {
    /// Brings the kernel in line with `wanted` for `prefixes`.
    async fn sync(&mut self, prefixes: &[IpNet]) {
        let mut changes = Vec::new();
        for p in prefixes {
            match (self.wanted.get(p), self.kernel.get(p)) {
                (Some(w), Some(k)) if same(w, k) => {}
                (Some(w), _) => changes.push(RouteChange::Replace(w.clone())),
                (None, Some(k)) if !self.grace => changes.push(RouteChange::Delete {
                    prefix: *p,
                    table: k.table,
                }),
                _ => {}
            }
        }
        if changes.is_empty() {
            return;
        }
        let t0 = std::time::Instant::now();
        let report = self.backend.apply(changes.clone()).await;
        self.last_apply = t0.elapsed();
        let failed: BTreeMap<IpNet, RouteFailure> =
            report.failed.into_iter().map(|f| (f.prefix, f)).collect();
        for c in changes {
            let p = c.prefix();
            if let Some(f) = failed.get(&p) {
                tracing::warn!(prefix = %p, "the kernel refused to {} the route: {}", f.change, f.reason);
                self.failures.insert(p, f.clone());
                continue;
            }
            self.failures.remove(&p);
            match c {
                RouteChange::Add(r) | RouteChange::Replace(r) => {
                    self.kernel.insert(p, r);
                }
                RouteChange::Delete { .. } => {
                    self.kernel.remove(&p);
                }
            }
        }
    }

    async fn report(&mut self) -> FibReply {
        let kernel: BTreeMap<IpNet, Route> = match self.backend.own_routes().await {
            Ok(r) => r.into_iter().map(|r| (r.prefix, r)).collect(),
            Err(e) => {
                return FibReply {
                    failures: vec![format!("cannot read the kernel's routes: {e}")],
                    ..FibReply::default()
                }
            }
        };
        let mut out = FibReply::default();
        for (p, w) in &self.wanted {
            match kernel.get(p) {
                Some(k) if same(w, k) => out.installed.push(fib_route(k)),
                _ => out.missing.push(fib_route(w)),
            }
        }
        for (p, k) in &kernel {
            if !self.wanted.contains_key(p) {
                out.unexpected.push(fib_route(k));
            }
        }
        out.failures = self.failures.values().map(|f| f.to_string()).collect();
        out.last_apply_seconds = self.last_apply.as_secs_f64();
        out
    }

    async fn diagnose(&mut self, peers: &[PeerFacts]) -> Vec<Finding> {
        let interfaces = self.backend.interfaces().await.unwrap_or_default();
        let neighbours = self.backend.neighbours().await.unwrap_or_default();
        let mut per_hop: BTreeMap<IpAddr, (IpNet, usize)> = BTreeMap::new();
        for (p, r) in &self.wanted {
            if let RouteKind::Unicast(hops) = &r.kind {
                for h in hops.iter().filter_map(|h| h.gateway) {
                    per_hop.entry(h).or_insert((*p, 0)).1 += 1;
                }
            }
        }
        let mut hops = Vec::new();
        for (address, (example_prefix, prefixes)) in per_hop {
            hops.push(NextHopFacts {
                address,
                example_prefix,
                prefixes,
                resolution: self.backend.resolve(address).await,
            });
        }
        let failures: Vec<RouteFailure> = self.failures.values().cloned().collect();
        let mut findings = diag::layer2(peers, &interfaces);
        findings.extend(diag::next_hops(&hops, &interfaces, &neighbours));
        findings.extend(diag::refused(&failures));
        findings
    }
}

/// Same forwarding: ECMP members in any order, and an interface the kernel filled in
/// itself (tern gave only the gateway) does not count as a difference — otherwise every
/// restart would rewrite every route.
fn same(want: &Route, have: &Route) -> bool {
    if want.prefix != have.prefix || want.metric != have.metric || want.table != have.table {
        return false;
    }
    match (&want.kind, &have.kind) {
        (RouteKind::Unicast(w), RouteKind::Unicast(h)) => {
            let key = |n: &tern_fib::NextHop, keep_if: bool| {
                (
                    n.gateway,
                    if keep_if { n.interface } else { None },
                    n.onlink,
                    n.weight,
                )
            };
            let any_if = w.iter().any(|n| n.interface.is_some());
            let mut a: Vec<_> = w.iter().map(|n| key(n, any_if)).collect();
            let mut b: Vec<_> = h.iter().map(|n| key(n, any_if)).collect();
            a.sort();
            b.sort();
            a == b
        }
        (a, b) => a == b,
    }
}
