//! tern-fib: the kernel FIB as tern sees it.
//!
//! [`Fib`] is the one interface tern uses to program routes and observe the kernel;
//! backends implement it: `linux` (rtnetlink), [`windows`] (IP Helper) and [`memory`]
//! (unit tests run on it). [`task`] is the FIB task, the one owner of the kernel view:
//! it takes routes straight from their source through a filter the daemon supplies,
//! and plans every change through [`reconcile`], where the rules live once (adopt a
//! route already as wanted, keep an earlier run's routes until the restart grace ends,
//! route IPIP next hops through the tunnel device, retry refusals, put back routes
//! the kernel lost). Restart behaviour is tested through the task on the memory
//! backend, on a paused clock. A refusal carries a [`FailureKind`], so callers act on
//! kinds, not on errno text.
//!
//! The trait is async (returning `impl Future`), because the real backends wait on the
//! kernel's acknowledgements; a backend is owned by one task (the FIB task), so methods
//! take `&mut self` and need no locking.

pub mod diag;
#[cfg(target_os = "linux")]
pub mod linux;
pub mod memory;
pub mod reconcile;
pub mod task;
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
