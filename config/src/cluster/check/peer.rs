//! BGPPeer: which nodes peer, with whom, and the session's settings.

use std::net::IpAddr;

use super::ext;
use super::fields::{asn_field, parse_or, restart_time_field, selector, timers};
use crate::cluster::parse::RawDoc;
use crate::cluster::{Applies, NextHopMode, PeerResource, PeerTarget};
use crate::error::{ConfigError, Warning};
use crate::model;
use crate::values;

/// A BGPPeer.
pub(super) fn peer(
    d: &RawDoc,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) -> Option<PeerResource> {
    let r = parse_or::<model::BgpPeerSpec>(d, warnings, errors)?;
    let s = r.spec;
    let before = errors.len();
    let applies = applies(d, &s, errors);
    let target = target(d, &s, errors);
    let as_number = asn_field(d, "spec.asNumber", &s.as_number, errors);
    match target {
        Some(PeerTarget::Address(..)) if s.as_number.is_none() => errors.push(d.error(
            "spec.asNumber",
            "missing: a peer given by peerIP needs its AS number",
        )),
        Some(PeerTarget::LocalWorkloads(_)) if s.as_number.is_none() => errors.push(d.error(
            "spec.asNumber",
            "missing: workload peers (localWorkloadSelector) need their AS number",
        )),
        _ => {}
    }
    let local_as_number = asn_field(d, "spec.localASNumber", &s.local_as_number, errors);
    let source_node_ip = source_node_ip(d, &s, errors);
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
    let reachable_by = reachable_by(d, &s, target.as_ref(), errors);
    let next_hop = next_hop(d, &s, errors);
    let reverse_auto = reverse_auto(d, &s, errors);
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

/// `spec.node` / `spec.nodeSelector`: which nodes the peering applies to.
fn applies(d: &RawDoc, s: &model::BgpPeerSpec, errors: &mut Vec<ConfigError>) -> Applies {
    match (&s.node, &s.node_selector) {
        (Some(_), Some(_)) => {
            errors.push(d.error("spec.node", "give node or nodeSelector, not both"));
            Applies::Global
        }
        (Some(n), None) => Applies::Node(n.clone()),
        (None, Some(sel)) => selector(d, "spec.nodeSelector", sel, errors)
            .map(Applies::Selector)
            .unwrap_or(Applies::Global),
        (None, None) => Applies::Global,
    }
}

/// `spec.peerIP` / `spec.peerSelector`: whom to peer with, exactly one of them.
fn target(d: &RawDoc, s: &model::BgpPeerSpec, errors: &mut Vec<ConfigError>) -> Option<PeerTarget> {
    if let Some(sel) = &s.local_workload_selector {
        // Calico's CRD: the workloads are the peers, so no peerIP nor peerSelector.
        if s.peer_ip.is_some() || s.peer_selector.is_some() {
            errors.push(d.error(
                "spec.localWorkloadSelector",
                "give localWorkloadSelector without peerIP and peerSelector",
            ));
            return None;
        }
        return selector(d, "spec.localWorkloadSelector", sel, errors)
            .map(PeerTarget::LocalWorkloads);
    }
    match (&s.peer_ip, &s.peer_selector) {
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
    }
}

/// `spec.sourceAddress`: whether sessions use the node's IP as their source.
fn source_node_ip(d: &RawDoc, s: &model::BgpPeerSpec, errors: &mut Vec<ConfigError>) -> bool {
    match s.source_address.as_deref() {
        None | Some("UseNodeIP") => true,
        Some("None") => false,
        Some(o) => {
            errors.push(d.error(
                "spec.sourceAddress",
                format!("{o:?}: use UseNodeIP or None"),
            ));
            true
        }
    }
}

/// `spec.reachableBy`: the gateway towards the peer, for which confd renders a static
/// host route `<peerIP>/32 via <reachableBy>` (`bird_aggr.cfg.template`). Calico's
/// CRD allows it only with `peerIP`, and its validator only as an address of the same
/// family.
fn reachable_by(
    d: &RawDoc,
    s: &model::BgpPeerSpec,
    target: Option<&PeerTarget>,
    errors: &mut Vec<ConfigError>,
) -> Option<IpAddr> {
    let t = s.reachable_by.as_deref().filter(|t| !t.is_empty())?;
    let Ok(gw) = t.parse::<IpAddr>() else {
        errors.push(d.error(
            "spec.reachableBy",
            format!("{t:?} is not an IP address (give the gateway's address, no prefix length)"),
        ));
        return None;
    };
    match target {
        Some(PeerTarget::Address(peer, _)) if peer.is_ipv4() != gw.is_ipv4() => {
            errors.push(d.error(
                "spec.reachableBy",
                format!("{gw} and peerIP {peer} are of different address families"),
            ));
            None
        }
        Some(PeerTarget::Address(..)) => Some(gw),
        Some(PeerTarget::Nodes(_) | PeerTarget::LocalWorkloads(_)) => {
            errors.push(d.error(
                "spec.reachableBy",
                "needs peerIP: the route it adds is to one peer address",
            ));
            None
        }
        None => None,
    }
}

/// `spec.nextHopMode`, and the older `spec.keepOriginalNextHop` that means `Keep`.
fn next_hop(d: &RawDoc, s: &model::BgpPeerSpec, errors: &mut Vec<ConfigError>) -> NextHopMode {
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
    next_hop
}

/// `spec.reversePeering`: whether the peer node peers back on its own.
fn reverse_auto(d: &RawDoc, s: &model::BgpPeerSpec, errors: &mut Vec<ConfigError>) -> bool {
    match s.reverse_peering.as_deref() {
        None | Some("Auto") => true,
        Some("Manual") => false,
        Some(o) => {
            errors.push(d.error("spec.reversePeering", format!("{o:?}: use Auto or Manual")));
            true
        }
    }
}
