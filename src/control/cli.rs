//! The inspection commands: send one request, print the answer as text or as the
//! daemon's JSON, and exit with a code scripts and probes can use:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | the answer is good |
//! | 1 | the answer is negative: not live / not ready, a diagnose finding of severity `error`, FIB routes missing or refused, reload rejected |
//! | 3 | the daemon is not running (no socket, or nobody listening) |
//! | 4 | permission denied (the socket is root-only; actions need root) |
//! | 5 | anything else: protocol error, timeout, an error from the daemon |

use std::path::Path;
use std::process::ExitCode;

use serde::de::DeserializeOwned;

use super::client::{self, ClientError};
use super::proto::{
    ActionReply, DiagnoseReply, FibReply, HealthReply, MonitorEvent, ReloadReply, Render, Request,
};
use super::render;

/// A command of the CLI (what the user asked, before it becomes a [`Request`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliCommand {
    /// `tern status`.
    Status,
    /// `tern peers [ADDR]`.
    Peers {
        /// Only this peer.
        address: Option<String>,
    },
    /// `tern routes [PREFIX] [--peer ADDR] [--advertised]`.
    Routes {
        /// Only this prefix, or the routes covering this address.
        prefix: Option<String>,
        /// Only routes from (with `advertised`: to) this peer.
        peer: Option<String>,
        /// The Adj-RIB-Out of `peer` instead of the Loc-RIB.
        advertised: bool,
        /// Every path of each prefix, with why it won or lost.
        all: bool,
        /// Totals per family and per peer instead of routes.
        count: bool,
        /// Only this family (`ipv4`, `ipv6`).
        family: Option<String>,
        /// What this peer sent instead of the Loc-RIB.
        received: Option<String>,
    },
    /// `tern fib`.
    Fib,
    /// `tern diagnose`.
    Diagnose,
    /// `tern health [--live] [--ready]`: neither or both flags check both.
    Health {
        /// Succeed only when live.
        live: bool,
        /// Succeed only when ready.
        ready: bool,
    },
    /// `tern reload`.
    Reload,
    /// `tern reset|disable|enable PEER`.
    PeerAction {
        /// The peer.
        address: String,
        /// `reset`, `soft-in`, `soft-out`, `disable` or `enable`.
        action: String,
        /// NOTIFICATION text.
        message: Option<String>,
    },
    /// `tern log-level LEVEL`.
    LogLevel {
        /// The new filter.
        level: String,
    },
    /// `tern drain` / `tern undrain`.
    Drain {
        /// Drain, or stop.
        on: bool,
    },
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Text for people.
    Text,
    /// Text with more columns (`status`: vtysh's counters); other commands as text.
    Wide,
    /// The daemon's JSON, pretty-printed.
    Json,
    /// The same document as YAML.
    Yaml,
}

/// Prints a document as pretty JSON or (with [`Output::Yaml`]) YAML on stdout.
pub fn print_document(v: &serde_json::Value, output: Output) -> Result<(), String> {
    let text = if output == Output::Yaml {
        serde_saphyr::to_string(v).map_err(|e| format!("cannot print the answer as YAML: {e}"))?
    } else {
        let mut s = serde_json::to_string_pretty(v)
            .map_err(|e| format!("cannot print the answer as JSON: {e}"))?;
        s.push('\n');
        s
    };
    print!("{text}");
    Ok(())
}

/// Exit code for a negative answer.
const NEGATIVE: u8 = 1;
/// Exit code when the daemon is not running.
const NOT_RUNNING: u8 = 3;
/// Exit code when the socket is not ours to use.
const DENIED: u8 = 4;
/// Exit code for every other failure.
const FAILED: u8 = 5;

impl CliCommand {
    fn request(&self) -> Request {
        match self {
            CliCommand::Status => Request::Status,
            CliCommand::Peers { address } => Request::Peers {
                address: address.clone(),
            },
            CliCommand::Routes {
                prefix,
                peer,
                advertised,
                all,
                count,
                family,
                received,
            } => Request::Routes {
                prefix: prefix.clone(),
                peer: peer.clone(),
                advertised: *advertised,
                all: *all,
                count: *count,
                family: family.clone(),
                received: received.clone(),
                render: None,
            },
            CliCommand::Fib => Request::Fib,
            CliCommand::Diagnose => Request::Diagnose,
            CliCommand::Health { .. } => Request::Health,
            CliCommand::Reload => Request::Reload,
            CliCommand::PeerAction {
                address,
                action,
                message,
            } => Request::PeerAction {
                address: address.clone(),
                action: action.clone(),
                message: message.clone(),
            },
            CliCommand::LogLevel { level } => Request::LogLevel {
                level: level.clone(),
            },
            CliCommand::Drain { on } => Request::Drain { on: *on },
        }
    }
}

/// Runs `command` against the daemon at `socket`, prints the answer on stdout (errors
/// on stderr as `tern: <message>`) and returns the exit code (see the module doc).
pub fn run(command: CliCommand, socket: &Path, output: Output) -> ExitCode {
    let mut request = command.request();
    if let Request::Routes { render, .. } = &mut request {
        // The daemon renders what is printed: 100,000 routes cross the socket as the
        // text people see, not as JSON for this process to decode and lay out again.
        *render = match output {
            Output::Text | Output::Wide => Some(Render::Table),
            Output::Json => Some(Render::Json),
            Output::Yaml => None,
        };
    }
    let judged = client::request_line(socket, request).and_then(|line| match output {
        // The daemon's pretty document; one of an earlier version sends the document.
        Output::Json if matches!(command, CliCommand::Routes { .. }) => {
            match client::result_of::<String>(socket, &line) {
                Ok(doc) => {
                    print!("{doc}");
                    Ok(true)
                }
                Err(_) => {
                    let value: serde_json::Value = client::result_of(socket, &line)?;
                    print_document(&value, output).map_err(ClientError::Daemon)?;
                    Ok(true)
                }
            }
        }
        Output::Json | Output::Yaml => {
            let value: serde_json::Value = client::result_of(socket, &line)?;
            // Printed before judging, so a script sees the answer even when the
            // verdict cannot be reached.
            print_document(&value, output).map_err(ClientError::Daemon)?;
            judge(&command, &value).map_err(ClientError::Daemon)
        }
        Output::Text | Output::Wide => {
            let (text, good) = text(&command, socket, &line, output == Output::Wide)?;
            print!("{text}");
            Ok(good)
        }
    });
    match judged {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(NEGATIVE),
        Err(e) => {
            eprintln!("tern: {e}");
            ExitCode::from(match e {
                ClientError::NotRunning(_) => NOT_RUNNING,
                ClientError::PermissionDenied(_) => DENIED,
                ClientError::Daemon(_) | ClientError::Protocol(_) | ClientError::Timeout(_) => {
                    FAILED
                }
            })
        }
    }
}

/// `tern monitor [--peer ADDR] [--prefix P]`: prints each session and route change as
/// it happens (text, or one JSON object per line with `-o json`, a YAML document each
/// with `-o yaml`) until interrupted. When the daemon goes, the stream ends with exit
/// code 3.
pub fn monitor(
    socket: &Path,
    peer: Option<String>,
    prefix: Option<String>,
    output: Output,
) -> ExitCode {
    let request = Request::Monitor { peer, prefix };
    let printed = client::stream(socket, request, |e: MonitorEvent| {
        match output {
            Output::Json => match serde_json::to_string(&e) {
                Ok(line) => println!("{line}"),
                Err(err) => eprintln!("tern: cannot print an event: {err}"),
            },
            Output::Yaml => match serde_saphyr::to_string(&e) {
                Ok(doc) => print!("---\n{doc}"),
                Err(err) => eprintln!("tern: cannot print an event: {err}"),
            },
            Output::Text | Output::Wide => println!("{}", render::monitor_event(&e)),
        }
        true
    });
    match printed {
        Ok(()) => {
            eprintln!("tern: the daemon closed the stream (it stopped or restarted)");
            ExitCode::from(NOT_RUNNING)
        }
        Err(e) => {
            eprintln!("tern: {e}");
            ExitCode::from(match e {
                ClientError::NotRunning(_) => NOT_RUNNING,
                ClientError::PermissionDenied(_) => DENIED,
                _ => FAILED,
            })
        }
    }
}

fn decode<T: DeserializeOwned>(v: &serde_json::Value) -> Result<T, String> {
    T::deserialize(v).map_err(|e| {
        format!("unexpected answer from the daemon (is it the same tern version?): {e}")
    })
}

/// Whether the answer is a positive one. Commands that only show things are always
/// positive, and their answer need not be decoded.
fn judge(command: &CliCommand, v: &serde_json::Value) -> Result<bool, String> {
    match command {
        CliCommand::Status | CliCommand::Peers { .. } | CliCommand::Routes { .. } => Ok(true),
        CliCommand::Fib => Ok(fib_good(&decode(v)?)),
        CliCommand::Diagnose => Ok(diagnose_good(&decode(v)?)),
        CliCommand::Health { live, ready } => Ok(health_good(&decode(v)?, *live, *ready)),
        CliCommand::Reload => Ok(decode::<ReloadReply>(v)?.accepted),
        CliCommand::PeerAction { .. } | CliCommand::LogLevel { .. } | CliCommand::Drain { .. } => {
            decode::<ActionReply>(v).map(|_| true)
        }
    }
}

/// The text for people and whether the answer is a positive one.
fn text(
    command: &CliCommand,
    socket: &Path,
    line: &str,
    wide: bool,
) -> Result<(String, bool), ClientError> {
    // Decoded straight from the answer line into the reply's type.
    fn of<T: DeserializeOwned>(socket: &Path, line: &str) -> Result<T, ClientError> {
        client::result_of(socket, line)
    }
    Ok(match command {
        CliCommand::Status if wide => (render::status_wide(&of(socket, line)?), true),
        CliCommand::Status => (render::status(&of(socket, line)?), true),
        CliCommand::Peers { address } => (
            render::peers_with(&of(socket, line)?, address.is_some()),
            true,
        ),
        CliCommand::Routes {
            count, received, ..
        } => match client::result_of::<String>(socket, line) {
            // The daemon's table.
            Ok(table) => (table, true),
            // A daemon of an earlier version sends the document.
            Err(_) if *count => (render::routes_count(&of(socket, line)?), true),
            Err(_) if received.is_some() => (render::received(&of(socket, line)?), true),
            Err(_) => (render::routes(&of(socket, line)?), true),
        },
        CliCommand::Fib => {
            let r: FibReply = of(socket, line)?;
            (render::fib(&r), fib_good(&r))
        }
        CliCommand::Diagnose => {
            let r: DiagnoseReply = of(socket, line)?;
            (render::diagnose(&r), diagnose_good(&r))
        }
        CliCommand::Health { live, ready } => {
            let r: HealthReply = of(socket, line)?;
            (render::health(&r), health_good(&r, *live, *ready))
        }
        CliCommand::Reload => {
            let r: ReloadReply = of(socket, line)?;
            (render::reload(&r), r.accepted)
        }
        CliCommand::PeerAction { .. } | CliCommand::LogLevel { .. } | CliCommand::Drain { .. } => {
            let r: ActionReply = of(socket, line)?;
            (format!("{}\n", r.done), true)
        }
    })
}

/// Unexpected routes are not a failure: during a graceful restart they are tern's
/// own routes kept on purpose.
fn fib_good(r: &FibReply) -> bool {
    r.missing.is_empty() && r.failures.is_empty()
}

fn diagnose_good(r: &DiagnoseReply) -> bool {
    !r.findings.iter().any(|f| f.severity == "error")
}

/// `--live` asks for liveness, `--ready` for readiness; neither (or both) asks for both.
fn health_good(r: &HealthReply, live: bool, ready: bool) -> bool {
    let (want_live, want_ready) = if live || ready {
        (live, ready)
    } else {
        (true, true)
    };
    (!want_live || r.live) && (!want_ready || r.ready)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_flags_choose_what_must_hold() {
        let live_only = HealthReply {
            live: true,
            ready: false,
            reason: "0 of 1 BGP peers established".into(),
        };
        assert!(health_good(&live_only, true, false));
        assert!(!health_good(&live_only, false, true));
        assert!(!health_good(&live_only, true, true));
        assert!(!health_good(&live_only, false, false));
    }

    #[test]
    fn json_verdicts_follow_the_answer() {
        let fib = serde_json::json!({"installed": [], "missing": [], "unexpected": [{"prefix": "198.18.4.0/26", "kind": "unicast", "next_hops": [], "table": 254}], "failures": []});
        assert_eq!(judge(&CliCommand::Fib, &fib), Ok(true));
        let diag = serde_json::json!({"findings": [{"kind": "k", "subject": "s", "evidence": "e", "suggestion": "f", "severity": "error"}]});
        assert_eq!(judge(&CliCommand::Diagnose, &diag), Ok(false));
        // Shown as they are, even if this CLI does not know their shape.
        assert_eq!(
            judge(&CliCommand::Status, &serde_json::json!({"new": 1})),
            Ok(true)
        );
        assert!(judge(&CliCommand::Reload, &serde_json::json!({})).is_err());
    }
}
