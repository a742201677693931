//! `tern monitor` on the control socket: a request that is answered with a stream of
//! events, one line each, until the client closes.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::sync::broadcast;

use super::{reply, Handler};
use crate::control::monitor;
use crate::control::proto::{MonitorEvent, Request, RequestEnvelope, VERSION};

/// The filters of a `monitor` request of this protocol version; `None` for any other
/// line (which [`answer`] then judges, errors included).
pub(super) fn monitor_request(line: &[u8]) -> Option<Result<monitor::Filter, String>> {
    let env: RequestEnvelope = serde_json::from_slice(line).ok()?;
    if env.version != VERSION {
        return None;
    }
    let Request::Monitor { peer, prefix } = env.request else {
        return None;
    };
    let filter = (|| {
        Ok(monitor::Filter {
            peer: peer
                .map(|p| p.parse().map_err(|_| format!("{p:?} is not an IP address")))
                .transpose()?,
            prefix: prefix
                .map(|p| {
                    p.parse::<ipnet::IpNet>()
                        .or_else(|_| p.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                        .map_err(|_| format!("{p:?} is not a prefix or an address"))
                })
                .transpose()?,
        })
    })();
    Some(filter)
}

/// Streams events to a `monitor` client until it closes (or the daemon stops): first
/// a `subscribed` line, then each event that passes `filter`, and a `lagged` line
/// when events were lost because the client read too slowly.
pub(super) async fn stream_events<R, W, H>(
    mut reader: BufReader<R>,
    mut w: W,
    handler: &H,
    filter: Result<monitor::Filter, String>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    H: Handler,
{
    let event = |kind: &str, text: String| MonitorEvent {
        time: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
        kind: kind.into(),
        peer: None,
        prefix: None,
        text,
    };
    let as_text = |e: &MonitorEvent| serde_json::to_string(e).map_err(|e| e.to_string());
    let filter = match filter {
        Ok(f) => f,
        Err(e) => {
            let _ = reply(&mut w, Err(e)).await;
            return;
        }
    };
    let Some(mut rx) = handler.monitor() else {
        let _ = reply(&mut w, Err("this daemon has no event stream".into())).await;
        return;
    };
    if reply(&mut w, as_text(&event("subscribed", String::new())))
        .await
        .is_err()
    {
        return;
    }
    let mut sink = Vec::new();
    loop {
        let out = tokio::select! {
            e = rx.recv() => match e {
                Ok(e) if filter.passes(&e) => as_text(&e),
                Ok(_) => continue,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    as_text(&event("lagged", format!("{n} events lost: the client read too slowly")))
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            // The client sends nothing more; a read that ends means it is gone.
            n = reader.read_until(b'\n', &mut sink) => match n {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    sink.clear();
                    continue;
                }
            },
        };
        if reply(&mut w, out).await.is_err() {
            return;
        }
    }
}
