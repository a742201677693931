//! tern-fib: the kernel FIB as tern sees it.
//!
//! [`Fib`] is the one interface the daemon uses to program routes and observe the
//! kernel; backends implement it: `linux` (rtnetlink), [`windows`] (IP Helper) and
//! [`memory`] (the daemon's unit tests run on it). [`reconcile`] holds the one route
//! comparison ([`reconcile::same`]: when a kernel route already is the wanted one, so
//! a restart adopts it), which the daemon's FIB task uses for its per-prefix changes,
//! and a pure whole-table plan ([`reconcile::reconcile`]) that tests use; the task's
//! own plan (grace, tunnel) is not yet expressed through it. A refusal carries a
//! [`FailureKind`], so callers act on kinds, not on errno text.
//!
//! The trait is async (returning `impl Future`), because the real backends wait on the
//! kernel's acknowledgements; a backend is owned by one task (the daemon's FIB task,
//! docs/architecture.md), so methods take `&mut self` and need no locking.

pub mod diag;
#[cfg(target_os = "linux")]
pub mod linux;
pub mod memory;
pub mod reconcile;
mod types;
pub mod windows;

pub use types::*;

use std::future::Future;

/// Route programming and kernel observation.
pub trait Fib {
    /// Applies a batch of changes to tern's own routes. Every change is attempted; each
    /// one the kernel refuses is reported with its prefix and the kernel's reason.
    fn apply(&mut self, changes: Vec<RouteChange>) -> impl Future<Output = ApplyReport> + Send;

    /// The routes carrying tern's route protocol (in the configured table).
    fn own_routes(&mut self) -> impl Future<Output = Result<Vec<Route>, FibError>> + Send;

    /// Interfaces with their state and addresses.
    fn interfaces(&mut self) -> impl Future<Output = Result<Vec<Interface>, FibError>> + Send;

    /// The neighbour (ARP / NDP) table.
    fn neighbours(&mut self) -> impl Future<Output = Result<Vec<Neighbour>, FibError>> + Send;
}
