//! The file store: one multi-document YAML file of Calico resources, re-read when its
//! content changes.
//!
//! It polls (size, modification time, then content) instead of using inotify /
//! ReadDirectoryChangesW: editors and `kubectl`-style tools replace the file by rename,
//! which silently ends a watch on the old inode, and one small file read once a second
//! costs nothing. A reload request (SIGHUP, `tern reload`) re-reads at once.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, Notify};

use super::{Document, StoreEvent};

/// How often the file is checked by default.
pub const DEFAULT_POLL: Duration = Duration::from_secs(1);

/// A Calico resource file.
#[derive(Debug, Clone)]
pub struct FileStore {
    path: PathBuf,
    poll: Duration,
    max_bytes: u64,
}

impl FileStore {
    /// A store for `path`, checked every [`DEFAULT_POLL`].
    pub fn new(path: impl Into<PathBuf>) -> FileStore {
        FileStore {
            path: path.into(),
            poll: DEFAULT_POLL,
            max_bytes: crate::daemon::limits::DEFAULT_DATASTORE_DOCUMENT_BYTES,
        }
    }

    /// Refuses to read a file larger than `bytes` (reported as unavailable, so the
    /// configuration in force stays until the file is small enough again).
    pub fn with_max_bytes(mut self, bytes: u64) -> FileStore {
        self.max_bytes = bytes;
        self
    }

    /// Changes the poll interval (tests use a short one).
    pub fn with_poll(mut self, poll: Duration) -> FileStore {
        self.poll = poll;
        self
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file once.
    pub fn read(&self) -> Result<Document, String> {
        use std::io::Read;
        let cannot = |e: std::io::Error| {
            format!("cannot read the cluster file {}: {e}", self.path.display())
        };
        // Read through a limit rather than trusting the size first: the file can grow
        // between the two.
        let mut bytes = Vec::new();
        std::fs::File::open(&self.path)
            .map_err(cannot)?
            // Saturating: `with_max_bytes(u64::MAX)` must mean "no limit", not wrap
            // around to reading nothing.
            .take(self.max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(cannot)?;
        if bytes.len() as u64 > self.max_bytes {
            return Err(format!(
                "the cluster file {} is larger than {} bytes (limits.datastore_document_bytes in tern.yaml); not read",
                self.path.display(),
                self.max_bytes
            ));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            format!(
                "the cluster file {} is not UTF-8 text (byte {})",
                self.path.display(),
                e.utf8_error().valid_up_to()
            )
        })?;
        Ok(Document {
            origin: self.path.display().to_string(),
            text,
        })
    }

    /// Sends a snapshot now and after every change of content, until `events` closes.
    /// An unreadable file is reported once (not every poll) and the store keeps trying.
    /// `reload` forces an immediate re-read and a snapshot even if nothing changed.
    pub async fn run(self, events: mpsc::Sender<StoreEvent>, reload: Arc<Notify>) {
        let mut revision = 0i64;
        let mut last: Option<(u64, Option<SystemTime>, String)> = None;
        let mut unavailable = false;
        let mut forced = true;
        loop {
            let stamp = std::fs::metadata(&self.path).map(|m| (m.len(), m.modified().ok()));
            let changed = match (&stamp, &last) {
                (Ok((len, mtime)), Some((l, m, _))) => len != l || mtime != m,
                _ => true,
            };
            if forced || changed || unavailable {
                match self.read() {
                    Ok(doc) => {
                        let same = last.as_ref().is_some_and(|(_, _, t)| *t == doc.text);
                        let (len, mtime) = stamp.unwrap_or((doc.text.len() as u64, None));
                        last = Some((len, mtime, doc.text.clone()));
                        if forced || !same || unavailable {
                            revision += 1;
                            let ev = StoreEvent::Snapshot {
                                documents: vec![doc],
                                revision,
                            };
                            if events.send(ev).await.is_err() {
                                return;
                            }
                        }
                        unavailable = false;
                    }
                    Err(e) => {
                        if !unavailable {
                            unavailable = true;
                            if events.send(StoreEvent::Unavailable(e)).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                forced = false;
            }
            tokio::select! {
                _ = tokio::time::sleep(self.poll) => {}
                _ = reload.notified() => forced = true,
                _ = events.closed() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn next(rx: &mut mpsc::Receiver<StoreEvent>) -> StoreEvent {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("no store event within 5 s")
            .expect("store stopped")
    }

    fn text_of(ev: &StoreEvent) -> (&str, i64) {
        match ev {
            StoreEvent::Snapshot {
                documents,
                revision,
            } => (documents[0].text.as_str(), *revision),
            other => panic!("expected a snapshot, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn an_oversized_file_is_unavailable_until_it_shrinks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.yaml");
        std::fs::write(&path, "a: 1\n").unwrap();
        let (tx, mut rx) = mpsc::channel(4);
        let store = FileStore::new(&path)
            .with_poll(Duration::from_millis(20))
            .with_max_bytes(4096);
        let task = tokio::spawn(store.run(tx, Arc::new(Notify::new())));
        assert_eq!(text_of(&next(&mut rx).await), ("a: 1\n", 1));
        // A multi-byte character straddles the limit: still "too large", not "not UTF-8".
        std::fs::write(&path, format!("a: {}\n", "é".repeat(3000))).unwrap();
        match next(&mut rx).await {
            StoreEvent::Unavailable(e) => assert_eq!(
                e,
                format!("the cluster file {} is larger than 4096 bytes (limits.datastore_document_bytes in tern.yaml); not read", path.display())
            ),
            other => panic!("{other:?}"),
        }
        std::fs::write(&path, "a: 2\n").unwrap();
        assert_eq!(text_of(&next(&mut rx).await), ("a: 2\n", 2));
        drop(rx);
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }

    #[test]
    fn the_largest_limit_reads_the_file_instead_of_overflowing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.yaml");
        std::fs::write(&path, "a: 1\n").unwrap();
        let doc = FileStore::new(&path).with_max_bytes(u64::MAX).read();
        assert_eq!(doc.map(|d| d.text), Ok("a: 1\n".to_string()));
    }

    #[tokio::test]
    async fn changes_renames_removal_and_reload_are_followed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.yaml");
        std::fs::write(&path, "a: 1\n").unwrap();
        let (tx, mut rx) = mpsc::channel(4);
        let reload = Arc::new(Notify::new());
        let store = FileStore::new(&path).with_poll(Duration::from_millis(20));
        let task = tokio::spawn(store.run(tx, reload.clone()));

        assert_eq!(text_of(&next(&mut rx).await), ("a: 1\n", 1));
        // An editor's save: write elsewhere, rename over the file.
        let tmp = dir.path().join(".cluster.yaml.swp");
        std::fs::write(&tmp, "a: 2\nb: 3\n").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert_eq!(text_of(&next(&mut rx).await), ("a: 2\nb: 3\n", 2));
        // Gone: reported once, then back.
        std::fs::remove_file(&path).unwrap();
        match next(&mut rx).await {
            StoreEvent::Unavailable(e) => {
                assert!(e.contains("cannot read the cluster file"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            rx.try_recv().is_err(),
            "unavailability reported more than once"
        );
        std::fs::write(&path, "a: 4\n").unwrap();
        assert_eq!(text_of(&next(&mut rx).await), ("a: 4\n", 3));
        // A reload re-sends the same content.
        reload.notify_one();
        assert_eq!(text_of(&next(&mut rx).await), ("a: 4\n", 4));
        drop(rx);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("store did not stop when the receiver closed")
            .unwrap();
    }
}
