//! IPAM: BlockAffinity and IPAMBlock, the blocks nodes hold and the addresses they
//! lend.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;

use super::fields::parse_or;
use crate::cluster::parse::RawDoc;
use crate::cluster::{Affinity, AffinityState, Block};
use crate::error::{ConfigError, Warning};
use crate::model;

/// A BlockAffinity: which node holds a block.
pub(super) fn affinity(
    d: &RawDoc,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) -> Option<Affinity> {
    let r = parse_or::<model::BlockAffinitySpec>(d, warnings, errors)?;
    let s = r.spec;
    let state = match s.state.as_str() {
        "" | "confirmed" => AffinityState::Confirmed,
        "pending" => AffinityState::Pending,
        "pendingDeletion" => AffinityState::PendingDeletion,
        o => {
            errors.push(d.error(
                "spec.state",
                format!("{o:?}: use confirmed, pending or pendingDeletion"),
            ));
            return None;
        }
    };
    if s.node.is_empty() {
        errors.push(d.error("spec.node", "missing: the node holding the block"));
        return None;
    }
    Some(Affinity {
        node: s.node,
        cidr: s.cidr.trunc(),
        state,
        deleted: s.deleted.is_true(),
    })
}

/// An IPAMBlock: its affinity and which node each allocated address belongs to.
pub(super) fn block(
    d: &RawDoc,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) -> Option<Block> {
    let r = parse_or::<model::IpamBlockSpec>(d, warnings, errors)?;
    let s = r.spec;
    if s.cidr.trunc() != s.cidr {
        errors.push(d.error("spec.cidr", format!("{} has host bits set", s.cidr)));
        return None;
    }
    let affinity = match s.affinity.as_deref() {
        None | Some("") => None,
        Some(a) => match a.strip_prefix("host:") {
            Some(n) if !n.is_empty() => Some(n.to_string()),
            // Other affinity types (e.g. `virtual:`) hold no node's block.
            _ => None,
        },
    };
    let size = 1u128 << (s.cidr.max_prefix_len() - s.cidr.prefix_len()).min(127);
    if s.allocations.len() as u128 > size {
        errors.push(d.error(
            "spec.allocations",
            format!(
                "{} entries for a block of {size} addresses",
                s.allocations.len()
            ),
        ));
        return None;
    }
    let mut allocations = Vec::new();
    let mut bad_refs = BTreeSet::new();
    for (i, a) in s.allocations.iter().enumerate() {
        let Some(attr) = a else { continue };
        let addr = nth(&s.cidr, i as u128);
        let node = match usize::try_from(*attr)
            .ok()
            .and_then(|k| s.attributes.get(k))
        {
            Some(at) => at.secondary.as_ref().and_then(|m| m.get("node")).cloned(),
            None => {
                bad_refs.insert(*attr);
                None
            }
        };
        if let Some(addr) = addr {
            allocations.push((addr, node));
        }
    }
    if !bad_refs.is_empty() {
        warnings.push(d.warning(
            "spec.allocations",
            format!("refers to attributes {bad_refs:?} that do not exist; those addresses count as allocated to no node"),
        ));
    }
    Some(Block {
        cidr: s.cidr,
        affinity,
        allocations,
        deleted: s.deleted.is_true(),
    })
}

/// The `i`th address of `net`.
fn nth(net: &IpNet, i: u128) -> Option<IpAddr> {
    match net {
        IpNet::V4(n) => u32::try_from(i)
            .ok()
            .and_then(|i| u32::from(n.network()).checked_add(i))
            .map(|a| IpAddr::V4(a.into())),
        IpNet::V6(n) => u128::from(n.network())
            .checked_add(i)
            .map(|a| IpAddr::V6(a.into())),
    }
}
