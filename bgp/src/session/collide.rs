//! The driver's side of connection collisions (RFC 4271 §6.8): it tells
//! [`crate::fsm::collision::Collision`] what happens to the peer's connections and
//! carries out its verdicts. Of two connections, the state machine runs one (`conn`);
//! the other (`second`) gets our OPEN here and waits for the peer's, and is handed to
//! the machine ([`Event::Adopt`]) when it wins or the first one goes away.

use std::io;

use bytes::{Bytes, BytesMut};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::{reject, send_notification, Driver};
use crate::fsm::collision::{first_message, FirstMessage, Side, Stage, Verdict};
use crate::fsm::{Event, State};
use crate::wire::notification::{cease_subcode, code};
use crate::wire::Open;

/// The peer's connection the state machine does not run, while a collision is resolved.
#[derive(Debug)]
pub(super) struct Second {
    pub(super) stream: TcpStream,
    side: Side,
    /// What it received so far (the peer's OPEN, perhaps more).
    inbox: BytesMut,
    /// The OPEN we sent on it, for the machine if it takes the connection over.
    open: Open,
    /// Its hold timer until the peer's OPEN is in (the machine's open hold time).
    pub(super) deadline: Instant,
}

impl Driver {
    /// A connection the listener accepted from the peer.
    pub(super) async fn incoming(&mut self, s: TcpStream) {
        // Idle refuses connections (RFC 4271 §8.2.2): the session is stopped or backing
        // off. That is no collision: Cease / Connection Rejected (RFC 4486 §4) says so.
        // (Collision Resolution here made a peer retrying every second look like a
        // collision loop while the back-off ran.)
        if self.fsm.state() == State::Idle {
            send_notification(&s, code::CEASE, cease_subcode::CONNECTION_REJECTED);
            return;
        }
        if let Some(hops) = self.cfg.ttl_security {
            if let Err(e) = super::gtsm_accepted(&s, hops) {
                drop(s);
                self.connect_failed(e.to_string()).await;
                return;
            }
        }
        let verdicts = self.collision.accepted();
        self.apply(verdicts, Some(s)).await;
    }

    /// Our connect finished.
    pub(super) async fn connect_done(&mut self, r: io::Result<TcpStream>) {
        match r {
            Ok(s) => {
                let verdicts = self.collision.connected();
                self.apply(verdicts, Some(s)).await;
            }
            Err(e) => {
                self.connect_failed(format!("connect to {}: {e}", self.cfg.peer))
                    .await;
                let verdicts = self.collision.closed(Side::Ours);
                // Only a machine still waiting for a connection cares; one that runs
                // on the peer's connection goes on.
                if self.conn.is_none() {
                    self.feed(Event::TcpFailed).await;
                }
                self.apply(verdicts, None).await;
            }
        }
    }

    /// The machine's connection closed or failed: if the other connection can carry
    /// the session (the core says so), this one goes quietly; otherwise the machine
    /// sees the failure.
    pub(super) async fn conn_lost(&mut self) {
        let carry_on = self.collision.carries_on(self.conn_side) && self.second.is_some();
        // The machine's Disconnect reports the close to the core; `settle` hands the
        // second connection over (with an OPEN held on it, if any).
        let lost = if carry_on {
            Event::ConnectionReplaced
        } else {
            Event::TcpFailed
        };
        self.feed(lost).await;
        self.settle().await;
    }

    /// Bytes on the machine's connection before its first message was complete.
    pub(super) async fn first_bytes(&mut self, bytes: &[u8]) {
        let Some(first) = self.first.as_mut() else {
            return;
        };
        first.extend_from_slice(bytes);
        // Held: the other connection decides.
        if self.collision.stage(self.conn_side) == Some(Stage::Waiting) {
            return;
        }
        match first_message(first) {
            FirstMessage::Incomplete => {}
            FirstMessage::Other => self.feed_first().await,
            FirstMessage::Open { bgp_id, asn } => {
                let verdicts = self.collision.open_received(self.conn_side, bgp_id, asn);
                self.apply(verdicts, None).await;
            }
        }
    }

    /// Hands what the machine's connection received so far to the machine.
    async fn feed_first(&mut self) {
        if let Some(b) = self.first.take().filter(|b| !b.is_empty()) {
            self.feed(Event::Received(b.freeze())).await;
        }
    }

    /// The second connection is readable (or failed, `ok` false).
    pub(super) async fn read_second(&mut self, ok: bool) {
        let Some(second) = self.second.as_mut() else {
            return;
        };
        let read = if ok {
            super::read_now(&second.stream)
        } else {
            Ok(Bytes::new())
        };
        let side = second.side;
        match read {
            Ok(b) if b.is_empty() => return self.drop_second(None).await,
            Ok(b) => second.inbox.extend_from_slice(&b),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(_) => return self.drop_second(None).await,
        }
        // Held: the machine's connection decides.
        if self.collision.stage(side) == Some(Stage::Waiting) {
            return;
        }
        match first_message(&second.inbox) {
            FirstMessage::Incomplete => {}
            // Not an OPEN: most likely the peer's Cease for this connection, as it
            // resolved the collision for the other one first.
            FirstMessage::Other => self.drop_second(None).await,
            FirstMessage::Open { bgp_id, asn } => {
                let verdicts = self.collision.open_received(side, bgp_id, asn);
                self.apply(verdicts, None).await;
            }
        }
    }

    /// The second connection's OPEN did not come in time.
    pub(super) async fn second_timed_out(&mut self) {
        if self
            .second
            .as_ref()
            .is_some_and(|s| s.deadline <= Instant::now())
        {
            self.drop_second(Some(code::HOLD_TIMER_EXPIRED)).await;
        }
    }

    /// Closes the second connection, with a NOTIFICATION of this code if given; an
    /// OPEN held on the machine's connection goes on.
    async fn drop_second(&mut self, notify: Option<u8>) {
        if let Some(s) = self.second.take() {
            if let Some(c) = notify {
                send_notification(&s.stream, c, 0);
            }
            let verdicts = self.collision.closed(s.side);
            self.apply(verdicts, None).await;
        }
    }

    /// Carries out the core's verdicts. `fresh` is the connection just accepted or
    /// connected, which `Start` and `Refuse` are about.
    async fn apply(&mut self, verdicts: Vec<Verdict>, mut fresh: Option<TcpStream>) {
        for v in verdicts {
            match v {
                Verdict::Start(side) => {
                    if let Some(s) = fresh.take() {
                        self.start(side, s).await;
                    }
                }
                Verdict::Proceed(side) if side == self.conn_side && self.conn.is_some() => {
                    self.feed_first().await;
                }
                // The second connection won: the machine's was closed just before, and
                // `settle` hands the second to it.
                Verdict::Proceed(_) => {}
                Verdict::Close(side) => self.close(side, &mut fresh).await,
                Verdict::Refuse => {
                    if let Some(s) = fresh.take() {
                        reject(&s);
                    }
                }
            }
        }
        self.settle().await;
    }

    /// A connection is up: the machine takes it if it has none (and sends our OPEN by
    /// its own rules, DelayOpen included); otherwise it becomes the second connection
    /// and gets our OPEN at once.
    async fn start(&mut self, side: Side, s: TcpStream) {
        if self.conn.is_none() && matches!(self.fsm.state(), State::Connect | State::Active) {
            self.conn = Some(s);
            self.conn_side = side;
            self.first = Some(BytesMut::new());
            self.feed(Event::TcpConnected).await;
            return;
        }
        // Nothing is held on the machine's connection yet (this one just came up), so a
        // close here has no verdict to carry out.
        let Some((open, bytes)) = self.fsm.open_message() else {
            let _ = self.collision.closed(side);
            return;
        };
        // A fresh socket takes a few dozen bytes at once; one that does not is broken.
        if !matches!(s.try_write(&bytes), Ok(n) if n == bytes.len()) {
            let _ = self.collision.closed(side);
            return;
        }
        self.second = Some(Second {
            stream: s,
            side,
            inbox: BytesMut::new(),
            open,
            deadline: Instant::now() + self.cfg.fsm.open_hold_time,
        });
    }

    /// Closes `side`'s connection for the collision: the machine's goes quietly
    /// (back to Active, no Down), the second or a fresh one just closes, a connect
    /// in progress is abandoned.
    async fn close(&mut self, side: Side, fresh: &mut Option<TcpStream>) {
        if side == self.conn_side {
            // Taken first: the core already knows, and the machine's Disconnect must
            // not report the close again (the slot may hold a newer connection now).
            if let Some(c) = self.conn.take() {
                reject(&c);
                self.first = None;
                self.out.clear();
                self.blocked = false;
                self.feed(Event::ConnectionReplaced).await;
                return;
            }
        }
        if self.second.as_ref().is_some_and(|s| s.side == side) {
            if let Some(s) = self.second.take() {
                reject(&s.stream);
            }
            return;
        }
        if side == Side::Ours && self.connecting.take().is_some() {
            return;
        }
        if let Some(s) = fresh.take() {
            reject(&s);
        }
    }

    /// A machine left without a connection, while the second one is still in the
    /// running, takes it over with the OPEN already sent on it.
    pub(super) async fn settle(&mut self) {
        if self.conn.is_some() || !matches!(self.fsm.state(), State::Connect | State::Active) {
            return;
        }
        let Some(s) = self.second.take() else {
            return;
        };
        if self.collision.stage(s.side).is_none() {
            return;
        }
        self.conn = Some(s.stream);
        self.conn_side = s.side;
        self.feed(Event::Adopt(Box::new(s.open))).await;
        let inbox = s.inbox;
        if first_message(&inbox) == FirstMessage::Incomplete {
            // Its OPEN is not in yet: the core still has to see it.
            self.first = Some(inbox);
        } else if !inbox.is_empty() {
            self.feed(Event::Received(Bytes::from(inbox))).await;
        }
    }
}
