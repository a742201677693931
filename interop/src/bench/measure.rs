//! What a benchmark reads about the daemon under test: CPU time and memory of its
//! processes (from /proc), and its routes arriving in and leaving the kernel FIB (from
//! netlink notifications in its namespace, counted by route protocol).

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tern_fib::linux::{watch_with_buffer, KernelEvent};
use tokio::sync::oneshot;

use crate::netns::Netns;
use crate::{Error, Result};

/// CPU and memory of a set of processes, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcStats {
    /// User plus system CPU seconds since each process started.
    pub cpu_s: f64,
    /// Resident set size now, bytes.
    pub rss: u64,
    /// Peak resident set size (VmHWM), bytes.
    pub hwm: u64,
}

/// Reads /proc for `pids` (a process that is gone counts as zero).
pub fn proc_stats(pids: &[u32]) -> ProcStats {
    // SAFETY: sysconf has no preconditions; it only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = if ticks > 0 { ticks as f64 } else { 100.0 };
    let mut s = ProcStats::default();
    for pid in pids {
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // Fields after the command name (which may hold spaces): state is first,
            // utime and stime are the 12th and 13th.
            if let Some((_, rest)) = stat.rsplit_once(')') {
                let f: Vec<&str> = rest.split_whitespace().collect();
                let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
                s.cpu_s += (t(11) + t(12)) / ticks;
            }
        }
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            let kb = |key: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(key))
                    .and_then(|v| v.split_whitespace().next())
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
                    * 1024
            };
            s.rss += kb("VmRSS:");
            s.hwm += kb("VmHWM:");
        }
    }
    s
}

/// Route notifications seen so far for one route protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FibCount {
    /// Routes added or replaced.
    pub added: u64,
    /// Routes removed.
    pub removed: u64,
    /// When the last of them arrived.
    pub last: Option<Instant>,
    /// The socket overran: counts are low.
    pub lost: bool,
    /// Distinct prefixes of the protocol in the kernel now, as the notifications tell
    /// (a replace does not count twice): the restart timeline's y axis.
    pub installed: u64,
}

/// Counts the kernel's route notifications of one protocol in a namespace, from a
/// thread of its own.
#[derive(Debug)]
pub struct FibWatch {
    count: Arc<Mutex<FibCount>>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl FibWatch {
    /// Starts watching routes with `protocol` in `ns`; returns once subscribed.
    pub fn start(ns: &Netns, protocol: u8) -> Result<FibWatch> {
        let count = Arc::new(Mutex::new(FibCount::default()));
        let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::result::Result<(), String>>();
        let ns = ns.name().to_string();
        let c = count.clone();
        let thread = std::thread::Builder::new()
            .name("fib-watch".into())
            .spawn(move || {
                let r = (|| {
                    crate::netns::enter_thread(&ns).map_err(|e| e.to_string())?;
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| e.to_string())
                })();
                let rt = match r {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                rt.block_on(async move {
                    // Room for a million notifications not yet read.
                    let events = match watch_with_buffer(1 << 30) {
                        Ok(e) => e,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.to_string()));
                            return;
                        }
                    };
                    let mut events = Box::pin(events);
                    let _ = ready_tx.send(Ok(()));
                    let mut present = std::collections::HashSet::new();
                    loop {
                        tokio::select! {
                            _ = &mut stop_rx => break,
                            e = events.next() => {
                                let Some(e) = e else { break };
                                let Ok(mut n) = c.lock() else { break };
                                match e {
                                    KernelEvent::RouteAdded { protocol: p, route } if p == protocol => {
                                        n.added += 1;
                                        n.last = Some(Instant::now());
                                        present.insert(route.prefix);
                                        n.installed = present.len() as u64;
                                    }
                                    KernelEvent::RouteRemoved { protocol: p, route } if p == protocol => {
                                        n.removed += 1;
                                        n.last = Some(Instant::now());
                                        present.remove(&route.prefix);
                                        n.installed = present.len() as u64;
                                    }
                                    KernelEvent::Lost => n.lost = true,
                                    _ => {}
                                }
                            }
                        }
                    }
                });
            })
            .map_err(|e| Error::Lab(format!("cannot start the FIB watcher: {e}")))?;
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => Ok(FibWatch {
                count,
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
            Ok(Err(e)) => Err(Error::Lab(format!("FIB watcher: {e}"))),
            Err(_) => Err(Error::Lab("FIB watcher did not start in 10 s".into())),
        }
    }

    /// The counts so far.
    pub fn get(&self) -> FibCount {
        self.count.lock().map(|c| *c).unwrap_or_default()
    }

    /// A handle that reads the counts from another thread (the restart sampler).
    pub fn probe(&self) -> FibProbe {
        FibProbe(self.count.clone())
    }
}

/// Reads a [`FibWatch`]'s counts from another thread.
#[derive(Debug, Clone)]
pub struct FibProbe(Arc<Mutex<FibCount>>);

impl FibProbe {
    /// The counts so far.
    pub fn get(&self) -> FibCount {
        self.0.lock().map(|c| *c).unwrap_or_default()
    }
}

impl Drop for FibWatch {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
