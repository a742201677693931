//! The collision rules of RFC 4271 §6.8 as a table of cases: events in, the last
//! event's verdicts and the connections left out.

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

/// Runs the events and returns what the last one said.
fn run(c: &mut Collision, events: &[Ev]) -> Vec<Verdict> {
    let mut last = Vec::new();
    for e in events {
        last = match *e {
            Connecting => c.connecting(),
            Connected => c.connected(),
            Accepted => c.accepted(),
            Ev::Open(side, id, asn) => c.open_received(side, Ipv4Addr::from(id), asn),
            Up(side) => {
                c.established(side);
                Vec::new()
            }
            Ev::Closed(side) => c.closed(side),
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

#[test]
fn rfc_4271_section_6_8() {
    use Stage::{Connecting as Dialing, OpenConfirm, OpenSent, Waiting};
    let cases = [
        Case {
            name: "ours higher, their OPEN first: held, unanswered, while ours waits for one",
            local: (HIGH, AS),
            detect_established: false,
            events: &[Connecting, Connected, Accepted, Ev::Open(Theirs, LOW, AS)],
            then: &[],
            left: (Some(OpenSent), Some(Waiting)),
        },
        Case {
            name: "...then the OPEN on ours closes theirs",
            local: (HIGH, AS),
            detect_established: false,
            events: &[
                Connecting,
                Connected,
                Accepted,
                Ev::Open(Theirs, LOW, AS),
                Ev::Open(Ours, LOW, AS),
            ],
            then: &[Close(Theirs), Proceed(Ours)],
            left: (Some(OpenConfirm), None),
        },
        Case {
            name: "...or ours closing lets theirs go on",
            local: (HIGH, AS),
            detect_established: false,
            events: &[
                Connecting,
                Connected,
                Accepted,
                Ev::Open(Theirs, LOW, AS),
                Ev::Closed(Ours),
            ],
            then: &[Proceed(Theirs)],
            left: (None, Some(OpenConfirm)),
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
            name: "theirs higher, OPEN on ours: held while theirs waits for one",
            local: (LOW, AS),
            detect_established: false,
            events: &[Connecting, Connected, Accepted, Ev::Open(Ours, HIGH, AS)],
            then: &[],
            left: (Some(Waiting), Some(OpenSent)),
        },
        Case {
            name: "...then the OPEN on theirs closes ours",
            local: (LOW, AS),
            detect_established: false,
            events: &[
                Connecting,
                Connected,
                Accepted,
                Ev::Open(Ours, HIGH, AS),
                Ev::Open(Theirs, HIGH, AS),
            ],
            then: &[Close(Ours), Proceed(Theirs)],
            left: (None, Some(OpenConfirm)),
        },
        Case {
            name: "identifiers compare unsigned: 10.0.0.1 < 200.0.0.1",
            local: ([10, 0, 0, 1], AS),
            detect_established: false,
            events: &[
                Connecting,
                Connected,
                Accepted,
                Ev::Open(Theirs, [200, 0, 0, 1], AS),
            ],
            then: &[Close(Ours), Proceed(Theirs)],
            left: (None, Some(OpenConfirm)),
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
            name: "equal identifiers and AS: no rule, the first OPEN's connection stays",
            local: (LOW, AS),
            detect_established: false,
            events: &[
                Connecting,
                Connected,
                Accepted,
                Ev::Open(Theirs, LOW, AS),
                Ev::Open(Ours, LOW, AS),
            ],
            then: &[Close(Ours), Proceed(Theirs)],
            left: (None, Some(OpenConfirm)),
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
            name: "a connection closed before any OPEN: the other just goes on",
            local: (LOW, AS),
            detect_established: false,
            events: &[Connecting, Connected, Accepted, Ev::Closed(Ours)],
            then: &[],
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

#[test]
fn the_session_carries_on_with_the_other_connection_only_if_it_is_up() {
    let mut c = Collision::new(Ipv4Addr::from(HIGH), AS, false);
    run(&mut c, &[Connecting, Accepted]);
    assert!(c.carries_on(Ours), "theirs is up");
    assert!(!c.carries_on(Theirs), "ours is only connecting");
    run(&mut c, &[Connected]);
    assert!(c.carries_on(Theirs));
    let mut c = Collision::new(Ipv4Addr::from(HIGH), AS, false);
    run(
        &mut c,
        &[Accepted, Ev::Open(Theirs, LOW, AS), Up(Theirs), Connecting],
    );
    assert!(
        !c.carries_on(Theirs),
        "the Established one ends the session"
    );
}

/// Both speakers apply the rule to the same pair of identifiers, whichever order
/// the OPENs arrive in: they keep the same connection (ours at one end is theirs at
/// the other), and neither answers an OPEN on the other one.
#[test]
fn both_ends_keep_the_same_connection() {
    for (a, b) in [(LOW, HIGH), (HIGH, LOW)] {
        for a_first in [Ours, Theirs] {
            for b_first in [Ours, Theirs] {
                let mut ca = Collision::new(Ipv4Addr::from(a), AS, false);
                let mut cb = Collision::new(Ipv4Addr::from(b), AS, false);
                let up = [Connecting, Connected, Accepted];
                let mut said = Vec::new();
                for (c, first, peer) in [(&mut ca, a_first, b), (&mut cb, b_first, a)] {
                    run(c, &up);
                    let mut v = run(c, &[Ev::Open(first, peer, AS)]);
                    // The second OPEN only if that connection is still there.
                    if c.stage(first.other()).is_some() {
                        v.extend(run(c, &[Ev::Open(first.other(), peer, AS)]));
                    }
                    said.push(v);
                }
                // The loser at A is the connection B opened: A's Theirs, B's Ours.
                let (a_loser, b_loser) = if a > b {
                    (Theirs, Ours)
                } else {
                    (Ours, Theirs)
                };
                assert!(!said[0].contains(&Proceed(a_loser)), "{:?}", said[0]);
                assert!(!said[1].contains(&Proceed(b_loser)), "{:?}", said[1]);
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

/// Any sequence of events a driver can report: nothing panics, at most one connection
/// is ever past the OPEN exchange (never two sessions), and a held OPEN is always
/// settled by the other connection's OPEN or close.
#[test]
fn random_event_sequences_keep_one_session_at_most() {
    use proptest::prelude::*;
    let event = prop_oneof![
        Just(0u8),
        Just(1),
        Just(2),
        Just(3),
        Just(4),
        Just(5),
        Just(6),
        Just(7),
    ];
    let ids = prop_oneof![Just(LOW), Just(HIGH)];
    let mut runner = proptest::test_runner::TestRunner::default();
    runner
        .run(
            &(
                ids.clone(),
                ids,
                any::<bool>(),
                proptest::collection::vec(event, 0..40),
            ),
            |(local, peer, detect, events)| {
                let mut c = Collision::new(Ipv4Addr::from(local), AS, detect);
                let past_open = |s: Option<Stage>| {
                    matches!(
                        s,
                        Some(Stage::Waiting | Stage::OpenConfirm | Stage::Established)
                    )
                };
                for e in events {
                    // Only what a driver reports: an OPEN or Established on a
                    // connection that exists and is at that point.
                    let ev = match e {
                        0 => Some(Connecting),
                        1 if c.stage(Ours) == Some(Stage::Connecting) => Some(Connected),
                        2 => Some(Accepted),
                        3 | 4 => {
                            let side = if e == 3 { Ours } else { Theirs };
                            (c.stage(side) == Some(Stage::OpenSent))
                                .then_some(Ev::Open(side, peer, AS))
                        }
                        5 => [Ours, Theirs]
                            .into_iter()
                            .find(|s| c.stage(*s) == Some(Stage::OpenConfirm))
                            .map(Up),
                        6 => Some(Ev::Closed(Ours)),
                        7 => Some(Ev::Closed(Theirs)),
                        _ => None,
                    };
                    let Some(ev) = ev else { continue };
                    run(&mut c, &[ev]);
                    prop_assert!(
                        !(past_open(c.stage(Ours)) && past_open(c.stage(Theirs))),
                        "{:?} {:?} after {ev:?}",
                        c.stage(Ours),
                        c.stage(Theirs)
                    );
                    // A held OPEN only ever waits for a connection that has none yet.
                    for side in [Ours, Theirs] {
                        if c.stage(side) == Some(Stage::Waiting) {
                            prop_assert_eq!(c.stage(side.other()), Some(Stage::OpenSent));
                        }
                    }
                }
                Ok(())
            },
        )
        .unwrap();
}
