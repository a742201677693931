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
//!   watchdog. The Windows service instead reports Running once the first intent is
//!   applied ([`Hooks::on_intent_applied`], see `crate::service`).

#[cfg(target_os = "linux")]
mod bfd;
mod convert;
mod diagnoser;
mod fib_task;
mod handler;
mod intent;
mod memory;
mod metrics;
mod monitor;
mod policy;
mod routes;
mod run;
mod start;
mod state;
mod status;
mod troubles;
#[cfg(target_os = "linux")]
mod workloads;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use tern_config::DaemonConfig;
use tokio::sync::Notify;

use crate::logging;

pub use start::kube_settings;

/// How the Windows service's run differs from `tern run`'s (the default is `tern run`:
/// log to stderr, stop on signals only, nobody waiting for the first intent).
#[derive(Default)]
pub struct Hooks {
    /// Notified to stop, like SIGTERM (the service control handler's Stop).
    pub stop: Option<Arc<Notify>>,
    /// Where the log goes.
    pub log: logging::Target,
    /// Called once, when the first intent is applied (BGP started): the service then
    /// reports Running.
    pub on_intent_applied: Option<Box<dyn FnOnce() + Send>>,
}

/// Runs the daemon in the foreground until SIGTERM / Ctrl-C.
pub fn run(config: &Path) -> ExitCode {
    run_until(config, Hooks::default())
}

/// Runs the daemon until a signal or until `hooks.stop` is notified.
pub fn run_until(config: &Path, hooks: Hooks) -> ExitCode {
    let (cfg, warnings) = match DaemonConfig::load(config) {
        Ok(v) => v,
        Err(e) => {
            // Into the service's log file too: its stderr goes nowhere.
            if logging::init("info", &hooks.log).is_ok() {
                tracing::error!("{e}");
            }
            eprintln!("tern: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = logging::init_with(&cfg.log, cfg.log_format, &hooks.log) {
        // The daemon still runs; `tern status` answers.
        eprintln!("tern: {e}");
    }
    #[cfg(windows)]
    if let logging::Target::Files(dir) = &hooks.log {
        tracing::info!(
            "tern service starting; log files {} (daily, UTC dates, the last {} kept)",
            logging::file_pattern(dir),
            logging::FILES_KEPT
        );
    }
    for w in warnings {
        tracing::warn!("{w}");
    }
    if let Some(f) = hooks.on_intent_applied {
        status::on_intent_applied(f);
    }
    memory::tune();
    tern_bgp::speaker::set_release_freed(memory::release_freed);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the runtime: {e}");
            eprintln!("tern: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run::daemon(cfg, hooks.stop.unwrap_or_default())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("tern: {e}");
            ExitCode::from(1)
        }
    }
}
