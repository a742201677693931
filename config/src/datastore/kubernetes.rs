//! The Kubernetes API datastore (Calico's "KDD" mode): Calico's resources read from the
//! API server with the `kube` crate and handed to the daemon as complete snapshots, the
//! same contract as [`super::etcd`].
//!
//! What is read (every call is listed in [`API_CALLS`], which `deploy/kubernetes/rbac.yaml`
//! grants, and nothing more):
//! - `crd.projectcalico.org/v1` BGPConfiguration, BGPPeer, BGPFilter, IPPool,
//!   FelixConfiguration (for its `interfacePrefix`): passed on as
//!   `projectcalico.org/v3` documents of the same kind with `metadata` reduced to name,
//!   labels and `tern/` annotations, `spec` unchanged.
//! - `crd.projectcalico.org/v1` IPAMBlock and BlockAffinity: converted exactly as the etcd
//!   store converts the same data (the CRD `spec` is libcalico-go's etcd value), by the
//!   etcd store's own function. Blocks and affinities marked `deleted` are passed on with
//!   the flag, which the intent ignores, as confd does.
//! - core/v1 Nodes, metadata only (labels and annotations; full Node objects are large
//!   and change with every status update; watched as `Api<PartialObjectMeta<Node>>`,
//!   which makes metadata-only requests and replaces kube's deprecated
//!   `metadata_watcher`): a Calico `Node` with the node's labels and
//!   `spec.bgp` from Calico's `projectcalico.org/{IPv4Address, IPv6Address, ASNumber,
//!   RouteReflectorClusterID}` annotations (libcalico-go `K8sNodeToCalico`).
//! - core/v1 Secrets in [`KubeSettings::namespace`]: only those a BGPPeer's
//!   `spec.password.secretKeyRef.name` names are passed on, in Kubernetes' own shape.
//!   Secret data is never logged nor put in an error text.
//! - core/v1 Services and `discovery.k8s.io/v1` EndpointSlices in all namespaces, as
//!   compact documents: **only Services whose `externalTrafficPolicy` or
//!   `internalTrafficPolicy` is `Local`, and the EndpointSlices of those Services** (the
//!   only ones that get per-service routes; the others are covered by the
//!   BGPConfiguration's service ranges), so a cluster's churn of other Services and
//!   their endpoints changes no snapshot.
//!
//! Every document's origin is `kubernetes <Kind> [<namespace>/]<name>`.
//!
//! What comes from `kube` (checked in kube-runtime 5's `watcher`): per kind, a paged list
//! (500 per page; a quorum read, `ListSemantic::MostRecent`) then a watch from the list's `resourceVersion` with bookmarks
//! (`watcher::Config::default()` sets `bookmarks: true`); on `410 Gone` the watcher
//! starts over with a fresh list (`Event::Init` … `Event::InitDone`); a watch that ends
//! (the server's 290 s timeout, or a silent connection noticed 5 s after it) is resumed
//! from the last seen `resourceVersion`; retries are paced by `.default_backoff()`
//! (0.8 s doubling to 30 s, with jitter; reset after 120 s without error).
//!
//! What is ours: after a failed watch (a lost connection, a refused watch) the kind's
//! watcher is started anew, after a back-off of its own, so that it re-lists; that way
//! the end of an outage is always seen (a list completes) instead of a resumed watch
//! that says nothing until the next change. The snapshot assembly (module `assembly`) keeps
//! one map per kind, hands on nothing until every kind has completed its first list,
//! keeps a re-listed kind's old contents until its list is complete, and holds
//! snapshots back while any kind fails; bursts of changes are coalesced (a snapshot
//! goes out [`SETTLE`] after the last change, at most [`SETTLE_MAX`] after the first).
//! A failure is reported as [`StoreEvent::Unavailable`] once per outage (again only if
//! the kind of cause changes: unreachable, 401, 403, …), in words the operator can act
//! on; after it, the next complete state is sent as a snapshot even if it did not
//! change.
//!
//! Sizes: an object whose JSON is over [`KubeSettings::max_document_bytes`] is refused
//! (the store is unavailable, naming it and the limit, until it shrinks or goes), and
//! the snapshot in force stays. The `kube` client has parsed it by then; the limit keeps
//! such an object out of the model and the daemon.

mod assembly;
mod convert;
mod watch;

#[cfg(test)]
mod assembly_tests;
#[cfg(test)]
mod store_tests;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::mpsc;

use super::StoreEvent;

pub use convert::{
    NODE_ASN_ANNOTATION, NODE_IPV4_ANNOTATION, NODE_IPV6_ANNOTATION, NODE_RR_CLUSTER_ID_ANNOTATION,
    SERVICE_NAME_LABEL, TERN_ANNOTATION_PREFIX,
};

/// The namespace Secrets are read from when none is configured: what confd uses when
/// its `NAMESPACE` environment variable is unset (confd's secret watcher).
pub const DEFAULT_NAMESPACE: &str = "kube-system";

/// How long the store waits after a change for more before sending a snapshot, so that
/// one `kubectl apply` of many objects is one snapshot.
pub const SETTLE: std::time::Duration = std::time::Duration::from_millis(100);
/// The longest a snapshot is held back by a steady stream of changes.
pub const SETTLE_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// Where the store connects and what it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeSettings {
    /// A kubeconfig file; `None`: in-cluster service-account credentials, else
    /// `$KUBECONFIG` / `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// The namespace calico-node runs in, where BGP password Secrets are
    /// ([`DEFAULT_NAMESPACE`] when unset).
    pub namespace: String,
    /// Largest object (as JSON) accepted; `limits.datastore_document_bytes`.
    pub max_document_bytes: u64,
}

impl Default for KubeSettings {
    fn default() -> Self {
        KubeSettings {
            kubeconfig: None,
            namespace: DEFAULT_NAMESPACE.to_string(),
            max_document_bytes: crate::daemon::limits::DEFAULT_DATASTORE_DOCUMENT_BYTES,
        }
    }
}

/// Errors building the client. Each names the kubeconfig path or API server URL and
/// the cause.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The kubeconfig given could not be read or used.
    #[error("Kubernetes: kubeconfig {path}: {cause}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        cause: String,
    },
    /// No kubeconfig was given and neither in-cluster credentials nor a default
    /// kubeconfig could be used.
    #[error("Kubernetes: no credentials: not in a cluster ({in_cluster}), and no usable kubeconfig ($KUBECONFIG or ~/.kube/config: {kubeconfig}); set datastore.kubeconfig")]
    NoConfig {
        /// Why the in-cluster configuration failed.
        in_cluster: String,
        /// Why the default kubeconfig failed.
        kubeconfig: String,
    },
    /// The client could not be built from the configuration (TLS, proxy).
    #[error("Kubernetes API {url}: cannot build the client: {cause}")]
    Client {
        /// The API server URL.
        url: String,
        /// What the client said.
        cause: String,
    },
}

/// The kinds the store reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `crd.projectcalico.org/v1` BGPConfiguration.
    BgpConfiguration,
    /// `crd.projectcalico.org/v1` BGPPeer.
    BgpPeer,
    /// `crd.projectcalico.org/v1` BGPFilter.
    BgpFilter,
    /// `crd.projectcalico.org/v1` IPPool.
    IpPool,
    /// `crd.projectcalico.org/v1` IPAMBlock.
    IpamBlock,
    /// `crd.projectcalico.org/v1` BlockAffinity.
    BlockAffinity,
    /// `crd.projectcalico.org/v1` FelixConfiguration (tern reads `interfacePrefix`).
    FelixConfiguration,
    /// core/v1 Node (metadata only).
    Node,
    /// core/v1 Secret in the configured namespace.
    Secret,
    /// core/v1 Service, all namespaces.
    Service,
    /// `discovery.k8s.io/v1` EndpointSlice, all namespaces.
    EndpointSlice,
}

/// Calico's CRD group.
pub const CALICO_CRD_GROUP: &str = "crd.projectcalico.org";

impl Kind {
    /// Every kind, in the order documents are handed on.
    pub const ALL: &'static [Kind] = &[
        Kind::BgpConfiguration,
        Kind::BgpPeer,
        Kind::BgpFilter,
        Kind::IpPool,
        Kind::IpamBlock,
        Kind::BlockAffinity,
        Kind::FelixConfiguration,
        Kind::Node,
        Kind::Secret,
        Kind::Service,
        Kind::EndpointSlice,
    ];

    /// The kind's name (`BGPPeer`), as in documents and origins.
    pub fn kind_name(self) -> &'static str {
        match self {
            Kind::BgpConfiguration => "BGPConfiguration",
            Kind::BgpPeer => "BGPPeer",
            Kind::BgpFilter => "BGPFilter",
            Kind::IpPool => "IPPool",
            Kind::IpamBlock => "IPAMBlock",
            Kind::BlockAffinity => "BlockAffinity",
            Kind::FelixConfiguration => "FelixConfiguration",
            Kind::Node => "Node",
            Kind::Secret => "Secret",
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
        }
    }

    /// API group (`""` for core), version and plural resource name.
    pub fn resource(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Kind::BgpConfiguration => (CALICO_CRD_GROUP, "v1", "bgpconfigurations"),
            Kind::BgpPeer => (CALICO_CRD_GROUP, "v1", "bgppeers"),
            Kind::BgpFilter => (CALICO_CRD_GROUP, "v1", "bgpfilters"),
            Kind::IpPool => (CALICO_CRD_GROUP, "v1", "ippools"),
            Kind::IpamBlock => (CALICO_CRD_GROUP, "v1", "ipamblocks"),
            Kind::BlockAffinity => (CALICO_CRD_GROUP, "v1", "blockaffinities"),
            Kind::FelixConfiguration => (CALICO_CRD_GROUP, "v1", "felixconfigurations"),
            Kind::Node => ("", "v1", "nodes"),
            Kind::Secret => ("", "v1", "secrets"),
            Kind::Service => ("", "v1", "services"),
            Kind::EndpointSlice => ("discovery.k8s.io", "v1", "endpointslices"),
        }
    }

    /// `crd.projectcalico.org/v1 bgppeers`, `v1 nodes`: how messages name the resource.
    pub fn resource_label(self) -> String {
        match self.resource() {
            ("", version, plural) => format!("{version} {plural}"),
            (group, version, plural) => format!("{group}/{version} {plural}"),
        }
    }

    /// Whether the kind is read within one namespace (a namespaced Role grants it).
    pub fn in_one_namespace(self) -> bool {
        matches!(self, Kind::Secret)
    }
}

/// One API call the store makes: what RBAC must grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiCall {
    /// API group; `""` is core.
    pub api_group: &'static str,
    /// Plural resource name.
    pub resource: &'static str,
    /// `list` or `watch` (the watcher lists, then watches; it never gets one object).
    pub verb: &'static str,
    /// Made in [`KubeSettings::namespace`] only (granted by a Role there), rather than
    /// cluster-wide (a ClusterRole).
    pub namespaced: bool,
}

macro_rules! calls {
    ($($group:literal $resource:literal $namespaced:literal),* $(,)?) => {
        &[$(
            ApiCall { api_group: $group, resource: $resource, verb: "list", namespaced: $namespaced },
            ApiCall { api_group: $group, resource: $resource, verb: "watch", namespaced: $namespaced },
        )*]
    };
}

/// Every call the store makes; `deploy/kubernetes/rbac.yaml` grants exactly these (a
/// unit test checks it). Kept equal to [`Kind::resource`] by a unit test too.
pub const API_CALLS: &[ApiCall] = calls![
    "crd.projectcalico.org" "bgpconfigurations" false,
    "crd.projectcalico.org" "bgppeers" false,
    "crd.projectcalico.org" "bgpfilters" false,
    "crd.projectcalico.org" "ippools" false,
    "crd.projectcalico.org" "ipamblocks" false,
    "crd.projectcalico.org" "blockaffinities" false,
    "crd.projectcalico.org" "felixconfigurations" false,
    "" "nodes" false,
    "" "secrets" true,
    "" "services" false,
    "discovery.k8s.io" "endpointslices" false,
];

/// The Kubernetes API datastore. [`KubeStore::connect`] builds it, [`KubeStore::run`]
/// feeds the daemon.
pub struct KubeStore {
    client: kube::Client,
    /// The API server URL, for messages.
    url: String,
    settings: KubeSettings,
}

impl std::fmt::Debug for KubeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeStore")
            .field("url", &self.url)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl KubeStore {
    /// Builds the client: `kubeconfig` if set, else in-cluster service-account
    /// credentials (when `KUBERNETES_SERVICE_HOST` is set), else `$KUBECONFIG` /
    /// `~/.kube/config`. (`kube::Config::infer` tries the kubeconfig before the
    /// in-cluster credentials; a node daemon's own service account comes first here, so
    /// a stray kubeconfig on the host cannot change whom tern talks to.)
    ///
    /// Nothing is sent to the server yet: [`KubeStore::run`] reports an unreachable or
    /// refusing server and keeps trying.
    pub async fn connect(settings: &KubeSettings) -> Result<KubeStore, KubeError> {
        let config = match &settings.kubeconfig {
            Some(path) => {
                let fail = |cause: String| KubeError::Kubeconfig {
                    path: path.clone(),
                    cause,
                };
                let kubeconfig = Kubeconfig::read_from(path).map_err(|e| fail(e.to_string()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await
                    .map_err(|e| fail(e.to_string()))?
            }
            None => match in_cluster() {
                Ok(config) => config,
                Err(in_cluster) => kube::Config::from_kubeconfig(&KubeConfigOptions::default())
                    .await
                    .map_err(|e| KubeError::NoConfig {
                        in_cluster,
                        kubeconfig: e.to_string(),
                    })?,
            },
        };
        let url = config.cluster_url.to_string();
        let url = url.trim_end_matches('/').to_string();
        let client = kube::Client::try_from(config).map_err(|e| KubeError::Client {
            url: url.clone(),
            cause: e.to_string(),
        })?;
        Ok(KubeStore {
            client,
            url,
            settings: settings.clone(),
        })
    }

    /// The API server URL the store talks to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Feeds the daemon until `events` is closed: a [`StoreEvent::Snapshot`] once every
    /// kind has been listed, and after every change (coalesced over [`SETTLE`]);
    /// [`StoreEvent::Unavailable`] once per outage, while the snapshot in force stays.
    pub async fn run(self, events: mpsc::Sender<StoreEvent>) {
        watch::run(self.client, self.url, self.settings, events).await;
    }
}

/// The in-cluster configuration, when tern runs in a pod.
fn in_cluster() -> Result<kube::Config, String> {
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() {
        return Err("KUBERNETES_SERVICE_HOST is not set".to_string());
    }
    kube::Config::incluster().map_err(|e| e.to_string())
}
