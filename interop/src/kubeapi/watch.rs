//! Watch streams: the body of a `?watch=1` answer, newline-separated
//! `{"type": …, "object": …}` events sent as hyper body frames (chunked on the wire),
//! from the history after the asked resourceVersion and then live; BOOKMARKs on a timer;
//! the stream ends at `timeoutSeconds`, when the client goes, or when it fell too far
//! behind the live events (the client resumes, as from any closed watch).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Frame;
use serde_json::{json, Value};
use tokio::sync::broadcast;
use tokio::time::{Instant, Interval};

use super::resources::Resource;
use super::store::Event;

/// What the client asked to watch and how to shape what it gets.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Index of the resource in [`super::resources::RESOURCES`].
    pub res: usize,
    /// The resource.
    pub resource: &'static Resource,
    /// Only this namespace, or all.
    pub namespace: Option<String>,
    /// Answer with `PartialObjectMetadata` objects (kube's metadata watcher).
    pub metadata_only: bool,
}

impl Shape {
    /// `obj` as the client asked for it.
    pub fn object(&self, obj: &Value) -> Value {
        if self.metadata_only {
            partial_metadata(obj)
        } else {
            obj.clone()
        }
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Value {
        let (api_version, kind) = if self.metadata_only {
            ("meta.k8s.io/v1".to_string(), "PartialObjectMetadata")
        } else {
            (self.resource.api_version(), self.resource.kind)
        };
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        json!({"kind": kind, "apiVersion": api_version, "metadata": meta})
    }

    fn wants(&self, e: &Event) -> bool {
        e.res == self.res && self.namespace.as_ref().is_none_or(|ns| *ns == e.namespace)
    }
}

/// `obj` reduced to a `meta.k8s.io/v1` `PartialObjectMetadata`.
pub fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// One event line.
pub fn line(kind: &str, object: Value) -> Bytes {
    let mut s = json!({"type": kind, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

/// A running watch: what is queued to send, and where the rest comes from.
pub struct Watch {
    shape: Shape,
    queue: VecDeque<Bytes>,
    rx: Option<broadcast::Receiver<Arc<Event>>>,
    /// Every event up to this version has been seen (sent, or not wanted).
    seen: u64,
    bookmarks: Option<Interval>,
    deadline: Option<Instant>,
}

/// How a watch starts.
pub struct Start {
    /// Events before the live ones (the history after the asked version, or the current
    /// objects as ADDED).
    pub initial: Vec<Bytes>,
    /// The live events.
    pub rx: broadcast::Receiver<Arc<Event>>,
    /// The store's version when `rx` subscribed.
    pub rv: u64,
    /// Send a bookmark marking the end of the initial events (`sendInitialEvents`).
    pub initial_end_bookmark: bool,
}

impl Watch {
    /// A watch of `shape` from `start`; bookmarks every `bookmark` when asked for; ends
    /// after `timeout` when given.
    pub fn new(
        shape: Shape,
        start: Start,
        bookmark: Option<Duration>,
        timeout: Option<Duration>,
    ) -> Watch {
        let mut queue: VecDeque<Bytes> = start.initial.into();
        if start.initial_end_bookmark {
            queue.push_back(line("BOOKMARK", shape.bookmark(start.rv, true)));
        }
        let bookmarks = bookmark
            .filter(|d| !d.is_zero())
            .map(|d| tokio::time::interval_at(Instant::now() + d, d));
        Watch {
            shape,
            queue,
            rx: Some(start.rx),
            seen: start.rv,
            bookmarks,
            deadline: timeout.map(|t| Instant::now() + t),
        }
    }

    /// A stream that sends `first` and ends (an ERROR event).
    pub fn single(shape: Shape, first: Bytes) -> Watch {
        Watch {
            shape,
            queue: VecDeque::from([first]),
            rx: None,
            seen: 0,
            bookmarks: None,
            deadline: None,
        }
    }

    /// The next frame of the body, or `None` at its end.
    pub async fn next(mut self) -> Option<(Result<Frame<Bytes>, Infallible>, Watch)> {
        loop {
            if let Some(l) = self.queue.pop_front() {
                return Some((Ok(Frame::data(l)), self));
            }
            let rx = self.rx.as_mut()?;
            let deadline = self.deadline;
            let timed_out = async move {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let bookmarks = self.bookmarks.as_mut();
            let tick = async move {
                match bookmarks {
                    Some(i) => i.tick().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = timed_out => return None,
                _ = tick => {
                    let b = self.shape.bookmark(self.seen, false);
                    self.queue.push_back(line("BOOKMARK", b));
                }
                got = rx.recv() => match got {
                    Ok(e) => {
                        self.seen = self.seen.max(e.rv);
                        if self.shape.wants(&e) {
                            self.queue.push_back(line(e.kind, self.shape.object(&e.object)));
                        }
                    }
                    // Closed (server stopping) or lagged: end; the client resumes.
                    Err(_) => return None,
                },
            }
        }
    }
}
