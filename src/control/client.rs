//! The CLI's end of the control socket: one request, one answer, synchronous, with a
//! 10 s limit and errors that say what to do (daemon not running, socket root-only,
//! daemon error).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::proto::{Request, RequestEnvelope, VERSION};

/// How long the CLI waits for the daemon to answer.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long it waits for `tern routes`, which on a node with a million routes takes
/// seconds to build and hundreds of MB to send.
const ROUTES_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest answer read: `tern routes --all -o json` of a million routes is about 850
/// MB. It bounds memory if something else listens on the socket.
const MAX_ANSWER: u64 = 2 * 1024 * 1024 * 1024;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens on the socket (the path holds the socket's name).
    #[cfg_attr(
        unix,
        error("tern is not running: no control socket at {0} (start it with `systemctl start tern`, or pass --socket)")
    )]
    #[cfg_attr(
        not(unix),
        error("tern is not running: no control pipe at {0} (start the service with `sc start tern` from an elevated prompt, or `tern run` in a console; or pass --socket)")
    )]
    NotRunning(String),
    /// The socket is root-only (the path holds the socket's name).
    #[cfg_attr(
        unix,
        error("permission denied on {0}: the control socket is root-only; run with sudo")
    )]
    #[cfg_attr(
        not(unix),
        error("permission denied on {0}: the control pipe is for administrators; run from an elevated prompt")
    )]
    PermissionDenied(String),
    /// The daemon answered with an error (its text is written for people).
    #[error("{0}")]
    Daemon(String),
    /// The exchange failed or the answer was not understood.
    #[error("control socket: {0}")]
    Protocol(String),
    /// The daemon did not answer in time.
    #[error(
        "no answer from tern within {0}s (the daemon may be overloaded or stuck; see its log)"
    )]
    Timeout(u64),
}

/// The socket to use: `$TERN_SOCKET`, else the platform default
/// (`/run/tern/tern.sock`, `\\.\pipe\tern` on Windows).
pub fn default_socket() -> PathBuf {
    std::env::var_os("TERN_SOCKET")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(tern_config::daemon::default_control_socket)
}

/// Sends `request` to the daemon at `socket` and returns its result, as sent.
pub fn request(socket: &Path, request: Request) -> Result<serde_json::Value, ClientError> {
    let answer = request_line(socket, request)?;
    result_of(socket, &answer)
}

/// Sends `request` to the daemon at `socket` and returns its answer line unread, so
/// that the caller decodes it once, straight into the type it wants ([`result_of`]):
/// with 100,000 routes a detour through a JSON tree costs a good part of a second.
pub fn request_line(socket: &Path, request: Request) -> Result<String, ClientError> {
    let name = socket.display().to_string();
    let timeout = if matches!(request, Request::Routes { .. }) {
        ROUTES_TIMEOUT
    } else {
        TIMEOUT
    };
    exchange(socket, &name, &encode(request)?, timeout)
}

/// The request line, newline included.
fn encode(request: Request) -> Result<Vec<u8>, ClientError> {
    let mut line = serde_json::to_vec(&RequestEnvelope {
        version: VERSION,
        request,
    })
    .map_err(|e| ClientError::Protocol(format!("cannot encode the request: {e}")))?;
    line.push(b'\n');
    Ok(line)
}

/// The answer envelope with its result as `T`.
#[derive(serde::Deserialize)]
struct Typed<T> {
    ok: bool,
    #[serde(default = "Option::default")]
    result: Option<T>,
    #[serde(default)]
    error: Option<String>,
}

/// The result in an answer line from the daemon at `socket`, as `T`; the daemon's
/// error as a [`ClientError`].
pub fn result_of<T: serde::de::DeserializeOwned>(
    socket: &Path,
    answer: &str,
) -> Result<T, ClientError> {
    let name = socket.display().to_string();
    let env: Typed<T> = serde_json::from_str(answer).map_err(|e| {
        ClientError::Protocol(format!(
            "{name}: unexpected answer (is the daemon the same tern version?): {e}"
        ))
    })?;
    match (env.ok, env.result, env.error) {
        (true, Some(v), _) => Ok(v),
        (false, _, Some(e)) if e.starts_with("permission denied") => {
            Err(ClientError::PermissionDenied(name))
        }
        (false, _, Some(e)) => Err(ClientError::Daemon(e)),
        _ => Err(ClientError::Protocol(format!(
            "{name}: an answer with neither result nor error"
        ))),
    }
}

/// What an error opening the socket means to the person at the keyboard.
fn open_error(name: &str, e: std::io::Error) -> ClientError {
    match e.kind() {
        // No file (or no directory), or a file nobody listens on: not running.
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            ClientError::NotRunning(name.to_string())
        }
        std::io::ErrorKind::PermissionDenied => ClientError::PermissionDenied(name.to_string()),
        _ => ClientError::Protocol(format!("{name}: {e}")),
    }
}

/// Writes the request line and reads one answer line.
fn talk<S>(mut stream: S, name: &str, line: &[u8], timeout: Duration) -> Result<String, ClientError>
where
    S: Read + Write,
{
    // A failed write is not final: a daemon that refuses us may already have answered
    // and closed, and its answer says why.
    let wrote = stream.write_all(line).and_then(|()| stream.flush());
    let mut answer = String::new();
    let read = BufReader::new(stream.take(MAX_ANSWER)).read_line(&mut answer);
    match read {
        Ok(_) if answer.ends_with('\n') => Ok(answer),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(ClientError::Timeout(timeout.as_secs()))
        }
        Err(e) => Err(ClientError::Protocol(format!("{name}: {e}"))),
        Ok(_) if answer.len() as u64 >= MAX_ANSWER => Err(ClientError::Protocol(format!(
            "{name}: the answer is longer than {} MB, the most this CLI reads; ask for less \
             (a PREFIX, --peer or --family)",
            MAX_ANSWER >> 20
        ))),
        Ok(_) => Err(ClientError::Protocol(match wrote {
            Err(e) => format!("{name}: cannot send the request: {e}"),
            Ok(()) => format!("{name}: the daemon closed the connection without answering"),
        })),
    }
}

#[cfg(unix)]
fn exchange(
    socket: &Path,
    name: &str,
    line: &[u8],
    timeout: Duration,
) -> Result<String, ClientError> {
    let stream =
        std::os::unix::net::UnixStream::connect(socket).map_err(|e| open_error(name, e))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| ClientError::Protocol(format!("{name}: {e}")))?;
    talk(stream, name, line, timeout)
}

/// A pipe handle has no timeouts of its own, so the exchange runs on a helper thread
/// and the CLI stops waiting after `timeout` (the process exits right after).
///
/// A helper that answered is joined before returning: a thread still alive when the
/// process exits is killed by the system, and under Wine a thread slow to die then gets
/// the whole process SIGKILLed after its output was written (about one
/// CLI call in 200 in wine_lab; none in 1,200 with the join).
#[cfg(windows)]
fn exchange(
    socket: &Path,
    name: &str,
    line: &[u8],
    timeout: Duration,
) -> Result<String, ClientError> {
    let deadline = std::time::Instant::now() + timeout;
    let pipe = open_pipe(socket, name, deadline)?;
    let (tx, rx) = std::sync::mpsc::channel();
    let (owned_name, owned_line) = (name.to_string(), line.to_vec());
    let helper = std::thread::spawn(move || {
        let _ = tx.send(talk(pipe, &owned_name, &owned_line, timeout));
    });
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    match rx.recv_timeout(left) {
        Ok(answer) => {
            // It has sent, so it is returning: the join is immediate.
            let _ = helper.join();
            answer
        }
        Err(_) => Err(ClientError::Timeout(timeout.as_secs())),
    }
}

/// Opens the daemon's pipe, waiting while every instance is busy (the daemon is about
/// to create the next one) until `deadline`.
#[cfg(windows)]
fn open_pipe(
    socket: &Path,
    name: &str,
    deadline: std::time::Instant,
) -> Result<std::fs::File, ClientError> {
    /// All pipe instances are busy: the daemon is about to create the next one.
    const ERROR_PIPE_BUSY: i32 = 231;
    loop {
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(socket)
        {
            Ok(p) => return Ok(p),
            Err(e) if e.raw_os_error() == Some(ERROR_PIPE_BUSY) => {
                if std::time::Instant::now() >= deadline {
                    return Err(ClientError::Timeout(TIMEOUT.as_secs()));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(open_error(name, e)),
        }
    }
}

/// A connection for a stream of answers: no read timeout (events come when they
/// come).
#[cfg(unix)]
fn open_stream(socket: &Path, name: &str) -> Result<std::os::unix::net::UnixStream, ClientError> {
    let stream =
        std::os::unix::net::UnixStream::connect(socket).map_err(|e| open_error(name, e))?;
    stream
        .set_write_timeout(Some(TIMEOUT))
        .map_err(|e| ClientError::Protocol(format!("{name}: {e}")))?;
    Ok(stream)
}

#[cfg(windows)]
fn open_stream(socket: &Path, name: &str) -> Result<std::fs::File, ClientError> {
    open_pipe(socket, name, std::time::Instant::now() + TIMEOUT)
}

/// Sends a streaming request (`monitor`) and hands the result of each answer line to
/// `each`, until the daemon closes the connection or `each` returns false. An error
/// answer ends the stream with that error.
pub fn stream<T: serde::de::DeserializeOwned>(
    socket: &Path,
    request: Request,
    mut each: impl FnMut(T) -> bool,
) -> Result<(), ClientError> {
    let name = socket.display().to_string();
    let line = encode(request)?;
    let mut conn = open_stream(socket, &name)?;
    conn.write_all(&line)
        .and_then(|()| conn.flush())
        .map_err(|e| ClientError::Protocol(format!("{name}: cannot send the request: {e}")))?;
    let mut reader = BufReader::new(conn);
    loop {
        let mut answer = String::new();
        match (&mut reader).take(MAX_ANSWER).read_line(&mut answer) {
            Ok(0) => return Ok(()),
            Ok(_) => {
                if !each(result_of(socket, &answer)?) {
                    return Ok(());
                }
            }
            Err(e) => return Err(ClientError::Protocol(format!("{name}: {e}"))),
        }
    }
}
