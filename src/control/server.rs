//! The daemon's end of the control socket: a Unix socket (0600 in a 0700 directory,
//! peers checked with SO_PEERCRED) or, on Windows, a named pipe. One task per
//! connection, so a slow client never holds up another or the daemon.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use super::proto::{Request, RequestEnvelope, ResponseEnvelope, VERSION};

/// Longest request line accepted.
const MAX_LINE: usize = 64 * 1024;
/// A client that sends nothing for this long is dropped.
const IDLE: Duration = Duration::from_secs(30);

/// Answers requests.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request with the reply as JSON or an error text.
    fn handle(
        &self,
        request: Request,
    ) -> Pin<Box<dyn Future<Output = Result<serde_json::Value, String>> + Send + '_>>;
}

/// A bound control socket.
pub struct Server {
    path: PathBuf,
    #[cfg(unix)]
    listener: tokio::net::UnixListener,
    #[cfg(windows)]
    first: tokio::net::windows::named_pipe::NamedPipeServer,
}

impl Server {
    /// Creates the socket at `path`. Unix: the directory is created 0700 when missing,
    /// a stale socket file is replaced only if no daemon answers on it, and the socket
    /// is made 0600.
    #[cfg(unix)]
    pub fn bind(path: &Path) -> io::Result<Server> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)?;
            } else if let Ok(m) = std::fs::metadata(dir) {
                if m.permissions().mode() & 0o077 != 0 {
                    tracing::warn!(
                        "the control socket's directory {} is open to other users (mode {:o}); the socket itself is 0600",
                        dir.display(),
                        m.permissions().mode() & 0o777
                    );
                }
            }
        }
        if path.exists() {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("another tern is running on {}", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        let listener = tokio::net::UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        Ok(Server {
            path: path.to_path_buf(),
            listener,
        })
    }

    /// Creates the named pipe `path` (e.g. `\\.\pipe\tern`). It has Windows' default
    /// security for now (not yet an ACL limited to Administrators and SYSTEM).
    #[cfg(windows)]
    pub fn bind(path: &Path) -> io::Result<Server> {
        let first = tokio::net::windows::named_pipe::ServerOptions::new()
            .first_pipe_instance(true)
            .create(path)?;
        Ok(Server {
            path: path.to_path_buf(),
            first,
        })
    }

    /// Serves until the task is dropped.
    #[cfg(unix)]
    pub async fn run<H: Handler>(self, handler: Arc<H>) {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        loop {
            let (stream, _) = match self.listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("control socket {}: accept failed: {e}", self.path.display());
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let allowed = match stream.peer_cred() {
                Ok(c) if c.uid() == 0 || c.uid() == me => Ok(()),
                Ok(c) => Err(format!("uid {} pid {}", c.uid(), c.pid().unwrap_or(0))),
                Err(e) => Err(format!("unknown peer ({e})")),
            };
            let h = Arc::clone(&handler);
            tokio::spawn(async move {
                match allowed {
                    Ok(()) => serve(stream, h).await,
                    Err(who) => {
                        tracing::warn!("control socket: refused a client that is not root: {who}");
                        let mut s = stream;
                        let _ = reply(
                            &mut s,
                            Err(
                                "permission denied: only root may use the tern control socket"
                                    .into(),
                            ),
                        )
                        .await;
                    }
                }
            });
        }
    }

    /// Serves until the task is dropped.
    #[cfg(windows)]
    pub async fn run<H: Handler>(self, handler: Arc<H>) {
        let mut server = self.first;
        loop {
            if let Err(e) = server.connect().await {
                tracing::warn!("control pipe {}: {e}", self.path.display());
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            let next =
                match tokio::net::windows::named_pipe::ServerOptions::new().create(&self.path) {
                    Ok(n) => n,
                    Err(e) => {
                        tracing::error!(
                            "control pipe {}: cannot create the next instance: {e}",
                            self.path.display()
                        );
                        return;
                    }
                };
            let connected = std::mem::replace(&mut server, next);
            tokio::spawn(serve(connected, Arc::clone(&handler)));
        }
    }
}

#[cfg(unix)]
impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

async fn reply<W: AsyncWrite + Unpin>(
    w: &mut W,
    answer: Result<serde_json::Value, String>,
) -> io::Result<()> {
    let env = match answer {
        Ok(v) => ResponseEnvelope {
            version: VERSION,
            ok: true,
            result: Some(v),
            error: None,
        },
        Err(e) => ResponseEnvelope {
            version: VERSION,
            ok: false,
            result: None,
            error: Some(e),
        },
    };
    let mut line = serde_json::to_vec(&env).map_err(io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line).await?;
    w.flush().await
}

/// One connection: request lines in, response lines out.
async fn serve<S, H>(stream: S, handler: Arc<H>)
where
    S: AsyncRead + AsyncWrite + Unpin,
    H: Handler,
{
    let (r, mut w) = tokio::io::split(stream);
    let mut reader = BufReader::new(r);
    loop {
        let mut line = Vec::new();
        let read = tokio::time::timeout(IDLE, async {
            let mut limited = (&mut reader).take(MAX_LINE as u64 + 1);
            limited.read_until(b'\n', &mut line).await
        })
        .await;
        let n = match read {
            Ok(Ok(n)) => n,
            _ => return,
        };
        if n == 0 {
            return;
        }
        if line.len() > MAX_LINE {
            let _ = reply(&mut w, Err(format!("request longer than {MAX_LINE} bytes"))).await;
            return;
        }
        let answer = match serde_json::from_slice::<RequestEnvelope>(&line) {
            Ok(env) if env.version == VERSION => handler.handle(env.request).await,
            Ok(env) => Err(format!(
                "protocol version {} is not supported by this daemon (it speaks {VERSION}); use the tern binary of the same version",
                env.version
            )),
            Err(e) => Err(format!("not a valid request: {e}")),
        };
        if reply(&mut w, answer).await.is_err() {
            return;
        }
    }
}
