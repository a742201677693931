//! tern-config: what tern is told to do.
//!
//! - [`daemon`]: the daemon's own file (`tern.yaml`).
//! - [`model`]: Calico v3 resources as serde shapes; [`cluster`]: the same, validated
//!   and typed, with errors naming file, line, document, resource and field;
//!   [`selector`]: Calico's label selectors; [`values`]: AS numbers, durations,
//!   communities.
//! - [`intent`]: what one node must do (peers, originated prefixes, policy), a pure
//!   function of the cluster; [`policy`]: export/import decisions; [`diff`]: what
//!   changed between two intents; [`tracker`]: the intent in force across snapshots.
//! - [`datastore`]: the file and etcd stores, which deliver complete snapshots.
//!
//! Everything but the datastores is sans-IO (text in, values out).
#![forbid(unsafe_code)] // nothing here touches the OS below std

pub mod cluster;
pub mod daemon;
pub mod datastore;
pub mod diff;
pub mod error;
pub mod intent;
pub mod model;
pub mod policy;
pub mod selector;
pub mod tracker;
pub mod values;

#[doc(hidden)]
pub mod fuzzing;

pub use cluster::Cluster;
pub use daemon::{DaemonConfig, Datastore, FibConfig, LogFormat};
pub use error::{ConfigError, Warning};
