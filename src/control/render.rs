//! What people see: the replies of the control socket as text. `status` follows
//! `calicoctl node status` (one table per family, Calico's peer type names), so people
//! moving from Calico's BIRD find the same layout.

use std::fmt::Write as _;

use comfy_table::Table;

/// calicoctl's look: `+---+` borders, a rule under the header, no rules between rows.
const CALICO_STYLE: &str = "||--+-++|    ++++++";

use super::proto::{
    DiagnoseReply, FibReply, FibRoute, HealthReply, PeerInfo, PeersReply, RoutesReply, StatusReply,
};

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(CALICO_STYLE);
    t.set_header(header.iter().copied());
    t
}

fn duration(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m {}s", s / 60, s % 60),
        s if s < 86400 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d {}h", s / 86400, (s % 86400) / 3600),
    }
}

/// `since` as the time of day (UTC) when it is today, else the date.
fn since(rfc3339: &str, today: &str) -> String {
    match rfc3339.split_once('T') {
        Some((date, time)) if date == today => time.trim_end_matches('Z').to_string(),
        Some((date, _)) => date.to_string(),
        None => rfc3339.to_string(),
    }
}

/// `tern status`.
pub fn status(r: &StatusReply) -> String {
    let d = &r.daemon;
    let mut out = format!(
        "tern is running: node {}, router id {}, AS {}, up {} (pid {})\n",
        d.node,
        d.router_id,
        d.asn,
        duration(d.uptime_s),
        d.pid
    );
    if let Some(e) = &d.config_error {
        let _ = writeln!(out, "configuration error: {e}");
    }
    let today = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let today = today.split('T').next().unwrap_or_default().to_string();
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
        let mut t = table(&["PEER ADDRESS", "PEER TYPE", "STATE", "SINCE", "INFO"]);
        for p in peers {
            let up = p.state == "Established";
            let info = match (&p.last_error, up) {
                (Some(e), false) => format!("{} {e}", p.state),
                _ => p.state.clone(),
            };
            t.add_row(vec![
                p.address.clone(),
                p.kind.clone(),
                if up { "up" } else { "start" }.to_string(),
                since(&p.since, &today),
                info,
            ]);
        }
        let _ = writeln!(out, "{t}");
    }
    out
}

/// `tern peers`.
pub fn peers(r: &PeersReply) -> String {
    if r.peers.is_empty() {
        return "No peers configured.\n".into();
    }
    let mut out = String::new();
    for p in &r.peers {
        let addr = if p.port == 179 {
            p.address.clone()
        } else {
            format!("{} port {}", p.address, p.port)
        };
        let _ = writeln!(
            out,
            "{addr} ({}), AS {} (local AS {})",
            p.kind, p.asn, p.local_asn
        );
        let _ = writeln!(
            out,
            "  state        {} since {}{}",
            p.state,
            p.since,
            if p.uptime_s > 0 {
                format!(" (up {})", duration(p.uptime_s))
            } else {
                String::new()
            }
        );
        if !p.families.is_empty() {
            let _ = writeln!(out, "  families     {}", p.families.join(", "));
        }
        if !p.capabilities.is_empty() {
            let _ = writeln!(out, "  capabilities {}", p.capabilities.join(", "));
        }
        let _ = writeln!(
            out,
            "  prefixes     {} received, {} accepted, {} advertised",
            p.prefixes_received, p.prefixes_accepted, p.prefixes_advertised
        );
        if let Some(e) = &p.last_error {
            let _ = writeln!(out, "  last error   {e}");
        }
    }
    out
}

/// `tern routes`.
pub fn routes(r: &RoutesReply) -> String {
    if r.routes.is_empty() {
        return "No routes.\n".into();
    }
    let mut t = table(&[
        "PREFIX",
        "NEXT HOP(S)",
        "AS PATH",
        "COMMUNITIES",
        "SOURCE",
        "FLAGS",
    ]);
    for route in &r.routes {
        let b = &route.best;
        let mut flags = vec!["best"];
        if route.ecmp {
            flags.push("ecmp");
        }
        if route.installed {
            flags.push("installed");
        }
        let comms: Vec<String> = b
            .communities
            .iter()
            .chain(&b.large_communities)
            .cloned()
            .collect();
        t.add_row(vec![
            route.prefix.clone(),
            b.next_hops.join(" "),
            if b.as_path.is_empty() {
                "-".into()
            } else {
                b.as_path.clone()
            },
            if comms.is_empty() {
                "-".into()
            } else {
                comms.join(" ")
            },
            if b.source == "bgp" {
                format!("bgp {}", b.peer)
            } else {
                b.source.clone()
            },
            flags.join(","),
        ]);
    }
    format!("{t}\n")
}

fn fib_rows(t: &mut Table, rows: &[FibRoute]) {
    for r in rows {
        t.add_row(vec![
            r.prefix.clone(),
            r.kind.clone(),
            if r.next_hops.is_empty() {
                "-".into()
            } else {
                r.next_hops.join(" ")
            },
            r.table.to_string(),
        ]);
    }
}

/// `tern fib`.
pub fn fib(r: &FibReply) -> String {
    let mut out = format!(
        "{} installed, {} missing, {} unexpected, {} refused by the kernel\n",
        r.installed.len(),
        r.missing.len(),
        r.unexpected.len(),
        r.failures.len()
    );
    if r.missing.is_empty() && r.unexpected.is_empty() && r.failures.is_empty() {
        let _ = writeln!(
            out,
            "FIB matches what tern wants ({} routes).",
            r.installed.len()
        );
        return out;
    }
    for (title, rows) in [
        ("Wanted but not in the kernel:", &r.missing),
        (
            "tern routes in the kernel that are not wanted:",
            &r.unexpected,
        ),
    ] {
        if !rows.is_empty() {
            let mut t = table(&["PREFIX", "KIND", "NEXT HOP(S)", "TABLE"]);
            fib_rows(&mut t, rows);
            let _ = writeln!(out, "\n{title}\n{t}");
        }
    }
    if !r.failures.is_empty() {
        let _ = writeln!(out, "\nRefused by the kernel:");
        for f in &r.failures {
            let _ = writeln!(out, "  {f}");
        }
    }
    out
}

/// `tern diagnose`.
pub fn diagnose(r: &DiagnoseReply) -> String {
    if r.findings.is_empty() {
        return "No problems found.\n".into();
    }
    let mut out = String::new();
    for f in &r.findings {
        let _ = writeln!(out, "[{}] {}: {}", f.severity, f.kind, f.subject);
        let _ = writeln!(out, "    {}", f.evidence);
        let _ = writeln!(out, "    fix: {}", f.suggestion);
    }
    out
}

/// `tern health`.
pub fn health(r: &HealthReply) -> String {
    format!(
        "live: {}\nready: {} ({})\n",
        if r.live { "yes" } else { "no" },
        if r.ready { "yes" } else { "no" },
        r.reason
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::proto::{DaemonInfo, PathInfo, RouteInfo};

    fn peer(addr: &str, kind: &str, state: &str) -> PeerInfo {
        PeerInfo {
            address: addr.into(),
            port: 179,
            asn: 64512,
            local_asn: 64512,
            kind: kind.into(),
            state: state.into(),
            since: "2026-01-02T03:04:05Z".into(),
            last_error: (state != "Established").then(|| "connection refused".into()),
            ..PeerInfo::default()
        }
    }

    #[test]
    fn status_has_one_calico_style_table_per_family() {
        let r = StatusReply {
            daemon: DaemonInfo {
                node: "node-a".into(),
                router_id: "198.51.100.10".into(),
                asn: 64512,
                uptime_s: 303,
                pid: 42,
                ..DaemonInfo::default()
            },
            peers: vec![
                peer("198.51.100.11", "node-to-node mesh", "Established"),
                peer("198.51.100.1", "global", "Active"),
            ],
        };
        let s = status(&r);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(
            lines[0],
            "tern is running: node node-a, router id 198.51.100.10, AS 64512, up 5m 3s (pid 42)"
        );
        assert_eq!(lines[2], "IPv4 BGP status");
        assert!(
            lines[4].contains("PEER ADDRESS")
                && lines[4].contains("PEER TYPE")
                && lines[4].contains("INFO"),
            "{s}"
        );
        assert!(
            s.contains("| 198.51.100.11 | node-to-node mesh | up    | 2026-01-02 | Established "),
            "{s}"
        );
        assert!(s.contains("| 198.51.100.1  | global            | start | 2026-01-02 | Active connection refused |"), "{s}");
        assert!(
            s.ends_with("IPv6 BGP status\nNo IPv6 peers found.\n"),
            "{s}"
        );
    }

    #[test]
    fn routes_fib_diagnose_and_health_render() {
        let r = RoutesReply {
            routes: vec![RouteInfo {
                prefix: "198.18.4.64/26".into(),
                best: PathInfo {
                    next_hops: vec!["198.51.100.11".into()],
                    peer: "198.51.100.11".into(),
                    source: "bgp".into(),
                    communities: vec!["64512:100".into()],
                    ..PathInfo::default()
                },
                ecmp: false,
                installed: true,
            }],
        };
        let s = routes(&r);
        assert!(s.contains("| 198.18.4.64/26 | 198.51.100.11 | -       | 64512:100   | bgp 198.51.100.11 | best,installed |"), "{s}");
        assert_eq!(routes(&RoutesReply::default()), "No routes.\n");

        let ok = FibReply {
            installed: vec![FibRoute::default(); 3],
            ..FibReply::default()
        };
        assert!(fib(&ok).ends_with("FIB matches what tern wants (3 routes).\n"));
        let bad = FibReply {
            missing: vec![FibRoute {
                prefix: "198.18.4.0/26".into(),
                kind: "unicast".into(),
                next_hops: vec!["198.51.100.11".into()],
                table: 254,
            }],
            failures: vec!["add 198.18.4.0/26: Network is unreachable".into()],
            ..FibReply::default()
        };
        let s = fib(&bad);
        assert!(
            s.starts_with("0 installed, 1 missing, 0 unexpected, 1 refused by the kernel"),
            "{s}"
        );
        assert!(
            s.contains("Refused by the kernel:\n  add 198.18.4.0/26: Network is unreachable"),
            "{s}"
        );

        assert_eq!(diagnose(&DiagnoseReply::default()), "No problems found.\n");
        let h = health(&HealthReply {
            live: true,
            ready: false,
            reason: "1 of 2 BGP peers established".into(),
        });
        assert_eq!(h, "live: yes\nready: no (1 of 2 BGP peers established)\n");
    }
}
