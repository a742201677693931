//! `tern routes --received PEER`: what one peer sent, read from the core without
//! changing it: its paths in the RIB (accepted) and the rejected ones its store kept.

use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use crate::rib::Path;

use super::super::rejected::Received;
use super::Speaker;

impl Speaker {
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
