//! tern-config: what tern is told to do.
//!
//! Today it owns the daemon's own file (`tern.yaml`, [`daemon`]): where the cluster
//! state lives, the control socket, metrics, FIB settings and logging, validated with
//! errors that name the file, line and field. The Calico v3 resource model, the
//! datastores and the per-node `Intent` join it as issue 5 is built.
//!
//! Parsing is sans-IO (`&str` in, values out); only [`daemon::DaemonConfig::load`]
//! reads a file.

pub mod daemon;
pub mod error;

pub use daemon::{DaemonConfig, Datastore, FibConfig};
pub use error::{ConfigError, Warning};
