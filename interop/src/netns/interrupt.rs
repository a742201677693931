//! What a `tern-lab` killed by SIGTERM, SIGINT or SIGHUP leaves behind: nothing. A
//! signal ends the process without running the [`Netns`](super::Netns) guards' drops,
//! so the namespaces of a benchmark or a lab being built stayed, with the daemons in
//! them still running. Here every namespace a guard owns is noted; on one of those
//! signals a watcher thread removes them as `tern-lab down` does
//! ([`crate::lab::state::down`]: what runs in each stopped by PID, then deleted), and
//! exits with 128 + the signal. The handler itself only
//! stores the signal's number (async-signal-safe); `exec` resets it in children, so the
//! daemons keep their own SIGTERM. No crate in the tree does this (`tokio::signal`
//! needs a runtime, which `tern-lab` does not run on its main thread).

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

/// The namespaces owned by live guards.
static OWNED: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// The signal received, or 0.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: i32) {
    RECEIVED.store(sig, Ordering::SeqCst);
}

/// Notes a namespace a guard now owns.
pub(super) fn own(name: &str) {
    if let Ok(mut v) = OWNED.lock() {
        v.push(name.to_string());
    }
}

/// Forgets one (deleted, or handed over to a lab left running).
pub(super) fn disown(name: &str) {
    if let Ok(mut v) = OWNED.lock() {
        v.retain(|n| n != name);
    }
}

/// Installs the handlers and the watcher: from then on, SIGTERM, SIGINT and SIGHUP
/// remove the namespaces owned at that moment before the process exits.
pub fn clean_up_on_signals() {
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe, and
        // replaces no handler anything else in this process installed.
        let _ = unsafe { sigaction(sig, &action) };
    }
    std::thread::spawn(|| loop {
        std::thread::sleep(Duration::from_millis(100));
        let sig = RECEIVED.load(Ordering::SeqCst);
        if sig != 0 {
            remove_owned(sig);
            std::process::exit(128 + sig);
        }
    });
}

/// Stops what runs in every owned namespace and deletes it.
fn remove_owned(sig: i32) {
    let names: Vec<String> = OWNED.lock().map(|v| v.clone()).unwrap_or_default();
    let name = Signal::try_from(sig).map_or("a signal", |s| s.as_str());
    eprintln!("tern-lab: {name}: removing namespaces {}", names.join(", "));
    crate::lab::state::down(&names);
}
