//! Taking over from the routing daemon tern replaces on a node: Calico's BIRD.
//!
//! BIRD runs with `persist`, so when calico-node's BIRD is killed its kernel routes
//! stay (protocol 12, metric 32). They keep the node forwarding while tern starts,
//! but left there they would stay for good and, at a lower metric than tern's, win
//! over tern's routes for the same prefixes: a block that later moves to another
//! node would still be sent to the old one. So tern counts them as forwarding state
//! kept (it announces a graceful restart with the F bit, and its peers keep the node's
//! routes until its End-of-RIB instead of flushing them at its OPEN), and removes them
//! when its own restart grace ends: by then its own routes for the same prefixes are
//! in place, so the kernel falls back to tern's with no moment without a route.
//!
//! Nothing else of another daemon's is touched, and only in tern's table.

use crate::{Route, RouteChange};

use super::Backend;

/// BIRD's route protocol number (`RTPROT_BIRD`).
pub const BIRD: u8 = 12;

/// Deletes of `routes` (one per route: a delete names the prefix, table and protocol,
/// so two routes of one prefix take two).
pub fn deletes(routes: &[Route]) -> Vec<RouteChange> {
    routes
        .iter()
        .map(|r| RouteChange::Delete {
            prefix: r.prefix,
            table: r.table,
        })
        .collect()
}

/// The routes found at start under the predecessor's protocol, until removed.
#[derive(Debug, Default)]
pub(crate) struct Left {
    protocol: u8,
    routes: Vec<Route>,
}

impl Left {
    /// Reads what `protocol`'s daemon left in tern's table (nothing without one).
    pub(crate) async fn find<B: Backend>(backend: &mut B, protocol: Option<u8>) -> Left {
        let Some(protocol) = protocol else {
            return Left::default();
        };
        match backend.routes_left_by(protocol).await {
            Ok(routes) => {
                if !routes.is_empty() {
                    tracing::info!(
                        routes = routes.len(),
                        protocol,
                        "found routes BIRD left in the kernel: keeping them as this node's forwarding state until tern's own are in place"
                    );
                }
                Left { protocol, routes }
            }
            Err(e) => {
                tracing::warn!("cannot read the routes BIRD left in the kernel (protocol {protocol}); they stay: {e}");
                Left::default()
            }
        }
    }

    /// How many routes were found.
    pub(crate) fn len(&self) -> usize {
        self.routes.len()
    }

    /// Removes them (once: the grace ends once).
    pub(crate) async fn remove<B: Backend>(&mut self, backend: &mut B) {
        if self.routes.is_empty() {
            return;
        }
        let routes = std::mem::take(&mut self.routes);
        let report = backend.delete_left(&routes, self.protocol).await;
        // A route BIRD's peers or an operator removed meanwhile is already gone.
        let failed: Vec<_> = report
            .failed
            .iter()
            .filter(|f| f.kind != crate::FailureKind::NotFound)
            .collect();
        tracing::info!(
            removed = routes.len().saturating_sub(report.failed.len()),
            protocol = self.protocol,
            "restart grace over: removed the routes BIRD left in the kernel; tern's own routes carry this node's traffic"
        );
        for f in failed {
            tracing::warn!(
                "cannot remove BIRD's route to {}: {} ({})",
                f.prefix,
                f.reason,
                f.change
            );
        }
    }
}
