//! The daemon's main loop: control socket, datastore, peer state, signals, watchdog.
//! Routes do not pass through it: the speaker sends Loc-RIB changes straight to the
//! FIB task (see [`super::routes`]). The loop publishes each accepted intent for the
//! FIB task's route filter, applies intent diffs (originations, blackholes, peers),
//! records peer states for `tern status`, and mirrors the FIB task's grace flag.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ipnet::IpNet;
#[cfg(target_os = "linux")]
use tern_bfd::driver::Event as BfdEvent;
/// No BFD outside Linux (tern.yaml refuses it there).
#[cfg(not(target_os = "linux"))]
type BfdEvent = std::convert::Infallible;
use tern_bgp::speaker::{RibNews, SpeakerCommand, SpeakerEvent};
use tern_config::datastore::endpoint_status::LocalWorkload;
use tern_config::datastore::StoreEvent;
use tern_config::intent::Intent;
use tern_config::tracker::Tracker;
use tern_config::DaemonConfig;
use tokio::sync::{mpsc, watch, Notify};

use super::fib_task::{start_fib, FibHandle, FibMsg};
use super::intent::Input;
use super::routes::RibFilter;
use super::state::State;
use super::status::{notify_ready, notify_stopping, notify_watchdog, update_status};
use super::{diagnoser, handler, intent, memory, metrics, routes, start, status};
use crate::control::server::Server;

/// The main loop's own state.
struct Daemon {
    cfg: DaemonConfig,
    state: Arc<Mutex<State>>,
    fib: mpsc::Sender<FibMsg>,
    /// Whether the FIB task's restart grace still runs.
    grace: watch::Receiver<bool>,
    /// Where the speaker sends Loc-RIB news; handed to it when BGP starts.
    routes: Option<mpsc::Sender<RibNews>>,
    /// The accepted intent, for the FIB task's route filter.
    published: watch::Sender<Option<Arc<Intent>>>,
    tracker: Tracker,
    speaker: Option<mpsc::Sender<SpeakerCommand>>,
    /// The speaker for the control socket, once BGP runs.
    speaker_slot: Arc<OnceLock<mpsc::Sender<SpeakerCommand>>>,
    /// Workload routes seen in the kernel (address → interface).
    workloads: BTreeMap<IpNet, String>,
    /// Those originated as borrowed addresses.
    kernel_originated: BTreeSet<IpNet>,
    /// Each running session's intent and route policy, once BGP runs.
    policies: Option<super::policy::Policies>,
    /// The last STATUS= line.
    status: String,
    /// BGP could not start (its port taken): when to try again.
    bgp_retry: Option<Instant>,
    /// `tern monitor`'s stream, for session changes.
    monitor: super::monitor::Hub,
    /// BFD with the peers, when on.
    #[cfg(target_os = "linux")]
    bfd: Option<super::bfd::Bfd>,
}

/// Runs the daemon: starts the control socket, the datastore and the FIB task, then
/// the main loop (BGP starts with the first valid configuration).
pub async fn daemon(cfg: DaemonConfig, stop: Arc<Notify>) -> Result<(), String> {
    let server = Server::bind(&cfg.control_socket)
        .map_err(|e| {
            format!(
                "cannot create the control socket {}: {e}",
                cfg.control_socket.display()
            )
        })?
        .with_limits(crate::control::server::Limits {
            request_bytes: cfg.limits.control_request_bytes,
            requests_per_second: cfg.limits.control_requests_per_second,
        });
    let reload = Arc::new(Notify::new());
    let (store, store_name) = start::start_store(&cfg, reload.clone()).await?;
    let (published, intent_rx) = watch::channel(None);
    // Loc-RIB news are queued here until BGP starts; a full queue holds the speaker
    // back (not the main loop), so the FIB's pace is the speaker's.
    let (routes, routes_rx) = mpsc::channel(1024);
    let monitor = super::monitor::Hub::default();
    let filter =
        RibFilter::new(intent_rx, cfg.fib.table, cfg.fib.enabled).with_monitor(monitor.clone());
    let FibHandle {
        commands: fib,
        news,
        grace,
    } = start_fib(&cfg, routes_rx, filter)?;
    let state = Arc::new(Mutex::new(State::new(store_name.clone())));
    tracing::info!(node = %cfg.node, datastore = %store_name, "tern starting");

    // The control socket answers from the start, so a person can see why nothing runs
    // yet (a rejected configuration, an unreachable datastore).
    let speaker_slot = Arc::new(OnceLock::new());
    let handler = Arc::new(handler::DaemonHandler {
        state: state.clone(),
        speaker: Arc::clone(&speaker_slot),
        fib: fib.clone(),
        reload: reload.clone(),
        diagnoser: Default::default(),
        monitor: monitor.clone(),
    });
    if let Some(addr) = cfg.metrics {
        let listener = metrics::bind(addr).await?;
        tracing::info!("metrics on http://{addr}/metrics");
        tokio::spawn(metrics::serve(listener, Arc::clone(&handler)));
    }
    // BIRD-compatible sockets for calicoctl and calico-node's probes; removed when the
    // daemon stops (the guards live until `run` returns).
    #[cfg(unix)]
    let _bird_sockets = crate::birdsock::server::start_configured(
        cfg.bird_socket.as_deref(),
        cfg.bird6_socket.as_deref(),
        Arc::clone(&handler) as Arc<dyn crate::birdsock::ViewSource>,
    )?;
    // Findings re-evaluated about once a second: one list for `tern diagnose`, the
    // metrics and the log.
    tokio::spawn(diagnoser::run(Arc::clone(&handler)));
    tokio::spawn(server.run(handler));

    let (workload_rx, local_rx) = spawn_watchers(&cfg, news);

    #[cfg(target_os = "linux")]
    let (bfd, bfd_events) = super::bfd::start(&cfg.bfd, &state)?.unzip();
    #[cfg(not(target_os = "linux"))]
    let bfd_events = None;

    let tracker = Tracker::new(cfg.node.clone())
        .with_router_id(cfg.router_id)
        .with_max_document_bytes(cfg.limits.datastore_document_bytes);
    let d = Daemon {
        cfg,
        status: status::status_line(&state, false),
        state,
        fib,
        grace,
        routes: Some(routes),
        published,
        tracker,
        speaker: None,
        speaker_slot,
        workloads: BTreeMap::new(),
        kernel_originated: BTreeSet::new(),
        policies: None,
        bgp_retry: None,
        monitor,
        #[cfg(target_os = "linux")]
        bfd,
    };
    d.run((store, local_rx), workload_rx, bfd_events, reload, stop)
        .await
}

/// The watchers that feed the main loop besides the datastore: workload routes seen
/// in the kernel (Linux; the watcher also tells the FIB task what the kernel did
/// behind its back), and Felix's endpoint status files, the workloads that are this
/// node's BGP peers (`localWorkloadSelector`). Each has a channel of its own: the
/// store's closing means the store stopped.
fn spawn_watchers(
    cfg: &DaemonConfig,
    news: Arc<tern_fib::task::KernelNews>,
) -> (
    mpsc::Receiver<BTreeMap<IpNet, String>>,
    mpsc::Receiver<Vec<LocalWorkload>>,
) {
    let (wtx, workload_rx) = mpsc::channel::<BTreeMap<IpNet, String>>(8);
    #[cfg(target_os = "linux")]
    tokio::spawn(super::workloads::run(
        cfg.fib.table,
        cfg.fib.enabled.then_some(cfg.fib.route_protocol),
        news,
        wtx,
    ));
    #[cfg(not(target_os = "linux"))]
    drop((wtx, news));
    let (ltx, local_rx) = mpsc::channel::<Vec<LocalWorkload>>(4);
    tokio::spawn(tern_config::datastore::endpoint_status::run(
        cfg.endpoint_status_dir.clone(),
        tern_config::datastore::endpoint_status::POLL,
        ltx,
    ));
    (workload_rx, local_rx)
}

impl Daemon {
    /// The main loop. BGP starts with the first valid snapshot; until then it runs all
    /// the same (control socket, watchdog, SIGHUP, datastore events): a node booted
    /// with a broken configuration or an unreachable datastore stays up, says why, and
    /// starts BGP as soon as the datastore holds a valid configuration.
    async fn run(
        mut self,
        (mut store, mut local_rx): (
            mpsc::Receiver<StoreEvent>,
            mpsc::Receiver<Vec<LocalWorkload>>,
        ),
        mut workload_rx: mpsc::Receiver<BTreeMap<IpNet, String>>,
        mut bfd_events: Option<mpsc::Receiver<BfdEvent>>,
        reload: Arc<Notify>,
        stop: Arc<Notify>,
    ) -> Result<(), String> {
        let mut events: Option<mpsc::Receiver<SpeakerEvent>> = None;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut signals = Signals::new(stop)?;
        // READY=1 means "up and answering": the control socket listens and the main
        // loop runs. Whether the node is ready for traffic is `tern health --ready`;
        // holding READY back for a configuration would let systemd kill (and restart
        // in a loop) a daemon that only waits for the datastore to be fixed.
        notify_ready(&self.status);
        loop {
            tokio::select! {
                ev = next_event(&mut events) => match ev {
                    Some(ev) => {
                        self.bfd_follow(&ev);
                        on_speaker_event(ev, &self.state, &self.monitor);
                    }
                    None => return Err("the BGP speaker stopped".into()),
                },
                ev = next_event(&mut bfd_events) => match ev {
                    #[cfg(target_os = "linux")]
                    Some(ev) => super::bfd::on_event(ev, self.speaker.as_ref()).await,
                    #[cfg(not(target_os = "linux"))]
                    Some(_) => {}
                    // The driver stopped (it logged why); BGP runs on without it.
                    None => bfd_events = None,
                },
                ev = store.recv() => match ev {
                    Some(ev) => {
                        if let Some(ev) = self.on_store(Input::Store(ev)).await? {
                            events = Some(ev);
                        }
                    }
                    None => return Err("the datastore task stopped".into()),
                },
                Some(w) = local_rx.recv() => {
                    if let Some(ev) = self.on_store(Input::LocalWorkloads(w)).await? {
                        events = Some(ev);
                    }
                }
                Some(w) = workload_rx.recv() => {
                    if let (Some(i), Some(sp)) = (self.tracker.current(), &self.speaker) {
                        routes::reoriginate_borrowed(i, &self.workloads, &w, sp).await;
                    }
                    self.workloads = w;
                    self.sync_workloads().await;
                }
                Ok(()) = self.grace.changed() => {
                    let in_grace = *self.grace.borrow_and_update();
                    if let Ok(mut s) = self.state.lock() {
                        s.in_grace = in_grace;
                    }
                }
                sig = signals.next() => {
                    if sig == "SIGHUP" {
                        tracing::info!("SIGHUP: re-reading the datastore");
                        reload.notify_one();
                        continue;
                    }
                    tracing::info!("{sig}: stopping; kernel routes stay in place for the next start");
                    notify_stopping();
                    if let Some(sp) = &self.speaker {
                        let _ = sp
                            .send(SpeakerCommand::ShutdownForRestart(Some("tern is stopping".into())))
                            .await;
                        // Give the NOTIFICATIONs a moment to leave.
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    return Ok(());
                }
                _ = tick.tick() => {
                    // Fed while waiting for a configuration too: waiting is not hanging.
                    notify_watchdog();
                    match self.state.lock() {
                        Ok(mut s) => s.last_tick = Instant::now(),
                        Err(_) => return Err("the daemon's state is poisoned".into()),
                    }
                    if self.bgp_retry.is_some_and(|at| at <= Instant::now()) {
                        if let Some(ev) = self.start_bgp().await? {
                            events = Some(ev);
                        }
                    }
                    update_status(&self.state, self.speaker.is_some(), &mut self.status);
                }
            }
        }
    }

    /// A datastore event: an accepted intent is applied (BGP starts with the first);
    /// returns the speaker's events when BGP just started.
    async fn on_store(
        &mut self,
        ev: Input,
    ) -> Result<Option<mpsc::Receiver<SpeakerEvent>>, String> {
        let large = matches!(&ev, Input::Store(StoreEvent::Snapshot { documents, .. })
            if documents.len() >= memory::TRIM_AFTER_DOCUMENTS);
        let diff = intent::on_store_event(ev, &mut self.tracker, &self.state, &self.published);
        if large {
            memory::release_freed();
        }
        let mut started = None;
        if let (Some(diff), Some(i)) = (diff, self.tracker.current().cloned()) {
            match (&self.speaker, self.routes.take()) {
                (Some(sp), _) => {
                    let w = &self.workloads;
                    intent::apply_diff(&diff, &i, sp, &self.fib, &self.state, &self.cfg, w).await;
                    if let Some(p) = &mut self.policies {
                        p.apply(&i, &diff, sp).await;
                    }
                }
                (None, Some(routes)) => {
                    self.routes = Some(routes);
                    started = self.start_bgp().await?;
                }
                (None, None) => return Err("BGP cannot be started twice".into()),
            }
            self.sync_workloads().await;
        }
        update_status(&self.state, self.speaker.is_some(), &mut self.status);
        Ok(started)
    }

    /// Starts BGP with the intent in force. While its port is taken (calico-node's BIRD
    /// still runs here, mid-migration) it tries again every 2 s instead of exiting: an
    /// exit would meet the kubelet's growing back-off (up to 5 min), longer than the
    /// peers keep this node's routes under graceful restart. Meanwhile `tern status`
    /// says why and `tern health --ready` fails.
    async fn start_bgp(&mut self) -> Result<Option<mpsc::Receiver<SpeakerEvent>>, String> {
        let (Some(i), Some(routes)) = (self.tracker.current().cloned(), self.routes.take()) else {
            return Ok(None);
        };
        if self.bgp_retry.is_some() {
            // The last attempt's "port in use"; set again below if it still is.
            if let Ok(mut s) = self.state.lock() {
                s.config_error = None;
                s.bgp_blocked = None;
            }
        }
        // Everything the intent asks for: a retry may follow several partial diffs.
        let all = tern_config::diff::IntentDiff {
            peers_added: i.peers.values().cloned().collect(),
            originated: i.originated.clone(),
            peer_routes: i
                .peer_routes()
                .into_iter()
                .map(|(n, gw)| (n, Some(gw)))
                .collect(),
            policy_changed: true,
            ..Default::default()
        };
        let w = &self.workloads;
        match start::start_bgp(
            &all,
            &i,
            &self.fib,
            routes.clone(),
            &self.state,
            &self.cfg,
            w,
        )
        .await
        {
            Ok(started) => {
                if self.bgp_retry.take().is_some() {
                    tracing::info!("BGP started: port {} is free now", i.listen.port);
                }
                let compiled = &started.policies;
                self.policies = Some(super::policy::Policies::with_compiled(&i, compiled));
                let _ = self.speaker_slot.set(started.speaker.clone());
                self.speaker = Some(started.speaker);
                Ok(Some(started.events))
            }
            Err(start::StartError::PortInUse(text)) => {
                if self.bgp_retry.is_none() {
                    tracing::warn!(
                        "{text}: another BGP daemon (calico-node's BIRD?) still runs on this node; trying again every 2 s, not ready meanwhile"
                    );
                }
                if let Ok(mut s) = self.state.lock() {
                    let why = format!("{text} (trying again every 2 s)");
                    s.config_error = Some(why.clone());
                    s.bgp_blocked = Some(why);
                }
                self.routes = Some(routes);
                self.bgp_retry = Some(Instant::now() + Duration::from_secs(2));
                Ok(None)
            }
            Err(start::StartError::Fatal(text)) => Err(text),
        }
    }

    /// BFD follows the BGP sessions: it starts with a session that comes up and stops
    /// with one that goes down.
    fn bfd_follow(&self, ev: &SpeakerEvent) {
        #[cfg(target_os = "linux")]
        if let Some(bfd) = &self.bfd {
            match ev {
                SpeakerEvent::PeerUp(addr, _) => {
                    let ip = addr.ip();
                    bfd.peer_up(ip, self.tracker.current().and_then(|i| i.peers.get(&ip)));
                }
                SpeakerEvent::PeerDown(addr, _) => bfd.peer_down(addr.ip()),
                _ => {}
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = ev;
    }

    /// Originates the borrowed workload addresses, once BGP runs.
    async fn sync_workloads(&mut self) {
        if let (Some(i), Some(sp)) = (self.tracker.current(), &self.speaker) {
            intent::sync_workloads(
                i,
                &self.workloads,
                &mut self.kernel_originated,
                sp,
                &self.state,
            )
            .await;
        }
    }
}

/// The signals that stop the daemon or make it re-read the datastore.
struct Signals {
    stop: Arc<Notify>,
    #[cfg(unix)]
    hup: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn new(stop: Arc<Notify>) -> Result<Signals, String> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Signals {
                stop,
                hup: signal(SignalKind::hangup())
                    .map_err(|e| format!("cannot watch SIGHUP: {e}"))?,
                term: signal(SignalKind::terminate())
                    .map_err(|e| format!("cannot watch SIGTERM: {e}"))?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals { stop })
    }

    /// The next signal's name (or the service manager's stop request).
    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "SIGINT",
                _ = self.hup.recv() => "SIGHUP",
                _ = self.stop.notified() => "stop request",
            }
        }
        #[cfg(not(unix))]
        {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => "Ctrl-C",
                _ = self.stop.notified() => "service stop",
            }
        }
    }
}

/// The next event of a channel that may not be there yet (the speaker's before BGP
/// starts, BFD's when it is off); never ready without one.
async fn next_event<T>(events: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match events {
        Some(e) => e.recv().await,
        None => std::future::pending().await,
    }
}

/// Speaker events: peer states to the snapshot (logged once each). Routes are not
/// among them: they go from the speaker to the FIB task.
fn on_speaker_event(ev: SpeakerEvent, state: &Arc<Mutex<State>>, monitor: &super::monitor::Hub) {
    match &ev {
        SpeakerEvent::PeerUp(addr, _) => monitor.session(addr.ip(), || "Established".into()),
        SpeakerEvent::PeerDown(addr, why) => monitor.session(addr.ip(), || format!("down: {why}")),
        SpeakerEvent::PeerState(addr, to) => monitor.session(addr.ip(), || format!("{to:?}")),
        _ => {}
    }
    match ev {
        // Only from a speaker started without a route channel; this one has one.
        SpeakerEvent::Routes(_) => {}
        SpeakerEvent::PeerUp(addr, n) => {
            tracing::info!(peer = %addr, families = ?n.families.iter().map(|f| f.to_string()).collect::<Vec<_>>(), "BGP session established");
            if let Ok(mut s) = state.lock() {
                s.peer_up(addr.ip(), &n);
                s.troubles.session_up(addr.ip());
            }
        }
        SpeakerEvent::PeerDown(addr, why) => {
            tracing::warn!(peer = %addr, "BGP session down: {why}");
            if let Ok(mut s) = state.lock() {
                s.peer_down(addr.ip(), &why);
            }
        }
        SpeakerEvent::Rejected(addr, why) => {
            // Route policy refusing a route is routine (every ToR route kept from the
            // mesh peers); the import checks refusing one is not.
            if why.starts_with("export policy") || why.starts_with("import policy") {
                tracing::info!(peer = %addr, "route filtered: {why}");
            } else {
                tracing::warn!(peer = %addr, "route refused: {why}");
            }
        }
        SpeakerEvent::PeerState(addr, to) => {
            tracing::debug!(peer = %addr, "BGP state {to:?}");
            if let Ok(mut s) = state.lock() {
                if let Some(p) = s.peers.get_mut(&addr.ip()) {
                    p.state = format!("{to:?}");
                }
            }
        }
        SpeakerEvent::RestartComplete { peers, by_timer } => {
            // The FIB task hears the same from the speaker (RibNews::Converged) and
            // ends its grace then.
            if by_timer {
                tracing::warn!(peers, "graceful restart over: selection deferral timer ran out before every peer sent End-of-RIB; our table sent");
            } else {
                tracing::info!(
                    peers,
                    "graceful restart over: every peer sent End-of-RIB; our table sent"
                );
            }
        }
        SpeakerEvent::Refused(addr) => {
            tracing::warn!(from = %addr, "refused a BGP connection from an address that is not a configured peer");
        }
        // Kept for the diagnoser's findings (src/daemon/troubles.rs), which log it.
        SpeakerEvent::Trouble(addr, t) => {
            if let Ok(mut s) = state.lock() {
                let s = &mut *s;
                s.troubles.retain(|a| s.peers.contains_key(a));
                if s.peers.contains_key(&addr.ip()) {
                    s.troubles.record(addr.ip(), t);
                }
            }
        }
        SpeakerEvent::PolicyChanged(addr, what) => {
            tracing::info!(peer = %addr, "route policy replaced: {what}");
        }
    }
}
