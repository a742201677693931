//! Validation of each kind, from serde shapes ([`crate::model`]) to the typed
//! [`super::Cluster`], plus the checks across resources (duplicate names, overlapping
//! pools, blocks outside every pool, filters that do not exist).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;

use super::extensions::{self as ext, MESH_ANNOTATIONS};
use super::parse::RawDoc;
use super::*;
use crate::model::{self, PasswordSpec};
use crate::values;

const API_VERSIONS: &[&str] = &["projectcalico.org/v3", "crd.projectcalico.org/v1"];

/// Builds the cluster, appending every problem to `errors` / `warnings`.
pub(super) fn build(
    raw: &[RawDoc],
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) -> Cluster {
    let mut c = Cluster::default();
    let mut seen: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut peer_filters: Vec<(&RawDoc, Vec<String>)> = Vec::new();
    let mut block_docs: Vec<(&RawDoc, IpNet)> = Vec::new();
    let mut bgp_default: Option<&RawDoc> = None;
    let mut node_configs = Vec::new();

    for d in raw {
        let kind = d.header.kind.as_str();
        let known = matches!(
            kind,
            "BGPConfiguration"
                | "BGPPeer"
                | "Node"
                | "IPPool"
                | "BGPFilter"
                | "BlockAffinity"
                | "IPAMBlock"
        );
        if !known {
            let what = if kind.is_empty() { "no kind" } else { kind };
            warnings.push(d.warning("kind", format!("{what}: not a kind tern uses; ignored")));
            continue;
        }
        if !API_VERSIONS.contains(&d.header.api_version.as_str()) {
            errors.push(d.error(
                "apiVersion",
                format!(
                    "{:?} is not a Calico API version; use projectcalico.org/v3",
                    d.header.api_version
                ),
            ));
            continue;
        }
        let name = d.header.metadata.name.clone();
        if name.is_empty() {
            errors.push(d.error("metadata.name", "missing: every resource needs a name"));
            continue;
        }
        if let Some(first) = seen.insert((kind.to_string(), name.clone()), d.context()) {
            errors.push(d.error(
                "metadata.name",
                format!("a second {kind} named {name:?} (the first is {first})"),
            ));
            continue;
        }
        ext::warn_unknown(d, warnings);
        let before = errors.len();
        match kind {
            "BGPConfiguration" => {
                if name == "default" {
                    bgp_default = Some(d);
                } else if name.starts_with("node.") {
                    node_configs.push(d);
                } else {
                    warnings.push(d.warning(
                        "metadata.name",
                        "only `default` and `node.<name>` BGPConfigurations apply; ignored",
                    ));
                }
            }
            "Node" => {
                if let Some(n) = node(d, errors, warnings) {
                    c.nodes.insert(n.name.clone(), n);
                }
            }
            "BGPPeer" => {
                if let Some(p) = peer(d, errors, warnings) {
                    peer_filters.push((d, p.filters.clone()));
                    c.peers.push(p);
                }
            }
            "IPPool" => {
                if let Some(p) = pool(d, errors, warnings) {
                    for other in &c.pools {
                        if other.cidr.contains(&p.cidr.network())
                            || p.cidr.contains(&other.cidr.network())
                        {
                            errors.push(d.error(
                                "spec.cidr",
                                format!(
                                    "{} overlaps IPPool {} ({}); pools must not overlap",
                                    p.cidr, other.name, other.cidr
                                ),
                            ));
                        }
                    }
                    c.pools.push(p);
                }
            }
            "BGPFilter" => {
                if let Some(f) = filter(d, errors, warnings) {
                    c.filters.insert(f.name.clone(), f);
                }
            }
            "BlockAffinity" => {
                if let Some(a) = affinity(d, errors, warnings) {
                    block_docs.push((d, a.cidr));
                    c.affinities.push(a);
                }
            }
            "IPAMBlock" => {
                if let Some(b) = block(d, errors, warnings) {
                    block_docs.push((d, b.cidr));
                    c.blocks.push(b);
                }
            }
            _ => {}
        }
        debug_assert!(errors.len() >= before);
    }

    if let Some(d) = bgp_default {
        if let Some(s) = bgp_settings(d, errors, warnings) {
            c.bgp = s;
        }
    }
    for d in node_configs {
        node_override(d, &mut c.bgp, errors, warnings);
    }
    for (d, names) in peer_filters {
        for n in names {
            if !c.filters.contains_key(&n) {
                errors.push(d.error("spec.filters", format!("BGPFilter {n:?} does not exist")));
            }
        }
    }
    for (d, cidr) in block_docs {
        if !c.pools.iter().any(|p| p.cidr.contains(&cidr)) {
            errors.push(d.error(
                "spec.cidr",
                format!("block {cidr} is outside every IPPool; add its pool or remove the block"),
            ));
        }
    }
    c.peers.sort_by(|a, b| a.name.cmp(&b.name));
    c
}

fn parse_or<T>(
    d: &RawDoc,
    warnings: &mut Vec<Warning>,
    errors: &mut Vec<ConfigError>,
) -> Option<model::Resource<T>>
where
    T: serde::de::DeserializeOwned,
{
    match d.parse::<T>(warnings) {
        Ok(r) => Some(r),
        Err(e) => {
            errors.push(e);
            None
        }
    }
}

fn asn_field(
    d: &RawDoc,
    field: &str,
    v: &Option<model::AsNumber>,
    errors: &mut Vec<ConfigError>,
) -> Option<u32> {
    let v = v.as_ref()?;
    match values::asn(v) {
        Ok(n) => Some(n),
        Err(r) => {
            errors.push(d.error(field, r));
            None
        }
    }
}

/// A hold time and keepalive (fields named as given): hold 0 or 3 s to 65535 s, the
/// keepalive shorter than the hold time. A hold time under 3 s but above zero (`2s`,
/// and also `500ms`, which whole seconds would read as 0, the value that turns the hold
/// timer off) is refused rather than rounded, since either rounding changes what the
/// session does.
fn timers(
    d: &RawDoc,
    (hold_field, hold): (&str, &Option<String>),
    (keepalive_field, keepalive): (&str, &Option<String>),
    errors: &mut Vec<ConfigError>,
) -> (Option<Duration>, Option<Duration>) {
    let keepalive = duration_field(d, keepalive_field, keepalive, errors);
    let hold = duration_field(d, hold_field, hold, errors);
    if let Some(h) = hold {
        if !h.is_zero() && h < Duration::from_secs(3) {
            errors.push(d.error(
                hold_field,
                format!("{h:?}: a hold time is 0 or at least 3s (RFC 4271)"),
            ));
        }
        if h.as_secs() > 65535 {
            errors.push(d.error(hold_field, "at most 65535s"));
        }
        if let Some(k) = keepalive {
            if !h.is_zero() && k >= h {
                errors.push(d.error(
                    keepalive_field,
                    format!(
                        "{}s is not shorter than the hold time {}s",
                        k.as_secs(),
                        h.as_secs()
                    ),
                ));
            }
        }
    }
    (hold, keepalive)
}

fn duration_field(
    d: &RawDoc,
    field: &str,
    v: &Option<String>,
    errors: &mut Vec<ConfigError>,
) -> Option<std::time::Duration> {
    let v = v.as_ref()?;
    match values::duration(v) {
        Ok(t) => Some(t),
        Err(r) => {
            errors.push(d.error(field, r));
            None
        }
    }
}

/// A graceful-restart time: the capability carries it in 12 bits, so at most 4095 s.
/// Refused above that (for the mesh's as for a BGPPeer's) rather than clamped, so
/// that what the peer is told is what was written.
fn restart_time_field(
    d: &RawDoc,
    field: &str,
    v: &Option<String>,
    errors: &mut Vec<ConfigError>,
) -> Option<Duration> {
    let t = duration_field(d, field, v, errors)?;
    if t.as_secs() > 4095 {
        errors.push(d.error(
            field,
            format!(
                "{}s: the graceful-restart time field holds at most 4095s",
                t.as_secs()
            ),
        ));
        return None;
    }
    Some(t)
}

pub(super) fn password(
    d: &RawDoc,
    field: &str,
    p: &Option<PasswordSpec>,
    errors: &mut Vec<ConfigError>,
) -> Option<PasswordSource> {
    let p = p.as_ref()?;
    let mut sources = Vec::new();
    if let Some(r) = &p.secret_key_ref {
        if r.name.is_empty()
            || r.key.is_empty()
            || r.name.contains(['/', '\\'])
            || r.key.contains(['/', '\\'])
            || r.name.starts_with('.')
            || r.key.starts_with('.')
        {
            errors.push(d.error(
                &format!("{field}.secretKeyRef"),
                "needs a name and a key, neither containing '/' or starting with '.'",
            ));
            return None;
        }
        sources.push(PasswordSource::SecretKeyRef {
            name: r.name.clone(),
            key: r.key.clone(),
        });
    }
    if let Some(f) = &p.file {
        sources.push(PasswordSource::File(f.clone()));
    }
    if let Some(e) = &p.env {
        sources.push(PasswordSource::Env(e.clone()));
    }
    match sources.len() {
        1 => sources.pop(),
        0 => {
            errors.push(d.error(field, "give one of secretKeyRef, file or env"));
            None
        }
        _ => {
            errors.push(d.error(field, "give only one of secretKeyRef, file or env"));
            None
        }
    }
}

fn selector(
    d: &RawDoc,
    field: &str,
    text: &str,
    errors: &mut Vec<ConfigError>,
) -> Option<Selector> {
    match Selector::parse(text) {
        Ok(s) => Some(s),
        Err(e) => {
            errors.push(d.error(field, e.to_string()));
            None
        }
    }
}

fn bgp_settings(
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
    let mut named = BTreeMap::new();
    for (i, c) in s.communities.iter().enumerate() {
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
    for (i, pa) in s.prefix_advertisements.iter().enumerate() {
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
        out.prefix_advertisements.push((pa.cidr.trunc(), list));
    }
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

fn node_override(
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

fn node(d: &RawDoc, errors: &mut Vec<ConfigError>, warnings: &mut Vec<Warning>) -> Option<Node> {
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

fn peer(
    d: &RawDoc,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) -> Option<PeerResource> {
    let r = parse_or::<model::BgpPeerSpec>(d, warnings, errors)?;
    let s = r.spec;
    let before = errors.len();
    let applies = match (&s.node, &s.node_selector) {
        (Some(_), Some(_)) => {
            errors.push(d.error("spec.node", "give node or nodeSelector, not both"));
            Applies::Global
        }
        (Some(n), None) => Applies::Node(n.clone()),
        (None, Some(sel)) => selector(d, "spec.nodeSelector", sel, errors)
            .map(Applies::Selector)
            .unwrap_or(Applies::Global),
        (None, None) => Applies::Global,
    };
    let target = match (&s.peer_ip, &s.peer_selector) {
        (Some(_), Some(_)) => {
            errors.push(d.error("spec.peerIP", "give peerIP or peerSelector, not both"));
            None
        }
        (None, None) => {
            errors.push(d.error(
                "spec.peerIP",
                "missing: give peerIP (an address) or peerSelector (nodes)",
            ));
            None
        }
        (Some(ip), None) => match values::peer_ip(ip) {
            Ok((a, port)) => Some(PeerTarget::Address(a, port)),
            Err(e) => {
                errors.push(d.error("spec.peerIP", e));
                None
            }
        },
        (None, Some(sel)) => selector(d, "spec.peerSelector", sel, errors).map(PeerTarget::Nodes),
    };
    let as_number = asn_field(d, "spec.asNumber", &s.as_number, errors);
    if matches!(target, Some(PeerTarget::Address(..))) && s.as_number.is_none() {
        errors.push(d.error(
            "spec.asNumber",
            "missing: a peer given by peerIP needs its AS number",
        ));
    }
    let local_as_number = asn_field(d, "spec.localASNumber", &s.local_as_number, errors);
    let source_node_ip = match s.source_address.as_deref() {
        None | Some("UseNodeIP") => true,
        Some("None") => false,
        Some(o) => {
            errors.push(d.error(
                "spec.sourceAddress",
                format!("{o:?}: use UseNodeIP or None"),
            ));
            true
        }
    };
    let ann = &r.metadata.annotations;
    let families = ext::families(d, ann, &s.families, errors, warnings);
    let hold_setting = ext::text_setting(
        d,
        ann,
        (ext::HOLD_TIME, "spec.holdTime"),
        &s.hold_time,
        warnings,
    );
    let (hold, keepalive) = timers(
        d,
        (&hold_setting.0, &hold_setting.1),
        ("spec.keepaliveTime", &s.keepalive_time),
        errors,
    );
    let restart_time = restart_time_field(d, "spec.maxRestartTime", &s.max_restart_time, errors);
    if s.ttl_security == Some(0) {
        errors.push(d.error(
            "spec.ttlSecurity",
            "0 hops: use 1-255 (1 = directly connected), or leave it out",
        ));
    }
    let reachable_by = match &s.reachable_by {
        None => None,
        Some(t) => match t.parse::<IpAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                errors.push(d.error("spec.reachableBy", format!("{t:?} is not an IP address")));
                None
            }
        },
    };
    let mut next_hop = match s.next_hop_mode.as_deref() {
        None | Some("Auto") => NextHopMode::Auto,
        Some("Self") => NextHopMode::SelfHop,
        Some("Keep") => NextHopMode::Keep,
        Some(o) => {
            errors.push(d.error("spec.nextHopMode", format!("{o:?}: use Auto, Self or Keep")));
            NextHopMode::Auto
        }
    };
    if s.keep_original_next_hop == Some(true) {
        if s.next_hop_mode.is_some() && next_hop != NextHopMode::Keep {
            errors.push(d.error(
                "spec.keepOriginalNextHop",
                "contradicts nextHopMode; keep only nextHopMode",
            ));
        }
        next_hop = NextHopMode::Keep;
    }
    let reverse_auto = match s.reverse_peering.as_deref() {
        None | Some("Auto") => true,
        Some("Manual") => false,
        Some(o) => {
            errors.push(d.error("spec.reversePeering", format!("{o:?}: use Auto or Manual")));
            true
        }
    };
    let pw = ext::password(
        d,
        ann,
        (ext::PASSWORD_FILE, ext::PASSWORD_ENV),
        "spec.password",
        &s.password,
        errors,
        warnings,
    );
    if errors.len() > before {
        return None;
    }
    Some(PeerResource {
        name: r.metadata.name,
        applies,
        target: target?,
        as_number,
        local_as_number,
        password: pw,
        source_node_ip,
        restart_time,
        keepalive,
        hold,
        allowas_in: s.num_allowed_local_as_numbers.unwrap_or(0),
        ttl_security: s.ttl_security,
        reachable_by,
        filters: s.filters,
        next_hop,
        reverse_auto,
        families,
    })
}

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

fn pool(d: &RawDoc, errors: &mut Vec<ConfigError>, warnings: &mut Vec<Warning>) -> Option<Pool> {
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

fn rules(
    d: &RawDoc,
    field: &str,
    v6: bool,
    list: &[model::FilterRuleSpec],
    errors: &mut Vec<ConfigError>,
) -> Vec<Rule> {
    let mut out = Vec::new();
    for (i, r) in list.iter().enumerate() {
        let f = |sub: &str| format!("{field}[{i}].{sub}");
        let before = errors.len();
        let action = match r.action.as_str() {
            "Accept" => Action::Accept,
            "Reject" => Action::Reject,
            o => {
                errors.push(d.error(&f("action"), format!("{o:?}: use Accept or Reject")));
                Action::Reject
            }
        };
        let cidr = match (&r.cidr, r.match_operator.as_deref()) {
            (None, None) => None,
            (None, Some(_)) => {
                errors.push(d.error(&f("cidr"), "matchOperator needs a cidr"));
                None
            }
            (Some(_), None) => {
                errors.push(d.error(
                    &f("matchOperator"),
                    "missing: use Equal, NotEqual, In or NotIn",
                ));
                None
            }
            (Some(c), Some(op)) => {
                if c.addr().is_ipv6() != v6 {
                    errors.push(d.error(
                        &f("cidr"),
                        format!("{c} is not an {} prefix", if v6 { "IPv6" } else { "IPv4" }),
                    ));
                }
                let op = match op {
                    "Equal" => MatchOperator::Equal,
                    "NotEqual" => MatchOperator::NotEqual,
                    "In" => MatchOperator::In,
                    "NotIn" => MatchOperator::NotIn,
                    o => {
                        errors.push(d.error(
                            &f("matchOperator"),
                            format!("{o:?}: use Equal, NotEqual, In or NotIn"),
                        ));
                        MatchOperator::Equal
                    }
                };
                Some((c.trunc(), op))
            }
        };
        let maxlen = if v6 { 128 } else { 32 };
        let prefix_length = r.prefix_length.as_ref().map(|p| {
            let min = p.min.unwrap_or(0);
            let max = p.max.unwrap_or(maxlen);
            if min > max || max > maxlen {
                errors.push(d.error(
                    &f("prefixLength"),
                    format!("min {min} max {max}: need min <= max <= {maxlen}"),
                ));
            }
            (min, max)
        });
        let remote_peers_only = match r.source.as_deref() {
            None => false,
            Some("RemotePeers") => true,
            Some(o) => {
                errors.push(d.error(
                    &f("source"),
                    format!("{o:?}: the only source is RemotePeers"),
                ));
                false
            }
        };
        let ebgp = match r.peer_type.as_deref() {
            None => None,
            Some("eBGP") => Some(true),
            Some("iBGP") => Some(false),
            Some(o) => {
                errors.push(d.error(&f("peerType"), format!("{o:?}: use eBGP or iBGP")));
                None
            }
        };
        let mut communities = Vec::new();
        for c in r.communities.iter().flat_map(|c| &c.values) {
            match values::community(c) {
                Ok(c) => communities.push(c),
                Err(e) => errors.push(d.error(&f("communities"), e)),
            }
        }
        if errors.len() == before {
            out.push(Rule {
                cidr,
                prefix_length,
                remote_peers_only,
                interface: r.interface.clone(),
                ebgp,
                communities,
                action,
            });
        }
    }
    out
}

fn filter(
    d: &RawDoc,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) -> Option<Filter> {
    let r = parse_or::<model::BgpFilterSpec>(d, warnings, errors)?;
    let s = r.spec;
    Some(Filter {
        name: r.metadata.name,
        export_v4: rules(d, "spec.exportV4", false, &s.export_v4, errors),
        import_v4: rules(d, "spec.importV4", false, &s.import_v4, errors),
        export_v6: rules(d, "spec.exportV6", true, &s.export_v6, errors),
        import_v6: rules(d, "spec.importV6", true, &s.import_v6, errors),
    })
}

fn affinity(
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

fn block(d: &RawDoc, errors: &mut Vec<ConfigError>, warnings: &mut Vec<Warning>) -> Option<Block> {
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
