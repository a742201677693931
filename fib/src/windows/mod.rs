//! Windows backend: the kernel FIB through IP Helper (windows-sys FFI).
//!
//! Hand-written because no maintained crate wraps IP Helper's route programming
//! (CreateIpForwardEntry2 and friends); the crates that exist stop at reading
//! adapters. The work is split so that almost none of it needs Windows:
//! [`convert`] turns routes into forward rows, plans each change against the rows read
//! back, and reads tern's routes out of the table; [`batch`] carries the plans out
//! through a row-call trait (make before break, undo of a refused change); [`record`]
//! keeps the file listing the rows tern created (Windows cannot tell them apart from an
//! administrator's). All three are compiled and tested everywhere. `iphlp` (Windows
//! only) makes the calls and provides `WindowsFib`; [`notify`] turns IP Helper's change
//! callbacks into the events the daemon acts on.

pub mod batch;
pub mod convert;
#[cfg(test)]
mod fixtures;
#[cfg(windows)]
mod iphlp;
pub mod notify;
pub mod record;
pub mod resolve;

#[cfg(windows)]
pub use iphlp::WindowsFib;
