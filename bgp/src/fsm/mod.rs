//! `bgp::fsm`: the RFC 4271 §8 session state machine of one connection to one peer,
//! sans-IO. Events go in (with the time, which the machine never reads itself),
//! actions come out: connect, send these bytes, arm that timer, the session is up,
//! these routes arrived, the session went down and why. The tokio driver
//! (`bgp::session`) is a thin loop that performs the actions and feeds back the
//! events, so every transition here is tested with no socket and no sleep.
//!
//! Covered: Idle/Connect/Active/OpenSent/OpenConfirm/Established; passive peers;
//! DelayOpen; per-peer hold, keepalive and connect-retry times; idle hold with
//! exponential back-off for flapping peers (DampPeerOscillations); the send hold timer
//! (RFC 9687) for a peer that stops reading; capability negotiation
//! ([`negotiate`](mod@negotiate)); the NOTIFICATION of every error path, including
//! RFC 9003 shutdown text. The machine's vocabulary (states, events, actions,
//! settings) is in `types`, re-exported here.
//! Connection collision (RFC 4271 §6.8) is decided by [`collision`], also sans-IO, which
//! follows both connections of a peer; this machine runs the one the session is on, and
//! hears of a collision's outcome through [`Event::ConnectionReplaced`] and
//! [`Event::Adopt`]. The driver only carries those decisions out.

pub mod collision;
pub mod counts;
pub mod negotiate;
pub mod trouble;
mod types;

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

pub use negotiate::{negotiate, Negotiated};
pub use trouble::{Detail, NoticedBy, SessionTrouble};
pub use types::{Action, DownReason, Event, SessionConfig, State, Timer, OPEN_HOLD_TIME};

use crate::wire::notification::{cease_subcode, code, open_subcode};
use crate::wire::{
    frame_len, Capability, CodecOptions, Message, Notification, Open, MAX_MESSAGE_LEN,
};

/// One connection's state machine.
#[derive(Debug)]
pub struct Session {
    cfg: SessionConfig,
    state: State,
    buf: BytesMut,
    local_open: Option<Open>,
    negotiated: Option<Negotiated>,
    established_at: Option<Instant>,
    next_idle_hold: Duration,
    send_blocked: bool,
    stopped: bool,
    /// Shortest idle hold for the next time the session goes down (a limit reset).
    hold_down: Duration,
    /// Messages read and sent, by type, for as long as this machine runs.
    received: counts::MessageCounts,
    sent: counts::MessageCounts,
}

/// A session that stayed up this long is not flapping: back-off starts over.
const STABLE: Duration = Duration::from_secs(60);

impl Session {
    /// A session in Idle.
    pub fn new(cfg: SessionConfig) -> Session {
        let next_idle_hold = cfg.idle_hold;
        Session {
            cfg,
            state: State::Idle,
            buf: BytesMut::new(),
            local_open: None,
            negotiated: None,
            established_at: None,
            next_idle_hold,
            hold_down: Duration::ZERO,
            send_blocked: false,
            stopped: true,
            received: Default::default(),
            sent: Default::default(),
        }
    }

    /// Messages (received, sent) by type.
    pub fn messages(&self) -> (counts::MessageCounts, counts::MessageCounts) {
        (self.received, self.sent)
    }

    /// Replaces the capabilities announced in the next OPEN (a session that is up keeps
    /// what it negotiated): the graceful-restart R and F bits end with our restart.
    pub fn set_capabilities(&mut self, capabilities: Vec<Capability>) {
        self.cfg.capabilities = capabilities;
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// What was negotiated, once Established.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.as_ref()
    }

    /// Whether the peer keeps our routes when this session ends without a NOTIFICATION
    /// (RFC 4724 §4.2): Established, we announced graceful restart and the peer sent
    /// its capability.
    pub fn graceful_restart_negotiated(&self) -> bool {
        self.state == State::Established
            && self
                .cfg
                .capabilities
                .iter()
                .any(|c| matches!(c, Capability::GracefulRestart(_)))
            && self
                .negotiated
                .as_ref()
                .is_some_and(|n| n.peer_graceful_restart.is_some())
    }

    /// When the session reached Established.
    pub fn established_at(&self) -> Option<Instant> {
        self.established_at
    }

    /// Our OPEN as it would be sent now, for a second connection to the peer while
    /// collisions are resolved (RFC 4271 §6.8). `None` if it cannot be encoded (a
    /// configuration with hundreds of capabilities).
    pub fn open_message(&self) -> Option<(Open, Bytes)> {
        let open = Open::new(
            self.cfg.local_as,
            self.cfg.hold_time,
            self.cfg.router_id,
            self.cfg.capabilities.clone(),
        );
        let bytes = Message::Open(open.clone())
            .encode(&CodecOptions::default())
            .ok()?;
        Some((open, bytes))
    }

    /// Feeds one event; returns what to do. Dispatches by kind of event: the
    /// operator's (start, stop, reset), timers, the connection's, and messages.
    pub fn handle(&mut self, event: Event, now: Instant) -> Vec<Action> {
        let mut out = Vec::new();
        match event {
            Event::ManualStart | Event::ManualStop(_) | Event::Reset { .. } => {
                self.admin(&mut out, event, now)
            }
            Event::TimerExpired(t) => self.timer(&mut out, t, now),
            Event::Received(bytes) => self.receive(&mut out, bytes, now),
            Event::SendUpdates(updates) if self.state == State::Established => {
                out.extend(updates.into_iter().map(Action::Send));
                self.restart_keepalive(&mut out);
            }
            _ => self.transport(&mut out, event, now),
        }
        for a in &out {
            if let Action::Send(b) = a {
                self.sent.count(b);
            }
        }
        out
    }

    /// ManualStart, ManualStop and Reset.
    fn admin(&mut self, out: &mut Vec<Action>, event: Event, now: Instant) {
        match event {
            Event::ManualStart => {
                self.stopped = false;
                self.next_idle_hold = self.cfg.idle_hold;
                if self.state == State::Idle {
                    out.push(Action::StopTimer(Timer::IdleHold));
                    self.start(out);
                }
            }
            Event::ManualStop(text) => {
                self.stopped = true;
                if matches!(
                    self.state,
                    State::OpenSent | State::OpenConfirm | State::Established
                ) {
                    let n = match text {
                        Some(t) => Notification::shutdown(&t),
                        None => Notification {
                            code: code::CEASE,
                            subcode: cease_subcode::ADMINISTRATIVE_SHUTDOWN,
                            data: Bytes::new(),
                        },
                    };
                    self.send_notification(out, &n);
                }
                self.go_idle(out, DownReason::Stopped, now);
            }
            Event::Reset {
                notification,
                hold_down,
            } if self.state != State::Idle => {
                self.hold_down = hold_down;
                // A peer still opening gets the NOTIFICATION too, so it knows why.
                if matches!(
                    self.state,
                    State::OpenSent | State::OpenConfirm | State::Established
                ) {
                    self.send_notification(out, &notification);
                }
                let why = DownReason::NotificationSent(notification.to_string());
                self.go_idle(out, why, now);
            }
            _ => {}
        }
    }

    /// A timer ran out.
    fn timer(&mut self, out: &mut Vec<Action>, timer: Timer, now: Instant) {
        match Event::TimerExpired(timer) {
            Event::TimerExpired(Timer::IdleHold) if self.state == State::Idle && !self.stopped => {
                self.start(out)
            }
            Event::TimerExpired(Timer::ConnectRetry) => match self.state {
                State::Connect | State::Active if !self.cfg.passive => {
                    out.push(Action::Disconnect);
                    out.push(Action::Connect);
                    out.push(Action::StartTimer(
                        Timer::ConnectRetry,
                        self.cfg.connect_retry,
                    ));
                    self.set(out, State::Connect);
                }
                State::Active => out.push(Action::StartTimer(
                    Timer::ConnectRetry,
                    self.cfg.connect_retry,
                )),
                _ => {}
            },
            Event::TimerExpired(Timer::DelayOpen)
                if matches!(self.state, State::Connect | State::Active) =>
            {
                self.send_open(out, State::OpenSent)
            }
            Event::TimerExpired(Timer::Hold)
                if matches!(
                    self.state,
                    State::OpenSent | State::OpenConfirm | State::Established
                ) =>
            {
                let n = Notification {
                    code: code::HOLD_TIMER_EXPIRED,
                    subcode: 0,
                    data: Bytes::new(),
                };
                let waited = self.hold_waited();
                self.fail_with(out, &n, Detail::HoldTimer { waited }, now);
            }
            Event::TimerExpired(Timer::Keepalive)
                if matches!(self.state, State::OpenConfirm | State::Established) =>
            {
                self.send_keepalive(out);
            }
            Event::TimerExpired(Timer::SendHold)
                if self.send_blocked && self.state != State::Idle =>
            {
                // RFC 9687 §4: try to tell the peer, then close without waiting for it.
                let n = Notification {
                    code: code::SEND_HOLD_TIMER_EXPIRED,
                    subcode: 0,
                    data: Bytes::new(),
                };
                if let Ok(b) = Message::Notification(n).encode(&self.tx()) {
                    out.push(Action::Send(b));
                }
                self.go_idle(out, DownReason::SendHoldTimerExpired, now);
            }
            _ => {}
        }
    }

    /// The connection's events: connected, adopted, failed, replaced, blocked.
    fn transport(&mut self, out: &mut Vec<Action>, event: Event, now: Instant) {
        match event {
            Event::TcpConnected if matches!(self.state, State::Connect | State::Active) => {
                out.push(Action::StopTimer(Timer::ConnectRetry));
                match self.cfg.delay_open {
                    Some(d) => out.push(Action::StartTimer(Timer::DelayOpen, d)),
                    None => self.send_open(out, State::OpenSent),
                }
            }
            Event::Adopt(open) if matches!(self.state, State::Connect | State::Active) => {
                for t in [Timer::ConnectRetry, Timer::DelayOpen] {
                    out.push(Action::StopTimer(t));
                }
                self.local_open = Some(*open);
                out.push(Action::StartTimer(Timer::Hold, self.cfg.open_hold_time));
                self.set(out, State::OpenSent);
            }
            Event::TcpFailed => match self.state {
                State::Connect | State::Active => {
                    // The connection is gone: so is anything it could not write, and
                    // with it the send hold timer (found by the fsm fuzz target).
                    self.send_blocked = false;
                    out.push(Action::StopTimer(Timer::SendHold));
                    out.push(Action::StopTimer(Timer::DelayOpen));
                    out.push(Action::StartTimer(
                        Timer::ConnectRetry,
                        self.cfg.connect_retry,
                    ));
                    self.set(out, State::Active);
                }
                State::Idle => {}
                _ => self.go_idle(out, DownReason::ConnectionLost, now),
            },
            Event::ConnectionReplaced
                if matches!(
                    self.state,
                    State::Connect | State::Active | State::OpenSent | State::OpenConfirm
                ) =>
            {
                self.drop_connection_quietly(out)
            }
            Event::SendBlocked if !self.send_blocked && self.state != State::Idle => {
                self.send_blocked = true;
                out.push(Action::StartTimer(Timer::SendHold, self.cfg.send_hold()));
            }
            Event::SendProgress if self.send_blocked => {
                self.send_blocked = false;
                out.push(Action::StopTimer(Timer::SendHold));
            }
            _ => {}
        }
    }

    fn tx(&self) -> CodecOptions {
        self.negotiated.as_ref().map(|n| n.tx).unwrap_or_default()
    }

    fn set(&mut self, out: &mut Vec<Action>, to: State) {
        if self.state != to {
            out.push(Action::StateChanged {
                from: self.state,
                to,
            });
            self.state = to;
        }
    }

    fn start(&mut self, out: &mut Vec<Action>) {
        self.buf.clear();
        self.negotiated = None;
        self.send_blocked = false;
        out.push(Action::StartTimer(
            Timer::ConnectRetry,
            self.cfg.connect_retry,
        ));
        if self.cfg.passive {
            self.set(out, State::Active);
        } else {
            out.push(Action::Connect);
            self.set(out, State::Connect);
        }
    }

    fn send_open(&mut self, out: &mut Vec<Action>, to: State) {
        out.push(Action::StopTimer(Timer::DelayOpen));
        let Some((open, b)) = self.open_message() else {
            // Only possible with hundreds of capabilities: a configuration error.
            out.push(Action::Disconnect);
            return;
        };
        out.push(Action::Send(b));
        self.local_open = Some(open);
        out.push(Action::StartTimer(Timer::Hold, self.cfg.open_hold_time));
        self.set(out, to);
    }

    fn send_keepalive(&mut self, out: &mut Vec<Action>) {
        if let Ok(b) = Message::Keepalive.encode(&CodecOptions::default()) {
            out.push(Action::Send(b));
        }
        self.restart_keepalive(out);
    }

    fn restart_keepalive(&self, out: &mut Vec<Action>) {
        if let Some(n) = self.negotiated.as_ref().filter(|n| n.keepalive > 0) {
            out.push(Action::StartTimer(
                Timer::Keepalive,
                Duration::from_secs(u64::from(n.keepalive)),
            ));
        }
    }

    fn restart_hold(&self, out: &mut Vec<Action>) {
        if let Some(n) = self.negotiated.as_ref().filter(|n| n.hold_time > 0) {
            out.push(Action::StartTimer(
                Timer::Hold,
                Duration::from_secs(u64::from(n.hold_time)),
            ));
        }
    }

    fn send_notification(&mut self, out: &mut Vec<Action>, n: &Notification) {
        if let Ok(b) = Message::Notification(n.clone()).encode(&self.tx()) {
            out.push(Action::Send(b));
        }
    }

    /// Sends `n`, closes, and goes to Idle with back-off.
    fn fail(&mut self, out: &mut Vec<Action>, n: &Notification, now: Instant) {
        self.fail_with(out, n, Detail::None, now);
    }

    /// Collision resolution ends this connection, not the session: back to Active with
    /// no Down and no back-off, retrying unless the kept connection takes over first.
    fn drop_connection_quietly(&mut self, out: &mut Vec<Action>) {
        out.push(Action::Disconnect);
        for t in [
            Timer::Hold,
            Timer::Keepalive,
            Timer::DelayOpen,
            Timer::SendHold,
        ] {
            out.push(Action::StopTimer(t));
        }
        out.push(Action::StartTimer(
            Timer::ConnectRetry,
            self.cfg.connect_retry,
        ));
        self.buf.clear();
        self.negotiated = None;
        self.send_blocked = false;
        self.set(out, State::Active);
    }

    /// A Cease for something the peer's operator did (RFC 4486: shutdown, peer
    /// de-configured, reset, configuration change) is no oscillation: back-off starts
    /// over, so the session follows the operator's repair at once. Back-off from an
    /// earlier fault (an AS mismatch) otherwise refused the repaired peer for minutes.
    fn forgive_operator_cease(&mut self, n: &Notification) {
        let operator = [
            cease_subcode::ADMINISTRATIVE_SHUTDOWN,
            cease_subcode::PEER_DECONFIGURED,
            cease_subcode::ADMINISTRATIVE_RESET,
            cease_subcode::OTHER_CONFIGURATION_CHANGE,
        ];
        if n.code == code::CEASE && operator.contains(&n.subcode) {
            self.next_idle_hold = self.cfg.idle_hold;
        }
    }

    fn go_idle(&mut self, out: &mut Vec<Action>, reason: DownReason, now: Instant) {
        if self.state == State::Idle {
            return;
        }
        out.push(Action::Disconnect);
        for t in [
            Timer::ConnectRetry,
            Timer::Hold,
            Timer::Keepalive,
            Timer::DelayOpen,
            Timer::SendHold,
        ] {
            out.push(Action::StopTimer(t));
        }
        let was_up = self.established_at.take();
        // An established session whose connection simply went (the peer's process
        // died or restarted) is what graceful restart is for: its routes are kept for
        // the restart time, so reconnecting must never wait longer than that. A
        // crash-looping pod would otherwise double the wait at each crash until it
        // outlasts the restart time and the node's routes are withdrawn.
        let peer_went = was_up.is_some() && reason == DownReason::ConnectionLost;
        out.push(Action::Down(reason));
        self.set(out, State::Idle);
        self.buf.clear();
        self.negotiated = None;
        self.send_blocked = false;
        if self.stopped {
            return;
        }
        // DampPeerOscillations: back off while the peer keeps failing; a session that
        // stayed up a while, or whose peer went away (above), starts it over.
        if peer_went || was_up.is_some_and(|t| now.saturating_duration_since(t) >= STABLE) {
            self.next_idle_hold = self.cfg.idle_hold;
        }
        let idle = self.next_idle_hold.max(std::mem::take(&mut self.hold_down));
        out.push(Action::StartTimer(Timer::IdleHold, idle));
        self.next_idle_hold = (idle * 2).min(self.cfg.idle_hold_max);
    }

    fn receive(&mut self, out: &mut Vec<Action>, bytes: Bytes, now: Instant) {
        if self.state == State::Idle {
            return;
        }
        self.buf.extend_from_slice(&bytes);
        loop {
            let rx = self.negotiated.as_ref().map(|n| n.rx).unwrap_or_default();
            let max = if self.negotiated.is_some() {
                rx.max_message_len()
            } else {
                MAX_MESSAGE_LEN
            };
            let len = match frame_len(&self.buf, max) {
                Ok(Some(len)) if len <= self.buf.len() => len,
                Ok(_) => return,
                Err(e) => return self.fail(out, &e.notification(), now),
            };
            let msg = self.buf.split_to(len).freeze();
            self.received.count(&msg);
            match Message::decode(msg.clone(), &rx) {
                Ok(m) => self.message(out, m, now),
                Err(e) => {
                    let n = e.notification();
                    let detail = Detail::of_refused(&n, &msg);
                    return self.fail_with(out, &n, detail, now);
                }
            }
            if self.state == State::Idle {
                return;
            }
        }
    }

    fn message(&mut self, out: &mut Vec<Action>, m: Message, now: Instant) {
        let fsm_error = |sub: u8| Notification {
            code: code::FSM,
            subcode: sub,
            data: Bytes::new(),
        };
        match (self.state, m) {
            (State::OpenSent | State::OpenConfirm, Message::Notification(n))
                if n.code == code::CEASE
                    && n.subcode == cease_subcode::CONNECTION_COLLISION_RESOLUTION =>
            {
                // The peer kept the other connection (RFC 4271 §6.8); the session goes on there.
                self.drop_connection_quietly(out);
            }
            (_, Message::Notification(n)) => {
                self.forgive_operator_cease(&n);
                let detail = Detail::of_received(&n, &self.cfg);
                self.trouble(out, NoticedBy::Peer, &n, detail);
                self.go_idle(out, DownReason::NotificationReceived(n.to_string()), now);
            }
            (State::Connect | State::Active, Message::Open(o)) => {
                // An OPEN while DelayOpen runs: answer at once (RFC 4271 §8.2.2).
                self.send_open(out, State::OpenSent);
                self.open_received(out, o, now);
            }
            (State::OpenSent, Message::Open(o)) => self.open_received(out, o, now),
            (State::OpenSent, _) => self.fail(out, &fsm_error(1), now),
            (State::OpenConfirm, Message::Keepalive) => {
                self.restart_hold(out);
                self.established_at = Some(now);
                self.set(out, State::Established);
                if let Some(n) = &self.negotiated {
                    out.push(Action::Up(Box::new(n.clone())));
                }
            }
            (State::OpenConfirm, _) => self.fail(out, &fsm_error(2), now),
            (State::Established, Message::Keepalive) => self.restart_hold(out),
            (State::Established, Message::Update(u)) => {
                self.restart_hold(out);
                out.push(Action::Update(Box::new(u)));
            }
            (State::Established, Message::RouteRefresh(r)) => {
                self.restart_hold(out);
                if self
                    .negotiated
                    .as_ref()
                    .is_some_and(|n| n.route_refresh || n.enhanced_route_refresh)
                {
                    out.push(Action::RouteRefresh(r));
                }
            }
            (State::Established, Message::Open(_)) => self.fail(out, &fsm_error(3), now),
            _ => {}
        }
    }

    fn open_received(&mut self, out: &mut Vec<Action>, o: Open, now: Instant) {
        let open_error = |sub: u8, data: Bytes| Notification {
            code: code::OPEN_MESSAGE,
            subcode: sub,
            data,
        };
        if o.asn() != self.cfg.peer_as {
            let data = Bytes::copy_from_slice(&o.my_as.to_be_bytes());
            let detail = Detail::PeerAs {
                offered: o.asn(),
                expected: self.cfg.peer_as,
            };
            let n = open_error(open_subcode::BAD_PEER_AS, data);
            return self.fail_with(out, &n, detail, now);
        }
        // RFC 6286 §2.2: within an AS the identifiers must differ.
        if o.asn() == self.cfg.local_as && o.bgp_id == self.cfg.router_id {
            let detail = Detail::RouterId {
                router_id: self.cfg.router_id,
            };
            let n = open_error(open_subcode::BAD_BGP_IDENTIFIER, Bytes::new());
            return self.fail_with(out, &n, detail, now);
        }
        let Some(local) = &self.local_open else {
            return;
        };
        let n = negotiate(local, &o, self.cfg.keepalive);
        if n.families.is_empty() {
            let detail = Detail::of_families(local, &o);
            let n = open_error(open_subcode::UNSUPPORTED_CAPABILITY, Bytes::new());
            return self.fail_with(out, &n, detail, now);
        }
        self.negotiated = Some(n);
        self.send_keepalive(out);
        self.restart_hold(out);
        if self.negotiated.as_ref().is_some_and(|n| n.hold_time == 0) {
            out.push(Action::StopTimer(Timer::Hold));
        }
        self.set(out, State::OpenConfirm);
    }
}

#[cfg(test)]
mod tests;
