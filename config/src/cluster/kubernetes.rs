//! Kubernetes' own kinds in a snapshot (`Secret`, `Service`, `EndpointSlice`, which
//! the Kubernetes datastore adds): accepted silently, checked for their API version
//! and name, and handed to [`super::secrets`] and [`super::services`].

use std::collections::BTreeSet;

use super::parse::RawDoc;
use super::{secrets, services, Cluster};
use crate::error::ConfigError;

/// Each kind with the API version Kubernetes serves it under.
const KINDS: &[(&str, &str)] = &[
    ("Secret", "v1"),
    ("Service", "v1"),
    ("EndpointSlice", "discovery.k8s.io/v1"),
];

/// One of Kubernetes' kinds that tern reads.
pub(super) fn is_kubernetes(d: &RawDoc) -> bool {
    KINDS.iter().any(|(k, _)| *k == d.header.kind)
}

/// Reads every Kubernetes document into `c`, appending problems to `errors`.
pub(super) fn build(docs: &[RawDoc], c: &mut Cluster, errors: &mut Vec<ConfigError>) {
    let mut seen = BTreeSet::new();
    for d in docs {
        let kind = d.header.kind.as_str();
        let Some((_, version)) = KINDS.iter().find(|(k, _)| *k == kind) else {
            continue;
        };
        if d.header.api_version != *version {
            errors.push(d.error(
                "apiVersion",
                format!(
                    "{:?} is not the API version of a {kind}; use {version}",
                    d.header.api_version
                ),
            ));
            continue;
        }
        let m = &d.header.metadata;
        if m.name.is_empty() {
            errors.push(d.error("metadata.name", "missing: every resource needs a name"));
            continue;
        }
        if !seen.insert((kind, m.namespace.as_str(), m.name.as_str())) {
            errors.push(d.error(
                "metadata.name",
                format!("a second {kind} {}/{}", m.namespace, m.name),
            ));
            continue;
        }
        match kind {
            "Secret" => secrets::secret(d, &mut c.secrets, errors),
            "Service" => c.services.extend(services::service(d, errors)),
            _ => c
                .endpoint_slices
                .extend(services::endpoint_slice(d, errors)),
        }
    }
}

#[cfg(test)]
#[path = "kubernetes_tests.rs"]
mod tests;
