//! Where the daemon's log goes and how its lines look: stderr for `tern run` (a
//! terminal, journald, a container's log), and on Windows daily files under
//! `%ProgramData%\tern\logs` for the service, since the Service Control Manager keeps
//! no stderr.
//!
//! Under systemd each line starts with its sd-daemon priority (`<4>` for a warning)
//! when stderr is the journal's stream, so `journalctl -p warning -u tern` shows the
//! warnings: a plain line would be stored at the unit's default, info. The prefix
//! keeps the daemon free of a journald client (tracing-journald is not in the lock
//! file) and works the same with `log_format: json`, journald stripping it.
//! `log_format: json` writes one flat JSON object per line (tracing-subscriber's own
//! JSON format) for Kubernetes log pipelines.

use std::ffi::OsString;
use std::path::PathBuf;

pub use tern_config::LogFormat;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

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
/// wins when set) in text format. See [`init_with`].
pub fn init(level: &str, target: &Target) -> Result<(), String> {
    init_with(level, LogFormat::Text, target)
}

/// Installs the global subscriber for `level` and `format` (`log:` and `log_format:`
/// in `tern.yaml`). A second call keeps the first subscriber. Fails only when the log
/// files cannot be opened (the directory cannot be created or written).
pub fn init_with(level: &str, format: LogFormat, target: &Target) -> Result<(), String> {
    use std::io::IsTerminal;
    let sub = match target {
        Target::Stderr => {
            let tty = std::io::stderr().is_terminal();
            let style = Style {
                format,
                journal: journal_stream(),
                ansi: tty,
                time: tty,
            };
            subscriber(filter(level), style, std::io::stderr)
        }
        #[cfg(windows)]
        Target::Files(dir) => {
            // The appender itself is the writer (no background thread): a daemon logs
            // little, and no line is lost when the service stops.
            let files = daily_files(dir)?;
            let style = Style {
                format,
                journal: false,
                ansi: false,
                time: true,
            };
            subscriber(filter(level), style, files)
        }
    };
    // try_init also forwards the `log` crate's records (rustls, the HTTP stack).
    let _ = tracing_subscriber::util::SubscriberInitExt::try_init(sub);
    Ok(())
}

/// How lines look.
#[derive(Debug, Clone, Copy)]
struct Style {
    format: LogFormat,
    /// Each line starts with its syslog priority (`<4>`), for journald.
    journal: bool,
    ansi: bool,
    /// Text lines carry a timestamp (JSON lines always do: log pipelines want it).
    time: bool,
}

type Boxed = Box<dyn tracing::Subscriber + Send + Sync>;

/// The subscriber for `style`, writing to `writer`.
fn subscriber<W>(filter: tracing_subscriber::EnvFilter, style: Style, writer: W) -> Boxed
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(style.ansi);
    let j = style.journal;
    match (style.format, style.time) {
        // Flat objects ({"timestamp","level","message",fields...,"target"}): what
        // Kubernetes log pipelines (Fluent Bit, Vector, Loki) parse without a rule.
        (LogFormat::Json, _) => {
            let b = b
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .with_span_list(false)
                .map_event_format(|f| Priority(f, j))
                .with_filter_reloading();
            keep_reload(b.reload_handle());
            Box::new(b.finish())
        }
        (LogFormat::Text, true) => {
            let b = b
                .map_event_format(|f| Priority(f, j))
                .with_filter_reloading();
            keep_reload(b.reload_handle());
            Box::new(b.finish())
        }
        (LogFormat::Text, false) => {
            let b = b
                .without_time()
                .map_event_format(|f| Priority(f, j))
                .with_filter_reloading();
            keep_reload(b.reload_handle());
            Box::new(b.finish())
        }
    }
}

/// Whether stderr is journald's stream: systemd sets `JOURNAL_STREAM` to the stream's
/// `device:inode`; a child that inherited the variable with another stderr must not
/// prefix (sd-daemon(3)).
#[cfg(target_os = "linux")]
fn journal_stream() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(want) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    std::fs::metadata("/proc/self/fd/2")
        .is_ok_and(|m| want.trim() == format!("{}:{}", m.dev(), m.ino()))
}

#[cfg(not(target_os = "linux"))]
fn journal_stream() -> bool {
    false
}

/// The syslog priority journald reads from a line's `<N>` prefix (sd-daemon(3)):
/// `journalctl -p warning` then shows warnings and errors only.
fn priority(level: &tracing::Level) -> u8 {
    match *level {
        tracing::Level::ERROR => 3,
        tracing::Level::WARN => 4,
        tracing::Level::INFO => 6,
        _ => 7,
    }
}

/// An event format that starts each line with its `<N>` priority when `.1` is set.
struct Priority<F>(F, bool);

impl<S, N, F> FormatEvent<S, N> for Priority<F>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        if self.1 {
            write!(writer, "<{}>", priority(event.metadata().level()))?;
        }
        self.0.format_event(ctx, writer, event)
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
/// Replaces the installed subscriber's filter (`tern log-level`).
type Reload = Box<dyn Fn(tracing_subscriber::EnvFilter) -> Result<(), String> + Send + Sync>;

/// The first installed subscriber's filter switch (a second `init` keeps the first
/// subscriber, so its switch too).
static RELOAD: std::sync::OnceLock<Reload> = std::sync::OnceLock::new();

fn keep_reload<S: 'static>(
    h: tracing_subscriber::reload::Handle<tracing_subscriber::EnvFilter, S>,
) {
    let _ = RELOAD.set(Box::new(move |f| h.reload(f).map_err(|e| e.to_string())));
}

/// Sets the log filter at run time (`tern log-level`): a level (`debug`) or a filter
/// (`tern=debug,info`), as `log:` in `tern.yaml`; it lasts until tern restarts.
/// Returns what was done.
pub fn set_filter(level: &str) -> Result<String, String> {
    let level = level.trim();
    let f = tracing_subscriber::EnvFilter::try_new(quiet_clients(level))
        .map_err(|e| format!("{level:?} is not a log level or filter ({e}); use trace, debug, info, warn, error, off or a filter such as tern=debug,info"))?;
    let reload = RELOAD
        .get()
        .ok_or_else(|| "the log is not set up for changes".to_string())?;
    reload(f)?;
    tracing::info!("log filter set to {level:?}");
    Ok(format!(
        "log filter set to {level:?} until tern restarts (then `log:` in tern.yaml, or RUST_LOG, applies)"
    ))
}

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

    /// Lines written to a shared buffer.
    #[derive(Clone, Default)]
    struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::ErrorKind::Other)?
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The lines `style` gives for one event at each level.
    #[allow(clippy::unwrap_used)] // tests: a panic is the failure report
    fn lines(style: Style) -> Vec<String> {
        let buf = Buf::default();
        let out = buf.clone();
        let sub = subscriber(
            tracing_subscriber::EnvFilter::new("debug"),
            style,
            move || out.clone(),
        );
        tracing::subscriber::with_default(sub, || {
            tracing::error!(peer = "198.51.100.1", "session down");
            tracing::warn!(routes = 3, "kernel refused");
            tracing::info!("started");
            tracing::debug!("detail");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        text.lines().map(String::from).collect()
    }

    /// Under journald each line starts with its syslog priority, so `journalctl -p
    /// warning` filters: error 3, warning 4, info 6, debug 7.
    #[test]
    fn journal_lines_start_with_their_priority() {
        let style = Style {
            format: LogFormat::Text,
            journal: true,
            ansi: false,
            time: false,
        };
        let got = lines(style);
        assert_eq!(got.len(), 4, "{got:?}");
        for (line, prefix) in got
            .iter()
            .zip(["<3>ERROR", "<4> WARN", "<6> INFO", "<7>DEBUG"])
        {
            assert!(
                line.starts_with(prefix),
                "{line:?} should start with {prefix:?}"
            );
        }
        assert!(
            got[0].ends_with("session down peer=\"198.51.100.1\""),
            "{got:?}"
        );
        let plain = lines(Style {
            journal: false,
            ..style
        });
        assert!(plain[0].starts_with("ERROR"), "{plain:?}");
    }

    /// `log_format: json`: one flat object per line with timestamp, level, message,
    /// the event's fields and target; under journald the priority comes first and
    /// journald strips it.
    #[test]
    #[allow(clippy::unwrap_used)] // tests: a panic is the failure report
    fn json_lines_are_flat_objects() {
        let style = Style {
            format: LogFormat::Json,
            journal: false,
            ansi: false,
            time: false,
        };
        let got = lines(style);
        assert_eq!(got.len(), 4, "{got:?}");
        let first: serde_json::Value = serde_json::from_str(&got[0]).unwrap();
        assert_eq!(first["level"], "ERROR", "{first}");
        assert_eq!(first["message"], "session down", "{first}");
        assert_eq!(first["peer"], "198.51.100.1", "{first}");
        assert!(first["timestamp"].is_string(), "{first}");
        assert!(
            first["target"].as_str().unwrap().starts_with("tern"),
            "{first}"
        );
        let second: serde_json::Value = serde_json::from_str(&got[1]).unwrap();
        assert_eq!(second["routes"], 3, "{second}");
        let journal = lines(Style {
            journal: true,
            ..style
        });
        let rest = journal[1].strip_prefix("<4>").unwrap();
        let v: serde_json::Value = serde_json::from_str(rest).unwrap();
        assert_eq!(v["level"], "WARN", "{v}");
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
