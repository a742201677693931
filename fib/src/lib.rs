//! tern-fib: the kernel FIB as tern sees it.
//!
//! [`Fib`] is the one interface the daemon uses to program routes and observe the
//! kernel; backends implement it: `linux` (rtnetlink), [`windows`] (IP Helper) and
//! [`memory`] (the daemon's unit tests run on it). [`reconcile`] decides what
//! to change from what is wanted and what the kernel holds; it is pure, so restart
//! behaviour is tested without a kernel.
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
