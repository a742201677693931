//! The FIB task: the one owner of the kernel view. It receives wanted-route changes in
//! batches, sends the kernel only what differs from what is already there (so a
//! restart adopts the routes it left behind instead of deleting and re-adding them),
//! keeps unwanted tern routes until the restart grace is over, and answers `tern fib`
//! and `tern diagnose` from the kernel's own state.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipnet::IpNet;
use tern_fib::diag::{self, Finding, NextHopFacts, PeerFacts, Resolution};
use tern_fib::reconcile::same;
use tern_fib::{FailureKind, Fib, Route, RouteChange, RouteFailure, RouteKind};
use tokio::sync::{mpsc, oneshot, Notify};

use super::convert::fib_route;
use crate::control::proto::FibReply;

/// How often routes the kernel refused are tried again (an interface or an address
/// may have come back since).
pub const RETRY: Duration = Duration::from_secs(10);
/// The IPIP tunnel device, as Calico names it. A next hop that is `onlink` with no
/// interface (from [`super::convert::kernel_route`] for a pool with ipipMode Always, or
/// CrossSubnet toward another subnet) goes out through it.
pub const TUNNEL_DEVICE: &str = "tunl0";
/// Least time between two re-reads of the kernel's routes.
const RESYNC_GAP: Duration = Duration::from_secs(1);

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
    async fn resolve(&self, addr: IpAddr) -> Option<Resolution> {
        self.route_to(addr)
    }
}

/// What the kernel watcher tells the FIB task: routes of tern's protocol that were
/// removed (most are the task's own deletions, which need nothing), and whether the
/// kernel may have changed behind its back in a way only a re-read can tell.
#[derive(Debug, Default)]
pub struct KernelNews {
    /// The FIB's netlink port id (0: unknown), so the watcher can leave out the
    /// notifications of the FIB's own changes (Linux only; on Windows IP Helper's
    /// callbacks report through `removed` and `resync`).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub own_port: std::sync::atomic::AtomicU32,
    removed: std::sync::Mutex<Vec<IpNet>>,
    full: std::sync::atomic::AtomicBool,
    notify: Notify,
}

// The Linux watcher and the Windows callbacks report news; elsewhere the FIB task just
// never hears any.
#[cfg_attr(not(any(target_os = "linux", windows)), allow(dead_code))]
impl KernelNews {
    /// A route of tern's protocol left the kernel.
    pub fn removed(&self, prefix: IpNet) {
        if let Ok(mut v) = self.removed.lock() {
            v.push(prefix);
        }
        self.notify.notify_one();
    }

    /// The kernel must be re-read (link or address change, a foreign route added,
    /// notifications lost).
    pub fn resync(&self) {
        self.full.store(true, std::sync::atomic::Ordering::SeqCst);
        self.notify.notify_one();
    }

    fn take(&self) -> (bool, Vec<IpNet>) {
        let full = self.full.swap(false, std::sync::atomic::Ordering::SeqCst);
        let removed = self
            .removed
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default();
        (full, removed)
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
    /// How many of tern's routes an earlier run left in the kernel (found at start):
    /// non-zero means we restart with our forwarding state kept.
    Adopted(oneshot::Sender<usize>),
}

struct Task<B: Backend> {
    backend: B,
    wanted: BTreeMap<IpNet, Route>,
    /// tern's routes as the kernel has them (as far as this task knows).
    kernel: BTreeMap<IpNet, Route>,
    failures: BTreeMap<IpNet, RouteFailure>,
    /// Routes found in the kernel at start (an earlier run's) and not wanted since:
    /// the only ones the restart grace protects. A route this run wanted and then
    /// withdrew goes at once, grace or not.
    adopted: BTreeSet<IpNet>,
    /// How many routes of ours were in the kernel at start.
    found_at_start: usize,
    grace: bool,
    /// Duration of the last kernel batch.
    last_apply: std::time::Duration,
    /// Index of [`TUNNEL_DEVICE`], looked up when a route needs it; forgotten on each
    /// re-read (interfaces change), so a re-created tunnel is found again.
    tunnel: Option<u32>,
}

/// Whether a wanted route goes through the tunnel (onlink, interface left open).
fn needs_tunnel(r: &Route) -> bool {
    matches!(&r.kind, RouteKind::Unicast(h) if h.iter().any(|n| n.onlink && n.interface.is_none()))
}

/// The route with its open onlink next hops put on interface `index`.
fn through(r: &Route, index: u32) -> Route {
    let mut r = r.clone();
    if let RouteKind::Unicast(hops) = &mut r.kind {
        for n in hops
            .iter_mut()
            .filter(|n| n.onlink && n.interface.is_none())
        {
            n.interface = Some(index);
        }
    }
    r
}

/// Runs the FIB task until `rx` closes. Starts by reading tern's routes from the
/// kernel; they stay until wanted again (adopted) or until [`FibMsg::EndGrace`].
/// `resync` is notified when the kernel may have changed behind its back (a link went
/// down and took routes with it, someone deleted a tern route, notifications were
/// lost): it re-reads tern's routes and puts back what is missing, at most once a
/// second. Routes the kernel refused are retried every [`RETRY`].
pub async fn run<B: Backend>(
    mut backend: B,
    mut rx: mpsc::Receiver<FibMsg>,
    news: Arc<KernelNews>,
) {
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
        adopted: kernel.keys().copied().collect(),
        found_at_start: kernel.len(),
        kernel,
        failures: BTreeMap::new(),
        grace: true,
        last_apply: std::time::Duration::ZERO,
        tunnel: None,
    };
    // A message taken off the queue while coalescing that was not a route batch: it
    // is handled next, in order, never dropped.
    let mut pending: Option<FibMsg> = None;
    let mut retry = tokio::time::interval(RETRY);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last_resync = Instant::now() - RESYNC_GAP;
    let mut resync_due: Option<Instant> = None;
    loop {
        let msg = match pending.take() {
            Some(m) => m,
            None => tokio::select! {
                m = rx.recv() => match m {
                    Some(m) => m,
                    None => break,
                },
                () = news.notify.notified() => {
                    // Our own deletions come back as removals: only a removed route
                    // we still count as installed means someone else took it. A burst
                    // of such news makes one re-read, at most one a second, and route
                    // batches keep flowing meanwhile.
                    let (full, removed) = news.take();
                    let ours = removed.iter().filter(|p| t.kernel.contains_key(p)).count();
                    if full || ours > 0 {
                        tracing::debug!(full, removed = removed.len(), ours, "kernel re-read due");
                        resync_due.get_or_insert_with(|| (last_resync + RESYNC_GAP).max(Instant::now()));
                    }
                    continue;
                }
                () = async {
                    match resync_due {
                        Some(at) => tokio::time::sleep_until(at.into()).await,
                        None => std::future::pending().await,
                    }
                } => {
                    resync_due = None;
                    let t0 = Instant::now();
                    t.resync().await;
                    // A re-read of a million routes takes seconds: space them so
                    // they never take more than a fifth of the time.
                    last_resync = Instant::now() + (t0.elapsed() * 4).saturating_sub(RESYNC_GAP);
                    continue;
                }
                _ = retry.tick(), if !t.failures.is_empty() => {
                    let failed: Vec<IpNet> = t.failures.keys().copied().collect();
                    t.sync(&failed).await;
                    continue;
                }
            },
        };
        match msg {
            FibMsg::Want(mut batch) => {
                // Coalesce the route batches queued behind this one into one pass.
                while let Ok(next) = rx.try_recv() {
                    match next {
                        FibMsg::Want(more) => batch.extend(more),
                        other => {
                            pending = Some(other);
                            break;
                        }
                    }
                }
                let mut touched = BTreeSet::new();
                for (p, r) in batch {
                    match r {
                        Some(r) => {
                            t.adopted.remove(&p);
                            t.wanted.insert(p, r)
                        }
                        None => t.wanted.remove(&p),
                    };
                    touched.insert(p);
                }
                // One kernel batch for the whole lot (the backend pipelines it).
                let touched: Vec<IpNet> = touched.into_iter().collect();
                t.sync(&touched).await;
            }
            FibMsg::EndGrace => {
                t.grace = false;
                t.adopted.clear();
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
            FibMsg::Adopted(reply) => {
                let _ = reply.send(t.found_at_start);
            }
            FibMsg::Installed(reply) => {
                let _ = reply.send(
                    t.kernel
                        .iter()
                        .filter(|(p, r)| t.wanted.get(p).is_some_and(|w| same(w, r)))
                        .map(|(p, _)| *p)
                        .collect(),
                );
            }
        }
    }
}

impl<B: Backend> Task<B> {
    /// Finds the tunnel device when a route among `prefixes` needs it and it is not
    /// known yet.
    async fn find_tunnel(&mut self, prefixes: &[IpNet]) {
        let needed = prefixes
            .iter()
            .any(|p| self.wanted.get(p).is_some_and(needs_tunnel));
        if self.tunnel.is_some() || !needed {
            return;
        }
        self.tunnel = match self.backend.interfaces().await {
            Ok(ifs) => ifs
                .iter()
                .find(|i| i.name == TUNNEL_DEVICE)
                .map(|i| i.index),
            Err(e) => {
                tracing::warn!("cannot list interfaces to find {TUNNEL_DEVICE}: {e}");
                None
            }
        };
    }

    /// Records a refusal, logging it once (and again only if the reason changes):
    /// refused routes are retried every [`RETRY`].
    fn refused(&mut self, f: RouteFailure) {
        if self.failures.get(&f.prefix).map(|old| &old.reason) != Some(&f.reason) {
            tracing::warn!(prefix = %f.prefix, "the kernel refused to {} the route: {}", f.change, f.reason);
        }
        self.failures.insert(f.prefix, f);
    }

    /// Brings the kernel in line with `wanted` for `prefixes`.
    async fn sync(&mut self, prefixes: &[IpNet]) {
        self.find_tunnel(prefixes).await;
        let mut changes = Vec::new();
        let mut no_tunnel = Vec::new();
        for p in prefixes {
            let resolved = match (self.wanted.get(p), self.tunnel) {
                (Some(w), Some(i)) if needs_tunnel(w) => Some(through(w, i)),
                (Some(w), None) if needs_tunnel(w) => {
                    no_tunnel.push(*p);
                    continue;
                }
                (w, _) => w.cloned(),
            };
            match (resolved, self.kernel.get(p)) {
                (Some(w), Some(k)) if same(&w, k) => {}
                (Some(w), Some(_)) => changes.push(RouteChange::Replace(w)),
                // Not ours in the kernel yet: add without replacing, so a route of
                // another protocol with the same key (a connected subnet, an admin's
                // static route) is refused by the kernel (EEXIST, reported) rather
                // than overwritten.
                (Some(w), None) => changes.push(RouteChange::Add(w)),
                (None, Some(k)) if !self.grace || !self.adopted.contains(p) => {
                    changes.push(RouteChange::Delete {
                        prefix: *p,
                        table: k.table,
                    })
                }
                // Neither wanted nor in the kernel: an old refusal no longer matters.
                (None, None) => {
                    self.failures.remove(p);
                }
                _ => {}
            }
        }
        for prefix in no_tunnel {
            self.refused(RouteFailure {
                prefix,
                change: "add",
                kind: FailureKind::Other,
                reason: format!(
                    "no {TUNNEL_DEVICE} device, and the IP pool asks for IPIP (load the ipip module; calico-node creates {TUNNEL_DEVICE})"
                ),
            });
        }
        if changes.is_empty() {
            return;
        }
        let t0 = std::time::Instant::now();
        let n = changes.len();
        let report = self.backend.apply(changes.clone()).await;
        self.last_apply = t0.elapsed();
        tracing::debug!(
            changes = n,
            seconds = self.last_apply.as_secs_f64(),
            "kernel batch applied"
        );
        let failed: BTreeMap<IpNet, RouteFailure> =
            report.failed.into_iter().map(|f| (f.prefix, f)).collect();
        for c in changes {
            let p = c.prefix();
            // A delete the kernel answers with ESRCH found nothing to delete: the
            // route is gone already (replaced by another protocol's, or removed).
            let already_gone = matches!(c, RouteChange::Delete { .. })
                && failed
                    .get(&p)
                    .is_some_and(|f| f.kind == FailureKind::NotFound);
            if let (Some(f), false) = (failed.get(&p), already_gone) {
                self.refused(f.clone());
                continue;
            }
            if self.failures.contains_key(&p) {
                tracing::info!(prefix = %p, "the kernel accepted the route it refused before");
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

    /// Re-reads tern's routes from the kernel and brings it back in line.
    async fn resync(&mut self) {
        // Interfaces may have changed too: look the tunnel up again when needed.
        self.tunnel = None;
        let fresh: BTreeMap<IpNet, Route> = match self.backend.own_routes().await {
            Ok(r) => r.into_iter().map(|r| (r.prefix, r)).collect(),
            Err(e) => {
                tracing::warn!("cannot re-read tern's routes from the kernel: {e}");
                return;
            }
        };
        let lost = self
            .wanted
            .keys()
            .filter(|p| self.kernel.contains_key(p) && !fresh.contains_key(p))
            .count();
        if lost > 0 {
            tracing::warn!(
                routes = lost,
                "tern routes vanished from the kernel (a link went down, or someone removed them); putting them back"
            );
        }
        // Entries the kernel confirms stay as they are; only differences are taken
        // from the dump, which is then dropped whole: keeping a million freshly
        // parsed routes scattered among the parser's freed buffers kept the resident
        // size 30 MB higher after one re-read of 100,000 routes.
        self.kernel
            .retain(|p, r| fresh.get(p).is_some_and(|f| same(r, f)));
        for (p, f) in fresh {
            self.kernel.entry(p).or_insert(f);
        }
        let all: Vec<IpNet> = self
            .wanted
            .keys()
            .chain(self.kernel.keys())
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        self.sync(&all).await;
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

#[cfg(test)]
mod tests {
    use super::*;
    use tern_fib::memory::MemoryFib;

    fn blackhole(p: &str) -> Route {
        Route {
            prefix: p.parse().unwrap_or_else(|e| panic!("{e}")),
            kind: RouteKind::Blackhole,
            metric: 0,
            table: 254,
        }
    }

    async fn report(tx: &mpsc::Sender<FibMsg>) -> (Vec<String>, Vec<String>) {
        let (rtx, rrx) = oneshot::channel();
        tx.send(FibMsg::Report(rtx))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let r = rrx.await.unwrap_or_else(|e| panic!("{e}"));
        let names = |v: &[crate::control::proto::FibRoute]| {
            v.iter().map(|r| r.prefix.to_string()).collect::<Vec<_>>()
        };
        (names(&r.installed), names(&r.unexpected))
    }

    #[tokio::test]
    async fn grace_keeps_only_an_earlier_runs_routes() {
        let mut fib = MemoryFib::default();
        fib.preload(blackhole("198.18.9.0/26"));
        let (tx, rx) = mpsc::channel(8);
        let task = tokio::spawn(run(fib, rx, Arc::new(KernelNews::default())));
        let new = blackhole("198.18.10.0/26");
        tx.send(FibMsg::Want(vec![(new.prefix, Some(new.clone()))]))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            report(&tx).await,
            (vec!["198.18.10.0/26".into()], vec!["198.18.9.0/26".into()])
        );
        // Withdrawn during the grace: a route this run installed goes at once (a peer
        // that died and whose graceful restart ran out); the earlier run's stays.
        tx.send(FibMsg::Want(vec![(new.prefix, None)]))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(report(&tx).await, (vec![], vec!["198.18.9.0/26".into()]));
        tx.send(FibMsg::EndGrace)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(report(&tx).await, (vec![], vec![]));
        drop(tx);
        task.await.unwrap_or_else(|e| panic!("{e}"));
    }
}
