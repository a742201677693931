//! Per-peer session troubles (connect attempts that time out or are refused,
//! NOTIFICATIONs while the session is down, a duplicate router ID), kept from the
//! speaker's events and turned into diagnostic findings.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::state::State;

/// What went wrong with each peer's session since it was last up.
#[derive(Debug, Default)]
pub struct Troubles {
    /// By peer address; removed when the session comes up or the peer goes away.
    pub by_peer: BTreeMap<IpAddr, PeerTrouble>,
}

/// One peer's trouble.
#[derive(Debug, Default, Clone)]
pub struct PeerTrouble {}

/// The findings the troubles make.
pub fn findings(_s: &State) -> Vec<tern_fib::diag::Finding> {
    Vec::new()
}
