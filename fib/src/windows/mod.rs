//! Windows backend: the kernel FIB through IP Helper (windows-sys FFI).
//!
//! Hand-written because no maintained crate wraps IP Helper's route and neighbour
//! calls. [`convert`] holds what does not need Windows (rows, plans, the record of
//! tern's rows, neighbour states) and is tested on every platform; `iphlp` (Windows
//! only) makes the calls.

pub mod convert;
#[cfg(windows)]
mod iphlp;

#[cfg(windows)]
pub use iphlp::WindowsFib;
