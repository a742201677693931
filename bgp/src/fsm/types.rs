//! The machine's vocabulary: its states and timers, the events that go in, the actions
//! that come out, why a session went down, and its per-peer settings.

use std::net::Ipv4Addr;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;

use super::Negotiated;
use crate::wire::{Capability, Notification, Open, RouteRefresh, Update};

/// RFC 4271 §8.2.2 suggests a large hold time until the peer's OPEN arrives.
pub const OPEN_HOLD_TIME: Duration = Duration::from_secs(240);

/// Session states (RFC 4271 §8.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum State {
    /// Not trying.
    Idle,
    /// Connecting out.
    Connect,
    /// Waiting for the peer to connect in.
    Active,
    /// OPEN sent, waiting for the peer's.
    OpenSent,
    /// OPENs exchanged, waiting for the first KEEPALIVE.
    OpenConfirm,
    /// Up: routes flow.
    Established,
}

/// The timers the machine asks the driver to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Timer {
    /// ConnectRetryTimer.
    ConnectRetry,
    /// HoldTimer.
    Hold,
    /// KeepaliveTimer.
    Keepalive,
    /// DelayOpenTimer.
    DelayOpen,
    /// IdleHoldTimer (restart back-off).
    IdleHold,
    /// SendHoldTimer (RFC 9687).
    SendHold,
}

/// Inputs. Above each, the RFC 4271 §8.1 event(s) it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// ManualStart / ManualStart_with_PassiveTcpEstablishment (by configuration).
    ManualStart,
    /// ManualStop, with an optional RFC 9003 shutdown message.
    ManualStop(Option<String>),
    /// The RIB ends the session with this NOTIFICATION (the peer went over a prefix
    /// limit, RFC 4486 Cease/1) and keeps it down for at least `hold_down` before the
    /// automatic restart, so a peer that sends the same table again cannot make the
    /// session flap every second.
    Reset {
        /// Sent to the peer.
        notification: Notification,
        /// Shortest idle time before reconnecting.
        hold_down: Duration,
    },
    /// Tcp_CR_Acked / TcpConnectionConfirmed: a connection is up (either direction).
    TcpConnected,
    /// TcpConnectionFails.
    TcpFailed,
    /// Bytes read from the connection (BGPOpen, KeepAliveMsg, UpdateMsg,
    /// NotifMsg, RouteRefresh and their error variants come out of these).
    Received(Bytes),
    /// ConnectRetryTimer_Expires, HoldTimer_Expires, KeepaliveTimer_Expires,
    /// DelayOpenTimer_Expires, IdleHoldTimer_Expires, SendHoldTimer_Expires.
    TimerExpired(Timer),
    /// The RIB has UPDATEs for the peer (already encoded with [`Negotiated::tx`]).
    SendUpdates(Vec<Bytes>),
    /// The socket would not take more bytes: the peer is not reading.
    SendBlocked,
    /// The socket took bytes again.
    SendProgress,
    /// Connection collision (RFC 4271 §6.8, decided by [`super::collision`]): the
    /// session goes on over the other connection. This one is dropped quietly (no
    /// Down, no back-off, back to Active); `Adopt` (or `TcpConnected`) for the kept
    /// connection follows.
    ConnectionReplaced,
    /// Connection collision (RFC 4271 §6.8): the connection that won, on which this
    /// OPEN (from [`super::Session::open_message`]) was already sent, becomes this machine's
    /// connection, in OpenSent; the peer's OPEN follows as `Received`.
    Adopt(Box<Open>),
}

/// Why a session went down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "detail")]
pub enum DownReason {
    /// Stopped by configuration or by the operator.
    Stopped,
    /// The peer sent this NOTIFICATION.
    NotificationReceived(String),
    /// We sent this NOTIFICATION.
    NotificationSent(String),
    /// The TCP connection failed or closed.
    ConnectionLost,
    /// The peer stopped reading (RFC 9687).
    SendHoldTimerExpired,
}

impl std::fmt::Display for DownReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DownReason::Stopped => f.write_str("stopped"),
            DownReason::NotificationReceived(n) => write!(f, "peer sent NOTIFICATION {n}"),
            DownReason::NotificationSent(n) => write!(f, "sent NOTIFICATION {n}"),
            DownReason::ConnectionLost => f.write_str("connection lost"),
            DownReason::SendHoldTimerExpired => {
                f.write_str("peer stopped reading (send hold timer expired)")
            }
        }
    }
}

/// Outputs, to be carried out in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Open a TCP connection to the peer.
    Connect,
    /// Close the connection (after sending what was queued before).
    Disconnect,
    /// Write these bytes.
    Send(Bytes),
    /// (Re)start a timer.
    StartTimer(Timer, Duration),
    /// Stop a timer.
    StopTimer(Timer),
    /// The state changed.
    StateChanged {
        /// Old state.
        from: State,
        /// New state.
        to: State,
    },
    /// The session reached Established.
    Up(Box<Negotiated>),
    /// The session left Established (or never got there) for this reason.
    Down(DownReason),
    /// An UPDATE arrived (RFC 7606 findings are inside it).
    Update(Box<Update>),
    /// The peer asked for our routes again, or marks a refresh's start or end.
    RouteRefresh(RouteRefresh),
    /// A NOTIFICATION was sent or received before the session was Established,
    /// decoded (comes before the [`Action::Down`] it causes).
    Trouble(Box<super::SessionTrouble>),
}

/// Per-peer settings the machine needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionConfig {
    /// Our AS (as sent to this peer).
    pub local_as: u32,
    /// The peer's AS; an OPEN from another AS is refused (Bad Peer AS).
    pub peer_as: u32,
    /// Our BGP identifier.
    pub router_id: Ipv4Addr,
    /// Proposed hold time in seconds (0 or at least 3).
    pub hold_time: u16,
    /// Keepalive interval in seconds; `None` is a third of the negotiated hold time.
    pub keepalive: Option<u16>,
    /// Time between connection attempts.
    pub connect_retry: Duration,
    /// Never connect out; wait for the peer.
    pub passive: bool,
    /// Wait this long after the connection is up before sending OPEN (DelayOpen).
    pub delay_open: Option<Duration>,
    /// First restart delay after a failure; doubled per consecutive failure.
    pub idle_hold: Duration,
    /// Largest restart delay.
    pub idle_hold_max: Duration,
    /// Capabilities to send (the 4-octet AS capability is always added).
    pub capabilities: Vec<Capability>,
    /// Hold time between sending our OPEN and receiving the peer's (RFC 4271 §8.2.2
    /// suggests 4 minutes, [`OPEN_HOLD_TIME`]; BIRD calls it "startup hold time"). A
    /// connection that never sends its OPEN (a slow-loris) is closed when it expires.
    pub open_hold_time: Duration,
    /// The send hold time (RFC 9687); `None` is the RFC's default, see
    /// [`SessionConfig::send_hold`].
    pub send_hold_time: Option<Duration>,
}

impl SessionConfig {
    /// The send hold time: the configured one, or by default (RFC 9687 §4) the larger
    /// of 8 minutes and twice the hold time.
    pub fn send_hold(&self) -> Duration {
        self.send_hold_time.unwrap_or_else(|| {
            Duration::from_secs(480).max(Duration::from_secs(2 * u64::from(self.hold_time)))
        })
    }
}
