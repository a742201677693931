//! The CLI's end of the control socket: one request, one answer, with errors that say
//! what to do (daemon not running, socket root-only, daemon error).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::proto::{Request, RequestEnvelope, ResponseEnvelope, VERSION};

const TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens on the socket.
    #[error("tern is not running: no control socket at {0} (start it with `systemctl start tern`, or pass --socket)")]
    NotRunning(String),
    /// The socket is root-only.
    #[error("permission denied on {0}: the control socket is root-only; run with sudo")]
    PermissionDenied(String),
    /// The daemon answered with an error.
    #[error("{0}")]
    Daemon(String),
    /// Something else went wrong on the socket.
    #[error("control socket {0}: {1}")]
    Protocol(String, String),
}

/// The socket to use: `$TERN_SOCKET`, else the platform default.
pub fn default_socket() -> PathBuf {
    std::env::var_os("TERN_SOCKET")
        .map(PathBuf::from)
        .unwrap_or_else(tern_config::daemon::default_control_socket)
}

/// Sends `request` and returns the daemon's result.
pub fn request(socket: &Path, request: Request) -> Result<serde_json::Value, ClientError> {
    let name = socket.display().to_string();
    let open_err = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            ClientError::NotRunning(name.clone())
        }
        std::io::ErrorKind::PermissionDenied => ClientError::PermissionDenied(name.clone()),
        _ => ClientError::Protocol(name.clone(), e.to_string()),
    };
    #[cfg(unix)]
    let stream = {
        let s = std::os::unix::net::UnixStream::connect(socket).map_err(open_err)?;
        let _ = s.set_read_timeout(Some(TIMEOUT));
        let _ = s.set_write_timeout(Some(TIMEOUT));
        s
    };
    #[cfg(windows)]
    let stream = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(socket)
        .map_err(open_err)?;
    let proto = |e: String| ClientError::Protocol(name.clone(), e);
    let mut line = serde_json::to_vec(&RequestEnvelope {
        version: VERSION,
        request,
    })
    .map_err(|e| proto(e.to_string()))?;
    line.push(b'\n');
    let mut w = &stream;
    w.write_all(&line).map_err(|e| proto(e.to_string()))?;
    let mut answer = String::new();
    BufReader::new(&stream)
        .read_line(&mut answer)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                proto(format!("no answer within {}s", TIMEOUT.as_secs()))
            }
            _ => proto(e.to_string()),
        })?;
    if answer.is_empty() {
        return Err(proto(
            "the daemon closed the connection without answering".into(),
        ));
    }
    let env: ResponseEnvelope =
        serde_json::from_str(&answer).map_err(|e| proto(format!("unreadable answer: {e}")))?;
    match (env.ok, env.result, env.error) {
        (true, Some(v), _) => Ok(v),
        (_, _, Some(e)) if e.starts_with("permission denied") => {
            Err(ClientError::PermissionDenied(name))
        }
        (_, _, Some(e)) => Err(ClientError::Daemon(e)),
        _ => Err(proto("an answer with neither result nor error".into())),
    }
}
