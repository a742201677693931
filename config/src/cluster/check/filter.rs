//! BGPFilter: the import and export rules of each address family.

use super::fields::parse_or;
use crate::cluster::parse::RawDoc;
use crate::cluster::{Action, Filter, MatchOperator, Rule};
use crate::error::{ConfigError, Warning};
use crate::model;
use crate::values;

/// A BGPFilter.
pub(super) fn filter(
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

/// One list of rules (`field` names it); a rule with an error is left out.
fn rules(
    d: &RawDoc,
    field: &str,
    v6: bool,
    list: &[model::FilterRuleSpec],
    errors: &mut Vec<ConfigError>,
) -> Vec<Rule> {
    let mut out = Vec::new();
    for (i, r) in list.iter().enumerate() {
        let before = errors.len();
        let rule = rule(d, &format!("{field}[{i}]"), v6, r, errors);
        if errors.len() == before {
            out.push(rule);
        }
    }
    out
}

/// One rule, at `at` (such as `spec.exportV4[0]`).
fn rule(
    d: &RawDoc,
    at: &str,
    v6: bool,
    r: &model::FilterRuleSpec,
    errors: &mut Vec<ConfigError>,
) -> Rule {
    let f = |sub: &str| format!("{at}.{sub}");
    let action = match r.action.as_str() {
        "Accept" => Action::Accept,
        "Reject" => Action::Reject,
        o => {
            errors.push(d.error(&f("action"), format!("{o:?}: use Accept or Reject")));
            Action::Reject
        }
    };
    let cidr = cidr_match(d, at, v6, r, errors);
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
    Rule {
        cidr,
        prefix_length,
        remote_peers_only,
        interface: r.interface.clone(),
        ebgp,
        communities,
        action,
    }
}

/// A rule's `cidr` and `matchOperator`: both or neither, the CIDR of the rule's
/// family.
fn cidr_match(
    d: &RawDoc,
    at: &str,
    v6: bool,
    r: &model::FilterRuleSpec,
    errors: &mut Vec<ConfigError>,
) -> Option<(ipnet::IpNet, MatchOperator)> {
    let f = |sub: &str| format!("{at}.{sub}");
    match (&r.cidr, r.match_operator.as_deref()) {
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
    }
}
