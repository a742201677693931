//! The `tern` package: the daemon and CLI binary, and what it shares with the
//! end-to-end tests (capture reading, message rendering).

pub mod birdsock;
pub mod capture;
pub mod check_config;
pub mod control;
pub mod daemon;
pub mod decode;
pub mod logging;
pub mod rlimit;
pub mod service;
