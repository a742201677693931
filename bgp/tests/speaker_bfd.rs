//! BFD down (RFC 5882 §4.3) as the speaker core carries it out: the session ends with
//! Cease / BFD Down (RFC 9384) and the peer's routes go at once, even when it
//! negotiated graceful restart, since BFD said its forwarding is gone.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a panic is the test failing

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tern_bgp::fsm::DownReason;
use tern_bgp::session::SessionEvent;
use tern_bgp::speaker::core::{Control, Input, Output, Speaker};
use tern_bgp::speaker::{PeerAction, RibCounts};
use tern_bgp::wire::notification::cease_subcode;

#[path = "scenarios/parse.rs"]
#[allow(dead_code)] // the scenarios use more of it
mod parse;

fn words(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

#[test]
fn bfd_down_ends_the_session_with_cease_bfd_down_and_its_routes_go() {
    let mut cfg = parse::config(&words("id 198.51.100.1 as 65000"));
    cfg.peers = vec![parse::peer(&words(
        "198.51.100.2 as 65000 local 198.51.100.1",
    ))];
    let t0 = Instant::now();
    let (mut speaker, _) = Speaker::new(cfg, t0);
    let peer = SocketAddr::from(([198, 51, 100, 2], 179));
    let at = |s: u64| t0 + Duration::from_secs(s);
    let (_, n) = parse::up(&words("198.51.100.2 as 65000 id 198.51.100.2 gr 120"));
    speaker.handle(
        at(1),
        Input::Session(SessionEvent::Up {
            peer,
            negotiated: Box::new(n),
        }),
    );
    speaker.handle(
        at(2),
        Input::Session(SessionEvent::Update {
            peer,
            update: Box::new(parse::announce(&words("198.18.1.0/26 nh 198.51.100.2"))),
        }),
    );
    assert_eq!(speaker.rib_counts().paths, 1);

    let (r, out) = speaker.operate(
        peer.ip(),
        PeerAction::BfdDown,
        "control detection time expired",
    );
    assert!(r.unwrap().contains("BFD down"));
    let n = out
        .iter()
        .find_map(|o| match o {
            Output::Control(ip, Control::Reset(n, hold)) if *ip == peer.ip() => {
                Some((n.clone(), *hold))
            }
            _ => None,
        })
        .expect("a reset");
    assert_eq!((n.0.code, n.0.subcode), (6, cease_subcode::BFD_DOWN));
    assert_eq!(n.0.to_string(), "Cease / BFD Down");
    assert_eq!(n.1, Duration::ZERO, "it may start again at once");

    // The session driver sends it and reports the session down: graceful restart was
    // negotiated, yet nothing is kept.
    speaker.handle(
        at(3),
        Input::Session(SessionEvent::Down {
            peer,
            reason: DownReason::NotificationSent(n.0.to_string()),
        }),
    );
    assert_eq!(speaker.rib_counts(), RibCounts::default());
    let (r, _) = speaker.operate(peer.ip(), PeerAction::BfdDown, "x");
    assert!(r.unwrap_err().contains("not established"));
}
