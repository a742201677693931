//! What people see: the replies of the control socket as text. Pure functions (no
//! I/O), so every layout is unit-tested. `status` follows `calicoctl node status` (one
//! table per family, Calico's peer type names, BIRD's `up`/`start`), so people moving
//! from Calico's BIRD find the same layout.

use std::fmt::Write as _;
use std::time::SystemTime;

use comfy_table::{Cell, Table};

use super::proto::{
    DiagnoseReply, FibReply, FibRoute, HealthReply, PathInfo, PeerInfo, PeersReply, ReloadReply,
    RoutesCountReply, RoutesReply, StatusReply,
};

mod received;
mod session;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_more;

pub use received::received;
use session::peer_detail;
pub use session::status_wide;

/// calicoctl's look: `+---+` borders, a rule under the header, no rules between rows.
const CALICO_STYLE: &str = "||--+-++|    ++++++";

/// A table with calicoctl's look. Headers are centred the way calicoctl's table
/// writer centres them (an odd space goes to the right), which comfy-table does the
/// other way round, so the padding is done here.
fn table(header: &[&str], rows: Vec<Vec<String>>) -> Table {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            // comfy-table breaks a cell at newlines: its widest line counts.
            let widest = cell.lines().map(|l| l.chars().count()).max();
            *w = (*w).max(widest.unwrap_or(0));
        }
    }
    let mut t = Table::new();
    t.load_preset(CALICO_STYLE);
    t.set_header(header.iter().zip(&widths).map(|(h, w)| {
        let gap = w.saturating_sub(h.chars().count());
        let (left, right) = (gap / 2, gap - gap / 2);
        Cell::new(format!("{}{h}{}", " ".repeat(left), " ".repeat(right)))
    }));
    for row in rows {
        t.add_row(row);
    }
    t
}

/// [`table`]'s look written directly, for the long tables (`tern routes` on a node
/// with 100,000 routes): comfy-table lays out every cell anew and takes seconds there.
/// Only for single-line, narrow-character cells (prefixes, addresses, AS paths,
/// communities); the result is the same text (pinned by a test).
fn long_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut rule = String::from("+");
    for w in &widths {
        rule.extend(std::iter::repeat_n('-', w + 2));
        rule.push('+');
    }
    // Written in place, no copy of a cell and no padding string: at 100,000 rows the
    // allocations were most of the time.
    fn line<'a>(out: &mut String, cells: impl Iterator<Item = (&'a str, usize)>) {
        out.push('|');
        for (cell, w) in cells {
            out.push(' ');
            out.push_str(cell);
            let pad = w.saturating_sub(cell.chars().count());
            out.extend(std::iter::repeat_n(' ', pad));
            out.push_str(" |");
        }
        out.push('\n');
    }
    let mut out = String::with_capacity((rule.len() + 1) * (rows.len() + 4));
    out.push_str(&rule);
    out.push('\n');
    // Centred as calicoctl centres them: an odd space goes to the right.
    let centred: Vec<String> = header
        .iter()
        .zip(&widths)
        .map(|(h, w)| {
            let gap = w.saturating_sub(h.chars().count());
            format!("{}{h}{}", " ".repeat(gap / 2), " ".repeat(gap - gap / 2))
        })
        .collect();
    line(
        &mut out,
        centred
            .iter()
            .map(String::as_str)
            .zip(widths.iter().copied()),
    );
    out.push_str(&rule);
    out.push('\n');
    for row in rows {
        line(
            &mut out,
            row.iter().map(String::as_str).zip(widths.iter().copied()),
        );
    }
    out.push_str(&rule);
    out
}

/// `t` and a newline, without copying a long table again.
fn with_newline(mut t: String) -> String {
    t.push('\n');
    t
}

/// `5m 3s`: two units are enough to tell a flap from a long-lived session.
fn duration(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m {}s", s / 60, s % 60),
        s if s < 86400 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d {}h", s / 86400, (s % 86400) / 3600),
    }
}

/// `since` (RFC 3339) as calicoctl shows it: the time of day (UTC) when it is
/// `today` (`YYYY-MM-DD`, UTC), else the date. Unparsable text is shown as it is.
fn since(rfc3339: &str, today: &str) -> String {
    let Ok(t) = humantime::parse_rfc3339_weak(rfc3339) else {
        return rfc3339.to_string();
    };
    let utc = humantime::format_rfc3339_seconds(t).to_string();
    match utc.split_once('T') {
        Some((date, time)) if date == today => time.trim_end_matches('Z').to_string(),
        Some((date, _)) => date.to_string(),
        None => utc,
    }
}

/// A dash for an empty cell, so columns never look misaligned.
fn or_dash(s: String) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s
    }
}

/// `tern status`, with today's date taken from the clock.
pub fn status(r: &StatusReply) -> String {
    status_at(r, SystemTime::now())
}

/// `tern status` as seen at `now` (for the `SINCE` column).
fn status_at(r: &StatusReply, now: SystemTime) -> String {
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
    if let Some(e) = &d.datastore_error {
        let _ = writeln!(
            out,
            "datastore unreachable, the configuration in force stays: {e}"
        );
    }
    if d.draining {
        let _ = writeln!(
            out,
            "draining: every route sent carries GRACEFUL_SHUTDOWN (`tern undrain` ends it)"
        );
    }
    let now = humantime::format_rfc3339_seconds(now).to_string();
    let today = now.split('T').next().unwrap_or_default();
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
        let mut rows = Vec::new();
        for p in peers {
            let up = p.state == "Established";
            // BIRD's info column: the BGP state, and for a session that is down the
            // reason it last failed.
            let mut info = match (&p.last_error, up) {
                (Some(e), false) if !e.is_empty() => format!("{} {e}", p.state),
                _ => p.state.clone(),
            };
            // With BFD on, its state beside BGP's (`none` until BGP is Established).
            if let Some(b) = p.bfd.as_ref().filter(|b| up && b.state != "none") {
                info = format!("{info}, BFD {}", b.state);
            }
            rows.push(vec![
                p.address.clone(),
                p.kind.clone(),
                if up { "up" } else { "start" }.to_string(),
                since(&p.since, today),
                info,
            ]);
        }
        let t = table(
            &["PEER ADDRESS", "PEER TYPE", "STATE", "SINCE", "INFO"],
            rows,
        );
        let _ = writeln!(out, "{t}");
    }
    out
}

/// `tern peers`: one block per peer.
pub fn peers(r: &PeersReply) -> String {
    peers_with(r, false)
}

/// `tern peers`, with the session details when `detail` (`tern peers ADDR`).
pub fn peers_with(r: &PeersReply, detail: bool) -> String {
    if r.peers.is_empty() {
        return "No peers configured.\n".into();
    }
    let mut blocks = Vec::new();
    for p in &r.peers {
        let mut out = String::new();
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
        let up = if p.state == "Established" {
            format!(", up {}", duration(p.uptime_s))
        } else {
            String::new()
        };
        let off = if p.disabled {
            format!(" (disabled by the operator: `tern enable {addr}` starts it)")
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  state         {} since {}{up}, {} flaps{off}",
            p.state, p.since, p.flaps
        );
        let _ = writeln!(out, "  families      {}", or_dash(p.families.join(", ")));
        let _ = writeln!(
            out,
            "  capabilities  {}",
            or_dash(p.capabilities.join(", "))
        );
        let _ = writeln!(
            out,
            "  prefixes      {} received, {} accepted, {} advertised",
            p.prefixes_received, p.prefixes_accepted, p.prefixes_advertised
        );
        let _ = writeln!(
            out,
            "  updates       {} received, {} sent",
            p.updates_in, p.updates_out
        );
        let _ = writeln!(
            out,
            "  policy        {} rejected on import, {} kept back on export",
            p.policy_rejected_in, p.policy_filtered_out
        );
        if let Some(e) = &p.last_error {
            let _ = writeln!(out, "  last error    {e}");
        }
        if detail {
            peer_detail(&mut out, p);
        }
        blocks.push(out);
    }
    blocks.join("\n")
}

/// A path's source as the SOURCE column shows it.
fn source_cell(b: &PathInfo) -> String {
    if b.source == "bgp" {
        format!("bgp {}", b.peer)
    } else {
        b.source.clone()
    }
}

/// A path's next hops, AS path, LOCAL_PREF and communities, as `--all` and
/// `--received` show them.
fn path_cells(b: &PathInfo) -> [String; 4] {
    [
        or_dash(b.next_hops.join(" ")),
        or_dash(b.as_path.clone()),
        b.local_pref
            .map_or_else(|| "-".to_string(), |l| l.to_string()),
        communities_cell(b),
    ]
}

/// Standard then large communities, space-separated.
fn communities_cell(b: &PathInfo) -> String {
    let comms: Vec<&str> = b
        .communities
        .iter()
        .chain(&b.large_communities)
        .map(String::as_str)
        .collect();
    or_dash(comms.join(" "))
}

/// `tern routes --all`: one row per path, the prefix on its first, with the
/// decision step that made the best win (on the best) or made a path lose.
fn routes_all(r: &RoutesReply) -> String {
    let mut rows = Vec::new();
    for route in &r.routes {
        for (i, p) in route.paths.iter().enumerate() {
            let mut flags = Vec::new();
            if p.best {
                flags.push("best");
            }
            if p.multipath && route.ecmp {
                flags.push("ecmp");
            }
            if p.best && route.installed {
                flags.push("installed");
            }
            if p.stale {
                flags.push("stale");
            }
            let reason = if p.best {
                format!("won: {}", p.reason)
            } else {
                format!("lost: {}", p.reason)
            };
            let first = if i == 0 {
                route.prefix.clone()
            } else {
                String::new()
            };
            let mut row = vec![first];
            row.extend(path_cells(&p.path));
            row.extend([source_cell(&p.path), or_dash(flags.join(",")), reason]);
            rows.push(row);
        }
    }
    let header = [
        "PREFIX",
        "NEXT HOP",
        "AS PATH",
        "LOCAL PREF",
        "COMMUNITIES",
        "SOURCE",
        "FLAGS",
        "REASON",
    ];
    with_newline(long_table(&header, &rows))
}

/// `tern routes --count`.
pub fn routes_count(r: &RoutesCountReply) -> String {
    let fams = r
        .families
        .iter()
        .map(|f| {
            vec![
                f.family.clone(),
                f.prefixes.to_string(),
                f.paths.to_string(),
            ]
        })
        .collect();
    let mut out = format!("{}\n", table(&["FAMILY", "PREFIXES", "PATHS"], fams));
    if r.peers.is_empty() {
        out.push_str("No paths.\n");
        return out;
    }
    let peers = r
        .peers
        .iter()
        .map(|p| {
            vec![
                p.peer.clone(),
                p.family.clone(),
                p.paths.to_string(),
                p.best.to_string(),
            ]
        })
        .collect();
    let _ = writeln!(
        out,
        "{}",
        table(&["PEER", "FAMILY", "PATHS", "BEST"], peers)
    );
    out
}

/// `tern routes` (and `--all`, when the answer carries every path).
pub fn routes(r: &RoutesReply) -> String {
    if r.routes.is_empty() {
        return "No routes.\n".into();
    }
    if r.routes.iter().any(|x| !x.paths.is_empty()) {
        return routes_all(r);
    }
    let mut rows = Vec::new();
    for route in &r.routes {
        let b = &route.best;
        let mut flags = vec!["best"];
        if route.ecmp {
            flags.push("ecmp");
        }
        if route.installed {
            flags.push("installed");
        }
        rows.push(vec![
            route.prefix.clone(),
            or_dash(b.next_hops.join(" ")),
            or_dash(b.as_path.clone()),
            communities_cell(b),
            source_cell(b),
            flags.join(","),
        ]);
    }
    let header = [
        "PREFIX",
        "NEXT HOP(S)",
        "AS PATH",
        "COMMUNITIES",
        "SOURCE",
        "FLAGS",
    ];
    with_newline(long_table(&header, &rows))
}

fn fib_table(rows: &[FibRoute]) -> Table {
    let rows = rows
        .iter()
        .map(|r| {
            vec![
                r.prefix.clone(),
                r.kind.clone(),
                or_dash(r.next_hops.join(" ")),
                r.table.to_string(),
            ]
        })
        .collect();
    table(&["PREFIX", "KIND", "NEXT HOP(S)", "TABLE"], rows)
}

/// `tern fib`.
pub fn fib(r: &FibReply) -> String {
    if r.disabled {
        return "The FIB is off (fib: { enabled: false } in tern.yaml): tern installs no routes and checks none.\n".into();
    }
    // The daemon lists the kernel's refusals first, then tern's own; a failure that
    // is neither (the kernel's routes could not be read) counts with the kernel's, as
    // it always has.
    let by_tern = r.refused_by_tern.min(r.failures.len());
    let (kernel, tern) = r.failures.split_at(r.failures.len() - by_tern);
    let mut out = format!(
        "{} installed, {} missing, {} unexpected, {} refused by the kernel",
        r.installed.len(),
        r.missing.len(),
        r.unexpected.len(),
        kernel.len()
    );
    if !tern.is_empty() {
        let _ = write!(out, ", {} refused by tern", tern.len());
    }
    out.push('\n');
    if r.missing.is_empty() && r.unexpected.is_empty() && r.failures.is_empty() {
        let _ = writeln!(
            out,
            "FIB matches what tern wants ({} routes).",
            r.installed.len()
        );
        return out;
    }
    if !r.missing.is_empty() {
        let _ = writeln!(
            out,
            "\nWanted but not in the kernel:\n{}",
            fib_table(&r.missing)
        );
    }
    if !r.unexpected.is_empty() {
        let _ = writeln!(
            out,
            "\ntern's routes in the kernel that it does not want:\n{}",
            fib_table(&r.unexpected)
        );
    }
    for (title, list) in [
        ("Refused by the kernel:", kernel),
        ("Refused by tern (not sent to the kernel):", tern),
    ] {
        if !list.is_empty() {
            let _ = writeln!(out, "\n{title}");
            for f in list {
                let _ = writeln!(out, "  {f}");
            }
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
    let yes = |b: bool| if b { "yes" } else { "no" };
    format!(
        "live: {}\nready: {} ({})\n",
        yes(r.live),
        yes(r.ready),
        r.reason
    )
}

/// `tern reload`.
pub fn reload(r: &ReloadReply) -> String {
    let verdict = if r.accepted { "reloaded" } else { "rejected" };
    format!("{verdict}: {}\n", r.message)
}

/// One `tern monitor` line: time, kind, subject, what happened.
pub fn monitor_event(e: &crate::control::proto::MonitorEvent) -> String {
    if e.kind == "subscribed" {
        return format!(
            "{}  watching session and route changes (Ctrl-C stops)",
            e.time
        );
    }
    let subject = match (e.kind.as_str(), &e.prefix, &e.peer) {
        ("route", Some(p), _) => p.clone(),
        (_, _, Some(peer)) => peer.clone(),
        _ => "-".into(),
    };
    format!("{}  {:<8} {:<18} {}", e.time, e.kind, subject, e.text)
}
