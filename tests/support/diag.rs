//! What the diagnostics lab tests (`diagnose_lab*.rs`) share: a lab of one tern node,
//! one BIRD node configured the way Calico's confd renders it, and a BIRD ToR; a watch
//! on one node that waits for a finding to appear in all three places a user sees it
//! (`tern diagnose -o json`, the log line, the `tern_diagnostic_findings` metric) and
//! to clear from all three, returning how long each took; BIRD's own view of the same
//! fault; and commands inside the lab's namespaces. Included with `#[path]` next to
//! `support/lab.rs` (as `lab_support`).

#![allow(dead_code)]

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use tern_interop::lab::{Lab, LabSpec};
use tern_interop::peers::{cli_at, Kind};

use super::lab_support::{available, converged, fail, record};

const TERN: &str = env!("CARGO_BIN_EXE_tern");

/// How long a finding may take to appear or clear before the test fails (the figures
/// printed are the real times).
pub const WAIT: Duration = Duration::from_secs(30);

/// For faults that first need the hold timer (9 s) to end a live session.
pub const WAIT_HOLD: Duration = Duration::from_secs(45);

/// The metrics address every lab node's tern serves (inside its namespace).
const METRICS: &str = "127.0.0.1:9477";

/// One lab at a time in a test binary: the figures are the point, and two labs on two
/// cores would measure each other.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// node-1 runs tern, node-2 BIRD as confd renders it (`connect delay time 2; connect
/// retry time 5; error wait time 5,30; source address; multihop; graceful restart`),
/// both in a node-to-node mesh and peering with a BIRD ToR (AS 65001). Waits for it to
/// converge. None: skipped (the reason is printed).
pub fn up(
    test: &str,
    prefix: &str,
    tune: impl FnOnce(&mut LabSpec),
    before_converging: impl FnOnce(&Lab),
) -> Option<(Lab, tempfile::TempDir)> {
    if !available(test, &["bird", "birdc", "nft"]) {
        return None;
    }
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut spec = LabSpec::new(prefix, tmp.path(), Path::new(TERN), 2);
    spec.bird_nodes = 1;
    spec.tor = Some(Kind::Bird);
    tune(&mut spec);
    let lab = Lab::up(spec).unwrap_or_else(|e| panic!("{test}: {e}"));
    before_converging(&lab);
    converged(test, &lab, "tern node, BIRD node and BIRD ToR");
    Some((lab, tmp))
}

/// Runs `program args` inside namespace `ns`; its standard output.
pub fn in_ns(ns: &str, program: &str, args: &[&str]) -> String {
    let mut full = vec!["netns", "exec", ns, program];
    full.extend_from_slice(args);
    match tern_interop::netns::run("ip", &full) {
        Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
        Err(e) => panic!("{e}"),
    }
}

/// Node `index`'s namespace.
pub fn node_ns(lab: &Lab, index: usize) -> String {
    lab.node(index)
        .map(|n| n.ns.clone())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The ToR's namespace.
pub fn tor_ns(lab: &Lab) -> String {
    lab.spec().tor_ns()
}

/// The directory of a BIRD (the ToR's, or a BIRD node's): bird.conf and bird.ctl.
pub fn bird_dir(lab: &Lab, node: Option<usize>) -> PathBuf {
    match node {
        None => lab.spec().dir.join("tor"),
        Some(i) => lab
            .node(i)
            .map(|n| n.dir.clone())
            .unwrap_or_else(|e| panic!("{e}")),
    }
}

/// Edits a BIRD's bird.conf (`from` must occur) and has it re-read (`birdc configure`).
pub fn reconfigure_bird(dir: &Path, from: &str, to: &str) {
    let file = dir.join("bird.conf");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        text.contains(from),
        "{} has no {from:?}:\n{text}",
        file.display()
    );
    std::fs::write(&file, text.replace(from, to)).unwrap_or_else(|e| panic!("{e}"));
    let out = cli_at(Kind::Bird, dir, &["configure"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.contains("Reconfigured") || out.contains("Reconfiguration in progress"),
        "birdc configure in {}: {out}",
        dir.display()
    );
}

/// Prints `text` and appends it to `target/tmp/diagnose-views.txt`, where the views
/// of every fault (tern's log line and `tern diagnose`, BIRD's `birdc`) are collected
/// for docs/diagnostics.md.
fn keep(text: &str) {
    eprintln!("{text}");
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("diagnose-views.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
    {
        let _ = writeln!(f, "{text}");
    }
}

/// BIRD's view of the same fault: `birdc show protocols all <protocol>` on the BIRD
/// node (`node`, or the ToR when None), printed and kept (see [`keep`]). Returns the
/// text.
pub fn bird_view(test: &str, lab: &Lab, node: Option<usize>, words: &[&str]) -> String {
    let out = cli_at(Kind::Bird, &bird_dir(lab, node), words).unwrap_or_else(|e| e.to_string());
    keep(&format!("== {test}: birdc {}\n{out}", words.join(" ")));
    out
}

/// Waits (up to `timeout`) for BIRD's protocol `protocol` to leave Established, so its
/// view of a session fault is captured once BIRD has noticed; the view either way.
pub fn bird_view_down(
    test: &str,
    lab: &Lab,
    node: Option<usize>,
    protocol: &str,
    timeout: Duration,
) -> String {
    let dir = bird_dir(lab, node);
    let _ = tern_interop::peers::wait_for("BIRD to notice", timeout, || {
        cli_at(Kind::Bird, &dir, &["show", "protocols", protocol])
            .is_ok_and(|o| !o.contains("Established"))
    });
    bird_view(test, lab, node, &["show", "protocols", "all", protocol])
}

/// Whether `subject` has one of `words` as a whole word (`tor` in `global peer
/// (BGPPeer tor)`, `198.51.100.1` but not in `198.51.100.12`, a prefix with its
/// length). No words: any subject.
pub fn subject_matches(subject: &str, words: &[&str]) -> bool {
    words.is_empty()
        || subject
            .split(|c: char| {
                !(c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '-' | '_' | '/'))
            })
            .any(|token| words.contains(&token))
}

/// `tern_diagnostic_findings{kind="K",severity="S"} V` lines of a metrics page:
/// (severity, value) for kind `kind`.
pub fn metric(page: &str, kind: &str) -> Vec<(String, f64)> {
    let label = |labels: &str, name: &str| -> Option<String> {
        let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
        let rest = labels.get(start..)?;
        rest.find('"')
            .and_then(|end| rest.get(..end))
            .map(String::from)
    };
    page.lines()
        .filter_map(|l| l.strip_prefix("tern_diagnostic_findings{"))
        .filter_map(|l| {
            let (labels, value) = l.split_once('}')?;
            (label(labels, "kind")? == kind).then_some(())?;
            Some((label(labels, "severity")?, value.trim().parse().ok()?))
        })
        .collect()
}

/// A point to measure from: when the fault (or its repair) was made, and how much of
/// the log there was then.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    at: Instant,
    log_len: usize,
}

/// A finding seen in all three places.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Its kind's name.
    pub kind: String,
    /// Its subject, exactly.
    pub subject: String,
    /// Its severity.
    pub severity: String,
    /// Its evidence.
    pub evidence: String,
    /// The log line that announced it.
    pub line: String,
    /// From the fault to the finding being in all three places.
    pub after: Duration,
    /// The log's length when the fault was made.
    pub fault_log_len: usize,
}

/// Watches node `node`'s tern.
pub struct Watch<'a> {
    /// The lab.
    pub lab: &'a Lab,
    /// The tern node.
    pub node: usize,
    /// The test's name, for timing lines.
    pub test: &'a str,
}

impl<'a> Watch<'a> {
    /// Watches the lab's tern node (node 1, as [`up`] builds it).
    pub fn on(lab: &'a Lab, test: &'a str) -> Watch<'a> {
        Watch { lab, node: 1, test }
    }
}

impl Watch<'_> {
    /// Now, and the log's length: take it just before making the fault or the repair.
    pub fn mark(&self) -> Mark {
        Mark {
            at: Instant::now(),
            log_len: self.lab.tern_log(self.node).len(),
        }
    }

    /// `tern diagnose -o json`'s findings (empty when it does not answer).
    pub fn findings(&self) -> Vec<Value> {
        let (_, out) = self.lab.tern_cli(self.node, &["diagnose", "-o", "json"]);
        serde_json::from_str::<Value>(&out)
            .ok()
            .and_then(|v| v["findings"].as_array().cloned())
            .unwrap_or_default()
    }

    /// `tern diagnose` as text.
    pub fn diagnose_text(&self) -> String {
        self.lab.tern_cli(self.node, &["diagnose"]).1
    }

    /// The node's metrics page (GET /metrics from inside its namespace).
    pub fn metrics(&self) -> Result<String, String> {
        let ns = node_ns(self.lab, self.node);
        std::thread::scope(|s| {
            s.spawn(|| -> Result<String, String> {
                tern_interop::netns::enter_thread(&ns).map_err(|e| e.to_string())?;
                let fail = |e: std::io::Error| format!("GET http://{METRICS}/metrics: {e}");
                let mut conn = std::net::TcpStream::connect(METRICS).map_err(fail)?;
                conn.set_read_timeout(Some(Duration::from_secs(5)))
                    .map_err(fail)?;
                conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                    .map_err(fail)?;
                let mut page = String::new();
                conn.read_to_string(&mut page).map_err(fail)?;
                Ok(page)
            })
            .join()
            .unwrap_or_else(|_| Err(format!("the thread in {ns} panicked")))
        })
    }

    /// Findings of `kind` whose subject matches `words`.
    pub fn matching(&self, kind: &str, words: &[&str]) -> Vec<Value> {
        self.findings()
            .into_iter()
            .filter(|f| {
                f["kind"] == kind && subject_matches(f["subject"].as_str().unwrap_or(""), words)
            })
            .collect()
    }

    /// Everything a failure shows: diagnose, the metric lines, the logs' ends.
    fn fail(&self, what: &str) -> ! {
        let page = self.metrics().unwrap_or_else(|e| e);
        let metric_lines: Vec<&str> = page
            .lines()
            .filter(|l| l.starts_with("tern_diagnostic_findings"))
            .collect();
        fail(
            self.lab,
            &format!(
                "{}: {what}\n$ tern diagnose\n{}\nmetrics:\n{}",
                self.test,
                self.diagnose_text(),
                metric_lines.join("\n")
            ),
        )
    }

    /// Waits for a finding of `kind` whose subject matches `words` to be in `tern
    /// diagnose -o json`, in a log line `finding {kind} for {subject}: …` written since
    /// `since`, and in the metric with its severity; records the time and returns it.
    /// `refuse`: a check run on every poll (e.g. that some other finding is absent);
    /// its Err fails the test.
    pub fn appear(
        &self,
        kind: &str,
        words: &[&str],
        since: Mark,
        timeout: Duration,
        mut refuse: impl FnMut(&[Value]) -> Result<(), String>,
    ) -> Seen {
        let deadline = since.at + timeout;
        loop {
            let all = self.findings();
            if let Err(why) = refuse(&all) {
                self.fail(&why);
            }
            if let Some(seen) = self.seen_everywhere(&all, kind, words, since) {
                record(&format!(
                    "{}: {kind} for {} appeared after {:.1} s ({})",
                    self.test,
                    seen.subject,
                    seen.after.as_secs_f64(),
                    seen.severity
                ));
                keep(&format!(
                    "== {}: {kind}\n{}\n$ tern diagnose\n{}",
                    self.test,
                    seen.line,
                    self.diagnose_text()
                ));
                return seen;
            }
            if Instant::now() > deadline {
                self.fail(&format!(
                    "no {kind} finding matching {words:?} in all three places after {:.0} s",
                    timeout.as_secs_f64()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn seen_everywhere(
        &self,
        all: &[Value],
        kind: &str,
        words: &[&str],
        since: Mark,
    ) -> Option<Seen> {
        let f = all.iter().find(|f| {
            f["kind"] == kind && subject_matches(f["subject"].as_str().unwrap_or(""), words)
        })?;
        let text = |k: &str| f[k].as_str().unwrap_or("").to_string();
        let (subject, severity) = (text("subject"), text("severity"));
        let log = self.lab.tern_log(self.node);
        let head = format!("finding {kind} for {subject}: ");
        let line = log
            .get(since.log_len..)?
            .lines()
            .find(|l| l.contains(&head))?
            .to_string();
        let page = self.metrics().ok()?;
        let want = all
            .iter()
            .filter(|g| g["kind"] == kind && g["severity"] == severity.as_str())
            .count();
        let shown = metric(&page, kind)
            .into_iter()
            .find(|(s, _)| *s == severity)
            .map(|(_, v)| v)?;
        // The JSON and the page are read at two instants: equal once both settled.
        ((shown - want as f64).abs() < 0.5).then_some(())?;
        Some(Seen {
            kind: kind.to_string(),
            subject,
            severity,
            evidence: text("evidence"),
            line: line.trim().to_string(),
            after: since.at.elapsed(),
            fault_log_len: since.log_len,
        })
    }

    /// Waits for `seen` to be gone from all three places: not in `tern diagnose -o
    /// json`, its last log line (since `since`) `finding {kind} for {subject} cleared`,
    /// and the metric for its kind equal to the findings of that kind left (0 when none).
    /// Records the time and returns it.
    pub fn clear(&self, seen: &Seen, since: Mark, timeout: Duration) -> Duration {
        let deadline = since.at + timeout;
        let appear = format!("finding {} for {}: ", seen.kind, seen.subject);
        let cleared = format!("finding {} for {} cleared", seen.kind, seen.subject);
        loop {
            let all = self.findings();
            let gone = !all
                .iter()
                .any(|f| f["kind"] == seen.kind.as_str() && f["subject"] == seen.subject.as_str());
            let log = self.lab.tern_log(self.node);
            // The last word about it is the clearing (a flapping finding may have
            // appeared again since).
            let logged = log
                .lines()
                .rev()
                .find(|l| l.contains(&appear) || l.contains(&cleared))
                .is_some_and(|l| l.contains(&cleared))
                && log
                    .get(since.log_len..)
                    .is_some_and(|l| l.contains(&cleared));
            let left = all
                .iter()
                .filter(|f| f["kind"] == seen.kind.as_str())
                .count();
            let metric_ok = self.metrics().is_ok_and(|page| {
                let m = metric(&page, &seen.kind);
                !m.is_empty() && (m.iter().map(|(_, v)| v).sum::<f64>() - left as f64).abs() < 0.5
            });
            if gone && logged && metric_ok {
                // One line when it appeared, one when it cleared: evidence that only
                // counts on (another failed attempt) does not log again.
                let lines = |text: &str| {
                    log.get(seen.fault_log_len..)
                        .unwrap_or("")
                        .lines()
                        .filter(|l| l.contains(text))
                        .count()
                };
                let (appeared, clears) = (lines(&appear), lines(&cleared));
                if (appeared, clears) != (1, 1) {
                    self.fail(&format!(
                        "{} for {} was logged {appeared} time(s) as appearing and {clears} time(s) as cleared between the fault and the repair's end; want once each",
                        seen.kind, seen.subject
                    ));
                }
                let after = since.at.elapsed();
                record(&format!(
                    "{}: {} for {} cleared after {:.1} s",
                    self.test,
                    seen.kind,
                    seen.subject,
                    after.as_secs_f64()
                ));
                return after;
            }
            if Instant::now() > deadline {
                self.fail(&format!(
                    "{} for {} not cleared from all three places after {:.0} s (json gone: {gone}, log: {logged}, metric: {metric_ok})",
                    seen.kind,
                    seen.subject,
                    timeout.as_secs_f64()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// One line for the docs' fault table, printed as a lab timing.
pub fn summary(test: &str, fault: &str, seen: &Seen, cleared: Duration) {
    record(&format!(
        "{test}: fault [{fault}] -> {} ({}) appeared after {:.1} s, cleared after {:.1} s of the repair",
        seen.kind,
        seen.severity,
        seen.after.as_secs_f64(),
        cleared.as_secs_f64()
    ));
}
