//! What systemd hears from the daemon (sd_notify on Linux, nothing elsewhere): READY=1
//! once the control socket listens and the main loop runs, a one-line STATUS= (why BGP
//! does not run yet, or how many peers are up), the watchdog, STOPPING=1. And what the
//! Windows service waits for: the first intent applied.

use std::sync::{Arc, Mutex};

use super::state::State;

/// READY=1 with a STATUS= line.
pub fn notify_ready(status: &str) {
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

/// A new STATUS= line.
pub fn notify_status(status: &str) {
    #[cfg(target_os = "linux")]
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Status(status)]);
    #[cfg(not(target_os = "linux"))]
    let _ = status;
}

/// WATCHDOG=1: the main loop runs.
pub fn notify_watchdog() {
    #[cfg(target_os = "linux")]
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]);
}

/// STOPPING=1.
pub fn notify_stopping() {
    #[cfg(target_os = "linux")]
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
}

/// A one-shot hook for "the first intent is applied".
type IntentHook = Box<dyn FnOnce() + Send>;

/// Who waits for the first intent (the Windows service, to report Running). Global like
/// sd_notify's socket: there is one daemon per process.
static ON_INTENT_APPLIED: Mutex<Option<IntentHook>> = Mutex::new(None);

/// Registers `hook`, called by the next [`notify_intent_applied`].
pub fn on_intent_applied(hook: IntentHook) {
    if let Ok(mut slot) = ON_INTENT_APPLIED.lock() {
        *slot = Some(hook);
    }
}

/// The first intent is applied (BGP runs): calls the registered hook, once.
pub fn notify_intent_applied() {
    let hook = ON_INTENT_APPLIED
        .lock()
        .ok()
        .and_then(|mut slot| slot.take());
    if let Some(hook) = hook {
        hook();
    }
}

/// What `systemctl status tern` shows (sd_notify STATUS=): why BGP does not run yet,
/// or a one-line summary once it does. One line, short: the full text is in
/// `tern status` and the journal.
pub fn status_line(state: &Arc<Mutex<State>>, running: bool) -> String {
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
pub fn update_status(state: &Arc<Mutex<State>>, running: bool, last: &mut String) {
    let now = status_line(state, running);
    if now != *last {
        notify_status(&now);
        *last = now;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn the_intent_hook_runs_once() {
        // Nothing registered: nothing happens.
        notify_intent_applied();
        let calls = Arc::new(AtomicUsize::new(0));
        let c = Arc::clone(&calls);
        on_intent_applied(Box::new(move || {
            c.fetch_add(1, Ordering::SeqCst);
        }));
        notify_intent_applied();
        notify_intent_applied();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
