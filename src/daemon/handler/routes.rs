//! `tern routes` rows, built from what the speaker and the FIB task answered: the
//! Loc-RIB view, every path with the step that settled it (`--all`), and the totals
//! per family and per peer (`--count`). Pure functions over copies of the tables, so
//! the cost of a 100,000-route answer is measured in the tests below.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use tern_bgp::rib::{compare, Best, Path, Reason};
use tern_config::intent::Intent;

use crate::control::proto::{FamilyCount, PeerCount, RouteInfo, RoutePath, RoutesCountReply};
use crate::daemon::convert::{path_info, route_info};

/// Which routes the user asked for.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Filter {
    /// Only this prefix, or the routes covering this address.
    pub prefix: Option<IpNet>,
    /// Only routes whose best path came from this peer.
    pub peer: Option<IpAddr>,
    /// Only IPv6 (`Some(true)`) or IPv4 (`Some(false)`) routes.
    pub v6: Option<bool>,
}

/// What else the rows need: the intent (the source of our own routes), the prefixes
/// learnt from the kernel, what the FIB task installed.
pub(crate) struct Context<'a> {
    /// The intent in force.
    pub intent: Option<&'a Intent>,
    /// Our own routes learnt from the kernel (borrowed workload addresses).
    pub kernel_learned: &'a BTreeSet<IpNet>,
    /// What the FIB task installed; a set, so each row is one lookup.
    pub installed: &'a HashSet<IpNet>,
}

/// `ipv4` / `ipv6` as the user typed it: `Some(true)` for IPv6.
pub(crate) fn parse_family(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "ipv4" | "4" => Ok(false),
        "ipv6" | "6" => Ok(true),
        _ => Err(format!(
            "--family {text:?} is not a family: use ipv4 or ipv6"
        )),
    }
}

fn family_name(p: &IpNet) -> &'static str {
    match p {
        IpNet::V4(_) => "ipv4",
        IpNet::V6(_) => "ipv6",
    }
}

/// The decision step's name as in the JSON (`local-pref`, ...).
fn reason_name(r: Reason) -> String {
    r.name().to_string()
}

/// Whether the Loc-RIB's `p` is what `want` asks for: an exact prefix, or (for an
/// address with no route of its own) every route covering it. `exact` says whether
/// the Loc-RIB holds `want` itself.
fn prefix_hit(p: &IpNet, want: IpNet, exact: bool) -> bool {
    if want.prefix_len() == want.max_prefix_len() && !exact {
        p.contains(&want.addr())
    } else {
        *p == want
    }
}

/// The Loc-RIB rows the filter selects, each with the FIB's verdict.
pub(crate) fn rows(rib: &[(IpNet, Best)], f: Filter, cx: &Context<'_>) -> Vec<RouteInfo> {
    // Looked up once, not once per row: with 100,000 routes a per-row scan of the
    // table is what made `tern routes` quadratic.
    let exact = f
        .prefix
        .is_some_and(|w| rib.binary_search_by(|(q, _)| q.cmp(&w)).is_ok());
    let mut out = Vec::new();
    for (p, b) in rib {
        if f.v6.is_some_and(|v6| matches!(p, IpNet::V6(_)) != v6) {
            continue;
        }
        if f.prefix.is_some_and(|w| !prefix_hit(p, w, exact)) {
            continue;
        }
        if let Some(a) = f.peer {
            if b.best.source.address != a || b.best.source.local {
                continue;
            }
        }
        let mut info = route_info(*p, b, cx.intent, cx.installed.contains(p));
        if b.best.source.local && cx.kernel_learned.contains(p) {
            info.best.source = "kernel".into();
        }
        out.push(info);
    }
    out
}

/// Adds every path of each row's prefix (`--all`), the best first, then the others
/// in decision order, each with the step that settled it.
pub(crate) fn add_paths(
    rows: &mut [RouteInfo],
    rib: &[(IpNet, Best)],
    paths: &[(IpNet, Vec<Arc<Path>>)],
    cx: &Context<'_>,
) {
    let best: HashMap<&IpNet, &Best> = rib.iter().map(|(p, b)| (p, b)).collect();
    let all: HashMap<&IpNet, &[Arc<Path>]> = paths.iter().map(|(p, v)| (p, v.as_slice())).collect();
    for row in rows {
        let Ok(prefix) = row.prefix.parse::<IpNet>() else {
            continue;
        };
        let (Some(b), Some(held)) = (best.get(&prefix), all.get(&prefix)) else {
            continue;
        };
        let mut others: Vec<&Arc<Path>> = held
            .iter()
            .filter(|p| !Arc::ptr_eq(p, &b.best) && **p != b.best)
            .collect();
        others.sort_by(|x, y| compare(x, y).0);
        let mut list = vec![path_row(prefix, &b.best, b, cx, reason_name(b.reason))];
        for p in others {
            let lost = reason_name(compare(&b.best, p).1);
            list.push(path_row(prefix, p, b, cx, lost));
        }
        row.paths = list;
    }
}

/// One path as a `--all` row.
fn path_row(prefix: IpNet, p: &Arc<Path>, b: &Best, cx: &Context<'_>, reason: String) -> RoutePath {
    let (hops, peer, source) = if p.source.local {
        let source = if cx.kernel_learned.contains(&prefix) {
            "kernel"
        } else {
            cx.intent
                .and_then(|i| i.originated.get(&prefix))
                .map(|o| o.source.as_str())
                .unwrap_or("block")
        };
        (vec!["local".to_string()], "local".to_string(), source)
    } else {
        (
            vec![p.next_hop.to_string()],
            p.source.address.to_string(),
            "bgp",
        )
    };
    RoutePath {
        path: path_info(&p.attrs, hops, peer, source),
        best: Arc::ptr_eq(p, &b.best) || **p == *b.best,
        multipath: b.multipath.iter().any(|m| Arc::ptr_eq(m, p) || **m == **p),
        stale: p.stale,
        reason,
    }
}

/// `--count`: prefixes and paths per family, paths and best paths per peer.
pub(crate) fn count(
    rib: &[(IpNet, Best)],
    paths: &[(IpNet, Vec<Arc<Path>>)],
    v6: Option<bool>,
) -> RoutesCountReply {
    let wanted = |p: &IpNet| v6.is_none_or(|v6| matches!(p, IpNet::V6(_)) == v6);
    let mut families: BTreeMap<&str, FamilyCount> = BTreeMap::new();
    for fam in ["ipv4", "ipv6"] {
        if v6.is_none_or(|v6| v6 == (fam == "ipv6")) {
            families.insert(
                fam,
                FamilyCount {
                    family: fam.into(),
                    ..Default::default()
                },
            );
        }
    }
    let best: HashMap<&IpNet, &Best> = rib.iter().map(|(p, b)| (p, b)).collect();
    let mut peers: BTreeMap<(String, &str), PeerCount> = BTreeMap::new();
    for (prefix, held) in paths.iter().filter(|(p, _)| wanted(p)) {
        let fam = family_name(prefix);
        if let Some(c) = families.get_mut(fam) {
            c.prefixes += u64::from(best.contains_key(prefix));
            c.paths += held.len() as u64;
        }
        for p in held {
            let who = if p.source.local {
                "local".to_string()
            } else {
                p.source.address.to_string()
            };
            let row = peers
                .entry((who.clone(), fam))
                .or_insert_with(|| PeerCount {
                    peer: who,
                    family: fam.into(),
                    ..Default::default()
                });
            row.paths += 1;
            let is_best = best
                .get(prefix)
                .is_some_and(|b| Arc::ptr_eq(&b.best, p) || *b.best == **p);
            row.best += u64::from(is_best);
        }
    }
    RoutesCountReply {
        families: families.into_values().collect(),
        peers: peers.into_values().collect(),
    }
}

#[cfg(test)]
#[path = "routes_tests.rs"]
mod tests;
