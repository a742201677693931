//! Invariants on arbitrary input, shared by the cargo-fuzz targets (`bgp/fuzz`:
//! `decode` for the codec, `fsm` for the session state machine) and the stable-Rust
//! smoke tests that run in CI (`tests/fuzz_smoke.rs`). Panics when an invariant is
//! broken; that is how a fuzzer learns of it.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::fsm::{Action, Event, Session, SessionConfig, State, Timer};
use crate::wire::{
    frame_len, AsPath, Capability, CodecOptions, Family, Message, Nlri, Notification, Open, Origin,
    PathAttributes, RefreshSubtype, RouteRefresh, Update,
};

/// Decodes `data` with the session options chosen by its first byte, and checks that
/// framing agrees with decoding and that whatever decodes re-encodes to the same value.
pub fn check_decode(data: &[u8]) {
    let Some((&sel, msg)) = data.split_first() else {
        return;
    };
    let opts = CodecOptions {
        four_octet_as: sel & 1 != 0,
        extended_message: sel & 2 != 0,
        add_path_ipv4: sel & 4 != 0,
        add_path_ipv6: sel & 8 != 0,
    };
    let framed = frame_len(msg, opts.max_message_len());
    let decoded = Message::decode(Bytes::copy_from_slice(msg), &opts);
    if decoded.is_ok() {
        assert!(
            matches!(framed, Ok(Some(n)) if n == msg.len()),
            "decoded a message framing rejects"
        );
    }
    // 2-octet sessions merge AS4_PATH lossily by design (RFC 6793), so only 4-octet
    // sessions must round-trip exactly.
    let (Ok(first), true) = (decoded, opts.four_octet_as) else {
        return;
    };
    let first = without_findings(first);
    if let Ok(bytes) = first.encode(&opts) {
        match Message::decode(bytes, &opts) {
            Ok(second) => assert_eq!(
                without_findings(second),
                first,
                "re-encoding changed the message"
            ),
            Err(e) => panic!("re-encoded {} does not decode: {e}", first.kind()),
        }
    }
}

/// The message without its RFC 7606 findings, which are reported on decode but never
/// encoded: what two decodes of the same content compare equal on.
pub fn without_findings(m: Message) -> Message {
    match m {
        Message::Update(u) => Message::Update(Update {
            errors: Vec::new(),
            ..u
        }),
        m => m,
    }
}

/// Reads the fuzzer's bytes as a script; once they run out every read is 0.
struct Script<'a>(&'a [u8]);

impl Script<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn byte(&mut self) -> u8 {
        self.u8().unwrap_or(0)
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }

    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}

const FUZZ_LOCAL_ID: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const FUZZ_PEER_ID: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);

/// Messages a peer could send, valid ones and the classic broken ones; the script picks
/// one and may flip a byte of it.
fn peer_message(pick: u8, arg: u8, peer_as: u32) -> Bytes {
    let caps = |extra: Vec<Capability>| {
        let mut v = vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::Multiprotocol(Family::IPV6_UNICAST),
            Capability::RouteRefresh,
        ];
        v.extend(extra);
        v
    };
    let hold = [0u16, 3, 9, 90, 1, 2, 65535][usize::from(arg % 7)];
    let m = match pick % 12 {
        0 => Message::Open(Open::new(peer_as, hold, FUZZ_PEER_ID, caps(Vec::new()))),
        1 => Message::Open(Open::new(
            peer_as,
            90,
            FUZZ_PEER_ID,
            caps(vec![
                Capability::ExtendedMessage,
                Capability::EnhancedRouteRefresh,
            ]),
        )),
        2 => Message::Open(Open::new(
            peer_as.wrapping_add(1),
            90,
            FUZZ_PEER_ID,
            caps(Vec::new()),
        )),
        3 => Message::Open(Open::new(peer_as, 90, FUZZ_LOCAL_ID, Vec::new())),
        4 => Message::Open(Open::new(
            peer_as,
            90,
            FUZZ_PEER_ID,
            vec![Capability::Multiprotocol(Family::new(25, 70))],
        )),
        5 | 6 => Message::Keepalive,
        7 => Message::Update(Update {
            attributes: PathAttributes {
                origin: Some(Origin::Igp),
                as_path: Some(AsPath::from_sequence([65001])),
                next_hop: Some(Ipv4Addr::new(198, 51, 100, 9)),
                ..PathAttributes::default()
            },
            nlri: vec![Nlri::new(ipnet::IpNet::V4(
                ipnet::Ipv4Net::new(Ipv4Addr::new(198, 18, arg, 0), 24).unwrap_or_default(),
            ))],
            ..Update::default()
        }),
        8 => Message::Update(Update::end_of_rib(Family::IPV6_UNICAST)),
        9 => Message::Notification(Notification {
            code: 6,
            subcode: arg % 12,
            data: Bytes::new(),
        }),
        10 => Message::RouteRefresh(RouteRefresh {
            family: Family::IPV4_UNICAST,
            subtype: RefreshSubtype::Request,
        }),
        _ => Message::Notification(Notification::shutdown("fuzz")),
    };
    m.encode(&CodecOptions::modern()).unwrap_or_default()
}

/// What the driver knows: which timers run until when, and whether a connection is up.
struct DriverModel {
    timers: HashMap<Timer, Instant>,
    connected: bool,
}

const TIMERS: [Timer; 6] = [
    Timer::ConnectRetry,
    Timer::Hold,
    Timer::Keepalive,
    Timer::DelayOpen,
    Timer::IdleHold,
    Timer::SendHold,
];

/// Drives [`Session`] with a script of events as the tokio driver would deliver them
/// (bytes only while connected, timers only when armed, time only forwards) and checks
/// after every event:
///
/// - the state changes reported chain up and end at `state()`;
/// - nothing is sent without a connection, and every message the machine writes
///   itself decodes (a NOTIFICATION, OPEN or KEEPALIVE);
/// - a passive session never connects out;
/// - UPDATE and ROUTE-REFRESH are handed up only in Established; `Up` comes with the
///   move to Established, `Down` with the move to Idle, and never otherwise;
/// - OpenSent, OpenConfirm and Established always hold a connection; Idle never does,
///   and has no timer but the idle-hold one;
/// - in Established the hold and keepalive timers run when negotiated non-zero, with
///   the keepalive shorter than the hold time; what was negotiated exists exactly in
///   OpenConfirm and Established, `established_at` exactly in Established;
/// - idle-hold back-off stays within its configured bounds; after a manual stop the
///   session is Idle and does not restart itself.
///
/// Long on purpose: one flat `match` from an input byte to an event, one arm per event
/// kind, so the fuzzer's input format reads top to bottom in one place.
pub fn check_fsm(data: &[u8]) {
    let mut s = Script(data);
    let sel = s.byte();
    let hold_time = [0u16, 3, 9, 90, 240][usize::from(sel % 5)];
    let ibgp = sel & 8 != 0;
    // Read in a fixed order (not inside `then_some`, which would always consume it).
    let keepalive = if sel & 16 != 0 {
        Some(u16::from(s.byte() % 100))
    } else {
        None
    };
    let cfg = SessionConfig {
        local_as: 64512,
        peer_as: if ibgp { 64512 } else { 64513 },
        router_id: FUZZ_LOCAL_ID,
        hold_time,
        keepalive,
        connect_retry: Duration::from_secs(2),
        passive: sel & 32 != 0,
        delay_open: (sel & 64 != 0).then_some(Duration::from_secs(1)),
        idle_hold: Duration::from_secs(1),
        idle_hold_max: Duration::from_secs(8),
        capabilities: vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::Multiprotocol(Family::IPV6_UNICAST),
            Capability::RouteRefresh,
            Capability::ExtendedMessage,
        ],
        open_hold_time: Duration::from_secs(240),
        send_hold_time: (sel & 128 != 0).then_some(Duration::from_secs(5)),
    };
    let passive = cfg.passive;
    let (idle_min, idle_max) = (cfg.idle_hold, cfg.idle_hold_max);
    let peer_as = cfg.peer_as;
    let mut fsm = Session::new(cfg);
    let mut now = Instant::now();
    let mut d = DriverModel {
        timers: HashMap::new(),
        connected: false,
    };
    let mut steps = 0;
    while let Some(op) = s.u8() {
        steps += 1;
        if steps > 2000 {
            break;
        }
        let state = fsm.state();
        let conn_state = matches!(state, State::Connect | State::Active);
        let event = match op % 15 {
            0 => Event::ManualStart,
            1 => Event::ManualStop((op & 0x80 != 0).then(|| "fuzz".to_string())),
            // The driver reports a connection only when it has one for the machine.
            2 if conn_state && !d.connected => {
                d.connected = true;
                Event::TcpConnected
            }
            3 if d.connected || conn_state => {
                d.connected = false;
                Event::TcpFailed
            }
            4 if d.connected => {
                let n = usize::from(s.byte());
                Event::Received(Bytes::copy_from_slice(s.take(n)))
            }
            5 | 6 if d.connected => {
                let mut m = peer_message(s.byte(), s.byte(), peer_as).to_vec();
                // Sometimes corrupt one byte, sometimes deliver only a prefix.
                let how = s.byte();
                if how & 3 == 1 && !m.is_empty() {
                    let at = usize::from(s.byte()) % m.len();
                    m[at] ^= s.byte() | 1;
                } else if how & 3 == 2 {
                    m.truncate(usize::from(s.byte()) % (m.len() + 1));
                }
                Event::Received(Bytes::from(m))
            }
            // An armed timer fires early (as if configured shorter).
            7 => {
                let t = TIMERS[usize::from(s.byte()) % TIMERS.len()];
                if d.timers.remove(&t).is_none() {
                    continue;
                }
                Event::TimerExpired(t)
            }
            // Time passes: every timer due fires, earliest first.
            8 => {
                let step = Duration::from_millis(u64::from(s.u16()) * 16);
                now += step;
                let mut due: Vec<(Instant, Timer)> = d
                    .timers
                    .iter()
                    .filter(|(_, at)| **at <= now)
                    .map(|(t, at)| (*at, *t))
                    .collect();
                due.sort_by_key(|(at, t)| (*at, *t as u8));
                for (_, t) in due {
                    if d.timers.remove(&t).is_some() {
                        let before = fsm.state();
                        let actions = fsm.handle(Event::TimerExpired(t), now);
                        check_actions(
                            &fsm,
                            &mut d,
                            before,
                            &actions,
                            passive,
                            now,
                            (idle_min, idle_max),
                            false,
                        );
                    }
                }
                continue;
            }
            9 => {
                let n = usize::from(s.byte() % 4);
                let u = peer_message(7, s.byte(), peer_as);
                Event::SendUpdates(vec![u; n])
            }
            10 if d.connected => Event::SendBlocked,
            11 if d.connected => Event::SendProgress,
            12 => Event::ConnectionReplaced,
            // The RIB resets the session for a prefix limit, with a hold-down that
            // stays within the configured back-off (as the speaker's does).
            13 => Event::Reset {
                notification: crate::wire::Notification::max_prefixes(
                    crate::wire::Family::IPV4_UNICAST,
                    u32::from(s.u16()),
                ),
                hold_down: Duration::from_millis(u64::from(s.u16()) * 16).min(idle_max),
            },
            // The driver resolved a collision in favour of a connection on which it
            // already sent our OPEN (fsm::collision): the machine adopts it.
            14 if conn_state && !d.connected => match fsm.open_message() {
                Some((open, _)) => {
                    d.connected = true;
                    Event::Adopt(Box::new(open))
                }
                None => continue,
            },
            _ => continue,
        };
        let stop = matches!(event, Event::ManualStop(_));
        let replaced = matches!(event, Event::ConnectionReplaced);
        let actions = fsm.handle(event, now);
        check_actions(
            &fsm,
            &mut d,
            state,
            &actions,
            passive,
            now,
            (idle_min, idle_max),
            replaced,
        );
        if stop {
            assert_eq!(
                fsm.state(),
                State::Idle,
                "ManualStop left {:?}",
                fsm.state()
            );
            assert!(
                !actions
                    .iter()
                    .any(|a| matches!(a, Action::StartTimer(Timer::IdleHold, _))),
                "a stopped session arms its restart: {actions:?}"
            );
        }
    }
}

/// The invariants of one step's actions, listed in [`check_fsm`]'s doc. Long on
/// purpose: one assertion per invariant in the doc's order, each with its message.
#[allow(clippy::too_many_arguments)]
fn check_actions(
    fsm: &Session,
    d: &mut DriverModel,
    before: State,
    actions: &[Action],
    passive: bool,
    now: Instant,
    idle_bounds: (Duration, Duration),
    replaced: bool,
) {
    let mut cur = before;
    let mut up = false;
    let mut down = false;
    let mut to_est = false;
    let mut to_idle = false;
    for a in actions {
        match a {
            Action::StateChanged { from, to } => {
                assert_eq!(
                    *from, cur,
                    "state change from {from:?} while in {cur:?}: {actions:?}"
                );
                assert_ne!(from, to, "a change to the same state: {actions:?}");
                cur = *to;
                to_est |= *to == State::Established;
                to_idle |= *to == State::Idle;
            }
            Action::Send(b) => {
                assert!(
                    d.connected,
                    "Send without a connection in {cur:?}: {actions:?}"
                );
                assert_ne!(cur, State::Idle, "Send in Idle: {actions:?}");
                // The machine's own messages decode; UPDATEs are the RIB's bytes.
                if b.get(18) != Some(&2) {
                    let m = Message::decode(b.clone(), &CodecOptions::default());
                    assert!(m.is_ok(), "the machine sent undecodable {b:?}: {m:?}");
                }
            }
            Action::Connect => {
                assert!(!passive, "a passive session connects out: {actions:?}");
                assert!(!d.connected, "Connect while connected: {actions:?}");
            }
            Action::Disconnect => d.connected = false,
            Action::StartTimer(t, dur) => {
                if *t == Timer::IdleHold {
                    assert!(
                        *dur >= idle_bounds.0 && *dur <= idle_bounds.1,
                        "idle hold {dur:?} outside {idle_bounds:?}"
                    );
                }
                assert!(!dur.is_zero(), "{t:?} armed for zero: {actions:?}");
                d.timers.insert(*t, now + *dur);
            }
            Action::StopTimer(t) => {
                d.timers.remove(t);
            }
            Action::Up(n) => {
                up = true;
                assert_eq!(Some(&**n), fsm.negotiated(), "Up with another negotiation");
            }
            Action::Down(_) => down = true,
            Action::Trouble(t) => {
                assert_ne!(t.state, State::Established, "trouble while up: {actions:?}");
            }
            Action::Update(_) | Action::RouteRefresh(_) => {
                assert_eq!(cur, State::Established, "routes handed up in {cur:?}");
            }
        }
    }
    let state = fsm.state();
    assert_eq!(
        cur, state,
        "reported changes end in {cur:?}, machine is in {state:?}"
    );
    assert_eq!(
        up, to_est,
        "Up without Established or the reverse: {actions:?}"
    );
    // A collision's loser leaves quietly (no Down), everything else that reaches Idle
    // says why.
    assert_eq!(
        down, to_idle,
        "Down without Idle or the reverse: {actions:?}"
    );
    if replaced {
        assert!(!down, "ConnectionReplaced reported Down");
    }
    if matches!(
        state,
        State::OpenSent | State::OpenConfirm | State::Established
    ) {
        assert!(d.connected, "{state:?} without a connection: {actions:?}");
    }
    if state == State::OpenSent {
        assert!(
            d.timers.contains_key(&Timer::Hold),
            "OpenSent without a hold timer"
        );
    }
    if state == State::Idle {
        assert!(!d.connected, "Idle with a connection: {actions:?}");
        let running: Vec<&Timer> = d.timers.keys().filter(|t| **t != Timer::IdleHold).collect();
        assert!(
            running.is_empty(),
            "Idle with timers {running:?}: {actions:?}"
        );
    }
    let negotiated = fsm.negotiated();
    assert_eq!(
        negotiated.is_some(),
        matches!(state, State::OpenConfirm | State::Established),
        "negotiation present in {state:?}"
    );
    assert_eq!(
        fsm.established_at().is_some(),
        state == State::Established,
        "established_at in {state:?}"
    );
    if let (State::Established, Some(n)) = (state, negotiated) {
        if n.hold_time > 0 {
            assert!(
                d.timers.contains_key(&Timer::Hold),
                "Established without hold timer"
            );
            assert!(
                n.keepalive > 0 && n.keepalive < n.hold_time,
                "keepalive {} hold {}",
                n.keepalive,
                n.hold_time
            );
            assert!(
                d.timers.contains_key(&Timer::Keepalive),
                "Established without keepalive timer"
            );
        } else {
            assert!(
                !d.timers.contains_key(&Timer::Hold),
                "hold timer with hold time 0"
            );
        }
    }
}
