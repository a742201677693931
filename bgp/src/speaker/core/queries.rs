//! What the owner reads of the core, without changing it: the Loc-RIB and every path
//! (`tern routes`, `--all`, `--count`), per-peer counters and the RIB's size (status,
//! metrics), what a peer was sent (`--advertised`, the diagnoser); and, without copying
//! the table, one prefix or the routes covering an address (`tern routes PREFIX|ADDR`)
//! and what one peer sent (`--received PEER`: its paths in the RIB, and the rejected
//! ones its store kept).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use crate::rib::export::Exported;
use crate::rib::{Best, Path};

use super::super::rejected::Received;
use super::super::{NextHopUse, PeerStats, RibCounts};
use super::Speaker;

impl Speaker {
    /// The current Loc-RIB.
    pub fn routes(&self) -> Vec<(IpNet, Best)> {
        self.rib.iter().collect()
    }

    /// Prefixes added to or removed from the Loc-RIB since its table was last packed
    /// (`core/pack.rs`).
    pub fn unpacked(&self) -> usize {
        self.rib.unpacked()
    }

    /// Up to `n` Loc-RIB entries after `after`, in prefix order (see
    /// [`crate::rib::Rib::best_after`]).
    pub fn best_after(&self, after: Option<IpNet>, n: usize) -> Vec<crate::rib::BestChange> {
        self.rib.best_after(after, n)
    }

    /// Every path of every prefix, as the RIB holds them (only `Arc`s are copied).
    pub fn paths(&self) -> Vec<(IpNet, Vec<Arc<Path>>)> {
        self.rib
            .prefixes()
            .map(|p| (p, self.rib.paths(&p).to_vec()))
            .collect()
    }

    /// Per-peer counters.
    pub fn peer_stats(&self) -> Vec<PeerStats> {
        self.peers
            .iter()
            .map(|(a, p)| PeerStats {
                address: *a,
                updates_in: p.updates_in,
                updates_out: p.updates_out,
                advertised: p.out.as_ref().map_or(0, |o| o.rib.len() as u64),
                received: self.rib.paths_from(*a),
                rejected_import: p.rejected_import,
                filtered_export: p.filtered_export,
                notifications_in: p.notifications_in.clone(),
                last_notification_in: p.last_notification_in.clone(),
                last_notification_out: p.last_notification_out.clone(),
                messages: Default::default(),
                negotiated: p.negotiated.clone(),
                notifications_out: p.notifications_out.clone(),
                disabled: p.disabled,
            })
            .collect()
    }

    /// The Loc-RIB's size.
    pub fn rib_counts(&self) -> RibCounts {
        let (ipv4_prefixes, ipv6_prefixes) = self.rib.prefixes_by_family();
        RibCounts {
            ipv4_prefixes,
            ipv6_prefixes,
            paths: self.rib.paths_total(),
        }
    }

    /// How many prefixes have a number for what peers were sent: at most about twice
    /// those some peer holds (see `rib::export::sent`).
    pub fn prefix_numbers(&self) -> usize {
        self.exports.numbers().len()
    }

    /// What one peer has been sent; `None` if it is not a peer or not established.
    pub fn advertised(&self, ip: IpAddr) -> Option<Vec<(IpNet, Exported)>> {
        self.peers.get(&ip).and_then(|p| p.out.as_ref()).map(|o| {
            o.rib
                .iter(self.exports.numbers())
                .into_iter()
                .map(|(n, e)| (n, e.clone()))
                .collect()
        })
    }

    /// The next hops peer `ip` has been sent, grouped, without copying its
    /// Adj-RIB-Out.
    pub fn advertised_next_hops(&self, ip: IpAddr) -> Option<Vec<NextHopUse>> {
        let out = self.peers.get(&ip).and_then(|p| p.out.as_ref())?;
        let mut by_hop: BTreeMap<IpAddr, NextHopUse> = BTreeMap::new();
        for (prefix, e) in out.rib.iter(self.exports.numbers()) {
            by_hop
                .entry(e.next_hop)
                .or_insert(NextHopUse {
                    next_hop: e.next_hop,
                    example: prefix,
                    prefixes: 0,
                })
                .prefixes += 1;
        }
        Some(by_hop.into_values().collect())
    }

    /// The Loc-RIB entry of `want`, or (an address with no route of its own) those of
    /// every prefix covering it, by prefix: at most one look-up per prefix length.
    pub fn routes_of(&self, want: IpNet) -> Vec<(IpNet, Best)> {
        if let Some(b) = self.rib.best(&want) {
            return vec![(want, b)];
        }
        if want.prefix_len() != want.max_prefix_len() {
            return Vec::new();
        }
        let mut out: Vec<(IpNet, Best)> = (0..=want.max_prefix_len())
            .filter_map(|len| IpNet::new(want.addr(), len).ok().map(|n| n.trunc()))
            .filter_map(|n| self.rib.best(&n).map(|b| (n, b)))
            .collect();
        out.sort_by_key(|(p, _)| *p);
        out
    }

    /// Every path of each of `prefixes` that has any.
    pub fn paths_of(&self, prefixes: &[IpNet]) -> Vec<(IpNet, Vec<Arc<Path>>)> {
        prefixes
            .iter()
            .filter(|p| !self.rib.paths(p).is_empty())
            .map(|p| (*p, self.rib.paths(p).to_vec()))
            .collect()
    }

    /// What peer `ip` sent, only `prefix` if given; `None` if it is not configured.
    pub fn received(&self, ip: IpAddr, prefix: Option<IpNet>) -> Option<Received> {
        let p = self.peers.get(&ip)?;
        let mut accepted = Vec::new();
        let mut of_prefix = |w: IpNet, best: &Arc<Path>| {
            for path in self.rib.paths(&w) {
                if !path.source.local && path.source.address == ip {
                    let is_best = Arc::ptr_eq(path, best) || **path == **best;
                    accepted.push((w, Arc::clone(path), is_best));
                }
            }
        };
        match prefix {
            Some(w) => {
                if let Some(b) = self.rib.best(&w) {
                    of_prefix(w, &b.best);
                }
            }
            // Only when it holds any: a peer with none costs no walk of the table.
            None if self.rib.paths_from(ip) > 0 => {
                for (w, b) in self.rib.iter() {
                    of_prefix(w, &b.best);
                }
            }
            None => {}
        }
        Some(Received {
            accepted,
            rejected: p.rejected.view(prefix),
        })
    }
}
