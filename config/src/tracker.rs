//! Follows a datastore for one node: each snapshot is validated and turned into an
//! intent; a snapshot that fails is rejected as a whole and the intent in force stays,
//! so a bad edit never half-applies and never tears sessions down.

use crate::cluster::{Cluster, ConfigErrors};
use crate::datastore::endpoint_status::LocalWorkload;
use crate::datastore::Document;
use crate::diff::{diff, IntentDiff};
use crate::error::Warning;
use crate::intent::{intent_of, Intent, IntentError, RouterIdSetting};

/// Why a snapshot was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// Resources that do not validate.
    #[error("{0}")]
    Invalid(ConfigErrors),
    /// Valid resources from which this node's intent cannot be computed.
    #[error("{0}")]
    NoIntent(IntentError),
    /// A document larger than the limit, refused before it is parsed.
    #[error("{origin}: {bytes} bytes, more than the {limit}-byte limit for one datastore document (limits.datastore_document_bytes in tern.yaml)")]
    TooLarge {
        /// The file or etcd key.
        origin: String,
        /// Its size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
}

/// The result of an accepted snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    /// What changed against the previous intent (everything, the first time).
    pub diff: IntentDiff,
    /// Resource warnings and intent notes, as text for the log.
    pub warnings: Vec<String>,
}

/// The intent in force for one node.
#[derive(Debug, Clone)]
pub struct Tracker {
    node: String,
    current: Option<Intent>,
    revision: Option<i64>,
    max_document_bytes: u64,
    router_id: Option<RouterIdSetting>,
    /// The snapshot of the intent in force, to compute it again when the workloads
    /// change.
    cluster: Option<Cluster>,
    /// This node's workloads selected for local workload peerings.
    local: Vec<LocalWorkload>,
}

impl Tracker {
    /// A tracker for `node` with no intent yet.
    pub fn new(node: impl Into<String>) -> Tracker {
        Tracker {
            node: node.into(),
            current: None,
            revision: None,
            max_document_bytes: crate::daemon::limits::DEFAULT_DATASTORE_DOCUMENT_BYTES,
            router_id: None,
            cluster: None,
            local: Vec::new(),
        }
    }

    /// Takes the router id from `CALICO_ROUTER_ID` (see [`intent_with`]) instead of
    /// the Node's IPv4 address; `None` keeps the address.
    pub fn with_router_id(mut self, router_id: Option<RouterIdSetting>) -> Tracker {
        self.router_id = router_id;
        self
    }

    /// Refuses documents larger than `bytes` before parsing them: YAML parsing costs
    /// memory in proportion, and a runaway file or etcd value must not take the node
    /// down with it.
    pub fn with_max_document_bytes(mut self, bytes: u64) -> Tracker {
        self.max_document_bytes = bytes;
        self
    }

    /// The intent in force, if any snapshot was accepted.
    pub fn current(&self) -> Option<&Intent> {
        self.current.as_ref()
    }

    /// Store revision of the intent in force.
    pub fn revision(&self) -> Option<i64> {
        self.revision
    }

    /// Validates a snapshot; on success it becomes the intent in force and the diff
    /// says what to change. On failure nothing changes.
    pub fn apply(&mut self, documents: &[Document], revision: i64) -> Result<Accepted, Rejected> {
        if let Some(d) = documents
            .iter()
            .find(|d| d.text.len() as u64 > self.max_document_bytes)
        {
            return Err(Rejected::TooLarge {
                origin: d.origin.clone(),
                bytes: d.text.len() as u64,
                limit: self.max_document_bytes,
            });
        }
        let (cluster, warnings) = Cluster::from_documents(documents).map_err(Rejected::Invalid)?;
        let (next, notes) = intent_of(&cluster, &self.node, self.router_id, &self.local)
            .map_err(Rejected::NoIntent)?;
        let diff = self.take(next);
        self.cluster = Some(cluster);
        self.revision = Some(revision);
        Ok(Accepted {
            diff,
            warnings: warnings
                .iter()
                .map(Warning::to_string)
                .chain(notes)
                .collect(),
        })
    }

    /// The workloads Felix selected for local workload peerings changed: the intent in
    /// force is computed again from its snapshot (`None` before the first snapshot,
    /// whose intent will include them). The snapshot was valid once and the workloads
    /// only add sessions, so this cannot fail for a reason the snapshot did not.
    pub fn apply_local_workloads(
        &mut self,
        local: Vec<LocalWorkload>,
    ) -> Option<Result<Accepted, Rejected>> {
        self.local = local;
        let cluster = self.cluster.as_ref()?;
        let result = intent_of(cluster, &self.node, self.router_id, &self.local);
        Some(match result {
            Ok((next, notes)) => Ok(Accepted {
                diff: self.take(next),
                warnings: notes,
            }),
            Err(e) => Err(Rejected::NoIntent(e)),
        })
    }

    /// Makes `next` the intent in force; the diff from the one before.
    fn take(&mut self, next: Intent) -> IntentDiff {
        let diff = match &self.current {
            Some(old) => diff(old, &next),
            None => first_diff(&next),
        };
        self.current = Some(next);
        diff
    }
}

/// Everything is new the first time.
fn first_diff(i: &Intent) -> IntentDiff {
    IntentDiff {
        identity_changed: true,
        peers_added: i.peers.values().cloned().collect(),
        originated: i.originated.clone(),
        peer_routes: i
            .peer_routes()
            .into_iter()
            .map(|(n, gw)| (n, Some(gw)))
            .collect(),
        policy_changed: true,
        ..IntentDiff::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs(text: &str) -> Vec<Document> {
        vec![Document {
            origin: "cluster.yaml".into(),
            text: text.into(),
        }]
    }

    #[test]
    fn workloads_felix_selects_change_the_intent_in_force_without_a_snapshot() {
        let text = format!(
            "{}---\napiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {{name: vms}}\nspec: {{localWorkloadSelector: all(), asNumber: 65100}}\n",
            crate::cluster::tests::example("mesh")
        );
        let vm = LocalWorkload {
            file: "f".into(),
            bgp_peer: "vms".into(),
            interface: "cali1".into(),
            ipv4: Some(std::net::Ipv4Addr::new(198, 18, 4, 5)),
            ipv6: None,
        };
        let mut t = Tracker::new("node-a");
        // Before the first snapshot: kept for it.
        assert!(t.apply_local_workloads(vec![vm.clone()]).is_none());
        let first = t.apply(&docs(&text), 1).unwrap();
        let added = |d: &IntentDiff| d.peers_added.iter().map(|p| p.address).collect::<Vec<_>>();
        assert!(added(&first.diff).contains(&"198.18.4.5".parse().unwrap()));
        // Gone (the endpoint went down), then back.
        let gone = t.apply_local_workloads(Vec::new()).unwrap().unwrap();
        assert_eq!(
            gone.diff.peers_removed,
            vec!["198.18.4.5".parse::<std::net::IpAddr>().unwrap()]
        );
        let back = t.apply_local_workloads(vec![vm]).unwrap().unwrap();
        assert_eq!(
            added(&back.diff),
            vec!["198.18.4.5".parse::<std::net::IpAddr>().unwrap()]
        );
        assert_eq!(t.revision(), Some(1));
    }

    #[test]
    fn an_oversized_document_is_refused_unparsed_and_the_old_intent_stays() {
        let good = crate::cluster::tests::example("mesh");
        let mut t = Tracker::new("node-a").with_max_document_bytes(good.len() as u64 + 10);
        t.apply(&docs(&good), 1).unwrap();
        let before = t.current().cloned();
        // Padding that would parse fine: only the size is wrong.
        let big = format!("{good}\n#{}\n", "x".repeat(20));
        let e = t.apply(&docs(&big), 2).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cluster.yaml: {} bytes, more than the {}-byte limit for one datastore document (limits.datastore_document_bytes in tern.yaml)",
                big.len(),
                good.len() + 10
            )
        );
        assert_eq!(t.current().cloned(), before);
        assert_eq!(t.revision(), Some(1));
    }

    #[test]
    fn an_overflowing_duration_is_rejected_naming_the_field_and_the_old_intent_stays() {
        // Issue 23: one BGPPeer with this keepaliveTime made parsing panic ("overflow
        // when adding durations"), taking the daemon's main task down on every node.
        const HUGE: &str = "10000000000000000000s10000000000000000000s";
        let good = crate::cluster::tests::example("mesh");
        let mut t = Tracker::new("node-a");
        t.apply(&docs(&good), 1).unwrap();
        let before = t.current().cloned();
        assert!(before.is_some());

        let bad = format!(
            "{good}\n---\napiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {{name: tor}}\nspec: {{peerIP: 198.51.100.1, asNumber: 65001, keepaliveTime: \"{HUGE}\"}}\n"
        );
        let e = t.apply(&docs(&bad), 2).unwrap_err();
        let Rejected::Invalid(errors) = &e else {
            panic!("rejected for another reason: {e}");
        };
        assert_eq!(errors.0.len(), 1, "{e}");
        assert_eq!(errors.0[0].field.as_deref(), Some("spec.keepaliveTime"));
        assert!(
            e.to_string().contains(&format!(
                "BGPPeer tor): field `spec.keepaliveTime`: \"{HUGE}\" is longer than the largest duration accepted (2562047h47m16.854775807s"
            )),
            "{e}"
        );
        assert_eq!(t.current().cloned(), before);
        assert_eq!(t.revision(), Some(1));

        // The same value from etcd (JSON under a BGPPeer key) and as the cluster file,
        // through every loader path the fuzz targets check: no panic either way.
        crate::fuzzing::check_cluster(bad.as_bytes());
        let json = format!(
            r#"{{"spec":{{"peerIP":"198.51.100.1","asNumber":65001,"keepaliveTime":"{HUGE}"}}}}"#
        );
        crate::fuzzing::check_cluster(json.as_bytes());
    }

    #[test]
    fn a_bad_edit_is_rejected_and_the_old_intent_stays() {
        let good = crate::cluster::tests::example("mesh");
        let mut t = Tracker::new("node-a");
        let first = t.apply(&docs(&good), 1).unwrap();
        assert_eq!(first.diff.peers_added.len(), 4);
        let before = t.current().cloned();

        let bad = good.replace("asNumber: 64512", "asNumber: 0");
        let e = t.apply(&docs(&bad), 2).unwrap_err();
        assert!(e.to_string().contains("AS 0 is reserved"), "{e}");
        assert_eq!(t.current().cloned(), before);
        assert_eq!(t.revision(), Some(1));

        // Valid resources, but this node vanished: rejected too.
        let gone = good.replace("name: node-a}", "name: node-x}");
        assert!(matches!(
            t.apply(&docs(&gone), 3),
            Err(Rejected::NoIntent(_))
        ));
        assert_eq!(t.current().cloned(), before);

        let again = t.apply(&docs(&good), 4).unwrap();
        assert!(again.diff.is_empty());
        assert_eq!(t.revision(), Some(4));
    }
}
