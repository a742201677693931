//! `tern routes --received PEER`: what one peer sent, as the speaker answers it (its
//! paths in the RIB and the rejected ones kept, with why), turned into rows.

use std::net::IpAddr;

use ipnet::IpNet;
use tern_bgp::speaker::rejected::Received;
use tern_bgp::speaker::SpeakerCommand;

use super::{parse_address, parse_prefix_or_address, routes, DaemonHandler};
use crate::control::proto::{ReceivedPath, ReceivedReply};
use crate::daemon::convert::path_info;

impl DaemonHandler {
    /// `tern routes --received PEER [PREFIX] [--family F]`.
    pub(super) async fn received(
        &self,
        peer: &str,
        prefix: Option<&str>,
        family: Option<&str>,
    ) -> Result<ReceivedReply, String> {
        let addr = parse_address(peer)?;
        let prefix = prefix.map(parse_prefix_or_address).transpose()?;
        let v6 = family.map(routes::parse_family).transpose()?;
        let got = self
            .ask_speaker(|tx| SpeakerCommand::Received(addr, prefix, tx))
            .await?
            .ok_or_else(|| format!("{addr} is not a configured peer"))?;
        Ok(reply(addr, &got, v6))
    }
}

/// The rows of `got`, only IPv6 (`Some(true)`) or IPv4 (`Some(false)`) ones if asked:
/// by prefix, an accepted path before a rejected one.
pub(crate) fn reply(peer: IpAddr, got: &Received, v6: Option<bool>) -> ReceivedReply {
    let wanted = |p: &IpNet| v6.is_none_or(|v6| matches!(p, IpNet::V6(_)) == v6);
    let peer_text = peer.to_string();
    let mut rows: Vec<(IpNet, bool, ReceivedPath)> = Vec::new();
    for (prefix, path, best) in got.accepted.iter().filter(|(p, _, _)| wanted(p)) {
        let hops = vec![path.next_hop.to_string()];
        rows.push((
            *prefix,
            false,
            ReceivedPath {
                prefix: prefix.to_string(),
                path: path_info(&path.attrs, hops, peer_text.clone(), "bgp"),
                path_id: path.path_id,
                accepted: true,
                best: *best,
                stale: path.stale,
                rejected_by: None,
            },
        ));
    }
    let accepted = rows.len() as u64;
    for (prefix, path_id, r) in got.rejected.paths.iter().filter(|(p, _, _)| wanted(p)) {
        let hops = r.next_hop.iter().map(ToString::to_string).collect();
        rows.push((
            *prefix,
            true,
            ReceivedPath {
                prefix: prefix.to_string(),
                path: path_info(&r.attrs, hops, peer_text.clone(), "bgp"),
                path_id: *path_id,
                accepted: false,
                best: false,
                stale: false,
                rejected_by: Some(r.reason.to_string()),
            },
        ));
    }
    let rejected = rows.len() as u64 - accepted;
    // Both lists come in prefix order: a stable sort keeps each prefix's paths in it.
    rows.sort_by_key(|r| (r.0, r.1));
    ReceivedReply {
        peer: peer_text,
        accepted,
        rejected,
        rejected_not_kept: got.rejected.not_kept,
        routes: rows.into_iter().map(|(_, _, r)| r).collect(),
    }
}

#[cfg(test)]
#[path = "received_tests.rs"]
mod tests;
