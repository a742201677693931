//! The control socket: a versioned JSON-lines request/response protocol between the
//! daemon and the CLI (`tern status`, `peers`, `routes`, `fib`, `diagnose`, `health`,
//! `reload`). [`proto`] holds the messages (their JSON is a contract: docs/json.md),
//! `server` answers from the daemon's snapshot, `client` and `render` are the CLI side.

pub mod cli;
pub mod client;
pub mod monitor;
pub mod proto;
pub mod render;
pub mod server;
