//! Route limits against a real tern speaker on loopback (the raw peer of `common`):
//! a peer over its own prefix limit, and a peer that pushes the whole table over the
//! speaker's total, are each ended with Cease / Maximum Number of Prefixes Reached
//! (RFC 4486), lose their routes at once, are kept down for the hold-down, and leave
//! every other peer's routes alone.
#![cfg(target_os = "linux")]

mod common;
use common::*;

use std::time::{Duration, Instant};

use tern_bgp::fsm::OPEN_HOLD_TIME;
use tern_bgp::speaker::PeerConfig;
use tern_bgp::wire::{Family, Message};

/// One UPDATE announcing 198.18.`third`.`i`/32 for `i` in `range`.
fn hosts(third: u8, range: std::ops::Range<u8>) -> Vec<u8> {
    let nlri: Vec<u8> = range.flat_map(|i| [32, 198, 18, third, i]).collect();
    update(&[], &good_attrs(), &nlri)
}

/// Paths in the speaker's RIB whose prefix starts with 198.18.`third`.
async fn count(tern: &Tern, third: u8) -> usize {
    let start = format!("198.18.{third}.");
    tern.routes()
        .await
        .iter()
        .filter(|(p, _)| p.to_string().starts_with(&start))
        .count()
}

async fn wait_count(tern: &Tern, third: u8, want: usize, case: &str) {
    let end = Instant::now() + Duration::from_secs(3);
    loop {
        let n = count(tern, third).await;
        if n == want {
            return;
        }
        assert!(
            Instant::now() < end,
            "{case}: 198.18.{third}.0/24 holds {n} routes, not {want}; log: {:?}",
            tern.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits for a speaker event line (the session's Down comes after the RIB dropped
/// the routes, which happens at once).
async fn wait_logged(tern: &Tern, line: &str, case: &str) {
    let end = Instant::now() + Duration::from_secs(3);
    while !tern.logged(line) {
        assert!(
            Instant::now() < end,
            "{case}: no {line:?}; log: {:?}",
            tern.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The peer must be told Cease/1 with the family and the limit, then be closed.
async fn expect_limit_reset(p: &mut Raw, limit: u32, case: &str) {
    let n = p.notification(case).await;
    assert_eq!((n.code, n.subcode), (6, 1), "{case}: NOTIFICATION {n}");
    assert_eq!(
        n.prefix_limit(),
        Some((Family::IPV4_UNICAST, limit)),
        "{case}: RFC 4486 data"
    );
    p.closed(case).await;
}

/// Right after a reset the speaker must not take the peer back (it would flap).
async fn refused_during_hold_down(n: u8, tern: &Tern, case: &str) {
    let Ok(mut again) = Raw::connect(lo(n), tern.at).await else {
        return; // refused outright: held down
    };
    again.send(&good_open(n)).await;
    loop {
        match again.next(Duration::from_secs(2)).await {
            Got::Closed | Got::Timeout => return,
            Got::Msg(Message::Notification(_)) => return,
            Got::Msg(Message::Keepalive) => {
                panic!("{case}: the session came back up within the hold-down")
            }
            Got::Msg(_) | Got::Garbage(_) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_over_its_prefix_limit_is_reset_and_held_down() {
    let case = "per-peer prefix limit";
    if !loopback_usable(case) {
        return;
    }
    let limited = PeerConfig {
        max_prefixes: Some(100),
        ..peer_config(10, OPEN_HOLD_TIME)
    };
    let tern = Tern::start(17961, vec![limited, peer_config(11, OPEN_HOLD_TIME)]).await;
    let mut other = Raw::establish(lo(11), tern.at, &good_open(11), case).await;
    other.send(&hosts(11, 0..50)).await;
    wait_count(&tern, 11, 50, case).await;

    let mut p = Raw::establish(lo(10), tern.at, &good_open(10), case).await;
    p.send(&hosts(10, 0..100)).await;
    wait_count(&tern, 10, 100, case).await;
    // Exactly at the limit is allowed; re-announcing the same prefixes is no growth.
    p.send(&hosts(10, 0..100)).await;
    p.send(&hosts(10, 100..101)).await;
    expect_limit_reset(&mut p, 100, case).await;
    wait_count(&tern, 10, 0, case).await;
    assert_eq!(
        count(&tern, 11).await,
        50,
        "{case}: the other peer lost routes"
    );
    let why = "down 127.0.0.10: sent NOTIFICATION Cease / Maximum Number of Prefixes Reached (ipv4-unicast, limit 100): it sent 101 paths, more than its limit of 100";
    wait_logged(&tern, why, case).await;
    refused_during_hold_down(10, &tern, case).await;
    // The other session is untouched and still takes routes.
    other.send(&hosts(11, 50..60)).await;
    wait_count(&tern, 11, 60, case).await;
    tern.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_that_passes_the_total_route_limit_is_reset() {
    let case = "total route limit";
    if !loopback_usable(case) {
        return;
    }
    let peers = vec![
        peer_config(12, OPEN_HOLD_TIME),
        peer_config(13, OPEN_HOLD_TIME),
    ];
    let tern = Tern::start_with(17962, peers, Some(150)).await;
    let mut first = Raw::establish(lo(12), tern.at, &good_open(12), case).await;
    first.send(&hosts(12, 0..100)).await;
    wait_count(&tern, 12, 100, case).await;
    let mut second = Raw::establish(lo(13), tern.at, &good_open(13), case).await;
    second.send(&hosts(13, 0..50)).await;
    wait_count(&tern, 13, 50, case).await;
    second.send(&hosts(13, 50..60)).await;
    expect_limit_reset(&mut second, 150, case).await;
    wait_count(&tern, 13, 0, case).await;
    assert_eq!(
        count(&tern, 12).await,
        100,
        "{case}: the first peer lost routes"
    );
    let why = "down 127.0.0.13: sent NOTIFICATION Cease / Maximum Number of Prefixes Reached (ipv4-unicast, limit 150): the table holds 160 paths from all peers, more than the limit of 150 (this peer sent 60)";
    wait_logged(&tern, why, case).await;
    // With room again, the first peer can still grow up to the limit.
    first.send(&hosts(12, 100..150)).await;
    wait_count(&tern, 12, 150, case).await;
    tern.stop().await;
}
