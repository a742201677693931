//! The key map: the documents as of one etcd revision, kept current by whole watch
//! responses, with the size limits checked before any value is parsed. Plain data and
//! functions, unit-tested without etcd.

use std::collections::BTreeMap;

use etcd_client::WatchResponse;

use super::convert::{check_value_size, convert, key_kind};
use super::MAX_MESSAGE_BYTES;
use crate::datastore::Document;

/// One key change from a watch response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeyChange {
    pub(super) key: String,
    /// The new value; `None` when the key was deleted.
    pub(super) value: Option<Vec<u8>>,
    /// The revision of the change.
    pub(super) revision: i64,
}

/// A watch response reduced to what the store decides on, so that the decision is a
/// plain function (the client's response type cannot be built outside the client).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct WatchBatch {
    pub(super) canceled: bool,
    pub(super) compact_revision: i64,
    pub(super) cancel_reason: String,
    pub(super) changes: Vec<KeyChange>,
}

impl WatchBatch {
    pub(super) fn from_response(response: &WatchResponse) -> WatchBatch {
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
pub(super) enum WatchStep {
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
pub(super) struct ReadLimits {
    /// Largest value of a key tern reads.
    pub(super) value_bytes: u64,
    /// Largest sum of the values of the keys tern reads. [`MAX_MESSAGE_BYTES`]: a key
    /// space larger than that could not be re-listed (the list is one message), so a
    /// watch must not build one either, one value at a time.
    pub(super) total_bytes: u64,
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
pub(super) struct KeySpace {
    pub(super) documents: BTreeMap<String, Document>,
    /// Size of the etcd value behind each document, for the running total.
    pub(super) value_bytes: BTreeMap<String, u64>,
    /// The sum of `value_bytes`.
    pub(super) total_bytes: u64,
    pub(super) revision: i64,
    pub(super) limits: ReadLimits,
}

impl KeySpace {
    /// The key map of a complete read at `revision`. Each value's size and the running
    /// total are checked before the value is parsed; the first one over refuses the
    /// whole read.
    pub(super) fn from_entries(
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
    pub(super) fn put(&mut self, key: String, value: &[u8]) -> Result<bool, Refused> {
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
    pub(super) fn remove(&mut self, key: &str) -> bool {
        if let Some(bytes) = self.value_bytes.remove(key) {
            self.total_bytes = self.total_bytes.saturating_sub(bytes);
        }
        self.documents.remove(key).is_some()
    }

    /// Applies one whole watch response. Changes are applied in order (a key written
    /// twice in one response ends with its last value), all before anything is sent.
    /// A refused value ends the watch with the space half-applied; the store then
    /// throws the space away and re-lists, so that half is never sent.
    pub(super) fn apply(&mut self, batch: WatchBatch) -> WatchStep {
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
    pub(super) fn documents(&self) -> Vec<Document> {
        self.documents.values().cloned().collect()
    }

    pub(super) fn revision(&self) -> i64 {
        self.revision
    }

    pub(super) fn len(&self) -> usize {
        self.documents.len()
    }
}
