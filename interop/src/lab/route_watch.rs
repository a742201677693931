//! Watching other nodes' kernels for one route while a node changes its BGP speaker.
//!
//! `ip monitor route` in each namespace reports every change with the kernel event's
//! wall-clock time, so a route that is deleted and added again a millisecond later is
//! seen and told apart from a route that is gone. BIRD 2 replaces an IPv4 kernel route
//! that way (delete, then add) whenever the BGP path behind it changes, even when the
//! kernel route stays the same: when a node moves from BIRD to tern its block's
//! ADD-PATH identifier changes (BIRD's comes from its internal route sources), so its
//! BIRD peers re-install the block once. Sampling every 100 ms caught that millisecond
//! about once in a hundred runs and called it a lost route; here it is counted as a
//! re-install, and only an absence longer than [`REINSTALL`] counts as a gap.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest absence still counted as a re-install (delete and add back to back);
/// BIRD's two netlink requests are well under a millisecond apart here, while a route
/// lost with its session stays away until a new session's UPDATE, hundreds of ms.
pub const REINSTALL: Duration = Duration::from_millis(50);

/// What one node's kernel did with the route while a [`RouteWatch`] ran.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteGaps {
    /// The node's namespace.
    pub ns: String,
    /// Whether the kernel routed the prefix via the gateway when the watch started.
    pub at_start: bool,
    /// Whether it did when the watch ended.
    pub at_end: bool,
    /// Kernel route changes seen for the prefix (adds and deletes).
    pub changes: usize,
    /// Times the route went and came back within [`REINSTALL`].
    pub reinstalls: usize,
    /// Times it went for longer, or had not come back when the watch ended.
    pub gaps: usize,
    /// Total time without the route, re-installs included.
    pub without: Duration,
    /// The longest single absence.
    pub longest: Duration,
}

impl RouteGaps {
    /// Whether the node kept the route throughout: there at both ends, and never away
    /// for longer than a re-install.
    pub fn kept(&self) -> bool {
        self.at_start && self.at_end && self.gaps == 0
    }
}

/// One kernel route for the watched prefix, as `ip route` / `ip monitor` print it.
#[derive(Debug, Clone, PartialEq)]
struct RouteLine {
    /// Seconds since the Unix epoch, from `ip -ts monitor`'s stamp.
    at: Option<f64>,
    deleted: bool,
    /// The route's metric: with the table, what tells two routes to a prefix apart.
    metric: u32,
    /// Whether it forwards via the watched gateway (one of its next hops does).
    via: bool,
}

/// Days from 1970-01-01 to the civil date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2026-11-26T22:43:53.023082` (`ip -ts`, UTC here) as seconds since the epoch.
fn parse_stamp(s: &str) -> Option<f64> {
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, mo, da) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':');
    let (h, mi) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let sec: f64 = t.next()?.parse().ok()?;
    Some((days_from_civil(y, mo, da) * 86_400 + h * 3600 + mi * 60) as f64 + sec)
}

/// Parses one route (continuation lines joined) if it is `prefix` in the main table.
fn parse_route(text: &str, prefix: &str, gateway: &str) -> Option<RouteLine> {
    let mut rest = text.trim();
    let mut at = None;
    if let Some(stamped) = rest.strip_prefix('[') {
        let (stamp, after) = stamped.split_once(']')?;
        at = parse_stamp(stamp);
        rest = after.trim_start();
    }
    let deleted = rest.starts_with("Deleted ");
    let words: Vec<&str> = rest.split_whitespace().skip(usize::from(deleted)).collect();
    // A route type other than unicast comes first (`blackhole 198.18.4.0/26 …`).
    let typed = words.first().is_some_and(|w| {
        [
            "blackhole",
            "unreachable",
            "prohibit",
            "throw",
            "local",
            "broadcast",
            "anycast",
            "multicast",
            "unicast",
        ]
        .contains(w)
    });
    let words = words.get(usize::from(typed)..).unwrap_or_default();
    if words.first() != Some(&prefix) {
        return None;
    }
    let after = |key: &str| words.windows(2).find(|w| w[0] == key).map(|w| w[1]);
    if after("table").is_some_and(|t| t != "main") {
        return None;
    }
    Some(RouteLine {
        at,
        deleted,
        metric: after("metric").and_then(|m| m.parse().ok()).unwrap_or(0),
        via: words.windows(2).any(|w| w == ["via", gateway]),
    })
}

/// Groups `ip` output into routes: a line starting with white space (a multipath
/// route's `nexthop …`) continues the one before.
fn routes_in(lines: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in lines {
        match out.last_mut() {
            Some(last) if line.starts_with(char::is_whitespace) => {
                last.push(' ');
                last.push_str(line.trim());
            }
            _ => out.push(line),
        }
    }
    out
}

/// The routes to exactly `prefix` in `ns`'s main table now, by metric.
fn snapshot(ns: &str, prefix: &str, gateway: &str) -> BTreeMap<u32, bool> {
    let out = Command::new("ip")
        .args(["-n", ns, "route", "show", "exact", prefix])
        .stderr(Stdio::null())
        .output();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    routes_in(text.lines().map(str::to_string))
        .iter()
        .filter_map(|r| parse_route(r, prefix, gateway))
        .map(|r| (r.metric, r.via))
        .collect()
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Replays `events` over the routes there at the start; what the node went through.
fn replay(
    ns: &str,
    start: BTreeMap<u32, bool>,
    events: &[RouteLine],
    end: f64,
    at_end: bool,
) -> RouteGaps {
    let present = |m: &BTreeMap<u32, bool>| m.values().any(|v| *v);
    let mut g = RouteGaps {
        ns: ns.to_string(),
        at_start: present(&start),
        at_end,
        changes: events.len(),
        reinstalls: 0,
        gaps: 0,
        without: Duration::ZERO,
        longest: Duration::ZERO,
    };
    let mut routes = start;
    let mut gone_at = (!g.at_start).then_some(None::<f64>);
    let away = |g: &mut RouteGaps, from: Option<f64>, to: f64| {
        let d = Duration::from_secs_f64((to - from.unwrap_or(to)).max(0.0));
        g.without += d;
        g.longest = g.longest.max(d);
        if d <= REINSTALL && from.is_some() {
            g.reinstalls += 1;
        } else {
            g.gaps += 1;
        }
    };
    for e in events {
        if e.deleted {
            routes.remove(&e.metric);
        } else {
            routes.insert(e.metric, e.via);
        }
        let t = e.at.unwrap_or(end);
        match (gone_at, present(&routes)) {
            (None, false) => gone_at = Some(Some(t)),
            (Some(from), true) => {
                away(&mut g, from, t);
                gone_at = None;
            }
            _ => {}
        }
    }
    if let Some(from) = gone_at {
        away(&mut g, from, end);
    } else if !at_end {
        // The monitor missed the change that took the route away.
        g.gaps += 1;
    }
    g
}

/// One namespace's `ip monitor route` and the thread reading it.
#[derive(Debug)]
struct Monitor {
    ns: String,
    child: Child,
    reader: Option<JoinHandle<Vec<String>>>,
    start: BTreeMap<u32, bool>,
}

/// Watches whether each of some namespaces routes `prefix` via `gateway`, until
/// [`RouteWatch::finish`].
#[derive(Debug)]
pub struct RouteWatch {
    prefix: String,
    gateway: String,
    monitors: Vec<Monitor>,
}

impl RouteWatch {
    /// Starts watching `namespaces` for `prefix` via `gateway`. A namespace whose
    /// monitor cannot start counts as never having the route.
    pub fn start(namespaces: &[String], prefix: &str, gateway: &str) -> RouteWatch {
        let mut monitors = Vec::new();
        for ns in namespaces {
            let child = Command::new("ip")
                .args(["-n", ns, "-ts", "monitor", "route"])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn();
            let Ok(mut child) = child else { continue };
            let reader = child.stdout.take().map(|out| {
                std::thread::spawn(move || {
                    routes_in(BufReader::new(out).lines().map_while(Result::ok))
                })
            });
            monitors.push(Monitor {
                ns: ns.clone(),
                child,
                reader,
                start: BTreeMap::new(),
            });
        }
        // The monitors subscribe as they start; a change between that and the
        // snapshot is in both, and replaying it again changes nothing.
        std::thread::sleep(Duration::from_millis(300));
        for m in &mut monitors {
            m.start = snapshot(&m.ns, prefix, gateway);
        }
        RouteWatch {
            prefix: prefix.to_string(),
            gateway: gateway.to_string(),
            monitors,
        }
    }

    /// Stops watching; what each namespace went through.
    pub fn finish(mut self) -> Vec<RouteGaps> {
        // Changes up to now are in the monitors' pipes before they are stopped.
        std::thread::sleep(Duration::from_millis(200));
        let end = now_secs();
        let mut out = Vec::new();
        for mut m in std::mem::take(&mut self.monitors) {
            let at_end = snapshot(&m.ns, &self.prefix, &self.gateway)
                .values()
                .any(|v| *v);
            let _ = m.child.kill();
            let _ = m.child.wait();
            let lines = m
                .reader
                .take()
                .and_then(|r| r.join().ok())
                .unwrap_or_default();
            let events: Vec<RouteLine> = lines
                .iter()
                .filter_map(|l| parse_route(l, &self.prefix, &self.gateway))
                .collect();
            out.push(replay(
                &m.ns,
                std::mem::take(&mut m.start),
                &events,
                end,
                at_end,
            ));
        }
        out
    }
}

impl Drop for RouteWatch {
    fn drop(&mut self) {
        for m in &mut self.monitors {
            let _ = m.child.kill();
            let _ = m.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "198.18.4.0/26";
    const GW: &str = "198.51.100.14";

    fn ev(line: &str) -> RouteLine {
        parse_route(line, P, GW).unwrap()
    }

    #[test]
    fn monitor_lines_parse_with_their_stamps() {
        let del = ev("[2026-11-26T22:43:53.023082] Deleted 198.18.4.0/26 via 198.51.100.14 dev eth0 proto bird metric 32 ");
        assert!(del.deleted && del.via && del.metric == 32);
        let add = ev("[2026-11-26T22:43:53.023867] 198.18.4.0/26 via 198.51.100.14 dev eth0 proto bird metric 32 ");
        let gap = add.at.unwrap() - del.at.unwrap();
        assert!((gap - 0.000_785).abs() < 1e-6, "{gap}");
        // 2026-11-26 is day 20,783 since the epoch.
        assert_eq!(
            parse_stamp("2026-11-26T00:00:00.5"),
            Some(20_783.0 * 86_400.0 + 0.5)
        );
        let bh = ev("blackhole 198.18.4.0/26 proto 201 metric 1024");
        assert!(!bh.via && bh.metric == 1024 && bh.at.is_none());
        assert!(parse_route("198.18.4.0/27 via 198.51.100.14 dev eth0", P, GW).is_none());
        assert!(parse_route("local 198.18.4.0/26 dev lo table local", P, GW).is_none());
        let multi = routes_in(
            [
                "198.18.4.0/26 proto 201 metric 1024",
                "\tnexthop via 198.51.100.13 dev eth0 weight 1",
                "\tnexthop via 198.51.100.14 dev eth0 weight 1",
            ]
            .into_iter()
            .map(String::from),
        );
        assert_eq!(multi.len(), 1);
        assert!(ev(&multi[0]).via);
    }

    #[test]
    fn a_delete_and_add_back_to_back_is_a_reinstall_and_a_longer_absence_a_gap() {
        let start: BTreeMap<u32, bool> = [(32, true)].into();
        let t = |s: &str| format!("[2026-11-26T22:43:{s}]");
        let events = [
            ev(&format!("{} Deleted {P} via {GW} metric 32", t("53.0230"))),
            ev(&format!("{} {P} via {GW} metric 32", t("53.0238"))),
            ev(&format!("{} Deleted {P} via {GW} metric 32", t("54.0"))),
            ev(&format!("{} {P} via {GW} metric 32", t("54.5"))),
        ];
        let end = events[3].at.unwrap() + 1.0;
        let g = replay("n3", start.clone(), &events, end, true);
        assert_eq!((g.reinstalls, g.gaps, g.changes), (1, 1, 4));
        assert!(!g.kept());
        assert!((g.longest.as_secs_f64() - 0.5).abs() < 1e-3, "{g:?}");
        let g = replay("n3", start.clone(), &events[..2], end, true);
        assert!(g.kept() && g.reinstalls == 1, "{g:?}");
        // A second route via another gateway does not stand in for the watched one;
        // a second route via the gateway at another metric does.
        let other = ev(&format!("{} {P} via 198.51.100.13 metric 10", t("53.0")));
        let g = replay("n3", start.clone(), &[other, events[2].clone()], end, true);
        assert_eq!(g.gaps, 1, "{g:?}");
        let both: BTreeMap<u32, bool> = [(32, true), (1024, true)].into();
        let g = replay("n3", both, &events[2..3], end, true);
        assert!(g.kept() && g.changes == 1, "{g:?}");
        // Gone at the end, or never there.
        let g = replay("n3", start.clone(), &events[2..3], end, false);
        assert!(!g.kept() && g.gaps == 1);
        assert!(!replay("n3", BTreeMap::new(), &[], end, false).kept());
    }
}
