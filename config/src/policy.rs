//! Calico's routing policy for one peer, compiled from the intent into the speaker's
//! policy language ([`tern_bgp::policy`]), as confd renders it into BIRD filters
//! (Calico v3.32: `bgp_processor.go` `buildImportFilter`/`buildExportFilter`,
//! `template_funcs.go` for BGPFilter rules, `bird_ipam.cfg.template`
//! `calico_export_to_bgp_peers`, `bird_aggr.cfg.template` `calico_aggr`).
//!
//! - Import: the peer's BGPFilters, in the order the BGPPeer lists them and each
//!   filter's rules in order, first match wins; then accept.
//! - Export: Calico's priority preamble (LOCAL_PREF from the route's priority), the
//!   peer's BGPFilters, then `calico_export_to_bgp_peers`: routes inside a pool with
//!   `disableBGPExport` rejected; towards iBGP peers, routes through Felix's tunnel
//!   devices rejected; `prefixAdvertisements` communities added to every route in
//!   their CIDR; own blocks accepted and everything inside them rejected
//!   (`calico_aggr`); service routes and pool routes accepted; everything else
//!   rejected.
//!
//! A BGPFilter rule that matches nothing falls through to Calico's own statements, as
//! BIRD's filter functions do. See docs/policy.md for the conformance table.

#[cfg(test)]
mod bird_tests;
#[cfg(test)]
mod tests;

use tern_bgp::policy::{
    Action as PAction, Condition, Decision, IpFamily, Modification, PeerPolicy, PrefixOp, Program,
    RouteSource, Statement,
};
use tern_bgp::wire::{Community as WireCommunity, LargeCommunity};

use crate::cluster::{Action, Filter, MatchOperator, Operation, Rule};
use crate::intent::{Intent, OriginSource, PeerIntent};
use crate::values::Community;

pub use tern_bgp::policy::interface_matches;

/// The interfaces of the cluster routes Felix programs (VXLAN `vxlan.calico`,
/// WireGuard `wireguard.cali`): confd's `reject_tunnel_routes` keeps them from iBGP
/// peers, which learn them from the owning node.
pub const FELIX_TUNNEL_INTERFACES: [&str; 2] = ["*.cali", "*.calico"];

/// Which way a BGPFilter rule list applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Toward the peer (`exportV4`, `exportV6`).
    Export,
    /// From the peer (`importV4`, `importV6`).
    Import,
}

impl Intent {
    /// The import and export programs of `peer`. The speaker runs `import` on each
    /// route received from the peer and `export` on each route it would send.
    pub fn peer_policy(&self, peer: &PeerIntent) -> PeerPolicy {
        PeerPolicy {
            import: import_program(peer),
            export: self.export_program(peer),
        }
    }

    /// confd's export filter: the preamble, the peer's BGPFilters, then
    /// `calico_export_to_bgp_peers`, then reject.
    fn export_program(&self, peer: &PeerIntent) -> Program {
        // One preamble per family: the normal priority is per family
        // (ipv4NormalRoutePriority / ipv6NormalRoutePriority).
        let mut s: Vec<Statement> = [
            (IpFamily::V4, self.normal_priority.v4),
            (IpFamily::V6, self.normal_priority.v6),
        ]
        .into_iter()
        .map(|(family, normal)| Statement {
            label: "calico: route priority to LOCAL_PREF".into(),
            conditions: vec![Condition::Family(family)],
            modifications: vec![Modification::DerivePriority { normal }],
            action: PAction::Continue,
        })
        .collect();
        s.extend(filter_statements(
            &peer.filters,
            Direction::Export,
            peer.is_ebgp(),
        ));
        s.extend(self.calico_export(!peer.is_ebgp()));
        Program {
            statements: s,
            default: Decision::Reject,
        }
    }

    /// `calico_export_to_bgp_peers(internal_peer)`, statement by statement.
    fn calico_export(&self, internal_peer: bool) -> Vec<Statement> {
        let mut s = Vec::new();
        for p in self.pools.iter().filter(|p| !p.export) {
            s.push(stmt(
                format!("calico: pool {} has disableBGPExport", p.name),
                vec![inside(p.cidr)],
                PAction::Reject,
            ));
        }
        if internal_peer {
            for pat in FELIX_TUNNEL_INTERFACES {
                s.push(stmt(
                    format!("calico: Felix's tunnel route ({pat}), not to iBGP peers"),
                    vec![Condition::Interface(pat.into())],
                    PAction::Reject,
                ));
            }
        }
        for (cidr, comms) in &self.prefix_advertisements {
            s.push(Statement {
                label: format!("calico: prefixAdvertisements {cidr}"),
                conditions: vec![inside(*cidr)],
                modifications: comms.iter().map(|c| add_community(*c)).collect(),
                action: PAction::Continue,
            });
        }
        for b in &self.own_blocks {
            s.push(stmt(
                format!("calico_aggr: own block {b}"),
                vec![Condition::Prefix {
                    cidr: *b,
                    op: PrefixOp::Equal,
                }],
                PAction::Accept,
            ));
            s.push(stmt(
                format!("calico_aggr: inside own block {b}"),
                vec![inside(*b)],
                PAction::Reject,
            ));
        }
        for (net, _) in self
            .originated
            .iter()
            .filter(|(_, o)| matches!(o.source, OriginSource::Service(_)))
        {
            s.push(stmt(
                format!("calico: service route {net}"),
                vec![inside(*net)],
                PAction::Accept,
            ));
        }
        for p in self.pools.iter().filter(|p| p.export) {
            s.push(stmt(
                format!("calico: pool {}", p.name),
                vec![inside(p.cidr)],
                PAction::Accept,
            ));
        }
        s
    }
}

/// confd's import filter: the peer's BGPFilters, then accept.
fn import_program(peer: &PeerIntent) -> Program {
    Program {
        statements: filter_statements(&peer.filters, Direction::Import, peer.is_ebgp()),
        default: Decision::Accept,
    }
}

/// The statements of `filters` in `dir` for a peer (eBGP when `ebgp`), in order:
/// filter by filter, IPv4 then IPv6 rules, each gated on its family. Rules whose
/// `peerType` is the other kind of peer are left out (confd's `is_same_as` guard).
pub fn filter_statements(filters: &[Filter], dir: Direction, ebgp: bool) -> Vec<Statement> {
    let mut out = Vec::new();
    for f in filters {
        let lists = match dir {
            Direction::Export => [("exportV4", &f.export_v4), ("exportV6", &f.export_v6)],
            Direction::Import => [("importV4", &f.import_v4), ("importV6", &f.import_v6)],
        };
        for (field, rules) in lists {
            let family = if field.ends_with("V4") {
                IpFamily::V4
            } else {
                IpFamily::V6
            };
            for (i, r) in rules.iter().enumerate() {
                if r.ebgp.is_some_and(|want| want != ebgp) {
                    continue;
                }
                out.push(rule_statement(
                    format!("BGPFilter {} {field}[{i}]", f.name),
                    family,
                    r,
                ));
            }
        }
    }
    out
}

/// One BGPFilter rule as confd's `filterStatement` renders it.
fn rule_statement(label: String, family: IpFamily, r: &Rule) -> Statement {
    let mut c = vec![Condition::Family(family)];
    if let Some((cidr, op)) = r.cidr {
        c.push(match (r.prefix_length, op) {
            (Some((min, max)), MatchOperator::In | MatchOperator::NotIn) => {
                Condition::PrefixRange {
                    cidr,
                    min,
                    max,
                    negate: op == MatchOperator::NotIn,
                }
            }
            // Validation refuses prefixLength with Equal/NotEqual.
            (_, op) => Condition::Prefix {
                cidr,
                op: prefix_op(op),
            },
        });
    }
    if r.remote_peers_only {
        c.push(Condition::Source(RouteSource::Bgp));
    }
    if let Some(i) = &r.interface {
        c.push(Condition::Interface(i.clone()));
    }
    c.extend(r.communities.iter().map(|x| match to_wire(*x) {
        Ok(w) => Condition::Community(w),
        Err(l) => Condition::LargeCommunity(l),
    }));
    if !r.as_path_prefix.is_empty() {
        c.push(Condition::AsPathPrefix(r.as_path_prefix.clone()));
    }
    if let Some(p) = r.priority {
        c.push(Condition::Priority(p));
    }
    Statement {
        label,
        conditions: c,
        modifications: r
            .operations
            .iter()
            .map(|o| match o {
                Operation::AddCommunity(x) => add_community(*x),
                Operation::PrependAsPath(asns) => Modification::PrependAsPath(asns.clone()),
                Operation::SetPriority(p) => Modification::SetPriority(*p),
            })
            .collect(),
        action: match r.action {
            Action::Accept => PAction::Accept,
            Action::Reject => PAction::Reject,
        },
    }
}

fn prefix_op(op: MatchOperator) -> PrefixOp {
    match op {
        MatchOperator::Equal => PrefixOp::Equal,
        MatchOperator::NotEqual => PrefixOp::NotEqual,
        MatchOperator::In => PrefixOp::In,
        MatchOperator::NotIn => PrefixOp::NotIn,
    }
}

fn inside(cidr: ipnet::IpNet) -> Condition {
    Condition::Prefix {
        cidr,
        op: PrefixOp::In,
    }
}

fn stmt(label: String, conditions: Vec<Condition>, action: PAction) -> Statement {
    Statement {
        label,
        conditions,
        modifications: Vec::new(),
        action,
    }
}

/// A configured community in the wire's types: standard, or large.
fn to_wire(c: Community) -> Result<WireCommunity, LargeCommunity> {
    match c {
        Community::Standard(v) => Ok(WireCommunity(v)),
        Community::Large(global, local1, local2) => Err(LargeCommunity {
            global,
            local1,
            local2,
        }),
    }
}

fn add_community(c: Community) -> Modification {
    match to_wire(c) {
        Ok(w) => Modification::AddCommunity(w),
        Err(l) => Modification::AddLargeCommunity(l),
    }
}
