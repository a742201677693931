//! Codec tests that read like the scenario they check: build a message or bytes, run
//! the codec, compare with what the RFC says.

use std::net::Ipv4Addr;

use bytes::{BufMut, Bytes, BytesMut};

use super::iana::attr;
use super::notification::{code, update_subcode};
use super::pack::{self, NextHop};
use super::*;

fn net(s: &str) -> Nlri {
    Nlri::new(s.parse().unwrap_or_else(|e| panic!("{s}: {e}")))
}

fn attrs() -> PathAttributes {
    PathAttributes {
        origin: Some(Origin::Igp),
        as_path: Some(AsPath::from_sequence([64512, 4_200_000_001])),
        next_hop: Some(Ipv4Addr::new(203, 0, 113, 1)),
        med: Some(10),
        local_pref: Some(100),
        communities: vec![Community(0xFDE8_0001)],
        large_communities: vec![LargeCommunity {
            global: 64512,
            local1: 1,
            local2: 2,
        }],
        ..PathAttributes::default()
    }
}

fn round_trip(m: &Message, opts: &CodecOptions) -> Message {
    let b = m
        .encode(opts)
        .unwrap_or_else(|e| panic!("encode {m:?}: {e}"));
    Message::decode(b, opts).unwrap_or_else(|e| panic!("decode {m:?}: {e}"))
}

/// An UPDATE body built by hand: withdrawn bytes, attribute bytes, NLRI bytes.
fn update_bytes(withdrawn: &[u8], attrs: &[u8], nlri: &[u8]) -> Bytes {
    let mut m = BytesMut::new();
    begin_message(&mut m, 2);
    m.put_u16(withdrawn.len() as u16);
    m.put_slice(withdrawn);
    m.put_u16(attrs.len() as u16);
    m.put_slice(attrs);
    m.put_slice(nlri);
    let len = m.len();
    patch_u16(&mut m, 16, len);
    m.freeze()
}

const ORIGIN_IGP: [u8; 4] = [0x40, 1, 1, 0];
const AS_PATH_64512: [u8; 9] = [0x40, 2, 6, 2, 1, 0, 0, 0xfc, 0x00];
const NEXT_HOP: [u8; 7] = [0x40, 3, 4, 203, 0, 113, 1];

fn good_attrs() -> Vec<u8> {
    [&ORIGIN_IGP[..], &AS_PATH_64512, &NEXT_HOP].concat()
}

fn decode_update(b: Bytes) -> Result<Update, DecodeError> {
    match Message::decode(b, &CodecOptions::modern())? {
        Message::Update(u) => Ok(u),
        other => panic!("not an UPDATE: {other:?}"),
    }
}

#[test]
fn every_message_type_round_trips() {
    let opts = CodecOptions::modern();
    let open = Open::new(
        4_200_000_001,
        90,
        Ipv4Addr::new(203, 0, 113, 9),
        vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::Multiprotocol(Family::IPV6_UNICAST),
            Capability::RouteRefresh,
            Capability::EnhancedRouteRefresh,
            Capability::ExtendedMessage,
            Capability::GracefulRestart(GracefulRestart {
                restart_state: true,
                notification: true,
                restart_time: 120,
                families: vec![GracefulRestartFamily {
                    family: Family::IPV6_UNICAST,
                    forwarding_preserved: true,
                }],
            }),
            Capability::AddPath(vec![AddPathFamily {
                family: Family::IPV4_UNICAST,
                receive: true,
                send: true,
            }]),
            Capability::ExtendedNextHop(vec![ExtendedNextHopFamily {
                family: Family::IPV4_UNICAST,
                next_hop_afi: Afi::Ipv6,
            }]),
            Capability::Fqdn {
                hostname: "node-a".into(),
                domain: "cluster.local".into(),
            },
            Capability::Unknown {
                code: 71,
                data: Bytes::from_static(&[0, 1, 1, 0, 0, 0, 10]),
            },
        ],
    );
    assert_eq!(open.my_as, 23456);
    let back = round_trip(&Message::Open(open.clone()), &opts);
    assert_eq!(back, Message::Open(open.clone()));
    if let Message::Open(o) = back {
        assert_eq!(o.asn(), 4_200_000_001);
    }
    for m in [
        Message::Keepalive,
        Message::Notification(Notification::shutdown("upgrading node-a")),
        Message::RouteRefresh(RouteRefresh {
            family: Family::IPV6_UNICAST,
            subtype: RefreshSubtype::EndOfRibRefresh,
        }),
        Message::Update(Update {
            withdrawn: vec![net("198.18.9.0/24")],
            attributes: attrs(),
            nlri: vec![net("198.18.4.0/26"), net("198.18.7.3/32")],
            ..Update::default()
        }),
        Message::Update(Update {
            attributes: PathAttributes {
                next_hop: None,
                ..attrs()
            },
            mp_reach: Some(MpReach {
                family: Family::IPV6_UNICAST,
                next_hop: MpNextHop::V6 {
                    global: "2001:db8::1"
                        .parse()
                        .unwrap_or(std::net::Ipv6Addr::UNSPECIFIED),
                    link_local: Some("fe80::1".parse().unwrap_or(std::net::Ipv6Addr::UNSPECIFIED)),
                },
                nlri: vec![net("2001:db8:4::/122")],
                unparsed: None,
            }),
            mp_unreach: Some(MpUnreach {
                family: Family::IPV6_UNICAST,
                withdrawn: vec![net("2001:db8:5::/64")],
                unparsed: None,
            }),
            ..Update::default()
        }),
    ] {
        assert_eq!(round_trip(&m, &opts), m);
    }
}

#[test]
fn open_with_long_capabilities_uses_rfc9072_and_decodes() {
    let caps = (0..60)
        .map(|i| Capability::Unknown {
            code: 200,
            data: Bytes::from(vec![i; 3]),
        })
        .collect();
    let open = Open::new(64512, 9, Ipv4Addr::new(198, 51, 100, 1), caps);
    let b = Message::Open(open.clone())
        .encode(&CodecOptions::default())
        .unwrap_or_default();
    assert_eq!(b.get(28), Some(&255), "extended optional parameters marker");
    assert_eq!(
        Message::decode(b, &CodecOptions::default()).ok(),
        Some(Message::Open(open))
    );
}

#[test]
fn open_errors_name_the_rfc_subcode() {
    let mut good = Message::Open(Open::new(64512, 90, Ipv4Addr::new(198, 51, 100, 1), vec![]))
        .encode(&CodecOptions::default())
        .map(|b| b.to_vec())
        .unwrap_or_default();
    let check = |bytes: &[u8], want: (u8, u8)| {
        let e = Message::decode(Bytes::copy_from_slice(bytes), &CodecOptions::default()).err();
        assert_eq!(e.map(|e| (e.code, e.subcode)), Some(want), "{bytes:?}");
    };
    good[19] = 3; // version
    check(&good, (2, 1));
    good[19] = 4;
    good[22..24].copy_from_slice(&[0, 2]); // hold time 2
    check(&good, (2, 6));
    good[22..24].copy_from_slice(&[0, 90]);
    good[24..28].copy_from_slice(&[0, 0, 0, 0]); // BGP id 0
    check(&good, (2, 3));
}

#[test]
fn header_errors() {
    let ka = Message::Keepalive
        .encode(&CodecOptions::default())
        .map(|b| b.to_vec())
        .unwrap_or_default();
    let mut bad = ka.clone();
    bad[3] = 0;
    assert_eq!(frame_len(&bad, 4096).err().map(|e| e.subcode), Some(1));
    let mut bad = ka.clone();
    bad[18] = 9;
    assert_eq!(
        frame_len(&bad, 4096)
            .err()
            .map(|e| (e.subcode, e.data.to_vec())),
        Some((3, vec![9]))
    );
    let mut bad = ka.clone();
    bad[17] = 20;
    assert_eq!(frame_len(&bad, 4096).err().map(|e| e.subcode), Some(2));
    assert_eq!(frame_len(&ka[..10], 4096).ok(), Some(None));
    // An UPDATE longer than 4096 is only fine after RFC 8654 was negotiated.
    let big = [&[0xffu8; 16][..], &[0x20, 0x00, 2]].concat();
    assert!(frame_len(&big, MAX_MESSAGE_LEN).is_err());
    assert_eq!(
        frame_len(&big, MAX_EXTENDED_MESSAGE_LEN).ok(),
        Some(Some(8192))
    );
}

#[test]
fn end_of_rib_markers_for_both_families() {
    for fam in [Family::IPV4_UNICAST, Family::IPV6_UNICAST] {
        let b = Message::Update(Update::end_of_rib(fam))
            .encode(&CodecOptions::modern())
            .unwrap_or_default();
        let u = decode_update(b.clone()).unwrap_or_default();
        assert_eq!(u.end_of_rib_family(), Some(fam));
        if fam == Family::IPV4_UNICAST {
            assert_eq!(b.len(), 23);
        }
    }
    let u = decode_update(update_bytes(&[], &good_attrs(), &[24, 198, 18, 1])).unwrap_or_default();
    assert_eq!(u.end_of_rib_family(), None);
}

#[test]
fn rfc7606_treat_as_withdraw_cases() {
    // ORIGIN with an undefined value.
    let a = [&[0x40u8, 1, 1, 9][..], &AS_PATH_64512, &NEXT_HOP].concat();
    let u = decode_update(update_bytes(&[], &a, &[24, 198, 18, 1])).unwrap_or_default();
    assert!(u.treat_as_withdraw());
    assert_eq!(u.errors[0].subcode, update_subcode::INVALID_ORIGIN);
    assert_eq!(
        u.nlri,
        vec![net("198.18.1.0/24")],
        "prefixes still known so they can be withdrawn"
    );

    // Missing NEXT_HOP with IPv4 NLRI.
    let a = [&ORIGIN_IGP[..], &AS_PATH_64512].concat();
    let u = decode_update(update_bytes(&[], &a, &[24, 198, 18, 1])).unwrap_or_default();
    assert_eq!(
        u.errors
            .iter()
            .map(|e| (e.code, e.subcode))
            .collect::<Vec<_>>(),
        [(attr::NEXT_HOP, 3)]
    );
    assert!(u.treat_as_withdraw());

    // COMMUNITIES with a length that is not a multiple of 4; flags error on MED.
    for extra in [&[0xc0u8, 8, 3, 1, 2, 3][..], &[0x40, 4, 4, 0, 0, 0, 1]] {
        let a = [&good_attrs()[..], extra].concat();
        let u = decode_update(update_bytes(&[], &a, &[24, 198, 18, 1])).unwrap_or_default();
        assert!(u.treat_as_withdraw(), "{extra:?}");
    }

    // An attribute whose length overruns the attribute list.
    let a = [&good_attrs()[..], &[0x80, 4, 8, 0, 0]].concat();
    let u = decode_update(update_bytes(&[], &a, &[24, 198, 18, 1])).unwrap_or_default();
    assert!(u.treat_as_withdraw());
}

#[test]
fn rfc7606_attribute_discard_cases() {
    // ATOMIC_AGGREGATE with a length, AGGREGATOR of the wrong size, AS4_PATH malformed,
    // and a duplicate MED: all dropped, the UPDATE stays usable.
    let a = [
        &good_attrs()[..],
        &[0x40, 6, 1, 0],
        &[0xc0, 7, 3, 1, 2, 3],
        &[0xc0, 17, 2, 2, 0],
        &[0x80, 4, 4, 0, 0, 0, 1],
        &[0x80, 4, 4, 0, 0, 0, 2],
    ]
    .concat();
    let u = decode_update(update_bytes(&[], &a, &[24, 198, 18, 1])).unwrap_or_default();
    assert!(!u.treat_as_withdraw(), "{:?}", u.errors);
    assert_eq!(u.errors.len(), 4);
    assert!(u
        .errors
        .iter()
        .all(|e| e.action == ErrorAction::AttributeDiscard));
    assert_eq!(u.attributes.med, Some(1), "first copy wins");
    assert!(!u.attributes.atomic_aggregate);
    assert_eq!(u.attributes.aggregator, None);
}

#[test]
fn rfc7606_session_reset_cases() {
    let cases: Vec<(Bytes, u8)> = vec![
        // NLRI with a /33.
        (
            update_bytes(&[], &good_attrs(), &[33, 1, 2, 3, 4, 5]),
            update_subcode::INVALID_NETWORK_FIELD,
        ),
        // Withdrawn length overrunning the message.
        (
            Bytes::from([&[0xffu8; 16][..], &[0, 26, 2, 0, 10, 24, 1, 0, 0, 0]].concat()),
            update_subcode::MALFORMED_ATTRIBUTE_LIST,
        ),
        // An unrecognized well-known attribute.
        (
            update_bytes(&[], &[&good_attrs()[..], &[0x40, 99, 0]].concat(), &[]),
            update_subcode::UNRECOGNIZED_WELL_KNOWN,
        ),
        // MP_UNREACH_NLRI twice.
        (
            update_bytes(&[], &[0x80, 15, 3, 0, 2, 1, 0x80, 15, 3, 0, 2, 1], &[]),
            update_subcode::MALFORMED_ATTRIBUTE_LIST,
        ),
        // MP_REACH_NLRI whose NLRI cannot be parsed.
        (
            update_bytes(&[], &[0x80, 14, 10, 0, 1, 1, 4, 1, 2, 3, 4, 0, 40], &[]),
            update_subcode::OPTIONAL_ATTRIBUTE,
        ),
    ];
    for (b, sub) in cases {
        let e = decode_update(b.clone()).err();
        assert_eq!(
            e.as_ref().map(|e| (e.code, e.subcode)),
            Some((code::UPDATE_MESSAGE, sub)),
            "{b:?}"
        );
    }
    // The NOTIFICATION data of an unrecognized well-known attribute is the attribute.
    let e = decode_update(update_bytes(&[], &[0x40, 99, 1, 7], &[])).err();
    assert_eq!(e.map(|e| e.data.to_vec()), Some(vec![0x40, 99, 1, 7]));
}

#[test]
fn next_hops_that_are_not_host_addresses_are_treat_as_withdraw() {
    // NEXT_HOP 0.0.0.0, multicast and broadcast with IPv4 NLRI (RFC 4271 §6.3, RFC 7606
    // §7.3): the prefixes are withdrawn, the session stays.
    for nh in [
        [0u8, 0, 0, 0],
        [0, 1, 2, 3],
        [224, 0, 0, 5],
        [255, 255, 255, 255],
    ] {
        let a = [&ORIGIN_IGP[..], &AS_PATH_64512, &[0x40, 3, 4], &nh].concat();
        let u = decode_update(update_bytes(&[], &a, &[24, 198, 18, 1])).unwrap_or_default();
        assert!(u.treat_as_withdraw(), "{nh:?}");
        assert_eq!(u.errors[0].subcode, update_subcode::INVALID_NEXT_HOP);
    }
    // A usable next hop (loopback included: single-host labs peer over 127.0.0.0/8).
    for nh in [[203u8, 0, 113, 1], [127, 0, 0, 2]] {
        let a = [&ORIGIN_IGP[..], &AS_PATH_64512, &[0x40, 3, 4], &nh].concat();
        let u = decode_update(update_bytes(&[], &a, &[24, 198, 18, 1])).unwrap_or_default();
        assert!(u.errors.is_empty(), "{nh:?}: {:?}", u.errors);
    }
    // Without IPv4 NLRI a NEXT_HOP is ignored (RFC 4760 §3), even 0.0.0.0.
    let mp = [
        0x80u8, 14, 22, 0, 2, 1, 16, 0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0,
        32, 0x20, 1, 0x0d, 0xb8,
    ];
    let mp = {
        let mut v = mp.to_vec();
        v[2] = (v.len() - 3) as u8;
        v
    };
    let a = [
        &mp[..],
        &ORIGIN_IGP,
        &AS_PATH_64512,
        &[0x40, 3, 4, 0, 0, 0, 0],
    ]
    .concat();
    let u = decode_update(update_bytes(&[], &a, &[])).unwrap_or_default();
    assert!(u.errors.is_empty(), "{:?}", u.errors);
    assert_eq!(u.announced_count(), 1);
    // An MP_REACH_NLRI next hop of the right length that is multicast: treat-as-withdraw.
    let mut bad = mp.clone();
    bad[7] = 0xff;
    let a = [&bad[..], &ORIGIN_IGP, &AS_PATH_64512].concat();
    let u = decode_update(update_bytes(&[], &a, &[])).unwrap_or_default();
    assert!(u.treat_as_withdraw(), "{:?}", u.errors);
}

#[test]
fn an_mp_next_hop_length_that_does_not_fit_the_family_resets_the_session() {
    // RFC 7606 §7.11: 15 bytes of IPv6 next hop. The NLRI after it would parse (a /8),
    // but a receiver cannot know where the NLRI really starts: session reset.
    let mut v = vec![0x80u8, 14, 0, 0, 2, 1, 15];
    v.extend([0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    v.extend([0, 8, 0x20]);
    v[2] = (v.len() - 3) as u8;
    let a = [&v[..], &ORIGIN_IGP, &AS_PATH_64512].concat();
    let e = decode_update(update_bytes(&[], &a, &[])).err();
    assert_eq!(
        e.map(|e| (e.code, e.subcode)),
        Some((code::UPDATE_MESSAGE, update_subcode::OPTIONAL_ATTRIBUTE))
    );
    // A family tern does not parse (IPv4 VPN, 12-byte next hop) is not judged.
    let mut v = vec![0x80u8, 14, 0, 0, 1, 128, 12];
    v.extend([0u8; 12]);
    v.extend([0, 0]);
    v[2] = (v.len() - 3) as u8;
    let u = decode_update(update_bytes(&[], &v, &[])).unwrap_or_default();
    assert!(u.errors.is_empty(), "{:?}", u.errors);
}

#[test]
fn unknown_optional_transitive_attributes_are_kept() {
    let a = [&good_attrs()[..], &[0xc0, 99, 2, 0xab, 0xcd]].concat();
    let u = decode_update(update_bytes(&[], &a, &[24, 198, 18, 1])).unwrap_or_default();
    assert_eq!(u.attributes.unknown.len(), 1);
    let again = Message::Update(u.clone())
        .encode(&CodecOptions::modern())
        .unwrap_or_default();
    assert_eq!(decode_update(again).ok(), Some(u.clone()));
    assert_eq!(
        u.attributes.unknown[0].readvertised().map(|r| r.flags),
        Some(0xe0)
    );
}

#[test]
fn two_octet_sessions_carry_four_octet_paths_in_as4_path() {
    let opts = CodecOptions::default();
    let mut a = attrs();
    a.aggregator = Some(Aggregator {
        asn: 4_200_000_002,
        address: Ipv4Addr::new(198, 51, 100, 7),
    });
    let m = Message::Update(Update {
        attributes: a.clone(),
        nlri: vec![net("198.18.0.0/26")],
        ..Update::default()
    });
    let b = m.encode(&opts).unwrap_or_default();
    // The 2-octet AS_PATH carries AS_TRANS; the decoded, merged path is the true one.
    assert!(
        b.windows(2).any(|w| w == [0x5b, 0xa0]),
        "AS_TRANS on the wire"
    );
    assert_eq!(round_trip(&m, &opts), m);
}

#[test]
fn packing_fills_messages_and_loses_nothing() {
    let opts = CodecOptions::modern();
    let prefixes: Vec<Nlri> = (0..5000u32)
        .map(|i| {
            Nlri::new(ipnet::IpNet::V4(
                ipnet::Ipv4Net::new(Ipv4Addr::from(0xC612_0000 + i), 32).unwrap_or_default(),
            ))
        })
        .collect();
    let mut out = Vec::new();
    pack::announcements(
        &attrs(),
        Family::IPV4_UNICAST,
        &NextHop::Classic,
        &prefixes,
        &opts,
        &mut out,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // 5 bytes per /32: about 800 per 4096-byte message.
    assert_eq!(out.len(), 7);
    let mut back = Vec::new();
    for m in &out {
        assert!(m.len() <= 4096);
        let u = decode_update(m.clone()).unwrap_or_default();
        assert_eq!(u.attributes, attrs());
        back.extend(u.nlri);
    }
    assert_eq!(back, prefixes);
    assert!(
        out[..6].iter().all(|m| m.len() > 4090),
        "all but the last are full"
    );

    // IPv6 through MP_REACH, and withdrawals, in extended messages.
    let v6: Vec<Nlri> = (0..3000u32)
        .map(|i| net(&format!("2001:db8:{:x}::/64", i)))
        .collect();
    let ext = CodecOptions {
        extended_message: true,
        ..opts
    };
    let nh = NextHop::Mp(MpNextHop::V6 {
        global: "2001:db8::1"
            .parse()
            .unwrap_or(std::net::Ipv6Addr::UNSPECIFIED),
        link_local: None,
    });
    let mut out = Vec::new();
    pack::announcements(&attrs(), Family::IPV6_UNICAST, &nh, &v6, &ext, &mut out)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.len(), 1, "3000 /64s fit one 64 KiB message");
    let u = Message::decode(out[0].clone(), &ext).ok();
    let Some(Message::Update(u)) = u else {
        panic!("decode")
    };
    assert_eq!(u.mp_reach.map(|m| m.nlri), Some(v6.clone()));
    for (fam, list) in [
        (Family::IPV4_UNICAST, &prefixes),
        (Family::IPV6_UNICAST, &v6),
    ] {
        let mut out = Vec::new();
        pack::withdrawals(fam, list, &opts, &mut out).unwrap_or_else(|e| panic!("{e}"));
        let n: usize = out
            .iter()
            .map(|m| {
                decode_update(m.clone())
                    .map(|u| u.withdrawn_count())
                    .unwrap_or(0)
            })
            .sum();
        assert_eq!(n, list.len());
        assert!(out.iter().all(|m| m.len() <= 4096));
    }
}

#[test]
fn packing_refuses_attributes_that_cannot_fit() {
    let mut a = attrs();
    a.communities = vec![Community(1); 1100];
    let mut out = Vec::new();
    let r = pack::announcements(
        &a,
        Family::IPV4_UNICAST,
        &NextHop::Classic,
        &[net("198.18.0.0/24")],
        &CodecOptions::modern(),
        &mut out,
    );
    assert!(matches!(r, Err(EncodeError::TooLong { .. })), "{r:?}");
}
