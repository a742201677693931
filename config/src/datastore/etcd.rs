//! The etcd v3 datastore: Calico's resources and IPAM state read from etcd, in Calico's
//! own key layout, and handed to the daemon as complete snapshots.
//!
//! What is read:
//! - `/calico/resources/v3/projectcalico.org/<plural>/<name>` (and
//!   `<plural>/<namespace>/<name>`): v3 resources whose value already is the resource
//!   JSON. It is passed through, with `apiVersion`, `kind` and `metadata.name` filled from
//!   the key when the value lacks them. Kinds that never affect routing (workload
//!   endpoints, policies, profiles, …; see [`IGNORED_PLURALS`]) are skipped, because in an
//!   etcd-mode cluster they are most of the keys and change with every pod.
//! - `/calico/ipam/v2/assignment/ipv{4,6}/block/<cidr>`: libcalico-go `AllocationBlock`
//!   values, turned into `IPAMBlock` documents.
//! - `/calico/ipam/v2/host/<node>/ipv{4,6}/block/<cidr>`: block affinities, turned into
//!   `BlockAffinity` documents.
//!
//! Every other key is ignored. A value that cannot be converted is still handed on, as
//! its raw text with the etcd key as origin, so the model rejects it naming the key
//! instead of the data vanishing.
//!
//! Sizes are checked before anything is parsed: a value over
//! `limits.datastore_document_bytes`, or values adding up to more than one etcd
//! response may hold, are refused ([`Refused`]); the store then reports itself
//! unavailable, naming the key and the limit, and the configuration in force stays.
//!
//! How it stays consistent: one read (a transaction of ranged GETs, so one revision) gives
//! the key map; one watch from the next revision keeps it current. The watch covers a
//! single key range that spans both prefixes, so every event of one etcd revision (one
//! transaction) arrives in the same watch response and is applied at once: the daemon
//! never sees half of a transaction. After a compaction that overtook the watch, or a lost
//! connection, the store re-lists; while etcd cannot be read it reports
//! [`StoreEvent::Unavailable`] once and retries with exponential back-off.
//!
//! The conversion (`convert`: which keys tern reads, values into documents) and the key
//! map (`keyspace`: one revision's documents, watch responses, size limits) are plain
//! functions, unit-tested without etcd; this file's async part (`connect` builds the
//! client) only moves bytes between etcd and them.

use std::future::Future;
use std::time::Duration;

use etcd_client::{Client, GetOptions, Txn, TxnOp, TxnOpResponse, WatchOptions};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::{Document, StoreEvent};

mod connect;
mod convert;
mod keyspace;
#[cfg(test)]
mod tests;

pub use connect::{describe, describe_at, EtcdOptions};
pub use convert::document_for;
#[cfg(test)]
use convert::*;
pub use keyspace::Refused;
#[cfg(test)]
use keyspace::*;
use keyspace::{KeySpace, ReadLimits, WatchBatch, WatchStep};

/// Prefix of Calico's v3 resources in etcd.
pub const RESOURCES_PREFIX: &str = "/calico/resources/v3/projectcalico.org/";
/// Prefix of Calico's IPAM state in etcd (blocks, affinities, handles, config).
pub const IPAM_PREFIX: &str = "/calico/ipam/v2/";
/// IPAM allocation blocks, under [`IPAM_PREFIX`].
const BLOCKS_PREFIX: &str = "/calico/ipam/v2/assignment/";
/// Block affinities per host, under [`IPAM_PREFIX`].
const AFFINITIES_PREFIX: &str = "/calico/ipam/v2/host/";
/// End (exclusive) of the one key range the watch covers: from [`IPAM_PREFIX`] up to
/// the end of [`RESOURCES_PREFIX`] (`'/' + 1 == '0'`). `/calico/i…` sorts before
/// `/calico/r…`, so the range holds both prefixes; the few keys between them are dropped
/// by [`document_for`]. One range, not two watches, so that a transaction touching both
/// prefixes arrives as one response.
const WATCH_RANGE_END: &str = "/calico/resources/v3/projectcalico.org0";

/// The `apiVersion` of every document this store produces.
const API_VERSION: &str = "projectcalico.org/v3";

/// Resource plurals under [`RESOURCES_PREFIX`] that tern never uses for routing. They
/// are skipped rather than passed to the model: workload endpoints alone are one key per
/// pod, and passing them would turn every pod start into a snapshot and a warning per pod.
/// Plurals not in this list and not known to tern still pass through (the model warns).
pub const IGNORED_PLURALS: &[&str] = &[
    "caliconodestatuses",
    "clusterinformations",
    "globalnetworkpolicies",
    "globalnetworksets",
    "hostendpoints",
    "ipamconfigs",
    "ipreservations",
    "kubecontrollersconfigurations",
    "kubernetesadminnetworkpolicies",
    "kubernetesendpointslices",
    "kubernetesnetworkpolicies",
    "kubernetesservice",
    "networkpolicies",
    "networksets",
    "profiles",
    "stagedglobalnetworkpolicies",
    "stagedkubernetesnetworkpolicies",
    "stagednetworkpolicies",
    "tiers",
    "workloadendpoints",
];

/// How long one etcd request may take before the store treats etcd as unreachable. The
/// client queues requests while no connection is up instead of failing them, so without
/// this a dead etcd would hang the store rather than be reported.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// TCP connect timeout per endpoint.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// HTTP/2 keep-alive (interval, timeout): a watch on a silently dead connection (host
/// gone, partition) would otherwise wait forever for the next event.
const KEEP_ALIVE: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(5));
/// First delay before retrying after a failure; doubles up to [`BACKOFF_MAX`].
const BACKOFF_START: Duration = Duration::from_millis(500);
/// Longest delay between retries.
const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// A watch that lived at least this long before it ended counts as healthy: the next
/// re-list happens at once and the back-off starts over.
const WATCH_STABLE: Duration = Duration::from_secs(10);
/// Largest gRPC message accepted. The initial list of a large cluster (thousands of IPAM
/// blocks) is one message and easily exceeds tonic's 4 MiB default.
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// Errors of the etcd store. Each names the endpoints and the cause, since the text is
/// what the daemon reports (see [`StoreEvent::Unavailable`]).
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// The endpoint list is empty.
    #[error("etcd: no endpoints configured (datastore.endpoints)")]
    NoEndpoints,
    /// The TLS or password files could not be read.
    #[error("etcd at {endpoints}: {detail}")]
    Setup {
        /// The endpoints, comma separated.
        endpoints: String,
        /// Which file, and why.
        detail: String,
    },
    /// The client could not be built (bad URL, TLS setup).
    #[error(
        "etcd at {endpoints}: cannot connect: {}",
        describe_at(endpoints, cause)
    )]
    Connect {
        /// The endpoints, comma separated.
        endpoints: String,
        /// What the client said.
        cause: etcd_client::Error,
    },
    /// A request failed (connection refused, etcd error, compacted revision).
    #[error(
        "etcd at {endpoints}: {operation} failed: {}",
        describe_at(endpoints, cause)
    )]
    Request {
        /// The endpoints, comma separated.
        endpoints: String,
        /// What the store was doing (`list`, `watch`).
        operation: &'static str,
        /// What the client said.
        cause: etcd_client::Error,
    },
    /// A request got no answer in time (etcd down or unreachable).
    #[error("etcd at {endpoints}: {operation} got no answer within {}s", timeout.as_secs_f32())]
    Timeout {
        /// The endpoints, comma separated.
        endpoints: String,
        /// What the store was doing.
        operation: &'static str,
        /// How long it waited.
        timeout: Duration,
    },
    /// A value (or all of them together) is over the limit; nothing of this read is
    /// used, and the configuration in force stays.
    #[error("etcd at {endpoints}: {cause}")]
    Refused {
        /// The endpoints, comma separated.
        endpoints: String,
        /// Which value, and the limit.
        cause: Refused,
    },
    /// etcd answered with something the store cannot use.
    #[error("etcd at {endpoints}: {operation}: unexpected response: {detail}")]
    Unexpected {
        /// The endpoints, comma separated.
        endpoints: String,
        /// What the store was doing.
        operation: &'static str,
        /// What was wrong with the answer.
        detail: String,
    },
}

/// The etcd v3 datastore. [`EtcdStore::connect`] builds it, [`EtcdStore::run`] feeds
/// the daemon; [`EtcdStore::snapshot`] is one read (for `tern check-config` and tests).
pub struct EtcdStore {
    client: Client,
    endpoints: Vec<String>,
    /// `endpoints` joined with `, `, for messages.
    label: String,
    /// Checked before any value is parsed.
    limits: ReadLimits,
    /// User and password, when etcd's auth is on: a token is fetched before each read.
    credentials: Option<connect::Credentials>,
    /// What the client was built from, to rebuild it after an outage.
    options: EtcdOptions,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.endpoints)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Builds a client for `options`: endpoints (URLs like `https://127.0.0.1:2379`),
    /// TLS files, user and password.
    ///
    /// The connection itself is made lazily by the first request, so a node daemon can
    /// start while etcd is still down: [`EtcdStore::run`] then reports
    /// [`StoreEvent::Unavailable`] and keeps trying. Errors (no endpoints, a malformed
    /// URL, an unreadable TLS or password file) name the endpoints.
    pub async fn connect(options: &EtcdOptions) -> Result<EtcdStore, EtcdError> {
        let endpoints = &options.endpoints;
        if endpoints.is_empty() {
            return Err(EtcdError::NoEndpoints);
        }
        let label = endpoints.join(", ");
        let (client, credentials) = connect::new_client(options, &label).await?;
        Ok(EtcdStore {
            client,
            endpoints: endpoints.to_vec(),
            label,
            limits: ReadLimits::default(),
            credentials,
            options: options.clone(),
        })
    }

    /// Refuses, before parsing it, any value larger than `bytes`
    /// (`limits.datastore_document_bytes`; default
    /// [`DEFAULT_DATASTORE_DOCUMENT_BYTES`](crate::daemon::limits::DEFAULT_DATASTORE_DOCUMENT_BYTES)).
    /// While such a value is in etcd the store reports itself unavailable and sends no
    /// snapshot, so the configuration in force stays.
    pub fn with_max_document_bytes(mut self, bytes: u64) -> EtcdStore {
        self.limits.value_bytes = bytes;
        self
    }

    /// Reads the complete resource set at one etcd revision: the resources and the IPAM
    /// blocks and affinities, read by one transaction so they cannot come from two
    /// revisions. Returns the documents (sorted by key) and that revision.
    pub async fn snapshot(&mut self) -> Result<(Vec<Document>, i64), EtcdError> {
        let space = self.list().await?;
        Ok((space.documents(), space.revision()))
    }

    /// Feeds the daemon until `events` is closed.
    ///
    /// Sends a [`StoreEvent::Snapshot`] of the initial read, then watches from the next
    /// revision and sends a new complete snapshot after every watch response that changed
    /// a document (all events of a revision arrive, and are applied, together). A
    /// response that only touched keys tern ignores (IPAM handles, say) sends nothing.
    ///
    /// When the watch is overtaken by a compaction or the connection is lost, it re-lists
    /// and resumes watching from the new read's revision; the re-listed snapshot is always
    /// sent. While etcd cannot be read it sends [`StoreEvent::Unavailable`] once per
    /// outage (not per retry) and retries with back-off from 0.5 s doubling to 10 s.
    /// A snapshot is only ever built from a complete read plus complete watch responses.
    pub async fn run(mut self, events: mpsc::Sender<StoreEvent>) {
        let mut backoff = Backoff::new();
        // Whether the current outage has been reported, so it is reported once.
        let mut reported = false;
        loop {
            let listed = match until_closed(&events, self.list()).await {
                Some(listed) => listed,
                None => return,
            };
            let mut space = match listed {
                Ok(space) => space,
                Err(err) => {
                    if !self
                        .outage(&err, &mut reported, &mut backoff, &events)
                        .await
                    {
                        return;
                    }
                    continue;
                }
            };
            if reported {
                info!(endpoints = %self.label, revision = space.revision(), "etcd available again");
                reported = false;
            }
            debug!(
                revision = space.revision(),
                documents = space.len(),
                "etcd snapshot"
            );
            if send_snapshot(&events, &space).await.is_err() {
                return;
            }

            let started = Instant::now();
            match self.watch(&mut space, &events).await {
                WatchEnd::Closed => return,
                WatchEnd::Compacted { compact_revision } => {
                    info!(
                        revision = space.revision(),
                        compact_revision, "etcd compacted past the watch; re-listing"
                    );
                }
                WatchEnd::Lost(reason) => {
                    warn!(endpoints = %self.label, reason = %reason, "etcd watch lost; re-listing");
                }
                WatchEnd::Refused(cause) => {
                    // Reported like an outage, once: the re-list refuses the same
                    // value until it is fixed, and the configuration in force stays.
                    let err = EtcdError::Refused {
                        endpoints: self.label.clone(),
                        cause,
                    };
                    warn!(error = %err, "etcd value refused; keeping the last snapshot");
                    reported = true;
                    if !report_unavailable(&events, &err).await {
                        return;
                    }
                }
            }
            // A watch that ended soon after it started means something keeps failing:
            // back off instead of spinning through list + watch.
            if started.elapsed() >= WATCH_STABLE {
                backoff.reset();
            } else if until_closed(&events, tokio::time::sleep(backoff.next_delay()))
                .await
                .is_none()
            {
                return;
            }
        }
    }

    /// After a failed read: reports the outage once, waits the back-off, and builds a
    /// fresh client. `false` when the daemon has stopped listening.
    async fn outage(
        &mut self,
        err: &EtcdError,
        reported: &mut bool,
        backoff: &mut Backoff,
        events: &mpsc::Sender<StoreEvent>,
    ) -> bool {
        if *reported {
            debug!(error = %err, "etcd still unavailable");
        } else {
            warn!(error = %err, "etcd unavailable; keeping the last snapshot");
            *reported = true;
            if !report_unavailable(events, err).await {
                return false;
            }
        }
        if until_closed(events, tokio::time::sleep(backoff.next_delay()))
            .await
            .is_none()
        {
            return false;
        }
        // A fresh client, so that a connection wedged in a bad state cannot keep the
        // store down after etcd is back.
        match connect::new_client(&self.options, &self.label).await {
            Ok((client, credentials)) => {
                self.client = client;
                self.credentials = credentials;
            }
            Err(err) => debug!(error = %err, "cannot rebuild the etcd client"),
        }
        true
    }

    /// One consistent read of everything tern needs.
    async fn list(&mut self) -> Result<KeySpace, EtcdError> {
        const OP: &str = "list";
        // A fresh token for every full read: the first one, and after an outage or an
        // etcd restart, which drops simple tokens.
        if let Some(credentials) = &self.credentials {
            credentials
                .authenticate(&mut self.client, &self.label)
                .await?;
        }
        let prefix = || Some(GetOptions::new().with_prefix());
        // Blocks and affinities, not all of IPAM: handles are one key per pod.
        let txn = Txn::new().and_then(vec![
            TxnOp::get(RESOURCES_PREFIX, prefix()),
            TxnOp::get(BLOCKS_PREFIX, prefix()),
            TxnOp::get(AFFINITIES_PREFIX, prefix()),
        ]);
        let mut kv = self
            .client
            .kv_client()
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let response = with_timeout(&self.label, OP, kv.txn(txn)).await?;
        let revision = response
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| self.unexpected(OP, "no response header (revision unknown)"))?;
        let mut entries = Vec::new();
        for op in response.op_responses() {
            match op {
                TxnOpResponse::Get(mut get) => entries.extend(
                    get.take_kvs()
                        .into_iter()
                        .map(|kv| kv.into_key_value())
                        .map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), v)),
                ),
                other => {
                    return Err(self.unexpected(OP, &format!("not a GET result: {other:?}")));
                }
            }
        }
        KeySpace::from_entries(entries, revision, self.limits).map_err(|cause| EtcdError::Refused {
            endpoints: self.label.clone(),
            cause,
        })
    }

    /// Watches from `space`'s revision + 1, applying responses to `space` and sending a
    /// snapshot after each one that changed it, until the watch ends.
    async fn watch(&mut self, space: &mut KeySpace, events: &mpsc::Sender<StoreEvent>) -> WatchEnd {
        let options = WatchOptions::new()
            .with_range(WATCH_RANGE_END)
            .with_start_revision(space.revision().saturating_add(1));
        let mut client = self
            .client
            .watch_client()
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let watch = with_timeout(
            &self.label,
            "watch",
            client.watch(IPAM_PREFIX, Some(options)),
        );
        let mut stream = match until_closed(events, watch).await {
            None => return WatchEnd::Closed,
            Some(Err(err)) => return WatchEnd::Lost(err.to_string()),
            Some(Ok(stream)) => stream,
        };
        loop {
            let message = match until_closed(events, stream.message()).await {
                None => return WatchEnd::Closed,
                Some(message) => message,
            };
            let response = match message {
                Ok(Some(response)) => response,
                Ok(None) => return WatchEnd::Lost("the watch stream was closed by etcd".into()),
                Err(err) => {
                    return WatchEnd::Lost(format!("watch stream failed: {err}"));
                }
            };
            match space.apply(WatchBatch::from_response(&response)) {
                WatchStep::Unchanged => {}
                WatchStep::Changed => {
                    if send_snapshot(events, space).await.is_err() {
                        return WatchEnd::Closed;
                    }
                }
                WatchStep::Compacted { compact_revision } => {
                    return WatchEnd::Compacted { compact_revision };
                }
                WatchStep::Canceled { reason } => {
                    return WatchEnd::Lost(format!("etcd canceled the watch: {reason}"));
                }
                WatchStep::Refused(refused) => return WatchEnd::Refused(refused),
            }
        }
    }

    fn unexpected(&self, operation: &'static str, detail: &str) -> EtcdError {
        EtcdError::Unexpected {
            endpoints: self.label.clone(),
            operation,
            detail: detail.to_string(),
        }
    }
}

/// Runs one etcd request with [`REQUEST_TIMEOUT`].
async fn with_timeout<T>(
    label: &str,
    operation: &'static str,
    request: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, EtcdError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(cause)) => Err(EtcdError::Request {
            endpoints: label.to_string(),
            operation,
            cause,
        }),
        Err(_) => Err(EtcdError::Timeout {
            endpoints: label.to_string(),
            operation,
            timeout: REQUEST_TIMEOUT,
        }),
    }
}

/// Awaits `work` unless the daemon closes `events` first (then `None`), so that `run`
/// ends promptly when the daemon stops listening, whatever it is waiting for.
async fn until_closed<T>(
    events: &mpsc::Sender<StoreEvent>,
    work: impl Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        _ = events.closed() => None,
        value = work => Some(value),
    }
}

/// Tells the daemon the store cannot be read (`err` says why); `false` when the daemon
/// has gone.
async fn report_unavailable(events: &mpsc::Sender<StoreEvent>, err: &EtcdError) -> bool {
    events
        .send(StoreEvent::Unavailable(err.to_string()))
        .await
        .is_ok()
}

/// Sends the complete document set of `space`; `Err` when the daemon has gone.
async fn send_snapshot(
    events: &mpsc::Sender<StoreEvent>,
    space: &KeySpace,
) -> Result<(), mpsc::error::SendError<StoreEvent>> {
    events
        .send(StoreEvent::Snapshot {
            documents: space.documents(),
            revision: space.revision(),
        })
        .await
}

/// Why a watch ended.
#[derive(Debug)]
enum WatchEnd {
    /// The daemon closed the channel: stop.
    Closed,
    /// etcd compacted history past the watch's position.
    Compacted { compact_revision: i64 },
    /// The stream broke or etcd canceled the watch; the text says why.
    Lost(String),
    /// A value was refused unread.
    Refused(Refused),
}

/// Exponential back-off: [`BACKOFF_START`] doubling to [`BACKOFF_MAX`].
#[derive(Debug)]
struct Backoff {
    next: Duration,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff {
            next: BACKOFF_START,
        }
    }

    /// The delay to wait now; the following one is twice as long, up to the maximum.
    fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        delay
    }

    fn reset(&mut self) {
        self.next = BACKOFF_START;
    }
}
