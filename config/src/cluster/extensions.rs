//! tern's own settings on Calico resources. Calico's schemas have no field for them
//! (calicoctl refuses unknown fields, the CRDs' structural schemas prune them), so they
//! are `metadata.annotations` under one prefix, `tern/`, and the same resource serves
//! Calico and tern unchanged. The older spelling inside the spec (`spec.holdTime`,
//! `spec.families`, `spec.password.file`, ...) still works with a deprecation warning;
//! when both are set the annotation wins. Values are validated as the spec's were.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::parse::RawDoc;
use super::{AddressFamily, ConfigError, PasswordSource, Warning};
use crate::model::PasswordSpec;

/// The prefix of every annotation tern reads.
pub const PREFIX: &str = "tern/";
/// BGPPeer: hold time (Go duration). Was `spec.holdTime`.
pub const HOLD_TIME: &str = "tern/hold-time";
/// BGPPeer: families the session carries (`IPv4`, `IPv6`, comma-separated). Was
/// `spec.families`.
pub const FAMILIES: &str = "tern/families";
/// BGPPeer: file holding the password. Was `spec.password.file`.
pub const PASSWORD_FILE: &str = "tern/password-file";
/// BGPPeer: environment variable holding the password. Was `spec.password.env`.
pub const PASSWORD_ENV: &str = "tern/password-env";
/// BGPConfiguration `default`: mesh hold time. Was `spec.nodeMeshHoldTime`.
pub const NODE_MESH_HOLD_TIME: &str = "tern/node-mesh-hold-time";
/// BGPConfiguration `default`: mesh keepalive. Was `spec.nodeMeshKeepaliveTime`.
pub const NODE_MESH_KEEPALIVE_TIME: &str = "tern/node-mesh-keepalive-time";
/// BGPConfiguration `default`: mesh password file. Was `spec.nodeMeshPassword.file`.
pub const NODE_MESH_PASSWORD_FILE: &str = "tern/node-mesh-password-file";
/// BGPConfiguration `default`: mesh password variable. Was `spec.nodeMeshPassword.env`.
pub const NODE_MESH_PASSWORD_ENV: &str = "tern/node-mesh-password-env";

/// The BGPConfiguration annotations (only the `default` one applies them).
pub(super) const MESH_ANNOTATIONS: &[&str] = &[
    NODE_MESH_HOLD_TIME,
    NODE_MESH_KEEPALIVE_TIME,
    NODE_MESH_PASSWORD_FILE,
    NODE_MESH_PASSWORD_ENV,
];

/// The annotations tern reads on `kind`.
fn known(kind: &str) -> &'static [&'static str] {
    match kind {
        "BGPPeer" => &[HOLD_TIME, FAMILIES, PASSWORD_FILE, PASSWORD_ENV],
        "BGPConfiguration" => MESH_ANNOTATIONS,
        _ => &[],
    }
}

/// The field path that errors and warnings about annotation `key` name.
pub(super) fn field(key: &str) -> String {
    format!("metadata.annotations.{key}")
}

/// Warns about each `tern/` annotation that tern does not read on this kind (a typo
/// would otherwise be silently without effect).
pub(super) fn warn_unknown(d: &RawDoc, warnings: &mut Vec<Warning>) {
    let known = known(&d.header.kind);
    for key in d.header.metadata.annotations.keys() {
        if key.starts_with(PREFIX) && !known.contains(&key.as_str()) {
            let hint = if known.is_empty() {
                format!("tern reads no annotation on a {}", d.header.kind)
            } else {
                format!("tern reads {} here", known.join(", "))
            };
            warnings.push(d.warning(
                &field(key),
                format!("not a tern annotation ({hint}); ignored"),
            ));
        }
    }
}

/// The deprecation warning for spec field `old_field`, whose annotation is `key`.
fn deprecated(d: &RawDoc, old_field: &str, key: &str, annotation_set: bool) -> Warning {
    let mut message = format!(
        "deprecated: tern's extension inside Calico's spec, which calicoctl and the CRD schema refuse or drop; use the annotation `{key}` instead"
    );
    if annotation_set {
        message.push_str(&format!(
            "; the annotation `{key}` is also set and wins, so this field is ignored"
        ));
    }
    d.warning(old_field, message)
}

/// One of tern's settings with a text value: from annotation `key` or, deprecated,
/// from spec field `old_field`. Returns the field to name in errors and the value, or
/// `old_field` and `None` when neither is set.
pub(super) fn text_setting(
    d: &RawDoc,
    annotations: &BTreeMap<String, String>,
    (key, old_field): (&str, &str),
    old: &Option<String>,
    warnings: &mut Vec<Warning>,
) -> (String, Option<String>) {
    let annotated = annotations.get(key);
    if old.is_some() {
        warnings.push(deprecated(d, old_field, key, annotated.is_some()));
    }
    match annotated {
        Some(v) => (field(key), Some(v.clone())),
        None => (old_field.to_string(), old.clone()),
    }
}

/// A BGPPeer's families: `tern/families` (comma-separated) or, deprecated,
/// `spec.families`; sorted and without duplicates.
pub(super) fn families(
    d: &RawDoc,
    annotations: &BTreeMap<String, String>,
    old: &[String],
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) -> Vec<AddressFamily> {
    let annotated = annotations.get(FAMILIES);
    if !old.is_empty() {
        warnings.push(deprecated(
            d,
            "spec.families",
            FAMILIES,
            annotated.is_some(),
        ));
    }
    let parse = |f: &str| match f.to_ascii_lowercase().as_str() {
        "ipv4" => Some(AddressFamily::Ipv4),
        "ipv6" => Some(AddressFamily::Ipv6),
        _ => None,
    };
    let mut out = Vec::new();
    match annotated {
        Some(list) => {
            let items: Vec<&str> = list.split(',').map(str::trim).collect();
            if items.iter().all(|i| i.is_empty()) {
                errors.push(d.error(
                    &field(FAMILIES),
                    "empty: list IPv4, IPv6 or both (\"IPv4,IPv6\"), or leave the annotation out",
                ));
            }
            for f in items.into_iter().filter(|i| !i.is_empty()) {
                match parse(f) {
                    Some(fam) => out.push(fam),
                    None => errors.push(d.error(
                        &field(FAMILIES),
                        format!("{f:?} in {list:?}: use IPv4 or IPv6, comma-separated"),
                    )),
                }
            }
        }
        None => {
            for (i, f) in old.iter().enumerate() {
                match parse(f) {
                    Some(fam) => out.push(fam),
                    None => errors.push(d.error(
                        &format!("spec.families[{i}]"),
                        format!("{f:?}: use IPv4 or IPv6"),
                    )),
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// A password: the `file` / `env` annotations (`keys`) when either is set, which tern
/// uses instead of anything in `spec_field` (Calico keeps reading its secretKeyRef);
/// otherwise `spec_field` as before, its `file` / `env` being deprecated spellings.
pub(super) fn password(
    d: &RawDoc,
    annotations: &BTreeMap<String, String>,
    (file_key, env_key): (&str, &str),
    spec_field: &str,
    spec: &Option<PasswordSpec>,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) -> Option<PasswordSource> {
    let file = annotations.get(file_key);
    let env = annotations.get(env_key);
    let annotated = file.is_some() || env.is_some();
    if let Some(p) = spec {
        if p.file.is_some() {
            let w = deprecated(d, &format!("{spec_field}.file"), file_key, annotated);
            warnings.push(w);
        }
        if p.env.is_some() {
            let w = deprecated(d, &format!("{spec_field}.env"), env_key, annotated);
            warnings.push(w);
        }
    }
    match (file, env) {
        (None, None) => super::check::password(d, spec_field, spec, errors),
        (Some(_), Some(_)) => {
            errors.push(d.error(
                &field(file_key),
                format!("give only one of the annotations {file_key} and {env_key}"),
            ));
            None
        }
        (Some(f), None) if f.trim().is_empty() => {
            errors.push(d.error(
                &field(file_key),
                "empty: give the path of the password file",
            ));
            None
        }
        (None, Some(v)) if v.trim().is_empty() => {
            errors.push(d.error(
                &field(env_key),
                "empty: give the name of the environment variable holding the password",
            ));
            None
        }
        (Some(f), None) => Some(PasswordSource::File(PathBuf::from(f.trim()))),
        (None, Some(v)) => Some(PasswordSource::Env(v.trim().to_string())),
    }
}

#[cfg(test)]
mod tests;
