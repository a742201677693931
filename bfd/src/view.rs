//! What the BFD driver shows of its sessions to readers outside its task (`tern peers`,
//! the metrics): a copy per session, updated on every change. Plain data, on every
//! platform, so the daemon's snapshot can hold it where the driver does not run.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::packet::{Diag, State};

/// What `tern peers` and the metrics show of one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// Local state.
    pub state: State,
    /// The peer's state, as it last said.
    pub remote_state: State,
    /// Why it last changed.
    pub diag: Diag,
    /// Multi-hop (RFC 5883).
    pub multihop: bool,
    /// Detection time in force.
    pub detection_time: Duration,
    /// Transmit interval in force.
    pub tx_interval: Option<Duration>,
    /// It has been Up.
    pub was_up: bool,
    /// Times a session with this peer went from Up to Down since the driver started.
    pub downs: u64,
}

/// The sessions as last seen, for readers outside the task.
pub type Views = Arc<Mutex<BTreeMap<IpAddr, View>>>;
