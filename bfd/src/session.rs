//! One BFD session in asynchronous mode (RFC 5880 §6.8), sans-IO: the driver hands in
//! received packets and the time, and carries out what comes back (packets to send,
//! state changes); [`Session::next_deadline`] says when to call [`Session::on_timer`].
//!
//! What the RFC leaves open, decided here:
//! - both ends are active: packets go out before the remote discriminator is known;
//! - a packet goes out at once on every state change (FRR and BIRD do too), so the
//!   three-way handshake takes round trips, not transmit intervals;
//! - until the session is Up the advertised Desired Min TX is at least 1 s (§6.8.3);
//!   on reaching Up the configured intervals are announced with a Poll sequence;
//! - a Poll that raises the transmit interval or lowers the receive interval only takes
//!   effect on the Final (§6.8.3), so neither end declares the other dead meanwhile.

use std::time::{Duration, Instant};

use crate::packet::{Diag, Packet, State};

/// The slowest Desired Min TX a session advertises while not Up (§6.8.3).
pub const SLOW_TX: Duration = Duration::from_secs(1);

/// A session's intervals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// How often this end would like to send once Up.
    pub desired_min_tx: Duration,
    /// How often this end can take packets.
    pub required_min_rx: Duration,
    /// Packets missed before the peer is declared down.
    pub detect_mult: u8,
}

impl Default for Config {
    /// 300 ms × 3, FRR's and BIRD's defaults.
    fn default() -> Config {
        Config {
            desired_min_tx: Duration::from_millis(300),
            required_min_rx: Duration::from_millis(300),
            detect_mult: 3,
        }
    }
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send this packet to the peer.
    Send(Packet),
    /// The session changed state; `diag` says why when it left Up.
    StateChange {
        /// Before.
        from: State,
        /// After.
        to: State,
        /// The local diagnostic now in force.
        diag: Diag,
    },
}

/// Why a packet that decoded was not taken by this session (RFC 5880 §6.8.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ignored {
    /// Your Discriminator is not ours.
    OtherSession,
    /// It carries authentication, which this session does not use.
    Authenticated,
    /// This session is administratively down.
    AdminDown,
}

/// One BFD session.
#[derive(Debug, Clone)]
pub struct Session {
    cfg: Config,
    state: State,
    remote_state: State,
    local_discr: u32,
    remote_discr: u32,
    diag: Diag,
    /// The peer's Required Min RX (RFC: starts at 1 µs; 0 stops our periodic packets).
    remote_min_rx: Duration,
    /// The peer's Desired Min TX, last received.
    remote_min_tx: Duration,
    remote_mult: u8,
    /// The Desired Min TX and Required Min RX advertised now.
    adv_tx: Duration,
    adv_rx: Duration,
    /// The values timing uses: those advertised, except during a Poll that raised the
    /// transmit interval or lowered the receive interval.
    tx_in_force: Duration,
    rx_in_force: Duration,
    /// A Poll sequence is in progress: our packets carry P until a Final arrives.
    polling: bool,
    next_tx: Instant,
    /// Set by every accepted packet; acts while Init or Up.
    detect_at: Option<Instant>,
    /// xorshift state for the transmit jitter.
    rng: u64,
}

impl Session {
    /// A session in Down with `local_discr` (non-zero, unique among the driver's
    /// sessions), sending its first packet at `now`.
    pub fn new(cfg: Config, local_discr: u32, now: Instant) -> Session {
        let local_discr = local_discr.max(1);
        let slow = cfg.desired_min_tx.max(SLOW_TX);
        Session {
            cfg,
            state: State::Down,
            remote_state: State::Down,
            local_discr,
            remote_discr: 0,
            diag: Diag::None,
            remote_min_rx: Duration::from_micros(1),
            remote_min_tx: Duration::ZERO,
            remote_mult: 0,
            adv_tx: slow,
            adv_rx: cfg.required_min_rx,
            tx_in_force: slow,
            rx_in_force: cfg.required_min_rx,
            polling: false,
            next_tx: now,
            detect_at: None,
            rng: 0x9e37_79b9_7f4a_7c15 ^ u64::from(local_discr),
        }
    }

    /// The local state.
    pub fn state(&self) -> State {
        self.state
    }

    /// The state the peer last announced.
    pub fn remote_state(&self) -> State {
        self.remote_state
    }

    /// Why the session last left Up (or `None`).
    pub fn diag(&self) -> Diag {
        self.diag
    }

    /// Our discriminator.
    pub fn local_discr(&self) -> u32 {
        self.local_discr
    }

    /// The peer's discriminator (0 until heard, and after the peer went silent).
    pub fn remote_discr(&self) -> u32 {
        self.remote_discr
    }

    /// The configured intervals.
    pub fn config(&self) -> Config {
        self.cfg
    }

    /// How long silence lasts before the peer is declared down: the peer's multiplier
    /// times the slower of what we can take and what it sends (§6.8.4).
    pub fn detection_time(&self) -> Duration {
        self.rx_in_force.max(self.remote_min_tx) * u32::from(self.remote_mult.max(1))
    }

    /// The interval between our periodic packets, before jitter (§6.8.7); `None` while
    /// the peer asks for none (Required Min RX 0).
    pub fn tx_interval(&self) -> Option<Duration> {
        (!self.remote_min_rx.is_zero()).then(|| self.tx_in_force.max(self.remote_min_rx))
    }

    /// When [`Session::on_timer`] must run next.
    pub fn next_deadline(&self) -> Option<Instant> {
        let tx = self.tx_interval().map(|_| self.next_tx);
        let detect = self
            .detect_at
            .filter(|_| matches!(self.state, State::Init | State::Up));
        match (tx, detect) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The packet this session sends now, with Final when `fin` (never with Poll:
    /// §6.8.7 forbids both).
    fn packet(&self, fin: bool) -> Packet {
        Packet {
            diag: self.diag,
            state: self.state,
            poll: self.polling && !fin,
            fin,
            cpi: false,
            auth: false,
            demand: false,
            detect_mult: self.cfg.detect_mult.max(1),
            my_discr: self.local_discr,
            your_discr: self.remote_discr,
            desired_min_tx: micros(self.adv_tx),
            required_min_rx: micros(self.adv_rx),
            required_min_echo_rx: 0,
        }
    }

    /// A periodic interval with jitter: 75-100% of it, 75-90% with a multiplier of 1.
    fn jittered(&mut self, d: Duration) -> Duration {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let span = if self.cfg.detect_mult == 1 { 16 } else { 26 };
        let pct = 75 + u32::try_from(self.rng % span).unwrap_or(0);
        d * pct / 100
    }

    fn set_state(&mut self, to: State, diag: Diag, out: &mut Vec<Output>) {
        let from = self.state;
        if from == to {
            return;
        }
        self.state = to;
        self.diag = diag;
        out.push(Output::StateChange { from, to, diag });
        // Fast intervals only while Up (§6.8.3); announced with a Poll once Up.
        let tx = if to == State::Up {
            self.cfg.desired_min_tx
        } else {
            self.cfg.desired_min_tx.max(SLOW_TX)
        };
        self.advertise(tx, self.cfg.required_min_rx);
        if to != State::Up {
            // A Poll needs a live peer; in Down the new values simply apply.
            self.polling = false;
            self.tx_in_force = self.adv_tx;
            self.rx_in_force = self.adv_rx;
        }
        out.push(Output::Send(self.packet(false)));
    }

    /// Advertises new intervals; while Up, with a Poll sequence, keeping the slower
    /// transmit and the longer receive interval in force until its Final (§6.8.3).
    fn advertise(&mut self, tx: Duration, rx: Duration) {
        if (tx, rx) == (self.adv_tx, self.adv_rx) {
            return;
        }
        self.adv_tx = tx;
        self.adv_rx = rx;
        if self.state == State::Up {
            self.polling = true;
            self.tx_in_force = self.tx_in_force.min(tx);
            self.rx_in_force = self.rx_in_force.max(rx);
        } else {
            self.tx_in_force = tx;
            self.rx_in_force = rx;
        }
    }

    /// A decoded packet from the peer (RFC 5880 §6.8.6, from the discriminator check
    /// on). `Err` says why it was ignored.
    pub fn on_packet(&mut self, p: &Packet, now: Instant) -> Result<Vec<Output>, Ignored> {
        if p.your_discr != 0 && p.your_discr != self.local_discr {
            return Err(Ignored::OtherSession);
        }
        if p.auth {
            return Err(Ignored::Authenticated);
        }
        let mut out = Vec::new();
        self.remote_discr = p.my_discr;
        self.remote_state = p.state;
        self.remote_min_rx = Duration::from_micros(u64::from(p.required_min_rx));
        self.remote_min_tx = Duration::from_micros(u64::from(p.desired_min_tx));
        self.remote_mult = p.detect_mult;
        if p.fin && self.polling {
            self.polling = false;
            self.tx_in_force = self.adv_tx;
            self.rx_in_force = self.adv_rx;
        }
        if self.state == State::AdminDown {
            return Err(Ignored::AdminDown);
        }
        match (self.state, p.state) {
            (State::Down | State::Init | State::Up, State::AdminDown)
                if self.state != State::Down =>
            {
                self.set_state(State::Down, Diag::NeighborDown, &mut out);
            }
            (State::Down, State::Down) => self.set_state(State::Init, Diag::None, &mut out),
            (State::Down, State::Init) | (State::Init, State::Init | State::Up) => {
                self.set_state(State::Up, Diag::None, &mut out);
            }
            (State::Up, State::Down) => {
                self.set_state(State::Down, Diag::NeighborDown, &mut out);
            }
            _ => {}
        }
        if p.poll {
            out.push(Output::Send(self.packet(true)));
        }
        self.detect_at = Some(now + self.detection_time());
        // A faster peer: the next packet need not wait out a long interval.
        if let Some(i) = self.tx_interval() {
            self.next_tx = self.next_tx.min(now + i);
        }
        Ok(out)
    }

    /// The time passed: the peer declared down after a detection time of silence, and
    /// the periodic packet sent when due.
    pub fn on_timer(&mut self, now: Instant) -> Vec<Output> {
        let mut out = Vec::new();
        if matches!(self.state, State::Init | State::Up) && self.detect_at.is_some_and(|t| t <= now)
        {
            self.detect_at = None;
            self.remote_discr = 0;
            self.remote_state = State::Down;
            self.set_state(State::Down, Diag::TimeExpired, &mut out);
        }
        if let Some(interval) = self.tx_interval() {
            if self.next_tx <= now {
                out.push(Output::Send(self.packet(false)));
                self.next_tx = now + self.jittered(interval);
            }
        }
        out
    }

    /// Holds the session administratively down (telling the peer), or lets it come up
    /// again.
    pub fn set_admin_down(&mut self, down: bool) -> Vec<Output> {
        let mut out = Vec::new();
        match (down, self.state) {
            (true, State::AdminDown) | (false, State::Down | State::Init | State::Up) => {}
            (true, _) => self.set_state(State::AdminDown, Diag::AdminDown, &mut out),
            (false, State::AdminDown) => self.set_state(State::Down, Diag::None, &mut out),
        }
        out
    }

    /// New intervals: announced at once (with a Poll sequence while Up).
    pub fn set_config(&mut self, cfg: Config) -> Vec<Output> {
        self.cfg = cfg;
        let tx = if self.state == State::Up {
            cfg.desired_min_tx
        } else {
            cfg.desired_min_tx.max(SLOW_TX)
        };
        let before = self.polling;
        self.advertise(tx, cfg.required_min_rx);
        if self.polling && !before {
            vec![Output::Send(self.packet(false))]
        } else {
            Vec::new()
        }
    }
}

/// A duration in the packet's microseconds, saturating.
fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
