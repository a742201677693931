//! The daemon's end of the control socket: a Unix socket (0600 in a 0700 directory,
//! clients checked with SO_PEERCRED) or, on Windows, a named pipe. One task per
//! connection, so a slow client never holds up another or the daemon.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use super::proto::{MonitorEvent, Request, RequestEnvelope, ResponseEnvelope, VERSION};

mod stream;
#[cfg(test)]
mod tests;

use stream::{monitor_request, stream_events};

/// Most clients connected at once; more are told the daemon is busy. Each client is a
/// task and a descriptor, and the CLI opens one connection per command.
const MAX_CLIENTS: usize = 64;
/// A client that sends no complete line for this long is dropped, so idle or stuck
/// clients cannot pile up tasks and descriptors.
const IDLE: Duration = Duration::from_secs(30);
/// How long a refused client may take to send its request before it is told why.
#[cfg(unix)]
const REFUSED_GRACE: Duration = Duration::from_secs(2);
/// The same for a client turned away because [`MAX_CLIENTS`] are connected.
const BUSY_GRACE: Duration = Duration::from_millis(500);

/// Answers requests.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request with the reply as JSON (one of `proto`'s `*Reply` types
    /// serialized) or an error text.
    fn handle(
        &self,
        request: Request,
    ) -> Pin<Box<dyn Future<Output = Result<serde_json::Value, String>> + Send + '_>>;

    /// `tern monitor`'s stream of events, if this handler has one.
    fn monitor(&self) -> Option<tokio::sync::broadcast::Receiver<MonitorEvent>> {
        None
    }

    /// Told after an answer of `bytes` was written (and freed): a handler may give
    /// the memory of a large one back to the system.
    fn answered(&self, _bytes: usize) {}

    /// The same answer as JSON text, which is what the socket sends. A handler whose
    /// answers can be large (`tern routes` on a 100,000-route node) overrides it to
    /// serialize its reply once, without a JSON tree in between.
    fn handle_text(
        &self,
        request: Request,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + '_>> {
        Box::pin(async move {
            let v = self.handle(request).await?;
            serde_json::to_string(&v).map_err(|e| format!("cannot encode the reply: {e}"))
        })
    }
}

/// How much clients may ask (`tern.yaml` `limits:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest request line, without its newline; requests are tiny, so anything
    /// longer is a confused or hostile client.
    pub request_bytes: usize,
    /// Requests answered per second across all clients (bursts of twice that).
    pub requests_per_second: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            request_bytes: tern_config::daemon::limits::DEFAULT_CONTROL_REQUEST_BYTES,
            requests_per_second: tern_config::daemon::limits::DEFAULT_CONTROL_REQUESTS_PER_SECOND,
        }
    }
}

/// A token bucket shared by every connection, so a client looping on the socket (or
/// many clients) cannot keep the RIB task answering instead of routing.
struct Budget {
    limits: Limits,
    tokens: f64,
    last: tokio::time::Instant,
    /// When "too many requests" was last logged (at most every 10 s).
    warned: Option<tokio::time::Instant>,
}

impl Budget {
    fn new(limits: Limits) -> Budget {
        Budget {
            limits,
            tokens: Budget::burst(limits),
            last: tokio::time::Instant::now(),
            warned: None,
        }
    }

    fn burst(limits: Limits) -> f64 {
        2.0 * f64::from(limits.requests_per_second.max(1))
    }

    /// Takes one request's token; false when the budget is spent.
    fn take(&mut self) -> bool {
        let now = tokio::time::Instant::now();
        let rate = f64::from(self.limits.requests_per_second.max(1));
        let refill = now.saturating_duration_since(self.last).as_secs_f64() * rate;
        self.tokens = (self.tokens + refill).min(Budget::burst(self.limits));
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return true;
        }
        if self
            .warned
            .is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_secs(10))
        {
            self.warned = Some(now);
            tracing::warn!(
                "control socket: more than {} requests per second; refusing the excess (limits.control_requests_per_second)",
                self.limits.requests_per_second
            );
        }
        false
    }
}

/// What every connection shares.
struct Shared<H> {
    handler: Arc<H>,
    limits: Limits,
    budget: std::sync::Mutex<Budget>,
    clients: Arc<tokio::sync::Semaphore>,
}

/// A bound control socket; [`Server::run`] serves it. On Unix the socket file is
/// removed when the server is dropped.
pub struct Server {
    path: PathBuf,
    limits: Limits,
    #[cfg(unix)]
    listener: tokio::net::UnixListener,
    #[cfg(windows)]
    first: tokio::net::windows::named_pipe::NamedPipeServer,
}

impl Server {
    /// Creates the socket at `path`. The parent directory is created with mode 0700
    /// when missing; an existing one keeps its mode (a warning is logged if group or
    /// others have access). An old socket file is replaced only if no daemon answers
    /// on it; if one does, the error is "another tern is running on PATH". The socket
    /// is made 0600. Must be called inside a tokio runtime.
    #[cfg(unix)]
    pub fn bind(path: &Path) -> io::Result<Server> {
        use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            match std::fs::metadata(dir) {
                Ok(m) => {
                    let mode = m.permissions().mode() & 0o777;
                    if mode & 0o077 != 0 {
                        // Not changed: the directory may be shared on purpose (e.g.
                        // /run); the socket's own 0600 and the credential check still
                        // keep other users out.
                        tracing::warn!(
                            "the control socket's directory {} is open to other users (mode {mode:o}); the socket itself is 0600",
                            dir.display()
                        );
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(dir)?;
                    // The umask could have taken owner bits away; say exactly 0700.
                    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
                }
                Err(e) => return Err(e),
            }
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_socket() => {
                match std::os::unix::net::UnixStream::connect(path) {
                    Ok(_) => {
                        return Err(io::Error::new(
                            io::ErrorKind::AddrInUse,
                            format!("another tern is running on {}", path.display()),
                        ))
                    }
                    // Nobody listens: the file is left over from a daemon that died.
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                        std::fs::remove_file(path)?;
                    }
                    Err(e) => {
                        return Err(io::Error::new(
                            e.kind(),
                            format!("cannot check the old socket {}: {e}", path.display()),
                        ))
                    }
                }
            }
            // Never delete something that is not a socket: a wrong path in the config
            // must not cost someone a file.
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket", path.display()),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = tokio::net::UnixListener::bind(path)?;
        // Between bind and chmod the socket has the umask's mode; the 0700 directory
        // (when we made it) and the credential check in `run` cover that moment.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        Ok(Server {
            path: path.to_path_buf(),
            limits: Limits::default(),
            listener,
        })
    }

    /// Creates the named pipe `path` (e.g. `\\.\pipe\tern`), refusing to start if
    /// another process already owns that name. Only SYSTEM and Administrators may open
    /// it (a protected DACL, see [`pipe_acl`]). Must be called inside a tokio runtime.
    #[cfg(windows)]
    pub fn bind(path: &Path) -> io::Result<Server> {
        let first = pipe_acl::create(path, true).map_err(|e| match e.kind() {
            io::ErrorKind::PermissionDenied => io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("another tern is running on {} ({e})", path.display()),
            ),
            _ => e,
        })?;
        Ok(Server {
            path: path.to_path_buf(),
            limits: Limits::default(),
            first,
        })
    }

    /// Serves with these limits instead of the defaults.
    pub fn with_limits(mut self, limits: Limits) -> Server {
        self.limits = limits;
        self
    }

    fn shared<H: Handler>(&self, handler: Arc<H>) -> Arc<Shared<H>> {
        Arc::new(Shared {
            handler,
            limits: self.limits,
            budget: std::sync::Mutex::new(Budget::new(self.limits)),
            clients: Arc::new(tokio::sync::Semaphore::new(MAX_CLIENTS)),
        })
    }

    /// Serves until the task is dropped. Only root and the daemon's own user are
    /// answered; anyone else is told "permission denied" and disconnected.
    #[cfg(unix)]
    pub async fn run<H: Handler>(self, handler: Arc<H>) {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        let shared = self.shared(handler);
        loop {
            let (stream, _) = match self.listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    // Typically out of descriptors: back off instead of spinning.
                    tracing::warn!("control socket {}: accept failed: {e}", self.path.display());
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            // tokio's peer_cred is getsockopt(SO_PEERCRED) into a `ucred` on Linux.
            let allowed = match stream.peer_cred() {
                Ok(c) if c.uid() == 0 || c.uid() == me => Ok(Client {
                    uid: Some(c.uid()),
                    pid: c.pid(),
                }),
                Ok(c) => Err(format!(
                    "uid {} pid {}",
                    c.uid(),
                    c.pid().map_or("unknown".into(), |p| p.to_string())
                )),
                Err(e) => Err(format!("unknown peer ({e})")),
            };
            let sh = Arc::clone(&shared);
            tokio::spawn(async move {
                match allowed {
                    Ok(client) => serve(stream, sh, client).await,
                    Err(who) => refuse(stream, &who, sh.limits.request_bytes).await,
                }
            });
        }
    }

    /// Serves until the task is dropped.
    #[cfg(windows)]
    pub async fn run<H: Handler>(self, handler: Arc<H>) {
        let shared = self.shared(handler);
        let mut server = self.first;
        loop {
            if let Err(e) = server.connect().await {
                tracing::warn!("control pipe {}: {e}", self.path.display());
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            // The next instance exists before this one is handed off, so a client never
            // finds the name missing while the daemon runs.
            let next = match pipe_acl::create(&self.path, false) {
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
            tokio::spawn(serve(connected, Arc::clone(&shared), Client::default()));
        }
    }
}

/// The named pipe's security: a protected DACL granting full access to SYSTEM and the
/// Administrators group only, from SDDL (the same thing `icacls` would write).
#[cfg(windows)]
mod pipe_acl {
    use std::io;
    use std::path::Path;

    use tokio::net::windows::named_pipe::{NamedPipeServer, ServerOptions};
    use windows_sys::Win32::Foundation::LocalFree;
    use windows_sys::Win32::Security::Authorization::{
        ConvertStringSecurityDescriptorToSecurityDescriptorW, SDDL_REVISION_1,
    };
    use windows_sys::Win32::Security::{PSECURITY_DESCRIPTOR, SECURITY_ATTRIBUTES};

    /// P: protected (no inherited entries); GA for SYSTEM (SY) and Administrators (BA).
    const SDDL: &str = "D:P(A;;GA;;;SY)(A;;GA;;;BA)";

    /// Creates one pipe instance with the ACL.
    pub fn create(path: &Path, first: bool) -> io::Result<NamedPipeServer> {
        let wide: Vec<u16> = SDDL.encode_utf16().chain(std::iter::once(0)).collect();
        let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
        // SAFETY: `wide` is NUL-terminated and outlives the call; `sd` receives a
        // LocalAlloc'd descriptor that is freed below.
        let ok = unsafe {
            ConvertStringSecurityDescriptorToSecurityDescriptorW(
                wide.as_ptr(),
                SDDL_REVISION_1,
                &mut sd,
                std::ptr::null_mut(),
            )
        };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        let mut sa = SECURITY_ATTRIBUTES {
            nLength: std::mem::size_of::<SECURITY_ATTRIBUTES>() as u32,
            lpSecurityDescriptor: sd,
            bInheritHandle: 0,
        };
        let mut opts = ServerOptions::new();
        opts.first_pipe_instance(first);
        // SAFETY: `sa` and the descriptor it points to are valid for the call, which
        // copies them into the pipe's kernel object.
        let created = unsafe {
            opts.create_with_security_attributes_raw(path, std::ptr::addr_of_mut!(sa).cast())
        };
        // SAFETY: `sd` came from the conversion above and is not used after this.
        unsafe {
            LocalFree(sd);
        }
        created
    }
}

#[cfg(unix)]
impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Tells a client that is not allowed why, then closes.
#[cfg(unix)]
async fn refuse(stream: tokio::net::UnixStream, who: &str, max: usize) {
    tracing::warn!("control socket: refused a client that is neither root nor tern's user: {who}");
    let (r, mut w) = tokio::io::split(stream);
    // Let the client's request arrive first (unread): closing a socket with unread
    // data can make the client's write fail before it reads the refusal.
    let mut reader = BufReader::new(r);
    let _ = tokio::time::timeout(REFUSED_GRACE, read_line(&mut reader, max)).await;
    let _ = reply(
        &mut w,
        Err("permission denied: only root may use the tern control socket".into()),
    )
    .await;
}

/// One line read from a client.
enum Line {
    /// A complete request line (newline stripped).
    Request(Vec<u8>),
    /// More than the limit without a newline.
    TooLong,
    /// The client closed (or the read failed).
    End,
}

async fn read_line<R: AsyncRead + Unpin>(reader: &mut BufReader<R>, max: usize) -> Line {
    let mut line = Vec::new();
    // The limit is applied while reading, so a client cannot make us buffer more.
    let mut limited = reader.take(max as u64 + 1);
    match limited.read_until(b'\n', &mut line).await {
        Ok(0) | Err(_) => Line::End,
        Ok(_) if line.last() == Some(&b'\n') => {
            line.pop();
            Line::Request(line)
        }
        Ok(_) if line.len() > max => Line::TooLong,
        // The client closed after a last line without newline: still a request.
        Ok(_) => Line::Request(line),
    }
}

async fn reply<W: AsyncWrite + Unpin>(w: &mut W, answer: Result<String, String>) -> io::Result<()> {
    let mut line = match answer {
        // The result is JSON text already: written into the envelope as it is (the
        // same bytes `ResponseEnvelope` would give, without parsing it again), and
        // without copying it (`tern routes` on a large node: tens of MB).
        Ok(result) => {
            let head = format!("{{\"version\":{VERSION},\"ok\":true,\"result\":");
            w.write_all(head.as_bytes()).await?;
            w.write_all(result.as_bytes()).await?;
            b"}".to_vec()
        }
        Err(error) => serde_json::to_vec(&ResponseEnvelope {
            version: VERSION,
            ok: false,
            result: None,
            error: Some(error),
        })
        .map_err(io::Error::other)?,
    };
    line.push(b'\n');
    w.write_all(&line).await?;
    w.flush().await
}

/// Who is on the other end of a connection, as the kernel says (Unix socket
/// credentials); unknown on Windows, where only SYSTEM and Administrators can open
/// the pipe at all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Client {
    /// Its user id.
    pub uid: Option<u32>,
    /// Its process id.
    pub pid: Option<i32>,
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.uid, self.pid) {
            (Some(u), Some(p)) => write!(f, "uid {u} pid {p}"),
            (Some(u), None) => write!(f, "uid {u}"),
            _ => f.write_str("an administrator (named pipe)"),
        }
    }
}

/// Whether `client` may send an action: root only (anyone the pipe lets in on
/// Windows, which is SYSTEM and Administrators).
fn may_act(client: &Client) -> bool {
    client.uid.is_none_or(|u| u == 0)
}

/// Parses a request line and asks the handler. Actions are refused to anyone but root
/// and logged with who asked.
async fn answer<H: Handler>(handler: &H, line: &[u8], client: &Client) -> Result<String, String> {
    let value: serde_json::Value = serde_json::from_slice(line)
        .map_err(|e| format!("not a valid request (JSON expected): {e}"))?;
    // The version is checked on its own first, so a client of another version is told
    // that (not some field error) even if its requests look different.
    match value.get("version").and_then(serde_json::Value::as_u64) {
        Some(v) if v == u64::from(VERSION) => {}
        Some(v) => {
            return Err(format!(
                "protocol version {v} is not supported by this daemon (it speaks \
                 {VERSION}); use the tern binary of the same version"
            ))
        }
        None => return Err("not a valid request: no \"version\" number".into()),
    }
    let env =
        RequestEnvelope::deserialize(&value).map_err(|e| format!("not a valid request: {e}"))?;
    if env.request.is_action() {
        let what = env.request.describe();
        if !may_act(client) {
            tracing::warn!("control: `{what}` refused to {client}: actions need root");
            return Err(format!(
                "permission denied: `tern {what}` changes the daemon and needs root; you are {client}"
            ));
        }
        let answer = handler.handle_text(env.request).await;
        match &answer {
            Ok(_) => tracing::info!("control: `{what}` asked by {client}: done"),
            Err(e) => tracing::warn!("control: `{what}` asked by {client} failed: {e}"),
        }
        return answer;
    }
    handler.handle_text(env.request).await
}

/// One connection: request lines in, one response line out for each.
async fn serve<S, H>(stream: S, shared: Arc<Shared<H>>, client: Client)
where
    S: AsyncRead + AsyncWrite + Unpin,
    H: Handler,
{
    let (r, mut w) = tokio::io::split(stream);
    let max = shared.limits.request_bytes;
    let mut reader = BufReader::new(r);
    let Ok(_slot) = Arc::clone(&shared.clients).try_acquire_owned() else {
        // Read the request first, as `refuse` does, so the client sees the reason.
        let _ = tokio::time::timeout(BUSY_GRACE, read_line(&mut reader, max)).await;
        let busy = format!("busy: {MAX_CLIENTS} clients are connected already; try again shortly");
        let _ = reply(&mut w, Err(busy)).await;
        return;
    };
    loop {
        let line = match tokio::time::timeout(IDLE, read_line(&mut reader, max)).await {
            Ok(Line::Request(l)) => l,
            Ok(Line::TooLong) => {
                let too_long =
                    format!("request longer than {max} bytes (limits.control_request_bytes)");
                let _ = reply(&mut w, Err(too_long)).await;
                return;
            }
            Ok(Line::End) | Err(_) => return,
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let allowed = shared.budget.lock().map(|mut b| b.take()).unwrap_or(true);
        if allowed {
            if let Some(filter) = monitor_request(&line) {
                stream_events(reader, w, shared.handler.as_ref(), filter).await;
                return;
            }
        }
        let answer = if allowed {
            answer(shared.handler.as_ref(), &line, &client).await
        } else {
            Err(format!(
                "too many requests: the daemon answers at most {} per second (limits.control_requests_per_second in tern.yaml); try again shortly",
                shared.limits.requests_per_second
            ))
        };
        let size = answer.as_ref().map_or(0, String::len);
        if reply(&mut w, answer).await.is_err() {
            return;
        }
        shared.handler.answered(size);
    }
}
