//! Starts the FIB task ([`tern_fib::task`]) on this platform's backend: the kernel
//! (Linux rtnetlink, Windows IP Helper) or, without a kernel FIB (a route reflector),
//! the memory backend. Routes reach it straight from the speaker through
//! [`super::routes::RibFilter`]; the daemon sends it its own blackholes and asks it
//! for `tern fib`, `tern diagnose` and `tern routes` through [`FibMsg`].
//!
//! With the FIB off (`fib: { enabled: false }`) no FIB task runs: [`fib_off`] answers
//! the questions about the kernel itself (the FIB is off, nothing is installed,
//! nothing was refused, nothing to diagnose) and [`routes_off`] only waits for the
//! speaker's `Converged` to end the grace, so convergence and readiness work as usual.
//! (A memory backend there knew no interfaces: it refused every route, logged each,
//! kept them all twice and retried them every 10 s.)

use std::sync::Arc;

use tern_bgp::speaker::RibNews;
use tern_config::DaemonConfig;
use tokio::sync::{mpsc, watch};

use tern_fib::task::{predecessor, Backend, Inputs};
pub use tern_fib::task::{FibMsg, KernelNews};

use super::routes::RibFilter;

/// The running FIB task, as the daemon holds it.
pub struct FibHandle {
    /// The daemon's messages to it.
    pub commands: mpsc::Sender<FibMsg>,
    /// What the kernel watcher tells it (see [`KernelNews`]).
    pub news: Arc<KernelNews>,
    /// Whether the restart grace still runs (false once the speaker's Loc-RIB is
    /// complete): `tern status` and readiness.
    pub grace: watch::Receiver<bool>,
}

/// Starts the FIB task: `routes` is the speaker's Loc-RIB news (its sender goes to
/// the speaker when BGP starts), turned into wanted routes by `filter`.
pub fn start_fib(
    cfg: &DaemonConfig,
    routes: mpsc::Receiver<RibNews>,
    filter: RibFilter,
) -> Result<FibHandle, String> {
    let (commands, mut crx) = mpsc::channel(64);
    let news = Arc::new(KernelNews::default());
    let (gtx, grace) = watch::channel(true);
    let mut inputs = Inputs {
        commands: crx,
        routes,
        filter,
        kernel: Arc::clone(&news),
        grace: gtx,
        // BIRD's routes are tern's to take over, unless tern uses BIRD's number itself
        // (then they are tern's own already).
        predecessor: (cfg.fib.take_over_bird && cfg.fib.route_protocol != predecessor::BIRD)
            .then_some(predecessor::BIRD),
        release_freed: super::memory::release_freed,
    };
    let handle = FibHandle {
        commands,
        news: Arc::clone(&news),
        grace,
    };
    if !cfg.fib.enabled {
        let (inner, inner_rx) = mpsc::channel(64);
        crx = std::mem::replace(&mut inputs.commands, inner_rx);
        tokio::spawn(fib_off(crx, inner));
        tokio::spawn(routes_off(inputs));
        return Ok(handle);
    }
    #[cfg(target_os = "linux")]
    {
        let fib = tern_fib::linux::LinuxFib::new(cfg.fib.route_protocol, cfg.fib.table)
            .map_err(|e| format!("cannot open the kernel FIB: {e}"))?;
        news.own_port
            .store(fib.port_id(), std::sync::atomic::Ordering::SeqCst);
        spawn(fib, inputs);
    }
    #[cfg(windows)]
    {
        let dir = std::env::var_os("ProgramData")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::path::PathBuf::from(r"C:\ProgramData"))
            .join("tern");
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let fib = tern_fib::windows::WindowsFib::new(dir.join("routes.record"))
            .map_err(|e| format!("cannot open the Windows FIB: {e}"))?;
        watch_windows(Arc::clone(&news));
        spawn(fib, inputs);
    }
    #[cfg(not(any(target_os = "linux", windows)))]
    {
        spawn(tern_fib::memory::MemoryFib::default(), inputs);
    }
    Ok(handle)
}

/// With the FIB off: answers `tern fib`, `tern diagnose` and `tern routes`' installed
/// flags itself and passes the rest (routes, `Adopted`) on to the memory task.
async fn fib_off(mut commands: mpsc::Receiver<FibMsg>, inner: mpsc::Sender<FibMsg>) {
    while let Some(m) = commands.recv().await {
        match m {
            FibMsg::Report(reply) => {
                let _ = reply.send(tern_fib::task::FibReply {
                    disabled: true,
                    ..Default::default()
                });
            }
            FibMsg::Diagnose(_, reply) => {
                let _ = reply.send(Vec::new());
            }
            FibMsg::Installed(_, reply) => {
                let _ = reply.send(Vec::new());
            }
            FibMsg::Counts(reply) => {
                let _ = reply.send(tern_fib::task::FibCounts {
                    disabled: true,
                    ..Default::default()
                });
            }
            other => {
                if inner.send(other).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// With the FIB off: drains the speaker's news, ending the grace at `Converged`, and
/// the commands [`fib_off`] passes on (nothing was adopted).
async fn routes_off(mut inputs: Inputs<RibFilter>) {
    loop {
        tokio::select! {
            news = inputs.routes.recv() => match news {
                Some(RibNews::Converged) => {
                    let _ = inputs.grace.send(false);
                }
                Some(RibNews::Changes(c)) => inputs.filter.tell_monitor(&c),
                Some(RibNews::Replay(_)) => {}
                None => break,
            },
            cmd = inputs.commands.recv() => match cmd {
                Some(FibMsg::Adopted(reply)) => {
                    let _ = reply.send(0);
                }
                Some(_) => {}
                None => return,
            },
        }
    }
    // The speaker is gone; answer the daemon until it closes.
    while let Some(cmd) = inputs.commands.recv().await {
        if let FibMsg::Adopted(reply) = cmd {
            let _ = reply.send(0);
        }
    }
}

fn spawn<B: Backend>(backend: B, inputs: Inputs<RibFilter>) {
    tokio::spawn(tern_fib::task::run(backend, inputs));
}

/// IP Helper's callbacks tell the FIB task what the Linux watcher tells it: a row gone
/// (put tern's back) or a change only a re-read can tell.
#[cfg(windows)]
fn watch_windows(news: Arc<KernelNews>) {
    use tern_fib::windows::notify::{watch, WatchEvent};
    match watch(move |e| match e {
        WatchEvent::RouteRemoved(p) => news.removed(p),
        WatchEvent::Resync => news.resync(),
    }) {
        // Kept for the daemon's life: dropping it would end the notifications.
        Ok(w) => {
            tokio::spawn(async move {
                let _watch = w;
                std::future::pending::<()>().await
            });
        }
        Err(e) => tracing::warn!(
            "cannot watch the route table ({e}); routes removed by others come back only at restart"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    /// With the FIB off, the kernel questions get "off" and nothing, not the memory
    /// backend's made-up refusals; routes still reach the memory task.
    #[tokio::test]
    async fn the_fib_off_answers_for_itself() {
        let (tx, rx) = mpsc::channel(8);
        let (inner, mut inner_rx) = mpsc::channel(8);
        tokio::spawn(fib_off(rx, inner));
        let (rtx, rrx) = oneshot::channel();
        tx.send(FibMsg::Report(rtx)).await.unwrap();
        let report = rrx.await.unwrap();
        assert!(report.disabled);
        assert!(report.failures.is_empty() && report.missing.is_empty());
        let (dtx, drx) = oneshot::channel();
        let peer = tern_fib::diag::PeerFacts {
            address: "198.51.100.1".parse().unwrap(),
            name: "global peer tor".into(),
            network: None,
            multihop: false,
            ebgp: None,
        };
        tx.send(FibMsg::Diagnose(vec![peer], dtx)).await.unwrap();
        assert!(drx.await.unwrap().is_empty());
        let (itx, irx) = oneshot::channel();
        tx.send(FibMsg::Installed(None, itx)).await.unwrap();
        assert!(irx.await.unwrap().is_empty());
        tx.send(FibMsg::Want(Vec::new())).await.unwrap();
        assert!(matches!(inner_rx.recv().await, Some(FibMsg::Want(_))));
    }

    /// With the FIB off, routes go nowhere, the grace ends at `Converged`, and nothing
    /// was adopted.
    #[tokio::test]
    async fn the_fib_off_ends_the_grace_at_converged() {
        let (ctx, crx) = mpsc::channel(8);
        let (rtx, rrx) = mpsc::channel(8);
        let (gtx, mut grace) = watch::channel(true);
        let (_intent_tx, intent) = watch::channel(None);
        let inputs = Inputs {
            commands: crx,
            routes: rrx,
            filter: RibFilter::new(intent, 254, false),
            kernel: Arc::new(KernelNews::default()),
            grace: gtx,
            predecessor: None,
            release_freed: || {},
        };
        tokio::spawn(routes_off(inputs));
        rtx.send(RibNews::Changes(Vec::new())).await.unwrap();
        assert!(*grace.borrow_and_update());
        rtx.send(RibNews::Converged).await.unwrap();
        grace.changed().await.unwrap();
        assert!(!*grace.borrow());
        let (atx, arx) = oneshot::channel();
        ctx.send(FibMsg::Adopted(atx)).await.unwrap();
        assert_eq!(arx.await.unwrap(), 0);
    }
}
