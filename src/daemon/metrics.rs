//! Prometheus metrics on the configured address (`metrics:` in tern.yaml, localhost by
//! default), with `/healthz` (live) and `/readyz` (ready) on the same port for
//! Kubernetes probes and load balancers that cannot run `tern health`.
//!
//! hyper serves HTTP: the hand-written HTTP/1.0 responder this replaced answered after
//! the first read, before a request head sent in two writes had arrived, and closing
//! with bytes unread made the kernel reset the connection. hyper (already built for the
//! Kubernetes client) parses heads, keep-alive and timeouts as HTTP/1.1 says, so each
//! path here is only what it answers. What the numbers are is in [`render`].

#[cfg(test)]
mod cost_tests;
mod process;
mod render;
#[cfg(test)]
mod tests;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use super::handler::DaemonHandler;
use crate::control::proto::HealthReply;
pub use render::render;

/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Prometheus' text format, as prometheus-client encodes it.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the endpoints answer from: the daemon, or a stand-in in tests.
pub trait Source: Send + Sync + 'static {
    /// The metrics text.
    fn metrics(&self) -> impl Future<Output = String> + Send;
    /// `tern health`'s answer; `None` when the daemon cannot tell (its state is
    /// poisoned), which both probes report as failing.
    fn health(&self) -> impl Future<Output = Option<HealthReply>> + Send;
}

impl Source for DaemonHandler {
    async fn metrics(&self) -> String {
        render(self).await
    }

    async fn health(&self) -> Option<HealthReply> {
        let v = self
            .answer(crate::control::proto::Request::Health)
            .await
            .ok()?;
        serde_json::from_value(v).ok()
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` until the task is dropped.
pub async fn serve<S: Source>(listener: TcpListener, source: Arc<S>) {
    loop {
        let Ok((stream, from)) = listener.accept().await else {
            // Out of file descriptors, most likely: wait rather than spin.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let source = Arc::clone(&source);
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let source = Arc::clone(&source);
                async move { Ok::<_, Infallible>(respond(&*source, req).await) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(%from, "metrics connection: {e}");
            }
        });
    }
}

/// One request's answer.
async fn respond<S: Source, B>(source: &S, req: Request<B>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET and HEAD are served\n".into(),
        );
    }
    match req.uri().path() {
        "/metrics" => {
            let mut r = text(StatusCode::OK, source.metrics().await);
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS));
            r
        }
        "/healthz" => probe(source.health().await, |h| h.live),
        "/readyz" => probe(source.health().await, |h| h.ready),
        other => text(
            StatusCode::NOT_FOUND,
            format!("no {other} here: try /metrics, /healthz or /readyz\n"),
        ),
    }
}

/// 200 when `pass` holds, else 503; the body is `tern health`'s reason either way.
fn probe(health: Option<HealthReply>, pass: fn(&HealthReply) -> bool) -> Response<Full<Bytes>> {
    match health {
        Some(h) if pass(&h) => text(StatusCode::OK, format!("{}\n", h.reason)),
        Some(h) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{}\n", h.reason)),
        None => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "the daemon cannot report its health (its state is poisoned); restart tern\n".into(),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Binds the metrics listener.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen for metrics on {addr}: {e}"))
}
