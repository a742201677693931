//! Datastores: where the cluster's Calico v3 resources come from.
//!
//! Both stores hand the daemon the same thing: the *complete* set of resource documents
//! as of one consistent point (a file's content, one etcd revision), never a delta. The
//! intent is a pure function of that set (see [`crate::intent`]), so a store can never
//! make the daemon apply a half-read state, and a bad change is rejected as a whole
//! while the previous intent stays in force.
//!
//! - [`file`]: a multi-document YAML file, re-read when it changes.
//! - [`etcd`]: etcd v3 with Calico's key layout, a snapshot then a watch from its
//!   revision, re-listed after compaction or a lost connection.
//! - [`kubernetes`]: the Kubernetes API (Calico's KDD mode): Calico's CRDs, Nodes,
//!   BGP password Secrets, Local Services and their EndpointSlices, listed then watched.
//!
//! Beside the store, [`endpoint_status`] reads Felix's endpoint status files on the
//! node: which workloads are BGP peers of this node (`localWorkloadSelector`).

pub mod endpoint_status;
pub mod etcd;
pub mod file;
pub mod kubernetes;

/// Resource text as a datastore holds it: one or more YAML documents (JSON is YAML) in
/// the form `calicoctl get -o yaml` prints (`apiVersion`, `kind`, `metadata`, `spec`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// Where the text came from, used in every error about it: a file path or an etcd key.
    pub origin: String,
    /// The YAML (or JSON) text.
    pub text: String,
}

/// What a store reports to the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreEvent {
    /// The complete resource set as of one consistent point; `revision` identifies it
    /// (etcd revision, or a counter of file reads) for logs and `tern status`.
    Snapshot {
        /// Every resource document.
        documents: Vec<Document>,
        /// Store revision of this snapshot.
        revision: i64,
    },
    /// The store cannot be read right now (file unreadable, etcd unreachable); the last
    /// snapshot stays in force and the store keeps trying. The text names the store and
    /// the cause.
    Unavailable(String),
}
