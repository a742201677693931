//! Export rules one by one, and the Adj-RIB-Out turning best-path changes into UPDATEs.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use super::*;
use crate::rib::{Best, PeerSource, Reason};
use crate::wire::{Message, Origin, RawAttribute, Update};

const ME: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);

fn src(addr: &str, ebgp: bool, rr_client: bool) -> Arc<PeerSource> {
    let address: IpAddr = addr.parse().unwrap_or_else(|e| panic!("{e}"));
    let router_id = match address {
        IpAddr::V4(a) => a,
        IpAddr::V6(_) => Ipv4Addr::new(198, 51, 100, 99),
    };
    Arc::new(PeerSource {
        address,
        router_id,
        asn: if ebgp { 64601 } else { 64512 },
        ebgp,
        rr_client,
        local: false,
    })
}

fn local() -> Arc<PeerSource> {
    Arc::new(PeerSource {
        address: IpAddr::V4(ME),
        router_id: ME,
        asn: 64512,
        ebgp: false,
        rr_client: false,
        local: true,
    })
}

fn path(source: Arc<PeerSource>, a: PathAttributes) -> Path {
    let next_hop = source.address;
    Path {
        source,
        attrs: Arc::new(a),
        next_hop,
        path_id: 0,
        igp_cost: None,
        stale: false,
    }
}

fn attrs() -> PathAttributes {
    PathAttributes {
        origin: Some(Origin::Igp),
        as_path: Some(AsPath::from_sequence([64601])),
        med: Some(7),
        local_pref: Some(300),
        ..PathAttributes::default()
    }
}

fn policy(peer: &str, ebgp: bool) -> ExportPolicy {
    ExportPolicy {
        peer: peer.parse().unwrap_or_else(|e| panic!("{e}")),
        ebgp,
        local_as: 64512,
        router_id: ME,
        cluster_id: None,
        peer_is_client: false,
        next_hop_self: false,
        next_hop_keep: false,
        local_v4: Some(ME),
        local_v6: "2001:db8::1".parse().ok(),
        session_local: None,
        graceful_shutdown: false,
    }
}

#[test]
fn never_back_to_the_sender_and_well_known_communities() {
    let p = path(src("198.51.100.2", true, false), attrs());
    assert!(export(&p, &policy("198.51.100.2", true)).is_none());
    let no_adv = path(
        src("198.51.100.2", true, false),
        PathAttributes {
            communities: vec![Community::NO_ADVERTISE],
            ..attrs()
        },
    );
    assert!(export(&no_adv, &policy("198.51.100.3", false)).is_none());
    let no_exp = path(
        src("198.51.100.2", true, false),
        PathAttributes {
            communities: vec![Community::NO_EXPORT],
            ..attrs()
        },
    );
    assert!(export(&no_exp, &policy("198.51.100.3", true)).is_none());
    assert!(
        export(&no_exp, &policy("198.51.100.3", false)).is_some(),
        "NO_EXPORT stays inside the AS"
    );
}

#[test]
fn to_ebgp_peers() {
    let p = path(
        src("198.51.100.2", false, false),
        PathAttributes {
            originator_id: Some(ME),
            cluster_list: vec![ME],
            ..attrs()
        },
    );
    let e = export(&p, &policy("203.0.113.9", true)).unwrap_or_else(|| panic!("not exported"));
    assert_eq!(
        e.attrs.as_path.as_ref().map(|a| a.to_string()).as_deref(),
        Some("64512 64601")
    );
    assert_eq!(
        (e.attrs.local_pref, e.attrs.med, e.attrs.originator_id),
        (None, None, None)
    );
    assert!(e.attrs.cluster_list.is_empty());
    assert_eq!(e.next_hop, IpAddr::V4(ME));
    // Our own routes keep the MED we set.
    let own = path(
        local(),
        PathAttributes {
            as_path: Some(AsPath::default()),
            ..attrs()
        },
    );
    assert_eq!(
        export(&own, &policy("203.0.113.9", true)).and_then(|e| e.attrs.med),
        Some(7)
    );
}

#[test]
fn next_hop_keep_leaves_a_learnt_routes_next_hop_towards_ebgp_peers() {
    // BIRD's `next hop keep` (Calico's nextHopMode: Keep): the learnt route's next
    // hop goes out unchanged; our own routes have no other next hop than ours.
    let keep = ExportPolicy {
        next_hop_keep: true,
        ..policy("203.0.113.9", true)
    };
    let learnt = path(src("198.51.100.2", false, false), attrs());
    let e = export(&learnt, &keep).unwrap_or_else(|| panic!("not exported"));
    assert_eq!(e.next_hop, learnt.next_hop);
    assert_ne!(e.next_hop, IpAddr::V4(ME));
    assert_eq!(
        export(&learnt, &policy("203.0.113.9", true)).map(|e| e.next_hop),
        Some(IpAddr::V4(ME)),
        "without keep the next hop is ours"
    );
    let own = path(local(), attrs());
    assert_eq!(
        export(&own, &keep).map(|e| e.next_hop),
        Some(IpAddr::V4(ME))
    );
}

/// Our end of the session, on the ToR's network, not the node's address (ME).
const SESSION: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 5);

fn on_session(peer: &str, ebgp: bool, local: IpAddr) -> ExportPolicy {
    ExportPolicy {
        session_local: Some(local),
        graceful_shutdown: false,
        ..policy(peer, ebgp)
    }
}

#[test]
fn an_ebgp_peer_gets_the_sessions_local_address_as_next_hop() {
    // RFC 4271 §5.1.3: the session runs from 203.0.113.5 (sourceAddress: None, the
    // kernel chose the ToR-facing interface), so that is the next hop, not the node IP.
    let tor = on_session("203.0.113.9", true, IpAddr::V4(SESSION));
    let own = path(local(), attrs());
    let learnt = path(src("198.51.100.2", false, false), attrs());
    for p in [&own, &learnt] {
        assert_eq!(
            export(p, &tor).map(|e| e.next_hop),
            Some(IpAddr::V4(SESSION))
        );
    }
    // Another family over the same session: the configured address of that family.
    let mut own_v6 = path(local(), attrs());
    own_v6.next_hop = "2001:db8::1".parse().unwrap();
    assert_eq!(
        export(&own_v6, &tor).map(|e| e.next_hop.to_string()),
        Some("2001:db8::1".to_string())
    );
    let v6_session = on_session("2001:db8:9::9", true, "2001:db8:9::5".parse().unwrap());
    assert_eq!(
        export(&own_v6, &v6_session).map(|e| e.next_hop.to_string()),
        Some("2001:db8:9::5".to_string())
    );
    assert_eq!(
        export(&own, &v6_session).map(|e| e.next_hop),
        Some(IpAddr::V4(ME)),
        "IPv4 routes over an IPv6 session keep the configured IPv4 address"
    );
}

#[test]
fn next_hop_keep_and_ibgp_are_unchanged_by_the_session_address() {
    let keep = ExportPolicy {
        next_hop_keep: true,
        ..on_session("203.0.113.9", true, IpAddr::V4(SESSION))
    };
    let learnt = path(src("198.51.100.2", false, false), attrs());
    let own = path(local(), attrs());
    assert_eq!(
        export(&learnt, &keep).map(|e| e.next_hop),
        Some(learnt.next_hop),
        "Keep passes a learnt next hop on"
    );
    assert_eq!(
        export(&own, &keep).map(|e| e.next_hop),
        Some(IpAddr::V4(SESSION)),
        "our own routes carry the session's address"
    );
    // iBGP: next-hop-self and our own routes use the configured address, as before.
    let ibgp = ExportPolicy {
        next_hop_self: true,
        ..on_session("198.51.100.3", false, IpAddr::V4(SESSION))
    };
    let ebgp_learnt = path(src("203.0.113.9", true, false), attrs());
    for p in [&own, &ebgp_learnt] {
        assert_eq!(export(p, &ibgp).map(|e| e.next_hop), Some(IpAddr::V4(ME)));
    }
}

#[test]
fn to_ibgp_peers_and_route_reflection() {
    let ebgp_learnt = path(
        src("203.0.113.9", true, false),
        PathAttributes {
            local_pref: None,
            ..attrs()
        },
    );
    let e = export(&ebgp_learnt, &policy("198.51.100.3", false))
        .unwrap_or_else(|| panic!("not exported"));
    assert_eq!(
        e.next_hop.to_string(),
        "203.0.113.9",
        "next hop kept towards iBGP"
    );
    assert_eq!(e.attrs.local_pref, Some(100));
    let selfp = ExportPolicy {
        next_hop_self: true,
        ..policy("198.51.100.3", false)
    };
    assert_eq!(
        export(&ebgp_learnt, &selfp).map(|e| e.next_hop),
        Some(IpAddr::V4(ME))
    );

    let from_client = path(src("198.51.100.4", false, true), attrs());
    let from_other = path(src("198.51.100.5", false, false), attrs());
    assert!(
        export(&from_client, &policy("198.51.100.3", false)).is_none(),
        "no iBGP to iBGP without reflection"
    );
    let rr = ExportPolicy {
        cluster_id: Some(Ipv4Addr::new(198, 51, 100, 100)),
        ..policy("198.51.100.3", false)
    };
    let rr_to_client = ExportPolicy {
        peer_is_client: true,
        ..rr.clone()
    };
    let e = export(&from_client, &rr).unwrap_or_else(|| panic!("client routes go to everyone"));
    assert_eq!(e.attrs.originator_id, Some(Ipv4Addr::new(198, 51, 100, 4)));
    assert_eq!(e.attrs.cluster_list, vec![Ipv4Addr::new(198, 51, 100, 100)]);
    assert!(
        export(&from_other, &rr).is_none(),
        "non-client to non-client is not reflected"
    );
    assert!(
        export(&from_other, &rr_to_client).is_some(),
        "non-client to client is"
    );
    let looped = path(
        src("198.51.100.4", false, true),
        PathAttributes {
            cluster_list: vec![Ipv4Addr::new(198, 51, 100, 100)],
            ..attrs()
        },
    );
    assert!(
        export(&looped, &rr).is_none(),
        "our cluster id already in CLUSTER_LIST"
    );
}

#[test]
fn unknown_attributes_on_readvertisement() {
    let a = PathAttributes {
        unknown: vec![
            RawAttribute {
                flags: 0xc0,
                code: 99,
                data: bytes::Bytes::from_static(b"t"),
            },
            RawAttribute {
                flags: 0x80,
                code: 98,
                data: bytes::Bytes::from_static(b"n"),
            },
        ],
        ..attrs()
    };
    let e = export(
        &path(src("203.0.113.9", true, false), a),
        &policy("198.51.100.3", true),
    );
    let u = e.map(|e| e.attrs.unknown).unwrap_or_default();
    assert_eq!(
        u.iter().map(|r| (r.code, r.flags)).collect::<Vec<_>>(),
        [(99, 0xe0)]
    );
}

fn change(prefix: &str, p: Option<Path>) -> BestChange {
    let prefix: IpNet = prefix.parse().unwrap_or_else(|e| panic!("{e}"));
    let now = p.map(|p| {
        let p = Arc::new(p);
        Best {
            best: Arc::clone(&p),
            multipath: vec![p].into(),
            reason: Reason::Equal,
        }
    });
    BestChange { prefix, now }
}

fn decode(b: &[Bytes]) -> Vec<Update> {
    b.iter()
        .filter_map(
            |m| match Message::decode(m.clone(), &CodecOptions::modern()) {
                Ok(Message::Update(u)) => Some(u),
                _ => None,
            },
        )
        .collect()
}

#[test]
fn adj_rib_out_sends_only_negotiated_families() {
    let mut out =
        AdjRibOut::new(policy("203.0.113.9", true)).with_families(&[Family::IPV4_UNICAST]);
    let mut ex = Exports::default();
    let tx = CodecOptions::modern();
    let changes = [
        change(
            "198.18.1.0/26",
            Some(path(src("198.51.100.2", false, false), attrs())),
        ),
        change(
            "2001:db8:5::/64",
            Some(path(src("2001:db8::5", false, false), attrs())),
        ),
    ];
    let ups = decode(
        &out.apply(&changes, &tx, &mut ex)
            .unwrap_or_else(|e| panic!("{e}")),
    );
    assert_eq!(ups.len(), 1);
    assert!(ups[0].mp_reach.is_none());
    assert_eq!(out.len(), 1);
}

#[test]
fn adj_rib_out_packs_sends_once_and_withdraws() {
    let mut out = AdjRibOut::new(policy("203.0.113.9", true));
    let mut ex = Exports::default();
    let tx = CodecOptions::modern();
    let s = src("198.51.100.2", false, false);
    let changes: Vec<BestChange> = (0..50)
        .map(|i| {
            change(
                &format!("198.18.{i}.0/26"),
                Some(path(Arc::clone(&s), attrs())),
            )
        })
        .chain([change(
            "2001:db8:5::/64",
            Some(path(src("2001:db8::5", false, false), attrs())),
        )])
        .collect();
    let msgs = out
        .apply(&changes, &tx, &mut ex)
        .unwrap_or_else(|e| panic!("{e}"));
    let ups = decode(&msgs);
    assert_eq!(
        ups.len(),
        2,
        "50 IPv4 prefixes in one UPDATE, the IPv6 one in another"
    );
    assert_eq!(ups[0].nlri.len(), 50);
    assert_eq!(ups[0].attributes.next_hop, Some(ME));
    assert_eq!(
        ups[1].mp_reach.as_ref().map(|m| m.next_hop.to_string()),
        Some("2001:db8::1".into())
    );
    assert_eq!(out.len(), 51);
    // The same changes again send nothing.
    assert!(out
        .apply(&changes, &tx, &mut ex)
        .unwrap_or_default()
        .is_empty());
    // A prefix losing its last path, and one whose best path may no longer be exported.
    let gone = change("198.18.0.0/26", None);
    let no_exp = change(
        "198.18.1.0/26",
        Some(path(
            Arc::clone(&s),
            PathAttributes {
                communities: vec![Community::NO_EXPORT],
                ..attrs()
            },
        )),
    );
    let ups = decode(&out.apply(&[gone, no_exp], &tx, &mut ex).unwrap_or_default());
    assert_eq!(ups.len(), 1);
    assert_eq!(ups[0].withdrawn.len(), 2);
    assert_eq!(out.len(), 49);
}

#[test]
fn route_refresh_resends_one_family_between_borr_and_eorr() {
    let mut out = AdjRibOut::new(policy("203.0.113.9", true));
    let mut ex = Exports::default();
    let tx = CodecOptions::modern();
    let s = src("198.51.100.2", false, false);
    let changes: Vec<BestChange> = (0..3)
        .map(|i| {
            change(
                &format!("198.18.{i}.0/26"),
                Some(path(Arc::clone(&s), attrs())),
            )
        })
        .chain([change(
            "2001:db8:5::/64",
            Some(path(src("2001:db8::5", false, false), attrs())),
        )])
        .collect();
    let _ = out.apply(&changes, &tx, &mut ex).unwrap_or_default();
    let msgs = out
        .refresh(Family::IPV4_UNICAST, &tx, true, ex.numbers())
        .unwrap_or_default();
    let kinds: Vec<String> = msgs
        .iter()
        .filter_map(|m| Message::decode(m.clone(), &tx).ok())
        .map(|m| match m {
            Message::RouteRefresh(r) => format!("{:?}", r.subtype),
            Message::Update(u) => format!("UPDATE {}", u.nlri.len()),
            other => other.kind().to_string(),
        })
        .collect();
    assert_eq!(
        kinds,
        ["BeginningOfRibRefresh", "UPDATE 3", "EndOfRibRefresh"]
    );
    let plain = out
        .refresh(Family::IPV6_UNICAST, &tx, false, ex.numbers())
        .unwrap_or_default();
    assert_eq!(
        decode(&plain)
            .iter()
            .map(|u| u.announced_count())
            .sum::<usize>(),
        1
    );
}

#[test]
fn add_path_sends_the_ecmp_set_under_stable_ids_and_withdraws_by_id() {
    // A reflector (cluster id set) sending to a client: two clients' paths for one
    // anycast prefix form the ECMP set; both go out, each with its own path id.
    let mut policy = policy("198.51.100.9", false);
    policy.cluster_id = Some(Ipv4Addr::new(198, 51, 100, 250));
    policy.peer_is_client = true;
    let mut out = AdjRibOut::new(policy).with_add_path(&[Family::IPV4_UNICAST]);
    let mut ex = Exports::default();
    let tx = CodecOptions {
        add_path_ipv4: true,
        ..CodecOptions::modern()
    };
    let decode_ap = |b: &[Bytes]| -> Vec<Update> {
        b.iter()
            .filter_map(|m| match Message::decode(m.clone(), &tx) {
                Ok(Message::Update(u)) => Some(u),
                _ => None,
            })
            .collect()
    };
    let ibgp = PathAttributes {
        as_path: Some(AsPath::from_sequence([])),
        ..attrs()
    };
    let a = Arc::new(path(src("198.51.100.11", false, true), ibgp.clone()));
    let b = Arc::new(path(src("198.51.100.12", false, true), ibgp));
    let both = BestChange {
        prefix: "198.18.200.0/24".parse().unwrap_or_else(|e| panic!("{e}")),
        now: Some(Best {
            best: Arc::clone(&a),
            multipath: vec![Arc::clone(&a), Arc::clone(&b)].into(),
            reason: Reason::Equal,
        }),
    };
    let ups = decode_ap(
        &out.apply(std::slice::from_ref(&both), &tx, &mut ex)
            .unwrap_or_default(),
    );
    let mut sent: Vec<(Option<u32>, Option<Ipv4Addr>)> = ups
        .iter()
        .flat_map(|u| u.nlri.iter().map(|n| (n.path_id, u.attributes.next_hop)))
        .collect();
    sent.sort();
    assert_eq!(
        sent,
        vec![
            (Some(1), Some(Ipv4Addr::new(198, 51, 100, 11))),
            (Some(2), Some(Ipv4Addr::new(198, 51, 100, 12)))
        ]
    );
    // Nothing changed: nothing sent.
    assert!(out
        .apply(std::slice::from_ref(&both), &tx, &mut ex)
        .unwrap_or_default()
        .is_empty());
    // Only b is left: a's path is withdrawn by its id, b keeps id 2 and is not resent.
    let only_b = BestChange {
        prefix: both.prefix,
        now: Some(Best {
            best: Arc::clone(&b),
            multipath: vec![Arc::clone(&b)].into(),
            reason: Reason::Equal,
        }),
    };
    let ups = decode_ap(&out.apply(&[only_b], &tx, &mut ex).unwrap_or_default());
    assert_eq!(ups.len(), 1);
    assert!(ups[0].nlri.is_empty());
    assert_eq!(
        ups[0]
            .withdrawn
            .iter()
            .map(|n| n.path_id)
            .collect::<Vec<_>>(),
        vec![Some(1)]
    );
    // A route refresh repeats what the peer has, with its id.
    let again = decode_ap(
        &out.refresh(Family::IPV4_UNICAST, &tx, false, ex.numbers())
            .unwrap_or_default(),
    );
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].nlri[0].path_id, Some(2));
    // Gone: withdrawn by id.
    let gone = decode_ap(
        &out.apply(&[change("198.18.200.0/24", None)], &tx, &mut ex)
            .unwrap_or_default(),
    );
    assert_eq!(gone[0].withdrawn[0].path_id, Some(2));
    assert!(out.is_empty());
}

#[test]
fn a_plain_ibgp_peer_gets_no_ibgp_path_but_withdrawals_of_what_it_had() {
    // A mesh peer (iBGP, no reflection): our own route goes out; an iBGP-learnt best
    // replacing it must withdraw it, and iBGP-learnt routes alone send nothing.
    let mut out = AdjRibOut::new(policy("198.51.100.9", false));
    let mut ex = Exports::default();
    let tx = CodecOptions::modern();
    let ours = change("198.18.1.0/26", Some(path(local(), attrs())));
    let ups = decode(&out.apply(&[ours], &tx, &mut ex).unwrap_or_default());
    assert_eq!(ups.first().map(|u| u.nlri.len()), Some(1));
    let mesh = src("198.51.100.3", false, false);
    let learnt: Vec<BestChange> = (2..40)
        .map(|i| {
            change(
                &format!("198.18.{i}.0/26"),
                Some(path(Arc::clone(&mesh), attrs())),
            )
        })
        .collect();
    assert!(out
        .apply(&learnt, &tx, &mut ex)
        .unwrap_or_default()
        .is_empty());
    let taken_over = change("198.18.1.0/26", Some(path(mesh, attrs())));
    let ups = decode(&out.apply(&[taken_over], &tx, &mut ex).unwrap_or_default());
    assert_eq!(ups.len(), 1);
    assert_eq!(ups[0].withdrawn.len(), 1, "{ups:?}");
    assert_eq!(out.len(), 0);
}

#[test]
fn draining_adds_graceful_shutdown_and_lowers_local_pref_inside_the_as() {
    let own = path(local(), attrs());
    let drain = |peer: &str, ebgp: bool| ExportPolicy {
        graceful_shutdown: true,
        ..policy(peer, ebgp)
    };
    let to_ibgp = export(&own, &drain("198.51.100.3", false)).unwrap_or_else(|| panic!("kept"));
    assert_eq!(
        to_ibgp.attrs.communities,
        vec![Community::GRACEFUL_SHUTDOWN]
    );
    assert_eq!(to_ibgp.attrs.local_pref, Some(0));
    let to_ebgp = export(&own, &drain("203.0.113.9", true)).unwrap_or_else(|| panic!("kept"));
    assert_eq!(
        to_ebgp.attrs.communities,
        vec![Community::GRACEFUL_SHUTDOWN]
    );
    assert_eq!(to_ebgp.attrs.local_pref, None);
    // Present already: not twice. Not draining: untouched.
    let marked = path(
        local(),
        PathAttributes {
            communities: vec![Community::GRACEFUL_SHUTDOWN],
            ..attrs()
        },
    );
    let e = export(&marked, &drain("198.51.100.3", false)).unwrap_or_else(|| panic!("kept"));
    assert_eq!(e.attrs.communities.len(), 1);
    let plain = export(&own, &policy("198.51.100.3", false)).unwrap_or_else(|| panic!("kept"));
    assert!(plain.attrs.communities.is_empty());
    assert_eq!(plain.attrs.local_pref, Some(300));
    assert_eq!(
        Community::GRACEFUL_SHUTDOWN.to_string(),
        "graceful-shutdown"
    );
}
