//! tern-bgp: the BGP-4 protocol core of tern.
//!
//! [`wire`] is the codec: the only place that knows byte layouts. No sockets, files or
//! netlink live in this crate.

pub mod fsm;
pub mod wire;

#[doc(hidden)]
pub mod fuzzing;
