//! The diagnoser: every finding evaluated again about once a second into one list,
//! `State.findings`, that `tern diagnose`, the metrics and the log all follow. A
//! finding is logged once when it appears and once when it clears, keyed by its kind
//! and subject (evidence that only counts on does not log again).
//!
//! The kernel facts (interfaces, neighbours, next-hop look-ups) come from the FIB
//! task, the session facts from the snapshot. One evaluation costs one look-up per
//! next hop, so on a large mesh the pause between evaluations grows with the time one
//! takes (20× it, at least a second): the diagnoser stays under about 5% of a core.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::fib_task::FibMsg;
use super::handler::DaemonHandler;
use super::state::State;
use crate::control::proto::FindingInfo;
use tern_fib::diag::{self, Finding};

/// The shortest pause between two evaluations.
const PERIOD: Duration = Duration::from_secs(1);
/// How long the kernel's TCP-MD5 drop counters must stand still before an
/// md5-mismatch finding clears without the session coming up (a peer retries its
/// connection every few seconds; BIRD's default retry is 120 s, Calico's 5 s).
const MD5_QUIET: Duration = Duration::from_secs(30);

/// What the diagnoser remembers between evaluations.
#[derive(Debug, Default)]
pub struct Diagnoser {
    md5: Md5Watch,
}

/// Runs the diagnoser for the daemon's life.
pub async fn run(h: Arc<DaemonHandler>) {
    loop {
        let started = Instant::now();
        if let Err(e) = refresh(&h).await {
            tracing::debug!("diagnosis not evaluated: {e}");
        }
        tokio::time::sleep(PERIOD.max(started.elapsed() * 20)).await;
    }
}

/// Evaluates every finding now, makes it the list in force and logs what appeared
/// and what cleared since the previous evaluation.
pub async fn refresh(h: &DaemonHandler) -> Result<Vec<FindingInfo>, String> {
    let mut d = h.diagnoser.lock().await;
    let now = evaluate(h, &mut d.md5).await?;
    let before = match h.state.lock() {
        Ok(mut s) => std::mem::replace(&mut s.findings, now.clone()),
        Err(_) => {
            return Err("the daemon's state is poisoned (a task panicked); restart tern".into())
        }
    };
    log_changes(&before, &now);
    Ok(now)
}

/// Every finding now, most severe first.
async fn evaluate(h: &DaemonHandler, md5: &mut Md5Watch) -> Result<Vec<FindingInfo>, String> {
    let peers = h.peer_facts_announced().await?;
    let (tx, rx) = oneshot::channel();
    h.fib
        .send(FibMsg::Diagnose(peers, tx))
        .await
        .map_err(|_| "the FIB task has stopped".to_string())?;
    let mut findings = super::handler::ask("FIB task", rx).await?;
    let datastore = {
        let s = h
            .state
            .lock()
            .map_err(|_| "the daemon's state is poisoned")?;
        findings.extend(md5.findings(&s, read_md5_counters(), Instant::now()));
        findings.extend(unsupported_findings(&s));
        findings.extend(super::troubles::findings(&s));
        findings.extend(forwarding_findings(&s));
        findings.extend(bfd_findings(&s));
        datastore_finding(&s)
    };
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    let mut infos: Vec<FindingInfo> = findings.into_iter().map(finding_info).collect();
    // Most severe first: a warning, after the errors.
    if let Some(d) = datastore {
        let at = infos.iter().take_while(|f| f.severity == "error").count();
        infos.insert(at, d);
    }
    Ok(infos)
}

/// One log line per finding that appeared, one per finding that cleared.
fn log_changes(before: &[FindingInfo], now: &[FindingInfo]) {
    let key = |f: &FindingInfo| (f.kind.clone(), f.subject.clone());
    let old: BTreeSet<_> = before.iter().map(key).collect();
    let new: BTreeSet<_> = now.iter().map(key).collect();
    for f in now.iter().filter(|f| !old.contains(&key(f))) {
        let (kind, subject) = (&f.kind, &f.subject);
        let (evidence, fix) = (&f.evidence, &f.suggestion);
        match f.severity.as_str() {
            "error" => tracing::error!(
                kind = %kind,
                "finding {kind} for {subject}: {evidence}; fix: {fix}"
            ),
            "warning" => {
                tracing::warn!(kind = %kind, "finding {kind} for {subject}: {evidence}; fix: {fix}")
            }
            _ => {
                tracing::info!(kind = %kind, "finding {kind} for {subject}: {evidence}; fix: {fix}")
            }
        }
    }
    for f in before.iter().filter(|f| !new.contains(&key(f))) {
        tracing::info!(kind = %f.kind, "finding {} for {} cleared", f.kind, f.subject);
    }
}

/// A diagnosis finding as the control protocol shows it (kind and severity as their
/// serde names).
fn finding_info(f: Finding) -> FindingInfo {
    FindingInfo {
        kind: f.kind.name().to_string(),
        subject: f.subject,
        evidence: f.evidence,
        suggestion: f.suggestion,
        severity: serde_json::to_value(f.severity)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_else(|| format!("{:?}", f.severity)),
    }
}

/// The datastore cannot be read: first, since nothing the cluster changes reaches this
/// node meanwhile.
fn datastore_finding(s: &State) -> Option<FindingInfo> {
    let why = s.datastore_error.as_ref()?;
    Some(FindingInfo {
        kind: "datastore-unavailable".into(),
        subject: s.datastore.clone(),
        evidence: why.clone(),
        suggestion: "the configuration in force stays (routes and sessions are kept), but no change in the cluster reaches this node until the datastore is readable: fix what the evidence names".into(),
        severity: "warning".into(),
    })
}

/// How long a BGP session may be up before a peer silent in BFD is reported: BFD
/// sends a packet a second until it is Up, so a peer that answers is Up well before.
const BFD_GRACE_S: u64 = 10;

/// Established peers that have not answered BFD for [`BFD_GRACE_S`] seconds.
fn bfd_findings(s: &State) -> Vec<Finding> {
    let Some(views) = s.bfd.as_ref().and_then(|v| v.lock().ok()) else {
        return Vec::new();
    };
    let silent: Vec<(String, u64)> = s
        .peers
        .values()
        .filter(|p| p.up)
        .filter_map(|p| {
            let up_s = p.since.elapsed().map(|d| d.as_secs()).unwrap_or(0);
            let v = views.get(&p.intent.address)?;
            (up_s >= BFD_GRACE_S && !v.was_up && v.state != tern_bfd::State::Up)
                .then(|| (super::state::peer_subject(&p.intent), up_s))
        })
        .collect();
    diag::bfd_not_answering(&silent)
}

/// Peers whose password or ttlSecurity this platform cannot honour (Windows): the
/// speaker refuses them, and `tern diagnose` says so.
fn unsupported_findings(s: &State) -> Vec<Finding> {
    let refused: Vec<(String, String)> = s
        .peers
        .values()
        .filter_map(|p| {
            let why = tern_bgp::session::sockopt::unsupported(
                p.intent.password.is_some(),
                p.intent.ttl_security.is_some(),
            )?;
            Some((super::state::peer_subject(&p.intent), why))
        })
        .collect();
    diag::unsupported(&refused)
}

/// This namespace's TCP-MD5 drop counters (Linux `/proc/net/netstat`).
fn read_md5_counters() -> Option<diag::Md5Counters> {
    std::fs::read_to_string("/proc/net/netstat")
        .ok()
        .and_then(|t| diag::Md5Counters::parse(&t))
}

/// TCP-MD5 trouble: peers with a password that are not up while the kernel's drop
/// counters moved within [`MD5_QUIET`]. Clears when the session comes up, or when the
/// counters stand still that long.
#[derive(Debug, Default)]
struct Md5Watch {
    /// The counters at the previous evaluation.
    last: Option<diag::Md5Counters>,
    /// When they last moved, and how many drops since the finding's window began.
    moved: Option<(Instant, diag::Md5Counters)>,
}

impl Md5Watch {
    fn findings(
        &mut self,
        s: &State,
        counters: Option<diag::Md5Counters>,
        now: Instant,
    ) -> Vec<Finding> {
        let Some(c) = counters else {
            return Vec::new();
        };
        let previous = self.last.replace(c);
        let total = |c: &diag::Md5Counters| c.not_found + c.unexpected + c.failure;
        // At the first look, counts from before tern started say nothing about now.
        if let Some(p) = previous {
            if total(&c) > total(&p) {
                let since = match self.moved {
                    Some((_, base)) => base,
                    None => p,
                };
                self.moved = Some((now, since));
            }
        }
        let Some((at, base)) = self.moved else {
            return Vec::new();
        };
        if now.duration_since(at) > MD5_QUIET {
            self.moved = None;
            return Vec::new();
        }
        let down: Vec<String> = s
            .peers
            .values()
            .filter(|p| p.intent.password.is_some() && p.state != "Established")
            .map(|p| super::state::peer_subject(&p.intent))
            .collect();
        if down.is_empty() {
            // Up again (or no password any more): the window starts afresh next time.
            self.moved = None;
            return Vec::new();
        }
        let recent = diag::Md5Counters {
            not_found: c.not_found.saturating_sub(base.not_found),
            unexpected: c.unexpected.saturating_sub(base.unexpected),
            failure: c.failure.saturating_sub(base.failure),
        };
        diag::md5(recent, &down)
    }
}

/// IP forwarding off while this node advertises routes to its workloads: traffic for
/// them arrives and is dropped (Linux; Windows forwards per interface and is not
/// checked).
fn forwarding_findings(s: &State) -> Vec<Finding> {
    let Some(intent) = &s.intent else {
        return Vec::new();
    };
    let sysctl = |path: &str| std::fs::read_to_string(path).ok().map(|t| t.trim() != "0");
    let v4 = intent.originated.keys().filter(|p| p.addr().is_ipv4());
    let v6 = intent.originated.keys().filter(|p| p.addr().is_ipv6());
    let mut out = Vec::new();
    if cfg!(target_os = "linux") {
        let families = [
            (
                "IPv4",
                "/proc/sys/net/ipv4/ip_forward",
                "net.ipv4.ip_forward",
                v4.cloned().collect::<Vec<_>>(),
            ),
            (
                "IPv6",
                "/proc/sys/net/ipv6/conf/all/forwarding",
                "net.ipv6.conf.all.forwarding",
                v6.cloned().collect(),
            ),
        ];
        for (family, path, key, advertised) in families {
            if advertised.is_empty() || sysctl(path) != Some(false) {
                continue;
            }
            out.push(diag::forwarding_disabled(family, key, &advertised));
        }
    }
    out
}

#[cfg(test)]
mod tests;
