//! Windows service integration (`tern service install|uninstall|run`) through the
//! windows-service crate: the service runs `tern service run --config PATH` as
//! LocalSystem, starts automatically, and stops the daemon the way SIGTERM does
//! (sessions closed, routes kept). On other platforms the command explains that the
//! systemd unit is the way.

use std::path::Path;
use std::process::ExitCode;

/// The service's name in the Service Control Manager.
pub const SERVICE_NAME: &str = "tern";

/// `tern service install --config PATH`.
pub fn install(config: &Path) -> ExitCode {
    imp::install(config)
}

/// `tern service uninstall`.
pub fn uninstall() -> ExitCode {
    imp::uninstall()
}

/// `tern service run --config PATH` (called by the Service Control Manager).
pub fn run(config: &Path) -> ExitCode {
    imp::run(config)
}

#[cfg(not(windows))]
mod imp {
    use std::path::Path;
    use std::process::ExitCode;

    fn not_here() -> ExitCode {
        eprintln!(
            "tern: `tern service` manages the Windows service; on Linux install packaging/systemd/tern.service and use systemctl"
        );
        ExitCode::from(2)
    }

    pub fn install(_config: &Path) -> ExitCode {
        not_here()
    }

    pub fn uninstall() -> ExitCode {
        not_here()
    }

    pub fn run(_config: &Path) -> ExitCode {
        not_here()
    }
}

#[cfg(windows)]
mod imp {
    use std::ffi::OsString;
    use std::path::{Path, PathBuf};
    use std::process::ExitCode;
    use std::sync::{Arc, OnceLock};
    use std::time::Duration;

    use tokio::sync::Notify;
    use windows_service::service::{
        ServiceAccess, ServiceControl, ServiceControlAccept, ServiceErrorControl, ServiceExitCode,
        ServiceInfo, ServiceStartType, ServiceState, ServiceStatus, ServiceType,
    };
    use windows_service::service_control_handler::{self, ServiceControlHandlerResult};
    use windows_service::service_manager::{ServiceManager, ServiceManagerAccess};
    use windows_service::{define_windows_service, service_dispatcher};

    use super::SERVICE_NAME;

    /// The config path for the service thread (the dispatcher passes only arguments the
    /// SCM was started with, not ours).
    static CONFIG: OnceLock<PathBuf> = OnceLock::new();

    define_windows_service!(ffi_service_main, service_main);

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
            let service = manager.create_service(&info, ServiceAccess::CHANGE_CONFIG)?;
            service.set_description(
                "Keeps BGP sessions and installs pod routes for this Kubernetes node",
            )?;
            Ok(())
        })();
        match result {
            Ok(()) => {
                println!(
                    "installed the {SERVICE_NAME} service; start it with `sc start {SERVICE_NAME}`"
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tern: cannot install the service (run from an elevated prompt): {e}");
                ExitCode::from(1)
            }
        }
    }

    pub fn uninstall() -> ExitCode {
        let result = (|| -> windows_service::Result<()> {
            let manager =
                ServiceManager::local_computer(None::<&str>, ServiceManagerAccess::CONNECT)?;
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
                eprintln!("tern: cannot remove the service (run from an elevated prompt): {e}");
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

    fn status(state: ServiceState, exit: u32) -> ServiceStatus {
        ServiceStatus {
            service_type: ServiceType::OWN_PROCESS,
            current_state: state,
            controls_accepted: if state == ServiceState::Running {
                ServiceControlAccept::STOP | ServiceControlAccept::SHUTDOWN
            } else {
                ServiceControlAccept::empty()
            },
            exit_code: ServiceExitCode::Win32(exit),
            checkpoint: 0,
            wait_hint: Duration::from_secs(15),
            process_id: None,
        }
    }

    fn service_main(_arguments: Vec<OsString>) {
        let stop = Arc::new(Notify::new());
        let on_control = {
            let stop = Arc::clone(&stop);
            move |event| match event {
                ServiceControl::Stop | ServiceControl::Shutdown => {
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
        let _ = handle.set_service_status(status(ServiceState::Running, 0));
        let config = CONFIG
            .get()
            .cloned()
            .unwrap_or_else(|| PathBuf::from(r"C:\ProgramData\tern\tern.yaml"));
        let code = crate::daemon::run_until(&config, Some(stop));
        let exit = if code == ExitCode::SUCCESS { 0 } else { 1 };
        let _ = handle.set_service_status(status(ServiceState::Stopped, exit));
    }
}
