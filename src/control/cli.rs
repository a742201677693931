//! The inspection commands: send one request, print the answer as a table or as the
//! daemon's JSON, and exit with a code scripts can use: 0 fine; 1 a negative answer
//! (not ready, a finding of severity error, FIB differences, reload rejected); 3 the
//! daemon is not running; 4 permission denied; 5 any other error.

use std::path::Path;
use std::process::ExitCode;

use serde::de::DeserializeOwned;

use super::client::{self, ClientError};
use super::proto::{
    DiagnoseReply, FibReply, HealthReply, PeersReply, ReloadReply, Request, RoutesReply,
    StatusReply,
};
use super::render;

/// A command of the CLI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliCommand {
    /// `tern status`.
    Status,
    /// `tern peers [ADDR]`.
    Peers(Option<String>),
    /// `tern routes [PREFIX] [--peer ADDR] [--advertised]`.
    Routes {
        /// Prefix or address.
        prefix: Option<String>,
        /// Peer.
        peer: Option<String>,
        /// Adj-RIB-Out.
        advertised: bool,
    },
    /// `tern fib`.
    Fib,
    /// `tern diagnose`.
    Diagnose,
    /// `tern health [--live] [--ready]`.
    Health {
        /// Check liveness.
        live: bool,
        /// Check readiness.
        ready: bool,
    },
    /// `tern reload`.
    Reload,
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Tables for people.
    Text,
    /// The daemon's JSON.
    Json,
}

fn decode<T: DeserializeOwned>(v: &serde_json::Value) -> Result<T, String> {
    serde_json::from_value(v.clone()).map_err(|e| format!("unexpected answer from the daemon: {e}"))
}

/// Runs `command` against the daemon at `socket`.
pub fn run(command: CliCommand, socket: &Path, output: Output) -> ExitCode {
    let request = match &command {
        CliCommand::Status => Request::Status,
        CliCommand::Peers(a) => Request::Peers { address: a.clone() },
        CliCommand::Routes {
            prefix,
            peer,
            advertised,
        } => Request::Routes {
            prefix: prefix.clone(),
            peer: peer.clone(),
            advertised: *advertised,
        },
        CliCommand::Fib => Request::Fib,
        CliCommand::Diagnose => Request::Diagnose,
        CliCommand::Health { .. } => Request::Health,
        CliCommand::Reload => Request::Reload,
    };
    let value = match client::request(socket, request) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("tern: {e}");
            return ExitCode::from(match e {
                ClientError::NotRunning(_) => 3,
                ClientError::PermissionDenied(_) => 4,
                _ => 5,
            });
        }
    };
    match render_and_judge(&command, &value) {
        Ok((text, good)) => {
            match output {
                Output::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string())
                ),
                Output::Text => print!("{text}"),
            }
            if good {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("tern: {e}");
            ExitCode::from(5)
        }
    }
}

/// The text and whether the answer is a positive one.
fn render_and_judge(command: &CliCommand, v: &serde_json::Value) -> Result<(String, bool), String> {
    Ok(match command {
        CliCommand::Status => (render::status(&decode::<StatusReply>(v)?), true),
        CliCommand::Peers(_) => (render::peers(&decode::<PeersReply>(v)?), true),
        CliCommand::Routes { .. } => (render::routes(&decode::<RoutesReply>(v)?), true),
        CliCommand::Fib => {
            let r: FibReply = decode(v)?;
            let good = r.missing.is_empty() && r.failures.is_empty();
            (render::fib(&r), good)
        }
        CliCommand::Diagnose => {
            let r: DiagnoseReply = decode(v)?;
            let good = !r.findings.iter().any(|f| f.severity == "error");
            (render::diagnose(&r), good)
        }
        CliCommand::Health { live, ready } => {
            let r: HealthReply = decode(v)?;
            let (want_live, want_ready) = if !live && !ready {
                (true, true)
            } else {
                (*live, *ready)
            };
            let good = (!want_live || r.live) && (!want_ready || r.ready);
            (render::health(&r), good)
        }
        CliCommand::Reload => {
            let r: ReloadReply = decode(v)?;
            (
                format!(
                    "{}: {}\n",
                    if r.accepted { "reloaded" } else { "rejected" },
                    r.message
                ),
                r.accepted,
            )
        }
    })
}
