//! `tern run`: the daemon. Its parts and how routes flow:
//!
//! - the datastore task delivers complete snapshots; the main loop ([`run`]) turns each
//!   into an intent with the tracker (a bad one is rejected, the old intent stays),
//!   applies the diff ([`intent`]) and publishes the intent on a `watch` channel;
//! - the speaker (tern-bgp) runs the sessions and the RIB; the main loop originates
//!   the intent's prefixes and keeps peer state for `tern status`;
//! - routes skip the main loop: the speaker sends Loc-RIB changes on a channel of its
//!   own to the FIB task (tern-fib's `task`), which turns them into kernel routes with
//!   the daemon's filter ([`routes`]: own prefixes left out, the encapsulation of the
//!   published intent) and programs the kernel. No lock and no other task sit between
//!   a session and the kernel;
//! - the FIB task owns the kernel view; on start it keeps the routes an earlier run
//!   left, adopts those still wanted, and removes the rest when the speaker says its
//!   Loc-RIB is complete (at once without a restart; after a restart when every peer
//!   sent End-of-RIB or the selection deferral timer ran out): one grace clock;
//! - SIGTERM stops the sessions with a shutdown message and leaves the kernel routes
//!   in place; SIGHUP re-reads the datastore;
//! - systemd ([`status`]): READY=1 once the control socket listens and the main loop
//!   runs, with or without a valid configuration (BGP starts with the first one);
//!   STATUS= says what it waits for, or how many peers are up; the main loop feeds the
//!   watchdog.

mod convert;
mod fib_task;
mod handler;
mod intent;
mod memory;
mod metrics;
mod policy;
mod routes;
mod run;
mod start;
mod state;
mod status;
#[cfg(target_os = "linux")]
mod workloads;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use tern_config::DaemonConfig;
use tokio::sync::Notify;

pub use start::kube_settings;

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
    match rt.block_on(run::daemon(cfg, stop.unwrap_or_default())) {
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
