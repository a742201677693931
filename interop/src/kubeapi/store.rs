//! The stand-in's object store: objects as JSON keyed by (resource, namespace, name), one
//! global resourceVersion counter (like etcd's revision behind a real API server), and a
//! bounded history of change events that watches resume from. Forgetting that history
//! (`compact`) is what makes an old resourceVersion answer 410 Gone.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::sync::broadcast;

use super::resources::{Resource, RESOURCES};

/// An object's place: index into [`RESOURCES`], namespace (`""` when cluster-scoped), name.
pub type Key = (usize, String, String);

/// One change, as a watch reports it.
#[derive(Debug, Clone)]
pub struct Event {
    /// The resourceVersion the change made.
    pub rv: u64,
    /// Index into [`RESOURCES`].
    pub res: usize,
    /// The object's namespace (`""` when cluster-scoped).
    pub namespace: String,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: &'static str,
    /// The object after the change (before it, for `DELETED`).
    pub object: Value,
}

/// Where a watch resumes: the kept events after its version, and the live ones.
pub type Resume = (Vec<Arc<Event>>, broadcast::Receiver<Arc<Event>>);

/// Why the store refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// No such object.
    NotFound,
    /// Create of an object that exists.
    AlreadyExists,
    /// The resourceVersion asked for is older than the history kept.
    Expired {
        /// The oldest resourceVersion still served.
        oldest: u64,
    },
    /// The object is not one the store can hold.
    Invalid(String),
}

/// The store. Callers hold it behind a mutex; every method is short.
#[derive(Debug)]
pub struct Store {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Arc<Event>>,
    history_len: usize,
    /// Events with `rv > oldest` are all in `history`; older ones are forgotten.
    oldest: u64,
    uid_seed: u64,
    tx: broadcast::Sender<Arc<Event>>,
}

impl Store {
    /// An empty store keeping `history_len` events (at least one).
    pub fn new(history_len: usize) -> Store {
        let (tx, _) = broadcast::channel(4096);
        let uid_seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x5eed);
        Store {
            // Start above 1 so that "0" (any version) never names a real one.
            rv: 1,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_len: history_len.max(1),
            oldest: 1,
            uid_seed,
            tx,
        }
    }

    /// The current resourceVersion.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// The oldest resourceVersion a watch can still start from.
    pub fn oldest(&self) -> u64 {
        self.oldest
    }

    /// Forgets the history: starting a watch from any version before now is 410 Gone.
    pub fn compact(&mut self) {
        self.history.clear();
        self.oldest = self.rv;
    }

    /// The object at `key`.
    pub fn get(&self, key: &Key) -> Option<&Value> {
        self.objects.get(key)
    }

    /// Creates (`must_exist == Some(false)`), replaces (`Some(true)`) or upserts (`None`)
    /// `obj` of resource `res`; sets the server's metadata and records the event.
    pub fn write(
        &mut self,
        res: usize,
        mut obj: Value,
        must_exist: Option<bool>,
    ) -> Result<Value, StoreError> {
        let r = RESOURCES
            .get(res)
            .ok_or_else(|| StoreError::Invalid(format!("no resource #{res}")))?;
        let key = object_key(res, r, &mut obj)?;
        let old = self.objects.get(&key).map(|o| {
            (
                o["metadata"]["uid"].clone(),
                o["metadata"]["creationTimestamp"].clone(),
            )
        });
        match (must_exist, old.is_some()) {
            (Some(false), true) => return Err(StoreError::AlreadyExists),
            (Some(true), false) => return Err(StoreError::NotFound),
            _ => {}
        }
        // uid and creationTimestamp are the server's: kept across replaces.
        let kind = if old.is_some() { "MODIFIED" } else { "ADDED" };
        let (uid, created) = match old {
            Some(kept) => kept,
            None => (json!(self.next_uid()), json!(rfc3339(SystemTime::now()))),
        };
        self.rv += 1;
        obj["apiVersion"] = json!(r.api_version());
        obj["kind"] = json!(r.kind);
        let meta = &mut obj["metadata"];
        meta["resourceVersion"] = json!(self.rv.to_string());
        meta["uid"] = uid;
        meta["creationTimestamp"] = created;
        self.objects.insert(key.clone(), obj.clone());
        self.record(res, key.1, kind, obj.clone());
        Ok(obj)
    }

    /// Deletes the object at `key`; returns it as it was last seen.
    pub fn delete(&mut self, key: &Key) -> Result<Value, StoreError> {
        let mut obj = self.objects.remove(key).ok_or(StoreError::NotFound)?;
        self.rv += 1;
        // A DELETED event carries the object with the deletion's resourceVersion.
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.record(key.0, key.1.clone(), "DELETED", obj.clone());
        Ok(obj)
    }

    /// Up to `limit` objects of `res` (in `namespace`, or all), in key order, starting
    /// after `after`; and the key to continue from when more remain.
    pub fn list(
        &self,
        res: usize,
        namespace: Option<&str>,
        after: Option<&Key>,
        limit: Option<usize>,
    ) -> (Vec<Value>, Option<Key>) {
        let start = (res, String::new(), String::new());
        let mut items = Vec::new();
        let mut last = None;
        for (k, v) in self.objects.range(start..) {
            if k.0 != res {
                break;
            }
            if namespace.is_some_and(|ns| ns != k.1) || after.is_some_and(|a| k <= a) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                return (items, last);
            }
            items.push(v.clone());
            last = Some(k.clone());
        }
        (items, None)
    }

    /// The events of `res` after `rv` still in the history, and a receiver of the ones to
    /// come; `Expired` when events after `rv` were forgotten.
    pub fn watch_from(&self, res: usize, rv: u64) -> Result<Resume, StoreError> {
        if rv < self.oldest {
            return Err(StoreError::Expired {
                oldest: self.oldest,
            });
        }
        let past = self
            .history
            .iter()
            .filter(|e| e.rv > rv && e.res == res)
            .cloned()
            .collect();
        Ok((past, self.tx.subscribe()))
    }

    /// A receiver of the events to come (for a watch that starts with the current state).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    fn record(&mut self, res: usize, namespace: String, kind: &'static str, object: Value) {
        let e = Arc::new(Event {
            rv: self.rv,
            res,
            namespace,
            kind,
            object,
        });
        self.history.push_back(e.clone());
        while self.history.len() > self.history_len {
            if let Some(gone) = self.history.pop_front() {
                self.oldest = gone.rv;
            }
        }
        // No receivers is fine: nobody watches.
        let _ = self.tx.send(e);
    }

    fn next_uid(&mut self) -> String {
        // splitmix64: distinct, random-looking UUID-shaped ids without a UUID crate.
        let mut next = || {
            self.uid_seed = self.uid_seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.uid_seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let (a, b) = (next(), next());
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            b >> 52,
            b & 0xffff_ffff_ffff
        )
    }
}

/// The key of `obj`, a `r`: its name, and its namespace (`default` when a namespaced
/// object names none; removed from a cluster-scoped one, as the real server does).
fn object_key(res: usize, r: &Resource, obj: &mut Value) -> Result<Key, StoreError> {
    let what = format!("{} object", r.kind);
    let meta = obj
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| StoreError::Invalid(format!("{what} without metadata")))?;
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| StoreError::Invalid(format!("{what} without metadata.name")))?
        .to_string();
    let namespace = if r.namespaced {
        let ns = meta
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        meta.insert("namespace".into(), json!(ns));
        ns
    } else {
        meta.remove("namespace");
        String::new()
    };
    Ok((res, namespace, name))
}

/// `t` as RFC 3339 UTC with seconds, as Kubernetes timestamps are written.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn node(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    }

    #[test]
    fn timestamps_are_rfc3339() {
        let t = UNIX_EPOCH + Duration::from_secs(1_709_251_199);
        assert_eq!(rfc3339(t), "2024-02-29T23:59:59Z");
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn writes_bump_the_version_and_keep_uid() {
        let mut s = Store::new(10);
        let a = s.write(0, node("a"), None).unwrap();
        let a2 = s.write(0, node("a"), Some(true)).unwrap();
        assert_eq!(a["metadata"]["uid"], a2["metadata"]["uid"]);
        assert_ne!(
            a["metadata"]["resourceVersion"],
            a2["metadata"]["resourceVersion"]
        );
        assert_eq!(
            s.write(0, node("a"), Some(false)),
            Err(StoreError::AlreadyExists)
        );
        assert_eq!(s.write(0, node("b"), Some(true)), Err(StoreError::NotFound));
    }

    #[test]
    fn paging_and_history() {
        let mut s = Store::new(2);
        for n in ["a", "b", "c"] {
            s.write(0, node(n), None).unwrap();
        }
        let (page, next) = s.list(0, None, None, Some(2));
        assert_eq!(page.len(), 2);
        let (rest, end) = s.list(0, None, next.as_ref(), Some(2));
        assert_eq!((rest.len(), end), (1, None));
        // Versions 2, 3, 4 written, two events kept: a watch from 2 gets 3 and 4.
        assert!(s.watch_from(0, 1).is_err());
        assert_eq!(s.watch_from(0, 2).unwrap().0.len(), 2);
        s.compact();
        assert!(s.watch_from(0, 3).is_err());
        assert!(s.watch_from(0, s.rv()).is_ok());
    }
}
