//! Troubles from the speaker's events to findings and back to none.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tern_bgp::fsm::State as FsmState;
use tern_bgp::wire::notification::{code, open_subcode};
use tern_bgp::wire::Notification;

use super::*;

const TOR: &str = "198.51.100.1";
const NODE_B: &str = "198.51.100.12";

/// node-a in a mesh with node-b, and a ToR (AS 65001) from BGPPeer tor-1.
fn state() -> State {
    let text = "apiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata: {name: default}\nspec: {asNumber: 64512}\n---\napiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {name: node-a}\nspec: {bgp: {ipv4Address: 198.51.100.11/24}}\n---\napiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {name: node-b}\nspec: {bgp: {ipv4Address: 198.51.100.12/24}}\n---\napiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {name: tor-1}\nspec: {peerIP: 198.51.100.1, asNumber: 65001}\n";
    let (c, _) =
        tern_config::cluster::Cluster::from_documents(&[tern_config::datastore::Document {
            origin: "cluster.yaml".into(),
            text: text.into(),
        }])
        .unwrap();
    let intent = tern_config::intent::intent(&c, "node-a").unwrap().0;
    let mut s = State::new("test".into());
    s.set_peers(&intent);
    assert_eq!(s.peers.len(), 2);
    s
}

fn ip(a: &str) -> IpAddr {
    a.parse().unwrap()
}

fn connect(failure: ConnectFailure, n: u64) -> Trouble {
    let since = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
    Trouble::Connect(ConnectTrouble {
        failure,
        in_a_row: n,
        attempts: n,
        since,
        last: since + Duration::from_secs(3 * n),
    })
}

fn notification(by: NoticedBy, subcode: u8, detail: Detail) -> Trouble {
    Trouble::Notification(Box::new(SessionTrouble {
        by,
        notification: Notification {
            code: code::OPEN_MESSAGE,
            subcode,
            data: Bytes::new(),
        },
        state: FsmState::OpenSent,
        detail,
    }))
}

fn kinds(s: &State) -> Vec<(FindingKind, String)> {
    findings(s)
        .into_iter()
        .map(|f| (f.kind, f.subject))
        .collect()
}

#[test]
fn timed_out_connects_are_a_peer_not_answering_until_one_succeeds() {
    let mut s = state();
    s.troubles.record(
        ip(TOR),
        connect(ConnectFailure::TimedOut(Duration::from_secs(3)), 4),
    );
    let f = findings(&s);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].kind, FindingKind::PeerNotAnswering);
    assert_eq!(f[0].subject, "global peer 198.51.100.1 (BGPPeer tor-1)");
    assert_eq!(f[0].severity, Severity::Error);
    assert!(
        f[0].evidence.starts_with("connect attempts to 198.51.100.1:179 got no answer within 3 s (no SYN-ACK and no reset), 4 in a row; 4 attempts failed since 2026-11-18T"),
        "{}",
        f[0].evidence
    );
    assert!(!f[0].evidence.contains("TCP-MD5"));
    assert!(f[0].suggestion.contains("TCP port 179"));

    // With a password, the md5 finding may be the cause.
    s.peers.get_mut(&ip(TOR)).unwrap().intent.password =
        Some(tern_config::cluster::PasswordSource::Env("PW".into()));
    assert!(findings(&s)[0].evidence.contains("md5-mismatch finding"));

    s.troubles.record(ip(TOR), Trouble::Connected);
    assert!(findings(&s).is_empty());
    assert!(s.troubles.by_peer.is_empty(), "nothing kept for nothing");
}

#[test]
fn refused_connects_name_the_port_and_clear_when_the_session_is_up() {
    let mut s = state();
    s.troubles
        .record(ip(NODE_B), connect(ConnectFailure::Refused, 1));
    let f = findings(&s);
    assert_eq!(
        kinds(&s),
        [(
            FindingKind::ConnectionRefused,
            "node-to-node mesh peer 198.51.100.12 (node-b)".to_string()
        )]
    );
    assert!(f[0].evidence.starts_with("connect attempts to 198.51.100.12:179 were refused (the host answered with a TCP reset: nothing listens on port 179), 1 in a row"));
    assert!(f[0].evidence.contains("1 in a row; 1 attempt failed since"));
    assert!(f[0].suggestion.contains("listenPort"));
    s.troubles.session_up(ip(NODE_B));
    assert!(findings(&s).is_empty());
}

#[test]
fn other_connect_errors_keep_the_os_text() {
    let mut s = state();
    s.troubles.record(
        ip(TOR),
        connect(
            ConnectFailure::Other("No route to host (os error 113)".into()),
            2,
        ),
    );
    let f = findings(&s);
    assert_eq!(f[0].kind, FindingKind::PeerNotAnswering);
    assert!(f[0]
        .evidence
        .contains("failed (No route to host (os error 113)), 2 in a row"));
    assert!(f[0].suggestion.contains("ip route get 198.51.100.1"));
}

#[test]
fn bad_peer_as_names_both_numbers_and_where_to_set_them() {
    let mut s = state();
    let t = notification(
        NoticedBy::Us,
        open_subcode::BAD_PEER_AS,
        Detail::PeerAs {
            offered: 65002,
            expected: 65001,
        },
    );
    s.troubles.record(ip(TOR), t.clone());
    s.troubles.record(ip(TOR), t);
    let f = findings(&s);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].kind, FindingKind::Notification);
    assert!(f[0].evidence.contains("Bad Peer AS"), "{}", f[0].evidence);
    assert!(f[0]
        .evidence
        .contains("carried AS 65002, AS 65001 is configured"));
    assert!(f[0].evidence.contains("2 times since"), "{}", f[0].evidence);
    assert!(
        f[0].suggestion
            .contains("the asNumber of BGPPeer tor-1 to 65002")
            && f[0].suggestion.contains("the peer with AS 65001"),
        "{}",
        f[0].suggestion
    );

    // The peer refusing our AS: which one we sent, and where ours is set.
    let mut s = state();
    s.troubles.record(
        ip(NODE_B),
        notification(
            NoticedBy::Peer,
            open_subcode::BAD_PEER_AS,
            Detail::OurAs { sent: 64512 },
        ),
    );
    let f = findings(&s);
    assert!(f[0].evidence.contains("refused AS 64512"));
    assert!(
        f[0].suggestion.contains("spec.bgp.asNumber"),
        "{}",
        f[0].suggestion
    );
}

#[test]
fn a_duplicate_router_id_is_its_own_kind_whoever_noticed() {
    for by in [NoticedBy::Us, NoticedBy::Peer] {
        let mut s = state();
        s.troubles.record(
            ip(NODE_B),
            notification(
                by,
                open_subcode::BAD_BGP_IDENTIFIER,
                Detail::RouterId {
                    router_id: "198.51.100.11".parse().unwrap(),
                },
            ),
        );
        let f = findings(&s);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, FindingKind::DuplicateRouterId);
        assert!(f[0].evidence.contains("198.51.100.11"));
        assert!(f[0].suggestion.contains("own router ID") && f[0].suggestion.contains("router_id"));
        s.troubles.session_up(ip(NODE_B));
        assert!(findings(&s).is_empty());
    }
}

#[test]
fn a_new_notification_replaces_the_count_and_peers_gone_or_up_have_none() {
    let mut s = state();
    s.troubles.record(
        ip(TOR),
        notification(NoticedBy::Us, open_subcode::BAD_PEER_AS, Detail::None),
    );
    s.troubles.record(
        ip(TOR),
        notification(
            NoticedBy::Peer,
            open_subcode::UNACCEPTABLE_HOLD_TIME,
            Detail::HoldTime { offered: 90 },
        ),
    );
    let f = findings(&s);
    assert!(
        f[0].evidence.contains("Unacceptable Hold Time") && !f[0].evidence.contains("times since")
    );
    assert!(f[0].suggestion.contains("tern/hold-time"));
    // A connect failure beside it: both shown.
    s.troubles
        .record(ip(TOR), connect(ConnectFailure::Refused, 1));
    assert_eq!(findings(&s).len(), 2);
    // Up (the event may come later): nothing shown.
    s.peers.get_mut(&ip(TOR)).unwrap().up = true;
    assert!(findings(&s).is_empty());
    // Gone from the configuration.
    s.peers.clear();
    s.troubles.retain(|a| s.peers.contains_key(a));
    assert!(s.troubles.by_peer.is_empty());
}

#[test]
fn a_peer_closing_before_its_open_is_refusing_this_node_as_a_neighbour() {
    let mut s = state();
    s.troubles
        .record(ip(TOR), connect(ConnectFailure::Refused, 1));
    s.troubles
        .record(ip(TOR), Trouble::Closed(FsmState::OpenSent));
    assert!(findings(&s).is_empty(), "once may be a peer restarting");
    s.troubles
        .record(ip(TOR), Trouble::Closed(FsmState::OpenSent));
    let f = findings(&s);
    assert_eq!(
        f.len(),
        1,
        "the connect that succeeded replaced the refusal: {f:?}"
    );
    assert_eq!(f[0].kind, FindingKind::ConnectionRefused);
    assert!(
        f[0].evidence
            .contains("closed it without sending its OPEN, with no NOTIFICATION (2 times since"),
        "{}",
        f[0].evidence
    );
    assert!(f[0].suggestion.contains("AS 64512"), "{}", f[0].suggestion);

    // A NOTIFICATION says more: the closes after it are not shown.
    s.troubles.record(
        ip(TOR),
        notification(NoticedBy::Us, open_subcode::BAD_PEER_AS, Detail::None),
    );
    s.troubles
        .record(ip(TOR), Trouble::Closed(FsmState::OpenSent));
    let f = findings(&s);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].kind, FindingKind::Notification);

    // A failing connect replaces the closes.
    let mut s = state();
    for _ in 0..2 {
        s.troubles
            .record(ip(TOR), Trouble::Closed(FsmState::OpenConfirm));
    }
    assert_eq!(kinds(&s)[0].0, FindingKind::ConnectionRefused);
    assert!(findings(&s)[0]
        .evidence
        .contains("before its first KEEPALIVE"));
    s.troubles.record(
        ip(TOR),
        connect(ConnectFailure::TimedOut(Duration::from_secs(3)), 1),
    );
    assert_eq!(
        kinds(&s),
        [(
            FindingKind::PeerNotAnswering,
            "global peer 198.51.100.1 (BGPPeer tor-1)".to_string()
        )]
    );
}

#[test]
fn a_single_refusal_right_after_start_is_no_finding_yet() {
    let mut s = state();
    let at = s.started + Duration::from_secs(1);
    let refused = |n: u64| {
        Trouble::Connect(ConnectTrouble {
            failure: ConnectFailure::Refused,
            in_a_row: n,
            attempts: n,
            since: at,
            last: at,
        })
    };
    s.troubles.record(ip(TOR), refused(1));
    assert!(findings(&s).is_empty(), "the ToR may be starting too");
    s.troubles.record(ip(TOR), refused(2));
    assert_eq!(findings(&s)[0].kind, FindingKind::ConnectionRefused);
    // Later in the daemon's life the first one counts.
    let mut s = state();
    s.started -= Duration::from_secs(60);
    s.troubles.record(ip(TOR), refused(1));
    assert_eq!(findings(&s).len(), 1);
}
