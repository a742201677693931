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
//! The conversion and the key map are plain functions (unit-tested without etcd); the
//! async part only moves bytes between etcd and them.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use etcd_client::{Client, GetOptions, Txn, TxnOp, TxnOpResponse, WatchOptions, WatchResponse};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::{Document, StoreEvent};

mod connect;
#[cfg(test)]
mod tests;

pub use connect::{describe, describe_at, EtcdOptions};

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
    "felixconfigurations",
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
                    if reported {
                        debug!(error = %err, "etcd still unavailable");
                    } else {
                        warn!(error = %err, "etcd unavailable; keeping the last snapshot");
                        reported = true;
                        if events
                            .send(StoreEvent::Unavailable(err.to_string()))
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                    if until_closed(&events, tokio::time::sleep(backoff.next_delay()))
                        .await
                        .is_none()
                    {
                        return;
                    }
                    // A fresh client, so that a connection wedged in a bad state cannot
                    // keep the store down after etcd is back.
                    match connect::new_client(&self.options, &self.label).await {
                        Ok((client, credentials)) => {
                            self.client = client;
                            self.credentials = credentials;
                        }
                        Err(err) => debug!(error = %err, "cannot rebuild the etcd client"),
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
                    if events
                        .send(StoreEvent::Unavailable(err.to_string()))
                        .await
                        .is_err()
                    {
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

// ---------------------------------------------------------------------------------------
// The pure part: the key map and the conversion of keys and values into documents.
// ---------------------------------------------------------------------------------------

/// One key change from a watch response.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyChange {
    key: String,
    /// The new value; `None` when the key was deleted.
    value: Option<Vec<u8>>,
    /// The revision of the change.
    revision: i64,
}

/// A watch response reduced to what the store decides on, so that the decision is a
/// plain function (the client's response type cannot be built outside the client).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct WatchBatch {
    canceled: bool,
    compact_revision: i64,
    cancel_reason: String,
    changes: Vec<KeyChange>,
}

impl WatchBatch {
    fn from_response(response: &WatchResponse) -> WatchBatch {
        let changes = response
            .events()
            .iter()
            .filter_map(|event| event.kv())
            .map(|kv| KeyChange {
                key: String::from_utf8_lossy(kv.key()).into_owned(),
                // etcd's mvcc resets a key's version to 0 on deletion and counts puts
                // from 1, so the version tells a delete from a put. (The client's
                // `event_type()` panics on an unknown type number; this cannot.)
                value: (kv.version() != 0).then(|| kv.value().to_vec()),
                revision: kv.mod_revision(),
            })
            .collect();
        WatchBatch {
            canceled: response.canceled(),
            compact_revision: response.compact_revision(),
            cancel_reason: response.cancel_reason().to_string(),
            changes,
        }
    }
}

/// What applying one watch response did.
#[derive(Debug, Clone, PartialEq, Eq)]
enum WatchStep {
    /// At least one document changed: send a snapshot.
    Changed,
    /// Nothing tern reads changed (watch created, progress, ignored keys).
    Unchanged,
    /// History was compacted past the watch: re-list.
    Compacted { compact_revision: i64 },
    /// etcd canceled the watch for another reason: re-list.
    Canceled { reason: String },
    /// A value was refused unread: report the store unavailable, then re-list.
    Refused(Refused),
}

/// How much the store reads before it parses anything: each value (as
/// `limits.datastore_document_bytes` in `tern.yaml` says) and all of them together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReadLimits {
    /// Largest value of a key tern reads.
    value_bytes: u64,
    /// Largest sum of the values of the keys tern reads. [`MAX_MESSAGE_BYTES`]: a key
    /// space larger than that could not be re-listed (the list is one message), so a
    /// watch must not build one either, one value at a time.
    total_bytes: u64,
}

impl Default for ReadLimits {
    fn default() -> ReadLimits {
        ReadLimits {
            value_bytes: crate::daemon::limits::DEFAULT_DATASTORE_DOCUMENT_BYTES,
            total_bytes: u64::try_from(MAX_MESSAGE_BYTES).unwrap_or(u64::MAX),
        }
    }
}

/// Values the store refused to read. While one is in etcd no snapshot is sent: the
/// store reports itself unavailable, so the configuration in force stays (as the file
/// store does with an oversized file), instead of the resource silently vanishing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// One value is larger than the limit; it was not parsed.
    #[error("key {key}: {bytes} bytes, more than the {limit}-byte limit for one datastore document (limits.datastore_document_bytes in tern.yaml); not read")]
    Value {
        /// The etcd key.
        key: String,
        /// The value's size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The values tern reads add up to more than the limit; the values from `key` on
    /// were not parsed.
    #[error("the values under the keys tern reads add up to more than {limit} bytes (the largest etcd response tern accepts), reached at key {key}; not read")]
    Total {
        /// The key whose value went over.
        key: String,
        /// The limit.
        limit: u64,
    },
}

/// The documents as of one etcd revision, keyed by etcd key. Values are converted when
/// they arrive, so a snapshot is a copy of ready documents and a conversion problem is
/// logged once per change, not once per snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct KeySpace {
    documents: BTreeMap<String, Document>,
    /// Size of the etcd value behind each document, for the running total.
    value_bytes: BTreeMap<String, u64>,
    /// The sum of `value_bytes`.
    total_bytes: u64,
    revision: i64,
    limits: ReadLimits,
}

impl KeySpace {
    /// The key map of a complete read at `revision`. Each value's size and the running
    /// total are checked before the value is parsed; the first one over refuses the
    /// whole read.
    fn from_entries(
        entries: impl IntoIterator<Item = (String, Vec<u8>)>,
        revision: i64,
        limits: ReadLimits,
    ) -> Result<Self, Refused> {
        let mut space = KeySpace {
            revision,
            limits,
            ..KeySpace::default()
        };
        for (key, value) in entries {
            space.put(key, &value)?;
        }
        Ok(space)
    }

    /// Sets `key` to `value` (or forgets it, when tern does not read it), refusing a
    /// value over its limit or the total before parsing it. Reports whether the
    /// document changed.
    fn put(&mut self, key: String, value: &[u8]) -> Result<bool, Refused> {
        let Some(kind) = key_kind(&key) else {
            return Ok(self.remove(&key));
        };
        check_value_size(&key, value, self.limits.value_bytes)?;
        let bytes = u64::try_from(value.len()).unwrap_or(u64::MAX);
        let old = self.value_bytes.get(&key).copied().unwrap_or(0);
        let total = self
            .total_bytes
            .saturating_sub(old)
            .checked_add(bytes)
            .filter(|t| *t <= self.limits.total_bytes)
            .ok_or_else(|| Refused::Total {
                key: key.clone(),
                limit: self.limits.total_bytes,
            })?;
        let doc = convert(&key, kind, value);
        self.total_bytes = total;
        self.value_bytes.insert(key.clone(), bytes);
        Ok(self.documents.insert(key, doc.clone()) != Some(doc))
    }

    /// Forgets `key`; reports whether a document went.
    fn remove(&mut self, key: &str) -> bool {
        if let Some(bytes) = self.value_bytes.remove(key) {
            self.total_bytes = self.total_bytes.saturating_sub(bytes);
        }
        self.documents.remove(key).is_some()
    }

    /// Applies one whole watch response. Changes are applied in order (a key written
    /// twice in one response ends with its last value), all before anything is sent.
    /// A refused value ends the watch with the space half-applied; the store then
    /// throws the space away and re-lists, so that half is never sent.
    fn apply(&mut self, batch: WatchBatch) -> WatchStep {
        if batch.compact_revision > 0 {
            return WatchStep::Compacted {
                compact_revision: batch.compact_revision,
            };
        }
        if batch.canceled {
            let reason = if batch.cancel_reason.is_empty() {
                "no reason given".to_string()
            } else {
                batch.cancel_reason
            };
            return WatchStep::Canceled { reason };
        }
        let mut changed = false;
        for change in batch.changes {
            self.revision = self.revision.max(change.revision);
            changed |= match change.value {
                Some(value) => match self.put(change.key, &value) {
                    Ok(changed) => changed,
                    Err(refused) => return WatchStep::Refused(refused),
                },
                None => self.remove(&change.key),
            };
        }
        if changed {
            WatchStep::Changed
        } else {
            WatchStep::Unchanged
        }
    }

    /// Every document, in key order.
    fn documents(&self) -> Vec<Document> {
        self.documents.values().cloned().collect()
    }

    fn revision(&self) -> i64 {
        self.revision
    }

    fn len(&self) -> usize {
        self.documents.len()
    }
}

/// The document for one etcd key and value, or `None` when tern does not read that key.
///
/// - `RESOURCES_PREFIX<plural>/<name>` (or `<plural>/<namespace>/<name>`): the value,
///   with `apiVersion`, `kind` and `metadata.name` (`metadata.namespace`) filled from the
///   key when missing. Plurals in [`IGNORED_PLURALS`] and keys of another shape: `None`.
/// - `/calico/ipam/v2/assignment/ipv4/block/198.18.4.0-26`: an `IPAMBlock` named
///   `198-18-4-0-26` whose spec holds the block's `cidr`, `affinity`, `strictAffinity`,
///   `allocations`, `unallocated`, `attributes` and `deleted`.
/// - `/calico/ipam/v2/host/<node>/ipv4/block/198.18.4.0-26`: a `BlockAffinity` named
///   `<node>-198-18-4-0-26` with spec `node`, `cidr`, `state` (empty means `confirmed`)
///   and `deleted` (a string, as in the v3 API).
///
/// A value that is not a JSON object is returned as its raw text (origin = the key),
/// so that the model reports it rather than it being dropped. A value longer than
/// `max_value_bytes` is refused before it is parsed (see [`Refused::Value`]).
pub fn document_for(
    key: &str,
    value: &[u8],
    max_value_bytes: u64,
) -> Option<Result<Document, Refused>> {
    let kind = key_kind(key)?;
    Some(check_value_size(key, value, max_value_bytes).map(|()| convert(key, kind, value)))
}

/// A key tern reads, taken apart. Deciding from the key alone, before the value is
/// looked at, lets the store check a value's size (and the running total) before any
/// parsing, and lets it ignore, unmeasured, the keys it does not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind<'a> {
    /// `RESOURCES_PREFIX<plural>/[<namespace>/]<name>`.
    Resource {
        plural: &'a str,
        namespace: Option<&'a str>,
        name: &'a str,
    },
    /// `BLOCKS_PREFIX ipv4/block/<segment>`.
    Block { segment: &'a str },
    /// `AFFINITIES_PREFIX <node>/ipv4/block/<segment>`.
    Affinity { node: &'a str, segment: &'a str },
}

/// What `key` is, or `None` when tern does not read it.
fn key_kind(key: &str) -> Option<KeyKind<'_>> {
    if let Some(rest) = key.strip_prefix(RESOURCES_PREFIX) {
        resource_key(key, rest)
    } else if let Some(rest) = key.strip_prefix(BLOCKS_PREFIX) {
        match rest.split('/').collect::<Vec<_>>().as_slice() {
            [family, "block", segment] if is_family(family) && !segment.is_empty() => {
                Some(KeyKind::Block { segment })
            }
            _ => None,
        }
    } else if let Some(rest) = key.strip_prefix(AFFINITIES_PREFIX) {
        match rest.split('/').collect::<Vec<_>>().as_slice() {
            [node, family, "block", segment]
                if !node.is_empty() && is_family(family) && !segment.is_empty() =>
            {
                Some(KeyKind::Affinity { node, segment })
            }
            _ => None,
        }
    } else {
        None
    }
}

/// The document for a key tern reads (its size already checked).
fn convert(key: &str, kind: KeyKind<'_>, value: &[u8]) -> Document {
    match kind {
        KeyKind::Resource {
            plural,
            namespace,
            name,
        } => resource_document(key, plural, namespace, name, value),
        KeyKind::Block { segment } => block_document(key, segment, value),
        KeyKind::Affinity { node, segment } => affinity_document(key, node, segment, value),
    }
}

/// Refuses a value longer than `max_bytes`, unread.
fn check_value_size(key: &str, value: &[u8], max_bytes: u64) -> Result<(), Refused> {
    let bytes = u64::try_from(value.len()).unwrap_or(u64::MAX);
    if bytes > max_bytes {
        return Err(Refused::Value {
            key: key.to_string(),
            bytes,
            limit: max_bytes,
        });
    }
    Ok(())
}

/// A v3 resource key: plural, namespace and name, unless the plural is one tern never
/// uses or the key is not in Calico's layout.
fn resource_key<'a>(key: &str, rest: &'a str) -> Option<KeyKind<'a>> {
    let parts: Vec<&str> = rest.split('/').collect();
    let (plural, namespace, name) = match parts.as_slice() {
        [plural, name] => (*plural, None, *name),
        [plural, namespace, name] => (*plural, Some(*namespace), *name),
        _ => {
            // Not Calico's layout (libcalico-go would not read it either).
            debug!(key, "ignoring etcd key of unknown shape");
            return None;
        }
    };
    if plural.is_empty() || name.is_empty() || namespace.is_some_and(str::is_empty) {
        debug!(key, "ignoring etcd key with an empty segment");
        return None;
    }
    if IGNORED_PLURALS.contains(&plural) {
        return None;
    }
    Some(KeyKind::Resource {
        plural,
        namespace,
        name,
    })
}

/// A v3 resource: the value passed through, completed from the key.
fn resource_document(
    key: &str,
    plural: &str,
    namespace: Option<&str>,
    name: &str,
    value: &[u8],
) -> Document {
    let Some(Value::Object(mut object)) = parse_json(value) else {
        warn!(key, "etcd value is not a JSON object; handing it on as is");
        return raw_document(key, value);
    };
    let mut filled = false;
    if !object.contains_key("apiVersion") {
        object.insert("apiVersion".into(), API_VERSION.into());
        filled = true;
    }
    if !object.contains_key("kind") {
        object.insert("kind".into(), kind_for_plural(plural).into());
        filled = true;
    }
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    // A `metadata` that is not an object is left alone for the model to reject.
    if let Value::Object(metadata) = metadata {
        if !metadata.contains_key("name") {
            metadata.insert("name".into(), name.into());
            filled = true;
        }
        if let Some(namespace) = namespace {
            if !metadata.contains_key("namespace") {
                metadata.insert("namespace".into(), namespace.into());
                filled = true;
            }
        }
    }
    if !filled {
        // Nothing to add: hand on the text exactly as etcd holds it.
        return raw_document(key, value);
    }
    json_document(key, Value::Object(object))
}

/// The v3 kind stored under a plural, as libcalico-go registers them. An unknown plural
/// is used as the kind itself, so the model's unknown-kind warning names something
/// recognisable.
fn kind_for_plural(plural: &str) -> String {
    let kind = match plural {
        "bgpconfigurations" => "BGPConfiguration",
        "bgpfilters" => "BGPFilter",
        "bgppeers" => "BGPPeer",
        "blockaffinities" => "BlockAffinity",
        "ippools" => "IPPool",
        "nodes" => "Node",
        "ipamblocks" => "IPAMBlock",
        other => other,
    };
    kind.to_string()
}

/// An IPAM block key's CIDR segment (`198.18.4.0-26`) and its `AllocationBlock` value.
fn block_document(key: &str, segment: &str, value: &[u8]) -> Document {
    let key_cidr = cidr_from_segment(segment);
    let Some(Value::Object(block)) = parse_json(value) else {
        warn!(
            key,
            "IPAM block value is not a JSON object; handing it on as is"
        );
        return raw_document(key, value);
    };
    let field = |name: &str| block.get(name).filter(|v| !v.is_null()).cloned();
    let mut spec = Map::new();
    spec.insert(
        "cidr".into(),
        field("cidr").unwrap_or_else(|| key_cidr.clone().into()),
    );
    // `hostAffinity: <node>` is the deprecated spelling of `affinity: host:<node>`;
    // libcalico-go still reads it, so tern does too.
    let affinity = field("affinity").or_else(|| match block.get("hostAffinity") {
        Some(Value::String(host)) => Some(format!("host:{host}").into()),
        _ => None,
    });
    if let Some(affinity) = affinity {
        spec.insert("affinity".into(), affinity);
    }
    spec.insert(
        "strictAffinity".into(),
        field("strictAffinity").unwrap_or(Value::Bool(false)),
    );
    for list in ["allocations", "unallocated", "attributes"] {
        spec.insert(
            list.into(),
            field(list).unwrap_or_else(|| Value::Array(Vec::new())),
        );
    }
    spec.insert(
        "deleted".into(),
        field("deleted").unwrap_or(Value::Bool(false)),
    );
    json_document(key, resource_json("IPAMBlock", &cidr_name(&key_cidr), spec))
}

/// A block affinity key's node and CIDR segment (`<node>/ipv4/block/198.18.4.0-26`)
/// and its value.
fn affinity_document(key: &str, node: &str, segment: &str, value: &[u8]) -> Document {
    let cidr = cidr_from_segment(segment);
    // Older Calico wrote affinities with an empty value: a confirmed affinity.
    let affinity = if value.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        match parse_json(value) {
            Some(Value::Object(affinity)) => affinity,
            _ => {
                warn!(
                    key,
                    "block affinity value is not a JSON object; handing it on as is"
                );
                return raw_document(key, value);
            }
        }
    };
    let state = match affinity.get("state") {
        None | Some(Value::Null) => "confirmed".into(),
        Some(Value::String(s)) if s.is_empty() => "confirmed".into(),
        // Anything else, valid or not, is the model's to judge.
        Some(other) => other.clone(),
    };
    // The v3 BlockAffinity spells `deleted` as a string.
    let deleted = match affinity.get("deleted") {
        None | Some(Value::Null) => "false".into(),
        Some(Value::Bool(b)) => b.to_string().into(),
        Some(other) => other.clone(),
    };
    let mut spec = Map::new();
    spec.insert("node".into(), node.into());
    spec.insert("cidr".into(), cidr.clone().into());
    spec.insert("state".into(), state);
    spec.insert("deleted".into(), deleted);
    let name = format!("{node}-{}", cidr_name(&cidr));
    json_document(key, resource_json("BlockAffinity", &name, spec))
}

/// `ipv4` or `ipv6`, the family segment of IPAM keys.
fn is_family(segment: &str) -> bool {
    matches!(segment, "ipv4" | "ipv6")
}

/// The CIDR in an IPAM key segment: libcalico-go writes `198.18.4.0/26` as
/// `198.18.4.0-26` (`2001:db8:1::/122` as `2001:db8:1::-122`). Addresses hold no `-`,
/// so the last one is the slash. A segment without one is returned unchanged for the
/// model to reject as a CIDR.
fn cidr_from_segment(segment: &str) -> String {
    match segment.rsplit_once('-') {
        Some((address, length)) => format!("{address}/{length}"),
        None => segment.to_string(),
    }
}

/// The resource name Calico gives a CIDR: `.`, `:` and `/` become `-`.
fn cidr_name(cidr: &str) -> String {
    cidr.replace(['.', ':', '/'], "-")
}

/// `{"apiVersion", "kind", "metadata": {"name"}, "spec"}`.
fn resource_json(kind: &str, name: &str, spec: Map<String, Value>) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".into(), name.into());
    let mut object = Map::new();
    object.insert("apiVersion".into(), API_VERSION.into());
    object.insert("kind".into(), kind.into());
    object.insert("metadata".into(), Value::Object(metadata));
    object.insert("spec".into(), Value::Object(spec));
    Value::Object(object)
}

/// The value as JSON, or `None` when it is not JSON (or not UTF-8, which JSON must be).
fn parse_json(value: &[u8]) -> Option<Value> {
    serde_json::from_slice(value).ok()
}

fn json_document(key: &str, value: Value) -> Document {
    Document {
        origin: key.to_string(),
        text: value.to_string(),
    }
}

/// The value's own text, for the model to reject naming the key. Bytes that are not
/// UTF-8 (which no Calico value holds) become U+FFFD.
fn raw_document(key: &str, value: &[u8]) -> Document {
    Document {
        origin: key.to_string(),
        text: String::from_utf8_lossy(value).into_owned(),
    }
}
