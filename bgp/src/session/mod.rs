//! `bgp::session`: the tokio driver of [`crate::fsm::Session`] — one task per peer that
//! performs the machine's actions (connect, write, arm timers) and turns what happens
//! on the socket and the clock into its events. No protocol decisions are made here.
//!
//! Writes go through a buffer that the task drains as the socket accepts bytes; while
//! it holds more than the high-water mark the task stops taking commands, so a slow
//! peer pushes back on the RIB instead of growing memory, and the state machine's send
//! hold timer drops a peer that stops reading altogether.

pub mod listener;
pub mod sockopt;

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;

use bytes::{Buf, Bytes, BytesMut};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::fsm::{Action, DownReason, Event, Negotiated, Session, SessionConfig, State, Timer};
use crate::wire::notification::{cease_subcode, code};
use crate::wire::{
    frame_len, CodecOptions, Message, Notification, RouteRefresh, Update, MAX_MESSAGE_LEN,
};

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
}

impl SessionHandle {
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
    let (tx, rx) = mpsc::channel(64);
    let peer = cfg.peer;
    tokio::spawn(run(cfg, rx, events));
    SessionHandle { peer, tx }
}

type Connecting = Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send>>;

/// Opens a connection with the peer's socket options applied before the SYN.
async fn connect(cfg: DriverConfig) -> io::Result<TcpStream> {
    let sock = if cfg.peer.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(a) = cfg.local_addr {
        sock.bind(SocketAddr::new(a, 0))?;
    }
    if let Some(pw) = &cfg.password {
        sockopt::set_md5(&sock, cfg.peer.ip(), pw)?;
    }
    if let Some(hops) = cfg.ttl_security {
        sockopt::set_min_ttl(&sock, cfg.peer.ip(), hops)?;
    }
    let stream = sock.connect(cfg.peer).await?;
    if cfg.ttl_security.is_some() {
        set_outgoing_ttl(&stream, cfg.peer.ip())?;
    }
    stream.set_nodelay(true)?;
    Ok(stream)
}

fn set_outgoing_ttl(stream: &TcpStream, peer: IpAddr) -> io::Result<()> {
    match peer {
        IpAddr::V4(_) => stream.set_ttl(255),
        // tokio has no hop-limit setter; the IPv4 TTL call covers dual-stack sockets.
        IpAddr::V6(_) => Ok(()),
    }
}

struct Driver {
    cfg: DriverConfig,
    fsm: Session,
    events: mpsc::Sender<SessionEvent>,
    timers: HashMap<Timer, Instant>,
    conn: Option<TcpStream>,
    /// Whether `conn` is the connection we opened (for collision resolution).
    conn_outgoing: bool,
    /// A connection from the peer that arrived while ours was in progress, waiting for
    /// its OPEN to decide which one stays (RFC 4271 §6.8).
    pending: Option<(TcpStream, BytesMut)>,
    connecting: Option<Connecting>,
    out: BytesMut,
    blocked: bool,
}

async fn run(
    cfg: DriverConfig,
    mut commands: mpsc::Receiver<Command>,
    events: mpsc::Sender<SessionEvent>,
) {
    let fsm = Session::new(cfg.fsm.clone());
    let mut d = Driver {
        cfg,
        fsm,
        events,
        timers: HashMap::new(),
        conn: None,
        conn_outgoing: false,
        pending: None,
        connecting: None,
        out: BytesMut::new(),
        blocked: false,
    };
    let mut buf = vec![0u8; 65536];
    // Set when every handle is gone (the peer was removed): stop once, then end the
    // task when the connection is closed, instead of polling a closed channel forever.
    let mut orphaned = false;
    loop {
        if orphaned && d.conn.is_none() && d.connecting.is_none() && d.fsm.state() == State::Idle {
            return;
        }
        let deadline = d.timers.values().min().copied();
        let event = tokio::select! {
            c = commands.recv(), if !orphaned && d.out.len() < d.cfg.write_high_water => match c {
                None => {
                    orphaned = true;
                    Event::ManualStop(None)
                }
                Some(Command::Start) => Event::ManualStart,
                Some(Command::Stop(text)) => Event::ManualStop(text),
                Some(Command::Reset(notification, hold_down)) => Event::Reset { notification, hold_down },
                Some(Command::SendUpdates(u)) => Event::SendUpdates(u),
                Some(Command::SetCapabilities(c)) => {
                    d.fsm.set_capabilities(c);
                    continue;
                }
                Some(Command::Incoming(s)) => {
                    // Adopt at once only when we are not connecting ourselves: if we are,
                    // the peer may be adopting our connection right now, and dropping it
                    // would kill both (both sides must apply the same rule, §6.8).
                    if d.conn.is_none() && d.connecting.is_none() && matches!(d.fsm.state(), State::Connect | State::Active) {
                        d.connecting = None;
                        d.conn = Some(s);
                        d.conn_outgoing = false;
                        Event::TcpConnected
                    } else if d.fsm.state() == State::Established || d.fsm.state() == State::Idle {
                        reject(&s);
                        continue;
                    } else {
                        d.pending = Some((s, BytesMut::new()));
                        continue;
                    }
                }
            },
            r = async { match d.pending.as_ref() { Some((p, _)) => p.readable().await, None => std::future::pending().await } }, if d.pending.is_some() => {
                if r.is_err() || !d.read_pending(&mut buf) {
                    d.pending = None;
                    continue;
                }
                let Some(Some((stream, acc))) = d.collision() else { continue };
                d.switch_to(stream, acc).await;
                continue;
            },
            r = async { match d.connecting.as_mut() { Some(f) => f.await, None => std::future::pending().await } }, if d.connecting.is_some() => {
                d.connecting = None;
                match r {
                    Ok(s) => {
                        d.conn = Some(s);
                        d.conn_outgoing = true;
                        Event::TcpConnected
                    }
                    Err(_) => Event::TcpFailed,
                }
            },
            r = async { match d.conn.as_ref() { Some(c) => c.readable().await, None => std::future::pending().await } }, if d.conn.is_some() => {
                match (r, d.conn.as_ref().map(|c| c.try_read(&mut buf))) {
                    (Ok(()), Some(Ok(0))) | (Err(_), _) => Event::TcpFailed,
                    (Ok(()), Some(Ok(n))) => Event::Received(Bytes::copy_from_slice(buf.get(..n).unwrap_or_default())),
                    (Ok(()), Some(Err(e))) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    _ => Event::TcpFailed,
                }
            },
            r = async { match d.conn.as_ref() { Some(c) => c.writable().await, None => std::future::pending().await } }, if d.conn.is_some() && !d.out.is_empty() => {
                match r {
                    Ok(()) => match d.flush() {
                        Ok(Some(e)) => e,
                        Ok(None) => continue,
                        Err(_) => Event::TcpFailed,
                    },
                    Err(_) => Event::TcpFailed,
                }
            },
            _ = async { match deadline { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } }, if deadline.is_some() => {
                let now = Instant::now();
                let Some(t) = d.timers.iter().filter(|(_, at)| **at <= now).map(|(t, _)| *t).next() else { continue };
                d.timers.remove(&t);
                Event::TimerExpired(t)
            },
        };
        let stop = matches!(event, Event::ManualStop(_)) && commands.is_closed();
        d.feed(event).await;
        // A parked connection may be decidable now that ours connected or failed.
        if d.pending.is_some() {
            if let Some(Some((stream, acc))) = d.collision() {
                d.switch_to(stream, acc).await;
            }
        }
        if stop {
            return;
        }
    }
}

/// Whether a connection from the peer that has sent a valid OPEN replaces the current
/// one (`None`: decide later). `current` is whether the session's connection, if it
/// has one, is the one we opened.
///
/// Our connection and the peer's are a collision (RFC 4271 §6.8): the one opened by the
/// side with the higher identifier stays. Two connections both opened by the peer are
/// not: the peer gave up on the first (it restarted, or the first never got further
/// than a byte or two, like a slow-loris from its address), so the newer one, which
/// has sent a valid OPEN, replaces it instead of waiting for the old one's hold timer.
fn keep_pending(
    state: State,
    current: Option<bool>,
    connecting: bool,
    local_wins: bool,
) -> Option<bool> {
    if matches!(state, State::Established | State::Idle) {
        return Some(false);
    }
    match current {
        // Ours should win but is not connected yet: decide when it is.
        None if connecting && local_wins => None,
        None => Some(true),
        Some(outgoing) => Some(!outgoing || !local_wins),
    }
}

/// Closes a connection we do not want with Cease / Connection Collision Resolution.
fn reject(s: &TcpStream) {
    let n = Notification {
        code: code::CEASE,
        subcode: cease_subcode::CONNECTION_COLLISION_RESOLUTION,
        data: Bytes::new(),
    };
    if let Ok(b) = Message::Notification(n).encode(&CodecOptions::default()) {
        let _ = s.try_write(&b);
    }
}

impl Driver {
    /// Reads what the pending connection has; false if it closed or failed.
    fn read_pending(&mut self, buf: &mut [u8]) -> bool {
        let Some((s, acc)) = self.pending.as_mut() else {
            return false;
        };
        match s.try_read(buf) {
            Ok(0) => false,
            Ok(n) => {
                acc.extend_from_slice(buf.get(..n).unwrap_or_default());
                true
            }
            Err(e) => e.kind() == io::ErrorKind::WouldBlock,
        }
    }

    /// Once the pending connection's OPEN is in, keeps one connection (the one opened by
    /// the side with the higher BGP identifier). Returns `Some(Some(..))` with the new
    /// connection and what it already received when it wins, `Some(None)` when it lost
    /// and was closed, `None` while its OPEN is incomplete.
    fn collision(&mut self) -> Option<Option<(TcpStream, BytesMut)>> {
        let (_, acc) = self.pending.as_ref()?;
        let len = match frame_len(acc, MAX_MESSAGE_LEN) {
            Ok(Some(len)) if len <= acc.len() => len,
            Ok(_) => return None,
            Err(_) => {
                self.pending = None;
                return None;
            }
        };
        let open = match acc
            .get(..len)
            .map(|b| Message::decode(Bytes::copy_from_slice(b), &CodecOptions::default()))
        {
            Some(Ok(Message::Open(o))) => o,
            _ => {
                self.pending = None;
                return None;
            }
        };
        let local_wins = u32::from(self.cfg.fsm.router_id) > u32::from(open.bgp_id);
        let decision = keep_pending(
            self.fsm.state(),
            self.conn.is_some().then_some(self.conn_outgoing),
            self.connecting.is_some(),
            local_wins,
        )?;
        let (stream, acc) = self.pending.take()?;
        if !decision {
            reject(&stream);
            return Some(None);
        }
        if let Some(old) = self.conn.as_ref() {
            reject(old);
        }
        Some(Some((stream, acc)))
    }

    /// Makes `stream` the session's connection, with what it already received.
    async fn switch_to(&mut self, stream: TcpStream, acc: BytesMut) {
        self.feed(Event::ConnectionReplaced).await;
        self.connecting = None;
        self.conn = Some(stream);
        self.conn_outgoing = false;
        self.feed(Event::TcpConnected).await;
        self.feed(Event::Received(acc.freeze())).await;
    }

    /// Feeds an event and carries out the actions (which may produce more events).
    async fn feed(&mut self, first: Event) {
        let mut pending = vec![first];
        while let Some(ev) = pending.pop() {
            let actions = self.fsm.handle(ev, std::time::Instant::now());
            for a in actions {
                if let Some(next) = self.act(a).await {
                    pending.push(next);
                }
            }
        }
    }

    async fn act(&mut self, a: Action) -> Option<Event> {
        let peer = self.cfg.peer;
        match a {
            Action::Connect => {
                self.connecting = Some(Box::pin(connect(self.cfg.clone())));
            }
            Action::Disconnect => {
                // Best effort for what is queued (a NOTIFICATION above all), then close.
                let _ = self.flush();
                self.conn = None;
                self.connecting = None;
                self.out.clear();
                self.blocked = false;
            }
            Action::Send(b) => {
                self.out.extend_from_slice(&b);
                return self.flush().unwrap_or(Some(Event::TcpFailed));
            }
            Action::StartTimer(t, d) => {
                self.timers.insert(t, Instant::now() + d);
            }
            Action::StopTimer(t) => {
                self.timers.remove(&t);
            }
            Action::StateChanged { from, to } => {
                let _ = self
                    .events
                    .send(SessionEvent::StateChanged { peer, from, to })
                    .await;
            }
            Action::Up(negotiated) => {
                let _ = self
                    .events
                    .send(SessionEvent::Up { peer, negotiated })
                    .await;
            }
            Action::Down(reason) => {
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
        }
        None
    }

    /// Writes what the socket takes now; reports when the peer stops or resumes reading.
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

/// The default high-water mark: a few hundred full UPDATEs.
pub const DEFAULT_WRITE_HIGH_WATER: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collisions_keep_the_higher_identifiers_connection() {
        // Ours is up to OpenSent: theirs stays only if their identifier is higher.
        assert_eq!(
            keep_pending(State::OpenSent, Some(true), false, true),
            Some(false)
        );
        assert_eq!(
            keep_pending(State::OpenSent, Some(true), false, false),
            Some(true)
        );
        // Ours is still connecting and should win: wait for it.
        assert_eq!(keep_pending(State::Connect, None, true, true), None);
        assert_eq!(keep_pending(State::Connect, None, true, false), Some(true));
        assert_eq!(keep_pending(State::Active, None, false, true), Some(true));
        // Established or Idle: never.
        for s in [State::Established, State::Idle] {
            assert_eq!(keep_pending(s, Some(false), false, false), Some(false));
        }
    }

    #[test]
    fn a_newer_connection_from_the_peer_replaces_one_that_never_sent_its_open() {
        // The current connection was opened by the peer and sits in OpenSent (a
        // slow-loris, or a half-open connection from before the peer restarted). A new
        // connection from the peer with a valid OPEN takes over, whichever identifier
        // is higher; before, with the peer's higher, it was refused until the hold
        // timer of the old one expired.
        for local_wins in [true, false] {
            assert_eq!(
                keep_pending(State::OpenSent, Some(false), false, local_wins),
                Some(true)
            );
            assert_eq!(
                keep_pending(State::OpenConfirm, Some(false), false, local_wins),
                Some(true)
            );
        }
    }
}
