//! The BFD driver for Linux: the UDP sockets of RFC 5881 (single hop, port 3784) and
//! RFC 5883 (multi-hop, port 4784) and one task that runs every [`Session`], so that
//! BFD packets never wait behind the BGP speaker or the FIB.
//!
//! - Packets are sent with TTL / Hop Limit 255 from one source port per family in
//!   49152-65535 (RFC 5881 §4: the same port for all packets of a session).
//! - Single-hop packets are taken only with TTL 255 (RFC 5881 §5, GTSM), read from the
//!   `IP_RECVTTL` / `IPV6_RECVHOPLIMIT` control messages; multi-hop packets only from a
//!   configured multi-hop peer.
//! - A packet is matched to its session by Your Discriminator, or, while that is 0, by
//!   the sender's address (RFC 5880 §6.8.6).
//! - Deadlines sit in a heap with lazy deletion, so 1,000 sessions cost a heap
//!   operation per packet, not a walk over all of them.
//!
//! `nix` gives `recvmsg` with the control messages that tokio and socket2 do not read.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::IoSliceMut;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;

use nix::sys::socket::{
    recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage,
};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::packet::{Diag, Packet, State};
use crate::session::{Config, Output, Session};
pub use crate::view::{View, Views};

/// RFC 5881's destination port for single-hop sessions.
pub const SINGLE_HOP_PORT: u16 = 3784;
/// RFC 5883's destination port for multi-hop sessions.
pub const MULTI_HOP_PORT: u16 = 4784;
/// The TTL every packet is sent with and single-hop packets must arrive with.
const TTL: u8 = 255;

/// What the owner asks of the driver.
#[derive(Debug, Clone)]
pub enum Command {
    /// Run a session with `peer` (replaces one with the same address).
    Add {
        /// The peer's address.
        peer: IpAddr,
        /// The intervals.
        cfg: Config,
        /// RFC 5883: port 4784, any TTL accepted.
        multihop: bool,
    },
    /// Stop the session with `peer`, telling it (AdminDown) first.
    Remove(IpAddr),
}

/// A session changed state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The peer.
    pub peer: IpAddr,
    /// Before.
    pub from: State,
    /// After.
    pub to: State,
    /// Why, when it left Up.
    pub diag: Diag,
    /// It had been Up before: only then may its going down end the BGP session
    /// (RFC 5882 §4.2: a peer that never answered BFD keeps its session).
    pub was_up: bool,
}

struct Entry {
    session: Session,
    multihop: bool,
    was_up: bool,
}

/// The sockets of one family.
struct Family {
    /// Sends every packet (TTL 255, one source port).
    tx: UdpSocket,
    single: UdpSocket,
    multi: UdpSocket,
}

/// The driver task's state.
struct Driver {
    v4: Option<Family>,
    v6: Option<Family>,
    sessions: HashMap<IpAddr, Entry>,
    by_discr: HashMap<u32, IpAddr>,
    next_discr: u32,
    deadlines: BinaryHeap<Reverse<(Instant, IpAddr)>>,
    events: mpsc::Sender<Event>,
    views: Views,
    /// Up-to-Down changes per peer since the driver started, kept across its sessions.
    downs: HashMap<IpAddr, u64>,
}

/// Opens the sockets (each family that the host has; an error only when neither
/// works) and runs the sessions until `commands` closes. State changes go to `events`;
/// `views` is kept current.
pub async fn run(
    mut commands: mpsc::Receiver<Command>,
    events: mpsc::Sender<Event>,
    views: Views,
) -> std::io::Result<()> {
    let v4 = Family::open(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let v6 = Family::open(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
    let (v4, v6) = match (v4, v6) {
        (Err(e), Err(_)) => return Err(e),
        (a, b) => (a.ok(), b.ok()),
    };
    let mut d = Driver {
        v4,
        v6,
        sessions: HashMap::new(),
        by_discr: HashMap::new(),
        next_discr: 1,
        deadlines: BinaryHeap::new(),
        events,
        views,
        downs: HashMap::new(),
    };
    loop {
        let next = d.deadlines.peek().map(|Reverse((t, _))| *t);
        tokio::select! {
            cmd = commands.recv() => match cmd {
                Some(c) => d.command(c).await,
                None => {
                    let peers: Vec<IpAddr> = d.sessions.keys().copied().collect();
                    for p in peers {
                        d.command(Command::Remove(p)).await;
                    }
                    return Ok(());
                }
            },
            r = recv(d.v4.as_ref().map(|f| &f.single)) => d.received(r, false).await,
            r = recv(d.v4.as_ref().map(|f| &f.multi)) => d.received(r, true).await,
            r = recv(d.v6.as_ref().map(|f| &f.single)) => d.received(r, false).await,
            r = recv(d.v6.as_ref().map(|f| &f.multi)) => d.received(r, true).await,
            () = sleep_until(next) => d.timers().await,
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Room for a control packet with the longest authentication section.
const BUF: usize = 128;

/// One datagram: its bytes, length, sender and TTL (`None` when the system did not
/// say).
type Received = std::io::Result<([u8; BUF], usize, SocketAddr, Option<u8>)>;

/// The next datagram on `socket`; never ready without one.
async fn recv(socket: Option<&UdpSocket>) -> Received {
    let Some(s) = socket else {
        return std::future::pending().await;
    };
    loop {
        s.readable().await?;
        let r = s.try_io(Interest::READABLE, || recv_with_ttl(s));
        match r {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

fn recv_with_ttl(s: &UdpSocket) -> Received {
    let mut buf = [0u8; BUF];
    let mut iov = [IoSliceMut::new(&mut buf)];
    let mut cmsg = nix::cmsg_space!(libc::c_int, libc::c_int);
    let msg =
        recvmsg::<SockaddrStorage>(s.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::empty())
            .map_err(std::io::Error::from)?;
    let mut ttl = None;
    for c in msg.cmsgs().map_err(std::io::Error::from)? {
        match c {
            ControlMessageOwned::Ipv4Ttl(t) | ControlMessageOwned::Ipv6HopLimit(t) => {
                ttl = u8::try_from(t).ok();
            }
            _ => {}
        }
    }
    let from = msg
        .address
        .and_then(|a| {
            a.as_sockaddr_in()
                .map(|v4| SocketAddr::from((v4.ip(), v4.port())))
                .or_else(|| {
                    a.as_sockaddr_in6()
                        .map(|v6| SocketAddr::from((v6.ip(), v6.port())))
                })
        })
        .ok_or_else(|| std::io::Error::other("a datagram without a sender address"))?;
    let len = msg.bytes;
    Ok((buf, len, from, ttl))
}

impl Family {
    fn open(any: IpAddr) -> std::io::Result<Family> {
        Ok(Family {
            tx: tx_socket(any)?,
            single: rx_socket(SocketAddr::new(any, SINGLE_HOP_PORT))?,
            multi: rx_socket(SocketAddr::new(any, MULTI_HOP_PORT))?,
        })
    }
}

fn new_socket(addr: &SocketAddr) -> std::io::Result<Socket> {
    let s = Socket::new(Domain::for_address(*addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_nonblocking(true)?;
    Ok(s)
}

/// A receiving socket on `addr` that reports each datagram's TTL.
fn rx_socket(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let s = new_socket(&addr)?;
    if addr.is_ipv6() {
        setsockopt(&s, sockopt::Ipv6RecvHopLimit, &true)
    } else {
        setsockopt(&s, sockopt::Ipv4RecvTtl, &true)
    }
    .map_err(std::io::Error::from)?;
    s.bind(&addr.into())?;
    UdpSocket::from_std(s.into())
}

/// The sending socket: TTL 255, the first free port of 49152-65535.
fn tx_socket(any: IpAddr) -> std::io::Result<UdpSocket> {
    let mut last = None;
    for port in 49152..=65535u16 {
        let addr = SocketAddr::new(any, port);
        let s = new_socket(&addr)?;
        if any.is_ipv6() {
            s.set_unicast_hops_v6(u32::from(TTL))?;
        } else {
            s.set_ttl_v4(u32::from(TTL))?;
        }
        match s.bind(&addr.into()) {
            Ok(()) => return UdpSocket::from_std(s.into()),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free source port")))
}

impl Driver {
    async fn command(&mut self, c: Command) {
        match c {
            Command::Add {
                peer,
                cfg,
                multihop,
            } => {
                self.drop_session(peer);
                let discr = self.new_discr();
                let now = Instant::now();
                let session = Session::new(cfg, discr, now.into_std());
                self.by_discr.insert(discr, peer);
                self.sessions.insert(
                    peer,
                    Entry {
                        session,
                        multihop,
                        was_up: false,
                    },
                );
                self.publish(peer);
                self.schedule(peer);
            }
            Command::Remove(peer) => {
                if let Some(e) = self.sessions.get_mut(&peer) {
                    let out = e.session.set_admin_down(true);
                    // AdminDown is not a failure: no event, only the packet.
                    let sends: Vec<Output> = out
                        .into_iter()
                        .filter(|o| matches!(o, Output::Send(_)))
                        .collect();
                    self.carry_out(peer, sends).await;
                }
                self.drop_session(peer);
                if let Ok(mut v) = self.views.lock() {
                    v.remove(&peer);
                }
            }
        }
    }

    fn drop_session(&mut self, peer: IpAddr) {
        if let Some(e) = self.sessions.remove(&peer) {
            self.by_discr.remove(&e.session.local_discr());
        }
    }

    /// A discriminator no session uses.
    fn new_discr(&mut self) -> u32 {
        loop {
            let d = self.next_discr;
            self.next_discr = self.next_discr.wrapping_add(1).max(1);
            if !self.by_discr.contains_key(&d) {
                return d;
            }
        }
    }

    fn schedule(&mut self, peer: IpAddr) {
        if let Some(t) = self
            .sessions
            .get(&peer)
            .and_then(|e| e.session.next_deadline())
        {
            self.deadlines.push(Reverse((Instant::from_std(t), peer)));
        }
    }

    /// Runs every session whose deadline has come; stale heap entries are skipped.
    async fn timers(&mut self) {
        let now = Instant::now();
        while let Some(Reverse((t, peer))) = self.deadlines.peek().copied() {
            if t > now {
                break;
            }
            self.deadlines.pop();
            let Some(e) = self.sessions.get_mut(&peer) else {
                continue;
            };
            if e.session.next_deadline().map(Instant::from_std) != Some(t) {
                continue;
            }
            let out = e.session.on_timer(now.into_std());
            self.carry_out(peer, out).await;
            self.schedule(peer);
        }
    }

    /// A datagram on a single-hop (`multihop` false) or multi-hop port.
    async fn received(&mut self, r: Received, multihop: bool) {
        let (buf, len, from, ttl) = match r {
            Ok(x) => x,
            Err(e) => {
                tracing::debug!("BFD: cannot receive: {e}");
                return;
            }
        };
        let Some(bytes) = buf.get(..len) else { return };
        let p = match Packet::decode(bytes) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(from = %from.ip(), "BFD: packet discarded: {e}");
                return;
            }
        };
        if !multihop && ttl != Some(TTL) {
            tracing::debug!(from = %from.ip(), ?ttl, "BFD: single-hop packet discarded: TTL is not 255");
            return;
        }
        let peer = if p.your_discr != 0 {
            match self.by_discr.get(&p.your_discr) {
                Some(peer) if *peer == from.ip() => *peer,
                _ => return,
            }
        } else {
            from.ip()
        };
        let now = Instant::now();
        let Some(e) = self.sessions.get_mut(&peer) else {
            return;
        };
        if e.multihop != multihop {
            return;
        }
        match e.session.on_packet(&p, now.into_std()) {
            Ok(out) => {
                self.carry_out(peer, out).await;
                self.schedule(peer);
            }
            Err(why) => tracing::trace!(%peer, "BFD: packet ignored: {why:?}"),
        }
    }

    /// Sends and reports what a session asked for.
    async fn carry_out(&mut self, peer: IpAddr, out: Vec<Output>) {
        for o in out {
            match o {
                Output::Send(p) => self.send(peer, &p).await,
                Output::StateChange { from, to, diag } => {
                    let Some(e) = self.sessions.get_mut(&peer) else {
                        continue;
                    };
                    let was_up = e.was_up;
                    if to == State::Up {
                        e.was_up = true;
                    }
                    if from == State::Up {
                        *self.downs.entry(peer).or_default() += 1;
                    }
                    tracing::info!(%peer, "BFD session {} -> {} ({})", from.name(), to.name(), diag.text());
                    let _ = self
                        .events
                        .send(Event {
                            peer,
                            from,
                            to,
                            diag,
                            was_up,
                        })
                        .await;
                }
            }
        }
        self.publish(peer);
    }

    async fn send(&self, peer: IpAddr, p: &Packet) {
        let Some(e) = self.sessions.get(&peer) else {
            return;
        };
        let family = if peer.is_ipv4() { &self.v4 } else { &self.v6 };
        let Some(f) = family else { return };
        let port = if e.multihop {
            MULTI_HOP_PORT
        } else {
            SINGLE_HOP_PORT
        };
        if let Err(err) = f.tx.send_to(&p.encode(), SocketAddr::new(peer, port)).await {
            tracing::debug!(%peer, "BFD: cannot send: {err}");
        }
    }

    fn publish(&self, peer: IpAddr) {
        let Some(e) = self.sessions.get(&peer) else {
            return;
        };
        let s = &e.session;
        let view = View {
            state: s.state(),
            remote_state: s.remote_state(),
            diag: s.diag(),
            multihop: e.multihop,
            detection_time: s.detection_time(),
            tx_interval: s.tx_interval(),
            was_up: e.was_up,
            downs: self.downs.get(&peer).copied().unwrap_or(0),
        };
        if let Ok(mut v) = self.views.lock() {
            v.insert(peer, view);
        }
    }
}
