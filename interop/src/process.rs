//! Processes a test started: kept as `std::process::Child` and stopped by PID on drop
//! (SIGTERM, a grace period, then SIGKILL, then reaped), never by name.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::{Error, Result};

/// A running daemon, stopped when dropped.
#[derive(Debug)]
pub struct Daemon {
    label: String,
    child: Option<Child>,
}

impl Daemon {
    /// Starts `cmd` with stdout and stderr appended to `log` (a file path).
    pub fn spawn(label: &str, mut cmd: Command, log: &std::path::Path) -> Result<Daemon> {
        let command = format!("{cmd:?}");
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|source| Error::Spawn {
                command: command.clone(),
                source,
            })?;
        let err = out.try_clone().map_err(|source| Error::Spawn {
            command: command.clone(),
            source,
        })?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|source| Error::Spawn { command, source })?;
        Ok(Daemon {
            label: label.to_string(),
            child: Some(child),
        })
    }

    /// The process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// What the test called it.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Gives up ownership: the process keeps running after this guard (and the program
    /// that started it) is gone. Returns its PID, for whoever stops it later.
    pub fn detach(mut self) -> Option<u32> {
        self.child.take().map(|c| c.id())
    }

    /// Whether it is still running (a zombie counts as exited).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Kills it at once (SIGKILL), as a crash would, and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops it: SIGTERM, up to `grace` to exit, then SIGKILL; always reaped.
    pub fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(3));
    }
}
