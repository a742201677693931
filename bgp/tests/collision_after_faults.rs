//! The fault sequence that looked like a collision loop, replayed on the sans-IO core
//! (the session state machine and the collision core, time passed in): an eBGP ToR
//! first configured for another AS (its OPENs are fine, it answers ours with Bad Peer
//! AS), then corrected; then its TCP-MD5 password changed (it resets the session with
//! Cease / Other Configuration Change, and from then on nothing gets through); the
//! link flaps; the password is fixed and the ToR connects every second (FRR's
//! `timers connect 1`). What a namespace run against FRR showed: tern sat in Idle on
//! the back-off the AS mismatch had built (16 s), refusing each of those connections
//! with a NOTIFICATION — which said Cease / Connection Collision Resolution. The
//! session must follow the repair within a couple of seconds instead.
//!
//! The driver's side (what an Idle session answers a connection with) is checked on
//! loopback at the end.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test setup: a failure is the test failing

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tern_bgp::fsm::collision::{Collision, Side, Verdict};
use tern_bgp::fsm::{Action, Event, Session, SessionConfig, State, Timer};
use tern_bgp::wire::notification::{cease_subcode, code, open_subcode};
use tern_bgp::wire::{Capability, CodecOptions, Family, Message, Notification, Open};

const LOCAL_ID: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const PEER_ID: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 20);
const LOCAL_AS: u32 = 64512;
const PEER_AS: u32 = 64513;

/// The session settings the speaker gives every peer.
fn config() -> SessionConfig {
    SessionConfig {
        local_as: LOCAL_AS,
        peer_as: PEER_AS,
        router_id: LOCAL_ID,
        hold_time: 9,
        keepalive: None,
        connect_retry: Duration::from_secs(3),
        passive: false,
        delay_open: None,
        idle_hold: Duration::from_secs(1),
        idle_hold_max: Duration::from_secs(120),
        open_hold_time: tern_bgp::fsm::OPEN_HOLD_TIME,
        send_hold_time: None,
        capabilities: vec![Capability::Multiprotocol(Family::IPV4_UNICAST)],
    }
}

fn encode(m: Message) -> Bytes {
    m.encode(&CodecOptions::default()).unwrap()
}

fn peer_open() -> Bytes {
    encode(Message::Open(Open::new(
        PEER_AS,
        9,
        PEER_ID,
        vec![Capability::Multiprotocol(Family::IPV4_UNICAST)],
    )))
}

fn notification(code: u8, subcode: u8) -> Bytes {
    encode(Message::Notification(Notification {
        code,
        subcode,
        data: Bytes::new(),
    }))
}

/// The machine and the collision core with the driver's bookkeeping: armed timers,
/// which connection the machine runs on, whether our connect is in progress.
struct Node {
    fsm: Session,
    collision: Collision,
    now: Instant,
    start: Instant,
    timers: HashMap<Timer, Instant>,
    conn: Option<Side>,
    connecting: bool,
    /// Connections from the peer refused, with when (since the start).
    refused: Vec<Duration>,
    /// Cease / Connection Collision Resolution sent by the machine.
    collisions_sent: usize,
}

impl Node {
    fn new() -> Node {
        let now = Instant::now();
        Node {
            fsm: Session::new(config()),
            collision: Collision::new(LOCAL_ID, LOCAL_AS, false),
            now,
            start: now,
            timers: HashMap::new(),
            conn: None,
            connecting: false,
            refused: Vec::new(),
            collisions_sent: 0,
        }
    }

    fn feed(&mut self, e: Event) {
        for a in self.fsm.handle(e, self.now) {
            match a {
                Action::StartTimer(t, d) => {
                    self.timers.insert(t, self.now + d);
                }
                Action::StopTimer(t) => {
                    self.timers.remove(&t);
                }
                Action::Connect => {
                    let _ = self.collision.connecting();
                    self.connecting = true;
                }
                Action::Disconnect => {
                    if let Some(side) = self.conn.take() {
                        let _ = self.collision.closed(side);
                    }
                    if std::mem::take(&mut self.connecting) {
                        let _ = self.collision.closed(Side::Ours);
                    }
                }
                Action::Send(b) => {
                    if let Ok(Message::Notification(n)) =
                        Message::decode(b, &CodecOptions::default())
                    {
                        if n.code == code::CEASE
                            && n.subcode == cease_subcode::CONNECTION_COLLISION_RESOLUTION
                        {
                            self.collisions_sent += 1;
                        }
                    }
                }
                Action::StateChanged {
                    to: State::Established,
                    ..
                } => {
                    if let Some(side) = self.conn {
                        self.collision.established(side);
                    }
                }
                Action::StateChanged {
                    to: State::Idle, ..
                } => self.collision.reset(),
                _ => {}
            }
        }
    }

    /// Lets time pass to `at`, firing the timers that run out on the way, in order.
    fn advance(&mut self, by: Duration) {
        let until = self.now + by;
        loop {
            let next = self
                .timers
                .iter()
                .filter(|(_, at)| **at <= until)
                .min_by_key(|(_, at)| **at)
                .map(|(t, at)| (*t, *at));
            let Some((t, at)) = next else { break };
            self.timers.remove(&t);
            self.now = self.now.max(at);
            self.feed(Event::TimerExpired(t));
        }
        self.now = until;
    }

    /// Carries out the core's verdicts about a connection that just came up.
    fn apply(&mut self, verdicts: Vec<Verdict>) {
        for v in verdicts {
            match v {
                Verdict::Start(side)
                    if self.conn.is_none()
                        && matches!(self.fsm.state(), State::Connect | State::Active) =>
                {
                    self.conn = Some(side);
                    self.feed(Event::TcpConnected);
                }
                Verdict::Proceed(side) if self.conn == Some(side) => {}
                other => panic!("no second connection in this sequence, yet {other:?}"),
            }
        }
    }

    /// Our pending connect succeeds.
    fn our_connect_succeeds(&mut self) {
        assert!(self.connecting, "no connect in progress");
        self.connecting = false;
        let v = self.collision.connected();
        self.apply(v);
    }

    /// The peer connects to us; false if refused (the driver refuses in Idle).
    fn peer_connects(&mut self) -> bool {
        if self.fsm.state() == State::Idle {
            self.refused.push(self.now - self.start);
            return false;
        }
        let v = self.collision.accepted();
        self.apply(v);
        true
    }

    /// The peer's OPEN on the machine's connection, through the collision core.
    fn peer_open(&mut self) {
        let side = self.conn.expect("a connection");
        let v = self.collision.open_received(side, PEER_ID, PEER_AS);
        assert_eq!(v, vec![Verdict::Proceed(side)]);
        self.feed(Event::Received(peer_open()));
    }

    fn receive(&mut self, b: Bytes) {
        self.feed(Event::Received(b));
    }

    /// Time until the session leaves Idle by itself.
    fn idle_hold_left(&self) -> Option<Duration> {
        self.timers
            .get(&Timer::IdleHold)
            .map(|at| at.saturating_duration_since(self.now))
    }
}

#[test]
fn the_session_follows_the_password_fix_after_an_as_mismatch_and_a_flap() {
    let mut n = Node::new();
    n.feed(Event::ManualStart);
    // 1. The ToR expects another AS: each attempt ends in its Bad Peer AS, and tern
    //    backs off (1, 2, 4, 8 s) as it should.
    for _ in 0..4 {
        n.our_connect_succeeds();
        n.peer_open();
        assert_eq!(n.fsm.state(), State::OpenConfirm);
        n.receive(notification(code::OPEN_MESSAGE, open_subcode::BAD_PEER_AS));
        assert_eq!(n.fsm.state(), State::Idle);
        let wait = n.idle_hold_left().expect("backing off");
        n.advance(wait);
        assert_eq!(n.fsm.state(), State::Connect);
    }
    // 2. Corrected: the session comes up.
    n.our_connect_succeeds();
    n.peer_open();
    n.receive(encode(Message::Keepalive));
    assert_eq!(n.fsm.state(), State::Established);
    n.advance(Duration::from_millis(100));
    // 3. The ToR's password changes: it resets the session, and nothing gets through
    //    any more (our connects hang, its SYNs are dropped).
    n.receive(notification(
        code::CEASE,
        cease_subcode::OTHER_CONFIGURATION_CHANGE,
    ));
    assert_eq!(n.fsm.state(), State::Idle);
    // 4. The link flaps (2 s down), then 5 s pass.
    n.advance(Duration::from_secs(7));
    // 5. The password is fixed: the ToR connects every second, and tern's own
    //    connect, still hanging on the dropped SYN, never comes back in this window.
    let fixed = n.now;
    let mut up = None;
    for _ in 0..30 {
        if n.peer_connects() {
            n.peer_open();
            n.receive(encode(Message::Keepalive));
            if n.fsm.state() == State::Established {
                up = Some(n.now - fixed);
                break;
            }
        }
        n.advance(Duration::from_secs(1));
    }
    let refused: Vec<_> = n.refused.iter().map(|d| d.as_secs_f32()).collect();
    let up = up.unwrap_or_else(|| panic!("not up 30 s after the fix; refused at {refused:?} s"));
    assert!(
        up <= Duration::from_secs(2),
        "the session took {up:?} after the password fix; the ToR's connections were refused at {refused:?} s"
    );
    assert!(
        n.refused.len() <= 1,
        "tern refused the repaired ToR {} times (at {refused:?} s)",
        n.refused.len()
    );
    assert_eq!(n.collisions_sent, 0, "there was never a second connection");
}

/// The same sequence with the ToR resetting for a reason of its own (not its
/// operator's): back-off keeps growing, as DampPeerOscillations wants.
#[test]
fn a_peer_that_keeps_failing_still_backs_off() {
    let mut n = Node::new();
    n.feed(Event::ManualStart);
    let mut waits = Vec::new();
    for _ in 0..5 {
        n.our_connect_succeeds();
        n.peer_open();
        n.receive(encode(Message::Keepalive));
        assert_eq!(n.fsm.state(), State::Established);
        // Out of resources is the peer's trouble, not its operator's repair.
        n.receive(notification(code::CEASE, cease_subcode::OUT_OF_RESOURCES));
        let wait = n.idle_hold_left().expect("backing off");
        waits.push(wait.as_secs());
        n.advance(wait);
    }
    assert_eq!(waits, [1, 2, 4, 8, 16]);
}

/// The driver: an Idle session (backing off after the peer's NOTIFICATION) refuses the
/// peer's connection with Cease / Connection Rejected (RFC 4486), not with Connection
/// Collision Resolution: no collision was there to resolve.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn an_idle_session_refuses_a_connection_as_rejected_not_as_a_collision() {
    use tern_bgp::session::listener::Listener;
    use tern_bgp::session::{self, Command, DriverConfig, SessionEvent};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpSocket};

    // 127.0.0.1 is tern, 127.0.0.2 the peer; tern's listener and the peer's on
    // ports the kernel picks.
    let peer_listener = TcpListener::bind("127.0.0.2:0").await.unwrap();
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let tern_addr = listener.local_addrs().unwrap()[0];
    let cfg = SessionConfig {
        // Long enough for the check below to see the session Idle.
        idle_hold: Duration::from_secs(30),
        idle_hold_max: Duration::from_secs(60),
        ..config()
    };
    let (etx, mut events) = tokio::sync::mpsc::channel(64);
    let h = session::spawn(
        DriverConfig {
            fsm: cfg,
            peer: peer_listener.local_addr().unwrap(),
            local_addr: Some("127.0.0.1".parse().unwrap()),
            password: None,
            ttl_security: None,
            write_high_water: session::DEFAULT_WRITE_HIGH_WATER,
        },
        etx,
    );
    listener.add_peer(h.clone(), None).unwrap();
    let (rtx, _refused) = tokio::sync::mpsc::channel(8);
    let accept = tokio::spawn(std::sync::Arc::new(listener).run(rtx));
    h.send(Command::Start).await.unwrap();
    // The peer takes tern's connection and answers its OPEN with Bad Peer AS.
    let (mut s, _) = tokio::time::timeout(Duration::from_secs(10), peer_listener.accept())
        .await
        .unwrap()
        .unwrap();
    let mut buf = [0u8; 4096];
    let _ = s.read(&mut buf).await.unwrap();
    s.write_all(&notification(code::OPEN_MESSAGE, open_subcode::BAD_PEER_AS))
        .await
        .unwrap();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), events.recv()).await {
            Ok(Some(SessionEvent::StateChanged {
                to: State::Idle, ..
            })) => break,
            Ok(Some(_)) => {}
            other => panic!("tern never went Idle: {other:?}"),
        }
    }
    // Now the peer connects to tern, from its own address.
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind(std::net::SocketAddr::new("127.0.0.2".parse().unwrap(), 0))
        .unwrap();
    let mut c = sock.connect(tern_addr).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut got)).await;
    let m = Message::decode(Bytes::from(got.clone()), &CodecOptions::default());
    let _ = h.send(Command::Stop(None)).await;
    accept.abort();
    match m {
        Ok(Message::Notification(n)) => assert_eq!(
            (n.code, n.subcode),
            (code::CEASE, cease_subcode::CONNECTION_REJECTED),
            "an Idle session's refusal: {n}"
        ),
        other => panic!("expected a NOTIFICATION, got {other:?} ({got:?})"),
    }
}
