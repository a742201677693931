//! The BIRD sockets' tokio driver: a Unix listener per socket, one task per client,
//! the protocol from [`super::render`]. A client holds a slot of [`MAX_CLIENTS`];
//! one that sends a line longer than BIRD's buffer gets `9000 Command too long`, one
//! that stops reading is dropped after [`WRITE_TIMEOUT`], one that stays silent after
//! [`IDLE_TIMEOUT`]: nothing a client does holds up the daemon.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::render::{self, Command};
use super::{Family, ViewSource};

/// Clients served at once per socket; more are closed at once.
pub const MAX_CLIENTS: usize = 16;
/// A client that takes longer than this to read a reply is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// A client that sends nothing for this long is dropped (frees its slot).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// calico-node runs as root on the same host path; group access as BIRD's socket.
const SOCKET_MODE: u32 = 0o660;

/// A listening BIRD socket. Dropping it stops accepting and removes the file.
#[derive(Debug)]
pub struct BirdSocket {
    path: PathBuf,
    task: JoinHandle<()>,
}

impl BirdSocket {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for BirdSocket {
    fn drop(&mut self) {
        self.task.abort();
        if let Err(e) = std::fs::remove_file(&self.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("cannot remove the BIRD socket {}: {e}", self.path.display());
            }
        }
    }
}

/// Opens `bird_socket` and `bird6_socket` when set. Must run inside the runtime.
pub fn start_configured(
    v4: Option<&Path>,
    v6: Option<&Path>,
    source: Arc<dyn ViewSource>,
) -> Result<Vec<BirdSocket>, String> {
    let mut sockets = Vec::new();
    for (path, family) in [(v4, Family::V4), (v6, Family::V6)] {
        if let Some(path) = path {
            sockets.push(start(path, family, Arc::clone(&source))?);
            tracing::info!(
                "BIRD-compatible socket for the {} sessions on {}",
                match family {
                    Family::V4 => "IPv4",
                    Family::V6 => "IPv6",
                },
                path.display()
            );
        }
    }
    Ok(sockets)
}

/// Listens on `path` for `family`'s sessions: removes a stale socket file first (one
/// nobody answers on), refuses to take over a live one or a file that is not a
/// socket, creates the directory, and makes the socket 0660. Errors name the path.
pub fn start(
    path: &Path,
    family: Family,
    source: Arc<dyn ViewSource>,
) -> Result<BirdSocket, String> {
    let shown = path.display();
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(format!(
                    "the BIRD socket {shown} is in use: another BIRD or tern answers on it"
                ));
            }
            std::fs::remove_file(path)
                .map_err(|e| format!("cannot remove the stale BIRD socket {shown}: {e}"))?;
        }
        Ok(_) => {
            return Err(format!(
                "cannot create the BIRD socket {shown}: a file that is not a socket is in the way"
            ))
        }
        Err(_) => {}
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create the directory of the BIRD socket {shown}: {e}"))?;
    }
    let listener = UnixListener::bind(path)
        .map_err(|e| format!("cannot create the BIRD socket {shown}: {e}"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))
        .map_err(|e| format!("cannot set the mode of the BIRD socket {shown}: {e}"))?;
    let task = tokio::spawn(accept(listener, family, source));
    Ok(BirdSocket {
        path: path.to_path_buf(),
        task,
    })
}

async fn accept(listener: UnixListener, family: Family, source: Arc<dyn ViewSource>) {
    let slots = Arc::new(Semaphore::new(MAX_CLIENTS));
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // EMFILE and the like: wait instead of spinning.
                tracing::warn!("BIRD socket: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::debug!("BIRD socket: {MAX_CLIENTS} clients already; one refused");
            continue;
        };
        let source = Arc::clone(&source);
        tokio::spawn(async move {
            if let Err(e) = client(stream, family, source.as_ref()).await {
                tracing::debug!("BIRD socket client: {e}");
            }
            drop(permit);
        });
    }
}

/// One client: the greeting, then one reply per command line until `exit` or EOF.
async fn client(stream: UnixStream, family: Family, source: &dyn ViewSource) -> Result<(), String> {
    let (mut rd, mut wr) = stream.into_split();
    send(&mut wr, &render::greeting()).await?;
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 1024];
    // Inside an over-long line: skip up to its end.
    let mut discarding = false;
    loop {
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            if std::mem::take(&mut discarding) {
                continue;
            }
            let text = String::from_utf8_lossy(line.get(..end).unwrap_or_default());
            let command = render::parse(text.trim_end_matches('\r'));
            if command == Command::Exit {
                return Ok(());
            }
            let out = answer(&command, family, source).await;
            if !out.is_empty() {
                send(&mut wr, &out).await?;
            }
        }
        if buf.len() > render::MAX_LINE {
            if !discarding {
                send(&mut wr, &render::too_long()).await?;
            }
            discarding = true;
            buf.clear();
        }
        let n = tokio::time::timeout(IDLE_TIMEOUT, rd.read(&mut chunk))
            .await
            .map_err(|_| "idle too long".to_string())?
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
}

async fn answer(command: &Command, family: Family, source: &dyn ViewSource) -> String {
    let now = SystemTime::now();
    if !command.needs_view() {
        return render::reply(command, Err(""), family, now);
    }
    let counts = matches!(command, Command::ShowProtocols { all: true, .. });
    let view = source.view(counts).await;
    render::reply(command, view.as_ref().map_err(String::as_str), family, now)
}

async fn send(wr: &mut OwnedWriteHalf, text: &str) -> Result<(), String> {
    tokio::time::timeout(WRITE_TIMEOUT, wr.write_all(text.as_bytes()))
        .await
        .map_err(|_| "the client does not read its replies".to_string())?
        .map_err(|e| format!("write: {e}"))
}
