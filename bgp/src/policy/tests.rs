//! The policy language: unit tests of each condition and modification, and a property
//! test against a small reference model of BIRD's filter semantics.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed parse is a bug

use std::net::Ipv4Addr;

use ipnet::IpNet;
use proptest::prelude::*;

use super::*;
use crate::wire::{AsSegment, SegmentType};

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn facts<'a>(prefix: &str, source: RouteSource, attrs: &'a PathAttributes) -> RouteFacts<'a> {
    RouteFacts {
        prefix: net(prefix),
        source,
        interface: None,
        attrs,
        kernel_metric: None,
        peer: PeerType::External,
    }
}

fn stmt(conditions: Vec<Condition>, action: Action) -> Statement {
    Statement {
        label: String::new(),
        conditions,
        modifications: Vec::new(),
        action,
    }
}

fn program(statements: Vec<Statement>, default: Decision) -> Program {
    Program {
        statements,
        default,
    }
}

#[test]
fn prefix_operators_are_birds() {
    let cidr = net("198.51.100.0/24");
    let cases = [
        ("198.51.100.0/24", [true, false, true, false]),
        ("198.51.100.64/26", [false, true, true, false]),
        ("198.51.0.0/16", [false, true, false, true]),
        ("203.0.113.0/24", [false, true, false, true]),
        ("2001:db8::/32", [false, true, false, true]),
    ];
    for (p, want) in cases {
        let ops = [
            PrefixOp::Equal,
            PrefixOp::NotEqual,
            PrefixOp::In,
            PrefixOp::NotIn,
        ];
        for (op, w) in ops.iter().zip(want) {
            assert_eq!(prefix_matches(&net(p), &cidr, *op), w, "{p} {op} {cidr}");
        }
    }
}

#[test]
fn prefix_range_is_inside_and_length_between() {
    let attrs = PathAttributes::default();
    let c = Condition::PrefixRange {
        cidr: net("198.18.0.0/15"),
        min: 24,
        max: 26,
        negate: false,
    };
    let p = program(vec![stmt(vec![c], Action::Accept)], Decision::Reject);
    for (prefix, want) in [
        ("198.18.0.0/15", false),
        ("198.18.4.0/24", true),
        ("198.19.4.64/26", true),
        ("198.19.4.64/27", false),
        ("198.20.0.0/24", false),
    ] {
        let v = p.evaluate(&facts(prefix, RouteSource::Bgp, &attrs));
        assert_eq!(v.accepted(), want, "{prefix}");
    }
}

#[test]
fn first_decisive_statement_wins_and_continue_keeps_changes() {
    let attrs = PathAttributes::default();
    let tag = Community((65000 << 16) | 7);
    let p = Program {
        statements: vec![
            Statement {
                label: "tag".into(),
                conditions: vec![Condition::Prefix {
                    cidr: net("198.51.100.0/24"),
                    op: PrefixOp::In,
                }],
                modifications: vec![Modification::AddCommunity(tag)],
                action: Action::Continue,
            },
            stmt(vec![Condition::Community(tag)], Action::Accept),
            stmt(vec![], Action::Reject),
        ],
        default: Decision::Accept,
    };
    let v = p.evaluate(&facts("198.51.100.7/32", RouteSource::Bgp, &attrs));
    assert!(v.accepted());
    assert_eq!(v.decided_by, Some(1));
    assert_eq!(v.changes.communities, vec![tag]);
    let v = p.evaluate(&facts("203.0.113.0/24", RouteSource::Bgp, &attrs));
    assert_eq!((v.decision, v.decided_by), (Decision::Reject, Some(2)));
    assert_eq!(p.label(Some(0)), "tag");
    assert_eq!(p.label(None), "default");
}

#[test]
fn source_interface_and_peer_type() {
    let attrs = PathAttributes::default();
    let p = program(
        vec![
            stmt(
                vec![Condition::Interface("*.calico".into())],
                Action::Reject,
            ),
            stmt(vec![Condition::Source(RouteSource::Bgp)], Action::Reject),
            stmt(
                vec![Condition::PeerType(PeerType::Internal)],
                Action::Accept,
            ),
        ],
        Decision::Reject,
    );
    let mut f = facts("198.51.100.7/32", RouteSource::Kernel, &attrs);
    f.interface = Some("vxlan.calico");
    assert_eq!(p.evaluate(&f).decided_by, Some(0));
    f.interface = Some("cali12345");
    assert_eq!(p.evaluate(&f).decided_by, None);
    f.peer = PeerType::Internal;
    assert!(p.evaluate(&f).accepted());
    f.source = RouteSource::Bgp;
    assert_eq!(p.evaluate(&f).decided_by, Some(1));
}

#[test]
fn a_route_without_interface_has_birds_empty_name() {
    let attrs = PathAttributes::default();
    let f = facts("198.51.100.0/24", RouteSource::Originated, &attrs);
    let hit = |p: &str| {
        program(
            vec![stmt(vec![Condition::Interface(p.into())], Action::Accept)],
            Decision::Reject,
        )
        .evaluate(&f)
        .accepted()
    };
    assert!(hit("*"));
    assert!(!hit("cali*"));
    assert!(!hit("?*"));
}

#[test]
fn interface_patterns_are_shell_patterns() {
    for (p, n, want) in [
        ("cali*", "cali1234", true),
        ("cali*", "cali", true),
        ("cali*", "eth0", false),
        ("*.calico", "vxlan.calico", true),
        ("*.calico", "vxlan.calico0", false),
        ("eth?", "eth0", true),
        ("eth?", "eth10", false),
        ("e*h*0", "eth10", true),
        ("tunl0", "tunl0", true),
        ("tunl0", "tunl00", false),
        ("*", "", true),
        ("", "", true),
        ("", "x", false),
        // Not ASCII: `?` stands for one character, not one byte.
        ("br?", "brü", true),
        ("b?ü*", "bäü0", true),
        ("brü", "bru", false),
    ] {
        assert_eq!(interface_matches(p, n), want, "{p} ~ {n}");
    }
}

fn path(segments: Vec<(SegmentType, Vec<u32>)>) -> AsPath {
    AsPath {
        segments: segments
            .into_iter()
            .map(|(kind, asns)| AsSegment { kind, asns })
            .collect(),
    }
}

#[test]
fn as_path_prefix_first_and_mask() {
    let mut attrs = PathAttributes {
        as_path: Some(path(vec![
            (SegmentType::Sequence, vec![65001, 65002]),
            (SegmentType::Set, vec![65010, 65011]),
        ])),
        ..PathAttributes::default()
    };
    let cond = |v: Vec<u32>| Condition::AsPathPrefix(v);
    let hit = |attrs: &PathAttributes, c: Condition| {
        program(vec![stmt(vec![c], Action::Accept)], Decision::Reject)
            .evaluate(&facts("198.51.100.0/24", RouteSource::Bgp, attrs))
            .accepted()
    };
    assert!(hit(&attrs, cond(vec![65001])));
    assert!(!hit(&attrs, cond(vec![65002])));
    assert!(hit(&attrs, cond(vec![65001, 65002])));
    assert!(hit(&attrs, cond(vec![65001, 65002, 65011])));
    assert!(!hit(&attrs, cond(vec![65001, 65002, 65011, 1])));
    attrs.as_path = Some(path(vec![(SegmentType::Set, vec![65001])]));
    assert!(
        !hit(&attrs, cond(vec![65001])),
        "bgp_path.first needs a sequence"
    );
    attrs.as_path = None;
    assert!(!hit(&attrs, cond(vec![65001])));
}

#[test]
fn modifications_apply_in_order_and_are_seen_by_later_statements() {
    let attrs = PathAttributes {
        as_path: Some(AsPath::from_sequence([65001])),
        communities: vec![Community(1)],
        ..PathAttributes::default()
    };
    let large = LargeCommunity {
        global: 65000,
        local1: 1,
        local2: 2,
    };
    let p = Program {
        statements: vec![
            Statement {
                label: "ops".into(),
                conditions: vec![],
                modifications: vec![
                    Modification::AddCommunity(Community(1)),
                    Modification::AddCommunity(Community(2)),
                    Modification::AddLargeCommunity(large),
                    Modification::PrependAsPath(vec![64512, 64513]),
                    Modification::SetPriority(512),
                ],
                action: Action::Continue,
            },
            stmt(
                vec![
                    Condition::AsPathPrefix(vec![64512, 64513, 65001]),
                    Condition::Priority(512),
                    Condition::LargeCommunity(large),
                    Condition::Community(Community(2)),
                ],
                Action::Accept,
            ),
        ],
        default: Decision::Reject,
    };
    let v = p.evaluate(&facts("198.51.100.0/24", RouteSource::Bgp, &attrs));
    assert!(v.accepted(), "{v:?}");
    assert_eq!(v.changes.communities, vec![Community(2)], "no duplicate");
    let mut out = attrs.clone();
    v.changes.apply(&mut out);
    assert_eq!(
        out.as_path,
        Some(AsPath::from_sequence([64512, 64513, 65001]))
    );
    assert_eq!(out.communities, vec![Community(1), Community(2)]);
    assert_eq!(out.large_communities, vec![large]);
    assert_eq!(v.changes.priority, Some(512));
}

#[test]
fn derive_priority_is_calicos_export_preamble() {
    let derive = Program {
        statements: vec![Statement {
            label: "preamble".into(),
            conditions: vec![],
            modifications: vec![Modification::DerivePriority { normal: 1024 }],
            action: Action::Continue,
        }],
        default: Decision::Accept,
    };
    // Originated without a metric: the normal priority, LOCAL_PREF from it.
    let none = PathAttributes::default();
    let v = derive.evaluate(&facts("198.51.100.0/26", RouteSource::Originated, &none));
    assert_eq!(v.changes.priority, Some(1024));
    assert_eq!(v.changes.local_pref, Some(BIRD_INT_MAX - 1024));
    // A kernel route with an elevated metric keeps it.
    let mut f = facts("198.51.100.9/32", RouteSource::Kernel, &none);
    f.kernel_metric = Some(512);
    let v = derive.evaluate(&f);
    assert_eq!(v.changes.local_pref, Some(BIRD_INT_MAX - 512));
    // A BGP route: priority from its LOCAL_PREF, which stays as it is.
    let lp = PathAttributes {
        local_pref: Some(BIRD_INT_MAX - 512),
        ..PathAttributes::default()
    };
    let v = derive.evaluate(&facts("198.51.100.9/32", RouteSource::Bgp, &lp));
    assert_eq!(v.changes.priority, Some(512));
    assert_eq!(v.changes.local_pref, None);
}

#[test]
fn rejected_routes_carry_no_changes() {
    let attrs = PathAttributes::default();
    let p = Program {
        statements: vec![Statement {
            label: String::new(),
            conditions: vec![],
            modifications: vec![Modification::AddCommunity(Community(9))],
            action: Action::Continue,
        }],
        default: Decision::Reject,
    };
    let v = p.evaluate(&facts("198.51.100.0/24", RouteSource::Bgp, &attrs));
    assert_eq!(v.changes, Changes::default());
}

// ---- Reference model of BIRD's filter semantics -------------------------------

/// An IPv4 prefix as BIRD stores it: address bits and a length.
#[derive(Debug, Clone, Copy)]
struct ModelNet {
    bits: u32,
    len: u8,
}

fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    }
}

impl ModelNet {
    /// BIRD's `net ~ p`: at least as long and the same in p's first bits.
    fn inside(self, p: ModelNet) -> bool {
        self.len >= p.len && (self.bits & mask(p.len)) == (p.bits & mask(p.len))
    }
    fn equal(self, p: ModelNet) -> bool {
        self.len == p.len && (self.bits & mask(self.len)) == (p.bits & mask(p.len))
    }
    fn to_ipnet(self) -> IpNet {
        IpNet::new(Ipv4Addr::from(self.bits).into(), self.len).unwrap()
    }
}

#[derive(Debug, Clone)]
enum ModelCond {
    Op(ModelNet, PrefixOp),
    Range(ModelNet, u8, u8, bool),
    FromBgp,
    Ebgp,
    Community(u32),
}

impl ModelCond {
    fn holds(&self, r: &ModelRoute) -> bool {
        match self {
            ModelCond::Op(p, PrefixOp::Equal) => r.net.equal(*p),
            ModelCond::Op(p, PrefixOp::NotEqual) => !r.net.equal(*p),
            ModelCond::Op(p, PrefixOp::In) => r.net.inside(*p),
            ModelCond::Op(p, PrefixOp::NotIn) => !r.net.inside(*p),
            ModelCond::Range(p, a, b, neg) => {
                (r.net.inside(*p) && *a <= r.net.len && r.net.len <= *b) != *neg
            }
            ModelCond::FromBgp => r.bgp,
            ModelCond::Ebgp => r.ebgp,
            ModelCond::Community(c) => r.communities.contains(c),
        }
    }
    fn to_condition(&self) -> Condition {
        match self {
            ModelCond::Op(p, op) => Condition::Prefix {
                cidr: p.to_ipnet(),
                op: *op,
            },
            ModelCond::Range(p, a, b, neg) => Condition::PrefixRange {
                cidr: p.to_ipnet(),
                min: *a,
                max: *b,
                negate: *neg,
            },
            ModelCond::FromBgp => Condition::Source(RouteSource::Bgp),
            ModelCond::Ebgp => Condition::PeerType(PeerType::External),
            ModelCond::Community(c) => Condition::Community(Community(*c)),
        }
    }
}

#[derive(Debug, Clone)]
struct ModelRoute {
    net: ModelNet,
    bgp: bool,
    ebgp: bool,
    communities: Vec<u32>,
}

/// The model: statements are (conditions, Some(accept?) or None for "no action");
/// the first statement with an action whose conditions hold decides.
fn model_eval(
    stmts: &[(Vec<ModelCond>, Option<bool>)],
    default: bool,
    r: &ModelRoute,
) -> (bool, Option<usize>) {
    for (i, (conds, action)) in stmts.iter().enumerate() {
        if let Some(accept) = action {
            if conds.iter().all(|c| c.holds(r)) {
                return (*accept, Some(i));
            }
        }
    }
    (default, None)
}

// Few distinct addresses and lengths, so that conditions hit often.
fn model_net() -> impl Strategy<Value = ModelNet> {
    (
        prop_oneof![
            Just(0xC612_0000u32),
            Just(0xC612_0400),
            Just(0xC633_6400),
            Just(0xC613_FF80),
            any::<u32>()
        ],
        prop_oneof![0u8..=32, 14u8..=26],
    )
        .prop_map(|(bits, len)| ModelNet { bits, len })
}

fn model_cond() -> impl Strategy<Value = ModelCond> {
    let op = prop_oneof![
        Just(PrefixOp::Equal),
        Just(PrefixOp::NotEqual),
        Just(PrefixOp::In),
        Just(PrefixOp::NotIn)
    ];
    prop_oneof![
        (model_net(), op).prop_map(|(n, o)| ModelCond::Op(n, o)),
        (model_net(), 0u8..=32, 0u8..=32, any::<bool>())
            .prop_map(|(n, a, b, neg)| ModelCond::Range(n, a, b, neg)),
        Just(ModelCond::FromBgp),
        Just(ModelCond::Ebgp),
        (0u32..4).prop_map(ModelCond::Community),
    ]
}

fn model_route() -> impl Strategy<Value = ModelRoute> {
    (
        model_net(),
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(0u32..4, 0..3),
    )
        .prop_map(|(net, bgp, ebgp, communities)| ModelRoute {
            net,
            bgp,
            ebgp,
            communities,
        })
}

type ModelProgram = (Vec<(Vec<ModelCond>, Option<bool>)>, bool);

fn model_program() -> impl Strategy<Value = ModelProgram> {
    (
        proptest::collection::vec(
            (
                proptest::collection::vec(model_cond(), 0..3),
                proptest::option::of(any::<bool>()),
            ),
            0..8,
        ),
        any::<bool>(),
    )
}

fn compile(stmts: &[(Vec<ModelCond>, Option<bool>)], default: bool) -> Program {
    let decision = |a: bool| {
        if a {
            Decision::Accept
        } else {
            Decision::Reject
        }
    };
    Program {
        statements: stmts
            .iter()
            .map(|(conds, action)| Statement {
                label: String::new(),
                conditions: conds.iter().map(ModelCond::to_condition).collect(),
                modifications: Vec::new(),
                action: match action {
                    Some(true) => Action::Accept,
                    Some(false) => Action::Reject,
                    None => Action::Continue,
                },
            })
            .collect(),
        default: decision(default),
    }
}

proptest! {
    #[test]
    fn evaluation_agrees_with_the_bird_model(
        (stmts, default) in model_program(),
        routes in proptest::collection::vec(model_route(), 1..8),
    ) {
        let prog = compile(&stmts, default);
        for r in &routes {
            let attrs = PathAttributes {
                communities: r.communities.iter().map(|c| Community(*c)).collect(),
                ..PathAttributes::default()
            };
            let f = RouteFacts {
                prefix: r.net.to_ipnet(),
                source: if r.bgp { RouteSource::Bgp } else { RouteSource::Originated },
                interface: None,
                attrs: &attrs,
                kernel_metric: None,
                peer: if r.ebgp { PeerType::External } else { PeerType::Internal },
            };
            let v = prog.evaluate(&f);
            let (accept, by) = model_eval(&stmts, default, r);
            prop_assert_eq!(v.accepted(), accept, "route {:?}", r);
            prop_assert_eq!(v.decided_by, by, "route {:?}", r);
        }
    }

    #[test]
    fn interface_match_agrees_with_a_recursive_matcher(
        pattern in "[ab*?]{0,6}",
        name in "[ab]{0,6}",
    ) {
        fn rec(p: &[u8], n: &[u8]) -> bool {
            match (p.first(), n.first()) {
                (None, None) => true,
                (Some(b'*'), _) => rec(&p[1..], n) || (!n.is_empty() && rec(p, &n[1..])),
                (Some(b'?'), Some(_)) => rec(&p[1..], &n[1..]),
                (Some(a), Some(b)) if a == b => rec(&p[1..], &n[1..]),
                _ => false,
            }
        }
        prop_assert_eq!(interface_matches(&pattern, &name), rec(pattern.as_bytes(), name.as_bytes()));
    }
}
