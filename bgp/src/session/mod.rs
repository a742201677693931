//! `bgp::session`: the tokio driver of [`crate::fsm::Session`] — one task per peer that
//! performs the machine's actions (connect, write, arm timers) and turns what happens
//! on the socket and the clock into its events. No protocol decisions are made here:
//! a peer's second connection (RFC 4271 §6.8: both speakers dialled) is reported to
//! [`crate::fsm::collision::Collision`], whose verdicts `collide` carries out — our OPEN
//! on a connection as soon as it is up, Cease / Connection Collision Resolution on the
//! loser, the winner handed to the machine.
//!
//! Writes go through a buffer that the task drains as the socket accepts bytes; while
//! it holds more than the high-water mark the task stops taking commands, so a slow
//! peer pushes back on the RIB instead of growing memory, and the state machine's send
//! hold timer drops a peer that stops reading altogether.

mod collide;
mod connect;
pub mod listener;
pub mod sockopt;

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;

use bytes::{Buf, Bytes, BytesMut};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::fsm::collision::{Collision, Side};
use crate::fsm::counts::MessageCounts;
use crate::fsm::{Action, DownReason, Event, Negotiated, Session, SessionConfig, State, Timer};
use crate::wire::notification::{cease_subcode, code};
use crate::wire::{CodecOptions, Message, Notification, RouteRefresh, Update};
use collide::Second;
use connect::{connect, Attempts};
pub use connect::{ConnectFailure, ConnectTrouble, Trouble};

/// How to reach one peer.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// The state machine's settings.
    pub fsm: SessionConfig,
    /// The peer's address and port (179 unless configured).
    pub peer: SocketAddr,
    /// Source address to bind outgoing connections to.
    pub local_addr: Option<IpAddr>,
    /// TCP-MD5 password (RFC 2385).
    pub password: Option<String>,
    /// GTSM (RFC 5082): the peer is at most this many hops away; we send with TTL 255.
    pub ttl_security: Option<u8>,
    /// Stop taking commands while more than this many bytes wait to be written.
    pub write_high_water: usize,
}

/// What the owner of a session can ask of it.
#[derive(Debug)]
pub enum Command {
    /// Start (or restart) connecting.
    Start,
    /// Stop, telling the peer why (RFC 9003) when a message is given.
    Stop(Option<String>),
    /// Stop because this speaker restarts: a session that negotiated graceful restart
    /// ends without a NOTIFICATION, so the peer keeps our routes until we are back
    /// (RFC 4724 §4.2; a Cease would make it flush them); any other is a [`Command::Stop`].
    Restart(Option<String>),
    /// Send these UPDATEs (encoded with the session's `Negotiated::tx`).
    SendUpdates(Vec<Bytes>),
    /// End the session with this NOTIFICATION and stay down at least this long
    /// (see [`crate::fsm::Event::Reset`]).
    Reset(crate::wire::Notification, std::time::Duration),
    /// A connection the listener accepted from this peer.
    Incoming(TcpStream),
    /// Capabilities for the next OPEN (see [`crate::fsm::Session::set_capabilities`]).
    SetCapabilities(Vec<crate::wire::Capability>),
}

/// What a session reports.
#[derive(Debug)]
pub enum SessionEvent {
    /// The state changed.
    StateChanged {
        /// Peer.
        peer: SocketAddr,
        /// Old state.
        from: State,
        /// New state.
        to: State,
    },
    /// Established, with what was negotiated.
    Up {
        /// Peer.
        peer: SocketAddr,
        /// Negotiated capabilities and timers.
        negotiated: Box<Negotiated>,
    },
    /// Down, and why.
    Down {
        /// Peer.
        peer: SocketAddr,
        /// Reason.
        reason: DownReason,
    },
    /// An UPDATE arrived.
    Update {
        /// Peer.
        peer: SocketAddr,
        /// The message (RFC 7606 findings inside).
        update: Box<Update>,
    },
    /// A connection to or from the peer failed before the state machine ran on it (a
    /// connect error, or GTSM refused an accepted one as too far); sent while the
    /// session is not Established, once per distinct text.
    ConnectFailed {
        /// Peer.
        peer: SocketAddr,
        /// Why, in plain words.
        why: String,
    },
    /// Why the session cannot get up: a connect attempt failed (each one, with
    /// counts), one succeeded after failures, or a NOTIFICATION was sent or received
    /// before Established.
    Trouble {
        /// Peer.
        peer: SocketAddr,
        /// What happened.
        trouble: Trouble,
    },
    /// A ROUTE-REFRESH arrived.
    RouteRefresh {
        /// Peer.
        peer: SocketAddr,
        /// What it asks for.
        refresh: RouteRefresh,
    },
}

/// A cheap, cloneable handle to a session task.
#[derive(Debug, Clone)]
pub struct SessionHandle {
    /// The peer it talks to.
    pub peer: SocketAddr,
    tx: mpsc::Sender<Command>,
    /// Messages (received, sent) by type, as the session task last published them.
    messages: Messages,
}

/// Where a session task publishes its message counts for its handles to read.
type Messages = std::sync::Arc<std::sync::Mutex<(MessageCounts, MessageCounts)>>;

impl SessionHandle {
    /// Messages (received, sent) by type since the session task started.
    pub fn messages(&self) -> (MessageCounts, MessageCounts) {
        self.messages.lock().map(|m| *m).unwrap_or_default()
    }

    /// Sends a command; waits while the session is busy writing (back-pressure).
    /// Fails only if the session task has ended.
    pub async fn send(&self, c: Command) -> Result<(), mpsc::error::SendError<Command>> {
        self.tx.send(c).await
    }

    /// Sends a command only if the session can queue it now: a session that stopped
    /// taking commands (its peer is not reading) must not stall the caller, who
    /// serves every other peer too.
    pub fn try_send(&self, c: Command) -> Result<(), mpsc::error::TrySendError<Command>> {
        self.tx.try_send(c)
    }

    /// Reserves a slot in the session's queue if one is free now; the command is then
    /// built (UPDATEs encoded) only when it can be queued.
    pub fn try_reserve(&self) -> Result<mpsc::Permit<'_, Command>, mpsc::error::TrySendError<()>> {
        self.tx.try_reserve()
    }
}

/// Starts the task of one session. Events go to `events`; the session stays Idle until
/// [`Command::Start`].
pub fn spawn(cfg: DriverConfig, events: mpsc::Sender<SessionEvent>) -> SessionHandle {
    // Each slot a batch of encoded UPDATEs held per peer: the speaker waits for room.
    let (tx, rx) = mpsc::channel(2);
    let peer = cfg.peer;
    let messages = Messages::default();
    tokio::spawn(run(cfg, rx, events, messages.clone()));
    SessionHandle { peer, tx, messages }
}

type Connecting = Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send>>;

/// Settings of the peer this platform cannot honour, as an error naming them; checked
/// before a session starts so such a peer is refused rather than run without them.
pub fn check_supported(cfg: &DriverConfig) -> io::Result<()> {
    match sockopt::unsupported(cfg.password.is_some(), cfg.ttl_security.is_some()) {
        Some(what) => Err(io::Error::new(io::ErrorKind::Unsupported, what)),
        None => Ok(()),
    }
}

/// GTSM on a connection the listener accepted: the SYN must have come from at most
/// `hops` hops away, later segments are held to the same, and ours leave with TTL
/// 255. An error says why the connection is refused.
fn gtsm_accepted(s: &TcpStream, hops: u8) -> io::Result<()> {
    let peer = s.peer_addr()?.ip();
    #[cfg(target_os = "linux")]
    if let Some(ttl) = sockopt::syn_ttl(s) {
        let min = sockopt::gtsm_min_ttl(hops);
        if ttl < min {
            // Sent with 255, one less per router; far below, the peer is not sending
            // with 255 at all.
            let seen = if ttl >= 192 {
                format!("{} hop(s) away", 256 - u16::from(ttl))
            } else {
                "does the peer send with TTL 255 (GTSM on its side too)?".to_string()
            };
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "refused a connection from {peer}: ttlSecurity allows {hops} hop(s) (TTL {min} or more) but its SYN arrived with TTL {ttl}: {seen}"
                ),
            ));
        }
    }
    sockopt::set_min_ttl(s, peer, hops)?;
    sockopt::set_ttl_out(s, peer)
}

struct Driver {
    cfg: DriverConfig,
    fsm: Session,
    events: mpsc::Sender<SessionEvent>,
    timers: HashMap<Timer, Instant>,
    /// The connection the state machine runs on.
    conn: Option<TcpStream>,
    /// Which end opened `conn`.
    conn_side: Side,
    /// What `conn` received until its first message is complete: the collision core
    /// sees the peer's OPEN before the machine acts on it.
    first: Option<BytesMut>,
    /// The peer's other connection while a collision is resolved (RFC 4271 §6.8).
    second: Option<Second>,
    collision: Collision,
    connecting: Option<Connecting>,
    out: BytesMut,
    blocked: bool,
    /// The [`SessionEvent::ConnectFailed`] texts since the session was last up (the
    /// latest few), so a retry that fails the same way is not reported again, nor
    /// two ways that alternate (a connect timing out, the peer's own connection
    /// refused by GTSM) every few seconds.
    reported: Vec<String>,
    /// Failed connect attempts since the session was last up.
    attempts: Attempts,
    /// The machine's state as its actions last reported it (a Down comes before
    /// the change to Idle, so this is the state the session went down from).
    reported_state: State,
    /// The machine's message counts, published for the handles after each event.
    messages: Messages,
}

async fn run(
    cfg: DriverConfig,
    mut commands: mpsc::Receiver<Command>,
    events: mpsc::Sender<SessionEvent>,
    messages: Messages,
) {
    let fsm = Session::new(cfg.fsm.clone());
    // CollisionDetectEstablishedState is off: an Established session keeps its
    // connection (RFC 4271 §6.8's default).
    let collision = Collision::new(cfg.fsm.router_id, cfg.fsm.local_as, false);
    let mut d = Driver {
        cfg,
        fsm,
        events,
        timers: HashMap::new(),
        conn: None,
        conn_side: Side::Ours,
        first: None,
        second: None,
        collision,
        connecting: None,
        out: BytesMut::new(),
        blocked: false,
        reported: Vec::new(),
        attempts: Attempts::default(),
        reported_state: State::Idle,
        messages,
    };
    // Set when every handle is gone (the peer was removed): stop once, then end the
    // task when the connection is closed, instead of polling a closed channel forever.
    let mut orphaned = false;
    loop {
        if orphaned && d.conn.is_none() && d.connecting.is_none() && d.fsm.state() == State::Idle {
            return;
        }
        let deadline = d.timers.values().min().copied();
        let second_deadline = d.second.as_ref().map(|s| s.deadline);
        let event = tokio::select! {
            c = commands.recv(), if !orphaned && d.out.len() < d.cfg.write_high_water => {
                if c.is_none() {
                    orphaned = true;
                }
                match d.on_command(c).await {
                    Some(e) => e,
                    None => continue,
                }
            },
            r = async { match d.second.as_ref() { Some(s) => s.stream.readable().await, None => std::future::pending().await } }, if d.second.is_some() => {
                d.read_second(r.is_ok()).await;
                continue;
            },
            _ = async { match second_deadline { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } }, if second_deadline.is_some() => {
                d.second_timed_out().await;
                continue;
            },
            r = async { match d.connecting.as_mut() { Some(f) => f.await, None => std::future::pending().await } }, if d.connecting.is_some() => {
                d.connecting = None;
                d.connect_outcome(&r).await;
                d.connect_done(r).await;
                continue;
            },
            r = async { match d.conn.as_ref() { Some(c) => c.readable().await, None => std::future::pending().await } }, if d.conn.is_some() => {
                match d.on_readable(r.is_ok()).await {
                    Some(e) => e,
                    None => continue,
                }
            },
            r = async { match d.conn.as_ref() { Some(c) => c.writable().await, None => std::future::pending().await } }, if d.conn.is_some() && !d.out.is_empty() => {
                match d.on_writable(r.is_ok()).await {
                    Some(e) => e,
                    None => continue,
                }
            },
            _ = async { match deadline { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } }, if deadline.is_some() => {
                let now = Instant::now();
                let Some(t) = d.timers.iter().filter(|(_, at)| **at <= now).map(|(t, _)| *t).next() else { continue };
                d.timers.remove(&t);
                // The machine abandons a pending connect for a new one: it went unanswered.
                if t == Timer::ConnectRetry && d.connecting.is_some() {
                    d.connect_timed_out().await;
                }
                Event::TimerExpired(t)
            },
        };
        let stop = matches!(event, Event::ManualStop(_)) && commands.is_closed();
        d.feed(event).await;
        // The machine may have dropped its connection (the peer resolved the
        // collision against it): the other one, if any, takes over.
        d.settle().await;
        if stop {
            return;
        }
    }
}

impl Driver {
    /// A command from the speaker, as the machine's event; `None` when the driver
    /// handled it itself. A closed channel (every handle gone) stops the session.
    async fn on_command(&mut self, c: Option<Command>) -> Option<Event> {
        Some(match c {
            None => Event::ManualStop(None),
            Some(Command::Start) => Event::ManualStart,
            Some(Command::Stop(text)) => Event::ManualStop(text),
            Some(Command::Restart(text)) => {
                if self.fsm.graceful_restart_negotiated() {
                    // Closing the socket ends the session without a message: what a
                    // restarting speaker's peer expects. The machine's own stop
                    // below then has no connection to send its Cease on.
                    self.conn = None;
                    self.second = None;
                    self.out.clear();
                }
                Event::ManualStop(text)
            }
            Some(Command::Reset(notification, hold_down)) => Event::Reset {
                notification,
                hold_down,
            },
            Some(Command::SendUpdates(u)) => Event::SendUpdates(u),
            Some(Command::SetCapabilities(c)) => {
                self.fsm.set_capabilities(c);
                return None;
            }
            Some(Command::Incoming(s)) => {
                self.incoming(s).await;
                return None;
            }
        })
    }

    /// The connection is readable (`ok`: without error): the bytes as the machine's
    /// event, unless they belong to the first message (collision check) or the
    /// connection is gone.
    async fn on_readable(&mut self, ok: bool) -> Option<Event> {
        match (ok, self.conn.as_ref().map(read_now)) {
            (true, Some(Ok(bytes))) if !bytes.is_empty() => {
                if self.first.is_some() {
                    self.first_bytes(&bytes).await;
                    return None;
                }
                Some(Event::Received(bytes))
            }
            (true, Some(Err(e))) if e.kind() == io::ErrorKind::WouldBlock => None,
            _ => {
                self.conn_lost().await;
                None
            }
        }
    }

    /// The connection is writable (`ok`: without error): flush what waits.
    async fn on_writable(&mut self, ok: bool) -> Option<Event> {
        match ok.then(|| self.flush()) {
            Some(Ok(e)) => e,
            _ => {
                self.conn_lost().await;
                None
            }
        }
    }
}

impl Driver {
    /// Reports why a connection failed, unless the session is up or the reason was
    /// reported lately.
    pub(super) async fn connect_failed(&mut self, why: String) {
        if self.fsm.state() == State::Established || self.reported.contains(&why) {
            return;
        }
        if self.reported.len() >= 4 {
            self.reported.remove(0);
        }
        self.reported.push(why.clone());
        let peer = self.cfg.peer;
        let _ = self
            .events
            .send(SessionEvent::ConnectFailed { peer, why })
            .await;
    }
}

/// Closes a connection we do not want with Cease / Connection Collision Resolution.
fn reject(s: &TcpStream) {
    send_notification(
        s,
        code::CEASE,
        cease_subcode::CONNECTION_COLLISION_RESOLUTION,
    );
}

/// Writes a NOTIFICATION on a connection the state machine does not run, best effort:
/// it is closed right after.
fn send_notification(s: &TcpStream, code: u8, subcode: u8) {
    let n = Notification {
        code,
        subcode,
        data: Bytes::new(),
    };
    if let Ok(b) = Message::Notification(n).encode(&CodecOptions::default()) {
        let _ = s.try_write(&b);
    }
}

impl Driver {
    /// Feeds an event and carries out the actions (which may produce more events).
    async fn feed(&mut self, first: Event) {
        let mut pending = vec![first];
        while let Some(ev) = pending.pop() {
            let actions = self.fsm.handle(ev, std::time::Instant::now());
            // Messages are queued as they come and written once per run of them: a
            // batch of UPDATEs from the speaker is one write, not one per message.
            let mut queued = false;
            for a in actions {
                let send = matches!(a, Action::Send(_));
                if queued && !send {
                    queued = false;
                    pending.extend(self.write_queued());
                }
                queued |= send;
                pending.extend(self.act(a).await);
            }
            if queued {
                pending.extend(self.write_queued());
            }
        }
        if let Ok(mut m) = self.messages.lock() {
            *m = self.fsm.messages();
        }
    }

    async fn act(&mut self, a: Action) -> Option<Event> {
        let peer = self.cfg.peer;
        match a {
            Action::Connect => {
                // The machine connects only without a connection, so no connection of
                // ours is up to close and nothing held on theirs to release.
                let _ = self.collision.connecting();
                self.attempts.start();
                self.connecting = Some(Box::pin(connect(self.cfg.clone())));
            }
            Action::Disconnect => {
                // Best effort for what is queued (a NOTIFICATION above all), then close.
                let _ = self.flush();
                // What the core says next is carried out by `settle` once the
                // machine has finished with this event.
                if self.conn.take().is_some() {
                    let _ = self.collision.closed(self.conn_side);
                }
                if self.connecting.take().is_some() {
                    let _ = self.collision.closed(Side::Ours);
                }
                self.first = None;
                self.out.clear();
                self.blocked = false;
            }
            // Written by `feed` after the run of sends it belongs to.
            Action::Send(b) => self.out.extend_from_slice(&b),
            Action::StartTimer(t, d) => {
                self.timers.insert(t, Instant::now() + d);
            }
            Action::StopTimer(t) => {
                self.timers.remove(&t);
            }
            Action::StateChanged { from, to } => {
                self.reported_state = to;
                match to {
                    State::Established => {
                        self.reported.clear();
                        self.attempts = Attempts::default();
                        self.collision.established(self.conn_side);
                    }
                    // The session is down: so is a connection that was resolving a
                    // collision with it.
                    State::Idle => {
                        self.second = None;
                        self.collision.reset();
                    }
                    _ => {}
                }
                let _ = self
                    .events
                    .send(SessionEvent::StateChanged { peer, from, to })
                    .await;
            }
            Action::Up(mut negotiated) => {
                // Canonical: a v4-mapped address on a dual-stack socket is the IPv4 one.
                let local = self.conn.as_ref().and_then(|c| c.local_addr().ok());
                negotiated.local_address = local.map(|a| a.ip().to_canonical());
                negotiated.local_port = local.map(|a| a.port());
                negotiated.remote_port = self
                    .conn
                    .as_ref()
                    .and_then(|c| c.peer_addr().ok())
                    .map(|a| a.port());
                let _ = self
                    .events
                    .send(SessionEvent::Up { peer, negotiated })
                    .await;
            }
            Action::Down(reason) => {
                let opening = matches!(self.reported_state, State::OpenSent | State::OpenConfirm);
                if reason == DownReason::ConnectionLost && opening {
                    self.report(Trouble::Closed(self.reported_state)).await;
                }
                let _ = self.events.send(SessionEvent::Down { peer, reason }).await;
            }
            Action::Update(update) => {
                let _ = self
                    .events
                    .send(SessionEvent::Update { peer, update })
                    .await;
            }
            Action::RouteRefresh(refresh) => {
                let _ = self
                    .events
                    .send(SessionEvent::RouteRefresh { peer, refresh })
                    .await;
            }
            Action::Trouble(t) => self.report(Trouble::Notification(t)).await,
        }
        None
    }

    /// Writes what the socket takes now; reports when the peer stops or resumes reading.
    /// Writes what is queued; a failed write is the machine's `TcpFailed`.
    fn write_queued(&mut self) -> Option<Event> {
        self.flush().unwrap_or(Some(Event::TcpFailed))
    }

    fn flush(&mut self) -> io::Result<Option<Event>> {
        let Some(c) = self.conn.as_ref() else {
            self.out.clear();
            return Ok(None);
        };
        let mut progressed = false;
        while !self.out.is_empty() {
            match c.try_write(&self.out) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "peer closed")),
                Ok(n) => {
                    self.out.advance(n);
                    progressed = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        // Written out: the buffer goes (an empty `BytesMut` holds no memory). Kept, it
        // kept what a burst grew it to, and `capacity()` after `advance` hides that:
        // 1,000 reflector clients held 37 MB of empty buffers.
        if self.out.is_empty() {
            self.out = BytesMut::new();
        }
        Ok(match (self.out.is_empty(), self.blocked, progressed) {
            (false, false, _) => {
                self.blocked = true;
                Some(Event::SendBlocked)
            }
            // Progress stops the send hold timer; if the socket fills up again, the
            // next write starts it anew.
            (_, true, true) => {
                self.blocked = false;
                Some(Event::SendProgress)
            }
            _ => None,
        })
    }
}

/// The default high-water mark: small, it is held per peer; the kernel buffers more.
pub const DEFAULT_WRITE_HIGH_WATER: usize = 16 << 10;

/// Bytes read at once from a connection, at most.
const READ_SIZE: usize = 65536;

#[cfg(test)]
mod tests;

/// Reads what `stream` has now (empty: the peer closed it) through a buffer shared by
/// the sessions of this thread. A read and its copy never wait in between, so one
/// buffer per worker thread is enough; one of 64 KiB per session was 64 MB in a
/// 1,000-node mesh.
fn read_now(stream: &TcpStream) -> io::Result<Bytes> {
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; READ_SIZE]);
    }
    BUF.with(|b| {
        let mut b = b.borrow_mut();
        let n = stream.try_read(&mut b)?;
        Ok(Bytes::copy_from_slice(b.get(..n).unwrap_or_default()))
    })
}
