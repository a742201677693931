//! `tern monitor`'s source: session and route changes as they happen, on a broadcast
//! channel. Nothing is built while nobody watches (one atomic load per batch), so the
//! route path pays for the stream only while a client reads it; a client that reads
//! too slowly loses events and is told how many (`lagged`), the daemon never waits.

use std::net::IpAddr;
use std::time::SystemTime;

use tern_bgp::rib::BestChange;
use tokio::sync::broadcast;

use crate::control::proto::MonitorEvent;

/// Events kept for a slow client before it lags.
const BUFFER: usize = 4096;

/// The sending side, cloned to whoever has events.
#[derive(Debug, Clone)]
pub struct Hub(broadcast::Sender<MonitorEvent>);

impl Default for Hub {
    fn default() -> Hub {
        Hub(broadcast::channel(BUFFER).0)
    }
}

fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

impl Hub {
    /// Someone is watching.
    pub fn watching(&self) -> bool {
        self.0.receiver_count() > 0
    }

    /// A new stream.
    pub fn subscribe(&self) -> broadcast::Receiver<MonitorEvent> {
        self.0.subscribe()
    }

    /// A session change of `peer`.
    pub fn session(&self, peer: IpAddr, text: impl FnOnce() -> String) {
        if self.watching() {
            let _ = self.0.send(MonitorEvent {
                time: now(),
                kind: "session".into(),
                peer: Some(peer.to_string()),
                prefix: None,
                text: text(),
            });
        }
    }

    /// Loc-RIB changes.
    pub fn routes(&self, changes: &[BestChange]) {
        if !self.watching() {
            return;
        }
        let time = now();
        for c in changes {
            let (peer, text) = match &c.now {
                Some(b) => {
                    let hops: Vec<String> =
                        b.multipath.iter().map(|p| p.next_hop.to_string()).collect();
                    let src = &b.best.source;
                    if src.local {
                        (None, "best: this node's own".to_string())
                    } else {
                        let peer = src.address.to_string();
                        let text = format!("best via {} (bgp {peer})", hops.join(", "));
                        (Some(peer), text)
                    }
                }
                None => (None, "withdrawn".to_string()),
            };
            let _ = self.0.send(MonitorEvent {
                time: time.clone(),
                kind: "route".into(),
                peer,
                prefix: Some(c.prefix.to_string()),
                text,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test: a panic is the failure

    use super::*;

    #[test]
    fn nothing_is_built_without_a_watcher() {
        let hub = Hub::default();
        let mut built = false;
        hub.session("198.51.100.1".parse().unwrap(), || {
            built = true;
            String::new()
        });
        assert!(!built);
        let mut rx = hub.subscribe();
        hub.session("198.51.100.1".parse().unwrap(), || "Established".into());
        let e = rx.try_recv().unwrap();
        assert_eq!(
            (e.kind.as_str(), e.text.as_str()),
            ("session", "Established")
        );
    }
}
