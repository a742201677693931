//! The FIB task on the in-memory kernel, on a paused tokio clock: the retry and
//! re-read timers run in virtual time, so nothing here sleeps in real time.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

use std::future::{ready, Future};
use std::sync::Mutex;

use futures::FutureExt;

use super::batch::{PLAN_PIECE, REFUSALS_LOGGED};
use super::*;
use crate::memory::MemoryFib;
use crate::{ApplyReport, FibError, Interface, Neighbour, NextHop, RouteKind};

/// The in-memory kernel, shared so a test can change it behind the task's back; and
/// how many times the task read its routes.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<MemoryFib>>, Arc<std::sync::atomic::AtomicUsize>);

impl Fib for Shared {
    fn apply(&mut self, changes: Vec<RouteChange>) -> impl Future<Output = ApplyReport> + Send {
        let report = self.0.lock().unwrap().apply_now(changes);
        // Answered a little later, as a kernel is: the task then works on the next
        // piece of a large batch while this one is in flight.
        async move {
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
            report
        }
    }
    fn own_routes(&mut self) -> impl Future<Output = Result<Vec<Route>, FibError>> + Send {
        self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        ready(Ok(self.0.lock().unwrap().routes().cloned().collect()))
    }
    fn interfaces(&mut self) -> impl Future<Output = Result<Vec<Interface>, FibError>> + Send {
        let mut g = self.0.lock().unwrap();
        ready(g.interfaces().now_or_never().unwrap())
    }
    fn neighbours(&mut self) -> impl Future<Output = Result<Vec<Neighbour>, FibError>> + Send {
        let mut g = self.0.lock().unwrap();
        ready(g.neighbours().now_or_never().unwrap())
    }
}

impl Backend for Shared {
    async fn resolve(&self, _addr: IpAddr) -> Result<Option<Resolution>, String> {
        Ok(None)
    }
    async fn routes_left_by(&mut self, protocol: u8) -> Result<Vec<Route>, FibError> {
        Ok(self.0.lock().unwrap().others_routes(protocol))
    }
    async fn delete_left(&mut self, routes: &[Route], protocol: u8) -> ApplyReport {
        self.0.lock().unwrap().delete_others(routes, protocol)
    }
}

/// The routes channel carries [`Routes`] as they are.
struct Identity;

impl RouteFilter for Identity {
    type News = Routes;
    fn filter(&mut self, news: Routes) -> Routes {
        news
    }
}

struct Harness {
    commands: mpsc::Sender<FibMsg>,
    routes: mpsc::Sender<Routes>,
    news: Arc<KernelNews>,
    grace: watch::Receiver<bool>,
    kernel: Shared,
}

fn start(kernel: Shared) -> Harness {
    start_after(kernel, None)
}

/// Starts the task on a node where the daemon with protocol `predecessor` ran.
fn start_after(kernel: Shared, predecessor: Option<u8>) -> Harness {
    let (commands, crx) = mpsc::channel(8);
    let (routes, rrx) = mpsc::channel(8);
    let news = Arc::new(KernelNews::default());
    let (gtx, grace) = watch::channel(true);
    tokio::spawn(run(
        kernel.clone(),
        Inputs {
            commands: crx,
            routes: rrx,
            filter: Identity,
            kernel: Arc::clone(&news),
            grace: gtx,
            predecessor,
            release_freed: || {},
        },
    ));
    Harness {
        commands,
        routes,
        news,
        grace,
        kernel,
    }
}

impl Harness {
    async fn want(&self, p: &Route) {
        let w = Routes::Want(vec![(p.prefix, Some(p.clone()))]);
        self.routes.send(w).await.unwrap();
    }
    async fn withdraw(&self, p: &Route) {
        let w = Routes::Want(vec![(p.prefix, None)]);
        self.routes.send(w).await.unwrap();
    }
    async fn report(&self) -> FibReply {
        // Route news go on their own channel: let the task take them first.
        tokio::time::sleep(Duration::from_millis(10)).await;
        let (tx, rx) = oneshot::channel();
        self.commands.send(FibMsg::Report(tx)).await.unwrap();
        rx.await.unwrap()
    }
    /// (installed, missing, unexpected) prefixes.
    async fn state(&self) -> (Vec<String>, Vec<String>, Vec<String>) {
        let r = self.report().await;
        let names = |v: &[FibRoute]| v.iter().map(|r| r.prefix.clone()).collect::<Vec<_>>();
        (names(&r.installed), names(&r.missing), names(&r.unexpected))
    }
    fn history(&self) -> Vec<RouteChange> {
        self.kernel.0.lock().unwrap().history().to_vec()
    }
}

fn blackhole(p: &str) -> Route {
    Route {
        prefix: p.parse().unwrap(),
        kind: RouteKind::Blackhole,
        metric: 0,
        table: 254,
    }
}

fn via(p: &str, gw: &str, onlink: bool) -> Route {
    Route {
        prefix: p.parse().unwrap(),
        kind: RouteKind::unicast(vec![NextHop {
            onlink,
            ..NextHop::via(gw.parse().unwrap())
        }]),
        metric: 0,
        table: 254,
    }
}

fn eth0(extra: &[(&str, u32)]) -> Vec<Interface> {
    let mut v = vec![Interface {
        index: 2,
        name: "eth0".into(),
        up: true,
        addresses: vec!["198.51.100.10/24".parse().unwrap()],
    }];
    for (name, index) in extra {
        v.push(Interface {
            index: *index,
            name: (*name).into(),
            up: true,
            addresses: vec![],
        });
    }
    v
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_restart_adopts_the_routes_it_left_without_touching_them() {
    let kernel = Shared::default();
    let left = via("198.18.1.0/26", "198.51.100.2", false);
    {
        let mut k = kernel.0.lock().unwrap();
        k.set_interfaces(eth0(&[]));
        k.preload(left.clone());
        k.preload(blackhole("198.18.0.0/26"));
    }
    let h = start(kernel);
    let (tx, rx) = oneshot::channel();
    h.commands.send(FibMsg::Adopted(tx)).await.unwrap();
    assert_eq!(rx.await.unwrap(), 2);
    h.want(&left).await;
    h.commands
        .send(FibMsg::Want(vec![(
            "198.18.0.0/26".parse().unwrap(),
            Some(blackhole("198.18.0.0/26")),
        )]))
        .await
        .unwrap();
    assert_eq!(
        h.state().await,
        (s(&["198.18.0.0/26", "198.18.1.0/26"]), vec![], vec![])
    );
    assert!(h.history().is_empty(), "{:?}", h.history());
}

#[tokio::test(start_paused = true)]
async fn the_grace_keeps_only_the_routes_found_at_start_and_ends_on_convergence() {
    let kernel = Shared::default();
    kernel.0.lock().unwrap().preload(blackhole("198.18.9.0/26"));
    let h = start(kernel);
    let new = blackhole("198.18.10.0/26");
    h.want(&new).await;
    assert_eq!(
        h.state().await,
        (s(&["198.18.10.0/26"]), vec![], s(&["198.18.9.0/26"]))
    );
    // Withdrawn during the grace: a route this run installed goes at once (a peer
    // that died and whose graceful restart ran out); the earlier run's stays.
    h.withdraw(&new).await;
    assert_eq!(h.state().await, (vec![], vec![], s(&["198.18.9.0/26"])));
    // However long the grace lasts: only convergence ends it.
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(h.state().await, (vec![], vec![], s(&["198.18.9.0/26"])));
    assert!(*h.grace.borrow());
    h.routes.send(Routes::Converged).await.unwrap();
    assert_eq!(h.state().await, (vec![], vec![], vec![]));
    assert!(!*h.grace.borrow());
}

#[tokio::test(start_paused = true)]
async fn routes_learnt_with_convergence_are_adopted_before_the_stale_ones_go() {
    let kernel = Shared::default();
    {
        let mut k = kernel.0.lock().unwrap();
        k.preload(blackhole("198.18.1.0/26"));
        k.preload(blackhole("198.18.2.0/26"));
    }
    let h = start(kernel);
    // One burst: the table again, then the end of the restart.
    h.want(&blackhole("198.18.1.0/26")).await;
    h.routes.send(Routes::Converged).await.unwrap();
    assert_eq!(h.state().await, (s(&["198.18.1.0/26"]), vec![], vec![]));
    let deleted: Vec<_> = h
        .history()
        .into_iter()
        .filter(|c| matches!(c, RouteChange::Delete { .. }))
        .map(|c| c.prefix().to_string())
        .collect();
    assert_eq!(deleted, s(&["198.18.2.0/26"]));
}

#[tokio::test(start_paused = true)]
async fn a_refused_route_is_retried_after_the_retry_time() {
    let real = std::time::Instant::now();
    let h = start(Shared::default());
    // No interface holds the gateway's subnet: the kernel refuses.
    let r = via("198.18.1.0/26", "198.51.100.2", false);
    h.want(&r).await;
    let report = h.report().await;
    assert_eq!(report.missing.len(), 1, "{report:?}");
    assert!(
        report.failures.iter().any(|f| f.contains("198.18.1.0/26")),
        "{report:?}"
    );
    let by = (report.refused_by_system, report.refused_by_tern);
    assert_eq!(by, (1, 0), "the kernel refused it: {report:?}");
    h.kernel.0.lock().unwrap().set_interfaces(eth0(&[]));
    tokio::time::sleep(RETRY / 2).await;
    assert_eq!(
        h.state().await.1,
        s(&["198.18.1.0/26"]),
        "retried too early"
    );
    tokio::time::sleep(RETRY).await;
    let report = h.report().await;
    assert_eq!(report.installed.len(), 1, "{report:?}");
    assert!(report.failures.is_empty(), "{report:?}");
    // Minutes of timers went by on the paused clock.
    assert!(real.elapsed() < RETRY, "the test slept in real time");
}

/// A kernel refusing a whole batch: every route is recorded as refused (only the
/// log lines stop after the first few).
#[tokio::test(start_paused = true)]
async fn every_route_of_a_refused_batch_is_recorded() {
    let h = start(Shared::default());
    let batch: Vec<_> = (0..3 * REFUSALS_LOGGED)
        .map(|i| {
            let r = via(&format!("198.18.3.{i}/32"), "198.51.100.2", false);
            (r.prefix, Some(r))
        })
        .collect();
    h.routes.send(Routes::Want(batch)).await.unwrap();
    let report = h.report().await;
    assert_eq!(report.missing.len(), 3 * REFUSALS_LOGGED, "{report:?}");
    assert_eq!(
        (report.refused_by_system, report.refused_by_tern),
        (3 * REFUSALS_LOGGED, 0),
        "{report:?}"
    );
}

/// A table of several pieces (planned while the previous piece is in flight): every
/// route reaches the kernel once, refusals in any piece are recorded, the counts
/// agree with a recount, and changes to it later go through the same way.
#[tokio::test(start_paused = true)]
async fn a_table_of_several_pieces_is_installed_refused_and_counted_as_one() {
    let kernel = Shared::default();
    kernel.0.lock().unwrap().set_interfaces(eth0(&[]));
    // One route found at start, as wanted later: adopted, never sent.
    let adopted = blackhole("198.19.0.0/32");
    kernel
        .0
        .lock()
        .unwrap()
        .apply_now(vec![RouteChange::Add(adopted.clone())]);
    let h = start(kernel);
    let n = 2 * PLAN_PIECE + 100;
    // Every 1000th route goes through a gateway on no link: the kernel refuses it.
    let route = |i: usize| {
        let p = format!("198.18.{}.{}/32", i / 256, i % 256);
        if i % 1000 == 999 {
            via(&p, "203.0.113.1", false)
        } else {
            blackhole(&p)
        }
    };
    let mut table: Vec<_> = (0..n).map(|i| (route(i).prefix, Some(route(i)))).collect();
    table.push((adopted.prefix, Some(adopted.clone())));
    h.routes.send(Routes::Want(table)).await.unwrap();
    let refused = n / 1000;
    let report = h.report().await;
    assert_eq!(report.installed.len(), n + 1 - refused);
    assert_eq!(report.missing.len(), refused);
    let (tx, rx) = oneshot::channel();
    h.commands.send(FibMsg::Counts(tx)).await.unwrap();
    let counts = rx.await.unwrap();
    assert_eq!(
        (counts.installed, counts.missing, counts.unexpected),
        (n + 1 - refused, refused, 0)
    );
    assert_eq!(counts.refused_by_system, refused);
    let sent = h.history();
    // The history holds what the kernel took: the route added before the start, and
    // each route once (the adopted one never, the refused ones not).
    assert_eq!(sent.len(), 1 + n - refused, "each route sent once");
    // Later: a withdrawal and a change in every piece.
    let later: Vec<_> = (0..n)
        .step_by(5000)
        .map(|i| {
            let r = route(i);
            match i % 10000 {
                0 => (r.prefix, None),
                _ => (r.prefix, Some(Route { metric: 5, ..r })),
            }
        })
        .collect();
    let (gone, moved) = (
        later.iter().filter(|(_, r)| r.is_none()).count(),
        later.len(),
    );
    h.routes.send(Routes::Want(later)).await.unwrap();
    let report = h.report().await;
    assert_eq!(report.installed.len(), n + 1 - refused - gone);
    assert!(report.unexpected.is_empty(), "{report:?}");
    assert!(
        h.history().len() > sent.len() + moved,
        "withdrawn and re-metricked"
    );
}

/// An interface or address change (the Windows watcher's Resync, a link event on
/// Linux) retries the refused routes at once, well before the retry timer.
#[tokio::test(start_paused = true)]
async fn a_refused_route_is_retried_when_interfaces_change() {
    let h = start(Shared::default());
    let r = via("198.18.1.0/26", "198.51.100.2", false);
    h.want(&r).await;
    assert_eq!(h.report().await.missing.len(), 1);
    h.kernel.0.lock().unwrap().set_interfaces(eth0(&[]));
    h.news.resync();
    tokio::time::sleep(RESYNC_GAP * 2).await;
    assert!(RESYNC_GAP * 2 < RETRY, "the retry timer would have done it");
    let report = h.report().await;
    assert_eq!(report.installed.len(), 1, "{report:?}");
    assert!(report.failures.is_empty(), "{report:?}");
}

/// A link coming up or an address added (Linux: every pod start adds a link) retries
/// the refused routes at once, without re-reading the kernel's table.
#[tokio::test(start_paused = true)]
async fn a_link_coming_up_retries_refused_routes_without_a_re_read() {
    let h = start(Shared::default());
    let r = via("198.18.1.0/26", "198.51.100.2", false);
    h.want(&r).await;
    assert_eq!(h.report().await.missing.len(), 1);
    let reads = |h: &Harness| h.kernel.1.load(std::sync::atomic::Ordering::SeqCst);
    // The report reads the kernel too: count from here.
    let before = reads(&h);
    h.kernel.0.lock().unwrap().set_interfaces(eth0(&[]));
    h.news.retry();
    tokio::time::sleep(RESYNC_GAP / 2).await;
    assert_eq!(reads(&h), before, "no re-read of the table");
    let report = h.report().await;
    assert_eq!(report.installed.len(), 1, "{report:?}");
    assert!(report.failures.is_empty(), "{report:?}");
}

#[tokio::test(start_paused = true)]
async fn an_ipip_route_waits_for_the_tunnel_device() {
    let kernel = Shared::default();
    kernel.0.lock().unwrap().set_interfaces(eth0(&[]));
    let h = start(kernel);
    h.want(&via("198.18.1.0/26", "198.51.100.2", true)).await;
    let report = h.report().await;
    assert!(
        report.failures.iter().any(|f| f.contains(TUNNEL_DEVICE)),
        "{report:?}"
    );
    let by = (report.refused_by_system, report.refused_by_tern);
    assert_eq!(by, (0, 1), "tern held it back: {report:?}");
    h.kernel
        .0
        .lock()
        .unwrap()
        .set_interfaces(eth0(&[(TUNNEL_DEVICE, 9)]));
    tokio::time::sleep(RETRY + Duration::from_secs(1)).await;
    let installed = h
        .kernel
        .0
        .lock()
        .unwrap()
        .routes()
        .cloned()
        .collect::<Vec<_>>();
    assert!(
        matches!(&installed[..], [r] if matches!(&r.kind, RouteKind::Unicast(hops) if hops[0].interface == Some(9) && hops[0].onlink)),
        "{installed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_route_the_kernel_lost_behind_our_back_comes_back() {
    let kernel = Shared::default();
    kernel.0.lock().unwrap().set_interfaces(eth0(&[]));
    let h = start(kernel);
    let r = via("198.18.1.0/26", "198.51.100.2", false);
    h.want(&r).await;
    assert_eq!(h.state().await.0, s(&["198.18.1.0/26"]));
    // `ip route del`, and the watcher's notice of it.
    let gone = h
        .kernel
        .0
        .lock()
        .unwrap()
        .apply_now(vec![RouteChange::Delete {
            prefix: r.prefix,
            table: 254,
        }]);
    assert!(gone.failed.is_empty());
    h.news.removed(r.prefix);
    tokio::time::sleep(RESYNC_GAP * 2).await;
    assert_eq!(h.state().await, (s(&["198.18.1.0/26"]), vec![], vec![]));
    let adds = h
        .history()
        .iter()
        .filter(|c| matches!(c, RouteChange::Add(_)))
        .count();
    assert_eq!(adds, 2, "{:?}", h.history());
}

#[tokio::test(start_paused = true)]
async fn another_protocols_route_in_the_way_is_refused_not_overwritten() {
    let kernel = Shared::default();
    kernel.0.lock().unwrap().set_interfaces(eth0(&[]));
    let h = start(kernel);
    let (tx, rx) = oneshot::channel();
    h.commands.send(FibMsg::Adopted(tx)).await.unwrap();
    assert_eq!(rx.await.unwrap(), 0);
    // Appears after the start, so not tern's as far as the task knows: the memory
    // kernel cannot tell protocols apart, so it stands for another protocol's route
    // with the key tern wants. An add must not replace it.
    let r = via("198.18.1.0/26", "198.51.100.2", false);
    h.kernel
        .0
        .lock()
        .unwrap()
        .preload(via("198.18.1.0/26", "198.51.100.3", false));
    h.want(&r).await;
    let report = h.report().await;
    assert!(
        report.failures.iter().any(|f| f.contains("File exists")),
        "{report:?}"
    );
    let there = h.kernel.0.lock().unwrap().route(r.prefix, 254).cloned();
    assert_eq!(there, Some(via("198.18.1.0/26", "198.51.100.3", false)));
}

/// The whole table wanted again, as the daemon does when an IP pool's encapsulation
/// or the route priority changes (the speaker's Loc-RIB replayed through the filter):
/// only the routes whose kernel form differs are changed.
#[tokio::test(start_paused = true)]
async fn the_table_wanted_again_changes_only_the_routes_that_differ() {
    let kernel = Shared::default();
    kernel
        .0
        .lock()
        .unwrap()
        .set_interfaces(eth0(&[(TUNNEL_DEVICE, 9)]));
    let (commands, crx) = mpsc::channel(8);
    let (routes, rrx) = mpsc::channel(8);
    let (gtx, _grace) = watch::channel(true);
    tokio::spawn(run(
        kernel.clone(),
        Inputs {
            commands: crx,
            routes: rrx,
            filter: Identity,
            kernel: Arc::new(KernelNews::default()),
            grace: gtx,
            predecessor: None,
            release_freed: || {},
        },
    ));
    let ipip = via("198.18.1.0/26", "198.51.100.2", true);
    let plain = via("198.18.2.0/26", "198.51.100.3", false);
    let metric = via("198.18.3.0/26", "198.51.100.4", false);
    routes
        .send(Routes::Want(vec![
            (ipip.prefix, Some(ipip.clone())),
            (plain.prefix, Some(plain.clone())),
            (metric.prefix, Some(metric.clone())),
        ]))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    // The pool of the first is no longer IPIP, the third's priority changed.
    let now_plain = via("198.18.1.0/26", "198.51.100.2", false);
    let now_300 = Route {
        metric: 300,
        ..metric.clone()
    };
    routes
        .send(Routes::Want(vec![
            (ipip.prefix, Some(now_plain.clone())),
            (plain.prefix, Some(plain.clone())),
            (metric.prefix, Some(now_300.clone())),
        ]))
        .await
        .unwrap();
    let (tx, rx) = oneshot::channel();
    commands.send(FibMsg::Installed(None, tx)).await.unwrap();
    assert_eq!(rx.await.unwrap().len(), 3);
    let k = kernel.0.lock().unwrap();
    assert_eq!(k.route(ipip.prefix, 254), Some(&now_plain));
    assert_eq!(k.route(metric.prefix, 254).map(|r| r.metric), Some(300));
    let after_first: Vec<_> = k
        .history()
        .iter()
        .skip(3)
        .map(|c| (c.verb(), c.prefix()))
        .collect();
    assert!(
        !after_first.iter().any(|(_, p)| *p == plain.prefix),
        "an unchanged route is left alone: {after_first:?}"
    );
    assert!(
        after_first.contains(&("replace", ipip.prefix)),
        "{after_first:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn birds_routes_count_as_forwarding_state_and_go_once_terns_are_in() {
    let kernel = Shared::default();
    let mut birds = via("198.18.1.0/26", "198.51.100.2", false);
    birds.metric = 32;
    let felix = via("198.18.0.5/32", "198.51.100.9", false);
    {
        let mut k = kernel.0.lock().unwrap();
        k.set_interfaces(eth0(&[]));
        k.preload_other(predecessor::BIRD, birds.clone());
        k.preload_other(predecessor::BIRD, blackhole("198.18.0.0/26"));
        k.preload_other(80, felix.clone());
    }
    let h = start_after(kernel.clone(), Some(predecessor::BIRD));
    // Found at start: the speaker announces a restart with forwarding state kept.
    let (tx, rx) = oneshot::channel();
    h.commands.send(FibMsg::Adopted(tx)).await.unwrap();
    assert_eq!(rx.await.unwrap(), 2);
    // tern's own routes go in beside BIRD's; BIRD's stay through the grace.
    h.want(&via("198.18.1.0/26", "198.51.100.2", false)).await;
    h.want(&blackhole("198.18.0.0/26")).await;
    assert_eq!(
        h.state().await,
        (s(&["198.18.0.0/26", "198.18.1.0/26"]), vec![], vec![])
    );
    assert_eq!(kernel.0.lock().unwrap().others().len(), 3);
    // The grace ends: BIRD's go, Felix's (another protocol) stays, tern's stay.
    h.routes.send(Routes::Converged).await.unwrap();
    assert_eq!(
        h.state().await,
        (s(&["198.18.0.0/26", "198.18.1.0/26"]), vec![], vec![])
    );
    assert_eq!(kernel.0.lock().unwrap().others(), &[(80, felix)]);
}

#[tokio::test(start_paused = true)]
async fn without_a_predecessor_birds_routes_are_not_touched() {
    let kernel = Shared::default();
    kernel
        .0
        .lock()
        .unwrap()
        .preload_other(predecessor::BIRD, blackhole("198.18.0.0/26"));
    let h = start(kernel.clone());
    let (tx, rx) = oneshot::channel();
    h.commands.send(FibMsg::Adopted(tx)).await.unwrap();
    assert_eq!(rx.await.unwrap(), 0);
    h.routes.send(Routes::Converged).await.unwrap();
    assert_eq!(h.state().await, (vec![], vec![], vec![]));
    assert_eq!(kernel.0.lock().unwrap().others().len(), 1);
}

/// The lab's sequence: a route through a reachable gateway is installed, then the best
/// path moves to a next hop off every connected network with another metric (an eBGP
/// path and an iBGP one get different metrics). The metric change deletes the old
/// route, the kernel refuses the new one: the route is missing and refused (retried,
/// a `route-refused` finding), not taken for installed.
#[tokio::test(start_paused = true)]
async fn a_metric_change_to_a_next_hop_the_kernel_refuses_is_a_refusal() {
    let kernel = Shared::default();
    kernel.0.lock().unwrap().set_interfaces(eth0(&[]));
    let h = start(kernel);
    let near = Route {
        metric: 100,
        ..via("198.18.102.0/24", "198.51.100.2", false)
    };
    h.want(&near).await;
    assert_eq!(h.state().await.0, s(&["198.18.102.0/24"]));
    let far = Route {
        metric: 200,
        ..via("198.18.102.0/24", "203.0.113.50", false)
    };
    h.want(&far).await;
    let report = h.report().await;
    assert_eq!(report.missing.len(), 1, "{report:?}");
    assert!(report.installed.is_empty(), "{report:?}");
    assert_eq!(report.refused_by_system, 1, "{report:?}");
    assert!(
        report
            .failures
            .iter()
            .any(|f| f.contains("198.18.102.0/24")),
        "{report:?}"
    );
    assert_eq!(h.kernel.0.lock().unwrap().route(far.prefix, 254), None);
    // Retried: the refusal stays while the kernel still refuses.
    tokio::time::sleep(RETRY * 2).await;
    assert_eq!(h.report().await.refused_by_system, 1);
}
