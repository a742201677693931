//! Two sessions wired back to back on a simulated clock, with the link cut at will:
//! the handshake, the negotiated intervals, the Poll sequence, detection of a silent
//! peer within the detection time, administrative down, and property tests over random
//! intervals and packet loss.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

const MS: Duration = Duration::from_millis(1);

fn cfg(tx_ms: u64, rx_ms: u64, mult: u8) -> Config {
    Config {
        desired_min_tx: MS * u32::try_from(tx_ms).unwrap(),
        required_min_rx: MS * u32::try_from(rx_ms).unwrap(),
        detect_mult: mult,
    }
}

/// A state change seen at a time (offset from the start).
#[derive(Debug, Clone, PartialEq)]
struct Change {
    at: Duration,
    a_side: bool,
    to: State,
    diag: Diag,
}

/// Two sessions, a 1 ms link each way, and a rule saying which packets get through.
struct Wire {
    start: Instant,
    now: Instant,
    a: Session,
    b: Session,
    /// (arrival, to A?, packet) in arrival order.
    flight: VecDeque<(Instant, bool, Packet)>,
    changes: Vec<Change>,
    /// Packets sent by each side (A, B), and of those with P and F.
    sent: [usize; 2],
    polls: usize,
    finals: usize,
}

impl Wire {
    fn new(ca: Config, cb: Config) -> Wire {
        let start = Instant::now();
        Wire {
            start,
            now: start,
            a: Session::new(ca, 1, start),
            b: Session::new(cb, 2, start + MS * 7),
            flight: VecDeque::new(),
            changes: Vec::new(),
            sent: [0, 0],
            polls: 0,
            finals: 0,
        }
    }

    fn outputs(&mut self, a_side: bool, out: Vec<Output>, pass: &dyn Fn(Duration, bool) -> bool) {
        for o in out {
            match o {
                Output::Send(p) => {
                    // Every packet sent must decode as sent (the wire format holds it).
                    assert_eq!(Packet::decode(&p.encode()), Ok(p));
                    assert!(!(p.poll && p.fin), "P and F together: {p:?}");
                    self.sent[usize::from(!a_side)] += 1;
                    self.polls += usize::from(p.poll);
                    self.finals += usize::from(p.fin);
                    if pass(self.now - self.start, a_side) {
                        self.flight.push_back((self.now + MS, !a_side, p));
                    }
                }
                Output::StateChange { to, diag, .. } => self.changes.push(Change {
                    at: self.now - self.start,
                    a_side,
                    to,
                    diag,
                }),
            }
        }
    }

    /// Runs until `until` (from the start); `pass(t, from_a)` keeps a packet.
    fn run(&mut self, until: Duration, pass: &dyn Fn(Duration, bool) -> bool) {
        let end = self.start + until;
        loop {
            let next = [
                self.a.next_deadline(),
                self.b.next_deadline(),
                self.flight.front().map(|f| f.0),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(next) = next.filter(|n| *n <= end) else {
                self.now = end;
                return;
            };
            self.now = self.now.max(next);
            while self.flight.front().is_some_and(|f| f.0 <= self.now) {
                let (_, to_a, p) = self.flight.pop_front().unwrap();
                let now = self.now;
                let s = if to_a { &mut self.a } else { &mut self.b };
                if let Ok(out) = s.on_packet(&p, now) {
                    self.outputs(to_a, out, pass);
                }
            }
            let now = self.now;
            let out = self.a.on_timer(now);
            self.outputs(true, out, pass);
            let out = self.b.on_timer(now);
            self.outputs(false, out, pass);
        }
    }

    /// When side A (or B) last went to `to`.
    fn last(&self, a_side: bool, to: State) -> Option<&Change> {
        self.changes
            .iter()
            .rev()
            .find(|c| c.a_side == a_side && c.to == to)
    }
}

fn always(_: Duration, _: bool) -> bool {
    true
}

#[test]
fn two_ends_come_up_in_round_trips_and_settle_on_the_negotiated_intervals() {
    let mut w = Wire::new(cfg(100, 100, 3), cfg(50, 300, 5));
    w.run(Duration::from_secs(3), &always);
    assert_eq!(w.a.state(), State::Up);
    assert_eq!(w.b.state(), State::Up);
    // Down -> Init -> Up on each side, within a few milliseconds of B's first packet.
    let up = w
        .last(true, State::Up)
        .unwrap()
        .at
        .max(w.last(false, State::Up).unwrap().at);
    assert!(up < Duration::from_millis(20), "{:?}", w.changes);
    // A sends at max(its 100 ms, B's 300 ms); B at max(50, 100).
    assert_eq!(w.a.tx_interval(), Some(MS * 300));
    assert_eq!(w.b.tx_interval(), Some(MS * 100));
    // A declares B dead after B's multiplier times max(A's rx 100, B's tx 50).
    assert_eq!(w.a.detection_time(), MS * 500);
    assert_eq!(w.b.detection_time(), MS * 900);
    // The fast intervals were announced with Polls, each answered with a Final.
    assert!(
        w.polls >= 2 && w.finals >= 2,
        "{} polls {} finals",
        w.polls,
        w.finals
    );
    // About 3 s / 300 ms (A) and 3 s / 100 ms (B), 75-100% jitter: not a flood.
    assert!((8..=16).contains(&w.sent[0]), "A sent {}", w.sent[0]);
    assert!((28..=45).contains(&w.sent[1]), "B sent {}", w.sent[1]);
}

#[test]
fn a_silent_peer_is_declared_down_within_the_detection_time() {
    let mut w = Wire::new(cfg(100, 100, 3), cfg(100, 100, 3));
    let cut = Duration::from_secs(2);
    // B's packets stop at 2 s; A's still reach B.
    w.run(Duration::from_secs(4), &|t, from_a| from_a || t < cut);
    let down = w.last(true, State::Down).unwrap();
    assert_eq!(down.diag, Diag::TimeExpired);
    let after = down.at - cut;
    // The last packet came at most one interval before the cut; 3 × 100 ms after it.
    assert!(after <= MS * 301, "down {after:?} after the cut");
    assert!(after >= MS * 200, "down only {after:?} after the cut");
    assert_eq!(w.a.remote_discr(), 0);
    // B heard A all along and learnt A went Down: it follows, said by A.
    assert_eq!(w.last(false, State::Down).unwrap().diag, Diag::NeighborDown);
}

#[test]
fn the_link_back_brings_the_session_up_again() {
    let mut w = Wire::new(cfg(100, 100, 3), cfg(100, 100, 3));
    let (cut, back) = (Duration::from_secs(2), Duration::from_secs(5));
    w.run(Duration::from_secs(8), &|t, _| t < cut || t >= back);
    assert_eq!(w.a.state(), State::Up);
    let up = w.last(true, State::Up).unwrap().at;
    // Down, the peer heard again within one slow (1 s) interval, then round trips.
    assert!(
        up >= back && up < back + Duration::from_millis(1100),
        "{up:?}"
    );
}

#[test]
fn administratively_down_tells_the_peer_and_holds() {
    let mut w = Wire::new(cfg(100, 100, 3), cfg(100, 100, 3));
    w.run(Duration::from_secs(1), &always);
    let out = w.b.set_admin_down(true);
    w.outputs(false, out, &always);
    w.run(Duration::from_secs(3), &always);
    assert_eq!(w.b.state(), State::AdminDown);
    assert_eq!(w.a.state(), State::Down);
    assert_eq!(w.last(true, State::Down).unwrap().diag, Diag::NeighborDown);
    assert_eq!(w.a.remote_state(), State::AdminDown);
    let out = w.b.set_admin_down(false);
    w.outputs(false, out, &always);
    w.run(Duration::from_secs(6), &always);
    assert_eq!((w.a.state(), w.b.state()), (State::Up, State::Up));
}

#[test]
fn a_slower_interval_takes_effect_only_on_the_final() {
    let mut w = Wire::new(cfg(100, 100, 3), cfg(100, 100, 3));
    w.run(Duration::from_secs(1), &always);
    let finals = w.finals;
    let out = w.a.set_config(cfg(500, 500, 3));
    assert!(matches!(out.as_slice(), [Output::Send(p)] if p.poll && p.desired_min_tx == 500_000));
    // Before the Final, the old intervals stay in force.
    assert_eq!(w.a.tx_interval(), Some(MS * 100));
    w.outputs(true, out, &always);
    w.run(Duration::from_secs(3), &always);
    assert!(w.finals > finals);
    assert_eq!(w.a.tx_interval(), Some(MS * 500));
    assert_eq!(w.b.tx_interval(), Some(MS * 500), "B honours A's slower rx");
    assert_eq!((w.a.state(), w.b.state()), (State::Up, State::Up));
}

#[test]
fn packets_for_another_session_or_with_authentication_are_ignored() {
    let now = Instant::now();
    let mut s = Session::new(Config::default(), 5, now);
    let p = Packet {
        your_discr: 6,
        ..s.packet(false)
    };
    assert_eq!(s.on_packet(&p, now), Err(Ignored::OtherSession));
    let p = Packet {
        auth: true,
        ..s.packet(false)
    };
    assert_eq!(s.on_packet(&p, now), Err(Ignored::Authenticated));
    assert_eq!(s.state(), State::Down);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any intervals and multipliers: both ends come Up, the detection time is the
    /// peer's multiplier times the slower of our rx and its tx, and after the peer goes
    /// silent Down comes within that time of its last packet.
    #[test]
    fn any_intervals_come_up_and_detect_silence_in_time(
        tx_a in 10u64..400, rx_a in 10u64..400, mult_a in 1u8..6,
        tx_b in 10u64..400, rx_b in 10u64..400, mult_b in 1u8..6,
    ) {
        let mut w = Wire::new(cfg(tx_a, rx_a, mult_a), cfg(tx_b, rx_b, mult_b));
        w.run(Duration::from_secs(4), &always);
        prop_assert_eq!((w.a.state(), w.b.state()), (State::Up, State::Up));
        let detect = w.a.detection_time();
        prop_assert_eq!(detect, MS * u32::try_from(rx_a.max(tx_b)).unwrap() * u32::from(mult_b));
        let cut = Duration::from_secs(4);
        w.run(Duration::from_secs(4) + detect * 2 + Duration::from_secs(1), &|t, from_a| from_a || t < cut);
        let down = w.last(true, State::Down).expect("A never noticed");
        prop_assert_eq!(down.diag, Diag::TimeExpired);
        prop_assert!(down.at - cut <= detect + MS, "{:?} > {:?}", down.at - cut, detect);
    }

    /// Random bytes never panic the decoder, and what decodes encodes back the same
    /// (the mandatory section).
    #[test]
    fn decoding_any_bytes_is_safe(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(p) = Packet::decode(&bytes) {
            if !p.auth {
                prop_assert_eq!(Packet::decode(&p.encode()), Ok(p));
            }
        }
    }
}
