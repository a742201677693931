//! What `tern routes` reads of the core for a few routes, without changing it or
//! copying the table: one prefix or the routes covering an address (`tern routes
//! PREFIX|ADDR`, `--all`), and what one peer sent (`--received PEER`: its paths in the
//! RIB, and the rejected ones its store kept).

use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use crate::rib::Path;

use super::super::rejected::Received;
use super::Speaker;

impl Speaker {
    /// The Loc-RIB entry of `want`, or (an address with no route of its own) those of
    /// every prefix covering it, by prefix: at most one look-up per prefix length.
    pub fn routes_of(&self, want: IpNet) -> Vec<(IpNet, crate::rib::Best)> {
        if let Some(b) = self.rib.best(&want) {
            return vec![(want, b.clone())];
        }
        if want.prefix_len() != want.max_prefix_len() {
            return Vec::new();
        }
        let mut out: Vec<(IpNet, crate::rib::Best)> = (0..=want.max_prefix_len())
            .filter_map(|len| IpNet::new(want.addr(), len).ok().map(|n| n.trunc()))
            .filter_map(|n| self.rib.best(&n).map(|b| (n, b.clone())))
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
                    of_prefix(*w, &b.best);
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
