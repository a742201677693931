//! Prometheus metrics on the configured address (`metrics:` in tern.yaml, localhost by
//! default): peer state, uptime, prefixes, flaps; FIB routes installed, missing,
//! unexpected and refused, and the last kernel batch's duration; diagnostic findings by
//! kind; the configuration revision and whether the newest one was rejected.
//!
//! Values are read at scrape time from the same answers the control socket gives, so
//! the numbers always agree with `tern status` / `fib` / `diagnose`. prometheus-client
//! encodes; the HTTP side is a few lines by hand (GET /metrics, HTTP/1.0 close), since
//! an HTTP server crate would be the daemon's largest dependency for one endpoint.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::handler::DaemonHandler;
use crate::control::proto::{DiagnoseReply, FibReply, PeersReply, Request, StatusReply};

type Labels = Vec<(String, String)>;

/// Serves `/metrics` on `addr` until the task is dropped.
pub async fn serve(listener: TcpListener, handler: Arc<DaemonHandler>) {
    loop {
        let Ok((mut stream, from)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let h = Arc::clone(&handler);
        tokio::spawn(async move {
            let Ok(Some(head)) =
                tokio::time::timeout(Duration::from_secs(5), read_head(&mut stream)).await
            else {
                return;
            };
            let request = String::from_utf8_lossy(&head);
            let response = if request.starts_with("GET /metrics") {
                let body = render(&h).await;
                format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
            } else {
                tracing::debug!(%from, "metrics: not GET /metrics");
                "HTTP/1.0 404 Not Found\r\nContent-Length: 21\r\n\r\ntry GET /metrics ...\n"
                    .to_string()
            };
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// Reads a request head up to its blank line. A client may send the head in several
/// writes; closing while some of it is still unread would make the kernel answer with
/// a reset, and the client would lose the response it had not yet read.
async fn read_head(stream: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    const MAX_HEAD: usize = 8192;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(buf.get(..n)?);
        if head.len() > MAX_HEAD {
            return None;
        }
    }
    Some(head)
}

/// Binds the metrics listener.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen for metrics on {addr}: {e}"))
}

fn gauge(reg: &mut Registry, name: &str, help: &str, values: Vec<(Labels, i64)>) {
    let f = Family::<Labels, Gauge>::default();
    for (l, v) in values {
        f.get_or_create(&l).set(v);
    }
    reg.register(name, help, f);
}

fn single(reg: &mut Registry, name: &str, help: &str, v: i64) {
    let g = Gauge::<i64>::default();
    g.set(v);
    reg.register(name, help, g);
}

fn label(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn ask<T: serde::de::DeserializeOwned>(h: &DaemonHandler, r: Request) -> Option<T> {
    let v = h.answer(r).await.ok()?;
    serde_json::from_value(v).ok()
}

/// The metrics text.
pub async fn render(h: &DaemonHandler) -> String {
    let mut reg = Registry::with_prefix("tern");
    if let Some(s) = ask::<StatusReply>(h, Request::Status).await {
        daemon_metrics(&mut reg, &s);
    }
    if let Some(p) = ask::<PeersReply>(h, Request::Peers { address: None }).await {
        peer_metrics(&mut reg, &p);
    }
    if let Some(f) = ask::<FibReply>(h, Request::Fib).await {
        fib_metrics(&mut reg, &f);
    }
    if let Some(d) = ask::<DiagnoseReply>(h, Request::Diagnose).await {
        diagnose_metrics(&mut reg, &d);
    }
    let mut out = String::new();
    if encode(&mut out, &reg).is_err() {
        return "# tern: cannot encode metrics\n".into();
    }
    out
}

/// The daemon's configuration, datastore and uptime.
fn daemon_metrics(reg: &mut Registry, s: &StatusReply) {
    let d = &s.daemon;
    single(
        reg,
        "config_revision",
        "Datastore revision of the configuration in force",
        d.intent_revision.unwrap_or(0),
    );
    single(
        reg,
        "config_error",
        "1 when the newest configuration was rejected or needs a restart",
        i64::from(d.config_error.is_some()),
    );
    single(
        reg,
        "datastore_up",
        "0 while the datastore cannot be read (the configuration in force stays; tern status says why)",
        i64::from(d.datastore_error.is_none()),
    );
    single(
        reg,
        "uptime_seconds",
        "Seconds since the daemon started",
        i64::try_from(d.uptime_s).unwrap_or(i64::MAX),
    );
}

/// Per-peer session state and counters.
fn peer_metrics(reg: &mut Registry, p: &PeersReply) {
    let peer = |a: &str, t: &str| label(&[("peer", a), ("type", t)]);
    gauge(
        reg,
        "peer_up",
        "1 when the BGP session is Established",
        p.peers
            .iter()
            .map(|x| {
                (
                    peer(&x.address, &x.kind),
                    i64::from(x.state == "Established"),
                )
            })
            .collect(),
    );
    gauge(
        reg,
        "peer_uptime_seconds",
        "Seconds the session has been Established",
        p.peers
            .iter()
            .map(|x| {
                (
                    peer(&x.address, &x.kind),
                    i64::try_from(x.uptime_s).unwrap_or(i64::MAX),
                )
            })
            .collect(),
    );
    gauge(
        reg,
        "peer_prefixes_received",
        "Prefixes for which the peer provides a Loc-RIB path",
        p.peers
            .iter()
            .map(|x| {
                (
                    peer(&x.address, &x.kind),
                    i64::try_from(x.prefixes_received).unwrap_or(i64::MAX),
                )
            })
            .collect(),
    );
    gauge(
        reg,
        "peer_prefixes_accepted",
        "Prefixes from the peer accepted by import",
        p.peers
            .iter()
            .map(|x| {
                (
                    peer(&x.address, &x.kind),
                    i64::try_from(x.prefixes_accepted).unwrap_or(i64::MAX),
                )
            })
            .collect(),
    );
    peer_counters(reg, p);
    gauge(
        reg,
        "peer_prefixes_advertised",
        "Prefixes in the peer's Adj-RIB-Out",
        p.peers
            .iter()
            .map(|x| {
                (
                    peer(&x.address, &x.kind),
                    i64::try_from(x.prefixes_advertised).unwrap_or(i64::MAX),
                )
            })
            .collect(),
    );
}

/// The per-peer counters: flaps, UPDATEs, policy decisions.
fn peer_counters(reg: &mut Registry, p: &PeersReply) {
    type Pick = fn(&crate::control::proto::PeerInfo) -> u64;
    let table: [(&str, &str, Pick); 5] = [
        ("peer_flaps", "Times the session left Established", |x| {
            x.flaps
        }),
        ("peer_updates_received", "UPDATE messages received", |x| {
            x.updates_in
        }),
        ("peer_updates_sent", "UPDATE messages sent", |x| {
            x.updates_out
        }),
        (
            "peer_policy_rejected_in",
            "Routes from the peer its import policy rejected",
            |x| x.policy_rejected_in,
        ),
        (
            "peer_policy_filtered_out",
            "Times its export policy kept a route from the peer",
            |x| x.policy_filtered_out,
        ),
    ];
    for (name, help, pick) in table {
        let c = Family::<Labels, Counter>::default();
        for x in &p.peers {
            c.get_or_create(&label(&[("peer", &x.address), ("type", &x.kind)]))
                .inc_by(pick(x));
        }
        reg.register(name, help, c);
    }
}

/// The kernel routes by state, refusals and the last batch's duration.
fn fib_metrics(reg: &mut Registry, f: &FibReply) {
    let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
    gauge(
        reg,
        "fib_routes",
        "tern's kernel routes by state",
        vec![
            (label(&[("state", "installed")]), n(f.installed.len())),
            (label(&[("state", "missing")]), n(f.missing.len())),
            (label(&[("state", "unexpected")]), n(f.unexpected.len())),
        ],
    );
    gauge(
        reg,
        "fib_refused",
        "Refused routes, by who refused them: the kernel (IP Helper on Windows) or tern itself",
        vec![
            (label(&[("by", "kernel")]), n(f.refused_by_system)),
            (label(&[("by", "tern")]), n(f.refused_by_tern)),
        ],
    );
    let secs = Gauge::<f64, AtomicU64>::default();
    secs.set(f.last_apply_seconds);
    reg.register(
        "fib_last_apply_seconds",
        "Duration of the last batch of kernel route changes",
        secs,
    );
}

/// Diagnostic findings by kind and severity.
fn diagnose_metrics(reg: &mut Registry, d: &DiagnoseReply) {
    let mut counts: std::collections::BTreeMap<(String, String), i64> = Default::default();
    // Every known kind and severity, 0 when absent: a query or an alert sees the
    // series before the first finding of its kind.
    let kinds = tern_fib::diag::FindingKind::ALL
        .iter()
        .map(|k| k.name())
        .chain(["datastore-unavailable"]);
    for kind in kinds {
        for severity in ["info", "warning", "error"] {
            counts.insert((kind.to_string(), severity.to_string()), 0);
        }
    }
    for f in &d.findings {
        *counts
            .entry((f.kind.clone(), f.severity.clone()))
            .or_default() += 1;
    }
    gauge(
        reg,
        "diagnostic_findings",
        "Current diagnostic findings by kind and severity",
        counts
            .into_iter()
            .map(|((k, s), v)| (label(&[("kind", &k), ("severity", &s)]), v))
            .collect(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Refusals are split by who refused them, one series each.
    #[test]
    fn refused_routes_are_counted_by_who_refused_them() {
        let f = FibReply {
            failures: vec!["a".into(), "b".into(), "c".into()],
            refused_by_system: 1,
            refused_by_tern: 2,
            ..FibReply::default()
        };
        let mut reg = Registry::with_prefix("tern");
        fib_metrics(&mut reg, &f);
        let mut out = String::new();
        assert!(encode(&mut out, &reg).is_ok());
        assert!(out.contains("tern_fib_refused{by=\"kernel\"} 1\n"), "{out}");
        assert!(out.contains("tern_fib_refused{by=\"tern\"} 2\n"), "{out}");
    }

    /// A head sent in two writes (as bash's printf does) is read whole: answering
    /// after the first part, then closing with the rest unread, reset the connection
    /// and the client lost the response.
    #[tokio::test]
    async fn a_head_sent_in_two_writes_is_read_whole() -> Result<(), String> {
        let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let client = tokio::spawn(async move {
            let mut c = tokio::net::TcpStream::connect(addr).await.ok()?;
            c.write_all(b"GET /metrics HTTP/1.0\r\n").await.ok()?;
            tokio::time::sleep(Duration::from_millis(100)).await;
            c.write_all(b"\r\n").await.ok()
        });
        let (mut stream, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let head = read_head(&mut stream).await.ok_or("no head")?;
        assert_eq!(head, b"GET /metrics HTTP/1.0\r\n\r\n");
        assert!(client.await.map_err(|e| e.to_string())?.is_some());
        Ok(())
    }
}
