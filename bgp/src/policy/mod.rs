//! Route policy: a small filter language with BIRD's semantics, pure and per peer.
//!
//! A [`PeerPolicy`] holds one [`Program`] for routes received from the peer (import)
//! and one for routes sent to it (export). A program is an ordered list of
//! [`Statement`]s: the first statement whose conditions all hold applies its
//! modifications and then accepts, rejects, or (with [`Action::Continue`]) lets
//! evaluation go on with the modified route; when no statement decides, the program's
//! default does. That is how a BIRD filter runs (`if … then { …; accept; }` lines,
//! then a final `accept;` or `reject;`), and it is all tern needs to express Calico's
//! confd filters: the peer's BGPFilters, then Calico's own export or import logic.
//!
//! Nothing here knows Calico's resources: `tern-config` compiles them into programs.
//! The speaker evaluates [`Program::evaluate`] on facts about one route and applies
//! the resulting [`Changes`] to the path's attributes.

mod pattern;
#[cfg(test)]
mod tests;

use std::fmt;

use ipnet::IpNet;

use crate::wire::{AsPath, Community, LargeCommunity, PathAttributes};

pub use pattern::interface_matches;

/// The largest value of BIRD's integers (2^31 - 1). Calico v3.32 converts a route's
/// priority (the kernel metric) to LOCAL_PREF and back as `this - value`, so that a
/// lower metric is a higher preference.
pub const BIRD_INT_MAX: u32 = 2_147_483_647;

/// The kernel metric of an ordinary route in Calico (BGPConfiguration
/// `ipv4NormalRoutePriority` / `ipv6NormalRoutePriority`, default 1024).
pub const DEFAULT_NORMAL_PRIORITY: u32 = 1024;

/// Where a route comes from, as BIRD's `source` attribute tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouteSource {
    /// Originated by this node from its configuration: own blocks, service ranges and
    /// service addresses (BIRD's static protocol, `RTS_STATIC`).
    Originated,
    /// Learned from the kernel or an interface, e.g. a workload's /32 on a `cali*`
    /// interface (`RTS_INHERIT`, `RTS_DEVICE`).
    Kernel,
    /// Learned from a BGP peer (`RTS_BGP`).
    Bgp,
}

/// The kind of session a route is received from (import) or sent to (export).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerType {
    /// Same AS on both sides (Calico's `iBGP`, BIRD's `is_same_as`).
    Internal,
    /// Different ASes (Calico's `eBGP`).
    External,
}

/// An address family, to keep an IPv4 rule away from IPv6 routes and back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpFamily {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl IpFamily {
    /// The family of `net`.
    pub fn of(net: &IpNet) -> IpFamily {
        match net {
            IpNet::V4(_) => IpFamily::V4,
            IpNet::V6(_) => IpFamily::V6,
        }
    }
}

/// How a prefix is compared with a CIDR (BIRD's `=`, `!=`, `~`, `!~`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PrefixOp {
    /// The same network and length.
    Equal,
    /// Not [`PrefixOp::Equal`].
    NotEqual,
    /// Inside the CIDR or equal to it: BIRD's `net ~ 10.0.0.0/8`.
    In,
    /// Not [`PrefixOp::In`].
    NotIn,
}

/// One test on a route. A statement's conditions must all hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Condition {
    /// The route's family.
    Family(IpFamily),
    /// The prefix against a CIDR. Another family never equals nor lies inside it.
    Prefix {
        /// The CIDR.
        cidr: IpNet,
        /// The comparison.
        op: PrefixOp,
    },
    /// BIRD's prefix pattern `net ~ [ cidr{min,max} ]`: inside `cidr` with a length
    /// from `min` to `max`; `negate` is `!~`.
    PrefixRange {
        /// The CIDR.
        cidr: IpNet,
        /// Shortest length matched.
        min: u8,
        /// Longest length matched.
        max: u8,
        /// Match the routes the pattern does not.
        negate: bool,
    },
    /// Where the route comes from.
    Source(RouteSource),
    /// The route's outgoing interface matches a BIRD shell pattern (`cali*`,
    /// `*.calico`); a route without an interface has the empty name, as in BIRD.
    Interface(String),
    /// The route carries this standard community (after earlier modifications).
    Community(Community),
    /// The route carries this large community (after earlier modifications).
    LargeCommunity(LargeCommunity),
    /// The AS_PATH begins with these ASes, in order (after earlier prepends).
    AsPathPrefix(Vec<u32>),
    /// The route's priority (kernel metric, Calico's `priority`) is this value.
    Priority(u32),
    /// The peer is of this type.
    PeerType(PeerType),
}

/// A change a statement makes to the route before its action.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Modification {
    /// Add a standard community (nothing if present).
    AddCommunity(Community),
    /// Add a large community (nothing if present).
    AddLargeCommunity(LargeCommunity),
    /// Put these ASes in front of the AS_PATH, in this order.
    PrependAsPath(Vec<u32>),
    /// Set the priority (kernel metric).
    SetPriority(u32),
    /// Set LOCAL_PREF.
    SetLocalPref(u32),
    /// Calico v3.32's export preamble: a BGP route's priority comes from its
    /// LOCAL_PREF (`BIRD_INT_MAX - local_pref`); any other route's priority is its
    /// kernel metric, or `normal` without one, and its LOCAL_PREF becomes
    /// `BIRD_INT_MAX - priority`.
    DerivePriority {
        /// The normal route priority.
        normal: u32,
    },
}

/// What a statement does once its conditions hold and its modifications are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Accept the route: evaluation ends.
    Accept,
    /// Reject the route: evaluation ends.
    Reject,
    /// Keep the modifications and go on with the next statement.
    Continue,
}

/// One `if (conditions) then { modifications; action }` line.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Statement {
    /// Where the statement comes from, for logs and diagnostics (e.g. `BGPFilter
    /// tor importV4[0]`).
    pub label: String,
    /// All must hold; none means always.
    pub conditions: Vec<Condition>,
    /// Made in order when the conditions hold.
    pub modifications: Vec<Modification>,
    /// Then this.
    pub action: Action,
}

/// Accept or reject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// The route passes.
    Accept,
    /// The route is dropped.
    Reject,
}

/// An ordered list of statements and what happens when none decides.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Program {
    /// In order.
    pub statements: Vec<Statement>,
    /// When no statement accepts or rejects.
    pub default: Decision,
}

/// The two programs of one peer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerPolicy {
    /// For routes received from the peer, before the Adj-RIB-In keeps them.
    pub import: Program,
    /// For routes sent to the peer, before the Adj-RIB-Out.
    pub export: Program,
}

/// What the policy needs to know about one route.
#[derive(Debug, Clone, Copy)]
pub struct RouteFacts<'a> {
    /// The prefix.
    pub prefix: IpNet,
    /// Where it comes from.
    pub source: RouteSource,
    /// Its outgoing interface, when known (a kernel route's interface; for a BGP
    /// route, the interface toward its next hop).
    pub interface: Option<&'a str>,
    /// Its attributes (communities, large communities, AS_PATH, LOCAL_PREF).
    pub attrs: &'a PathAttributes,
    /// The kernel metric of a kernel route, or of a route whose priority is known.
    pub kernel_metric: Option<u32>,
    /// The type of the peer the route is received from or sent to.
    pub peer: PeerType,
}

/// The modifications a program made to an accepted route.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Changes {
    /// Standard communities to add, in order (none already on the route).
    pub communities: Vec<Community>,
    /// Large communities to add, in order (none already on the route).
    pub large_communities: Vec<LargeCommunity>,
    /// ASes to put in front of the AS_PATH, in the order they end up in.
    pub prepend: Vec<u32>,
    /// The new LOCAL_PREF, when set.
    pub local_pref: Option<u32>,
    /// The route's priority (kernel metric) after the program, when defined.
    pub priority: Option<u32>,
}

impl Changes {
    /// Applies the changes to `attrs`.
    pub fn apply(&self, attrs: &mut PathAttributes) {
        attrs.communities.extend(self.communities.iter().copied());
        attrs
            .large_communities
            .extend(self.large_communities.iter().copied());
        if !self.prepend.is_empty() {
            attrs.as_path = Some(prepended(attrs.as_path.as_ref(), &self.prepend));
        }
        if let Some(lp) = self.local_pref {
            attrs.local_pref = Some(lp);
        }
    }
}

/// The outcome of a program on one route.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Verdict {
    /// Accepted or rejected.
    pub decision: Decision,
    /// What to change on an accepted route (empty on a rejected one).
    pub changes: Changes,
    /// The index of the statement that decided; `None` when the default did.
    pub decided_by: Option<usize>,
}

impl Verdict {
    /// The route passes.
    pub fn accepted(&self) -> bool {
        self.decision == Decision::Accept
    }
}

/// The route as statements have modified it so far.
struct State<'a> {
    facts: &'a RouteFacts<'a>,
    changes: Changes,
}

impl State<'_> {
    fn local_pref(&self) -> Option<u32> {
        self.changes.local_pref.or(self.facts.attrs.local_pref)
    }

    fn has_community(&self, c: Community) -> bool {
        self.facts.attrs.communities.contains(&c) || self.changes.communities.contains(&c)
    }

    fn has_large(&self, c: LargeCommunity) -> bool {
        self.facts.attrs.large_communities.contains(&c)
            || self.changes.large_communities.contains(&c)
    }

    fn holds(&self, c: &Condition) -> bool {
        let f = self.facts;
        match c {
            Condition::Family(fam) => IpFamily::of(&f.prefix) == *fam,
            Condition::Prefix { cidr, op } => prefix_matches(&f.prefix, cidr, *op),
            Condition::PrefixRange {
                cidr,
                min,
                max,
                negate,
            } => {
                let len = f.prefix.prefix_len();
                let hit =
                    prefix_matches(&f.prefix, cidr, PrefixOp::In) && *min <= len && len <= *max;
                hit != *negate
            }
            Condition::Source(s) => f.source == *s,
            // BIRD's `ifname` is always defined: empty for a route without an
            // interface (a blackhole), so only a pattern such as `*` matches it.
            Condition::Interface(p) => interface_matches(p, f.interface.unwrap_or("")),
            Condition::Community(c) => self.has_community(*c),
            Condition::LargeCommunity(c) => self.has_large(*c),
            Condition::AsPathPrefix(asns) => {
                pattern::path_starts_with(&self.changes.prepend, f.attrs.as_path.as_ref(), asns)
            }
            Condition::Priority(p) => self.changes.priority == Some(*p),
            Condition::PeerType(t) => f.peer == *t,
        }
    }

    fn modify(&mut self, m: &Modification) {
        let ch = &mut self.changes;
        match m {
            Modification::AddCommunity(c) => {
                if !self.facts.attrs.communities.contains(c) && !ch.communities.contains(c) {
                    ch.communities.push(*c);
                }
            }
            Modification::AddLargeCommunity(c) => {
                if !self.facts.attrs.large_communities.contains(c)
                    && !ch.large_communities.contains(c)
                {
                    ch.large_communities.push(*c);
                }
            }
            Modification::PrependAsPath(asns) => {
                ch.prepend.splice(0..0, asns.iter().copied());
            }
            Modification::SetPriority(p) => ch.priority = Some(*p),
            Modification::SetLocalPref(lp) => ch.local_pref = Some(*lp),
            Modification::DerivePriority { normal } => {
                let lp = self.local_pref();
                match (self.facts.source, lp) {
                    (RouteSource::Bgp, Some(lp)) => {
                        self.changes.priority = Some(BIRD_INT_MAX.saturating_sub(lp));
                    }
                    _ => {
                        let p = self.changes.priority.unwrap_or(*normal);
                        self.changes.priority = Some(p);
                        self.changes.local_pref = Some(BIRD_INT_MAX.saturating_sub(p));
                    }
                }
            }
        }
    }
}

/// BIRD's comparison of a route's prefix with a CIDR. `~` (In) means inside or
/// equal: the route is at least as long and agrees on the CIDR's bits.
pub fn prefix_matches(net: &IpNet, cidr: &IpNet, op: PrefixOp) -> bool {
    let same_family = IpFamily::of(net) == IpFamily::of(cidr);
    match op {
        PrefixOp::Equal => same_family && net.trunc() == cidr.trunc(),
        PrefixOp::NotEqual => !(same_family && net.trunc() == cidr.trunc()),
        PrefixOp::In => same_family && cidr.trunc().contains(&net.trunc()),
        PrefixOp::NotIn => !(same_family && cidr.trunc().contains(&net.trunc())),
    }
}

impl Program {
    /// A program that only has a default.
    pub fn default_only(default: Decision) -> Program {
        Program {
            statements: Vec::new(),
            default,
        }
    }

    /// Runs the program on one route: the first statement whose conditions hold and
    /// whose action is Accept or Reject decides, after every earlier matching
    /// statement's modifications; when none does, the default.
    pub fn evaluate(&self, route: &RouteFacts<'_>) -> Verdict {
        let mut st = State {
            facts: route,
            changes: Changes {
                // A BGP route has no kernel metric until a statement sets one (in
                // BIRD, `krt_metric` is undefined on it).
                priority: match route.source {
                    RouteSource::Bgp => None,
                    _ => route.kernel_metric,
                },
                ..Changes::default()
            },
        };
        for (i, s) in self.statements.iter().enumerate() {
            if !s.conditions.iter().all(|c| st.holds(c)) {
                continue;
            }
            for m in &s.modifications {
                st.modify(m);
            }
            match s.action {
                Action::Continue => {}
                Action::Accept => {
                    return Verdict {
                        decision: Decision::Accept,
                        changes: st.changes,
                        decided_by: Some(i),
                    }
                }
                Action::Reject => {
                    return Verdict {
                        decision: Decision::Reject,
                        changes: Changes::default(),
                        decided_by: Some(i),
                    }
                }
            }
        }
        Verdict {
            decision: self.default,
            changes: match self.default {
                Decision::Accept => st.changes,
                Decision::Reject => Changes::default(),
            },
            decided_by: None,
        }
    }

    /// The label of statement `i` (the one a [`Verdict`] names), or `default`.
    pub fn label(&self, decided_by: Option<usize>) -> &str {
        decided_by
            .and_then(|i| self.statements.get(i))
            .map_or("default", |s| s.label.as_str())
    }
}

impl fmt::Display for PrefixOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PrefixOp::Equal => "=",
            PrefixOp::NotEqual => "!=",
            PrefixOp::In => "~",
            PrefixOp::NotIn => "!~",
        })
    }
}

/// A path with `asns` prepended, for callers that build attributes by hand.
pub fn prepended(path: Option<&AsPath>, asns: &[u32]) -> AsPath {
    asns.iter()
        .rev()
        .fold(path.cloned().unwrap_or_default(), |p, a| p.prepend(*a, 1))
}
