//! Route policy in the speaker, pure: a peer's [`PeerPolicy`] programs applied to what
//! it sends us (after the RFC import checks, before its Adj-RIB-In) and to what we send
//! it (before its Adj-RIB-Out). A route the import program rejects is treated as a
//! withdrawal of that prefix from that peer, so a path accepted earlier goes; a route
//! the export program rejects is withdrawn from the peer if it had been sent. The
//! programs' [`crate::policy::Changes`] are applied to the attributes kept (import) or
//! sent (export).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use crate::policy::{Changes, PeerType, Program, RouteFacts, RouteSource};
use crate::rib::{Best, BestChange, Multipath, Path, Rib};
use crate::wire::{MpReach, MpUnreach, Nlri, PathAttributes, Update};

/// What the policy needs to know about one of our own routes: BIRD's `source` (a
/// block or service route is `Originated`, a workload's borrowed address `Kernel`)
/// and its interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct OwnRoute {
    pub source: RouteSource,
    pub interface: Option<String>,
}

/// Our own routes' kinds, by prefix.
pub(super) type OwnRoutes = BTreeMap<IpNet, OwnRoute>;

/// A route a program rejected, and the statement that did it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refused {
    pub prefix: IpNet,
    /// Its ADD-PATH identifier (0 without ADD-PATH).
    pub path_id: u32,
    pub label: String,
}

/// The peer type of a session between `local_as` and `peer_as`.
pub(super) fn peer_type(local_as: u32, peer_as: u32) -> PeerType {
    if local_as == peer_as {
        PeerType::Internal
    } else {
        PeerType::External
    }
}

/// What a route learnt over eBGP keeps as LOCAL_PREF: the peer's value is ignored
/// (RFC 4271 §5.1.5) and BIRD attaches its default (`default bgp_local_pref`, 100),
/// which Calico's filters then read: the kernel metric `BIRD_INT_MAX - 100` and the
/// LOCAL_PREF passed on to iBGP peers. Seen on BIRD 1.6.8 and 2.0.12 in the lab.
pub(super) fn with_ebgp_local_pref(attrs: &mut PathAttributes) {
    attrs.local_pref = Some(crate::rib::decision::DEFAULT_LOCAL_PREF);
}

/// The facts about a path learnt from a peer.
fn bgp_facts(prefix: IpNet, attrs: &PathAttributes, peer: PeerType) -> RouteFacts<'_> {
    RouteFacts {
        prefix,
        source: RouteSource::Bgp,
        interface: None,
        attrs,
        kernel_metric: None,
        peer,
    }
}

/// Runs the import program on the prefixes an UPDATE announces (its attributes passed
/// the RFC checks already) and returns the UPDATEs to apply instead: the UPDATE's own
/// withdrawals, the rejected prefixes as withdrawals, and the accepted ones grouped by
/// the changes the program made to their attributes.
pub(super) fn import(program: &Program, peer: PeerType, u: &Update) -> (Vec<Update>, Vec<Refused>) {
    let mut refused = Vec::new();
    let mut out = Vec::new();
    if !u.withdrawn.is_empty() || u.mp_unreach.is_some() {
        out.push(Update {
            withdrawn: u.withdrawn.clone(),
            mp_unreach: u.mp_unreach.clone(),
            ..Update::default()
        });
    }
    // Accepted prefixes by the changes made to them: (classic NLRI, MP NLRI).
    let mut groups: Vec<(Changes, Vec<Nlri>, Vec<Nlri>)> = Vec::new();
    let mut rejected_classic = Vec::new();
    let mut rejected_mp = Vec::new();
    let mp_nlri = u
        .mp_reach
        .iter()
        .flat_map(|m| m.nlri.iter().map(|n| (n, true)));
    for (n, mp) in u.nlri.iter().map(|n| (n, false)).chain(mp_nlri) {
        let v = program.evaluate(&bgp_facts(n.prefix, &u.attributes, peer));
        if !v.accepted() {
            refused.push(Refused {
                prefix: n.prefix,
                path_id: n.path_id.unwrap_or(0),
                label: program.label(v.decided_by).to_string(),
            });
            if mp {
                rejected_mp.push(*n);
            } else {
                rejected_classic.push(*n);
            }
            continue;
        }
        let i = match groups.iter().position(|(c, _, _)| *c == v.changes) {
            Some(i) => i,
            None => {
                groups.push((v.changes, Vec::new(), Vec::new()));
                groups.len() - 1
            }
        };
        if let Some((_, classic, mps)) = groups.get_mut(i) {
            if mp {
                mps.push(*n);
            } else {
                classic.push(*n);
            }
        }
    }
    if !rejected_classic.is_empty() {
        out.push(Update {
            withdrawn: rejected_classic,
            ..Update::default()
        });
    }
    if let (Some(m), false) = (&u.mp_reach, rejected_mp.is_empty()) {
        out.push(Update {
            mp_unreach: Some(MpUnreach {
                family: m.family,
                withdrawn: rejected_mp,
                unparsed: None,
            }),
            ..Update::default()
        });
    }
    for (changes, classic, mps) in groups {
        let mut attributes = u.attributes.clone();
        if peer == PeerType::External {
            with_ebgp_local_pref(&mut attributes);
        }
        changes.apply(&mut attributes);
        // A `setPriority` on import is the metric the route gets in the kernel, as
        // BIRD's `krt_metric` set by an import filter (confd's kernel export only
        // derives one when none is set).
        attributes.kernel_priority = changes.priority;
        out.push(Update {
            attributes,
            nlri: classic,
            mp_reach: u
                .mp_reach
                .as_ref()
                .filter(|_| !mps.is_empty())
                .map(|m| MpReach {
                    family: m.family,
                    next_hop: m.next_hop.clone(),
                    nlri: mps,
                    unparsed: None,
                }),
            ..Update::default()
        });
    }
    (out, refused)
}

/// The paths `peer` holds in the RIB that `program` now rejects, as the UPDATE that
/// withdraws them (a new import program: what the peer sent before is judged again).
pub(super) fn reimport(
    rib: &Rib,
    program: &Program,
    peer: IpAddr,
    kind: PeerType,
) -> (Update, Vec<Refused>) {
    let mut u = Update::default();
    let mut v6 = Vec::new();
    let mut refused = Vec::new();
    for prefix in rib.prefixes() {
        for path in rib.paths(&prefix) {
            if path.source.local || path.source.address != peer {
                continue;
            }
            let v = program.evaluate(&bgp_facts(prefix, &path.attrs, kind));
            if v.accepted() {
                continue;
            }
            refused.push(Refused {
                prefix,
                path_id: path.path_id,
                label: program.label(v.decided_by).to_string(),
            });
            let n = Nlri {
                prefix,
                path_id: (path.path_id != 0).then_some(path.path_id),
            };
            if prefix.addr().is_ipv4() {
                u.withdrawn.push(n);
            } else {
                v6.push(n);
            }
        }
    }
    if !v6.is_empty() {
        u.mp_unreach = Some(MpUnreach {
            family: crate::wire::Family::IPV6_UNICAST,
            withdrawn: v6,
            unparsed: None,
        });
    }
    (u, refused)
}

/// What the export program makes of one path.
enum Judged {
    /// It passes as it is.
    Same,
    /// It passes with changed attributes.
    Changed(Arc<Path>),
    /// It is rejected (recorded in `refused`).
    Rejected,
}

/// How export policy sees one peer.
pub(super) struct ExportView<'a> {
    pub program: &'a Program,
    pub peer: PeerType,
    pub own: &'a OwnRoutes,
    /// The peer's address: its own paths are never sent back (split horizon), so
    /// they are not evaluated (nor counted as filtered).
    pub address: IpAddr,
    /// The peer takes no iBGP-learnt path whatever the program says (an iBGP peer and
    /// we are not a reflector): such paths are not evaluated, which in a large mesh
    /// is nearly every (route, peer) pair.
    pub refuses_ibgp: bool,
}

impl ExportView<'_> {
    /// One path through the export program: `None` if rejected, else the path with
    /// the program's changes applied.
    fn path(&self, prefix: IpNet, p: &Arc<Path>, refused: &mut Vec<Refused>) -> Option<Arc<Path>> {
        match self.judge(prefix, p, refused) {
            Judged::Same => Some(Arc::clone(p)),
            Judged::Changed(x) => Some(x),
            Judged::Rejected => None,
        }
    }

    /// One path through the export program, without a copy when it passes as it is.
    fn judge(&self, prefix: IpNet, p: &Arc<Path>, refused: &mut Vec<Refused>) -> Judged {
        let learnt = !p.source.local;
        if learnt && (p.source.address == self.address || self.refuses_ibgp && !p.source.ebgp) {
            return Judged::Same;
        }
        let (source, interface) = match (p.source.local, self.own.get(&prefix)) {
            (true, Some(o)) => (o.source, o.interface.as_deref()),
            (true, None) => (RouteSource::Originated, None),
            (false, _) => (RouteSource::Bgp, None),
        };
        let facts = RouteFacts {
            prefix,
            source,
            interface,
            attrs: &p.attrs,
            kernel_metric: None,
            peer: self.peer,
        };
        let v = self.program.evaluate(&facts);
        if !v.accepted() {
            refused.push(Refused {
                prefix,
                path_id: 0,
                label: self.program.label(v.decided_by).to_string(),
            });
            return Judged::Rejected;
        }
        let c = &v.changes;
        if c.communities.is_empty()
            && c.large_communities.is_empty()
            && c.prepend.is_empty()
            && c.local_pref.is_none()
        {
            return Judged::Same;
        }
        let mut attrs = (*p.attrs).clone();
        c.apply(&mut attrs);
        Judged::Changed(Arc::new(Path {
            attrs: Arc::new(attrs),
            ..(**p).clone()
        }))
    }

    /// Loc-RIB changes as this peer may see them: rejected paths left out of each
    /// entry (an entry with none left becomes a withdrawal), changes applied. Most
    /// changes pass as they are (in a mesh nearly all: the peer takes no iBGP-learnt
    /// path, so none is evaluated), and the list is copied only from the first one
    /// the program alters: a copy per peer and UPDATE was most of a 1,000-node mesh's
    /// CPU.
    pub fn changes<'c>(
        &self,
        changes: &'c [BestChange],
        refused: &mut Vec<Refused>,
    ) -> Cow<'c, [BestChange]> {
        let mut altered: Option<Vec<BestChange>> = None;
        for (i, c) in changes.iter().enumerate() {
            let judged = c.now.as_ref().and_then(|b| self.best(c.prefix, b, refused));
            match (judged, &mut altered) {
                (None, None) => {}
                (None, Some(v)) => v.push(c.clone()),
                (Some(now), v) => {
                    let v = v.get_or_insert_with(|| {
                        let mut v = Vec::with_capacity(changes.len());
                        v.extend(changes.iter().take(i).cloned());
                        v
                    });
                    v.push(BestChange {
                        prefix: c.prefix,
                        now,
                    });
                }
            }
        }
        altered.map_or(Cow::Borrowed(changes), Cow::Owned)
    }

    /// The entry as the program leaves it: `None` if it passes unchanged, else
    /// `Some(entry)` (`Some(None)`: every path rejected).
    fn best(&self, prefix: IpNet, b: &Best, refused: &mut Vec<Refused>) -> Option<Option<Best>> {
        // First without copying anything: does every path pass as it is?
        let mark = refused.len();
        let first = self.judge(prefix, &b.best, refused);
        if b.multipath.iter().all(|p| Arc::ptr_eq(p, &b.best)) {
            // The best path alone (most prefixes): judged once.
            let best = match first {
                Judged::Same => return None,
                Judged::Rejected => return Some(None),
                Judged::Changed(x) => x,
            };
            let mut multipath = Multipath::new();
            if !b.multipath.is_empty() {
                multipath.push(Arc::clone(&best));
            }
            return Some(Some(Best {
                best,
                multipath,
                reason: b.reason,
            }));
        }
        let same = |p: &Arc<Path>, refused: &mut Vec<Refused>| {
            matches!(self.judge(prefix, p, refused), Judged::Same)
        };
        if matches!(first, Judged::Same)
            && b.multipath
                .iter()
                .all(|p| Arc::ptr_eq(p, &b.best) || same(p, refused))
        {
            return None;
        }
        // Judged again below: what was refused on the way is recorded once.
        refused.truncate(mark);
        let best = self.path(prefix, &b.best, refused);
        let mut multipath = Multipath::with_capacity(b.multipath.len());
        for p in &b.multipath {
            if Arc::ptr_eq(p, &b.best) {
                multipath.extend(best.clone());
            } else if let Some(p) = self.path(prefix, p, refused) {
                multipath.push(p);
            }
        }
        let best = best.or_else(|| multipath.first().cloned());
        Some(best.map(|best| Best {
            best,
            multipath,
            reason: b.reason,
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use super::*;
    use crate::policy::{Action, Condition, Decision, Modification, PrefixOp, Statement};

    fn nlri(p: &str) -> Nlri {
        Nlri {
            prefix: p.parse().unwrap(),
            path_id: None,
        }
    }

    #[test]
    fn an_import_set_priority_is_the_kernel_priority_of_the_accepted_prefixes() {
        let program = Program {
            statements: vec![Statement {
                label: "BGPFilter tor importV4[0]".into(),
                conditions: vec![Condition::Prefix {
                    cidr: "198.18.0.0/16".parse().unwrap(),
                    op: PrefixOp::In,
                }],
                modifications: vec![Modification::SetPriority(512)],
                action: Action::Accept,
            }],
            default: Decision::Accept,
        };
        let u = Update {
            attributes: PathAttributes {
                local_pref: Some(100),
                ..PathAttributes::default()
            },
            nlri: vec![nlri("198.18.1.0/24"), nlri("203.0.113.0/24")],
            ..Update::default()
        };
        let (out, refused) = import(&program, PeerType::External, &u);
        assert!(refused.is_empty());
        let prio = |p: &str| {
            out.iter()
                .find(|u| {
                    u.nlri
                        .iter()
                        .any(|n| n.prefix == p.parse::<IpNet>().unwrap())
                })
                .map(|u| u.attributes.kernel_priority)
                .unwrap()
        };
        assert_eq!(prio("198.18.1.0/24"), Some(512));
        assert_eq!(
            prio("203.0.113.0/24"),
            None,
            "no setPriority: derived later"
        );
    }
}
