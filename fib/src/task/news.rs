//! What the kernel did behind the FIB task's back, as the platform's watcher reports
//! it (the daemon's route watcher on Linux, IP Helper's callbacks on Windows).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;

use ipnet::IpNet;
use tokio::sync::Notify;

/// What the kernel watcher tells the FIB task: routes of tern's protocol that were
/// removed (most are the task's own deletions, which need nothing), and whether the
/// kernel may have changed behind its back in a way only a re-read can tell.
#[derive(Debug, Default)]
pub struct KernelNews {
    /// The FIB's netlink port id (0: unknown), so the watcher can leave out the
    /// notifications of the FIB's own changes (Linux only; on Windows IP Helper's
    /// callbacks report through `removed` and `resync`).
    pub own_port: AtomicU32,
    removed: Mutex<Vec<IpNet>>,
    full: AtomicBool,
    retry: AtomicBool,
    pub(super) notify: Notify,
}

impl KernelNews {
    /// A route of tern's protocol left the kernel.
    pub fn removed(&self, prefix: IpNet) {
        if let Ok(mut v) = self.removed.lock() {
            v.push(prefix);
        }
        self.notify.notify_one();
    }

    /// The kernel must be re-read (link or address change, a foreign route added,
    /// notifications lost).
    pub fn resync(&self) {
        self.full.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// An interface came up or an address was added: nothing can have gone from the
    /// kernel, but a route it refused may be taken now. Cheaper than [`Self::resync`],
    /// which re-reads the whole table (0.2 CPU-seconds and 40 MB more at 100,000
    /// routes): on a node every pod start adds a link.
    pub fn retry(&self) {
        self.retry.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// What was asked since last time.
    pub(super) fn take(&self) -> Taken {
        let full = self.full.swap(false, Ordering::SeqCst);
        let retry = self.retry.swap(false, Ordering::SeqCst);
        let removed = self
            .removed
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default();
        Taken {
            full,
            retry,
            removed,
        }
    }
}

/// What [`KernelNews::take`] found.
pub(super) struct Taken {
    /// A full re-read was asked.
    pub(super) full: bool,
    /// Refused routes are to be tried again.
    pub(super) retry: bool,
    /// Routes of tern's protocol reported removed.
    pub(super) removed: Vec<IpNet>,
}
