//! The control socket's actions (`tern reset`, `tern disable`, `tern enable`,
//! `tern log-level`): handed to the owner of what they change (the speaker, the log
//! filter). The server has checked that root asked, and logs who did.

use serde_json::Value;
use tern_bgp::speaker::{PeerAction, SpeakerCommand};

use super::{json, parse_address, DaemonHandler};
use crate::control::proto::ActionReply;

/// The NOTIFICATION text of a reset or a disable without one of the operator's.
const DEFAULT_MESSAGE: &str = "tern: operator action";

impl DaemonHandler {
    /// `tern reset PEER [--soft in|out]`, `tern disable PEER`, `tern enable PEER`.
    pub(super) async fn peer_action(
        &self,
        address: &str,
        action: &str,
        message: Option<&str>,
    ) -> Result<Value, String> {
        let ip = parse_address(address)?;
        let action = match action {
            "reset" => PeerAction::Reset,
            "soft-in" => PeerAction::SoftIn,
            "soft-out" => PeerAction::SoftOut,
            "disable" => PeerAction::Disable,
            "enable" => PeerAction::Enable,
            other => {
                return Err(format!(
                    "{other:?} is not a peer action: reset, soft-in, soft-out, disable or enable"
                ))
            }
        };
        let text = message.unwrap_or(DEFAULT_MESSAGE).to_string();
        let done = self
            .ask_speaker(|tx| SpeakerCommand::Operate(ip, action, text, tx))
            .await??;
        json(&ActionReply { done })
    }

    /// `tern drain` / `tern undrain`.
    pub(super) async fn drain(&self, on: bool) -> Result<Value, String> {
        let done = self.ask_speaker(|tx| SpeakerCommand::Drain(on, tx)).await?;
        self.lock()?.draining = on;
        json(&ActionReply { done })
    }

    /// `tern log-level LEVEL`.
    pub(super) fn log_level(&self, level: &str) -> Result<Value, String> {
        let done = crate::logging::set_filter(level)?;
        json(&ActionReply { done })
    }
}
