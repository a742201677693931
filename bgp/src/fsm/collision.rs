//! Connection collisions (RFC 4271 §6.8), sans-IO: the two connections one peer can
//! have at once — the one we opened ([`Side::Ours`]) and the one the peer opened
//! ([`Side::Theirs`]) — and which of them the session keeps.
//!
//! Both proceed: each gets our OPEN as soon as its TCP connection is up, so two
//! speakers that dial each other at the same moment never wait for a timer. Once the
//! peer's OPEN is in on one of them, the BGP identifiers (RFC 6286 §2.3: then the AS
//! numbers) decide: the connection opened by the side with the higher identifier stays,
//! the other is closed with Cease / Connection Collision Resolution. An Established
//! connection wins over a new one unless `detect_established` (RFC 4271 §8.1.1
//! `CollisionDetectEstablishedState`) says to apply the identifiers to it too.
//!
//! The decision is taken as soon as the first OPEN arrives if the other connection is
//! up at all (§6.8 allows looking at OpenSent connections when the peer's identifier
//! is known, and the OPEN just received tells it): both speakers then close the same
//! connection before either can reach Established on it. A connection still
//! connecting is not a collision yet; it is closed if it comes up after the other one
//! is Established.

use std::net::Ipv4Addr;

use bytes::Bytes;
use serde::Serialize;

use crate::wire::{frame_len, CodecOptions, Message, MAX_MESSAGE_LEN};

/// Which end opened a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Side {
    /// We connected to the peer.
    Ours,
    /// The peer connected to us.
    Theirs,
}

impl Side {
    /// The other connection.
    pub fn other(self) -> Side {
        match self {
            Side::Ours => Side::Theirs,
            Side::Theirs => Side::Ours,
        }
    }
}

/// How far one connection got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Stage {
    /// Our connect is in progress (only [`Side::Ours`]).
    Connecting,
    /// Up, our OPEN sent (or about to be, after DelayOpen), the peer's not in yet.
    OpenSent,
    /// The peer's OPEN is in.
    OpenConfirm,
    /// The session runs on it.
    Established,
}

/// What to do with a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Verdict {
    /// The connection is up: send our OPEN on it now.
    Start(Side),
    /// Let the connection's handshake go on with the OPEN it received.
    Proceed(Side),
    /// Close the connection with Cease / Connection Collision Resolution (subcode 7);
    /// a connection still connecting is just abandoned.
    Close(Side),
    /// Close the connection just accepted with Cease / Connection Collision
    /// Resolution; the existing one from the peer stays.
    Refuse,
}

/// The collision state of one peer's connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collision {
    local_id: u32,
    local_as: u32,
    detect_established: bool,
    ours: Option<Stage>,
    theirs: Option<Stage>,
}

impl Collision {
    /// No connection yet. `detect_established` is `CollisionDetectEstablishedState`.
    pub fn new(local_id: Ipv4Addr, local_as: u32, detect_established: bool) -> Collision {
        Collision {
            local_id: u32::from(local_id),
            local_as,
            detect_established,
            ours: None,
            theirs: None,
        }
    }

    /// How far the connection opened by `side` got, if there is one.
    pub fn stage(&self, side: Side) -> Option<Stage> {
        match side {
            Side::Ours => self.ours,
            Side::Theirs => self.theirs,
        }
    }

    fn slot(&mut self, side: Side) -> &mut Option<Stage> {
        match side {
            Side::Ours => &mut self.ours,
            Side::Theirs => &mut self.theirs,
        }
    }

    /// Whether the other connection is Established and, by configuration, always wins.
    fn established_wins(&self, side: Side) -> bool {
        !self.detect_established && self.stage(side.other()) == Some(Stage::Established)
    }

    /// Our connect started (a previous attempt, if any, is gone).
    pub fn connecting(&mut self) {
        self.ours = Some(Stage::Connecting);
    }

    /// Our connect succeeded.
    pub fn connected(&mut self) -> Vec<Verdict> {
        if self.established_wins(Side::Ours) {
            self.ours = None;
            return vec![Verdict::Close(Side::Ours)];
        }
        self.ours = Some(Stage::OpenSent);
        vec![Verdict::Start(Side::Ours)]
    }

    /// The peer connected to us. A connection it opened before and still has is
    /// replaced (the peer gave up on it: it restarted, or the old one never got
    /// anywhere), unless the session runs on it.
    pub fn accepted(&mut self) -> Vec<Verdict> {
        let mut out = Vec::new();
        match self.theirs {
            // Two connections from the peer are no §6.8 collision: the running one stays.
            Some(Stage::Established) => return vec![Verdict::Refuse],
            Some(_) => out.push(Verdict::Close(Side::Theirs)),
            None => {}
        }
        if self.established_wins(Side::Theirs) {
            self.theirs = None;
            out.push(Verdict::Refuse);
            return out;
        }
        self.theirs = Some(Stage::OpenSent);
        out.push(Verdict::Start(Side::Theirs));
        out
    }

    /// The peer's OPEN, with this identifier and AS, came in on `side`'s connection.
    pub fn open_received(&mut self, side: Side, peer_id: Ipv4Addr, peer_as: u32) -> Vec<Verdict> {
        let other = side.other();
        let contested = match self.stage(other) {
            None | Some(Stage::Connecting) => false,
            Some(Stage::Established) if !self.detect_established => {
                *self.slot(side) = None;
                return vec![Verdict::Close(side)];
            }
            Some(_) => true,
        };
        if contested {
            let keep_this = match self.winner(u32::from(peer_id), peer_as) {
                Some(w) => w == side,
                // Identifiers and AS numbers equal (the FSM refuses that within one AS,
                // RFC 6286): no rule applies; keep the older connection.
                None => false,
            };
            if !keep_this {
                *self.slot(side) = None;
                return vec![Verdict::Close(side)];
            }
            *self.slot(other) = None;
            *self.slot(side) = Some(Stage::OpenConfirm);
            return vec![Verdict::Close(other), Verdict::Proceed(side)];
        }
        *self.slot(side) = Some(Stage::OpenConfirm);
        vec![Verdict::Proceed(side)]
    }

    /// The connection opened by the side with the higher identifier (compared as
    /// 32-bit unsigned integers, RFC 4271 §6.8), or with the same identifier the higher
    /// AS number (RFC 6286 §2.3).
    fn winner(&self, peer_id: u32, peer_as: u32) -> Option<Side> {
        match (self.local_id, self.local_as).cmp(&(peer_id, peer_as)) {
            std::cmp::Ordering::Greater => Some(Side::Ours),
            std::cmp::Ordering::Less => Some(Side::Theirs),
            std::cmp::Ordering::Equal => None,
        }
    }

    /// The session reached Established on `side`'s connection.
    pub fn established(&mut self, side: Side) {
        if self.stage(side).is_some() {
            *self.slot(side) = Some(Stage::Established);
        }
    }

    /// `side`'s connection closed (or our connect failed). Returns the connection the
    /// session carries on with, if one is left and the closed one was not the
    /// Established one (then the session itself ended).
    pub fn closed(&mut self, side: Side) -> Option<Side> {
        let was = self.slot(side).take();
        let other = side.other();
        match (was, self.stage(other)) {
            (Some(Stage::Established), _) | (_, None | Some(Stage::Connecting)) => None,
            _ => Some(other),
        }
    }

    /// The session stopped: no connection is left.
    pub fn reset(&mut self) {
        self.ours = None;
        self.theirs = None;
    }
}

/// The first message of a connection, as far as the collision decision cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstMessage {
    /// Not all of it is in yet.
    Incomplete,
    /// An OPEN from this identifier and (4-octet) AS.
    Open {
        /// BGP Identifier.
        bgp_id: Ipv4Addr,
        /// AS number (from the 4-octet AS capability when present).
        asn: u32,
    },
    /// Anything else (a NOTIFICATION, a malformed message): the state machine deals
    /// with it.
    Other,
}

/// Looks at the first message in `buf` (what a connection has received so far).
pub fn first_message(buf: &[u8]) -> FirstMessage {
    let len = match frame_len(buf, MAX_MESSAGE_LEN) {
        Ok(Some(len)) if len <= buf.len() => len,
        Ok(_) => return FirstMessage::Incomplete,
        Err(_) => return FirstMessage::Other,
    };
    match buf
        .get(..len)
        .map(|b| Message::decode(Bytes::copy_from_slice(b), &CodecOptions::default()))
    {
        Some(Ok(Message::Open(o))) => FirstMessage::Open {
            bgp_id: o.bgp_id,
            asn: o.asn(),
        },
        _ => FirstMessage::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Side::{Ours, Theirs};
    use Verdict::{Close, Proceed, Refuse, Start};

    /// What happens to a peer's connections, in order.
    #[derive(Debug, Clone, Copy)]
    enum Ev {
        Connecting,
        Connected,
        Accepted,
        /// The peer's OPEN on a connection, from this identifier and AS.
        Open(Side, [u8; 4], u32),
        Established(Side),
        Closed(Side),
    }
    use Ev::{Accepted, Connected, Connecting, Established as Up};

    const LOW: [u8; 4] = [198, 51, 100, 1];
    const HIGH: [u8; 4] = [198, 51, 100, 2];
    const AS: u32 = 64512;

    /// Runs the events and returns what the last one said; a close says which
    /// connection the session carries on with as `Proceed`.
    fn run(c: &mut Collision, events: &[Ev]) -> Vec<Verdict> {
        let mut last = Vec::new();
        for e in events {
            last = match *e {
                Connecting => {
                    c.connecting();
                    Vec::new()
                }
                Connected => c.connected(),
                Accepted => c.accepted(),
                Ev::Open(side, id, asn) => c.open_received(side, Ipv4Addr::from(id), asn),
                Up(side) => {
                    c.established(side);
                    Vec::new()
                }
                Ev::Closed(side) => c.closed(side).map(Proceed).into_iter().collect(),
            };
        }
        last
    }

    struct Case {
        name: &'static str,
        /// Our identifier and AS.
        local: ([u8; 4], u32),
        detect_established: bool,
        events: &'static [Ev],
        /// What the last event says.
        then: &'static [Verdict],
        /// The stages left: ours, theirs.
        left: (Option<Stage>, Option<Stage>),
    }

    const BOTH_UP: [Ev; 3] = [Connecting, Connected, Accepted];

    #[test]
    fn rfc_4271_section_6_8() {
        use Stage::{Connecting as Dialing, OpenConfirm, OpenSent};
        let cases = [
            Case {
                name: "ours higher, their OPEN first: theirs closed, ours goes on",
                local: (HIGH, AS),
                detect_established: false,
                events: &[
                    BOTH_UP[0],
                    BOTH_UP[1],
                    BOTH_UP[2],
                    Ev::Open(Theirs, LOW, AS),
                ],
                then: &[Close(Theirs)],
                left: (Some(OpenSent), None),
            },
            Case {
                name: "ours higher, OPEN on ours first: theirs closed at once",
                local: (HIGH, AS),
                detect_established: false,
                events: &[Connecting, Connected, Accepted, Ev::Open(Ours, LOW, AS)],
                then: &[Close(Theirs), Proceed(Ours)],
                left: (Some(OpenConfirm), None),
            },
            Case {
                name: "theirs higher, OPEN on theirs: ours closed",
                local: (LOW, AS),
                detect_established: false,
                events: &[Connecting, Connected, Accepted, Ev::Open(Theirs, HIGH, AS)],
                then: &[Close(Ours), Proceed(Theirs)],
                left: (None, Some(OpenConfirm)),
            },
            Case {
                name: "theirs higher, OPEN on ours: ours closed",
                local: (LOW, AS),
                detect_established: false,
                events: &[Connecting, Connected, Accepted, Ev::Open(Ours, HIGH, AS)],
                then: &[Close(Ours)],
                left: (None, Some(OpenSent)),
            },
            Case {
                name: "identifiers compare unsigned: 10.0.0.1 < 200.0.0.1",
                local: ([10, 0, 0, 1], AS),
                detect_established: false,
                events: &[
                    Connecting,
                    Connected,
                    Accepted,
                    Ev::Open(Ours, [200, 0, 0, 1], AS),
                ],
                then: &[Close(Ours)],
                left: (None, Some(OpenSent)),
            },
            Case {
                name: "identifiers compare unsigned: 128.0.0.0 > 127.255.255.255",
                local: ([128, 0, 0, 0], AS),
                detect_established: false,
                events: &[
                    Connecting,
                    Connected,
                    Accepted,
                    Ev::Open(Ours, [127, 255, 255, 255], AS),
                ],
                then: &[Close(Theirs), Proceed(Ours)],
                left: (Some(OpenConfirm), None),
            },
            Case {
                name: "equal identifiers: the higher AS wins (RFC 6286)",
                local: (LOW, 65001),
                detect_established: false,
                events: &[
                    Connecting,
                    Connected,
                    Accepted,
                    Ev::Open(Theirs, LOW, 65002),
                ],
                then: &[Close(Ours), Proceed(Theirs)],
                left: (None, Some(OpenConfirm)),
            },
            Case {
                name: "equal identifiers and AS: no rule, the older connection stays",
                local: (LOW, AS),
                detect_established: false,
                events: &[Connecting, Connected, Accepted, Ev::Open(Theirs, LOW, AS)],
                then: &[Close(Theirs)],
                left: (Some(OpenSent), None),
            },
            Case {
                name: "OpenConfirm collision: theirs higher replaces ours in OpenConfirm",
                local: (LOW, AS),
                detect_established: false,
                events: &[
                    Connecting,
                    Connected,
                    Ev::Open(Ours, HIGH, AS),
                    Accepted,
                    Ev::Open(Theirs, HIGH, AS),
                ],
                then: &[Close(Ours), Proceed(Theirs)],
                left: (None, Some(OpenConfirm)),
            },
            Case {
                name: "OpenConfirm collision: ours higher keeps ours in OpenConfirm",
                local: (HIGH, AS),
                detect_established: false,
                events: &[
                    Connecting,
                    Connected,
                    Ev::Open(Ours, LOW, AS),
                    Accepted,
                    Ev::Open(Theirs, LOW, AS),
                ],
                then: &[Close(Theirs)],
                left: (Some(OpenConfirm), None),
            },
            Case {
                name: "established ours wins over an incoming connection, whatever the identifiers",
                local: (LOW, AS),
                detect_established: false,
                events: &[
                    Connecting,
                    Connected,
                    Ev::Open(Ours, HIGH, AS),
                    Up(Ours),
                    Accepted,
                ],
                then: &[Refuse],
                left: (Some(Stage::Established), None),
            },
            Case {
                name: "established theirs wins over our connect that completes late",
                local: (HIGH, AS),
                detect_established: false,
                events: &[
                    Connecting,
                    Accepted,
                    Ev::Open(Theirs, LOW, AS),
                    Up(Theirs),
                    Connected,
                ],
                then: &[Close(Ours)],
                left: (None, Some(Stage::Established)),
            },
            Case {
                name: "CollisionDetectEstablishedState: identifiers decide against Established too",
                local: (LOW, AS),
                detect_established: true,
                events: &[
                    Connecting,
                    Connected,
                    Ev::Open(Ours, HIGH, AS),
                    Up(Ours),
                    Accepted,
                    Ev::Open(Theirs, HIGH, AS),
                ],
                then: &[Close(Ours), Proceed(Theirs)],
                left: (None, Some(OpenConfirm)),
            },
            Case {
                name: "CollisionDetectEstablishedState: established ours stays when higher",
                local: (HIGH, AS),
                detect_established: true,
                events: &[
                    Connecting,
                    Connected,
                    Ev::Open(Ours, LOW, AS),
                    Up(Ours),
                    Accepted,
                    Ev::Open(Theirs, LOW, AS),
                ],
                then: &[Close(Theirs)],
                left: (Some(Stage::Established), None),
            },
            Case {
                name: "the other connection closes before the OPEN comes: no collision",
                local: (LOW, AS),
                detect_established: false,
                events: &[
                    Connecting,
                    Connected,
                    Accepted,
                    Ev::Closed(Theirs),
                    Ev::Open(Ours, HIGH, AS),
                ],
                then: &[Proceed(Ours)],
                left: (Some(OpenConfirm), None),
            },
            Case {
                name: "a connection closed before its OPEN hands the session to the other",
                local: (LOW, AS),
                detect_established: false,
                events: &[Connecting, Connected, Accepted, Ev::Closed(Ours)],
                then: &[Proceed(Theirs)],
                left: (None, Some(OpenSent)),
            },
            Case {
                name: "the established connection closing ends the session",
                local: (LOW, AS),
                detect_established: false,
                events: &[
                    Connecting,
                    Connected,
                    Ev::Open(Ours, HIGH, AS),
                    Up(Ours),
                    Ev::Closed(Ours),
                ],
                then: &[],
                left: (None, None),
            },
            Case {
                name: "an incoming connection while our connect is pending gets our OPEN at once",
                local: (HIGH, AS),
                detect_established: false,
                events: &[Connecting, Accepted],
                then: &[Start(Theirs)],
                left: (Some(Dialing), Some(OpenSent)),
            },
            Case {
                name: "a connect still pending is no collision: their OPEN proceeds",
                local: (HIGH, AS),
                detect_established: false,
                events: &[Connecting, Accepted, Ev::Open(Theirs, LOW, AS)],
                then: &[Proceed(Theirs)],
                left: (Some(Dialing), Some(OpenConfirm)),
            },
            Case {
                name: "our connect completing beside theirs gets our OPEN; the OPEN then decides",
                local: (HIGH, AS),
                detect_established: false,
                events: &[Connecting, Accepted, Ev::Open(Theirs, LOW, AS), Connected],
                then: &[Start(Ours)],
                left: (Some(OpenSent), Some(OpenConfirm)),
            },
            Case {
                name: "...and ours higher takes over from theirs in OpenConfirm",
                local: (HIGH, AS),
                detect_established: false,
                events: &[
                    Connecting,
                    Accepted,
                    Ev::Open(Theirs, LOW, AS),
                    Connected,
                    Ev::Open(Ours, LOW, AS),
                ],
                then: &[Close(Theirs), Proceed(Ours)],
                left: (Some(OpenConfirm), None),
            },
            Case {
                name: "a second connection from the peer replaces its first",
                local: (HIGH, AS),
                detect_established: false,
                events: &[Accepted, Accepted],
                then: &[Close(Theirs), Start(Theirs)],
                left: (None, Some(OpenSent)),
            },
            Case {
                name: "a second connection from the peer is refused while the first is Established",
                local: (HIGH, AS),
                detect_established: true,
                events: &[Accepted, Ev::Open(Theirs, LOW, AS), Up(Theirs), Accepted],
                then: &[Refuse],
                left: (None, Some(Stage::Established)),
            },
        ];
        for case in &cases {
            let mut c = Collision::new(
                Ipv4Addr::from(case.local.0),
                case.local.1,
                case.detect_established,
            );
            let got = run(&mut c, case.events);
            assert_eq!(got, case.then, "{}", case.name);
            assert_eq!((c.stage(Ours), c.stage(Theirs)), case.left, "{}", case.name);
        }
    }

    /// Both speakers apply the rule to the same pair of identifiers, whichever order
    /// the OPENs arrive in: they keep the same connection (ours at one end is theirs at
    /// the other).
    #[test]
    fn both_ends_keep_the_same_connection() {
        for (a, b) in [(LOW, HIGH), (HIGH, LOW)] {
            for a_first in [Ours, Theirs] {
                for b_first in [Ours, Theirs] {
                    let mut ca = Collision::new(Ipv4Addr::from(a), AS, false);
                    let mut cb = Collision::new(Ipv4Addr::from(b), AS, false);
                    run(
                        &mut ca,
                        &[Connecting, Connected, Accepted, Ev::Open(a_first, b, AS)],
                    );
                    run(
                        &mut cb,
                        &[Connecting, Connected, Accepted, Ev::Open(b_first, a, AS)],
                    );
                    // The connection A opened is A's Ours and B's Theirs.
                    let a_keeps_its_own = ca.stage(Ours).is_some() && ca.stage(Theirs).is_none();
                    let b_keeps_as_own = cb.stage(Theirs).is_some() && cb.stage(Ours).is_none();
                    assert_eq!(
                        a_keeps_its_own, b_keeps_as_own,
                        "{a:?} {b:?} {a_first:?} {b_first:?}"
                    );
                    assert_eq!(a_keeps_its_own, a > b);
                }
            }
        }
    }

    #[test]
    fn the_first_message_is_read_only_when_complete() {
        let open = crate::wire::Open::new(AS, 90, Ipv4Addr::from(HIGH), Vec::new());
        let bytes = Message::Open(open)
            .encode(&CodecOptions::default())
            .unwrap();
        assert_eq!(first_message(&bytes[..10]), FirstMessage::Incomplete);
        assert_eq!(
            first_message(&bytes),
            FirstMessage::Open {
                bgp_id: Ipv4Addr::from(HIGH),
                asn: AS
            }
        );
        let keepalive = Message::Keepalive.encode(&CodecOptions::default()).unwrap();
        assert_eq!(first_message(&keepalive), FirstMessage::Other);
        assert_eq!(first_message(&[0u8; 19]), FirstMessage::Other);
    }
}
