//! The Windows side of `tern service`: install (with restart-on-failure actions),
//! uninstall, and the service's main function, which runs the daemon with its log in
//! daily files and tells the Service Control Manager StartPending until the first
//! intent is applied (or [`policy::START_GRACE`] passed), then Running.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use windows_service::service::{
    Service, ServiceAccess, ServiceAction, ServiceActionType, ServiceControl, ServiceControlAccept,
    ServiceErrorControl, ServiceExitCode, ServiceFailureActions, ServiceFailureResetPeriod,
    ServiceInfo, ServiceStartType, ServiceState, ServiceStatus, ServiceType,
};
use windows_service::service_control_handler::{
    self, ServiceControlHandlerResult, ServiceStatusHandle,
};
use windows_service::service_manager::{ServiceManager, ServiceManagerAccess};
use windows_service::{define_windows_service, service_dispatcher};

use super::policy::{self, Action, StartReport};
use super::SERVICE_NAME;
use crate::logging;

/// The config path for the service thread (the dispatcher passes only arguments the
/// SCM was started with, not ours).
static CONFIG: OnceLock<PathBuf> = OnceLock::new();

define_windows_service!(ffi_service_main, service_main);

/// The message for a failed Service Control Manager call (the crate's own text for a
/// Windows error is only "IO error in winapi call").
fn failure(action: Action, e: &windows_service::Error) -> String {
    match e {
        windows_service::Error::Winapi(io) => {
            policy::failure_message(action, io.raw_os_error(), &io.to_string())
        }
        other => policy::failure_message(action, None, &other.to_string()),
    }
}

/// The restart table from [`policy`] in the crate's form.
fn failure_actions() -> ServiceFailureActions {
    ServiceFailureActions {
        reset_period: ServiceFailureResetPeriod::After(policy::FAILURE_RESET_PERIOD),
        reboot_msg: None,
        command: None,
        actions: Some(
            policy::RESTART_DELAYS
                .iter()
                .map(|delay| ServiceAction {
                    action_type: ServiceActionType::Restart,
                    delay: *delay,
                })
                .collect(),
        ),
    }
}

/// Description and restart-on-failure actions of a just created service. An exit with
/// an error code counts as a failure too, not only a crash (skipped with a warning
/// where the SCM does not know that setting).
fn configure(service: &Service) -> windows_service::Result<()> {
    service
        .set_description("Keeps BGP sessions and installs pod routes for this Kubernetes node")?;
    service.update_failure_actions(failure_actions())?;
    match service.set_failure_actions_on_non_crash_failures(true) {
        Err(windows_service::Error::Winapi(e)) if policy::setting_unsupported(e.raw_os_error()) => {
            eprintln!(
                "tern: warning: this Service Control Manager cannot restart the service after an \
                 error exit, only after a crash ({e})"
            );
            Ok(())
        }
        other => other,
    }
}

pub fn install(config: &Path) -> ExitCode {
    let result = (|| -> windows_service::Result<()> {
        let manager = ServiceManager::local_computer(
            None::<&str>,
            ServiceManagerAccess::CONNECT | ServiceManagerAccess::CREATE_SERVICE,
        )?;
        let exe = std::env::current_exe().map_err(windows_service::Error::Winapi)?;
        let config = std::path::absolute(config).unwrap_or_else(|_| config.to_path_buf());
        let info = ServiceInfo {
            name: OsString::from(SERVICE_NAME),
            display_name: OsString::from("tern BGP routing daemon"),
            service_type: ServiceType::OWN_PROCESS,
            start_type: ServiceStartType::AutoStart,
            error_control: ServiceErrorControl::Normal,
            executable_path: exe,
            launch_arguments: vec![
                OsString::from("service"),
                OsString::from("run"),
                OsString::from("--config"),
                config.into_os_string(),
            ],
            dependencies: vec![],
            account_name: None,
            account_password: None,
        };
        // START: a restart action needs it on the handle that sets it.
        let access = ServiceAccess::CHANGE_CONFIG | ServiceAccess::START | ServiceAccess::DELETE;
        let service = manager.create_service(&info, access)?;
        if let Err(e) = configure(&service) {
            // No half-installed service that never restarts.
            let _ = service.delete();
            return Err(e);
        }
        Ok(())
    })();
    match result {
        Ok(()) => {
            let delays: Vec<String> = policy::RESTART_DELAYS
                .iter()
                .map(|d| format!("{}s", d.as_secs()))
                .collect();
            println!(
                "installed the {SERVICE_NAME} service; start it with `sc start {SERVICE_NAME}`. \
                 It restarts after a failure (after {}; `sc qfailure {SERVICE_NAME}`) and logs to {}",
                delays.join(", "),
                logging::file_pattern(&log_dir())
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}", failure(Action::Install, &e));
            ExitCode::from(1)
        }
    }
}

pub fn uninstall() -> ExitCode {
    let result = (|| -> windows_service::Result<()> {
        let manager = ServiceManager::local_computer(None::<&str>, ServiceManagerAccess::CONNECT)?;
        let service = manager.open_service(
            SERVICE_NAME,
            ServiceAccess::QUERY_STATUS | ServiceAccess::STOP | ServiceAccess::DELETE,
        )?;
        if service.query_status()?.current_state != ServiceState::Stopped {
            let _ = service.stop();
        }
        service.delete()
    })();
    match result {
        Ok(()) => {
            println!("removed the {SERVICE_NAME} service (kernel routes stay until tern runs again or they are deleted)");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}", failure(Action::Uninstall, &e));
            ExitCode::from(1)
        }
    }
}

pub fn run(config: &Path) -> ExitCode {
    let _ = CONFIG.set(config.to_path_buf());
    match service_dispatcher::start(SERVICE_NAME, ffi_service_main) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "tern: not started by the Service Control Manager ({e}); use `tern run` in a console"
            );
            ExitCode::from(1)
        }
    }
}

/// `%ProgramData%\tern\logs`.
fn log_dir() -> PathBuf {
    logging::service_log_dir(std::env::var_os("ProgramData"))
}

/// A status report. Stop is accepted while starting too: the daemon's stop signal is
/// ready before the daemon runs (where the SCM passes Stop to a start-pending service).
fn status(state: ServiceState, checkpoint: u32, wait_hint: Duration) -> ServiceStatus {
    ServiceStatus {
        service_type: ServiceType::OWN_PROCESS,
        current_state: state,
        controls_accepted: if matches!(state, ServiceState::Running | ServiceState::StartPending) {
            ServiceControlAccept::STOP | ServiceControlAccept::SHUTDOWN
        } else {
            ServiceControlAccept::empty()
        },
        exit_code: ServiceExitCode::Win32(0),
        checkpoint,
        wait_hint,
        process_id: None,
    }
}

/// The daemon's exit for the SCM: 0, or a service-specific code (2: the configuration
/// file, 1: anything else; `sc query tern` shows it as SERVICE_EXIT_CODE). A non-zero
/// exit counts as a failure, so the restart actions apply.
fn stopped(code: ExitCode) -> ServiceStatus {
    let exit_code = if code == ExitCode::SUCCESS {
        ServiceExitCode::Win32(0)
    } else if code == ExitCode::from(2) {
        ServiceExitCode::ServiceSpecific(2)
    } else {
        ServiceExitCode::ServiceSpecific(1)
    };
    ServiceStatus {
        exit_code,
        ..status(ServiceState::Stopped, 0, Duration::ZERO)
    }
}

/// The service's status handle, shared by the start reporter and the control handler:
/// once Stop arrived, no later StartPending or Running report may hide StopPending.
#[derive(Default)]
struct Scm {
    handle: OnceLock<ServiceStatusHandle>,
    stopping: Mutex<bool>,
}

impl Scm {
    /// Sends `status` unless the service is stopping.
    fn report(&self, status: ServiceStatus) {
        let Ok(stopping) = self.stopping.lock() else {
            return;
        };
        if let (false, Some(h)) = (*stopping, self.handle.get()) {
            let _ = h.set_service_status(status);
        }
    }

    /// StopPending, and no start reports from now on.
    fn stopping(&self) {
        if let Ok(mut stopping) = self.stopping.lock() {
            *stopping = true;
            if let Some(h) = self.handle.get() {
                let _ = h.set_service_status(status(
                    ServiceState::StopPending,
                    1,
                    Duration::from_secs(10),
                ));
            }
        }
    }

    /// Stopped, whatever came before.
    fn stopped(&self, code: ExitCode) {
        if let Some(h) = self.handle.get() {
            let _ = h.set_service_status(stopped(code));
        }
    }
}

/// What the start reporter hears from the daemon.
enum Starting {
    /// The first intent is applied.
    Applied,
    /// The daemon returned.
    Ended,
}

/// Reports StartPending with an increasing checkpoint every second until the policy
/// says Running; stops without a word when the daemon ended first.
fn report_start(scm: &Scm, news: mpsc::Receiver<Starting>) {
    let started = Instant::now();
    let mut applied = false;
    let mut checkpoint = 1;
    loop {
        match policy::start_report(started.elapsed(), applied) {
            StartReport::Pending { wait_hint } => {
                checkpoint += 1;
                scm.report(status(ServiceState::StartPending, checkpoint, wait_hint));
            }
            StartReport::RunningConfigured => {
                scm.report(status(ServiceState::Running, 0, Duration::ZERO));
                tracing::info!("service Running: the first configuration is applied");
                return;
            }
            StartReport::RunningUnconfigured => {
                scm.report(status(ServiceState::Running, 0, Duration::ZERO));
                tracing::warn!(
                    "service Running without an applied configuration after {} s, so that Stop \
                     works and dependent services start; `tern status` says what tern waits for",
                    policy::START_GRACE.as_secs()
                );
                return;
            }
        }
        match news.recv_timeout(Duration::from_secs(1)) {
            Ok(Starting::Applied) => applied = true,
            Ok(Starting::Ended) | Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

fn service_main(_arguments: Vec<OsString>) {
    let stop = Arc::new(Notify::new());
    let scm = Arc::new(Scm::default());
    let on_control = {
        let stop = Arc::clone(&stop);
        let scm = Arc::clone(&scm);
        move |event| match event {
            ServiceControl::Stop | ServiceControl::Shutdown => {
                scm.stopping();
                // A permit: seen even if the daemon's loop has not started yet.
                stop.notify_one();
                ServiceControlHandlerResult::NoError
            }
            ServiceControl::Interrogate => ServiceControlHandlerResult::NoError,
            _ => ServiceControlHandlerResult::NotImplemented,
        }
    };
    let Ok(handle) = service_control_handler::register(SERVICE_NAME, on_control) else {
        return;
    };
    let _ = scm.handle.set(handle);
    scm.report(status(
        ServiceState::StartPending,
        1,
        policy::START_WAIT_HINT,
    ));
    let (news, heard) = mpsc::channel();
    let reporter = {
        let scm = Arc::clone(&scm);
        std::thread::spawn(move || report_start(&scm, heard))
    };
    let applied = news.clone();
    let config = CONFIG
        .get()
        .cloned()
        .unwrap_or_else(|| PathBuf::from(r"C:\ProgramData\tern\tern.yaml"));
    let hooks = crate::daemon::Hooks {
        stop: Some(stop),
        log: logging::Target::Files(log_dir()),
        on_intent_applied: Some(Box::new(move || {
            let _ = applied.send(Starting::Applied);
        })),
    };
    let code = crate::daemon::run_until(&config, hooks);
    // The reporter must not say Running after Stopped.
    let _ = news.send(Starting::Ended);
    let _ = reporter.join();
    scm.stopped(code);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_restart_table_reaches_the_scm_as_restarts() {
        let a = failure_actions();
        assert_eq!(
            a.reset_period,
            ServiceFailureResetPeriod::After(Duration::from_secs(86_400))
        );
        let actions = a.actions.unwrap_or_default();
        let delays: Vec<u64> = actions.iter().map(|x| x.delay.as_secs()).collect();
        assert_eq!(delays, [2, 2, 10]);
        assert!(actions
            .iter()
            .all(|x| x.action_type == ServiceActionType::Restart));
        // The crate panics on values that do not fit the SCM's fields.
        let _ = a.reset_period.to_raw();
        for x in &actions {
            let _ = x.to_raw();
        }
    }

    #[test]
    fn exits_reach_the_scm_as_codes_that_trigger_restarts() {
        assert_eq!(
            stopped(ExitCode::SUCCESS).exit_code,
            ServiceExitCode::Win32(0)
        );
        assert_eq!(
            stopped(ExitCode::from(2)).exit_code,
            ServiceExitCode::ServiceSpecific(2)
        );
        assert_eq!(
            stopped(ExitCode::from(1)).exit_code,
            ServiceExitCode::ServiceSpecific(1)
        );
        let starting = status(ServiceState::StartPending, 2, policy::START_WAIT_HINT);
        assert!(starting
            .controls_accepted
            .contains(ServiceControlAccept::STOP));
        let stopping = status(ServiceState::StopPending, 1, Duration::from_secs(10));
        assert!(stopping.controls_accepted.is_empty());
    }
}
