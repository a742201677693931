//! The Windows service's decisions, kept free of Windows calls so they are tested on
//! every platform: the restart-on-failure table registered at install, what the
//! Service Control Manager hears while the daemon starts (StartPending until the first
//! intent is applied, Running after [`START_GRACE`] at the latest), and what a failed
//! Service Control Manager call means to the person who ran `tern service`.

use std::time::Duration;

/// Restart delays after the first, second and later failures (the SCM repeats the last
/// action for every failure after the table's end). Two quick tries catch a transient
/// cause (the pipe still held by the dying process); then every 10 s, never a tight loop.
pub const RESTART_DELAYS: [Duration; 3] = [
    Duration::from_secs(2),
    Duration::from_secs(2),
    Duration::from_secs(10),
];

/// A day without a failure resets the failure count, so the next failure is "first".
pub const FAILURE_RESET_PERIOD: Duration = Duration::from_secs(24 * 60 * 60);

/// How long the service stays StartPending without an applied configuration. While
/// it is StartPending, services depending on tern wait and the SCM may refuse Stop
/// (ControlService documents ERROR_SERVICE_CANNOT_ACCEPT_CTRL for a start-pending
/// service); a daemon that waits for its datastore is up and answering, so after this
/// it says Running and `tern status` tells why BGP is off.
pub const START_GRACE: Duration = Duration::from_secs(30);

/// The wait hint sent with each StartPending checkpoint: the SCM expects the next
/// report within it. Reports go out every second; the slack covers a starved thread.
pub const START_WAIT_HINT: Duration = Duration::from_secs(10);

/// What the service reports while the daemon starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartReport {
    /// Still starting: StartPending with this wait hint.
    Pending {
        /// Time until the next report is due.
        wait_hint: Duration,
    },
    /// The first intent is applied: BGP runs.
    RunningConfigured,
    /// No configuration applied within [`START_GRACE`]: Running anyway (the control pipe
    /// answers and says why), so Stop works and dependants start.
    RunningUnconfigured,
}

/// The report `elapsed` after the start, with the first intent applied or not.
pub fn start_report(elapsed: Duration, intent_applied: bool) -> StartReport {
    if intent_applied {
        StartReport::RunningConfigured
    } else if elapsed >= START_GRACE {
        StartReport::RunningUnconfigured
    } else {
        StartReport::Pending {
            wait_hint: START_WAIT_HINT,
        }
    }
}

/// What `tern service` was doing when a Service Control Manager call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `tern service install`.
    Install,
    /// `tern service uninstall`.
    Uninstall,
}

/// ERROR_INVALID_LEVEL: the SCM does not know a ChangeServiceConfig2 setting.
const INVALID_LEVEL: i32 = 124;

/// Whether a failed optional install setting (restart after an error exit, not only
/// after a crash) may be skipped with a warning: only when the Service Control Manager
/// does not know the setting at all (Wine's does not; Windows has it since Vista).
pub fn setting_unsupported(code: Option<i32>) -> bool {
    code == Some(INVALID_LEVEL)
}

/// ERROR_ACCESS_DENIED.
const ACCESS_DENIED: i32 = 5;
/// ERROR_SERVICE_DOES_NOT_EXIST.
const SERVICE_DOES_NOT_EXIST: i32 = 1060;
/// ERROR_SERVICE_MARKED_FOR_DELETE.
const SERVICE_MARKED_FOR_DELETE: i32 = 1072;
/// ERROR_SERVICE_EXISTS.
const SERVICE_EXISTS: i32 = 1073;

/// The message for a failed `action`: `code` is the Windows error number (when the
/// failure was a Windows call), `detail` the error's own text. Only "access denied"
/// asks for an elevated prompt; the other known causes say what is going on instead.
pub fn failure_message(action: Action, code: Option<i32>, detail: &str) -> String {
    let verb = match action {
        Action::Install => "install",
        Action::Uninstall => "remove",
    };
    let why = match (code, action) {
        (Some(ACCESS_DENIED), _) => {
            "access denied: run it from an elevated prompt (Run as administrator)".to_string()
        }
        (Some(SERVICE_MARKED_FOR_DELETE), Action::Install) => {
            "an earlier `tern service uninstall` has not finished: the old service is still \
             stopping, or a program holds it open (services.msc, Event Viewer, `sc` in a loop). \
             Close those, wait until `sc query tern` says the service does not exist, then \
             install again"
                .to_string()
        }
        (Some(SERVICE_MARKED_FOR_DELETE), Action::Uninstall) => {
            "the service is already being removed: it disappears once it has stopped and \
             every program holding it open (services.msc, Event Viewer) is closed"
                .to_string()
        }
        (Some(SERVICE_EXISTS), _) => {
            "a service named tern is already installed: run `tern service uninstall` first \
             (or keep it and `sc start tern`)"
                .to_string()
        }
        (Some(SERVICE_DOES_NOT_EXIST), _) => "no service named tern is installed".to_string(),
        // Without the " (os error N)" std adds: the number follows once, below.
        (Some(c), _) => detail
            .strip_suffix(&format!(" (os error {c})"))
            .unwrap_or(detail)
            .to_string(),
        (None, _) => detail.to_string(),
    };
    match code {
        Some(c) => format!("tern: cannot {verb} the service: {why} (Windows error {c})"),
        None => format!("tern: cannot {verb} the service: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_quickly_twice_then_every_ten_seconds_and_forgets_after_a_day() {
        let secs: Vec<u64> = RESTART_DELAYS.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [2, 2, 10]);
        assert_eq!(FAILURE_RESET_PERIOD.as_secs(), 86_400);
        // The SCM takes milliseconds and seconds as u32; the crate panics beyond.
        assert!(RESTART_DELAYS
            .iter()
            .all(|d| u32::try_from(d.as_millis()).is_ok()));
        assert!(u32::try_from(FAILURE_RESET_PERIOD.as_secs()).is_ok());
    }

    #[test]
    fn pending_until_the_first_intent_or_the_grace_runs_out() {
        let pending = StartReport::Pending {
            wait_hint: START_WAIT_HINT,
        };
        assert_eq!(start_report(Duration::ZERO, false), pending);
        assert_eq!(start_report(Duration::from_secs(29), false), pending);
        assert_eq!(
            start_report(Duration::from_secs(1), true),
            StartReport::RunningConfigured
        );
        assert_eq!(
            start_report(START_GRACE, false),
            StartReport::RunningUnconfigured
        );
        assert_eq!(
            start_report(Duration::from_secs(600), false),
            StartReport::RunningUnconfigured
        );
        // Applied after the grace: still the configured kind (the log says so).
        assert_eq!(
            start_report(Duration::from_secs(600), true),
            StartReport::RunningConfigured
        );
        // The hint outlasts the one-second report interval.
        assert!(START_WAIT_HINT > Duration::from_secs(1));
    }

    #[test]
    fn only_access_denied_asks_for_an_elevated_prompt() {
        let denied = failure_message(Action::Install, Some(5), "Access is denied.");
        assert!(denied.contains("elevated prompt"), "{denied}");
        assert!(denied.contains("install"), "{denied}");
        for code in [1072, 1073, 1060, 87] {
            for action in [Action::Install, Action::Uninstall] {
                let m = failure_message(action, Some(code), "something");
                assert!(!m.contains("elevated"), "{code}: {m}");
                assert!(m.contains(&format!("Windows error {code}")), "{m}");
            }
        }
    }

    #[test]
    fn marked_for_deletion_and_exists_say_what_is_happening() {
        let again = failure_message(Action::Install, Some(1072), "");
        assert!(again.contains("has not finished"), "{again}");
        assert!(again.contains("services.msc"), "{again}");
        assert!(again.contains("sc query tern"), "{again}");
        let removing = failure_message(Action::Uninstall, Some(1072), "");
        assert!(removing.contains("already being removed"), "{removing}");
        let exists = failure_message(Action::Install, Some(1073), "");
        assert!(exists.contains("tern service uninstall"), "{exists}");
        let missing = failure_message(Action::Uninstall, Some(1060), "");
        assert!(missing.contains("no service named tern"), "{missing}");
    }

    #[test]
    fn other_errors_keep_their_own_text() {
        let m = failure_message(
            Action::Install,
            Some(87),
            "The parameter is incorrect. (os error 87)",
        );
        assert_eq!(
            m,
            "tern: cannot install the service: The parameter is incorrect. (Windows error 87)"
        );
        let m = failure_message(
            Action::Uninstall,
            None,
            "start argument contains a nul byte",
        );
        assert_eq!(
            m,
            "tern: cannot remove the service: start argument contains a nul byte"
        );
    }

    #[test]
    fn only_an_unknown_setting_is_skipped() {
        assert!(setting_unsupported(Some(124)));
        for other in [None, Some(5), Some(87), Some(1072)] {
            assert!(!setting_unsupported(other), "{other:?}");
        }
    }
}
