//! Each peer's route policy, compiled from the intent (`Intent::peer_policy`: its
//! BGPFilters and Calico's confd filters) and kept up to date on running sessions: the
//! speaker gets `SetPolicy` for a peer whose compiled programs changed, never a session
//! reset. A BGPFilter-only edit is a relabelled peer in the intent diff (its session
//! continues); here only its policy is replaced.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use tern_bgp::policy::PeerPolicy;
use tern_bgp::speaker::SpeakerCommand;
use tern_config::diff::IntentDiff;
use tern_config::intent::{Intent, PeerIntent};
use tokio::sync::mpsc;

/// What each running session was configured with, by peer: its intent and policy.
#[derive(Debug, Default)]
pub struct Policies {
    sent: BTreeMap<IpAddr, (PeerIntent, Arc<PeerPolicy>)>,
}

/// The compiled policy of `p`.
pub fn compile(intent: &Intent, p: &PeerIntent) -> Arc<PeerPolicy> {
    Arc::new(intent.peer_policy(p))
}

impl Policies {
    /// The sessions the speaker starts with (`convert::speaker_config` set each
    /// peer's policy).
    #[cfg(test)]
    pub fn new(intent: &Intent) -> Policies {
        Policies::with_compiled(intent, &BTreeMap::new())
    }

    /// The same, taking the policies `convert::speaker_config` already compiled
    /// (`compiled`, by peer) instead of compiling them again; a peer missing there is
    /// compiled here.
    pub fn with_compiled(
        intent: &Intent,
        compiled: &BTreeMap<IpAddr, Arc<PeerPolicy>>,
    ) -> Policies {
        Policies {
            sent: intent
                .peers
                .iter()
                .map(|(a, p)| {
                    let policy = compiled
                        .get(a)
                        .cloned()
                        .unwrap_or_else(|| compile(intent, p));
                    (*a, (p.clone(), policy))
                })
                .collect(),
        }
    }

    /// After a diff was applied: records every peer's intent and policy, and sends
    /// `SetPolicy` for each peer whose session continues and whose compiled policy
    /// changed (its BGPFilters, pools, own blocks, communities). A (re)started peer's
    /// policy went with its configuration.
    pub async fn apply(
        &mut self,
        intent: &Intent,
        d: &IntentDiff,
        speaker: &mpsc::Sender<SpeakerCommand>,
    ) {
        let restarted: Vec<IpAddr> = d
            .peers_added
            .iter()
            .chain(&d.peers_changed)
            .map(|p| p.address)
            .collect();
        let mut sent = BTreeMap::new();
        for (a, p) in &intent.peers {
            let new = compile(intent, p);
            let changed = self.sent.get(a).is_none_or(|(_, old)| *old != new);
            if changed && !restarted.contains(a) {
                tracing::info!(peer = %a, "route policy changed: applying it to the running session");
                let _ = speaker
                    .send(SpeakerCommand::SetPolicy(*a, Arc::clone(&new)))
                    .await;
            }
            sent.insert(*a, (p.clone(), new));
        }
        self.sent = sent;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test: a panic is the test failing

    use super::*;
    use tern_config::cluster::Cluster;
    use tern_config::datastore::Document;

    const BASE: &str = "apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 198.51.100.10/24}}
---
apiVersion: projectcalico.org/v3
kind: BGPFilter
metadata: {name: tor-in}
spec:
  importV4:
  - {cidr: 198.18.9.0/24, matchOperator: Equal, action: Reject}
";

    fn intent(peers: &str) -> Intent {
        let (c, _) = Cluster::from_documents(&[Document {
            origin: "cluster.yaml".into(),
            text: format!("{BASE}{peers}"),
        }])
        .unwrap();
        tern_config::intent::intent(&c, "node-a").unwrap().0
    }

    const TOR: &str = "---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor}
spec: {peerIP: 198.51.100.1, asNumber: 64513";

    #[tokio::test]
    async fn a_filter_edit_replaces_the_policy_and_keeps_the_session() {
        let old = intent(&format!("{TOR}}}\n"));
        let new = intent(&format!("{TOR}, filters: [tor-in]}}\n"));
        let d = tern_config::diff::diff(&old, &new);
        assert!(d.peers_changed.is_empty(), "no reset: {d:?}");
        assert_eq!(d.peers_relabelled.len(), 1, "{d:?}");
        let mut policies = Policies::new(&old);
        let (tx, mut rx) = mpsc::channel(4);
        policies.apply(&new, &d, &tx).await;
        match rx.try_recv() {
            Ok(SpeakerCommand::SetPolicy(a, p)) => {
                assert_eq!(a.to_string(), "198.51.100.1");
                assert_eq!(*p, new.peer_policy(&new.peers[&a]));
            }
            other => panic!("expected SetPolicy, got {other:?}"),
        }
        // The same intent again: nothing to send.
        policies.apply(&new, &IntentDiff::default(), &tx).await;
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn another_edit_still_resets_the_session() {
        let old = intent(&format!("{TOR}}}\n"));
        let other_as = TOR.replace("64513", "64514");
        let new = intent(&format!("{other_as}, filters: [tor-in]}}\n"));
        let d = tern_config::diff::diff(&old, &new);
        assert_eq!(d.peers_changed.len(), 1, "{d:?}");
    }
}
