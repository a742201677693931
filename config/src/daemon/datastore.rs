//! `tern.yaml`'s `datastore:` block merged with calico-node's environment, and the
//! checks that make a wrong combination an error naming the field before anything
//! connects: an `https://` endpoint without a CA, TLS files with `http://` endpoints,
//! a certificate without its key, a password without a user.

use std::path::PathBuf;

use serde::Deserialize;

use super::env::{self, pick, Environment, Source};
use super::{Datastore, EtcdAuth, EtcdPassword, EtcdTls, Password};
use crate::error::ConfigError;

/// The datastore when neither `tern.yaml` nor `DATASTORE_TYPE` names one.
const DEFAULT_TYPE: &str = "file";
/// The file store's default file, next to `tern.yaml`.
const DEFAULT_PATH: &str = "cluster.yaml";

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDatastore {
    #[serde(rename = "type")]
    kind: Option<String>,
    path: Option<PathBuf>,
    endpoints: Option<Vec<String>>,
    tls: Option<RawTls>,
    username: Option<String>,
    password_file: Option<PathBuf>,
    kubeconfig: Option<PathBuf>,
    namespace: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTls {
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

/// Settings and their sources, in the order `check-config` shows them.
pub(super) type Sources = Vec<(String, Source)>;

/// Builds the datastore from `raw` (absent: `datastore:` not in `tern.yaml`) and `env`,
/// recording where each setting came from in `sources`.
pub(super) fn resolve(
    raw: Option<RawDatastore>,
    env: &dyn Environment,
    file: &str,
    sources: &mut Sources,
) -> Result<Datastore, ConfigError> {
    let err = |field: &str, reason: String| ConfigError::field(file, field, reason);
    let raw = raw.unwrap_or_default();
    let (kind, source) = pick(raw.kind.clone(), env, env::DATASTORE_TYPE, |v| v)
        .unwrap_or_else(|| (DEFAULT_TYPE.to_string(), Source::Default));
    let kind_field = match source {
        Source::Env(var) => var.to_string(),
        _ => "datastore.type".to_string(),
    };
    sources.push(("datastore.type".into(), source));
    if ["file", "etcdv3", "kubernetes"].contains(&kind.as_str()) {
        // Fields of another type are mistakes: say which type they belong to.
        if let Some((field, owner)) = foreign_field(&raw, &kind) {
            return Err(err(field, format!("only for type {owner}, not {kind}")));
        }
    }
    match kind.as_str() {
        "file" => {
            let (path, source) = match raw.path {
                Some(p) => (p, Source::File),
                None => (PathBuf::from(DEFAULT_PATH), Source::Default),
            };
            sources.push(("datastore.path".into(), source));
            Ok(Datastore::File { path })
        }
        "etcdv3" => etcd(raw, env, file, sources),
        "kubernetes" => {
            let kubeconfig = pick(raw.kubeconfig, env, env::KUBECONFIG, PathBuf::from);
            let namespace = pick(raw.namespace, env, env::NAMESPACE, |v| v.trim().to_string());
            match &kubeconfig {
                Some((_, source)) => sources.push(("datastore.kubeconfig".into(), *source)),
                // In-cluster configuration: the store's default.
                None => sources.push(("datastore.kubeconfig".into(), Source::Default)),
            }
            record(sources, "datastore.namespace", &namespace);
            if let Some((ns, source)) = &namespace {
                check_namespace(ns).map_err(|r| err(&setting(source, "datastore.namespace"), r))?;
            }
            Ok(Datastore::Kubernetes {
                kubeconfig: kubeconfig.map(|(k, _)| k),
                namespace: namespace.map(|(n, _)| n),
            })
        }
        other => Err(err(
            &kind_field,
            format!("{other:?} is not a datastore; use file, etcdv3 or kubernetes"),
        )),
    }
}

/// The first field `raw` sets that belongs to a datastore type other than `kind`, with
/// that type.
fn foreign_field(raw: &RawDatastore, kind: &str) -> Option<(&'static str, &'static str)> {
    let fields = [
        ("datastore.path", raw.path.is_some(), "file"),
        ("datastore.endpoints", raw.endpoints.is_some(), "etcdv3"),
        ("datastore.tls", raw.tls.is_some(), "etcdv3"),
        ("datastore.username", raw.username.is_some(), "etcdv3"),
        (
            "datastore.password_file",
            raw.password_file.is_some(),
            "etcdv3",
        ),
        (
            "datastore.kubeconfig",
            raw.kubeconfig.is_some(),
            "kubernetes",
        ),
        ("datastore.namespace", raw.namespace.is_some(), "kubernetes"),
    ];
    fields
        .into_iter()
        .find(|(_, set, owner)| *set && *owner != kind)
        .map(|(field, _, owner)| (field, owner))
}

/// The etcd settings: endpoints, TLS files, user and password.
fn etcd(
    raw: RawDatastore,
    env: &dyn Environment,
    file: &str,
    sources: &mut Sources,
) -> Result<Datastore, ConfigError> {
    let err = |field: &str, reason: String| ConfigError::field(file, field, reason);
    let (endpoints, source) = pick(raw.endpoints, env, env::ETCD_ENDPOINTS, |v| {
        env::split_endpoints(&v)
    })
    .unwrap_or_else(|| (Vec::new(), Source::Default));
    let field = setting(&source, "datastore.endpoints");
    sources.push(("datastore.endpoints".into(), source));
    if endpoints.is_empty() {
        return Err(err(
            &field,
            "etcdv3 needs at least one endpoint, e.g. https://127.0.0.1:2379 (or ETCD_ENDPOINTS)"
                .into(),
        ));
    }
    for e in &endpoints {
        if !(e.starts_with("http://") || e.starts_with("https://")) {
            return Err(err(
                &field,
                format!("{e:?} is not an http:// or https:// URL"),
            ));
        }
    }
    let https: Vec<usize> = (0..endpoints.len())
        .filter(|i| endpoints.get(*i).is_some_and(|e| e.starts_with("https://")))
        .collect();
    if !https.is_empty() && https.len() != endpoints.len() {
        return Err(err(
            &field,
            format!(
                "mixes http:// and https:// ({}): one etcd cluster speaks one of them",
                endpoints.join(", ")
            ),
        ));
    }

    let raw_tls = raw.tls.unwrap_or_default();
    let ca = pick(raw_tls.ca, env, env::ETCD_CA_CERT_FILE, PathBuf::from);
    let cert = pick(raw_tls.cert, env, env::ETCD_CERT_FILE, PathBuf::from);
    let key = pick(raw_tls.key, env, env::ETCD_KEY_FILE, PathBuf::from);
    record(sources, "datastore.tls.ca", &ca);
    record(sources, "datastore.tls.cert", &cert);
    record(sources, "datastore.tls.key", &key);
    let tls = tls(&endpoints, ca, cert, key).map_err(|(f, r)| err(&f, r))?;

    let username = pick(raw.username, env, env::ETCD_USERNAME, |v| v);
    let password = match raw.password_file {
        Some(p) => Some((EtcdPassword::File(p), Source::File)),
        None => env.var(env::ETCD_PASSWORD).map(|v| {
            (
                EtcdPassword::Value(Password(v)),
                Source::Env(env::ETCD_PASSWORD),
            )
        }),
    };
    record(sources, "datastore.username", &username);
    record(sources, "datastore.password", &password);
    let auth = match (username, password) {
        (None, None) => None,
        (Some((username, _)), Some((password, _))) => Some(EtcdAuth { username, password }),
        (Some((_, source)), None) => {
            return Err(err(
                &setting(&source, "datastore.username"),
                "a user needs a password: set datastore.password_file (or ETCD_PASSWORD)".into(),
            ))
        }
        (None, Some((_, source))) => {
            return Err(err(
                &setting(&source, "datastore.password_file"),
                "a password needs a user: set datastore.username (or ETCD_USERNAME)".into(),
            ))
        }
    };
    Ok(Datastore::Etcdv3 {
        endpoints,
        tls,
        auth,
    })
}

/// The TLS settings for `endpoints`, or the field and reason they are wrong.
fn tls(
    endpoints: &[String],
    ca: Option<(PathBuf, Source)>,
    cert: Option<(PathBuf, Source)>,
    key: Option<(PathBuf, Source)>,
) -> Result<Option<EtcdTls>, (String, String)> {
    let https = endpoints.iter().any(|e| e.starts_with("https://"));
    let first = endpoints.first().map(String::as_str).unwrap_or_default();
    if !https {
        if let Some((_, source)) = ca.as_ref().or(cert.as_ref()).or(key.as_ref()) {
            return Err((
                setting(source, "datastore.tls"),
                format!(
                    "TLS files are set but datastore.endpoints[0] is {first}: use https:// endpoints, or remove the TLS settings"
                ),
            ));
        }
        return Ok(None);
    }
    let Some((ca, _)) = ca else {
        return Err((
            "datastore.tls".into(),
            format!(
                "datastore.endpoints[0] is {first} but datastore.tls.ca is not set (or ETCD_CA_CERT_FILE): https needs the CA that signed etcd's certificate"
            ),
        ));
    };
    let (cert, key) =
        match (cert, key) {
            (Some((c, _)), Some((k, _))) => (Some(c), Some(k)),
            (None, None) => (None, None),
            (Some((_, source)), None) => {
                return Err((
                    setting(&source, "datastore.tls.cert"),
                    "a client certificate needs its key: set datastore.tls.key (or ETCD_KEY_FILE)"
                        .into(),
                ))
            }
            (None, Some((_, source))) => return Err((
                setting(&source, "datastore.tls.key"),
                "a client key needs its certificate: set datastore.tls.cert (or ETCD_CERT_FILE)"
                    .into(),
            )),
        };
    Ok(Some(EtcdTls { ca, cert, key }))
}

/// The field to name in an error: the variable when the value came from one.
fn setting(source: &Source, field: &str) -> String {
    match source {
        Source::Env(var) => format!("{field} (from {var})"),
        _ => field.to_string(),
    }
}

fn record<T>(sources: &mut Sources, name: &str, value: &Option<(T, Source)>) {
    if let Some((_, source)) = value {
        sources.push((name.to_string(), *source));
    }
}

/// Kubernetes namespaces are DNS-1123 labels.
fn check_namespace(ns: &str) -> Result<(), String> {
    let ok = !ns.is_empty()
        && ns.len() <= 63
        && ns
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !ns.starts_with('-')
        && !ns.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{ns:?} is not a namespace name (lower-case letters, digits and '-', at most 63)"
        ))
    }
}
