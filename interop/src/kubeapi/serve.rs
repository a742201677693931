//! The HTTP side of the stand-in: bearer-token authentication, the URL layout of the
//! real API server (discovery, collections, namespaced collections, single objects), and
//! the verbs get, list, watch, create, update and delete, answering errors with
//! Kubernetes `Status` objects. One hyper service per connection calls [`handle`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use super::rbac::{forbidden_message, Attributes, Rbac};
use super::resources::{self, Resource, RESOURCES};
use super::store::{Key, Store, StoreError};
use super::watch::{line, partial_metadata, Shape, Start, Watch};
use super::write;
use super::RequestRecord;

/// A response body: a whole JSON document or a watch stream.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// What every connection shares; outlives restarts.
#[derive(Debug)]
pub struct Shared {
    /// The objects.
    pub store: Mutex<Store>,
    /// The bearer token accepted.
    pub token: RwLock<String>,
    /// Rules to enforce, if any.
    pub rbac: Option<Rbac>,
    /// The user the token stands for (in 403 messages).
    pub user: String,
    /// Bookmark period of watches that allow bookmarks.
    pub bookmark_interval: Duration,
    /// Every resource request answered.
    pub requests: Mutex<Vec<RequestRecord>>,
    /// `ip:port`, for `/api`'s serverAddressByClientCIDRs.
    pub address: String,
}

impl Shared {
    /// The store, even if a panicking holder poisoned the lock (its data stays valid:
    /// every write is one insert).
    pub fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub(super) fn json_response(code: StatusCode, v: &Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())).boxed_unsync());
    *r.status_mut() = code;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// A failure `Status` object, as the real server writes it.
pub fn status_object(
    code: StatusCode,
    reason: &str,
    message: &str,
    details: Option<Value>,
) -> Value {
    let mut s = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    if let Some(d) = details {
        s["details"] = d;
    }
    s
}

pub(super) fn status(
    code: StatusCode,
    reason: &str,
    message: &str,
    details: Option<Value>,
) -> Response<Body> {
    json_response(code, &status_object(code, reason, message, details))
}

/// A request on a resource, parsed from its URL.
pub(super) struct Target {
    pub(super) res: usize,
    pub(super) resource: &'static Resource,
    pub(super) namespace: Option<String>,
    pub(super) name: Option<String>,
}

impl Target {
    pub(super) fn details(&self) -> Value {
        json!({"name": self.name.clone().unwrap_or_default(), "group": self.resource.group,
               "kind": self.resource.plural})
    }

    pub(super) fn qualified(&self) -> String {
        let r = self.resource;
        if r.group.is_empty() {
            r.plural.to_string()
        } else {
            format!("{}.{}", r.plural, r.group)
        }
    }

    pub(super) fn not_found(&self) -> Response<Body> {
        let msg = format!(
            "{} {:?} not found",
            self.qualified(),
            self.name.clone().unwrap_or_default()
        );
        status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &msg,
            Some(self.details()),
        )
    }

    pub(super) fn key(&self) -> Key {
        (
            self.res,
            self.namespace.clone().unwrap_or_default(),
            self.name.clone().unwrap_or_default(),
        )
    }
}

/// Discovery documents by path; `None` when the path is not one.
fn discovery(path: &[&str], address: &str) -> Option<Option<Value>> {
    Some(match path {
        ["version"] => Some(resources::version()),
        ["api"] => Some(resources::core_versions(address)),
        ["apis"] => Some(resources::group_list()),
        ["api", v] => resources::resource_list("", v),
        ["apis", g] => resources::group(g),
        ["apis", g, v] => resources::resource_list(g, v),
        _ => return None,
    })
}

/// The resource request a path names; `None` for paths the server does not serve.
fn target(path: &[&str]) -> Option<Target> {
    let (group, version, rest) = match path {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let (namespace, plural, name) = match rest {
        ["namespaces", ns, plural] => (Some(*ns), *plural, None),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name)),
        [plural] => (None, *plural, None),
        [plural, name] => (None, *plural, Some(*name)),
        _ => return None,
    };
    let res = RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)?;
    let resource = RESOURCES.get(res)?;
    // Cluster-scoped objects have no namespaced URL; namespaced ones are read across all
    // namespaces only as collections.
    if (namespace.is_some() && !resource.namespaced)
        || (resource.namespaced && namespace.is_none() && name.is_some())
    {
        return None;
    }
    Some(Target {
        res,
        resource,
        namespace: namespace.map(str::to_string),
        name: name.map(str::to_string),
    })
}

fn query(req: &Request<Incoming>) -> HashMap<String, String> {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (!k.is_empty()).then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

fn verb(method: &Method, t: &Target, q: &HashMap<String, String>) -> &'static str {
    let watch = q.get("watch").is_some_and(|w| w == "1" || w == "true");
    match (method.as_str(), t.name.is_some()) {
        ("GET", _) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("DELETE", _) => "delete",
        ("PATCH", _) => "patch",
        _ => "unknown",
    }
}

/// Answers one request.
pub async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let authorized = {
        let token = shared.token.read().unwrap_or_else(PoisonError::into_inner);
        req.headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "))
            .is_some_and(|t| t.trim() == token.as_str())
    };
    let path: Vec<&str> = req
        .uri()
        .path()
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let target = target(&path);
    let q = query(&req);
    let verb = target.as_ref().map_or("get", |t| verb(req.method(), t, &q));
    let response = if !authorized {
        status(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "Unauthorized",
            None,
        )
    } else if path == ["openapi", "v2"] {
        let mut r =
            Response::new(Full::new(Bytes::from(resources::openapi_v2_protobuf())).boxed_unsync());
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static(
                "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            ),
        );
        r
    } else if let Some(doc) = discovery(&path, &shared.address) {
        match doc {
            Some(d) if req.method() == Method::GET => json_response(StatusCode::OK, &d),
            _ => not_found_path(req.uri().path()),
        }
    } else if let Some(t) = &target {
        resource_request(&shared, req, t, verb, &q).await
    } else {
        not_found_path(req.uri().path())
    };
    if let Some(t) = &target {
        let mut log = shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        log.push(RequestRecord {
            verb: verb.to_string(),
            api_group: t.resource.group.to_string(),
            resource: t.resource.plural.to_string(),
            namespace: t.namespace.clone(),
            status: response.status().as_u16(),
        });
    }
    Ok(response)
}

fn not_found_path(path: &str) -> Response<Body> {
    let msg = format!("the server could not find the requested resource ({path})");
    status(StatusCode::NOT_FOUND, "NotFound", &msg, None)
}

async fn resource_request(
    shared: &Shared,
    req: Request<Incoming>,
    t: &Target,
    verb: &str,
    q: &HashMap<String, String>,
) -> Response<Body> {
    if let Some(rbac) = &shared.rbac {
        let a = Attributes {
            verb,
            group: t.resource.group,
            resource: t.resource.plural,
            namespace: t.namespace.as_deref(),
            name: t.name.as_deref(),
        };
        if !rbac.allows(&a) {
            let msg = forbidden_message(&shared.user, &a);
            return status(StatusCode::FORBIDDEN, "Forbidden", &msg, Some(t.details()));
        }
    }
    let metadata_only = req
        .headers()
        .get(hyper::header::ACCEPT)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|a| a.contains("as=PartialObjectMetadata"));
    match verb {
        "get" => get(shared, t, metadata_only),
        "list" => list(shared, t, q, metadata_only),
        "watch" => watch(shared, t, q, metadata_only),
        "create" | "update" => match write::read_object(req).await {
            Ok(obj) => write::write(shared, t, obj, verb == "update"),
            Err(r) => r,
        },
        "delete" => write::delete(shared, t),
        _ => {
            let msg =
                format!("the server does not allow this method on the requested resource ({verb})");
            status(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                &msg,
                Some(t.details()),
            )
        }
    }
}

fn get(shared: &Shared, t: &Target, metadata_only: bool) -> Response<Body> {
    match shared.store().get(&t.key()) {
        Some(o) if metadata_only => json_response(StatusCode::OK, &partial_metadata(o)),
        Some(o) => json_response(StatusCode::OK, o),
        None => t.not_found(),
    }
}

fn expired(message: String) -> Response<Body> {
    status(StatusCode::GONE, "Expired", &message, None)
}

/// The continue token: opaque to clients, here the list's version and the last key sent.
fn encode_continue(rv: u64, key: &Key) -> String {
    let plain = format!("{rv}\n{}\n{}", key.1, key.2);
    plain.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_continue(res: usize, token: &str) -> Option<(u64, Key)> {
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| {
            token
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let mut parts = text.splitn(3, '\n');
    let rv = parts.next()?.parse().ok()?;
    let ns = parts.next()?.to_string();
    let name = parts.next()?.to_string();
    Some((rv, (res, ns, name)))
}

fn list(
    shared: &Shared,
    t: &Target,
    q: &HashMap<String, String>,
    metadata_only: bool,
) -> Response<Body> {
    let store = shared.store();
    let limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let (list_rv, after) = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => match decode_continue(t.res, c) {
            Some((rv, _)) if rv < store.oldest() => {
                return expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".into());
            }
            Some((rv, key)) => (rv, Some(key)),
            None => {
                return status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    &format!("continue key is not valid: {c}"),
                    None,
                );
            }
        },
        None => (store.rv(), None),
    };
    let asked = q.get("resourceVersion").and_then(|v| v.parse::<u64>().ok());
    let exact = q.get("resourceVersionMatch").is_some_and(|m| m == "Exact");
    if let Some(n) = asked.filter(|n| *n != 0 && *n < store.oldest() && exact) {
        return expired(format!(
            "too old resource version: {n} ({})",
            store.oldest()
        ));
    }
    let (items, next) = store.list(t.res, t.namespace.as_deref(), after.as_ref(), limit);
    let mut meta = json!({"resourceVersion": list_rv.to_string()});
    if let Some(k) = &next {
        meta["continue"] = json!(encode_continue(list_rv, k));
    }
    let (kind, api_version, items) = if metadata_only {
        let items = items.iter().map(partial_metadata).collect();
        (
            "PartialObjectMetadataList".to_string(),
            "meta.k8s.io/v1".to_string(),
            items,
        )
    } else {
        (t.resource.list_kind(), t.resource.api_version(), items)
    };
    let doc = json!({"kind": kind, "apiVersion": api_version, "metadata": meta, "items": items});
    json_response(StatusCode::OK, &doc)
}

fn watch(
    shared: &Shared,
    t: &Target,
    q: &HashMap<String, String>,
    metadata_only: bool,
) -> Response<Body> {
    let shape = Shape {
        res: t.res,
        resource: t.resource,
        namespace: t.namespace.clone(),
        metadata_only,
    };
    let asked = q.get("resourceVersion").map(String::as_str).unwrap_or("");
    let initial_events = q.get("sendInitialEvents").is_some_and(|v| v == "true");
    let bookmarks = q
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true" || v == "1");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs);
    let store = shared.store();
    let start = if asked.is_empty() || asked == "0" || initial_events {
        // From "any" version: the current objects as ADDED, then what changes.
        let (items, _) = store.list(t.res, t.namespace.as_deref(), None, None);
        let initial = items
            .iter()
            .map(|o| line("ADDED", shape.object(o)))
            .collect();
        Start {
            initial,
            rx: store.subscribe(),
            rv: store.rv(),
            initial_end_bookmark: initial_events && bookmarks,
        }
    } else {
        let Ok(n) = asked.parse::<u64>() else {
            let msg = format!("invalid resourceVersion {asked:?}");
            return status(StatusCode::BAD_REQUEST, "BadRequest", &msg, None);
        };
        match store.watch_from(t.res, n) {
            Ok((past, rx)) => {
                let initial = past
                    .iter()
                    .filter(|e| t.namespace.as_ref().is_none_or(|ns| *ns == e.namespace))
                    .map(|e| line(e.kind, shape.object(&e.object)))
                    .collect();
                Start {
                    initial,
                    rx,
                    rv: store.rv(),
                    initial_end_bookmark: false,
                }
            }
            Err(StoreError::Expired { oldest }) => {
                // A watch is answered 200 and told in its first (and last) event.
                let msg = format!("too old resource version: {n} ({oldest})");
                let obj = status_object(StatusCode::GONE, "Expired", &msg, None);
                return stream(Watch::single(shape, line("ERROR", obj)));
            }
            Err(e) => {
                let msg = format!("cannot watch from {n}: {e:?}");
                return status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    &msg,
                    None,
                );
            }
        }
    };
    drop(store);
    let bookmark = bookmarks.then_some(shared.bookmark_interval);
    stream(Watch::new(shape, start, bookmark, timeout))
}

fn stream(w: Watch) -> Response<Body> {
    let frames = futures::stream::unfold(w, Watch::next);
    let mut r = Response::new(StreamBody::new(frames).boxed_unsync());
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_map_to_resources_as_on_the_real_server() {
        let t = |p: &str| target(&p.split('/').filter(|s| !s.is_empty()).collect::<Vec<_>>());
        assert_eq!(t("/api/v1/nodes").map(|t| t.resource.kind), Some("Node"));
        let s = t("/api/v1/namespaces/calico-system/secrets/pw").unwrap();
        assert_eq!(
            (s.namespace.as_deref(), s.name.as_deref()),
            (Some("calico-system"), Some("pw"))
        );
        assert!(t("/api/v1/secrets").is_some());
        assert!(t("/api/v1/secrets/pw").is_none());
        assert!(t("/api/v1/namespaces/x/nodes").is_none());
        assert!(t("/apis/crd.projectcalico.org/v1/ippools/default-ipv4-ippool").is_some());
        assert!(t("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices").is_some());
        assert!(t("/apis/apps/v1/deployments").is_none());
    }

    #[test]
    fn continue_tokens_round_trip() {
        let k = (3, "ns".to_string(), "a-b".to_string());
        let tok = encode_continue(42, &k);
        assert_eq!(decode_continue(3, &tok), Some((42, k)));
        assert_eq!(decode_continue(3, "zz"), None);
    }
}
