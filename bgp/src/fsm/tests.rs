//! The state machine driven event by event, with no socket and no sleep: each test is
//! a scenario (peer behaviour in, actions out) checked against RFC 4271 §8.

use std::time::{Duration, Instant};

use std::net::Ipv4Addr;

use super::*;
use crate::wire::{Family, Origin, PathAttributes, RouteRefresh, Update};

const LOCAL_ID: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
const PEER_ID: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 2);

fn cfg() -> SessionConfig {
    SessionConfig {
        local_as: 64512,
        peer_as: 64513,
        router_id: LOCAL_ID,
        hold_time: 9,
        keepalive: None,
        connect_retry: Duration::from_secs(2),
        passive: false,
        delay_open: None,
        idle_hold: Duration::from_secs(1),
        idle_hold_max: Duration::from_secs(8),
        open_hold_time: OPEN_HOLD_TIME,
        send_hold_time: None,
        capabilities: vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::Multiprotocol(Family::IPV6_UNICAST),
            Capability::RouteRefresh,
        ],
    }
}

fn peer_open(asn: u32, hold: u16, caps: Vec<Capability>) -> Bytes {
    Message::Open(Open::new(asn, hold, PEER_ID, caps))
        .encode(&CodecOptions::default())
        .unwrap_or_default()
}

fn default_peer_open() -> Bytes {
    peer_open(
        64513,
        90,
        vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::RouteRefresh,
        ],
    )
}

fn keepalive() -> Bytes {
    Message::Keepalive
        .encode(&CodecOptions::default())
        .unwrap_or_default()
}

fn sent(actions: &[Action]) -> Vec<Message> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send(b) => Message::decode(b.clone(), &CodecOptions::modern()).ok(),
            _ => None,
        })
        .collect()
}

fn notification_sent(actions: &[Action]) -> Option<(u8, u8)> {
    sent(actions).into_iter().find_map(|m| match m {
        Message::Notification(n) => Some((n.code, n.subcode)),
        _ => None,
    })
}

fn timer(actions: &[Action], t: Timer) -> Option<Duration> {
    actions.iter().rev().find_map(|a| match a {
        Action::StartTimer(x, d) if *x == t => Some(*d),
        _ => None,
    })
}

/// A session brought to Established against a well-behaved peer.
fn established(t0: Instant) -> Session {
    let mut s = Session::new(cfg());
    s.handle(Event::ManualStart, t0);
    s.handle(Event::TcpConnected, t0);
    s.handle(Event::Received(default_peer_open()), t0);
    s.handle(Event::Received(keepalive()), t0);
    assert_eq!(s.state(), State::Established);
    s
}

#[test]
fn active_open_reaches_established() {
    let t0 = Instant::now();
    let mut s = Session::new(cfg());
    let a = s.handle(Event::ManualStart, t0);
    assert!(a.contains(&Action::Connect));
    assert_eq!(timer(&a, Timer::ConnectRetry), Some(Duration::from_secs(2)));
    assert_eq!(s.state(), State::Connect);

    let a = s.handle(Event::TcpConnected, t0);
    let open = sent(&a);
    assert!(
        matches!(open.as_slice(), [Message::Open(o)] if o.asn() == 64512 && o.hold_time == 9 && o.bgp_id == LOCAL_ID)
    );
    assert_eq!(
        timer(&a, Timer::Hold),
        Some(OPEN_HOLD_TIME),
        "large hold time until the OPEN arrives"
    );
    assert_eq!(s.state(), State::OpenSent);

    // The peer's OPEN and KEEPALIVE arrive in one read, split oddly across two.
    let mut both = default_peer_open().to_vec();
    both.extend_from_slice(&keepalive());
    let (x, y) = both.split_at(30);
    let a = s.handle(Event::Received(Bytes::copy_from_slice(x)), t0);
    assert!(a.is_empty(), "half a message does nothing: {a:?}");
    let a = s.handle(Event::Received(Bytes::copy_from_slice(y)), t0);
    assert!(matches!(sent(&a).as_slice(), [Message::Keepalive]));
    assert_eq!(
        timer(&a, Timer::Hold),
        Some(Duration::from_secs(9)),
        "negotiated: min(9, 90)"
    );
    assert_eq!(timer(&a, Timer::Keepalive), Some(Duration::from_secs(3)));
    let up = a.iter().find_map(|x| match x {
        Action::Up(n) => Some(n.clone()),
        _ => None,
    });
    let up = up.unwrap_or_else(|| panic!("no Up in {a:?}"));
    assert_eq!(
        up.families,
        vec![Family::IPV4_UNICAST],
        "IPv6 only on our side"
    );
    assert!(up.route_refresh && up.rx.four_octet_as);
    assert_eq!(s.state(), State::Established);
    assert_eq!(s.established_at(), Some(t0));
}

#[test]
fn passive_peers_wait_and_retry_timers_rearm() {
    let t0 = Instant::now();
    let mut s = Session::new(SessionConfig {
        passive: true,
        ..cfg()
    });
    let a = s.handle(Event::ManualStart, t0);
    assert!(!a.contains(&Action::Connect));
    assert_eq!(s.state(), State::Active);
    let a = s.handle(Event::TimerExpired(Timer::ConnectRetry), t0);
    assert!(
        !a.contains(&Action::Connect),
        "a passive peer never connects out"
    );

    let mut s = Session::new(cfg());
    s.handle(Event::ManualStart, t0);
    let a = s.handle(Event::TcpFailed, t0);
    assert_eq!(s.state(), State::Active);
    assert!(timer(&a, Timer::ConnectRetry).is_some());
    let a = s.handle(Event::TimerExpired(Timer::ConnectRetry), t0);
    assert!(a.contains(&Action::Connect));
    assert_eq!(s.state(), State::Connect);
}

#[test]
fn delay_open_waits_or_answers_an_early_open() {
    let t0 = Instant::now();
    let c = SessionConfig {
        delay_open: Some(Duration::from_secs(5)),
        ..cfg()
    };
    let mut s = Session::new(c.clone());
    s.handle(Event::ManualStart, t0);
    let a = s.handle(Event::TcpConnected, t0);
    assert!(sent(&a).is_empty());
    assert_eq!(timer(&a, Timer::DelayOpen), Some(Duration::from_secs(5)));
    let a = s.handle(Event::TimerExpired(Timer::DelayOpen), t0);
    assert!(matches!(sent(&a).as_slice(), [Message::Open(_)]));
    assert_eq!(s.state(), State::OpenSent);

    let mut s = Session::new(c);
    s.handle(Event::ManualStart, t0);
    s.handle(Event::TcpConnected, t0);
    let a = s.handle(Event::Received(default_peer_open()), t0);
    assert!(
        matches!(sent(&a).as_slice(), [Message::Open(_), Message::Keepalive]),
        "{a:?}"
    );
    assert_eq!(s.state(), State::OpenConfirm);
}

#[test]
fn open_errors_send_the_rfc_notification() {
    let t0 = Instant::now();
    let cases: Vec<(Bytes, (u8, u8))> = vec![
        (peer_open(64999, 90, vec![]), (2, 2)), // Bad Peer AS
        (
            peer_open(
                64513,
                90,
                vec![Capability::Multiprotocol(Family::new(25, 70))],
            ),
            (2, 7),
        ), // no common family
        (
            Bytes::from([&[0xffu8; 16][..], &[0, 16, 4]].concat()),
            (1, 2),
        ), // length 16 < 19
        (Bytes::from_static(&[0xff; 19]), (1, 3)), // type 255
    ];
    for (bytes, want) in cases {
        let mut s = Session::new(cfg());
        s.handle(Event::ManualStart, t0);
        s.handle(Event::TcpConnected, t0);
        let a = s.handle(Event::Received(bytes), t0);
        assert_eq!(notification_sent(&a), Some(want), "{a:?}");
        assert!(a.contains(&Action::Disconnect));
        assert_eq!(s.state(), State::Idle);
        assert!(a
            .iter()
            .any(|x| matches!(x, Action::Down(DownReason::NotificationSent(_)))));
    }
    // The same identifier inside one AS.
    let mut s = Session::new(SessionConfig {
        peer_as: 64512,
        ..cfg()
    });
    s.handle(Event::ManualStart, t0);
    s.handle(Event::TcpConnected, t0);
    let same = Message::Open(Open::new(64512, 90, LOCAL_ID, vec![]))
        .encode(&CodecOptions::default())
        .unwrap_or_default();
    assert_eq!(
        notification_sent(&s.handle(Event::Received(same), t0)),
        Some((2, 3))
    );
}

#[test]
fn unexpected_messages_are_fsm_errors() {
    let t0 = Instant::now();
    let update = Message::Update(Update::end_of_rib(Family::IPV4_UNICAST))
        .encode(&CodecOptions::modern())
        .unwrap_or_default();
    // In OpenSent: anything but OPEN.
    let mut s = Session::new(cfg());
    s.handle(Event::ManualStart, t0);
    s.handle(Event::TcpConnected, t0);
    assert_eq!(
        notification_sent(&s.handle(Event::Received(update.clone()), t0)),
        Some((5, 1))
    );
    // In OpenConfirm: an UPDATE before the KEEPALIVE.
    let mut s = Session::new(cfg());
    s.handle(Event::ManualStart, t0);
    s.handle(Event::TcpConnected, t0);
    s.handle(Event::Received(default_peer_open()), t0);
    assert_eq!(
        notification_sent(&s.handle(Event::Received(update), t0)),
        Some((5, 2))
    );
    // In Established: a second OPEN.
    let mut s = established(t0);
    assert_eq!(
        notification_sent(&s.handle(Event::Received(default_peer_open()), t0)),
        Some((5, 3))
    );
}

#[test]
fn established_traffic_timers_and_rfc7606() {
    let t0 = Instant::now();
    let mut s = established(t0);
    let a = s.handle(Event::Received(keepalive()), t0);
    assert_eq!(timer(&a, Timer::Hold), Some(Duration::from_secs(9)));
    let a = s.handle(Event::TimerExpired(Timer::Keepalive), t0);
    assert!(matches!(sent(&a).as_slice(), [Message::Keepalive]));
    assert_eq!(timer(&a, Timer::Keepalive), Some(Duration::from_secs(3)));

    // A treat-as-withdraw UPDATE is handed up, the session stays.
    let u = Update {
        nlri: vec![crate::wire::Nlri::new(
            "198.18.0.0/26".parse().unwrap_or_default(),
        )],
        ..Update::default()
    };
    let b = Message::Update(u)
        .encode(&CodecOptions::modern())
        .unwrap_or_default();
    let a = s.handle(Event::Received(b), t0);
    let got = a.iter().find_map(|x| match x {
        Action::Update(u) => Some(u.treat_as_withdraw()),
        _ => None,
    });
    assert_eq!(got, Some(true));
    assert_eq!(s.state(), State::Established);

    // A route refresh request is passed on (route refresh was negotiated).
    let rr = Message::RouteRefresh(RouteRefresh {
        family: Family::IPV4_UNICAST,
        subtype: crate::wire::RefreshSubtype::Request,
    });
    let a = s.handle(
        Event::Received(rr.encode(&CodecOptions::modern()).unwrap_or_default()),
        t0,
    );
    assert!(a.iter().any(|x| matches!(x, Action::RouteRefresh(_))));

    // Our UPDATEs go out and restart the keepalive timer.
    let ours = Message::Update(Update {
        attributes: PathAttributes {
            origin: Some(Origin::Igp),
            ..PathAttributes::default()
        },
        ..Update::default()
    })
    .encode(&CodecOptions::modern())
    .unwrap_or_default();
    let a = s.handle(Event::SendUpdates(vec![ours.clone()]), t0);
    assert_eq!(a.first(), Some(&Action::Send(ours)));
    assert!(timer(&a, Timer::Keepalive).is_some());

    // A session-reset error in an UPDATE.
    let bad = Bytes::from(
        [
            &[0xffu8; 16][..],
            &[0, 29, 2, 0, 0, 0, 0, 33, 198, 18, 0, 0, 1],
        ]
        .concat(),
    );
    assert_eq!(
        notification_sent(&s.handle(Event::Received(bad), t0)),
        Some((3, 10))
    );
    assert_eq!(s.state(), State::Idle);
}

#[test]
fn hold_timer_expiry_and_received_notification() {
    let t0 = Instant::now();
    let mut s = established(t0);
    let a = s.handle(Event::TimerExpired(Timer::Hold), t0);
    assert_eq!(notification_sent(&a), Some((4, 0)));
    assert!(a.iter().any(|x| matches!(x, Action::Down(DownReason::NotificationSent(t)) if t == "Hold Timer Expired / Unspecific")));

    let mut s = established(t0);
    let n = Message::Notification(Notification::shutdown("rack 7 power work"))
        .encode(&CodecOptions::modern())
        .unwrap_or_default();
    let a = s.handle(Event::Received(n), t0);
    let down = a.iter().find_map(|x| match x {
        Action::Down(r) => Some(r.to_string()),
        _ => None,
    });
    assert_eq!(
        down.as_deref(),
        Some("peer sent NOTIFICATION Cease / Administrative Shutdown: \"rack 7 power work\"")
    );
    assert_eq!(
        notification_sent(&a),
        None,
        "no NOTIFICATION in reply to one"
    );
}

#[test]
fn manual_stop_sends_the_shutdown_message_and_stays_down() {
    let t0 = Instant::now();
    let mut s = established(t0);
    let a = s.handle(Event::ManualStop(Some("node drained".into())), t0);
    let text = sent(&a).into_iter().find_map(|m| match m {
        Message::Notification(n) => n.shutdown_message().map(String::from),
        _ => None,
    });
    assert_eq!(text.as_deref(), Some("node drained"));
    assert!(a.contains(&Action::Down(DownReason::Stopped)));
    assert_eq!(
        timer(&a, Timer::IdleHold),
        None,
        "a stopped session does not restart"
    );
    assert!(s
        .handle(Event::TimerExpired(Timer::IdleHold), t0)
        .is_empty());
}

#[test]
fn a_limit_reset_sends_cease_1_and_holds_the_session_down() {
    let t0 = Instant::now();
    let mut s = established(t0);
    let reset = |s: &mut Session, at: Instant| {
        s.handle(
            Event::Reset {
                notification: Notification::max_prefixes(Family::IPV4_UNICAST, 100),
                hold_down: Duration::from_secs(60),
            },
            at,
        )
    };
    // Up for two minutes first: the damping would start over at 1 s, the hold-down
    // must not.
    let a = reset(&mut s, t0 + Duration::from_secs(120));
    assert_eq!(notification_sent(&a), Some((6, 1)));
    assert!(a.iter().any(
        |x| matches!(x, Action::Down(DownReason::NotificationSent(t)) if t.contains("limit 100"))
    ));
    assert_eq!(s.state(), State::Idle);
    assert_eq!(timer(&a, Timer::IdleHold), Some(Duration::from_secs(60)));
    // It does restart by itself afterwards.
    let a = s.handle(Event::TimerExpired(Timer::IdleHold), t0);
    assert!(a.contains(&Action::Connect));
    // A later, ordinary failure is not held down 60 s again, but backs off from it.
    s.handle(Event::TcpConnected, t0);
    let a = s.handle(Event::Received(peer_open(64999, 90, vec![])), t0);
    assert_eq!(timer(&a, Timer::IdleHold), Some(Duration::from_secs(8)));
    // Nothing to reset while idle.
    assert!(reset(&mut s, t0).is_empty());
}

#[test]
fn a_peer_that_keeps_restarting_is_not_backed_off() {
    // A crash-looping peer: each session is established, then the connection drops.
    // Its routes are kept under graceful restart, so the wait before reconnecting
    // must stay at the shortest idle hold however often it happens.
    let t0 = Instant::now();
    let mut s = established(t0);
    for crash in 0..6 {
        let a = s.handle(Event::TcpFailed, t0);
        assert!(a.contains(&Action::Down(DownReason::ConnectionLost)));
        assert_eq!(
            timer(&a, Timer::IdleHold),
            Some(Duration::from_secs(1)),
            "crash {crash}"
        );
        s.handle(Event::TimerExpired(Timer::IdleHold), t0);
        s.handle(Event::TcpConnected, t0);
        s.handle(Event::Received(default_peer_open()), t0);
        s.handle(Event::Received(keepalive()), t0);
        assert_eq!(s.state(), State::Established);
    }
    // A failure before Established still backs off (the next one waits longer).
    s.handle(Event::TcpFailed, t0);
    s.handle(Event::TimerExpired(Timer::IdleHold), t0);
    s.handle(Event::TcpConnected, t0);
    let a = s.handle(Event::Received(peer_open(64999, 90, vec![])), t0);
    assert_eq!(timer(&a, Timer::IdleHold), Some(Duration::from_secs(2)));
}

#[test]
fn flapping_peers_back_off_exponentially_and_recover() {
    let t0 = Instant::now();
    let mut s = Session::new(cfg());
    s.handle(Event::ManualStart, t0);
    let mut delays = Vec::new();
    for _ in 0..5 {
        s.handle(Event::TcpConnected, t0);
        let a = s.handle(Event::Received(peer_open(64999, 90, vec![])), t0);
        delays.push(timer(&a, Timer::IdleHold).map(|d| d.as_secs()));
        let a = s.handle(Event::TimerExpired(Timer::IdleHold), t0);
        assert!(a.contains(&Action::Connect), "restarts after the idle hold");
    }
    assert_eq!(delays, [Some(1), Some(2), Some(4), Some(8), Some(8)]);

    // A session that stays up a minute is not flapping: back-off starts over.
    s.handle(Event::TcpConnected, t0);
    s.handle(Event::Received(default_peer_open()), t0);
    s.handle(Event::Received(keepalive()), t0);
    let a = s.handle(
        Event::TimerExpired(Timer::Hold),
        t0 + Duration::from_secs(120),
    );
    assert_eq!(timer(&a, Timer::IdleHold), Some(Duration::from_secs(1)));
}

#[test]
fn a_peer_that_stops_reading_is_dropped_by_the_send_hold_timer() {
    let t0 = Instant::now();
    let mut s = established(t0);
    let a = s.handle(Event::SendBlocked, t0);
    assert_eq!(timer(&a, Timer::SendHold), Some(Duration::from_secs(480)));
    let a = s.handle(Event::SendProgress, t0);
    assert!(a.contains(&Action::StopTimer(Timer::SendHold)));
    assert!(
        s.handle(Event::TimerExpired(Timer::SendHold), t0)
            .is_empty(),
        "not blocked any more"
    );
    s.handle(Event::SendBlocked, t0);
    let a = s.handle(Event::TimerExpired(Timer::SendHold), t0);
    assert_eq!(notification_sent(&a), Some((8, 0)));
    assert!(a.contains(&Action::Down(DownReason::SendHoldTimerExpired)));
    assert_eq!(s.state(), State::Idle);
}

#[test]
fn hold_time_zero_means_no_keepalives() {
    let t0 = Instant::now();
    let mut s = Session::new(SessionConfig {
        hold_time: 0,
        ..cfg()
    });
    s.handle(Event::ManualStart, t0);
    s.handle(Event::TcpConnected, t0);
    let a = s.handle(Event::Received(default_peer_open()), t0);
    assert_eq!(timer(&a, Timer::Keepalive), None);
    assert!(a.contains(&Action::StopTimer(Timer::Hold)));
    assert_eq!(
        s.negotiated().map(|n| (n.hold_time, n.keepalive)),
        Some((0, 0))
    );
}

#[test]
fn negotiation_intersects_capabilities_per_direction() {
    use crate::wire::AddPathFamily;
    let local = Open::new(
        64512,
        90,
        LOCAL_ID,
        vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::Multiprotocol(Family::IPV6_UNICAST),
            Capability::ExtendedMessage,
            Capability::AddPath(vec![AddPathFamily {
                family: Family::IPV4_UNICAST,
                receive: true,
                send: false,
            }]),
        ],
    );
    let remote = Open::new(
        64513,
        30,
        PEER_ID,
        vec![
            Capability::Multiprotocol(Family::IPV6_UNICAST),
            Capability::ExtendedMessage,
            Capability::AddPath(vec![AddPathFamily {
                family: Family::IPV4_UNICAST,
                receive: true,
                send: true,
            }]),
        ],
    );
    let n = negotiate(&local, &remote, Some(20));
    assert_eq!(n.families, vec![Family::IPV6_UNICAST]);
    assert_eq!(
        (n.hold_time, n.keepalive),
        (30, 10),
        "keepalive capped at a third of the hold time"
    );
    assert!(n.rx.extended_message && n.tx.extended_message);
    assert!(n.add_path_receive.is_empty(), "IPv4 is not a common family");
    // With no multiprotocol capability, a peer speaks IPv4 unicast only (RFC 4760).
    let plain = Open {
        capabilities: vec![],
        ..remote.clone()
    };
    let n = negotiate(&local, &plain, None);
    assert_eq!(n.families, vec![Family::IPV4_UNICAST]);
    assert!(
        !n.rx.four_octet_as,
        "the peer did not send the 4-octet AS capability"
    );
    assert_eq!(n.add_path_receive, Vec::<Family>::new());
    let both = Open {
        capabilities: vec![Capability::AddPath(vec![AddPathFamily {
            family: Family::IPV4_UNICAST,
            receive: true,
            send: true,
        }])],
        ..remote
    };
    let n = negotiate(&local, &both, None);
    assert_eq!(
        (n.add_path_receive.clone(), n.add_path_send.clone()),
        (vec![Family::IPV4_UNICAST], vec![])
    );
    assert!(n.rx.add_path_ipv4 && !n.tx.add_path_ipv4);
}

#[test]
fn a_replaced_connection_goes_quietly_and_the_new_one_starts_over() {
    let t0 = Instant::now();
    let mut s = Session::new(cfg());
    s.handle(Event::ManualStart, t0);
    s.handle(Event::TcpConnected, t0);
    assert_eq!(s.state(), State::OpenSent);
    let a = s.handle(Event::ConnectionReplaced, t0);
    assert!(a.contains(&Action::Disconnect));
    assert!(
        !a.iter()
            .any(|x| matches!(x, Action::Down(_) | Action::StartTimer(Timer::IdleHold, _))),
        "{a:?}"
    );
    assert_eq!(s.state(), State::Active);
    let a = s.handle(Event::TcpConnected, t0);
    assert!(matches!(sent(&a).as_slice(), [Message::Open(_)]));
    // Not once Established: that connection is kept by the driver.
    let mut s = established(t0);
    assert!(s.handle(Event::ConnectionReplaced, t0).is_empty());
}

#[test]
fn the_peer_resolving_a_collision_against_this_connection_is_not_a_failure() {
    let t0 = Instant::now();
    let mut s = Session::new(cfg());
    s.handle(Event::ManualStart, t0);
    s.handle(Event::TcpConnected, t0);
    let n = Notification {
        code: code::CEASE,
        subcode: cease_subcode::CONNECTION_COLLISION_RESOLUTION,
        data: Bytes::new(),
    };
    let a = s.handle(
        Event::Received(
            Message::Notification(n)
                .encode(&CodecOptions::default())
                .unwrap_or_default(),
        ),
        t0,
    );
    assert!(!a.iter().any(|x| matches!(x, Action::Down(_))), "{a:?}");
    assert_eq!(timer(&a, Timer::ConnectRetry), Some(Duration::from_secs(2)));
    assert_eq!(s.state(), State::Active);
    // The same Cease once Established ends the session as usual.
    let mut s = established(t0);
    let n = Notification {
        code: code::CEASE,
        subcode: cease_subcode::CONNECTION_COLLISION_RESOLUTION,
        data: Bytes::new(),
    };
    let a = s.handle(
        Event::Received(
            Message::Notification(n)
                .encode(&CodecOptions::default())
                .unwrap_or_default(),
        ),
        t0,
    );
    assert!(a.iter().any(|x| matches!(x, Action::Down(_))));
}

#[test]
fn a_failed_connection_takes_its_send_hold_timer_with_it() {
    // Connected, waiting out DelayOpen, the socket reports it cannot write; then the
    // connection fails. The send hold timer must not outlive it: firing later it would
    // "send" a NOTIFICATION on no connection and report the session down.
    let t0 = Instant::now();
    let mut s = Session::new(SessionConfig {
        delay_open: Some(Duration::from_secs(5)),
        ..cfg()
    });
    s.handle(Event::ManualStart, t0);
    s.handle(Event::TcpConnected, t0);
    let a = s.handle(Event::SendBlocked, t0);
    assert!(timer(&a, Timer::SendHold).is_some());
    let a = s.handle(Event::TcpFailed, t0);
    assert!(a.contains(&Action::StopTimer(Timer::SendHold)), "{a:?}");
    assert_eq!(s.state(), State::Active);
    let a = s.handle(Event::TimerExpired(Timer::SendHold), t0);
    assert!(a.is_empty(), "{a:?}");
}

#[test]
fn an_adopted_connection_carries_on_from_opensent_without_a_second_open() {
    let t0 = Instant::now();
    let mut s = Session::new(cfg());
    s.handle(Event::ManualStart, t0);
    s.handle(Event::TcpConnected, t0);
    // The collision went to the other connection, which already has our OPEN.
    s.handle(Event::ConnectionReplaced, t0);
    let Some((open, _)) = s.open_message() else {
        panic!("our OPEN encodes");
    };
    let a = s.handle(Event::Adopt(Box::new(open)), t0);
    assert!(sent(&a).is_empty(), "no second OPEN: {a:?}");
    assert!(a.contains(&Action::StopTimer(Timer::ConnectRetry)), "{a:?}");
    assert!(
        a.contains(&Action::StartTimer(Timer::Hold, OPEN_HOLD_TIME)),
        "{a:?}"
    );
    assert_eq!(s.state(), State::OpenSent);
    // The peer's OPEN and KEEPALIVE on it bring the session up as usual.
    let a = s.handle(Event::Received(default_peer_open()), t0);
    assert!(matches!(sent(&a).as_slice(), [Message::Keepalive]), "{a:?}");
    let a = s.handle(Event::Received(keepalive()), t0);
    assert!(a.iter().any(|x| matches!(x, Action::Up(_))), "{a:?}");
    // Only a machine without a connection adopts one.
    let mut s = established(t0);
    assert!(s
        .handle(
            Event::Adopt(Box::new(Open::new(1, 90, LOCAL_ID, Vec::new()))),
            t0
        )
        .is_empty());
}
