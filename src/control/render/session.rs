//! The session views: `tern status -o wide` (vtysh's `show bgp summary` columns beside
//! calicoctl's) and the details `tern peers ADDR` adds to a peer's block.

use std::fmt::Write as _;
use std::time::SystemTime;

use super::{duration, or_dash, status_at, table};
use crate::control::proto::{MessageCounts, PeerInfo, StatusReply};

/// `tern status -o wide`: the daemon line, then one table per family with vtysh's
/// `show bgp summary` columns beside calicoctl's.
pub fn status_wide(r: &StatusReply) -> String {
    status_wide_at(r, SystemTime::now())
}

/// Seconds from `rfc3339` to `now`, if it parses and is not in the future.
fn seconds_since(rfc3339: &str, now: SystemTime) -> Option<u64> {
    let t = humantime::parse_rfc3339_weak(rfc3339).ok()?;
    now.duration_since(t).ok().map(|d| d.as_secs())
}

/// `tern status -o wide` as seen at `now` (for the Up/Down column).
pub(super) fn status_wide_at(r: &StatusReply, now: SystemTime) -> String {
    let mut out = String::new();
    // The daemon's lines as `status` prints them, without its tables.
    let plain = status_at(r, now);
    for line in plain.lines().take_while(|l| !l.is_empty()) {
        let _ = writeln!(out, "{line}");
    }
    for (family, v6) in [("IPv4", false), ("IPv6", true)] {
        let peers: Vec<&PeerInfo> = r
            .peers
            .iter()
            .filter(|p| p.address.contains(':') == v6)
            .collect();
        let _ = writeln!(out, "\n{family} BGP status");
        if peers.is_empty() {
            let _ = writeln!(out, "No {family} peers found.");
            continue;
        }
        let rows = peers
            .into_iter()
            .map(|p| {
                // vtysh: how long the session has been up, or down.
                let up_down = if p.state == "Established" {
                    Some(p.uptime_s)
                } else {
                    seconds_since(&p.since, now)
                };
                vec![
                    p.address.clone(),
                    p.kind.clone(),
                    p.asn.to_string(),
                    p.state.clone(),
                    up_down.map_or_else(|| "-".to_string(), duration),
                    p.prefixes_received.to_string(),
                    p.prefixes_advertised.to_string(),
                    p.messages_received.total().to_string(),
                    p.messages_sent.total().to_string(),
                    or_dash(p.last_error.clone().unwrap_or_default()),
                ]
            })
            .collect();
        let header = [
            "PEER ADDRESS",
            "PEER TYPE",
            "AS",
            "STATE",
            "UP/DOWN",
            "PFXRCD",
            "PFXSNT",
            "MSGRCVD",
            "MSGSENT",
            "LAST ERROR",
        ];
        let _ = writeln!(out, "{}", table(&header, rows));
    }
    out
}

/// Messages by type, as `tern peers ADDR` shows them.
fn messages_line(m: &MessageCounts) -> String {
    format!(
        "{} total: {} open, {} update, {} notification, {} keepalive, {} route-refresh",
        m.total(),
        m.open,
        m.update,
        m.notification,
        m.keepalive,
        m.route_refresh
    )
}

/// The session details `tern peers ADDR` adds: timers, identities, endpoints,
/// messages, NOTIFICATIONs, graceful restart, security and filters.
pub(super) fn peer_detail(out: &mut String, p: &PeerInfo) {
    let secs = |v: Option<u16>| v.map_or_else(|| "-".to_string(), |s| format!("{s}s"));
    let _ = writeln!(
        out,
        "  timers        hold {}, keepalive {} (negotiated)",
        secs(p.hold_time),
        secs(p.keepalive)
    );
    let _ = writeln!(
        out,
        "  router id     {}",
        or_dash(p.remote_router_id.clone().unwrap_or_default())
    );
    let local = match (&p.local_address, p.local_port) {
        (Some(a), Some(port)) => format!("{a} port {port}"),
        (Some(a), None) => a.clone(),
        (None, _) => "-".into(),
    };
    let _ = writeln!(
        out,
        "  connection    local {local}, remote {} port {}",
        p.address,
        p.remote_port.unwrap_or(p.port)
    );
    let _ = writeln!(
        out,
        "  received      {}",
        messages_line(&p.messages_received)
    );
    let _ = writeln!(out, "  sent          {}", messages_line(&p.messages_sent));
    for (label, n) in [
        ("notif. in ", &p.last_notification_received),
        ("notif. out", &p.last_notification_sent),
    ] {
        let _ = writeln!(
            out,
            "  {label}    {}",
            or_dash(n.clone().unwrap_or_default())
        );
    }
    let _ = writeln!(
        out,
        "  graceful      {}",
        p.graceful_restart
            .clone()
            .unwrap_or_else(|| "not negotiated".into())
    );
    let _ = writeln!(
        out,
        "  security      TCP-MD5 {}, GTSM {}",
        if p.md5 { "on" } else { "off" },
        p.gtsm_hops
            .map_or_else(|| "off".to_string(), |h| format!("on ({h} hops)"))
    );
    let _ = writeln!(out, "  filters       {}", or_dash(p.filters.join(", ")));
    let _ = writeln!(out, "  bfd           {}", bfd_line(p.bfd.as_ref()));
}

/// `tern peers ADDR`'s BFD line.
fn bfd_line(b: Option<&crate::control::proto::BfdInfo>) -> String {
    let Some(b) = b else {
        return "off (bfd.enabled in tern.yaml)".into();
    };
    if b.state == "none" {
        return "no session yet (it starts once BGP is Established)".into();
    }
    let hops = if b.multihop {
        "multi-hop"
    } else {
        "single hop"
    };
    let tx = b.tx_interval_ms.map_or_else(
        || "nothing sent".to_string(),
        |t| format!("sent every {t} ms"),
    );
    format!(
        "{}, {hops}, peer {}; detection {} ms, {tx}; {} downs; last: {}",
        b.state, b.remote_state, b.detect_time_ms, b.downs, b.diagnostic
    )
}
