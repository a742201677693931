//! Felix's endpoint status files: which of this node's workloads Felix selected for a
//! local workload peering (BGPPeer `localWorkloadSelector`, Calico v3.30+), read the
//! way confd's `local_bgp_peer_watcher.go` reads them.
//!
//! Felix writes one JSON file per workload endpoint that is up, in
//! `/var/run/calico/endpoint-status` (its `endpointStatusPathPrefix` plus
//! `endpoint-status`), and deletes it when the endpoint goes down or away. A file with
//! a `bgpPeerName` names the BGPPeer that selected the workload; the workload's first
//! IPv4 and first IPv6 address become the peer addresses. Felix matches the selector
//! (labels, profiles, the first BGPPeer by name when several match), so tern does not.
//!
//! The directory is polled, as the file store polls its file: Felix replaces files by
//! rename, and a few small files read every two seconds cost nothing. A file that is
//! not valid JSON is skipped with a warning naming it; the others still count.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use tokio::sync::mpsc;

/// Where Felix writes the files by default.
pub const DEFAULT_DIR: &str = "/var/run/calico/endpoint-status";

/// How often the directory is checked.
pub const POLL: Duration = Duration::from_secs(2);

/// Larger files are not Felix's (one endpoint's status is a few hundred bytes).
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// More files than this are not read (a node runs at most a few hundred pods).
const MAX_FILES: usize = 10_000;

/// One workload selected for a local workload peering.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LocalWorkload {
    /// The status file's name (Felix's endpoint key), for messages.
    pub file: String,
    /// The BGPPeer that selected it.
    pub bgp_peer: String,
    /// Its interface on this node (`cali…`).
    pub interface: String,
    /// Its first IPv4 address.
    pub ipv4: Option<Ipv4Addr>,
    /// Its first IPv6 address.
    pub ipv6: Option<Ipv6Addr>,
}

/// A file as Felix writes it (`epstatusfile.WorkloadEndpointStatus`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusFile {
    #[serde(default)]
    iface_name: String,
    #[serde(default)]
    ipv4_nets: Vec<String>,
    #[serde(default)]
    ipv6_nets: Vec<String>,
    #[serde(default, rename = "bgpPeerName")]
    bgp_peer_name: String,
}

/// The address part of `198.18.1.5/32` (or of a bare address).
fn address<A: std::str::FromStr>(net: &str) -> Option<A> {
    net.split('/').next()?.parse().ok()
}

/// One status file: `None` when the workload is not selected for a peering.
pub fn parse(file: &str, text: &str) -> Result<Option<LocalWorkload>, String> {
    let s: StatusFile = serde_json::from_str(text)
        .map_err(|e| format!("endpoint status file {file}: not Felix's JSON: {e}"))?;
    if s.bgp_peer_name.is_empty() {
        return Ok(None);
    }
    let ipv4 = s.ipv4_nets.first().and_then(|n| address(n));
    let ipv6 = s.ipv6_nets.first().and_then(|n| address(n));
    if ipv4.is_none() && ipv6.is_none() {
        return Err(format!(
            "endpoint status file {file}: workload selected by BGPPeer {} has no usable address in ipv4Nets or ipv6Nets",
            s.bgp_peer_name
        ));
    }
    Ok(Some(LocalWorkload {
        file: file.to_string(),
        bgp_peer: s.bgp_peer_name,
        interface: s.iface_name,
        ipv4,
        ipv6,
    }))
}

/// Every selected workload in `dir`, by file name, and a warning per file skipped. A
/// missing directory is no workloads (Felix creates it with the first endpoint).
pub fn read_dir(dir: &Path) -> (Vec<LocalWorkload>, Vec<String>) {
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    for (name, path) in files(dir) {
        let text = match read_small(&path) {
            Ok(t) => t,
            Err(e) => {
                warnings.push(format!("endpoint status file {name}: {e}"));
                continue;
            }
        };
        match parse(&name, &text) {
            Ok(Some(w)) => out.push(w),
            Ok(None) => {}
            Err(e) => warnings.push(e),
        }
    }
    (out, warnings)
}

/// The regular files in `dir` by name (at most [`MAX_FILES`]).
fn files(dir: &Path) -> BTreeMap<String, PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .take(MAX_FILES)
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect()
}

fn read_small(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("larger than {MAX_FILE_BYTES} bytes; not read"));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

/// What changes when a file comes, goes or is rewritten: names, sizes, times.
fn stamp(dir: &Path) -> Vec<(String, u64, Option<SystemTime>)> {
    files(dir)
        .into_iter()
        .map(|(n, p)| {
            let m = std::fs::metadata(p).ok();
            let len = m.as_ref().map_or(0, std::fs::Metadata::len);
            (n, len, m.and_then(|m| m.modified().ok()))
        })
        .collect()
}

/// Sends every selected workload now and whenever they change, until `events`
/// closes. Skipped files are logged once per change.
pub async fn run(dir: PathBuf, poll: Duration, events: mpsc::Sender<Vec<LocalWorkload>>) {
    let mut last_stamp = None;
    let mut last: Option<Vec<LocalWorkload>> = None;
    loop {
        let now = stamp(&dir);
        if last_stamp.as_ref() != Some(&now) {
            last_stamp = Some(now);
            let (workloads, warnings) = read_dir(&dir);
            for w in &warnings {
                tracing::warn!("{w}");
            }
            if last.as_ref() != Some(&workloads) {
                last = Some(workloads.clone());
                if events.send(workloads).await.is_err() {
                    return;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            _ = events.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use super::*;

    /// What Felix writes for a selected KubeVirt VM's pod (fields from
    /// `epstatusfile.WorkloadEndpointStatus`).
    const SELECTED: &str = r#"{"ifaceName":"cali12ab","mac":"ee:ee:ee:ee:ee:ee",
        "ipv4Nets":["198.18.1.5/32","198.18.1.6/32"],"ipv6Nets":["2001:db8:1::5/128"],
        "bgpPeerName":"vm-peers"}"#;

    #[test]
    fn a_selected_workload_peers_from_its_first_address_of_each_family() {
        let w = parse("k8s default%2fvm eth0", SELECTED).unwrap().unwrap();
        assert_eq!(w.bgp_peer, "vm-peers");
        assert_eq!(w.interface, "cali12ab");
        assert_eq!(w.ipv4, Some("198.18.1.5".parse().unwrap()));
        assert_eq!(w.ipv6, Some("2001:db8:1::5".parse().unwrap()));
    }

    #[test]
    fn unselected_workloads_are_none_and_bad_files_are_named() {
        let plain = r#"{"ifaceName":"cali1","ipv4Nets":["198.18.1.7/32"]}"#;
        assert_eq!(parse("f", plain), Ok(None));
        let e = parse("broken-file", "{not json").unwrap_err();
        assert!(e.contains("broken-file"), "{e}");
        let e = parse("f", r#"{"bgpPeerName":"p","ipv4Nets":["x"]}"#).unwrap_err();
        assert!(
            e.contains("BGPPeer p") && e.contains("no usable address"),
            "{e}"
        );
    }

    #[test]
    fn a_directory_is_read_by_file_name_and_a_bad_file_skips_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            read_dir(&dir.path().join("missing")),
            (Vec::new(), Vec::new())
        );
        std::fs::write(dir.path().join("b"), SELECTED).unwrap();
        std::fs::write(dir.path().join("a"), SELECTED.replace("cali12ab", "cali9")).unwrap();
        std::fs::write(dir.path().join("c"), "{").unwrap();
        let (w, warnings) = read_dir(dir.path());
        let names: Vec<&str> = w.iter().map(|w| w.file.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("file c"), "{warnings:?}");
    }
}
