//! tern-bgp: the BGP-4 protocol core of tern.
//!
//! [`wire`] is the codec: the only place that knows byte layouts. [`fsm`] is the
//! sans-IO session state machine; [`session`] (feature `session`, on by default) is
//! its thin tokio driver, the only code here that touches sockets. No files or netlink
//! live in this crate.

pub mod fsm;
pub mod policy;
pub mod rib;
#[cfg(feature = "session")]
pub mod session;
#[cfg(feature = "session")]
pub mod speaker;
pub mod wire;

#[doc(hidden)]
pub mod fuzzing;
