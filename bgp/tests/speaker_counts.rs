//! The counts the metrics read from the speaker: the Loc-RIB's prefixes per family and
//! its paths ([`Speaker::rib_counts`]), and NOTIFICATIONs per peer by error code and
//! direction ([`Speaker::peer_stats`]).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a panic is the test failing

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tern_bgp::fsm::DownReason;
use tern_bgp::session::SessionEvent;
use tern_bgp::speaker::core::{Input, Speaker};
use tern_bgp::speaker::RibCounts;

#[path = "scenarios/parse.rs"]
#[allow(dead_code)] // the scenarios use more of it
mod parse;

fn words(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

#[test]
fn rib_sizes_and_notifications_are_counted() {
    let mut cfg = parse::config(&words("id 198.51.100.1 as 65000"));
    cfg.peers = vec![parse::peer(&words(
        "198.51.100.2 as 65000 local 198.51.100.1",
    ))];
    let t0 = Instant::now();
    let (mut speaker, _) = Speaker::new(cfg, t0);
    let peer = SocketAddr::from(([198, 51, 100, 2], 179));
    let at = |s: u64| t0 + Duration::from_secs(s);
    let (_, n) = parse::up(&words(
        "198.51.100.2 as 65000 id 198.51.100.2 families ipv4,ipv6",
    ));
    speaker.handle(
        at(1),
        Input::Session(SessionEvent::Up {
            peer,
            negotiated: Box::new(n),
        }),
    );
    for u in [
        "198.18.1.0/26 198.18.1.64/26 nh 198.51.100.2",
        "2001:db8:1::/64 nh 2001:db8::2",
    ] {
        speaker.handle(
            at(2),
            Input::Session(SessionEvent::Update {
                peer,
                update: Box::new(parse::announce(&words(u))),
            }),
        );
    }
    assert_eq!(
        speaker.rib_counts(),
        RibCounts {
            ipv4_prefixes: 2,
            ipv6_prefixes: 1,
            paths: 3
        }
    );

    let down = |speaker: &mut Speaker, s, reason| {
        speaker.handle(at(s), Input::Session(SessionEvent::Down { peer, reason }));
    };
    down(&mut speaker, 3, parse::down_reason("notification"));
    assert_eq!(
        speaker.rib_counts(),
        RibCounts::default(),
        "its paths went with it"
    );
    down(
        &mut speaker,
        4,
        DownReason::NotificationSent("Hold Timer Expired / Unspecific".into()),
    );
    down(&mut speaker, 5, parse::down_reason("notification"));
    down(&mut speaker, 6, DownReason::ConnectionLost);
    let stats = speaker.peer_stats();
    let s = stats.first().expect("the peer's stats");
    let pairs = |m: &std::collections::BTreeMap<String, u64>| {
        m.iter().map(|(k, v)| (k.clone(), *v)).collect::<Vec<_>>()
    };
    assert_eq!(pairs(&s.notifications_in), [("Cease".to_string(), 2)]);
    assert_eq!(
        pairs(&s.notifications_out),
        [("Hold Timer Expired".to_string(), 1)]
    );
}
