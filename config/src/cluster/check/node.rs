//! Node: the BGP part of a Calico Node.

use std::net::IpAddr;

use super::fields::{asn_field, parse_or};
use crate::cluster::parse::RawDoc;
use crate::cluster::Node;
use crate::error::{ConfigError, Warning};
use crate::model;
use crate::values;

/// A Node: its BGP addresses, AS number and route-reflector cluster id.
pub(super) fn node(
    d: &RawDoc,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) -> Option<Node> {
    let r = parse_or::<model::NodeSpec>(d, warnings, errors)?;
    let mut n = Node {
        name: r.metadata.name.clone(),
        labels: r.metadata.labels.clone(),
        ipv4: None,
        ipv6: None,
        as_number: None,
        rr_cluster_id: None,
    };
    let Some(bgp) = r.spec.bgp else {
        return Some(n);
    };
    if let Some(a) = &bgp.ipv4_address {
        match values::address_with_len(a) {
            Ok((IpAddr::V4(v4), len)) => n.ipv4 = Some((v4, len)),
            Ok(_) => errors.push(d.error(
                "spec.bgp.ipv4Address",
                format!("{a:?} is not an IPv4 address"),
            )),
            Err(e) => errors.push(d.error("spec.bgp.ipv4Address", e)),
        }
    }
    if let Some(a) = &bgp.ipv6_address {
        match values::address_with_len(a) {
            Ok((v6 @ IpAddr::V6(_), len)) => n.ipv6 = Some((v6, len)),
            Ok(_) => errors.push(d.error(
                "spec.bgp.ipv6Address",
                format!("{a:?} is not an IPv6 address"),
            )),
            Err(e) => errors.push(d.error("spec.bgp.ipv6Address", e)),
        }
    }
    n.as_number = asn_field(d, "spec.bgp.asNumber", &bgp.as_number, errors);
    if let Some(id) = &bgp.route_reflector_cluster_id {
        match id.parse() {
            Ok(id) => n.rr_cluster_id = Some(id),
            Err(_) => errors.push(d.error(
                "spec.bgp.routeReflectorClusterID",
                format!(
                    "{id:?} is not a cluster id: write it as an IPv4 address such as 224.0.0.1"
                ),
            )),
        }
    }
    Some(n)
}
