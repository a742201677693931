//! BGPConfiguration: the `default` one (AS number, mesh, timers, communities,
//! service and prefix advertisements) and the `node.<name>` overrides.

use std::collections::BTreeMap;

use ipnet::IpNet;

use super::ext::{self, MESH_ANNOTATIONS};
use super::fields::{asn_field, parse_or, restart_time_field, timers};
use crate::cluster::parse::RawDoc;
use crate::cluster::{BgpSettings, Community, NormalPriority, ServiceKind};
use crate::error::{ConfigError, Warning};
use crate::model;
use crate::values;

/// The `default` BGPConfiguration.
pub(super) fn bgp_settings(
    d: &RawDoc,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) -> Option<BgpSettings> {
    let r = parse_or::<model::BgpConfigurationSpec>(d, warnings, errors)?;
    let s = r.spec;
    let mut out = BgpSettings::default();
    if let Some(a) = asn_field(d, "spec.asNumber", &s.as_number, errors) {
        out.as_number = a;
    }
    out.mesh = s.node_to_node_mesh_enabled.unwrap_or(true);
    if let Some(p) = s.listen_port {
        if p == 0 {
            errors.push(d.error(
                "spec.listenPort",
                "0 is not a port; use 1-65535 (default 179)",
            ));
        }
        out.listen_port = p;
    }
    out.bind_node_ip = bind_mode(d, &s.bind_mode, errors).unwrap_or(false);
    if s.log_severity_screen.is_some() {
        warnings.push(d.warning(
            "spec.logSeverityScreen",
            "tern's log level is `log` in tern.yaml; ignored",
        ));
    }
    let ann = &r.metadata.annotations;
    out.mesh_password = ext::password(
        d,
        ann,
        (ext::NODE_MESH_PASSWORD_FILE, ext::NODE_MESH_PASSWORD_ENV),
        "spec.nodeMeshPassword",
        &s.node_mesh_password,
        errors,
        warnings,
    );
    out.mesh_restart_time = restart_time_field(
        d,
        "spec.nodeMeshMaxRestartTime",
        &s.node_mesh_max_restart_time,
        errors,
    );
    let hold = ext::text_setting(
        d,
        ann,
        (ext::NODE_MESH_HOLD_TIME, "spec.nodeMeshHoldTime"),
        &s.node_mesh_hold_time,
        warnings,
    );
    let keepalive = ext::text_setting(
        d,
        ann,
        (ext::NODE_MESH_KEEPALIVE_TIME, "spec.nodeMeshKeepaliveTime"),
        &s.node_mesh_keepalive_time,
        warnings,
    );
    (out.mesh_hold, out.mesh_keepalive) =
        timers(d, (&hold.0, &hold.1), (&keepalive.0, &keepalive.1), errors);
    out.ignored_interfaces = s.ignored_interfaces;
    out.program_cluster_routes =
        program_cluster_routes(d, s.program_cluster_routes.as_deref(), errors);
    out.normal_priority = NormalPriority {
        v4: priority(
            d,
            "spec.ipv4NormalRoutePriority",
            s.ipv4_normal_route_priority,
            errors,
        ),
        v6: priority(
            d,
            "spec.ipv6NormalRoutePriority",
            s.ipv6_normal_route_priority,
            errors,
        ),
    };
    out.local_workload_peering = (
        address(
            d,
            "spec.localWorkloadPeeringIPV4",
            s.local_workload_peering_ipv4.as_deref(),
            errors,
        ),
        address(
            d,
            "spec.localWorkloadPeeringIPV6",
            s.local_workload_peering_ipv6.as_deref(),
            errors,
        ),
    );
    let named = named_communities(d, &s.communities, errors);
    out.prefix_advertisements = prefix_advertisements(d, &s.prefix_advertisements, &named, errors);
    for (list, kind) in [
        (&s.service_cluster_ips, ServiceKind::ClusterIp),
        (&s.service_external_ips, ServiceKind::ExternalIp),
        (&s.service_load_balancer_ips, ServiceKind::LoadBalancerIp),
    ] {
        out.services
            .extend(list.iter().map(|e| (e.cidr.trunc(), kind)));
    }
    Some(out)
}

/// `spec.communities`: each name once, each value a community.
fn named_communities(
    d: &RawDoc,
    list: &[model::CommunityDef],
    errors: &mut Vec<ConfigError>,
) -> BTreeMap<String, Community> {
    let mut named = BTreeMap::new();
    for (i, c) in list.iter().enumerate() {
        let field = format!("spec.communities[{i}]");
        if c.name.is_empty() {
            errors.push(d.error(&field, "a named community needs a name"));
            continue;
        }
        match values::community(&c.value) {
            Ok(v) => {
                if named.insert(c.name.clone(), v).is_some() {
                    errors.push(d.error(
                        &field,
                        format!("community name {:?} is defined twice", c.name),
                    ));
                }
            }
            Err(r) => errors.push(d.error(&format!("{field}.value"), r)),
        }
    }
    named
}

/// `spec.prefixAdvertisements`: each community a name from `spec.communities` or a
/// community value.
fn prefix_advertisements(
    d: &RawDoc,
    list: &[model::PrefixAdvertisement],
    named: &BTreeMap<String, Community>,
    errors: &mut Vec<ConfigError>,
) -> Vec<(IpNet, Vec<Community>)> {
    let mut out = Vec::new();
    for (i, pa) in list.iter().enumerate() {
        let mut list = Vec::new();
        for c in &pa.communities {
            match named.get(c) {
                Some(v) => list.push(*v),
                None => match values::community(c) {
                    Ok(v) => list.push(v),
                    Err(_) => errors.push(d.error(
                        &format!("spec.prefixAdvertisements[{i}].communities"),
                        format!("{c:?} is neither a name from spec.communities nor a community value (aa:nn or a:b:c)"),
                    )),
                },
            }
        }
        out.push((pa.cidr.trunc(), list));
    }
    out
}

/// `spec.programClusterRoutes` as v3.32 defines it: `Enabled` (the default: the routing
/// daemon programs IPIP and unencapsulated pool routes) or `Disabled` (Felix does).
/// Later releases' values change who programs which pools, so tern refuses them rather
/// than guess.
fn program_cluster_routes(d: &RawDoc, v: Option<&str>, errors: &mut Vec<ConfigError>) -> bool {
    match v {
        None | Some("Enabled") => true,
        Some("Disabled") => false,
        Some(other @ ("EnabledIPIPOnly" | "EnabledNoEncapOnly")) => {
            errors.push(d.error(
                "spec.programClusterRoutes",
                format!("{other:?} is a value of later Calico releases than v3.32, which tern follows; use Enabled (tern programs IPIP and unencapsulated pool routes) or Disabled (Felix does)"),
            ));
            true
        }
        Some(other) => {
            errors.push(d.error(
                "spec.programClusterRoutes",
                format!("{other:?}: use Enabled (tern programs IPIP and unencapsulated pool routes) or Disabled (Felix does)"),
            ));
            true
        }
    }
}

/// A normal route priority: Calico's range 1 to 2^31 - 2, so that the LOCAL_PREF
/// derived from it (`BIRD_INT_MAX - priority`) stays positive.
fn priority(d: &RawDoc, field: &str, v: Option<i64>, errors: &mut Vec<ConfigError>) -> u32 {
    let default = tern_bgp::policy::DEFAULT_NORMAL_PRIORITY;
    let Some(v) = v else {
        return default;
    };
    let max = i64::from(tern_bgp::policy::BIRD_INT_MAX) - 1;
    match u32::try_from(v) {
        Ok(p) if (1..=max).contains(&v) => p,
        _ => {
            errors.push(d.error(
                field,
                format!("{v} is out of range: use 1-{max} (default {default})"),
            ));
            default
        }
    }
}

fn bind_mode(d: &RawDoc, v: &Option<String>, errors: &mut Vec<ConfigError>) -> Option<bool> {
    match v.as_deref()? {
        "None" => Some(false),
        "NodeIP" => Some(true),
        other => {
            errors.push(d.error("spec.bindMode", format!("{other:?}: use None or NodeIP")));
            None
        }
    }
}

/// A `node.<name>` BGPConfiguration: only listenPort and bindMode apply per node.
pub(super) fn node_override(
    d: &RawDoc,
    bgp: &mut BgpSettings,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) {
    let Some(r) = parse_or::<model::BgpConfigurationSpec>(d, warnings, errors) else {
        return;
    };
    let node = d
        .header
        .metadata
        .name
        .trim_start_matches("node.")
        .to_string();
    let s = r.spec;
    let bind = bind_mode(d, &s.bind_mode, errors);
    // The same rule as the default's port: 0 would make the node listen on a port the
    // kernel picks and its peers dial port 0.
    if s.listen_port == Some(0) {
        errors.push(d.error(
            "spec.listenPort",
            "0 is not a port; use 1-65535 (default 179)",
        ));
        return;
    }
    for (set, field) in [
        (s.as_number.is_some(), "spec.asNumber"),
        (
            s.node_to_node_mesh_enabled.is_some(),
            "spec.nodeToNodeMeshEnabled",
        ),
        (s.node_mesh_password.is_some(), "spec.nodeMeshPassword"),
        (!s.communities.is_empty(), "spec.communities"),
        (
            !s.prefix_advertisements.is_empty(),
            "spec.prefixAdvertisements",
        ),
        (!s.service_cluster_ips.is_empty(), "spec.serviceClusterIPs"),
        (s.node_mesh_hold_time.is_some(), "spec.nodeMeshHoldTime"),
        (
            s.node_mesh_keepalive_time.is_some(),
            "spec.nodeMeshKeepaliveTime",
        ),
        (
            s.program_cluster_routes.is_some(),
            "spec.programClusterRoutes",
        ),
        (
            s.ipv4_normal_route_priority.is_some(),
            "spec.ipv4NormalRoutePriority",
        ),
        (
            s.ipv6_normal_route_priority.is_some(),
            "spec.ipv6NormalRoutePriority",
        ),
    ] {
        if set {
            warnings.push(d.warning(
                field,
                "only listenPort and bindMode can be set per node; ignored",
            ));
        }
    }
    for key in MESH_ANNOTATIONS {
        if r.metadata.annotations.contains_key(*key) {
            warnings.push(d.warning(
                &ext::field(key),
                "the mesh settings apply from the `default` BGPConfiguration only; ignored",
            ));
        }
    }
    bgp.node_overrides.insert(node, (s.listen_port, bind));
}

/// An optional address field of one family (`localWorkloadPeeringIPV4`: an IPv4
/// address); empty is unset.
fn address<A: std::str::FromStr>(
    d: &RawDoc,
    field: &str,
    text: Option<&str>,
    errors: &mut Vec<ConfigError>,
) -> Option<A> {
    let t = text.filter(|t| !t.is_empty())?;
    match t.parse::<A>() {
        Ok(a) => Some(a),
        Err(_) => {
            let family = if field.ends_with("V6") {
                "IPv6"
            } else {
                "IPv4"
            };
            errors.push(d.error(field, format!("{t:?} is not an {family} address")));
            None
        }
    }
}
