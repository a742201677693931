//! What a best path becomes when sent to one peer (RFC 4271 §5 and §9.1.3, RFC 4456,
//! RFC 1997), and the Adj-RIB-Out that remembers what each peer was sent so best-path
//! changes turn into the fewest packed UPDATEs.
//!
//! Rules: never back to the peer it came from; NO_ADVERTISE never, NO_EXPORT and
//! NO_EXPORT_SUBCONFED not to eBGP peers; iBGP-learned paths go to iBGP peers only by
//! route reflection (from a client to everyone, from a non-client to clients), with
//! ORIGINATOR_ID and CLUSTER_LIST set; to eBGP peers our AS is prepended, LOCAL_PREF,
//! MED learnt from others, ORIGINATOR_ID and CLUSTER_LIST removed, and the next hop is
//! ours; to iBGP peers the next hop is kept unless `next_hop_self` (Calico's
//! nextHopMode); unknown optional transitive attributes get the Partial bit.
//!
//! "Ours" towards an eBGP peer is the local address of the session's TCP connection
//! when it is of the route's family (RFC 4271 §5.1.3; BIRD does the same), so a
//! session the kernel sourced from another interface than the node's address still
//! gets a next hop on the network it shares with the peer. Otherwise, and towards
//! iBGP peers, it is the configured address of the family (`local_v4` / `local_v6`).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use bytes::Bytes;
use ipnet::IpNet;

use super::{BestChange, Key, Path};
use crate::wire::pack::{self, NextHop};
use crate::wire::{
    AsPath, CodecOptions, Community, EncodeError, Family, Message, MpNextHop, Nlri, PathAttributes,
    RefreshSubtype, RouteRefresh,
};

/// How routes are sent to one peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportPolicy {
    /// The peer's address.
    pub peer: IpAddr,
    /// The peer is eBGP.
    pub ebgp: bool,
    /// Our AS on this session (Calico's localASNumber may differ from the global one).
    pub local_as: u32,
    /// Our BGP identifier.
    pub router_id: Ipv4Addr,
    /// We are a route reflector with this cluster id (None: not a reflector).
    pub cluster_id: Option<Ipv4Addr>,
    /// The peer is one of our route reflector clients.
    pub peer_is_client: bool,
    /// Always put our own address as next hop, also towards iBGP peers.
    pub next_hop_self: bool,
    /// Never put our own address as next hop on a learnt route, also towards eBGP
    /// peers (Calico's `nextHopMode: Keep`, BIRD's `next hop keep`); our own routes
    /// still carry our address, they have no other.
    pub next_hop_keep: bool,
    /// Our IPv4 address on this session.
    pub local_v4: Option<Ipv4Addr>,
    /// Our IPv6 address, for IPv6 routes (MP-BGP on an IPv4 session too).
    pub local_v6: Option<Ipv6Addr>,
    /// Our end of the session's TCP connection, once it is up: the next hop of the
    /// routes of its family towards an eBGP peer, before `local_v4` / `local_v6`.
    pub session_local: Option<IpAddr>,
    /// We are draining (`tern drain`, RFC 8326): every route carries the
    /// GRACEFUL_SHUTDOWN community, and towards iBGP peers LOCAL_PREF 0, so peers
    /// move to other paths before this node goes.
    pub graceful_shutdown: bool,
}

/// A path as it goes to one peer: its attributes and next hop.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Exported {
    /// Attributes, with NEXT_HOP left out (it travels in `next_hop`).
    pub attrs: PathAttributes,
    /// The next hop to send.
    pub next_hop: IpAddr,
}

/// The path as the peer of `policy` should receive it, or `None` if it must not.
pub fn export(path: &Path, policy: &ExportPolicy) -> Option<Exported> {
    let src = &path.source;
    let a = &path.attrs;
    if !src.local && src.address == policy.peer {
        return None;
    }
    if a.communities.contains(&Community::NO_ADVERTISE) {
        return None;
    }
    let no_export = a.communities.contains(&Community::NO_EXPORT)
        || a.communities.contains(&Community::NO_EXPORT_SUBCONFED);
    if policy.ebgp && no_export {
        return None;
    }
    let ibgp_learnt = !src.local && !src.ebgp;
    // Every refusal is decided before the attributes are copied: in a mesh of a
    // thousand nodes nearly every (path, peer) pair is refused by the iBGP rule.
    let reflect_into = if !policy.ebgp && ibgp_learnt {
        let cluster = policy.cluster_id?;
        if !(src.rr_client || policy.peer_is_client) {
            return None;
        }
        // RFC 4456 §8: a path already through this cluster is a loop.
        if a.cluster_list.contains(&cluster) {
            return None;
        }
        Some(cluster)
    } else {
        None
    };
    let mut out = PathAttributes {
        next_hop: None,
        ..(**a).clone()
    };
    out.unknown = a.unknown.iter().filter_map(|u| u.readvertised()).collect();
    if let Some(cluster) = reflect_into {
        out.originator_id = Some(a.originator_id.unwrap_or(src.router_id));
        out.cluster_list.insert(0, cluster);
    }
    let own = |fam_v6: bool| -> Option<IpAddr> {
        let session = policy.session_local.filter(|a| a.is_ipv6() == fam_v6);
        if policy.ebgp && session.is_some() {
            // RFC 4271 §5.1.3: the address the peer talks to on this connection is
            // on a network it shares with us; the configured one need not be.
            session
        } else if fam_v6 {
            policy.local_v6.map(IpAddr::V6)
        } else {
            policy.local_v4.map(IpAddr::V4)
        }
    };
    let v6 = path.next_hop.is_ipv6();
    let next_hop = if policy.ebgp {
        let base = out.as_path.clone().unwrap_or_default();
        out.as_path = Some(base.prepend(policy.local_as, 1));
        out.local_pref = None;
        out.originator_id = None;
        out.cluster_list.clear();
        if !src.local {
            // MED is not passed from one neighbouring AS to another (RFC 4271 §5.1.4).
            out.med = None;
        }
        if policy.next_hop_keep && !src.local {
            path.next_hop
        } else {
            own(v6)?
        }
    } else {
        if out.as_path.is_none() {
            out.as_path = Some(AsPath::default());
        }
        out.local_pref = Some(
            out.local_pref
                .unwrap_or(super::decision::DEFAULT_LOCAL_PREF),
        );
        if policy.next_hop_self || src.local {
            own(v6)?
        } else {
            path.next_hop
        }
    };
    if policy.graceful_shutdown {
        if !out.communities.contains(&Community::GRACEFUL_SHUTDOWN) {
            out.communities.push(Community::GRACEFUL_SHUTDOWN);
        }
        if !policy.ebgp {
            out.local_pref = Some(0);
        }
    }
    Some(Exported {
        attrs: out,
        next_hop,
    })
}

/// Whether a change is a withdrawal or has only iBGP-learnt paths: what a peer that
/// [refuses them](AdjRibOut::refuses_ibgp) and was not sent the prefix ignores.
pub fn ibgp_learnt_only(c: &BestChange) -> bool {
    let ibgp_learnt = |p: &Path| !p.source.local && !p.source.ebgp;
    c.now
        .as_ref()
        .is_none_or(|b| ibgp_learnt(&b.best) && b.multipath.iter().all(|p| ibgp_learnt(p)))
}

/// The prefixes to announce, grouped by their export. Keyed by address: the memo makes
/// equal exports one `Arc`.
type Groups = HashMap<*const Exported, (Arc<Exported>, Vec<Nlri>)>;

/// Adds `nlri` to the group of `e`.
fn group(groups: &mut Groups, e: Arc<Exported>, nlri: Nlri) {
    groups
        .entry(Arc::as_ptr(&e))
        .or_insert_with(|| (e, Vec::new()))
        .1
        .push(nlri);
}

/// What one peer has been sent, and the UPDATEs that bring it up to date.
#[derive(Debug)]
pub struct AdjRibOut {
    policy: ExportPolicy,
    /// The best path's export per prefix (what `tern routes --advertised` shows), by
    /// the prefix's number in [`Numbering`].
    sent: Sent,
    /// The families the session negotiated: nothing else is sent (a peer that did not
    /// ask for IPv6 gets no IPv6 route, RFC 4760 §6).
    families: Vec<Family>,
    /// Families where we send several paths per prefix (ADD-PATH, RFC 7911): the ECMP
    /// set, each path under its own identifier, so a reflector's clients keep ECMP.
    add_path: Vec<Family>,
    /// With ADD-PATH: every path sent per prefix, by where it came from.
    paths: BTreeMap<Key, Vec<SentPath>>,
}

/// A path sent under ADD-PATH.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SentPath {
    /// Where it came from: the peer and its own path id there.
    key: (IpAddr, u32),
    /// The identifier we sent it under (stable while the path lasts).
    id: u32,
    export: Arc<Exported>,
}

impl AdjRibOut {
    /// An empty Adj-RIB-Out for a peer, for IPv4 and IPv6 unicast.
    pub fn new(policy: ExportPolicy) -> AdjRibOut {
        AdjRibOut {
            policy,
            sent: Sent::default(),
            families: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
            add_path: Vec::new(),
            paths: BTreeMap::new(),
        }
    }

    /// The peer takes no iBGP-learnt path (an iBGP peer, and we are no reflector).
    pub fn refuses_ibgp(&self) -> bool {
        !self.policy.ebgp && self.policy.cluster_id.is_none()
    }

    /// Whether this peer was sent any prefix of `changes`: for a peer that [refuses
    /// iBGP-learnt paths](Self::refuses_ibgp), changes of only such paths cannot
    /// concern it otherwise. In a mesh of a thousand nodes every node's UPDATE meets
    /// a thousand peers, each holding only the few prefixes of its node.
    pub fn holds_any(&self, changes: &[BestChange], memo: &mut ExportMemo<'_>) -> bool {
        if self.sent.len() == 0 && self.paths.is_empty() {
            return false;
        }
        memo.resolve(changes);
        let sent = if self.sent.len() < changes.len() {
            self.sent.iter().any(|(id, _)| memo.changed(id))
        } else {
            (0..changes.len()).any(|i| memo.id(i).is_some_and(|id| self.sent.get(id).is_some()))
        };
        sent || (!self.paths.is_empty()
            && changes
                .iter()
                .any(|c| self.paths.contains_key(&Key::from(c.prefix))))
    }

    /// Drains (RFC 8326) or stops draining: later exports carry the change (the
    /// caller sends the table again).
    pub fn set_graceful_shutdown(&mut self, on: bool) {
        self.policy.graceful_shutdown = on;
    }

    /// Sends every path of the ECMP set for these families (the session negotiated
    /// ADD-PATH send for them).
    pub fn with_add_path(mut self, families: &[Family]) -> AdjRibOut {
        self.add_path = families.to_vec();
        self
    }

    /// Limits it to the families the session negotiated.
    pub fn with_families(mut self, families: &[Family]) -> AdjRibOut {
        self.families = families.to_vec();
        self
    }

    /// Number of prefixes advertised to the peer.
    pub fn len(&self) -> usize {
        self.sent.len()
    }

    /// Whether nothing is advertised.
    pub fn is_empty(&self) -> bool {
        self.sent.len() == 0
    }

    /// Everything the peer currently has, by prefix (`tern routes --advertised`);
    /// `numbers` is the numbering its changes were applied with.
    pub fn iter<'a>(&'a self, numbers: &Numbering) -> Vec<(IpNet, &'a Exported)> {
        let mut all: Vec<(Key, &Exported)> = self
            .sent
            .iter()
            .filter_map(|(id, e)| numbers.key(id).map(|k| (k, e.as_ref())))
            .collect();
        all.sort_unstable_by_key(|(k, _)| *k);
        all.into_iter().map(|(k, e)| (k.net(), e)).collect()
    }

    /// What the peer currently has for `prefix`.
    pub fn get(&self, prefix: &IpNet, numbers: &Numbering) -> Option<&Exported> {
        let id = numbers.get(&Key::from(*prefix))?;
        self.sent.get(id).map(|e| e.as_ref())
    }

    /// Marks the prefix numbers held (see [`Numbering::sweep`]).
    pub fn mark(&self, held: &mut [bool]) {
        self.sent.mark(held);
    }

    /// Answers a ROUTE-REFRESH for `family`: everything the peer has in that family
    /// again, packed; with enhanced route refresh (RFC 7313) between BoRR and EoRR so
    /// the peer can drop what was not repeated.
    pub fn refresh(
        &self,
        family: Family,
        tx: &CodecOptions,
        enhanced: bool,
        numbers: &Numbering,
    ) -> Result<Vec<Bytes>, EncodeError> {
        let v4 = family == Family::IPV4_UNICAST;
        let mut groups: HashMap<Arc<Exported>, Vec<Nlri>> = HashMap::new();
        if self.add_path.contains(&family) {
            for (key, list) in self.paths.iter().filter(|(k, _)| k.v6 != v4) {
                for sp in list {
                    groups
                        .entry(Arc::clone(&sp.export))
                        .or_default()
                        .push(Nlri {
                            prefix: key.net(),
                            path_id: Some(sp.id),
                        });
                }
            }
        } else {
            for (key, e) in self
                .sent
                .iter()
                .filter_map(|(id, e)| numbers.key(id).map(|k| (k, e)))
                .filter(|(k, _)| k.v6 != v4)
            {
                groups
                    .entry(Arc::clone(e))
                    .or_default()
                    .push(Nlri::new(key.net()));
            }
        }
        let mut out = Vec::new();
        let marker = |sub: RefreshSubtype| {
            Message::RouteRefresh(RouteRefresh {
                family,
                subtype: sub,
            })
            .encode(tx)
        };
        if enhanced {
            out.push(marker(RefreshSubtype::BeginningOfRibRefresh)?);
        }
        let mut groups: Vec<(Arc<Exported>, Vec<Nlri>)> = groups.into_iter().collect();
        groups.sort_by_key(|(_, l)| l.first().map(|n| n.prefix));
        for (e, list) in groups {
            self.encode_group(&e, &list, tx, &mut out)?;
        }
        if enhanced {
            out.push(marker(RefreshSubtype::EndOfRibRefresh)?);
        }
        Ok(out)
    }

    /// Applies Loc-RIB changes and returns the UPDATEs to send, encoded with the
    /// session's `tx` options: prefixes that share attributes and next hop packed
    /// together, withdrawals packed per family. `exports` is the speaker's, the same
    /// for every call (it numbers the prefixes).
    pub fn apply(
        &mut self,
        changes: &[BestChange],
        tx: &CodecOptions,
        exports: &mut Exports,
    ) -> Result<Vec<Bytes>, EncodeError> {
        self.apply_with(changes, tx, &mut ExportMemo::new(exports))
    }

    /// [`AdjRibOut::apply`], with exports shared through `memo` with the other peers
    /// the same changes go to.
    pub fn apply_with(
        &mut self,
        changes: &[BestChange],
        tx: &CodecOptions,
        memo: &mut ExportMemo<'_>,
    ) -> Result<Vec<Bytes>, EncodeError> {
        let mut announce = Groups::new();
        let class = memo.class(&self.policy);
        let mut withdraw: BTreeMap<Family, Vec<Nlri>> = BTreeMap::new();
        // An iBGP peer that is not reflected to takes no iBGP-learnt path: in a mesh
        // of a thousand nodes that is nearly every (change, peer) pair, so it is
        // settled here before anything else is looked at.
        let refuses_ibgp = self.refuses_ibgp();
        memo.resolve(changes);
        for (i, c) in changes.iter().enumerate() {
            let key = Key::from(c.prefix);
            let held = memo.id(i).filter(|id| self.sent.get(*id).is_some());
            if refuses_ibgp
                && ibgp_learnt_only(c)
                && held.is_none()
                && !self.paths.contains_key(&key)
            {
                continue;
            }
            let family = if c.prefix.addr().is_ipv4() {
                Family::IPV4_UNICAST
            } else {
                Family::IPV6_UNICAST
            };
            if !self.families.contains(&family) {
                continue;
            }
            if self.add_path.contains(&family) {
                let memo = (&mut *memo, class, i);
                self.apply_add_path(c, family, memo, &mut announce, &mut withdraw);
                continue;
            }
            let new = c
                .now
                .as_ref()
                .and_then(|b| memo.export(&b.best, &self.policy, class));
            match new {
                Some(e) => {
                    let had = held.and_then(|id| self.sent.get(id));
                    if had.is_some_and(|o| Arc::ptr_eq(o, &e) || **o == *e) {
                        continue;
                    }
                    // Prefixes with equal exports share one copy, in the UPDATE
                    // groups and in what is remembered as sent (across peers too).
                    let id = memo.assign(i, key);
                    self.sent.set(id, Arc::clone(&e));
                    group(&mut announce, e, Nlri::new(c.prefix));
                }
                None => {
                    if held.is_some_and(|id| self.sent.remove(id)) {
                        withdraw
                            .entry(family)
                            .or_default()
                            .push(Nlri::new(c.prefix));
                    }
                }
            }
        }
        let mut out = Vec::new();
        for (fam, list) in withdraw {
            pack::withdrawals(fam, &list, tx, &mut out)?;
        }
        // Deterministic order: by first prefix.
        let mut groups: Vec<(Arc<Exported>, Vec<Nlri>)> = announce.into_values().collect();
        groups.sort_by_key(|(_, l)| l.first().map(|n| n.prefix));
        for (e, list) in groups {
            self.encode_group(&e, &list, tx, &mut out)?;
        }
        Ok(out)
    }

    /// One prefix's change under ADD-PATH: each path of the new ECMP set that may be
    /// exported is announced under its identifier (kept from before when it was sent
    /// already, else the smallest free one); paths no longer in the set are withdrawn by
    /// identifier.
    fn apply_add_path(
        &mut self,
        c: &BestChange,
        family: Family,
        (memo, class, i): (&mut ExportMemo<'_>, usize, usize),
        announce: &mut Groups,
        withdraw: &mut BTreeMap<Family, Vec<Nlri>>,
    ) {
        let wanted: Vec<((IpAddr, u32), Arc<Exported>)> = match &c.now {
            Some(b) => {
                let set: Vec<&Arc<Path>> = if b.multipath.is_empty() {
                    vec![&b.best]
                } else {
                    b.multipath.iter().collect()
                };
                set.into_iter()
                    .filter_map(|p| {
                        memo.export(p, &self.policy, class)
                            .map(|e| ((p.source.address, p.path_id), e))
                    })
                    .collect()
            }
            None => Vec::new(),
        };
        let at = Key::from(c.prefix);
        let old = self.paths.remove(&at).unwrap_or_default();
        for sp in old
            .iter()
            .filter(|sp| !wanted.iter().any(|(k, _)| *k == sp.key))
        {
            withdraw.entry(family).or_default().push(Nlri {
                prefix: c.prefix,
                path_id: Some(sp.id),
            });
        }
        let mut used: Vec<u32> = old
            .iter()
            .filter(|sp| wanted.iter().any(|(k, _)| *k == sp.key))
            .map(|sp| sp.id)
            .collect();
        let mut now = Vec::new();
        for (key, e) in wanted {
            let kept = old.iter().find(|sp| sp.key == key);
            if let Some(sp) = kept.filter(|sp| *sp.export == *e) {
                now.push(sp.clone());
                continue;
            }
            let id = match kept {
                Some(sp) => sp.id,
                None => {
                    let id = (1..).find(|i| !used.contains(i)).unwrap_or(u32::MAX);
                    used.push(id);
                    id
                }
            };
            let nlri = Nlri {
                prefix: c.prefix,
                path_id: Some(id),
            };
            group(announce, Arc::clone(&e), nlri);
            now.push(SentPath { key, id, export: e });
        }
        match now.first() {
            Some(first) => {
                let id = memo.assign(i, at);
                self.sent.set(id, Arc::clone(&first.export));
                self.paths.insert(at, now);
            }
            None => {
                if let Some(id) = memo.id(i) {
                    self.sent.remove(id);
                }
            }
        }
    }

    /// Packs prefixes sharing one export into UPDATEs, choosing classic or MP encoding
    /// from the prefix and next-hop families.
    fn encode_group(
        &self,
        e: &Exported,
        list: &[Nlri],
        tx: &CodecOptions,
        out: &mut Vec<Bytes>,
    ) -> Result<(), EncodeError> {
        let v4_prefix = list.first().is_some_and(|n| n.prefix.addr().is_ipv4());
        let (family, nh) = match (v4_prefix, e.next_hop) {
            (true, IpAddr::V4(a)) => {
                let attrs = PathAttributes {
                    next_hop: Some(a),
                    ..e.attrs.clone()
                };
                return pack::announcements(
                    &attrs,
                    Family::IPV4_UNICAST,
                    &NextHop::Classic,
                    list,
                    tx,
                    out,
                );
            }
            (true, IpAddr::V6(g)) => (
                Family::IPV4_UNICAST,
                MpNextHop::V6 {
                    global: g,
                    link_local: None,
                },
            ),
            (false, IpAddr::V6(g)) => (
                Family::IPV6_UNICAST,
                MpNextHop::V6 {
                    global: g,
                    link_local: None,
                },
            ),
            // An IPv6 route over an IPv4 next hop: the IPv4-mapped form, as FRR sends it.
            (false, IpAddr::V4(a)) => (
                Family::IPV6_UNICAST,
                MpNextHop::V6 {
                    global: a.to_ipv6_mapped(),
                    link_local: None,
                },
            ),
        };
        pack::announcements(&e.attrs, family, &NextHop::Mp(nh), list, tx, out)
    }
}

mod memo;
mod sent;
#[cfg(test)]
mod tests;

pub use memo::{ExportMemo, Exports};
pub use sent::Numbering;
use sent::Sent;
