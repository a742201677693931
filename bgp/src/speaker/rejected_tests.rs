//! The rejected-path store: what goes in, with which reason and next hop, what takes
//! it out, and the bound.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

use super::*;
use crate::wire::{AttributeError, Family, MpReach, MpUnreach};

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

/// An UPDATE announcing the IPv4 `prefixes` via 198.51.100.1.
fn announce(prefixes: &[&str]) -> Update {
    Update {
        attributes: PathAttributes {
            next_hop: Some("198.51.100.1".parse().unwrap()),
            local_pref: Some(100),
            ..Default::default()
        },
        nlri: prefixes.iter().map(|p| Nlri::new(net(p))).collect(),
        ..Update::default()
    }
}

fn refused(prefix: &str, label: &str) -> Refused {
    Refused {
        prefix: net(prefix),
        path_id: 0,
        label: label.into(),
    }
}

fn prefixes(r: &Rejected) -> Vec<String> {
    r.view(None)
        .paths
        .iter()
        .map(|(p, _, _)| p.to_string())
        .collect()
}

#[test]
fn policy_rejections_are_kept_with_the_statement_until_accepted_or_withdrawn() {
    let mut r = Rejected::default();
    let u = announce(&["198.18.1.0/26", "198.18.2.0/26", "198.18.3.0/26"]);
    r.after_update(
        &u,
        None,
        &[
            refused("198.18.1.0/26", "BGPFilter tor-in importV4 rule 1"),
            refused("198.18.3.0/26", "default"),
        ],
    );
    let v = r.view(None);
    assert_eq!(prefixes(&r), ["198.18.1.0/26", "198.18.3.0/26"]);
    let (_, id, first) = &v.paths[0];
    assert_eq!(*id, 0);
    assert_eq!(
        &*first.reason,
        "import policy: BGPFilter tor-in importV4 rule 1"
    );
    assert_eq!(first.next_hop, Some("198.51.100.1".parse().unwrap()));
    assert_eq!(first.attrs.local_pref, Some(100));
    assert!(
        v.paths[1].2.reason.contains("the policy's default"),
        "{:?}",
        v.paths[1]
    );
    // Both share the UPDATE's attributes.
    assert!(Arc::ptr_eq(&first.attrs, &v.paths[1].2.attrs));

    // Announced again and accepted this time: no longer rejected.
    r.after_update(&announce(&["198.18.1.0/26"]), None, &[]);
    assert_eq!(prefixes(&r), ["198.18.3.0/26"]);
    // Withdrawn: gone too.
    let w = Update {
        withdrawn: vec![Nlri::new(net("198.18.3.0/26"))],
        ..Update::default()
    };
    r.after_update(&w, None, &[]);
    assert!(r.view(None).paths.is_empty());
}

#[test]
fn a_failed_rfc_check_or_a_malformed_update_rejects_every_prefix_it_announces() {
    let mut r = Rejected::default();
    let loop_ = Rejection::AsPathLoop {
        count: 1,
        allowed: 0,
    };
    r.after_update(
        &announce(&["198.18.1.0/26", "198.18.2.0/26"]),
        Some(&loop_),
        &[],
    );
    let v = r.view(None);
    assert_eq!(v.paths.len(), 2);
    assert!(
        v.paths[0].2.reason.contains("our AS appears 1 times"),
        "{:?}",
        v.paths[0]
    );

    // IPv6 in MP_REACH, with a treat-as-withdraw error: the MP next hop, the reason.
    let mut u = Update {
        mp_reach: Some(MpReach {
            family: Family::IPV6_UNICAST,
            next_hop: MpNextHop::V6 {
                global: "2001:db8::1".parse().unwrap(),
                link_local: None,
            },
            nlri: vec![Nlri::new(net("2001:db8:5::/64"))],
            unparsed: None,
        }),
        ..Update::default()
    };
    u.errors.push(AttributeError {
        code: 2,
        action: ErrorAction::TreatAsWithdraw,
        subcode: 11,
        reason: "AS_PATH segment overruns the attribute".into(),
        data: Default::default(),
    });
    r.after_update(&u, None, &[]);
    let v = r.view(Some(net("2001:db8:5::/64")));
    assert_eq!(v.paths.len(), 1, "only the prefix asked for");
    let (_, _, p) = &v.paths[0];
    assert_eq!(p.next_hop, Some("2001:db8::1".parse().unwrap()));
    assert_eq!(
        &*p.reason,
        "malformed UPDATE, treated as withdrawn (RFC 7606): AS_PATH segment overruns the attribute"
    );
    // An MP withdrawal takes it out; the session's end takes out the rest.
    let w = Update {
        mp_unreach: Some(MpUnreach {
            family: Family::IPV6_UNICAST,
            withdrawn: vec![Nlri::new(net("2001:db8:5::/64"))],
            unparsed: None,
        }),
        ..Update::default()
    };
    r.after_update(&w, None, &[]);
    assert_eq!(r.view(None).paths.len(), 2);
    r.clear();
    assert_eq!(r.view(None), RejectedView::default());
}

#[test]
fn the_store_is_bounded_and_counts_what_it_did_not_keep() {
    let mut r = Rejected::default();
    let all: Vec<String> = (0..KEPT_PER_PEER + 5)
        .map(|i| format!("198.18.{}.{}/32", i / 256, i % 256))
        .collect();
    for chunk in all.chunks(500) {
        let names: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let loop_ = Rejection::OriginatorIsUs;
        r.after_update(&announce(&names), Some(&loop_), &[]);
    }
    let v = r.view(None);
    assert_eq!(v.paths.len(), KEPT_PER_PEER);
    assert_eq!(v.not_kept, 5);
    // A kept path rejected again replaces itself, and is not counted.
    r.after_update(
        &announce(&[all[0].as_str()]),
        Some(&Rejection::ClusterLoop),
        &[],
    );
    let v = r.view(Some(net(&all[0])));
    assert!(v.paths[0].2.reason.contains("CLUSTER_LIST"));
    assert_eq!(v.not_kept, 5);
}
