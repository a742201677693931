//! `tern run`: the daemon. It wires datastore → intent → speaker → FIB and serves the
//! control socket:
//!
//! - the datastore task delivers complete snapshots; the [`Tracker`] turns each into an
//!   intent (a bad one is rejected, the old intent stays) and a diff;
//! - the speaker (tern-bgp) runs the sessions and the RIB; the main loop originates
//!   the intent's prefixes and hands Loc-RIB changes to the FIB task;
//! - the FIB task owns the kernel view; on start it keeps the routes an earlier run
//!   left, adopts those still wanted, and removes the rest only when the restart grace
//!   ends (all peers up for a few seconds, or the grace time);
//! - SIGTERM stops the sessions with a shutdown message and leaves the kernel routes
//!   in place; SIGHUP re-reads the datastore;
//! - systemd: READY=1 once the control socket listens and the main loop runs, with or
//!   without a valid configuration (BGP starts with the first one); STATUS= says what
//!   it waits for, or how many peers are up; the main loop feeds the watchdog.

mod convert;
mod fib_task;
mod handler;
mod memory;
mod metrics;
mod state;
#[cfg(target_os = "linux")]
mod workloads;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use tern_bgp::speaker::{self, SpeakerCommand, SpeakerEvent};
use tern_config::cluster::DEFAULT_SECRETS_DIR;
use tern_config::datastore::etcd::{EtcdOptions, EtcdStore};
use tern_config::datastore::kubernetes::{self, KubeSettings, KubeStore};
use tern_config::datastore::{file::FileStore, StoreEvent};
use tern_config::diff::IntentDiff;
use tern_config::intent::Intent;
use tern_config::tracker::Tracker;
use tern_config::{DaemonConfig, Datastore};
use tokio::sync::{mpsc, Notify};

use crate::control::server::Server;
use fib_task::FibMsg;
use state::State;

/// Longest time tern keeps routes of an earlier run that nobody wants again.
const MAX_GRACE: Duration = Duration::from_secs(120);
/// How long all peers must have been up before stale routes are removed (time for
/// their initial tables to arrive).
const SETTLE: Duration = Duration::from_secs(5);

/// Runs the daemon in the foreground until SIGTERM / Ctrl-C.
pub fn run(config: &Path) -> ExitCode {
    run_until(config, None)
}

/// Runs the daemon until a signal or until `stop` is notified (the Windows service
/// control handler's Stop).
pub fn run_until(config: &Path, stop: Option<Arc<Notify>>) -> ExitCode {
    let (cfg, warnings) = match DaemonConfig::load(config) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("tern: {e}");
            return ExitCode::from(2);
        }
    };
    init_tracing(&cfg.log);
    for w in warnings {
        tracing::warn!("{w}");
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tern: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(daemon(cfg, stop.unwrap_or_default())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("tern: {e}");
            ExitCode::from(1)
        }
    }
}

/// Human format on a terminal; plain lines without timestamps otherwise (journald and
/// the Windows event log add their own).
fn init_tracing(level: &str) {
    use std::io::IsTerminal;
    let from_env = std::env::var("RUST_LOG")
        .ok()
        .filter(|l| !l.trim().is_empty());
    let filter = from_env
        .and_then(|l| tracing_subscriber::EnvFilter::try_new(quiet_clients(&l)).ok())
        .or_else(|| tracing_subscriber::EnvFilter::try_new(quiet_clients(level)).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    let tty = std::io::stderr().is_terminal();
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(tty);
    let _ = if tty {
        b.try_init()
    } else {
        b.without_time().try_init()
    };
}

/// `level` with the Kubernetes client's own logging off unless `level` names it: it
/// logs every failed reconnect and every dropped watch (at ERROR and WARN), while
/// tern's store says once, in plain words, what is wrong and that it keeps trying.
fn quiet_clients(level: &str) -> String {
    let mut filter = level.to_string();
    for target in ["kube_client", "kube_runtime"] {
        if !level.contains(target) {
            filter.push_str(&format!(",{target}=off"));
        }
    }
    filter
}

fn notify_ready(status: &str) {
    #[cfg(target_os = "linux")]
    let _ = sd_notify::notify(
        false,
        &[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status(status),
        ],
    );
    #[cfg(not(target_os = "linux"))]
    let _ = status;
}

fn notify_status(status: &str) {
    #[cfg(target_os = "linux")]
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Status(status)]);
    #[cfg(not(target_os = "linux"))]
    let _ = status;
}

fn notify_watchdog() {
    #[cfg(target_os = "linux")]
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]);
}

fn notify_stopping() {
    #[cfg(target_os = "linux")]
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
}

/// Starts the store task for the configured datastore.
async fn start_store(
    cfg: &DaemonConfig,
    reload: Arc<Notify>,
) -> Result<(mpsc::Receiver<StoreEvent>, String), String> {
    let (tx, rx) = mpsc::channel(4);
    let name = match &cfg.datastore {
        Datastore::File { path } => {
            let store =
                FileStore::new(path.clone()).with_max_bytes(cfg.limits.datastore_document_bytes);
            tokio::spawn(store.run(tx, reload));
            format!("file {}", path.display())
        }
        Datastore::Etcdv3 {
            endpoints,
            tls,
            auth,
        } => {
            let options = EtcdOptions {
                endpoints: endpoints.clone(),
                tls: tls.clone(),
                auth: auth.clone(),
            };
            let store = EtcdStore::connect(&options)
                .await
                .map_err(|e| e.to_string())?
                .with_max_document_bytes(cfg.limits.datastore_document_bytes);
            // etcd pushes changes; a reload has nothing to re-read.
            drop(reload);
            tokio::spawn(store.run(tx));
            format!("etcdv3 {}", endpoints.join(","))
        }
        Datastore::Kubernetes {
            kubeconfig,
            namespace,
        } => {
            let store = KubeStore::connect(&kube_settings(cfg, kubeconfig, namespace))
                .await
                .map_err(|e| e.to_string())?;
            // The API server pushes changes; a reload has nothing to re-read.
            drop(reload);
            let name = format!("kubernetes {}", store.url());
            tokio::spawn(store.run(tx));
            name
        }
    };
    Ok((rx, name))
}

/// The Kubernetes store's settings from `tern.yaml` (and the environment).
pub fn kube_settings(
    cfg: &DaemonConfig,
    kubeconfig: &Option<PathBuf>,
    namespace: &Option<String>,
) -> KubeSettings {
    KubeSettings {
        kubeconfig: kubeconfig.clone(),
        namespace: namespace
            .clone()
            .unwrap_or_else(|| kubernetes::DEFAULT_NAMESPACE.to_string()),
        max_document_bytes: cfg.limits.datastore_document_bytes,
    }
}

/// Starts the FIB task on this platform's backend. [`fib_task::KernelNews`] tells it
/// what the kernel did behind its back (see [`fib_task::run`]).
fn start_fib(
    cfg: &DaemonConfig,
) -> Result<(mpsc::Sender<FibMsg>, Arc<fib_task::KernelNews>), String> {
    let (tx, rx) = mpsc::channel(64);
    let resync = Arc::new(fib_task::KernelNews::default());
    let r = Arc::clone(&resync);
    if !cfg.fib.enabled {
        tokio::spawn(fib_task::run(tern_fib::memory::MemoryFib::default(), rx, r));
        return Ok((tx, resync));
    }
    #[cfg(target_os = "linux")]
    {
        let fib = tern_fib::linux::LinuxFib::new(cfg.fib.route_protocol, cfg.fib.table)
            .map_err(|e| format!("cannot open the kernel FIB: {e}"))?;
        r.own_port
            .store(fib.port_id(), std::sync::atomic::Ordering::SeqCst);
        tokio::spawn(fib_task::run(fib, rx, r));
    }
    #[cfg(windows)]
    {
        let dir = std::env::var_os("ProgramData")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(r"C:\ProgramData"))
            .join("tern");
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let fib = tern_fib::windows::WindowsFib::new(dir.join("routes.record"))
            .map_err(|e| format!("cannot open the Windows FIB: {e}"))?;
        // IP Helper's callbacks tell the FIB task what the Linux watcher tells it: a
        // row gone (put tern's back) or a change only a re-read can tell.
        let news = Arc::clone(&r);
        match tern_fib::windows::notify::watch(move |e| match e {
            tern_fib::windows::notify::WatchEvent::RouteRemoved(p) => news.removed(p),
            tern_fib::windows::notify::WatchEvent::Resync => news.resync(),
        }) {
            // Kept for the daemon's life: dropping it would end the notifications.
            Ok(w) => {
                tokio::spawn(async move {
                    let _watch = w;
                    std::future::pending::<()>().await
                });
            }
            Err(e) => tracing::warn!(
                "cannot watch the route table ({e}); routes removed by others come back only at restart"
            ),
        }
        tokio::spawn(fib_task::run(fib, rx, r));
    }
    #[cfg(not(any(target_os = "linux", windows)))]
    {
        tokio::spawn(fib_task::run(tern_fib::memory::MemoryFib::default(), rx, r));
    }
    Ok((tx, resync))
}

async fn daemon(cfg: DaemonConfig, stop: Arc<Notify>) -> Result<(), String> {
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
    let (mut store, store_name) = start_store(&cfg, reload.clone()).await?;
    let (fib, fib_resync) = start_fib(&cfg)?;
    let state = Arc::new(Mutex::new(State::new(store_name.clone())));
    tracing::info!(node = %cfg.node, datastore = %store_name, "tern starting");

    // The control socket answers from the start, so a person can see why nothing runs
    // yet (a rejected configuration, an unreachable datastore).
    let speaker_slot = Arc::new(std::sync::OnceLock::new());
    let handler = Arc::new(handler::DaemonHandler {
        state: state.clone(),
        speaker: Arc::clone(&speaker_slot),
        fib: fib.clone(),
        reload: reload.clone(),
    });
    if let Some(addr) = cfg.metrics {
        let listener = metrics::bind(addr).await?;
        tracing::info!("metrics on http://{addr}/metrics");
        tokio::spawn(metrics::serve(listener, Arc::clone(&handler)));
    }
    tokio::spawn(server.run(handler));

    // BGP starts with the first valid snapshot. Until then the loop below runs all
    // the same (control socket, watchdog, SIGHUP, datastore events): a node booted
    // with a broken configuration or an unreachable datastore stays up, says why, and
    // starts BGP as soon as the datastore holds a valid configuration.
    let mut tracker = Tracker::new(cfg.node.clone())
        .with_router_id(cfg.router_id)
        .with_max_document_bytes(cfg.limits.datastore_document_bytes);
    let mut speaker: Option<mpsc::Sender<SpeakerCommand>> = None;
    let mut events: Option<mpsc::Receiver<SpeakerEvent>> = None;

    // Workload routes (Linux): borrowed addresses seen in the kernel.
    let (wtx, mut workload_rx) = mpsc::channel::<BTreeMap<IpNet, String>>(8);
    #[cfg(target_os = "linux")]
    tokio::spawn(workloads::run(
        cfg.fib.table,
        cfg.fib.enabled.then_some(cfg.fib.route_protocol),
        fib_resync,
        wtx,
    ));
    #[cfg(not(target_os = "linux"))]
    drop((wtx, fib_resync));
    let mut workloads: BTreeMap<IpNet, String> = BTreeMap::new();
    let mut kernel_originated: BTreeSet<IpNet> = BTreeSet::new();

    // The restart grace is counted from the start of BGP, not of the process.
    let mut bgp_started: Option<Instant> = None;
    let mut all_up_since: Option<Instant> = None;
    let mut grace = true;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    #[cfg(unix)]
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| format!("cannot watch SIGHUP: {e}"))?;
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot watch SIGTERM: {e}"))?;

    // READY=1 means "up and answering": the control socket listens and the main loop
    // runs. Whether the node is ready for traffic is `tern health --ready`; holding
    // READY back for a configuration would let systemd kill (and restart in a loop) a
    // daemon that only waits for the datastore to be fixed.
    let mut status = status_line(&state, false);
    notify_ready(&status);
    loop {
        #[cfg(unix)]
        let signals = async {
            tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "SIGINT",
                _ = hup.recv() => "SIGHUP",
                _ = stop.notified() => "stop request",
            }
        };
        #[cfg(not(unix))]
        let signals = async {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => "Ctrl-C",
                _ = stop.notified() => "service stop",
            }
        };
        tokio::select! {
            ev = next_event(&mut events) => match ev {
                Some(ev) => on_speaker_event(ev, &state, &fib, &cfg.fib).await,
                None => return Err("the BGP speaker stopped".into()),
            },
            ev = store.recv() => match ev {
                Some(ev) => {
                    let large = matches!(&ev, StoreEvent::Snapshot { documents, .. }
                        if documents.len() >= memory::TRIM_AFTER_DOCUMENTS);
                    let diff = on_store_event(ev, &mut tracker, &state);
                    if large {
                        memory::release_freed();
                    }
                    if let Some(diff) = diff {
                        if let Some(i) = tracker.current().cloned() {
                            match &speaker {
                                Some(sp) => {
                                    apply_diff(&diff, &i, sp, &fib, &state, &cfg).await;
                                    sync_workloads(&i, &workloads, &mut kernel_originated, sp, &state).await;
                                }
                                None => {
                                    let (sp, ev) = start_bgp(&diff, &i, &fib, &state, &cfg).await?;
                                    sync_workloads(&i, &workloads, &mut kernel_originated, &sp, &state).await;
                                    let _ = speaker_slot.set(sp.clone());
                                    speaker = Some(sp);
                                    events = Some(ev);
                                    bgp_started = Some(Instant::now());
                                }
                            }
                        }
                    }
                    update_status(&state, speaker.is_some(), &mut status);
                }
                None => return Err("the datastore task stopped".into()),
            },
            Some(w) = workload_rx.recv() => {
                workloads = w;
                if let (Some(i), Some(sp)) = (tracker.current(), &speaker) {
                    sync_workloads(i, &workloads, &mut kernel_originated, sp, &state).await;
                }
            }
            sig = signals => {
                if sig == "SIGHUP" {
                    tracing::info!("SIGHUP: re-reading the datastore");
                    reload.notify_one();
                    continue;
                }
                tracing::info!("{sig}: stopping; kernel routes stay in place for the next start");
                notify_stopping();
                if let Some(sp) = &speaker {
                    let _ = sp
                        .send(SpeakerCommand::Shutdown(Some("tern is stopping".into())))
                        .await;
                    // Give the NOTIFICATIONs a moment to leave.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                return Ok(());
            }
            _ = tick.tick() => {
                // Fed while waiting for a configuration too: waiting is not hanging.
                notify_watchdog();
                let (total, up) = match state.lock() {
                    Ok(mut s) => {
                        s.last_tick = Instant::now();
                        (s.peers.len(), s.peers.values().filter(|p| p.up).count())
                    }
                    Err(_) => return Err("the daemon's state is poisoned".into()),
                };
                update_status(&state, speaker.is_some(), &mut status);
                if let (true, Some(started)) = (grace, bgp_started) {
                    all_up_since = if up == total { all_up_since.or(Some(Instant::now())) } else { None };
                    let settled = all_up_since.is_some_and(|t| t.elapsed() >= SETTLE);
                    if settled || started.elapsed() >= MAX_GRACE {
                        grace = false;
                        if let Ok(mut s) = state.lock() {
                            s.in_grace = false;
                        }
                        let _ = fib.send(FibMsg::EndGrace).await;
                    }
                }
            }
        }
    }
}

/// The speaker's next event; never ready while BGP has not started.
async fn next_event(events: &mut Option<mpsc::Receiver<SpeakerEvent>>) -> Option<SpeakerEvent> {
    match events {
        Some(e) => e.recv().await,
        None => std::future::pending().await,
    }
}

/// Starts BGP with the first accepted intent: the speaker with its sessions, then the
/// intent's own prefixes. A failure here (port 179 taken) ends the daemon.
async fn start_bgp(
    first: &IntentDiff,
    intent: &Intent,
    fib: &mpsc::Sender<FibMsg>,
    state: &Arc<Mutex<State>>,
    cfg: &DaemonConfig,
) -> Result<(mpsc::Sender<SpeakerCommand>, mpsc::Receiver<SpeakerEvent>), String> {
    let secrets_dir = PathBuf::from(DEFAULT_SECRETS_DIR);
    let (mut speaker_cfg, peer_errors) = convert::speaker_config(intent, &secrets_dir, &cfg.limits);
    // Our routes still in the kernel: this is a restart with forwarding kept, so peers
    // are asked to keep ours until we have sent them our table again.
    let (atx, arx) = tokio::sync::oneshot::channel();
    let _ = fib.send(FibMsg::Adopted(atx)).await;
    let adopted = arx.await.unwrap_or(0);
    if adopted > 0 {
        tracing::info!(
            routes = adopted,
            "restarting with forwarding state kept: announcing graceful restart (R and F bits) and holding our UPDATEs until every peer has sent End-of-RIB"
        );
        speaker_cfg.restarting = true;
    }
    for e in &peer_errors {
        tracing::error!("session not started: {e}");
    }
    let (etx, events) = mpsc::channel(1024);
    let speaker = speaker::spawn(speaker_cfg, etx)
        .await
        .map_err(|e| format!("cannot start BGP on port {}: {e}", intent.listen.port))?;
    apply_origination(first, intent, &speaker, fib, cfg.fib.table).await;
    if let Ok(mut s) = state.lock() {
        s.set_peers(intent);
        if !peer_errors.is_empty() {
            s.config_error = Some(peer_errors.join("; "));
        }
    }
    tracing::info!(
        router_id = %intent.router_id,
        asn = intent.asn,
        peers = intent.peers.len(),
        originated = intent.originated.len(),
        "configuration applied"
    );
    Ok((speaker, events))
}

/// What `systemctl status tern` shows (sd_notify STATUS=): why BGP does not run yet,
/// or a one-line summary once it does. One line, short: the full text is in
/// `tern status` and the journal.
fn status_line(state: &Arc<Mutex<State>>, running: bool) -> String {
    let Ok(s) = state.lock() else {
        return "the daemon's state is poisoned (a task panicked); restart tern".into();
    };
    let first_line = |e: &str| -> String {
        let line = e.lines().next().unwrap_or_default();
        match line.char_indices().nth(200) {
            Some((i, _)) => format!("{}...", &line[..i]),
            None => line.to_string(),
        }
    };
    if !running {
        let why = match &s.config_error {
            Some(e) => first_line(e),
            None => "no configuration read from the datastore yet".into(),
        };
        return format!("waiting for a valid configuration: {why}");
    }
    let total = s.peers.len();
    let up = s.peers.values().filter(|p| p.up).count();
    let mut line = format!("running: {up} of {total} BGP peers established");
    if let Some(e) = &s.datastore_error {
        line.push_str(&format!("; datastore unavailable {}", first_line(e)));
    } else if let Some(e) = &s.config_error {
        line.push_str(&format!("; {}", first_line(e)));
    }
    line
}

/// Sends STATUS= when the line changed.
fn update_status(state: &Arc<Mutex<State>>, running: bool, last: &mut String) {
    let now = status_line(state, running);
    if now != *last {
        notify_status(&now);
        *last = now;
    }
}

/// Originates the workload addresses that are borrowed (inside a pool that exports,
/// outside this node's own blocks, not already originated from IPAM data, not on an
/// ignored interface) and withdraws those that no longer are.
async fn sync_workloads(
    intent: &Intent,
    workloads: &BTreeMap<IpNet, String>,
    originated: &mut BTreeSet<IpNet>,
    speaker: &mpsc::Sender<SpeakerCommand>,
    state: &Arc<Mutex<State>>,
) {
    let wanted: BTreeSet<IpNet> = workloads
        .iter()
        .filter(|(p, ifname)| {
            intent.pool_of(p).is_some_and(|pool| pool.export)
                && !intent.own_blocks.iter().any(|b| b.contains(*p))
                && !intent.originated.contains_key(*p)
                && !intent
                    .ignored_interfaces
                    .iter()
                    .any(|pat| tern_config::policy::interface_matches(pat, ifname))
        })
        .map(|(p, _)| *p)
        .collect();
    for p in wanted.difference(originated) {
        tracing::info!(prefix = %p, interface = %workloads.get(p).map(String::as_str).unwrap_or("?"), "advertising a borrowed workload address seen in the kernel");
        let _ = speaker
            .send(SpeakerCommand::Originate {
                prefix: *p,
                attrs: tern_bgp::wire::PathAttributes {
                    origin: Some(tern_bgp::wire::Origin::Igp),
                    ..Default::default()
                },
            })
            .await;
    }
    for p in originated.difference(&wanted) {
        // An address the intent now originates itself stays originated (by the intent).
        if !intent.originated.contains_key(p) {
            tracing::info!(prefix = %p, "withdrawing a workload address no longer in the kernel");
            let _ = speaker.send(SpeakerCommand::Withdraw(*p)).await;
        }
    }
    *originated = wanted.clone();
    if let Ok(mut s) = state.lock() {
        s.kernel_originated = wanted;
    }
}

/// Applies a store event to the tracker; returns the diff when a snapshot was accepted.
fn on_store_event(
    ev: StoreEvent,
    tracker: &mut Tracker,
    state: &Arc<Mutex<State>>,
) -> Option<IntentDiff> {
    match ev {
        StoreEvent::Snapshot {
            documents,
            revision,
        } => {
            let result = tracker.apply(&documents, revision);
            let Ok(mut s) = state.lock() else {
                return None;
            };
            s.snapshots += 1;
            if s.datastore_error.take().is_some() {
                tracing::info!("datastore readable again");
            }
            match result {
                Ok(accepted) => {
                    for w in &accepted.warnings {
                        tracing::warn!("{w}");
                    }
                    s.revision = Some(revision);
                    s.config_error = None;
                    s.intent = tracker.current().cloned();
                    Some(accepted.diff)
                }
                Err(e) => {
                    let text = e.to_string();
                    for line in text.lines() {
                        tracing::error!(
                            "configuration rejected, the previous one stays in force: {line}"
                        );
                    }
                    s.config_error = Some(text);
                    None
                }
            }
        }
        StoreEvent::Unavailable(why) => {
            tracing::warn!("datastore unavailable, the configuration in force stays: {why}");
            if let Ok(mut s) = state.lock() {
                if s.intent.is_none() {
                    s.config_error = Some(format!("datastore unavailable: {why}"));
                } else {
                    // The outage's start stays; its cause is the latest the store gave
                    // (unreachable, then refused credentials once it answers again).
                    let since = s
                        .datastore_error
                        .as_deref()
                        .and_then(|e| e.strip_prefix("since "))
                        .and_then(|e| e.split_once(": "))
                        .map(|(t, _)| t.to_string())
                        .unwrap_or_else(|| {
                            humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                                .to_string()
                        });
                    s.datastore_error = Some(format!("since {since}: {why}"));
                }
            }
            None
        }
    }
}

/// Originates (or withdraws) the diff's prefixes and installs own-block blackholes.
async fn apply_origination(
    d: &IntentDiff,
    intent: &Intent,
    speaker: &mpsc::Sender<SpeakerCommand>,
    fib: &mpsc::Sender<FibMsg>,
    table: u32,
) {
    let mut want = Vec::new();
    for (prefix, o) in &d.originated {
        if o.export {
            let _ = speaker
                .send(SpeakerCommand::Originate {
                    prefix: *prefix,
                    attrs: convert::origin_attrs(o),
                })
                .await;
        } else {
            let _ = speaker.send(SpeakerCommand::Withdraw(*prefix)).await;
        }
        want.push((
            *prefix,
            o.blackhole.then(|| convert::blackhole(*prefix, table)),
        ));
    }
    for prefix in &d.withdrawn {
        let _ = speaker.send(SpeakerCommand::Withdraw(*prefix)).await;
        if !intent.originated.contains_key(prefix) {
            want.push((*prefix, None));
        }
    }
    if !want.is_empty() {
        let _ = fib.send(FibMsg::Want(want)).await;
    }
}

/// Pools changed (an `ipipMode` edit): every learnt route is handed to the FIB task
/// again with the new encapsulation; it changes only those whose kernel form differs.
async fn reprogram_learnt(
    intent: &Intent,
    speaker: &mpsc::Sender<SpeakerCommand>,
    fib: &mpsc::Sender<FibMsg>,
    table: u32,
) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    if speaker.send(SpeakerCommand::Routes(tx)).await.is_err() {
        return;
    }
    let Ok(routes) = rx.await else {
        return;
    };
    let encap = intent.encapsulation();
    let want: Vec<_> = routes
        .iter()
        .filter(|(p, _)| !intent.originated.contains_key(p))
        .filter_map(|(p, best)| {
            convert::kernel_route(*p, best, table, &encap).map(|r| (*p, Some(r)))
        })
        .collect();
    if !want.is_empty() {
        let _ = fib.send(FibMsg::Want(want)).await;
    }
}

/// Applies a later diff: prefixes live; session changes are recorded and logged.
async fn apply_diff(
    d: &IntentDiff,
    intent: &Intent,
    speaker: &mpsc::Sender<SpeakerCommand>,
    fib: &mpsc::Sender<FibMsg>,
    state: &Arc<Mutex<State>>,
    cfg: &DaemonConfig,
) {
    let table = cfg.fib.table;
    if d.is_empty() {
        tracing::info!("configuration re-read: nothing changed for this node");
        return;
    }
    apply_origination(d, intent, speaker, fib, table).await;
    if d.policy_changed && cfg.fib.enabled {
        reprogram_learnt(intent, speaker, fib, table).await;
    }
    let secrets_dir = PathBuf::from(DEFAULT_SECRETS_DIR);
    for a in &d.peers_removed {
        tracing::info!(peer = %a, "peer removed from the configuration: closing its session");
        let _ = speaker
            .send(SpeakerCommand::RemovePeer(
                *a,
                "peer removed from configuration".into(),
            ))
            .await;
    }
    for p in &d.peers_changed {
        tracing::info!(peer = %p.address, "peer settings changed: restarting its session");
        let _ = speaker
            .send(SpeakerCommand::RemovePeer(
                p.address,
                "peer configuration changed".into(),
            ))
            .await;
    }
    for p in d.peers_changed.iter().chain(&d.peers_added) {
        match convert::peer_config(intent, p, &secrets_dir, &cfg.limits) {
            Ok(c) => {
                if d.peers_added.contains(p) {
                    tracing::info!(peer = %p.address, origin = %p.origin, "new peer: starting its session");
                }
                let _ = speaker.send(SpeakerCommand::AddPeer(c)).await;
            }
            Err(e) => tracing::error!("{e}"),
        }
    }
    if let Ok(mut s) = state.lock() {
        s.set_peers(intent);
        for p in &d.peers_changed {
            if let Some(ps) = s.peers.get_mut(&p.address) {
                ps.up = false;
                ps.state = "Idle".into();
                ps.since = std::time::SystemTime::now();
            }
        }
        if d.identity_changed {
            // The speaker's router id, AS and listener are fixed at start.
            let msg = "the router id, AS, cluster id or listener changed: restart tern to apply it"
                .to_string();
            tracing::warn!("{msg}");
            s.config_error = Some(msg);
        }
    }
    tracing::info!(
        originated = d.originated.len(),
        withdrawn = d.withdrawn.len(),
        "configuration change applied"
    );
}

/// Speaker events: peer states to the snapshot (logged once each), routes to the FIB.
async fn on_speaker_event(
    ev: SpeakerEvent,
    state: &Arc<Mutex<State>>,
    fib: &mpsc::Sender<FibMsg>,
    fib_cfg: &tern_config::daemon::FibConfig,
) {
    let table = fib_cfg.table;
    match ev {
        SpeakerEvent::Routes(changes) => {
            // A withdrawn own prefix must not delete its blackhole: those are only
            // removed through the intent.
            let (own, encap): (Vec<ipnet::IpNet>, _) = state
                .lock()
                .ok()
                .and_then(|s| {
                    s.intent
                        .as_ref()
                        .map(|i| (i.originated.keys().copied().collect(), i.encapsulation()))
                })
                .unwrap_or_default();
            // Without a kernel FIB (a route reflector) there is no tunnel to go through.
            let encap = if fib_cfg.enabled {
                encap
            } else {
                Default::default()
            };
            let want: Vec<_> = changes
                .iter()
                .filter_map(|c| match &c.now {
                    Some(best) if best.best.source.local => None,
                    Some(best) => Some((
                        c.prefix,
                        convert::kernel_route(c.prefix, best, table, &encap),
                    )),
                    None => Some((c.prefix, None)),
                })
                .collect();
            let want: Vec<_> = want.into_iter().filter(|(p, _)| !own.contains(p)).collect();
            if !want.is_empty() {
                let _ = fib.send(FibMsg::Want(want)).await;
            }
        }
        SpeakerEvent::PeerUp(addr, n) => {
            tracing::info!(peer = %addr, families = ?n.families.iter().map(|f| f.to_string()).collect::<Vec<_>>(), "BGP session established");
            if let Ok(mut s) = state.lock() {
                s.peer_up(addr.ip(), &n);
            }
        }
        SpeakerEvent::PeerDown(addr, why) => {
            tracing::warn!(peer = %addr, "BGP session down: {why}");
            if let Ok(mut s) = state.lock() {
                s.peer_down(addr.ip(), &why);
            }
        }
        SpeakerEvent::Rejected(addr, why) => {
            tracing::warn!(peer = %addr, "route refused: {why}");
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
    }
}
