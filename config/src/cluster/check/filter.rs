//! BGPFilter: the import and export rules of each address family, every rule field of
//! Calico v3.32's `BGPFilterRuleV4`/`V6` (api/pkg/apis/projectcalico/v3/bgpfilter.go)
//! checked as Calico's validation and confd's renderer (template_funcs.go) read them.
//!
//! A field tern does not know is an error, not a warning: a rule whose condition is
//! dropped matches more routes than written (an `asPathPrefix` Reject would reject
//! everything), which is worse than refusing the resource.

use super::fields::{asn_field, parse_or};
use crate::cluster::parse::RawDoc;
use crate::cluster::{Action, Filter, MatchOperator, Operation, Rule};
use crate::error::{ConfigError, Warning};
use crate::model;
use crate::values;

/// Calico's limit on `priority` and `setPriority` (bgpfilter.go: 1 to 2^31 - 2).
const MAX_PRIORITY: i64 = 2_147_483_646;

/// A BGPFilter.
pub(super) fn filter(
    d: &RawDoc,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) -> Option<Filter> {
    let mut ignored = Vec::new();
    let r = parse_or::<model::BgpFilterSpec>(d, &mut ignored, errors);
    for w in ignored {
        if w.field.starts_with("spec") {
            errors.push(d.error(
                &indexed(&w.field),
                "not a BGPFilter field of Calico v3.32 (the version tern follows); tern cannot \
                 honour it, and leaving it out would make the rule match routes it was written \
                 to exclude",
            ));
        } else {
            warnings.push(w);
        }
    }
    let r = r?;
    let s = r.spec;
    Some(Filter {
        name: r.metadata.name,
        export_v4: rules(d, "spec.exportV4", false, &s.export_v4, errors),
        import_v4: rules(d, "spec.importV4", false, &s.import_v4, errors),
        export_v6: rules(d, "spec.exportV6", true, &s.export_v6, errors),
        import_v6: rules(d, "spec.importV6", true, &s.import_v6, errors),
    })
}

/// A field path as the other errors write it: `spec.exportV4[0].nextHop` rather than
/// the deserializer's `spec.exportV4.0.nextHop`.
fn indexed(path: &str) -> String {
    let mut out = String::new();
    for part in path.split('.') {
        if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{part}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(part);
        }
    }
    out
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
    let prefix_length = prefix_length(d, at, v6, r, cidr, errors);
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
    let interface = r.interface.clone();
    if let Some(i) = &interface {
        check_interface(d, &f("interface"), i, errors);
    }
    let communities = communities(d, &f("communities"), r, errors);
    let as_path_prefix = asns(d, &f("asPathPrefix"), r.as_path_prefix.as_deref(), errors);
    let priority = r
        .priority
        .and_then(|p| priority(d, &f("priority"), p, errors));
    let operations = operations(d, at, r, action, errors);
    Rule {
        cidr,
        prefix_length,
        remote_peers_only,
        interface,
        ebgp,
        communities,
        as_path_prefix,
        priority,
        operations,
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

/// `prefixLength`, as confd renders it: `[ cidr{min,max} ]` with min the larger of
/// the CIDR's length and `min`, max the smaller of the family's maximum and `max`.
fn prefix_length(
    d: &RawDoc,
    at: &str,
    v6: bool,
    r: &model::FilterRuleSpec,
    cidr: Option<(ipnet::IpNet, MatchOperator)>,
    errors: &mut Vec<ConfigError>,
) -> Option<(u8, u8)> {
    let p = r.prefix_length.as_ref()?;
    let field = format!("{at}.prefixLength");
    let maxlen = if v6 { 128 } else { 32 };
    if p.min.is_some_and(|m| m > maxlen) || p.max.is_some_and(|m| m > maxlen) {
        errors.push(d.error(&field, format!("min and max are 0 to {maxlen}")));
        return None;
    }
    let (net, op) = match cidr {
        Some(c) => c,
        None => {
            if r.cidr.is_none() {
                errors.push(d.error(&field, "needs a cidr (and matchOperator In or NotIn)"));
            }
            return None;
        }
    };
    if matches!(op, MatchOperator::Equal | MatchOperator::NotEqual) {
        // confd renders `net = [ cidr{a,b} ]`, a prefix compared with a prefix set:
        // BIRD 2.0.12 (tried) finds them never equal, so NotEqual holds for every route;
        // Calico's BIRD 1.x fork was not at hand. Neither reading is what was written.
        errors.push(d.error(
            &field,
            "works with matchOperator In or NotIn only: with Equal or NotEqual confd renders \
             `net = [ cidr{min,max} ]`, which BIRD never finds equal (NotEqual then matches \
             every route)",
        ));
        return None;
    }
    let min = p.min.unwrap_or(0).max(net.prefix_len());
    let max = p.max.unwrap_or(maxlen).min(maxlen);
    if min > max {
        errors.push(d.error(
            &field,
            format!(
                "the range is {min} to {max} (min is at least the cidr's length {}): BIRD refuses an empty range",
                net.prefix_len()
            ),
        ));
        return None;
    }
    Some((min, max))
}

/// `interface`: BIRD matches it as a shell pattern inside double quotes, so a quote
/// or a backslash would break the generated configuration; empty means nothing.
fn check_interface(d: &RawDoc, field: &str, i: &str, errors: &mut Vec<ConfigError>) {
    if i.is_empty() || i.contains(['"', '\\']) || i.chars().any(char::is_whitespace) {
        errors.push(d.error(
            field,
            format!("{i:?}: an interface name or shell pattern such as cali* (no spaces, quotes or backslashes)"),
        ));
    }
}

/// `communities.values`: one standard (`aa:nn`) or large (`aa:nn:mm`) community.
fn communities(
    d: &RawDoc,
    field: &str,
    r: &model::FilterRuleSpec,
    errors: &mut Vec<ConfigError>,
) -> Vec<values::Community> {
    let Some(c) = &r.communities else {
        return Vec::new();
    };
    if c.values.len() != 1 {
        errors.push(d.error(
            &format!("{field}.values"),
            format!(
                "{} values: Calico v3.32 matches exactly one community per rule",
                c.values.len()
            ),
        ));
    }
    let mut out = Vec::new();
    for v in &c.values {
        match values::community(v) {
            Ok(c) => out.push(c),
            Err(e) => errors.push(d.error(&format!("{field}.values"), e)),
        }
    }
    out
}

/// A list of AS numbers (`asPathPrefix`, `prependASPath.prefix`).
fn asns(
    d: &RawDoc,
    field: &str,
    list: Option<&[model::AsNumber]>,
    errors: &mut Vec<ConfigError>,
) -> Vec<u32> {
    list.unwrap_or_default()
        .iter()
        .enumerate()
        .filter_map(|(i, a)| asn_field(d, &format!("{field}[{i}]"), &Some(a.clone()), errors))
        .collect()
}

/// A priority (kernel metric): 1 to 2^31 - 2.
fn priority(d: &RawDoc, field: &str, p: i64, errors: &mut Vec<ConfigError>) -> Option<u32> {
    match u32::try_from(p) {
        Ok(v) if (1..=MAX_PRIORITY).contains(&p) => Some(v),
        _ => {
            errors.push(d.error(field, format!("{p}: use 1 to {MAX_PRIORITY}")));
            None
        }
    }
}

/// `operations`: only with Accept, at most 10, each setting exactly one field.
fn operations(
    d: &RawDoc,
    at: &str,
    r: &model::FilterRuleSpec,
    action: Action,
    errors: &mut Vec<ConfigError>,
) -> Vec<Operation> {
    let Some(ops) = &r.operations else {
        return Vec::new();
    };
    let field = format!("{at}.operations");
    if action != Action::Accept {
        errors.push(d.error(
            &field,
            "operations apply only to a rule whose action is Accept",
        ));
    }
    if ops.is_empty() || ops.len() > 10 {
        errors.push(d.error(&field, format!("{} operations: use 1 to 10", ops.len())));
    }
    let mut out = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let set = [
            op.add_community.is_some(),
            op.prepend_as_path.is_some(),
            op.set_priority.is_some(),
        ];
        if set.iter().filter(|s| **s).count() != 1 {
            errors.push(d.error(
                &at,
                "set exactly one of addCommunity, prependASPath, setPriority",
            ));
            continue;
        }
        if let Some(c) = &op.add_community {
            match values::community(&c.value) {
                Ok(c) => out.push(Operation::AddCommunity(c)),
                Err(e) => errors.push(d.error(&format!("{at}.addCommunity.value"), e)),
            }
        } else if let Some(p) = &op.prepend_as_path {
            let f = format!("{at}.prependASPath.prefix");
            if p.prefix.is_empty() || p.prefix.len() > 10 {
                errors.push(d.error(&f, format!("{} ASes: use 1 to 10", p.prefix.len())));
            }
            out.push(Operation::PrependAsPath(asns(
                d,
                &f,
                Some(&p.prefix),
                errors,
            )));
        } else if let Some(p) = &op.set_priority {
            let f = format!("{at}.setPriority.value");
            if let Some(v) = priority(d, &f, p.value, errors) {
                out.push(Operation::SetPriority(v));
            }
        }
    }
    out
}
