//! Connecting out, and how it fails: each attempt is classified (no answer within the
//! connect-retry time, refused with a reset, or another error the OS names) and
//! counted since the session was last up, so the owner can tell a firewall that drops
//! TCP 179 from a peer where BGP is not listening without reading error texts.
//!
//! An attempt is bounded by the machine's connect-retry timer (3 s by default, BIRD
//! and Calico's `connect retry time` is 5): when it expires with the connect still
//! pending, the attempt is abandoned for a new one and counts as timed out.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

use super::{sockopt, Driver, DriverConfig, SessionEvent};
use crate::fsm::{SessionTrouble, State};

/// How one connect attempt failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "detail")]
pub enum ConnectFailure {
    /// No answer (no SYN-ACK, no reset) within this time: the SYNs are dropped on the
    /// way (a firewall), or nobody has the address.
    TimedOut(Duration),
    /// The peer's host answered with a reset: nothing listens on the port.
    Refused,
    /// Another error, as the OS words it (no route to host, network unreachable, ...).
    Other(String),
}

impl ConnectFailure {
    /// Same kind of failure (the time waited or the OS text aside).
    pub fn same_kind(&self, other: &ConnectFailure) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }

    /// Classifies a connect error.
    pub fn of(e: &io::Error, waited: Duration) -> ConnectFailure {
        match e.kind() {
            io::ErrorKind::ConnectionRefused => ConnectFailure::Refused,
            io::ErrorKind::TimedOut => ConnectFailure::TimedOut(waited),
            _ => ConnectFailure::Other(e.to_string()),
        }
    }
}

/// Connect attempts to a peer that failed since its session was last up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnectTrouble {
    /// How the latest attempt failed.
    pub failure: ConnectFailure,
    /// Attempts in a row that failed the same way, the latest included.
    pub in_a_row: u64,
    /// Failed attempts since the session was last up (or configured).
    pub attempts: u64,
    /// The first of those failures.
    pub since: SystemTime,
    /// The latest one.
    pub last: SystemTime,
}

/// Why a session cannot get up, as the driver reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "detail")]
pub enum Trouble {
    /// A connect attempt failed (sent for every attempt: at most one per
    /// connect-retry interval, like the state changes each attempt already reports).
    Connect(ConnectTrouble),
    /// A connect succeeded after failures: they are over.
    Connected,
    /// A NOTIFICATION was sent or received before the session was Established.
    Notification(Box<SessionTrouble>),
    /// The peer closed the connection without a NOTIFICATION before the session was
    /// up, in this state (OpenSent: it never sent its OPEN, as BIRD, FRR and GoBGP
    /// do with a connection from an address they have no neighbour for).
    Closed(State),
}

/// The driver's count of failed attempts.
#[derive(Debug, Default)]
pub(super) struct Attempts {
    /// When the pending attempt started.
    started: Option<Instant>,
    failures: u64,
    in_a_row: u64,
    since: Option<SystemTime>,
    last: Option<ConnectFailure>,
    /// A failure was reported and no success since.
    troubled: bool,
}

impl Attempts {
    /// An attempt starts now.
    pub(super) fn start(&mut self) {
        self.started = Some(Instant::now());
    }

    /// How long the pending attempt has run.
    fn waited(&self) -> Duration {
        self.started.map(|t| t.elapsed()).unwrap_or_default()
    }

    /// The pending attempt failed this way: the trouble to report.
    pub(super) fn failed(&mut self, failure: ConnectFailure) -> ConnectTrouble {
        let now = SystemTime::now();
        self.started = None;
        self.failures += 1;
        self.in_a_row = match &self.last {
            Some(l) if l.same_kind(&failure) => self.in_a_row + 1,
            _ => 1,
        };
        self.last = Some(failure.clone());
        self.troubled = true;
        ConnectTrouble {
            failure,
            in_a_row: self.in_a_row,
            attempts: self.failures,
            since: *self.since.get_or_insert(now),
            last: now,
        }
    }

    /// The pending attempt succeeded: whether failures before it were reported.
    pub(super) fn connected(&mut self) -> bool {
        self.started = None;
        self.last = None;
        self.in_a_row = 0;
        std::mem::take(&mut self.troubled)
    }
}

impl Driver {
    /// Our connect finished: counts a failure (and reports it) or a success after
    /// failures. The collision core and the machine hear of it after this.
    pub(super) async fn connect_outcome(&mut self, r: &io::Result<TcpStream>) {
        let trouble = match r {
            Ok(_) if self.attempts.connected() => Trouble::Connected,
            Ok(_) => return,
            Err(e) => {
                let failure = ConnectFailure::of(e, self.attempts.waited());
                Trouble::Connect(self.attempts.failed(failure))
            }
        };
        self.report(trouble).await;
    }

    /// The connect-retry timer ran out with our connect still pending: the attempt is
    /// abandoned (the machine starts a new one) and counts as unanswered.
    pub(super) async fn connect_timed_out(&mut self) {
        let waited = self.attempts.waited();
        let t = self.attempts.failed(ConnectFailure::TimedOut(waited));
        let why = format!(
            "connect to {}: no answer within {} s (no SYN-ACK or reset)",
            self.cfg.peer,
            waited.as_secs()
        );
        self.report(Trouble::Connect(t)).await;
        self.connect_failed(why).await;
    }

    /// Sends a trouble to the owner.
    pub(super) async fn report(&mut self, trouble: Trouble) {
        let peer = self.cfg.peer;
        let _ = self
            .events
            .send(SessionEvent::Trouble { peer, trouble })
            .await;
    }
}

/// Opens a connection with the peer's socket options applied before the SYN.
pub(super) async fn connect(cfg: DriverConfig) -> io::Result<TcpStream> {
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
        // Before the SYN: it must leave with TTL 255 too, and a SYN-ACK from too far
        // is dropped by the kernel (the connect then times out).
        sockopt::set_min_ttl(&sock, cfg.peer.ip(), hops)?;
        sockopt::set_ttl_out(&sock, cfg.peer.ip())?;
    }
    let stream = sock.connect(cfg.peer).await.map_err(|e| match cfg.ttl_security {
        Some(hops) if e.kind() == io::ErrorKind::TimedOut => io::Error::new(
            e.kind(),
            format!(
                "{e} (ttlSecurity: the peer's segments must arrive with TTL {} or more, i.e. at most {hops} hop(s) away)",
                sockopt::gtsm_min_ttl(hops)
            ),
        ),
        _ => e,
    })?;
    stream.set_nodelay(true)?;
    Ok(stream)
}
