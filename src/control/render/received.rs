//! `tern routes --received PEER`: one row per path the peer sent, accepted or
//! rejected, with why a rejected one did not enter the RIB.

use std::fmt::Write as _;

use super::{long_table, path_cells};
use crate::control::proto::ReceivedReply;

/// The text of `tern routes --received PEER`.
pub fn received(r: &ReceivedReply) -> String {
    let mut out = format!(
        "Received from {}: {} accepted, {} rejected.\n",
        r.peer, r.accepted, r.rejected
    );
    if !r.routes.is_empty() {
        let rows: Vec<Vec<String>> = r
            .routes
            .iter()
            .map(|p| {
                let mut status = if p.best {
                    "best"
                } else if p.accepted {
                    "accepted"
                } else {
                    "rejected"
                }
                .to_string();
                if p.stale {
                    status.push_str(",stale");
                }
                let prefix = if p.path_id == 0 {
                    p.prefix.clone()
                } else {
                    format!("{} (path id {})", p.prefix, p.path_id)
                };
                let mut row = vec![prefix];
                row.extend(path_cells(&p.path));
                row.extend([status, p.rejected_by.clone().unwrap_or_else(|| "-".into())]);
                row
            })
            .collect();
        let header = [
            "PREFIX",
            "NEXT HOP",
            "AS PATH",
            "LOCAL PREF",
            "COMMUNITIES",
            "STATUS",
            "REJECTED BY",
        ];
        out.push_str(&long_table(&header, &rows));
        out.push('\n');
    }
    if r.rejected_not_kept > 0 {
        let _ = writeln!(
            out,
            "{} more rejected path(s) this session were not kept: tern keeps at most {} per peer.",
            r.rejected_not_kept,
            tern_bgp::speaker::rejected::KEPT_PER_PEER
        );
    }
    out
}
