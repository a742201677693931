//! Graceful restart, tern as helper (RFC 4724): BIRD advertises a 15 s restart time,
//! then dies without a word (SIGKILL). tern keeps BIRD's route, marked stale, while
//! BIRD could be restarting; BIRD comes back and the route is fresh again, and stays
//! past the first restart's timer. BIRD dies once more and does not come back: the
//! route is withdrawn when the restart time runs out.
//! Every step polls for its state with a deadline inside the restart time, so a loaded
//! machine makes the test slower, not wrong; the one timing asserted is a lower bound
//! (the route is not withdrawn before the restart time). Skips without root or BIRD;
//! fails under CI=true.

#![cfg(target_os = "linux")]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use tern_bgp::speaker::{self, PeerConfig, SpeakerCommand, SpeakerConfig, SpeakerEvent};
use tern_interop::netns::Netns;
use tern_interop::peers::{Kind, Peer};

const BIRD_CONF: &str = r#"log stderr all;
router id 198.51.100.2;
protocol device { }
protocol static { ipv4; route 198.18.7.0/24 blackhole; }
protocol bgp tern {
  local as 64513; neighbor 198.51.100.1 as 64512; hold time 9; keepalive time 3; connect retry time 1;
  graceful restart on; graceful restart time 15;
  ipv4 { import all; export where source = RTS_STATIC; };
}
"#;

async fn has_route(c: &tokio::sync::mpsc::Sender<SpeakerCommand>) -> Option<bool> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let _ = c.send(SpeakerCommand::Routes(tx)).await;
    let routes = rx.await.unwrap_or_default();
    routes
        .iter()
        .find(|(p, _)| p.to_string() == "198.18.7.0/24")
        .map(|(_, b)| b.best.stale)
}

/// BIRD's restart time (its configuration above).
const RESTART: Duration = Duration::from_secs(15);

/// Polls the route until `want(state)` or `until`; the last state seen.
async fn route_until(
    c: &tokio::sync::mpsc::Sender<SpeakerCommand>,
    until: Instant,
    want: impl Fn(Option<bool>) -> bool,
) -> Option<bool> {
    loop {
        let now = has_route(c).await;
        if want(now) || Instant::now() >= until {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn next_down(events: &mut tokio::sync::mpsc::Receiver<SpeakerEvent>) -> String {
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_secs(15), events.recv()).await {
        if let SpeakerEvent::PeerDown(_, text) = e {
            return text;
        }
    }
    String::new()
}

#[test]
fn routes_of_a_crashed_peer_stay_for_its_restart_time() {
    if let Err(reason) = tern_interop::lab_available() {
        return tern_interop::skip_or_fail("speaker_gr", &reason);
    }
    if !tern_interop::have_program("bird") {
        return tern_interop::skip_or_fail("speaker_gr", "bird is not installed");
    }
    let ours = Netns::create("tgr-t").unwrap_or_else(|e| panic!("{e}"));
    let theirs = Netns::create("tgr-p").unwrap_or_else(|e| panic!("{e}"));
    ours.veth_to("eth0", &theirs, "eth0")
        .unwrap_or_else(|e| panic!("{e}"));
    ours.add_addr("eth0", "198.51.100.1/24")
        .unwrap_or_else(|e| panic!("{e}"));
    theirs
        .add_addr("eth0", "198.51.100.2/24")
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut bird =
        Peer::start(Kind::Bird, &theirs, dir.path(), BIRD_CONF).unwrap_or_else(|e| panic!("{e}"));

    let (learnt, down_text, during, back, past_first_timer, during_2, after) = ours
        .block_on(|| async {
            let cfg = SpeakerConfig {
                router_id: Ipv4Addr::new(198, 51, 100, 1),
                local_as: 64512,
                listen: Some(SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1)),
                    179,
                )),
                extra_listen: Vec::new(),
                cluster_id: None,
                max_paths: 1,
                peers: vec![PeerConfig {
                    local_address: Some(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1))),
                    hold_time: 9,
                    connect_retry: Duration::from_secs(1),
                    ..PeerConfig::new(
                        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 2)), 179),
                        64513,
                    )
                }],
                restarting: false,
                max_routes: None,
            };
            let (etx, mut erx) = tokio::sync::mpsc::channel(64);
            let c = speaker::spawn(cfg, etx)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let mut learnt = false;
            for _ in 0..100 {
                if has_route(&c).await == Some(false) {
                    learnt = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            bird.kill();
            let killed = Instant::now();
            let down_text = next_down(&mut erx).await;
            // Stale at once, well inside the restart time.
            let during = route_until(&c, killed + RESTART / 3, |r| r == Some(true)).await;

            bird = Peer::start(Kind::Bird, &theirs, dir.path(), BIRD_CONF)
                .unwrap_or_else(|e| panic!("{e}"));
            // Fresh again once BIRD is back, which must be before its timer ends.
            let back = route_until(&c, killed + RESTART - Duration::from_secs(2), |r| {
                r == Some(false)
            })
            .await
                == Some(false);
            // The first restart's timer must not end anything now.
            tokio::time::sleep((RESTART + Duration::from_secs(1)).saturating_sub(killed.elapsed()))
                .await;
            let past_first_timer = has_route(&c).await;

            bird.kill();
            let _ = next_down(&mut erx).await;
            let killed_2 = Instant::now();
            let during_2 = route_until(&c, killed_2 + RESTART / 3, |r| r == Some(true)).await;
            // Withdrawn when the timer runs out: not before, and within a
            // generous margin after.
            let after = route_until(&c, killed_2 + RESTART + Duration::from_secs(20), |r| {
                r.is_none()
            })
            .await;
            let withdrawn_after = killed_2.elapsed();
            assert!(
                withdrawn_after >= RESTART - Duration::from_secs(1),
                "withdrawn {withdrawn_after:?} after the 2nd crash: too early"
            );
            eprintln!("2nd crash: route withdrawn after {withdrawn_after:?}");
            let _ = c.send(SpeakerCommand::Shutdown(None)).await;
            (
                learnt,
                down_text,
                during,
                back,
                past_first_timer,
                during_2,
                after,
            )
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(learnt, "never learnt BIRD's route");
    assert!(
        down_text.contains("graceful restart: keeping its routes for up to 15 s"),
        "{down_text:?}"
    );
    assert_eq!(
        during,
        Some(true),
        "the route stays, marked stale, during the restart time"
    );
    assert!(
        back,
        "BIRD restarted and re-sent the route: it is fresh again"
    );
    assert_eq!(
        past_first_timer,
        Some(false),
        "the first restart's timer ended nothing"
    );
    assert_eq!(
        during_2,
        Some(true),
        "stale again during the second restart"
    );
    assert_eq!(
        after, None,
        "and withdrawn when BIRD does not come back in time"
    );
}
