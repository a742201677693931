//! BFD, Bidirectional Forwarding Detection (RFC 5880), for tern: the control packet
//! ([`packet`]) and one session's state machine ([`session`]), sans-IO like the BGP
//! FSM: packets and the time go in, packets to send, state changes and the next
//! deadline come out. Asynchronous mode only; demand mode and the echo function are
//! left out (RFC 5880 allows both to be absent), and so is authentication for now.
//!
//! Written here because no maintained Rust crate offers BFD as a library without its
//! own sockets and runtime: the ones found bring a daemon of their own, where tern
//! needs the state machine inside its own tasks, driven by its own clock in tests.

#[cfg(all(feature = "driver", target_os = "linux"))]
pub mod driver;
pub mod packet;
pub mod session;
pub mod view;

pub use packet::{Diag, Packet, State};
pub use session::{Config, Output, Session};
