//! The FIB task: the one owner of the kernel view. Routes reach it straight from their
//! source (the daemon: the BGP speaker's Loc-RIB news, through a [`RouteFilter`] the
//! daemon supplies), the daemon's own wants (blackholes of its blocks) and questions
//! arrive as [`FibMsg`]. It plans through [`crate::reconcile`] (adopt, grace, tunnel,
//! retry, repair), so it sends the kernel only what differs from what is already there:
//! a restart adopts the routes it left behind instead of deleting and re-adding them.
//!
//! One grace clock: tern routes found in the kernel at start and not wanted since stay
//! until the source says its table is complete ([`Routes::Converged`]; for BGP, when
//! our graceful restart is over). The task publishes whether that grace still runs.

mod batch;
mod counts;
mod intake;
mod news;
pub mod predecessor;
pub mod report;
mod table;
#[cfg(test)]
mod tests;
mod wanted;

pub use counts::{ApplyDurations, FibCounts, APPLY_BUCKETS};
pub use news::KernelNews;
pub use report::{FibReply, FibRoute};

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use table::Table;

use crate::diag::{Finding, PeerFacts, Resolution};
use crate::reconcile::{self, repair, tunnel, Refusals, TUNNEL_DEVICE};
use crate::{ApplyReport, Fib, FibError, Route, RouteChange};

/// How often routes the kernel refused are tried again (an interface or an address
/// may have come back since).
pub const RETRY: Duration = Duration::from_secs(10);
/// Least time between two re-reads of the kernel's routes.
const RESYNC_GAP: Duration = Duration::from_secs(1);

/// A FIB backend plus the one question diagnostics ask that [`Fib`] does not.
pub trait Backend: Fib + Send + 'static {
    /// How the kernel reaches `addr` (`ip route get`, GetBestRoute2): `Ok(None)` when
    /// it has no route, `Err` when the look-up itself failed (not an answer).
    fn resolve(
        &self,
        addr: IpAddr,
    ) -> impl Future<Output = Result<Option<Resolution>, String>> + Send;

    /// Routes another daemon left under `protocol` in tern's table: BIRD's, on a node
    /// tern took over from BIRD ([`predecessor`]). Only Linux has them.
    fn routes_left_by(
        &mut self,
        _protocol: u8,
    ) -> impl Future<Output = Result<Vec<Route>, FibError>> + Send {
        std::future::ready(Ok(Vec::new()))
    }

    /// Deletes routes [`Backend::routes_left_by`] found.
    fn delete_left(
        &mut self,
        _routes: &[Route],
        _protocol: u8,
    ) -> impl Future<Output = ApplyReport> + Send {
        std::future::ready(ApplyReport::default())
    }
}

#[cfg(target_os = "linux")]
impl Backend for crate::linux::LinuxFib {
    async fn resolve(&self, addr: IpAddr) -> Result<Option<Resolution>, String> {
        self.route_to(addr).await.map_err(|e| e.to_string())
    }

    async fn routes_left_by(&mut self, protocol: u8) -> Result<Vec<Route>, FibError> {
        self.routes_of(protocol).await
    }

    async fn delete_left(&mut self, routes: &[Route], protocol: u8) -> ApplyReport {
        self.apply_as(predecessor::deletes(routes), protocol).await
    }
}

impl Backend for crate::memory::MemoryFib {
    async fn resolve(&self, _addr: IpAddr) -> Result<Option<Resolution>, String> {
        Ok(None)
    }

    async fn routes_left_by(&mut self, protocol: u8) -> Result<Vec<Route>, FibError> {
        Ok(self.others_routes(protocol))
    }

    async fn delete_left(&mut self, routes: &[Route], protocol: u8) -> ApplyReport {
        self.delete_others(routes, protocol)
    }
}

#[cfg(windows)]
impl Backend for crate::windows::WindowsFib {
    async fn resolve(&self, addr: IpAddr) -> Result<Option<Resolution>, String> {
        self.route_to(addr)
    }
}

/// What the route source's news means to the FIB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routes {
    /// Wanted routes changed: `None` means the prefix is no longer wanted.
    Want(Vec<(IpNet, Option<Route>)>),
    /// The source's table is complete: the restart grace is over. The task keeps no
    /// timer of its own: the source bounds the wait (the speaker's selection deferral
    /// timer, at most 30 s), and a second clock would only remove routes a slow
    /// restart is about to re-learn.
    Converged,
}

/// Turns the route source's news into [`Routes`]; called by the FIB task for each
/// message, so routes never wait on another task. The daemon's leaves out its own
/// prefixes and converts BGP paths with the current encapsulation.
pub trait RouteFilter: Send + 'static {
    /// The source's messages.
    type News: Send + 'static;
    /// The news as wanted routes (or the end of the grace).
    fn filter(&mut self, news: Self::News) -> Routes;
}

/// What the daemon asks of the FIB task.
#[derive(Debug)]
pub enum FibMsg {
    /// Wanted routes changed: `None` means the prefix is no longer wanted.
    Want(Vec<(IpNet, Option<Route>)>),
    /// `tern fib`.
    Report(oneshot::Sender<FibReply>),
    /// `tern diagnose`: peers to check.
    Diagnose(Vec<PeerFacts>, oneshot::Sender<Vec<Finding>>),
    /// The metrics' counts, kept as routes change: a scrape never walks the table.
    Counts(oneshot::Sender<FibCounts>),
    /// Prefixes installed (only of these, if given), for `tern routes`.
    Installed(Option<Vec<IpNet>>, oneshot::Sender<Vec<IpNet>>),
    /// How many of tern's routes an earlier run left in the kernel (found at start),
    /// and of BIRD's when taking over from it ([`predecessor`]): non-zero means we
    /// restart with our forwarding state kept.
    Adopted(oneshot::Sender<usize>),
}

/// The FIB task's inputs.
pub struct Inputs<F: RouteFilter> {
    /// The daemon's messages; the task ends when this closes.
    pub commands: mpsc::Receiver<FibMsg>,
    /// The route source's news (it may start later, or stop: then only commands come).
    pub routes: mpsc::Receiver<F::News>,
    /// Turns `routes` into wanted routes.
    pub filter: F,
    /// What the kernel did behind the task's back.
    pub kernel: Arc<KernelNews>,
    /// Set to false when the restart grace ends (`tern status`, readiness).
    pub grace: watch::Sender<bool>,
    /// The protocol of the routing daemon tern replaces on this node (BIRD's 12), whose
    /// routes left in tern's table count as forwarding state kept and are removed
    /// when the grace ends; see [`predecessor`].
    pub predecessor: Option<u8>,
    /// Gives freed heap pages back to the system; called once at least [`TRIM_AFTER`]
    /// changes went to the kernel since the last call and no route news waits (their
    /// transient copies, the plan and the backend's messages, the allocator would
    /// otherwise keep resident), and after a re-read of at least as many routes.
    pub release_freed: fn(),
}

/// Kernel changes after which [`Inputs::release_freed`] is called: below it the
/// transient peak is small and the call (which walks the heap) is not worth it.
pub const TRIM_AFTER: usize = 10_000;

pub(crate) struct Task<B: Backend> {
    pub(crate) backend: B,
    /// The wanted routes and, against them, tern's routes as the kernel has them (as
    /// far as this task knows).
    pub(crate) table: Table,
    pub(crate) refusals: Refusals,
    /// Routes found in the kernel at start (an earlier run's) and not wanted since:
    /// the only ones the restart grace protects.
    adopted: BTreeSet<IpNet>,
    /// How many routes of ours were in the kernel at start.
    found_at_start: usize,
    grace: bool,
    /// Duration of the last kernel batch.
    pub(crate) last_apply: Duration,
    /// Routes by state and batch durations, for the metrics.
    tally: counts::Tally,
    durations: ApplyDurations,
    /// Index of [`TUNNEL_DEVICE`], looked up when a route needs it; forgotten on each
    /// re-read (interfaces change), so a re-created tunnel is found again.
    tunnel: Option<u32>,
    /// The routes the daemon tern replaces left behind, removed when the grace ends.
    left: predecessor::Left,
    /// See [`Inputs::release_freed`].
    release_freed: fn(),
    /// Changes sent to the kernel since the freed heap was last given back.
    unreleased: usize,
}

/// Runs the FIB task until the daemon's command channel closes. Starts by reading
/// tern's routes from the kernel; they stay until wanted again (adopted) or until the
/// source says [`Routes::Converged`]. When [`KernelNews`] says the kernel may have
/// changed behind its back it re-reads tern's routes and puts back what is missing, at
/// most once a second. Routes the kernel refused are retried every [`RETRY`].
pub async fn run<B: Backend, F: RouteFilter>(backend: B, inputs: Inputs<F>) {
    let Inputs {
        mut commands,
        mut routes,
        mut filter,
        kernel: news,
        grace,
        predecessor,
        release_freed,
    } = inputs;
    let mut t = Task::start(backend, predecessor).await;
    t.release_freed = release_freed;
    // A command taken off the queue while coalescing that was not a route batch: it
    // is handled next, in order, never dropped.
    let mut pending: Option<FibMsg> = None;
    let mut routes_open = true;
    let mut retry = tokio::time::interval_at(Instant::now() + RETRY, RETRY);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut resync = Resync::default();
    loop {
        let msg = match pending.take() {
            Some(m) => m,
            None => tokio::select! {
                m = commands.recv() => match m {
                    Some(m) => m,
                    None => break,
                },
                n = routes.recv(), if routes_open => {
                    match n {
                        Some(n) => t.on_routes(filter.filter(n), &mut routes, &mut filter, &grace).await,
                        None => routes_open = false,
                    }
                    continue;
                }
                () = news.notify.notified() => {
                    if resync.news(&news, &t.table) && !t.refusals.is_empty() {
                        t.sync(&t.refusals.due()).await;
                    }
                    continue;
                }
                () = resync.due() => {
                    resync.run(&mut t).await;
                    continue;
                }
                _ = retry.tick(), if !t.refusals.is_empty() => {
                    t.sync(&t.refusals.due()).await;
                    continue;
                }
            },
        };
        pending = t.command(msg, &mut commands).await;
    }
}

/// When the kernel is to be re-read: at most once a [`RESYNC_GAP`], and a re-read of a
/// huge table spaced further (see [`Resync::run`]).
struct Resync {
    last: Instant,
    due: Option<Instant>,
}

impl Default for Resync {
    fn default() -> Resync {
        Resync {
            last: Instant::now()
                .checked_sub(RESYNC_GAP)
                .unwrap_or_else(Instant::now),
            due: None,
        }
    }
}

impl Resync {
    /// Kernel news: our own deletions come back as removals, so only a removed route
    /// we still count as installed means someone else took it. A burst of such news
    /// makes one re-read, and route batches keep flowing meanwhile.
    /// Returns whether refused routes are to be tried again now (and no re-read is
    /// due, which tries them too).
    fn news(&mut self, news: &KernelNews, table: &Table) -> bool {
        let news::Taken {
            full,
            retry,
            removed,
        } = news.take();
        let ours = removed.iter().filter(|p| table.in_kernel(p)).count();
        if full || ours > 0 {
            tracing::debug!(full, removed = removed.len(), ours, "kernel re-read due");
            let at = (self.last + RESYNC_GAP).max(Instant::now());
            self.due.get_or_insert(at);
        }
        retry && self.due.is_none()
    }

    /// Ready when a re-read is due; never otherwise.
    async fn due(&self) {
        match self.due {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }

    async fn run<B: Backend>(&mut self, t: &mut Task<B>) {
        self.due = None;
        let t0 = Instant::now();
        t.resync().await;
        // A re-read of a million routes takes seconds: space them so they never take
        // more than a fifth of the time.
        self.last = Instant::now() + (t0.elapsed() * 4).saturating_sub(RESYNC_GAP);
    }
}

impl<B: Backend> Task<B> {
    /// The task's state at start: tern's routes as an earlier run left them.
    async fn start(mut backend: B, predecessor: Option<u8>) -> Task<B> {
        let table = match backend.own_routes().await {
            Ok(r) => {
                if !r.is_empty() {
                    tracing::info!(
                        routes = r.len(),
                        "found tern routes in the kernel from an earlier run; keeping them while peers reconverge"
                    );
                }
                Table::from_kernel(r)
            }
            Err(e) => {
                tracing::error!("cannot read tern's routes from the kernel: {e}");
                Table::default()
            }
        };
        let left = predecessor::Left::find(&mut backend, predecessor).await;
        let mut t = Task {
            backend,
            adopted: table.kernel_prefixes().collect(),
            found_at_start: table.kernel_len() + left.len(),
            table,
            refusals: Refusals::default(),
            grace: true,
            last_apply: Duration::ZERO,
            tally: Default::default(),
            durations: ApplyDurations::default(),
            tunnel: None,
            left,
            release_freed: || {},
            unreleased: 0,
        };
        t.recount();
        t
    }

    /// A command; returns one taken off the queue while coalescing, to handle next.
    async fn command(
        &mut self,
        msg: FibMsg,
        commands: &mut mpsc::Receiver<FibMsg>,
    ) -> Option<FibMsg> {
        match msg {
            FibMsg::Want(batch) => {
                // Coalesce the route batches queued behind this one into one pass.
                let mut touched = Vec::new();
                self.note(Routes::Want(batch), &mut touched);
                let mut next = None;
                while let Ok(m) = commands.try_recv() {
                    match m {
                        FibMsg::Want(more) => {
                            self.note(Routes::Want(more), &mut touched);
                        }
                        other => {
                            next = Some(other);
                            break;
                        }
                    }
                }
                self.sync_touched(touched).await;
                self.release_if_due(next.is_none());
                return next;
            }
            FibMsg::Report(reply) => {
                let _ = reply.send(self.report().await);
            }
            FibMsg::Diagnose(peers, reply) => {
                let _ = reply.send(self.diagnose(&peers).await);
            }
            FibMsg::Adopted(reply) => {
                let _ = reply.send(self.found_at_start);
            }
            FibMsg::Installed(only, reply) => {
                let _ = reply.send(self.installed(only.as_deref()));
            }
            FibMsg::Counts(reply) => {
                let _ = reply.send(self.counts());
            }
        }
        None
    }

    /// Finds the tunnel device when a route among `prefixes` needs it and it is not
    /// known yet.
    async fn find_tunnel(&mut self, prefixes: &[IpNet]) {
        let needed = prefixes
            .iter()
            .any(|p| self.table.want(p).is_some_and(|w| tunnel::needs_tunnel(&w)));
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

    /// Re-reads tern's routes from the kernel and brings it back in line: wanted routes
    /// it lost are put back ([`repair`]), the rest is planned as usual.
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
        let all: Vec<IpNet> = self
            .table
            .wanted_prefixes()
            .chain(self.table.kernel_prefixes())
            .chain(fresh.keys().copied())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        self.find_tunnel(&all).await;
        let mut back = Vec::new();
        let kernel = self.table.kernel_routes();
        for old in kernel.filter(|r| !fresh.contains_key(&r.prefix)) {
            let Some(want) = self.table.want(&old.prefix) else {
                continue;
            };
            if let Some(c) = tunnel::resolve(&want, self.tunnel)
                .ok()
                .and_then(|w| repair(Some(&w), &old))
            {
                back.push(c);
            }
        }
        if !back.is_empty() {
            tracing::warn!(
                routes = back.len(),
                "tern routes vanished from the kernel (a link went down, or someone removed them); putting them back"
            );
        }
        // Entries the kernel confirms stay as they are; only differences are taken
        // from the dump, which is then dropped whole: keeping a million freshly
        // parsed routes scattered among the parser's freed buffers kept the resident
        // size 30 MB higher after one re-read of 100,000 routes.
        self.table
            .kernel_retain(|p, r| fresh.get(p).is_some_and(|f| reconcile::same(r, f)));
        for (p, f) in fresh {
            if !self.table.in_kernel(&p) {
                self.table.kernel_put(f);
            }
        }
        self.recount();
        // The dump's parsed routes are freed now; the allocator would keep them.
        if self.table.kernel_len() >= TRIM_AFTER {
            (self.release_freed)();
        }
        let repaired: BTreeSet<IpNet> = back.iter().map(RouteChange::prefix).collect();
        let rest: Vec<IpNet> = all.into_iter().filter(|p| !repaired.contains(p)).collect();
        self.apply(back).await;
        self.sync(&rest).await;
    }
}
