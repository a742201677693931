//! Where the daemon's log goes: stderr for `tern run` (a terminal, journald, a
//! container's log), and on Windows daily files under `%ProgramData%\tern\logs` for
//! the service, since the Service Control Manager keeps no stderr.

use std::ffi::OsString;
use std::path::PathBuf;

/// The log files' common name; each day's file adds `.YYYY-MM-DD` (UTC).
pub const FILE_PREFIX: &str = "tern.log";
/// How many daily files are kept (the oldest is removed when a new day starts).
pub const FILES_KEPT: usize = 7;

/// Where the log goes.
#[derive(Debug, Clone, Default)]
pub enum Target {
    /// Standard error: human format on a terminal, plain lines without timestamps
    /// otherwise (journald and container runtimes add their own).
    #[default]
    Stderr,
    /// Daily files `tern.log.YYYY-MM-DD` in this directory, with timestamps, the last
    /// [`FILES_KEPT`] kept.
    #[cfg(windows)]
    Files(PathBuf),
}

/// The service's log directory: `<ProgramData>\tern\logs`, with `program_data` the
/// `ProgramData` environment variable (`C:\ProgramData` when unset or empty).
pub fn service_log_dir(program_data: Option<OsString>) -> PathBuf {
    program_data
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(r"C:\ProgramData"))
        .join("tern")
        .join("logs")
}

/// How the log files in `dir` are named, for people (`...\tern.log.YYYY-MM-DD`).
pub fn file_pattern(dir: &std::path::Path) -> String {
    format!(
        "{}{}{FILE_PREFIX}.YYYY-MM-DD",
        dir.display(),
        std::path::MAIN_SEPARATOR
    )
}

/// Installs the global subscriber for `level` (a `tern.yaml` `log:` filter; `RUST_LOG`
/// wins when set). A second call keeps the first subscriber. Fails only when the log
/// files cannot be opened (the directory cannot be created or written).
pub fn init(level: &str, target: &Target) -> Result<(), String> {
    use std::io::IsTerminal;
    let filter = filter(level);
    match target {
        Target::Stderr => {
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
            Ok(())
        }
        #[cfg(windows)]
        Target::Files(dir) => {
            // The appender itself is the writer (no background thread): a daemon logs
            // little, and no line is lost when the service stops.
            let files = daily_files(dir)?;
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(files)
                .with_ansi(false)
                .try_init();
            Ok(())
        }
    }
}

/// Daily files `tern.log.YYYY-MM-DD` in `dir` (created if missing), the last
/// [`FILES_KEPT`] kept.
#[cfg(windows)]
fn daily_files(
    dir: &std::path::Path,
) -> Result<tracing_appender::rolling::RollingFileAppender, String> {
    use tracing_appender::rolling::{RollingFileAppender, Rotation};
    RollingFileAppender::builder()
        .rotation(Rotation::DAILY)
        .filename_prefix(FILE_PREFIX)
        .max_log_files(FILES_KEPT)
        .build(dir)
        .map_err(|e| format!("cannot write log files in {}: {e}", dir.display()))
}

/// The filter: `RUST_LOG` when set and valid, else `level`, else `info`.
fn filter(level: &str) -> tracing_subscriber::EnvFilter {
    let from_env = std::env::var("RUST_LOG")
        .ok()
        .filter(|l| !l.trim().is_empty());
    from_env
        .and_then(|l| tracing_subscriber::EnvFilter::try_new(quiet_clients(&l)).ok())
        .or_else(|| tracing_subscriber::EnvFilter::try_new(quiet_clients(level)).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_logs_under_program_data() {
        let dir = service_log_dir(Some(OsString::from("D:/Data")));
        assert_eq!(dir, PathBuf::from("D:/Data").join("tern").join("logs"));
        for unset in [None, Some(OsString::new())] {
            let dir = service_log_dir(unset);
            assert_eq!(
                dir,
                PathBuf::from(r"C:\ProgramData").join("tern").join("logs")
            );
        }
        let pattern = file_pattern(&PathBuf::from("D:/Data"));
        assert!(pattern.starts_with("D:/Data"), "{pattern}");
        assert!(pattern.ends_with("tern.log.YYYY-MM-DD"), "{pattern}");
    }

    #[cfg(windows)]
    #[test]
    #[allow(clippy::unwrap_used)] // tests: a panic is the failure report
    fn the_service_log_is_a_dated_file() {
        use std::io::Write;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("tern").join("logs");
        let mut files = daily_files(&dir).unwrap();
        files.write_all(b"first line\n").unwrap();
        files.flush().unwrap();
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        let date = names[0].strip_prefix("tern.log.").unwrap();
        // YYYY-MM-DD
        assert_eq!(date.len(), 10, "{date}");
        assert_eq!(date.as_bytes()[4], b'-');
        let text = std::fs::read_to_string(dir.join(&names[0])).unwrap();
        assert_eq!(text, "first line\n");
    }

    #[test]
    fn kubernetes_client_logging_is_off_unless_named() {
        assert_eq!(
            quiet_clients("info"),
            "info,kube_client=off,kube_runtime=off"
        );
        assert_eq!(
            quiet_clients("info,kube_client=debug"),
            "info,kube_client=debug,kube_runtime=off"
        );
    }
}
