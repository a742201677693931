//! `tern monitor`'s filters, applied by the control server to each event before it
//! goes to the client.

use std::net::IpAddr;

use super::proto::MonitorEvent;

/// What a client asked to see.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only this peer (withdrawals, which name no peer, pass).
    pub peer: Option<IpAddr>,
    /// Only routes inside this prefix, or covering it (no session events).
    pub prefix: Option<ipnet::IpNet>,
}

impl Filter {
    /// Whether `e` passes.
    pub fn passes(&self, e: &MonitorEvent) -> bool {
        if let Some(want) = self.peer {
            let named = e.peer.as_deref().and_then(|p| p.parse::<IpAddr>().ok());
            let withdrawal = e.kind == "route" && e.peer.is_none();
            if named != Some(want) && !withdrawal {
                return false;
            }
        }
        if let Some(want) = self.prefix {
            let Some(p) = e
                .prefix
                .as_deref()
                .and_then(|p| p.parse::<ipnet::IpNet>().ok())
            else {
                return false;
            };
            if !want.contains(&p) && !p.contains(&want.network()) {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test: a panic is the failure

    use super::*;

    fn ev(kind: &str, peer: Option<&str>, prefix: Option<&str>) -> MonitorEvent {
        MonitorEvent {
            kind: kind.into(),
            peer: peer.map(String::from),
            prefix: prefix.map(String::from),
            ..MonitorEvent::default()
        }
    }

    #[test]
    fn filters_by_peer_and_prefix() {
        let by_peer = Filter {
            peer: Some("198.51.100.1".parse().unwrap()),
            prefix: None,
        };
        assert!(by_peer.passes(&ev("session", Some("198.51.100.1"), None)));
        assert!(!by_peer.passes(&ev("session", Some("198.51.100.2"), None)));
        assert!(by_peer.passes(&ev("route", Some("198.51.100.1"), Some("198.18.1.0/26"))));
        assert!(by_peer.passes(&ev("route", None, Some("198.18.1.0/26"))));
        let by_prefix = Filter {
            peer: None,
            prefix: Some("198.18.0.0/16".parse().unwrap()),
        };
        assert!(by_prefix.passes(&ev("route", None, Some("198.18.1.0/26"))));
        assert!(!by_prefix.passes(&ev("route", None, Some("203.0.113.0/24"))));
        assert!(!by_prefix.passes(&ev("session", Some("198.51.100.1"), None)));
        // An address: the routes covering it.
        let host = Filter {
            peer: None,
            prefix: Some("198.18.1.5/32".parse().unwrap()),
        };
        assert!(host.passes(&ev("route", None, Some("198.18.1.0/26"))));
    }
}
