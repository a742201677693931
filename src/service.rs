//! Windows service integration (`tern service install|uninstall|run`) through the
//! windows-service crate: the service runs `tern service run --config PATH` as
//! LocalSystem, starts automatically, and stops the daemon the way SIGTERM does
//! (sessions closed, routes kept). On other platforms the command explains that the
//! systemd unit is the way. The decisions (restart table, start reports, error
//! messages) are in [`policy`], tested on every platform.

pub mod policy;

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
mod windows;
#[cfg(windows)]
use self::windows as imp;
