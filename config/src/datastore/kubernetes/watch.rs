//! The async part of the Kubernetes store: one task per kind runs a `kube` watcher and
//! turns its events into [`Input`]s; the store's loop feeds them to the
//! [`Assembly`], coalesces changes and sends snapshots and outage reports.

use std::fmt::Debug;
use std::future::pending;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::assembly::{Assembly, Entry, Failure, Input, Outcome, Refusal, Step};
use super::convert::convert;
use super::{Kind, KubeSettings, SETTLE, SETTLE_MAX};
use crate::datastore::StoreEvent;

/// First delay before a kind's watcher is started anew after a failed watch.
const RESTART_START: Duration = Duration::from_millis(800);
/// Longest such delay (the etcd store's too): an API server back from a restart is
/// read again within seconds.
const RESTART_MAX: Duration = Duration::from_secs(10);

/// What every watch task shares.
#[derive(Debug, Clone)]
struct Context {
    /// The API server URL, for messages.
    url: Arc<str>,
    /// The Secrets namespace, for messages.
    namespace: Arc<str>,
    max_document_bytes: u64,
    inputs: mpsc::Sender<Input>,
}

/// Runs the store until `events` is closed.
pub(super) async fn run(
    client: Client,
    url: String,
    settings: KubeSettings,
    events: mpsc::Sender<StoreEvent>,
) {
    let (inputs, mut received) = mpsc::channel(1024);
    let context = Context {
        url: url.as_str().into(),
        namespace: settings.namespace.as_str().into(),
        max_document_bytes: settings.max_document_bytes,
        inputs,
    };
    // Dropped (and so aborted) when this function returns.
    let _tasks = spawn_all(&client, &settings.namespace, &context);
    drop(context);

    let mut assembly = Assembly::new();
    // The class of the outage last reported; `Some` until the next snapshot is sent.
    let mut reported: Option<&'static str> = None;
    // When to build the next snapshot, and when the first change it waits for came.
    let mut due: Option<(Instant, Instant)> = None;
    loop {
        let settle = async {
            match due {
                Some((at, _)) => tokio::time::sleep_until(at).await,
                None => pending().await,
            }
        };
        tokio::select! {
            _ = events.closed() => return,
            input = received.recv() => {
                let Some(input) = input else { return };
                match assembly.apply(input) {
                    Step::Unchanged => {}
                    Step::Changed => {
                        let now = Instant::now();
                        let first = due.map_or(now, |(_, first)| first);
                        due = Some(((now + SETTLE).min(first + SETTLE_MAX), first));
                    }
                    Step::Failed(failure) => {
                        if report(&events, &mut reported, failure).await.is_err() {
                            return;
                        }
                    }
                }
            }
            _ = settle => {
                due = None;
                match assembly.snapshot(reported.is_some()) {
                    Outcome::Nothing => {}
                    Outcome::Refused(text) => {
                        let failure = Failure { class: "refused", text };
                        if report(&events, &mut reported, failure).await.is_err() {
                            return;
                        }
                    }
                    Outcome::Snapshot { documents, revision } => {
                        if reported.take().is_some() {
                            info!(url = %url, revision, "Kubernetes API available again");
                        }
                        debug!(revision, documents = documents.len(), "Kubernetes snapshot");
                        let snapshot = StoreEvent::Snapshot { documents, revision };
                        if events.send(snapshot).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// Starts one watch task per kind.
fn spawn_all(client: &Client, namespace: &str, context: &Context) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    for kind in Kind::ALL {
        let (group, version, plural) = kind.resource();
        match kind {
            Kind::Node => spawn(
                &mut tasks,
                *kind,
                Api::<PartialObjectMeta<Node>>::all(client.clone()),
                context,
            ),
            Kind::Secret => spawn(
                &mut tasks,
                *kind,
                Api::<Secret>::namespaced(client.clone(), namespace),
                context,
            ),
            Kind::Service => spawn(
                &mut tasks,
                *kind,
                Api::<Service>::all(client.clone()),
                context,
            ),
            Kind::EndpointSlice => spawn(
                &mut tasks,
                *kind,
                Api::<EndpointSlice>::all(client.clone()),
                context,
            ),
            _ => {
                let gvk = GroupVersionKind::gvk(group, version, kind.kind_name());
                let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
                spawn(
                    &mut tasks,
                    *kind,
                    Api::<DynamicObject>::all_with(client.clone(), &resource),
                    context,
                );
            }
        }
    }
    tasks
}

/// Reports an outage, unless one of the same class has been reported already in this
/// outage (a missing RBAC rule fails every resource: one report, not ten).
async fn report(
    events: &mpsc::Sender<StoreEvent>,
    reported: &mut Option<&'static str>,
    failure: Failure,
) -> Result<(), mpsc::error::SendError<StoreEvent>> {
    if *reported == Some(failure.class) {
        debug!(error = %failure.text, "Kubernetes API still unavailable");
        return Ok(());
    }
    warn!(error = %failure.text, "Kubernetes API unavailable; keeping the last snapshot");
    *reported = Some(failure.class);
    events.send(StoreEvent::Unavailable(failure.text)).await
}

/// Starts the watch task of one kind.
fn spawn<K>(tasks: &mut JoinSet<()>, kind: Kind, api: Api<K>, context: &Context)
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync,
{
    tasks.spawn(watch_kind(kind, api, context.clone()));
}

/// Runs `kube`'s watcher for one kind, forever: its events become inputs; after a
/// failed watch it is started anew (so that it re-lists) after a back-off.
async fn watch_kind<K>(kind: Kind, api: Api<K>, context: Context)
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync,
{
    let mut delay = RESTART_START;
    loop {
        // A watcher that listed completely worked: the next failure starts over with
        // the shortest delay (a lifetime rule kept the long delay of an earlier outage
        // after a short, healthy run).
        let mut listed = false;
        let mut stream = std::pin::pin!(
            watcher::watcher(api.clone(), watcher::Config::default()).default_backoff()
        );
        while let Some(next) = stream.next().await {
            let input = match next {
                Ok(event) => {
                    listed |= matches!(event, Event::InitDone);
                    event_input(kind, event, &context)
                }
                Err(err)
                    if matches!(kind, Kind::BgpFilter | Kind::FelixConfiguration)
                        && not_found(&err) =>
                {
                    // Calico before 3.26 has no BGPFilter CRD: no filters, not an
                    // outage; a cluster without Felix's CRD (BGP only) has Felix's
                    // defaults. The watcher keeps trying, so a CRD installed later is read.
                    debug!(kind = kind.kind_name(), "no such CRD (404): reading none");
                    for input in [Input::Init(kind), Input::InitDone(kind)] {
                        if context.inputs.send(input).await.is_err() {
                            return;
                        }
                    }
                    continue;
                }
                Err(err) => match failure(kind, &err, &context.url, &context.namespace) {
                    None => continue,
                    Some((failure, restart)) => {
                        if context
                            .inputs
                            .send(Input::Failed(kind, failure))
                            .await
                            .is_err()
                        {
                            return;
                        }
                        if restart {
                            break;
                        }
                        continue;
                    }
                },
            };
            let Some(input) = input else { continue };
            if context.inputs.send(input).await.is_err() {
                return;
            }
        }
        if listed {
            delay = RESTART_START;
        }
        debug!(kind = kind.kind_name(), delay = ?delay, "restarting the watcher (re-list)");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(RESTART_MAX);
    }
}

/// The input for one watcher event; `None` for an object without a name.
fn event_input<K>(kind: Kind, event: Event<K>, context: &Context) -> Option<Input>
where
    K: Resource + Serialize,
{
    Some(match event {
        Event::Init => Input::Init(kind),
        Event::InitDone => Input::InitDone(kind),
        Event::InitApply(object) => Input::InitApply(kind, entry(kind, &object, context)?),
        Event::Apply(object) => Input::Apply(kind, entry(kind, &object, context)?),
        Event::Delete(object) => Input::Delete(kind, key(&object)),
    })
}

/// `name` or `namespace/name`, as [`convert`] keys objects.
fn key<K: Resource>(object: &K) -> String {
    match object.namespace() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", object.name_any()),
        _ => object.name_any(),
    }
}

/// One object converted, or refused for its size before conversion.
fn entry<K>(kind: Kind, object: &K, context: &Context) -> Option<Entry>
where
    K: Resource + Serialize,
{
    let refuse = |text: String| {
        Some(Err(Refusal {
            key: key(object),
            text,
        }))
    };
    let bytes = match serde_json::to_vec(object) {
        Ok(bytes) => bytes,
        Err(err) => {
            return refuse(format!(
                "Kubernetes API {}: {} {}: cannot be read as JSON: {err}",
                context.url,
                kind.kind_name(),
                key(object)
            ))
        }
    };
    let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if size > context.max_document_bytes {
        return refuse(format!(
            "Kubernetes API {}: {} {}: {size} bytes, more than the {}-byte limit for one datastore document (limits.datastore_document_bytes in tern.yaml); not read",
            context.url,
            kind.kind_name(),
            key(object),
            context.max_document_bytes
        ));
    }
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    match convert(kind, &value) {
        Ok(item) => Some(Ok(item)),
        Err(_) => {
            warn!(
                kind = kind.kind_name(),
                "Kubernetes object without a name; ignored"
            );
            None
        }
    }
}

/// Whether a watcher error is the API server's 404 (the resource is not served).
fn not_found(err: &watcher::Error) -> bool {
    matches!(
        err,
        watcher::Error::InitialListFailed(kube::Error::Api(s))
            | watcher::Error::WatchStartFailed(kube::Error::Api(s))
            | watcher::Error::WatchFailed(kube::Error::Api(s))
            if s.code == 404
    ) || matches!(err, watcher::Error::WatchError(s) if s.code == 404)
}

/// The operator's words for a watcher error, and whether the watcher must be started
/// anew; `None` for what is no outage (`410 Gone`: the watcher re-lists by itself).
pub(super) fn failure(
    kind: Kind,
    err: &watcher::Error,
    url: &str,
    namespace: &str,
) -> Option<(Failure, bool)> {
    let (operation, restart, cause) = match err {
        watcher::Error::InitialListFailed(e) => ("list", false, Cause::Client(e)),
        watcher::Error::WatchStartFailed(e) => ("watch", true, Cause::Client(e)),
        watcher::Error::WatchFailed(e) => ("watch", true, Cause::Client(e)),
        watcher::Error::WatchError(status) => ("watch", true, Cause::Status(status.code)),
        watcher::Error::NoResourceVersion => ("list", false, Cause::Other),
    };
    let code = match cause {
        Cause::Client(kube::Error::Api(status)) => Some(status.code),
        Cause::Status(code) => Some(code),
        _ => None,
    };
    if code == Some(410) {
        debug!(
            kind = kind.kind_name(),
            "watch expired (410 Gone); re-listing"
        );
        return None;
    }
    let text = describe(kind, operation, code, err, url, namespace);
    let class = match code {
        Some(401) => "401",
        Some(403) => "403",
        Some(404) => "404",
        Some(_) => "status",
        None => "unreachable",
    };
    Some((Failure { class, text }, restart))
}

/// Where a watcher error came from.
enum Cause<'a> {
    Client(&'a kube::Error),
    Status(u16),
    Other,
}

/// `Kubernetes API <url>: <what happened>: <what to do>`.
fn describe(
    kind: Kind,
    operation: &str,
    code: Option<u16>,
    err: &watcher::Error,
    url: &str,
    namespace: &str,
) -> String {
    let resource = kind.resource_label();
    let scope = if kind.in_one_namespace() {
        format!(" in namespace {namespace}")
    } else {
        String::new()
    };
    match code {
        Some(401) => format!(
            "Kubernetes API {url}: the server refused tern's credentials (401 Unauthorized): check the service-account token / kubeconfig user"
        ),
        Some(403) => {
            let role = if kind.in_one_namespace() {
                format!("the Role tern in deploy/kubernetes/rbac.yaml grants it, applied in namespace {namespace}")
            } else {
                "the ClusterRole tern in deploy/kubernetes/rbac.yaml grants it".to_string()
            };
            format!("Kubernetes API {url}: forbidden (403) to {operation} {resource}{scope}: {role}")
        }
        Some(404) if kind.resource().0 == super::CALICO_CRD_GROUP => format!(
            "Kubernetes API {url}: {resource} not found (404): the CRD {}.{} is not installed; install Calico's CRDs (Kubernetes API datastore mode)",
            kind.resource().2,
            super::CALICO_CRD_GROUP
        ),
        Some(code) => format!("Kubernetes API {url}: {operation} {resource}{scope}: the server answered {code}: {}", short(err)),
        None => match connection_problem(err) {
            Some(problem) => format!("Kubernetes API {url}: unreachable ({problem}); retrying"),
            None => format!("Kubernetes API {url}: {operation} {resource}{scope} failed: {}; retrying", short(err)),
        },
    }
}

/// The error's own text, its causes appended.
fn short(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

/// A connection-level cause in plain words (`connection refused`, `timed out`, a TLS
/// failure), found in the error's causes.
fn connection_problem(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind;
            return Some(match io.kind() {
                ErrorKind::ConnectionRefused => "connection refused".to_string(),
                ErrorKind::TimedOut => "timed out".to_string(),
                ErrorKind::ConnectionReset => "connection reset".to_string(),
                _ => io.to_string(),
            });
        }
        // The TLS stack's error types are not this crate's dependencies: recognise
        // them by their words.
        let text = cause.to_string();
        if text.contains("certificate") || text.contains("InvalidCertificate") {
            return Some(format!("TLS: {text}"));
        }
        source = cause.source();
    }
    None
}
