//! What the FIB task answers: `tern fib` (wanted against the kernel's own state, read
//! afresh), `tern diagnose` (interfaces, neighbours, next hops, refusals) and
//! `tern routes`' installed flags. The reply types are the control socket's JSON.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::{Backend, Task};
use crate::diag::{self, Finding, NextHopFacts, PeerFacts};
use crate::reconcile::same;
use crate::{Route, RouteFailure, RouteKind};

/// One kernel route as tern sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FibRoute {
    /// Prefix.
    pub prefix: String,
    /// `unicast`, `blackhole`, `unreachable`.
    pub kind: String,
    /// Gateways (and `dev N` for on-link routes).
    pub next_hops: Vec<String>,
    /// Table.
    pub table: u32,
}

impl From<&Route> for FibRoute {
    fn from(r: &Route) -> FibRoute {
        let (kind, next_hops) = match &r.kind {
            RouteKind::Unicast(h) => (
                "unicast",
                h.iter()
                    .map(|h| match (h.gateway, h.interface) {
                        (Some(g), _) => g.to_string(),
                        (None, Some(i)) => format!("dev {i}"),
                        (None, None) => "-".into(),
                    })
                    .collect(),
            ),
            RouteKind::Blackhole => ("blackhole", Vec::new()),
            RouteKind::Unreachable => ("unreachable", Vec::new()),
        };
        FibRoute {
            prefix: r.prefix.to_string(),
            kind: kind.into(),
            next_hops,
            table: r.table,
        }
    }
}

/// `tern fib`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FibReply {
    /// tern's routes in the kernel that are as wanted.
    pub installed: Vec<FibRoute>,
    /// Wanted but not (or differently) in the kernel.
    pub missing: Vec<FibRoute>,
    /// tern's protocol routes in the kernel that are not wanted (kept during graceful
    /// restart, or left by someone).
    pub unexpected: Vec<FibRoute>,
    /// Refused changes, with the reason: first the `refused_by_system` ones the kernel
    /// refused (its error), then the `refused_by_tern` ones tern did not send (what is
    /// missing). A failure to read the kernel's routes is listed here too, uncounted.
    pub failures: Vec<String>,
    /// Changes the kernel (on Windows: IP Helper) refused.
    #[serde(default)]
    pub refused_by_system: usize,
    /// Changes tern refused itself before asking the kernel (a route the platform
    /// cannot express, a next hop without an interface, no IPIP device).
    #[serde(default)]
    pub refused_by_tern: usize,
    /// Seconds the last batch of kernel changes took.
    #[serde(default)]
    pub last_apply_seconds: f64,
    /// The FIB is off (`fib: { enabled: false }`): tern installs no routes, and the
    /// lists above are empty rather than describing a kernel tern does not use.
    #[serde(default)]
    pub disabled: bool,
}

impl<B: Backend> Task<B> {
    /// `tern fib`: the wanted routes against the kernel as it is now.
    pub(super) async fn report(&mut self) -> FibReply {
        let kernel: BTreeMap<IpNet, Route> = match self.backend.own_routes().await {
            Ok(r) => r.into_iter().map(|r| (r.prefix, r)).collect(),
            Err(e) => {
                return FibReply {
                    failures: vec![format!("cannot read the kernel's routes: {e}")],
                    ..FibReply::default()
                }
            }
        };
        let mut out = FibReply::default();
        for w in self.table.wanted() {
            match kernel.get(&w.prefix) {
                Some(k) if same(&w, k) => out.installed.push(FibRoute::from(k)),
                _ => out.missing.push(FibRoute::from(&w)),
            }
        }
        for (p, k) in &kernel {
            if !self.table.wants(p) {
                out.unexpected.push(FibRoute::from(k));
            }
        }
        let (tern, system): (Vec<&RouteFailure>, Vec<&RouteFailure>) =
            self.refusals.iter().partition(|f| f.by_tern());
        out.refused_by_system = system.len();
        out.refused_by_tern = tern.len();
        out.failures = system
            .into_iter()
            .chain(tern)
            .map(|f| f.to_string())
            .collect();
        out.last_apply_seconds = self.last_apply.as_secs_f64();
        out
    }

    /// Prefixes installed as wanted, for `tern routes`.
    pub(super) fn installed(&self, only: Option<&[IpNet]>) -> Vec<IpNet> {
        let as_wanted = |r: &Route| self.table.want(&r.prefix).is_some_and(|w| same(&w, r));
        match only {
            // A few prefixes (`tern routes PREFIX`): looked up, the table not walked.
            Some(list) => list
                .iter()
                .filter(|p| self.table.kernel(p).is_some_and(|r| as_wanted(&r)))
                .copied()
                .collect(),
            None => {
                let mut v: Vec<IpNet> = self
                    .table
                    .kernel_routes()
                    .filter(|r| self.table.installed_as_wanted(&r.prefix) || as_wanted(r))
                    .map(|r| r.prefix)
                    .collect();
                v.sort_unstable();
                v
            }
        }
    }

    /// `tern diagnose`: what the kernel's interfaces, neighbours and routes say about
    /// the peers and the wanted routes' next hops.
    pub(super) async fn diagnose(&mut self, peers: &[PeerFacts]) -> Vec<Finding> {
        let interfaces = self.backend.interfaces().await.unwrap_or_default();
        let neighbours = self.backend.neighbours().await.unwrap_or_default();
        let mut per_hop: BTreeMap<IpAddr, (IpNet, usize)> = BTreeMap::new();
        for r in self.table.wanted() {
            if let RouteKind::Unicast(hops) = &r.kind {
                for h in hops.iter().filter_map(|h| h.gateway) {
                    per_hop.entry(h).or_insert((r.prefix, 0)).1 += 1;
                }
            }
        }
        let mut hops = Vec::new();
        for (address, (example_prefix, prefixes)) in per_hop {
            hops.push(NextHopFacts {
                address,
                example_prefix,
                prefixes,
                resolution: self.backend.resolve(address).await,
            });
        }
        let failures: Vec<RouteFailure> = self.refusals.iter().cloned().collect();
        // A down interface explains its peers and next hops: one finding names them,
        // instead of a layer-2 or unresolved finding for each.
        let down = diag::interfaces_down(peers, &hops, &interfaces);
        let peers: Vec<PeerFacts> = peers
            .iter()
            .filter(|p| !down.peers.contains(&p.address))
            .cloned()
            .collect();
        hops.retain(|h| !down.hops.contains(&h.address));
        let mut findings = down.findings;
        findings.extend(diag::layer2(&peers, &interfaces));
        findings.extend(diag::next_hops(&hops, &interfaces, &neighbours));
        findings.extend(diag::ebgp_next_hops(&peers, &interfaces));
        findings.extend(diag::refused(&failures));
        findings
    }
}
