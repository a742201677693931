//! Kubernetes `Secret`s of the snapshot, for `secretKeyRef` passwords.
//!
//! The Kubernetes datastore hands over the Secrets that BGPPeers name; a password is
//! read from them first and from the mounted secrets directory only when the snapshot
//! has no Secret of that name (the file and etcd datastores have none). Values are
//! decoded once, kept as redacted [`Secret`]s, and a value that cannot be used is kept
//! as the reason why (naming the secret and key, never the value) so only the
//! sessions that use it fail.

use std::collections::BTreeMap;

use super::parse::RawDoc;
use super::{PasswordSource, Secret};
use crate::error::ConfigError;
use crate::model::KubeSecret;

/// The snapshot's Secrets by name. Debug shows names and keys only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Secrets(BTreeMap<String, StoredSecret>);

/// One Secret: its namespace (for messages) and its decoded values.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StoredSecret {
    namespace: String,
    data: BTreeMap<String, Result<Secret, String>>,
}

impl Secrets {
    /// No Secret documents at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The password `source` names, when it is a `secretKeyRef` whose Secret is in the
    /// snapshot; `None` sends the caller to the secret's mounted file instead.
    pub fn lookup(&self, source: &PasswordSource) -> Option<Result<Secret, String>> {
        let PasswordSource::SecretKeyRef { name, key } = source else {
            return None;
        };
        let s = self.0.get(name)?;
        let what = format!("secret {}/{name} key {key}", s.namespace);
        Some(match s.data.get(key) {
            None => Err(format!(
                "{what}: no such key in the Secret (it has: {})",
                if s.data.is_empty() {
                    "no keys".to_string()
                } else {
                    s.data.keys().cloned().collect::<Vec<_>>().join(", ")
                }
            )),
            Some(Err(reason)) => Err(format!("{what}: {reason}")),
            Some(Ok(v)) => super::check_password_length(v.clone(), &what),
        })
    }
}

/// Reads one Secret document into `secrets`.
pub(super) fn secret(d: &RawDoc, secrets: &mut Secrets, errors: &mut Vec<ConfigError>) {
    let s: KubeSecret = match d.parse_kubernetes() {
        Ok(s) => s,
        Err(e) => {
            errors.push(e);
            return;
        }
    };
    let name = s.metadata.name.clone();
    let namespace = s.metadata.namespace.clone();
    if let Some(first) = secrets.0.get(&name) {
        // secretKeyRef has no namespace: two of one name would make the password
        // depend on which one was read last.
        errors.push(d.error(
            "metadata.name",
            format!(
                "a second Secret named {name:?} (the first is in namespace {:?}); BGPPeer secretKeyRef names a Secret without a namespace",
                first.namespace
            ),
        ));
        return;
    }
    let mut data: BTreeMap<String, Result<Secret, String>> =
        s.data.into_iter().map(|(k, v)| (k, decode(&v))).collect();
    for (k, v) in s.string_data {
        data.insert(k, Ok(Secret(v)));
    }
    secrets.0.insert(name, StoredSecret { namespace, data });
}

/// A `data` value: base64 of UTF-8 text (the reason never quotes the value).
fn decode(b64: &str) -> Result<Secret, String> {
    let bytes = serde_json::from_value::<k8s_openapi::ByteString>(serde_json::Value::from(b64))
        .map_err(|_| "the value is not valid base64".to_string())?;
    String::from_utf8(bytes.0)
        .map(Secret)
        .map_err(|_| "the decoded value is not UTF-8 text".to_string())
}
