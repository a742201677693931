//! The md5 window on a hand-made snapshot: the finding needs counters that move, and
//! clears when the session is up or the counters stand still.

use super::*;
use tern_config::cluster::PasswordSource;

fn counters(failure: u64) -> Option<diag::Md5Counters> {
    Some(diag::Md5Counters {
        failure,
        ..Default::default()
    })
}

fn with_password() -> State {
    let mut s = super::super::state::tests::state_with_mesh();
    if let Some(p) = s.peers.values_mut().next() {
        p.intent.password = Some(PasswordSource::SecretKeyRef {
            name: "bgp".into(),
            key: "password".into(),
        });
        p.state = "Active".into();
    }
    s
}

#[test]
fn md5_needs_moving_counters_and_clears_when_they_stand_still() {
    let s = with_password();
    let mut w = Md5Watch::default();
    let t0 = Instant::now();
    // Drops counted before tern looked say nothing about now.
    assert!(w.findings(&s, counters(5), t0).is_empty());
    assert!(w
        .findings(&s, counters(5), t0 + Duration::from_secs(1))
        .is_empty());
    // They move: the peer is named, with the drops since the window began.
    let f = w.findings(&s, counters(8), t0 + Duration::from_secs(2));
    assert_eq!(f.len(), 1);
    assert!(
        f[0].evidence.contains("3 with a wrong signature"),
        "{}",
        f[0].evidence
    );
    // Still within the quiet time: it stays.
    let later = t0 + Duration::from_secs(2) + MD5_QUIET - Duration::from_secs(1);
    assert_eq!(w.findings(&s, counters(8), later).len(), 1);
    // Standing still longer: cleared.
    let quiet = t0 + Duration::from_secs(3) + MD5_QUIET;
    assert!(w.findings(&s, counters(8), quiet).is_empty());
}

#[test]
fn md5_clears_as_soon_as_the_session_is_up() {
    let mut s = with_password();
    let mut w = Md5Watch::default();
    let t0 = Instant::now();
    assert!(w.findings(&s, counters(1), t0).is_empty());
    assert_eq!(
        w.findings(&s, counters(2), t0 + Duration::from_secs(1))
            .len(),
        1
    );
    for p in s.peers.values_mut() {
        p.state = "Established".into();
    }
    assert!(w
        .findings(&s, counters(3), t0 + Duration::from_secs(2))
        .is_empty());
}

#[test]
fn forwarding_is_checked_only_while_workload_routes_are_advertised() {
    let mut s = super::super::state::tests::state_with_mesh();
    if let Some(i) = s.intent.as_mut() {
        i.originated.clear();
    }
    // Nothing advertised: forwarding does not matter, whatever this machine's sysctl.
    assert!(forwarding_findings(&s).is_empty());
}
