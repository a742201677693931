//! IPPool: a pool's CIDR, block size and encapsulation, and pools that overlap.

use super::fields::parse_or;
use crate::cluster::parse::RawDoc;
use crate::cluster::{EncapMode, Pool};
use crate::error::{ConfigError, Warning};
use crate::model;

fn encap(d: &RawDoc, field: &str, v: &Option<String>, errors: &mut Vec<ConfigError>) -> EncapMode {
    match v.as_deref() {
        None | Some("Never") => EncapMode::Never,
        Some("Always") => EncapMode::Always,
        Some("CrossSubnet") => EncapMode::CrossSubnet,
        Some(o) => {
            errors.push(d.error(field, format!("{o:?}: use Never, Always or CrossSubnet")));
            EncapMode::Never
        }
    }
}

/// An IPPool: CIDR, block size, encapsulation and export.
pub(super) fn pool(
    d: &RawDoc,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) -> Option<Pool> {
    let r = parse_or::<model::IpPoolSpec>(d, warnings, errors)?;
    let s = r.spec;
    let before = errors.len();
    if s.cidr.trunc() != s.cidr {
        errors.push(d.error(
            "spec.cidr",
            format!(
                "{} has host bits set; did you mean {}?",
                s.cidr,
                s.cidr.trunc()
            ),
        ));
    }
    let (default, min) = if s.cidr.addr().is_ipv4() {
        (26, 20)
    } else {
        (122, 116)
    };
    let max = s.cidr.max_prefix_len();
    let block_size = s.block_size.unwrap_or(default);
    if block_size < min || block_size > max || block_size < s.cidr.prefix_len() {
        errors.push(d.error(
            "spec.blockSize",
            format!(
                "{block_size}: must be {min}-{max} and not shorter than the pool's /{}",
                s.cidr.prefix_len()
            ),
        ));
    }
    let ipip = encap(d, "spec.ipipMode", &s.ipip_mode, errors);
    let vxlan = encap(d, "spec.vxlanMode", &s.vxlan_mode, errors);
    if ipip != EncapMode::Never && vxlan != EncapMode::Never {
        errors.push(d.error("spec.vxlanMode", "a pool uses IPIP or VXLAN, not both"));
    }
    if ipip != EncapMode::Never && s.cidr.addr().is_ipv6() {
        errors.push(d.error(
            "spec.ipipMode",
            "IPIP carries IPv4 only; use Never for an IPv6 pool",
        ));
    }
    if errors.len() > before {
        return None;
    }
    Some(Pool {
        name: r.metadata.name,
        cidr: s.cidr,
        block_size,
        export: !s.disable_bgp_export,
        ipip,
        vxlan,
    })
}

/// Refuses a pool that overlaps one already read: Calico's pools never overlap.
pub(super) fn refuse_overlaps(d: &RawDoc, p: &Pool, pools: &[Pool], errors: &mut Vec<ConfigError>) {
    for other in pools {
        if other.cidr.contains(&p.cidr.network()) || p.cidr.contains(&other.cidr.network()) {
            errors.push(d.error(
                "spec.cidr",
                format!(
                    "{} overlaps IPPool {} ({}); pools must not overlap",
                    p.cidr, other.name, other.cidr
                ),
            ));
        }
    }
}
