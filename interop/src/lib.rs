//! tern-interop: the network-namespace harness.
//!
//! It owns everything a test needs to build a small network out of Linux network
//! namespaces and to run real routing daemons in it (tern, BIRD 2, GoBGP, FRR), and to
//! tear all of it down again: namespaces are deleted by a drop guard, every process is
//! stopped by its PID. It must never touch the machine's own namespace: see
//! [`netns::Netns::create`] and [`netns::assert_thread_in_test_netns`].
//!
//! Linux only; on other targets the crate is empty.

#[cfg(target_os = "linux")]
pub mod bench;
#[cfg(target_os = "linux")]
pub mod capture;
#[cfg(target_os = "linux")]
pub mod chart;
#[cfg(target_os = "linux")]
pub mod etcd;
#[cfg(target_os = "linux")]
pub mod kubeapi;
#[cfg(target_os = "linux")]
pub mod lab;
#[cfg(target_os = "linux")]
pub mod netns;
#[cfg(target_os = "linux")]
pub mod peers;
#[cfg(target_os = "linux")]
pub mod process;
#[cfg(target_os = "linux")]
pub mod soak;

/// Errors of the harness; each names the command or namespace that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A command could not be started at all.
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Why it did not start.
        source: std::io::Error,
    },
    /// A command ran but failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// Entering a namespace failed.
    #[error("cannot enter network namespace {name}: {reason}")]
    Enter {
        /// The namespace.
        name: String,
        /// Why.
        reason: String,
    },
    /// A lab was asked for something its address plan cannot hold.
    #[error("{0}")]
    Spec(String),
    /// A lab did not reach the state it waited for.
    #[error("{0}")]
    Lab(String),
    /// The harness was asked to do something outside a test namespace.
    #[error("refusing to run outside a test network namespace: {0}")]
    NotInTestNamespace(String),
}

/// Result type of the harness.
pub type Result<T> = std::result::Result<T, Error>;

/// Whether namespace tests can run here. `Err` carries the reason to print when they
/// skip. Under `CI=true` a test must not skip: see [`skip_or_fail`].
pub fn lab_available() -> std::result::Result<(), String> {
    #[cfg(target_os = "linux")]
    {
        if !nix::unistd::geteuid().is_root() {
            return Err("not root: network namespaces need CAP_SYS_ADMIN".into());
        }
        match std::process::Command::new("ip").arg("-V").output() {
            Ok(o) if o.status.success() => Ok(()),
            _ => Err("`ip` (iproute2) is not installed".into()),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err("network namespaces exist only on Linux".into())
    }
}

#[path = "../../tests/support/skip.rs"]
mod skip_support;

/// Called by a test that cannot run here: prints a loud SKIP with `reason` and adds it
/// to the run's skip list, or panics when `CI=true`, where every test must run (unless
/// the skip is on the documented list, tests/skips-allowed.txt).
pub fn skip_or_fail(test: &str, reason: &str) {
    skip_support::skip(test, reason);
}

/// Whether an executable is on PATH (or is a path that exists).
pub fn have_program(name: &str) -> bool {
    if name.contains('/') {
        return std::path::Path::new(name).exists();
    }
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        .unwrap_or(false)
}
