//! The endpoints over loopback HTTP with a stand-in source, and the text a scrape
//! gives for known facts.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tern_fib::task::FibCounts;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::render::{encode_facts, Facts};
use super::{bind, serve, Source};
use crate::control::proto::HealthReply;

/// A source whose health the test sets.
struct Fake(Mutex<Option<HealthReply>>);

impl Source for Fake {
    async fn metrics(&self) -> String {
        "# EOF\n".into()
    }
    async fn health(&self) -> Option<HealthReply> {
        self.0.lock().unwrap().clone()
    }
}

async fn start(health: Option<HealthReply>) -> (SocketAddr, Arc<Fake>) {
    let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let fake = Arc::new(Fake(Mutex::new(health)));
    tokio::spawn(serve(listener, Arc::clone(&fake)));
    (addr, fake)
}

/// Sends `parts` (with a pause between them) and reads the whole response.
async fn exchange(addr: SocketAddr, parts: &[&str]) -> String {
    let mut c = TcpStream::connect(addr).await.unwrap();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        c.write_all(p.as_bytes()).await.unwrap();
    }
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), c.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    out
}

async fn get(addr: SocketAddr, path: &str) -> String {
    let head = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    exchange(addr, &[&head]).await
}

fn health(live: bool, ready: bool, reason: &str) -> Option<HealthReply> {
    Some(HealthReply {
        live,
        ready,
        reason: reason.into(),
    })
}

/// A head sent in two writes (as bash's printf does) is answered whole: the old
/// responder answered after the first part and reset the connection.
#[tokio::test]
async fn a_head_sent_in_two_writes_is_answered() {
    let (addr, _) = start(health(true, true, "ready")).await;
    let out = exchange(addr, &["GET /metrics HTTP/1.0\r\n", "\r\n"]).await;
    assert!(out.starts_with("HTTP/1.0 200 OK\r\n"), "{out}");
    assert!(out.contains("application/openmetrics-text"), "{out}");
    assert!(out.ends_with("\r\n\r\n# EOF\n"), "{out}");
}

#[tokio::test]
async fn the_probes_follow_tern_health() {
    let (addr, fake) = start(health(true, true, "ready: 2 of 2 BGP peers established")).await;
    let out = get(addr, "/healthz").await;
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    let out = get(addr, "/readyz").await;
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(
        out.ends_with("ready: 2 of 2 BGP peers established\n"),
        "{out}"
    );

    *fake.0.lock().unwrap() = health(true, false, "no BGP peer established (0 of 2)");
    let out = get(addr, "/healthz").await;
    assert!(
        out.starts_with("HTTP/1.1 200 OK\r\n"),
        "live while not ready: {out}"
    );
    let out = get(addr, "/readyz").await;
    assert!(
        out.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
        "{out}"
    );
    assert!(out.ends_with("no BGP peer established (0 of 2)\n"), "{out}");

    *fake.0.lock().unwrap() = health(false, false, "the daemon's main loop has not run for 10 s");
    for path in ["/healthz", "/readyz"] {
        let out = get(addr, path).await;
        assert!(out.starts_with("HTTP/1.1 503"), "{path}: {out}");
        assert!(out.ends_with("has not run for 10 s\n"), "{path}: {out}");
    }

    *fake.0.lock().unwrap() = None;
    let out = get(addr, "/healthz").await;
    assert!(out.starts_with("HTTP/1.1 503"), "{out}");
}

#[tokio::test]
async fn other_paths_and_methods_are_refused() {
    let (addr, _) = start(health(true, true, "ready")).await;
    let out = get(addr, "/").await;
    assert!(out.starts_with("HTTP/1.1 404 Not Found\r\n"), "{out}");
    assert!(out.contains("try /metrics, /healthz or /readyz"), "{out}");
    let post =
        "POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    let out = exchange(addr, &[post]).await;
    assert!(out.starts_with("HTTP/1.1 405"), "{out}");
}

/// Refusals are split by who refused them, one series each; the batch histogram and
/// the build info are there.
#[test]
fn fib_counts_become_series() {
    let mut fib = FibCounts {
        installed: 5,
        missing: 1,
        refused_by_system: 1,
        refused_by_tern: 2,
        ..FibCounts::default()
    };
    fib.apply.observe(Duration::from_millis(3));
    fib.apply.observe(Duration::from_secs(2));
    let out = encode_facts(&Facts {
        fib: Some(fib),
        ..Facts::default()
    });
    for line in [
        "tern_fib_refused{by=\"kernel\"} 1\n",
        "tern_fib_refused{by=\"tern\"} 2\n",
        "tern_fib_routes{state=\"installed\"} 5\n",
        "tern_fib_routes{state=\"missing\"} 1\n",
        "tern_fib_apply_duration_seconds_count 2\n",
        "tern_fib_apply_duration_seconds_bucket{le=\"0.005\"} 1\n",
        "tern_fib_apply_duration_seconds_bucket{le=\"1.0\"} 1\n",
        "tern_fib_apply_duration_seconds_bucket{le=\"5.0\"} 2\n",
        "tern_fib_apply_duration_seconds_bucket{le=\"+Inf\"} 2\n",
    ] {
        assert!(out.contains(line), "{line} in {out}");
    }
    let build = format!(
        "tern_build_info{{version=\"{}\"}} 1\n",
        env!("CARGO_PKG_VERSION")
    );
    assert!(out.contains(&build), "{out}");
}

/// Every message type each way, as the session counted them.
#[test]
fn messages_are_counted_by_type() {
    use crate::control::proto::{MessageCounts, PeerInfo, StatusReply};
    let peer = PeerInfo {
        address: "198.51.100.1".into(),
        kind: "global".into(),
        state: "Established".into(),
        messages_received: MessageCounts {
            open: 1,
            update: 4,
            notification: 0,
            keepalive: 9,
            route_refresh: 2,
        },
        messages_sent: MessageCounts {
            open: 1,
            update: 3,
            notification: 1,
            keepalive: 8,
            route_refresh: 0,
        },
        ..PeerInfo::default()
    };
    let out = encode_facts(&Facts {
        status: Some(StatusReply {
            peers: vec![peer],
            ..StatusReply::default()
        }),
        ..Facts::default()
    });
    for (dir, t, n) in [
        ("received", "open", 1),
        ("received", "keepalive", 9),
        ("received", "route_refresh", 2),
        ("received", "update", 4),
        ("sent", "notification", 1),
        ("sent", "keepalive", 8),
    ] {
        let line =
            format!("tern_bgp_messages_{dir}_total{{peer=\"198.51.100.1\",type=\"{t}\"}} {n}\n");
        assert!(out.contains(&line), "{line} in {out}");
    }
}
