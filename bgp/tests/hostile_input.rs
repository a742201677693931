//! Hostile input against a real tern speaker on loopback (127.0.0.0/8, distinct ports:
//! no namespace, no kernel route). A raw TCP peer writes hand-built bytes (valid OPEN
//! and KEEPALIVE from `tern_bgp::wire`, everything else byte by byte) and each case
//! checks what the RFCs ask for:
//!
//! - RFC 7606 treat-as-withdraw: a route the same peer announced before leaves the
//!   speaker's RIB, and the session stays up (a valid UPDATE afterwards still works);
//! - attribute discard: the route is used without the bad attribute;
//! - session reset: the raw peer reads the NOTIFICATION and checks code and subcode;
//! - header and OPEN errors (RFC 4271 §6.1, §6.2, RFC 6286, RFC 6608), an unknown
//!   capability (ignored, RFC 5492), UPDATE before OPEN;
//! - connection floods, a slow-loris, and a peer that stops reading (RFC 9687 send hold
//!   timer, bounded write buffer).
//!
//! Every wait polls with a deadline, so a case fails (rather than hangs) when tern does
//! not do what the RFC says.
#![cfg(target_os = "linux")]

mod common;
use common::*;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use ipnet::IpNet;
use tern_bgp::fsm::{DownReason, SessionConfig, OPEN_HOLD_TIME};
use tern_bgp::rib::Best;
use tern_bgp::session::{self, Command, DriverConfig, SessionEvent};
use tern_bgp::speaker::{PeerConfig, SpeakerCommand};
use tern_bgp::wire::{Capability, Community, Family, Message, Origin};
use tokio::io::AsyncReadExt;
use tokio::net::TcpSocket;
use tokio::sync::mpsc;

// ---------------------------------------------------------------------------------
// RFC 7606 cases.

/// What RFC 7606 asks for a case.
enum Expect {
    /// The announced prefix is withdrawn; the session stays up.
    TreatAsWithdraw,
    /// The route is used; the check says what it must look like.
    Discard(fn(&Best) -> Result<(), String>),
    /// NOTIFICATION with this code and subcode, then close.
    Reset(u8, u8),
}

struct Case {
    name: &'static str,
    rfc: &'static str,
    /// The malformed UPDATE for prefix number `c` (198.18.c.0/24 or 2001:db8:c::/48).
    msg: fn(u8) -> Vec<u8>,
    expect: Expect,
    /// The case is about an IPv6 route (MP_REACH_NLRI).
    v6: bool,
}

fn cases() -> Vec<Case> {
    use Expect::*;
    vec![
        Case {
            name: "attribute length overruns the attribute list",
            rfc: "RFC 7606 §4",
            msg: |c| update(&[], &[good_attrs(), vec![OPT, 4, 8, 0, 0]].concat(), &v4(c)),
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "ORIGIN of length 2 (attribute length error)",
            rfc: "RFC 7606 §7.1",
            msg: |c| {
                let a = [attr(WK, 1, &[0, 0]), as_path(&[65001]), next_hop(NH)].concat();
                update(&[], &a, &v4(c))
            },
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "ORIGIN missing",
            rfc: "RFC 7606 §3(d)",
            msg: |c| update(&[], &[as_path(&[65001]), next_hop(NH)].concat(), &v4(c)),
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "AS_PATH missing",
            rfc: "RFC 7606 §3(d)",
            msg: |c| update(&[], &[origin(0), next_hop(NH)].concat(), &v4(c)),
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "NEXT_HOP missing with IPv4 NLRI",
            rfc: "RFC 7606 §3(d)",
            msg: |c| update(&[], &[origin(0), as_path(&[65001])].concat(), &v4(c)),
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "ORIGIN value 7",
            rfc: "RFC 7606 §7.1",
            msg: |c| {
                let a = [origin(7), as_path(&[65001]), next_hop(NH)].concat();
                update(&[], &a, &v4(c))
            },
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "NEXT_HOP is tern's own address",
            rfc: "RFC 4271 §6.3 (semantically incorrect: the receiving speaker itself)",
            msg: |c| {
                let a = [origin(0), as_path(&[65001]), next_hop(TERN_ID.octets())].concat();
                update(&[], &a, &v4(c))
            },
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "NEXT_HOP 0.0.0.0",
            rfc: "RFC 4271 §6.3 (not a host address), RFC 7606 §7.3",
            msg: |c| {
                let a = [origin(0), as_path(&[65001]), next_hop([0, 0, 0, 0])].concat();
                update(&[], &a, &v4(c))
            },
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "NEXT_HOP 224.0.0.5 (multicast martian)",
            rfc: "RFC 4271 §6.3, RFC 7606 §7.3",
            msg: |c| {
                let a = [origin(0), as_path(&[65001]), next_hop([224, 0, 0, 5])].concat();
                update(&[], &a, &v4(c))
            },
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "NEXT_HOP 255.255.255.255 (broadcast martian)",
            rfc: "RFC 4271 §6.3, RFC 7606 §7.3",
            msg: |c| {
                let a = [origin(0), as_path(&[65001]), next_hop([255; 4])].concat();
                update(&[], &a, &v4(c))
            },
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "NEXT_HOP of 5 bytes",
            rfc: "RFC 7606 §7.3",
            msg: |c| {
                let a = [
                    origin(0),
                    as_path(&[65001]),
                    attr(WK, 3, &[198, 51, 100, 200, 0]),
                ];
                update(&[], &a.concat(), &v4(c))
            },
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "AS_PATH segment type 7",
            rfc: "RFC 7606 §7.2",
            msg: |c| {
                let p = attr(WK, 2, &[7, 1, 0, 0, 0xfd, 0xe9]);
                update(&[], &[origin(0), p, next_hop(NH)].concat(), &v4(c))
            },
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "AS_PATH segment length overruns the attribute",
            rfc: "RFC 7606 §7.2",
            msg: |c| {
                let p = attr(WK, 2, &[2, 3, 0, 0, 0xfd, 0xe9]);
                update(&[], &[origin(0), p, next_hop(NH)].concat(), &v4(c))
            },
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "AS_PATH segment of length 0",
            rfc: "RFC 7606 §7.2",
            msg: |c| {
                let p = attr(WK, 2, &[2, 0]);
                update(&[], &[origin(0), p, next_hop(NH)].concat(), &v4(c))
            },
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "AS_PATH with a lone trailing byte",
            rfc: "RFC 7606 §7.2 (underrun)",
            msg: |c| {
                let p = attr(WK, 2, &[2, 1, 0, 0, 0xfd, 0xe9, 2]);
                update(&[], &[origin(0), p, next_hop(NH)].concat(), &v4(c))
            },
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "ORIGIN flagged optional (wrong attribute flags)",
            rfc: "RFC 7606 §3(c)",
            msg: |c| {
                let a = [attr(OT, 1, &[0]), as_path(&[65001]), next_hop(NH)].concat();
                update(&[], &a, &v4(c))
            },
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "MULTI_EXIT_DISC flagged well-known (wrong attribute flags)",
            rfc: "RFC 7606 §3(c), §7.4",
            msg: |c| {
                update(
                    &[],
                    &[good_attrs(), attr(WK, 4, &[0, 0, 0, 1])].concat(),
                    &v4(c),
                )
            },
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "two trailing bytes after the last attribute",
            rfc: "RFC 7606 §4 (fewer than 3 octets left for an attribute)",
            msg: |c| update(&[], &[good_attrs(), vec![WK, 1]].concat(), &v4(c)),
            expect: TreatAsWithdraw,
            v6: false,
        },
        Case {
            name: "MP_REACH_NLRI next hop ff01::1 (multicast)",
            rfc: "RFC 4760 / RFC 7606 §7.11 (next hop of the right length, unusable)",
            msg: |c| {
                let mut nh = NH6;
                nh[0] = 0xff;
                nh[1] = 0x01;
                let a = [mp_reach_v6(&nh, &v6(c)), origin(0), as_path(&[65001])].concat();
                update(&[], &a, &[])
            },
            expect: TreatAsWithdraw,
            v6: true,
        },
        Case {
            name: "COMMUNITIES twice",
            rfc: "RFC 7606 §3(g): later copies discarded",
            msg: |c| {
                let a = [
                    good_attrs(),
                    med77(),
                    communities(&[0xfde9_0001]),
                    communities(&[0xfde9_0002]),
                ];
                update(&[], &a.concat(), &v4(c))
            },
            expect: Discard(|b| {
                let got = &b.best.attrs.communities;
                (got == &[Community(0xfde9_0001)])
                    .then_some(())
                    .ok_or(format!("communities {got:?}, want only the first copy"))
            }),
            v6: false,
        },
        Case {
            name: "ORIGIN twice",
            rfc: "RFC 7606 §3(g): the first one counts",
            msg: |c| {
                let a = [origin(2), good_attrs(), med77()].concat();
                update(&[], &a, &v4(c))
            },
            expect: Discard(|b| match b.best.attrs.origin {
                Some(Origin::Incomplete) => Ok(()),
                o => Err(format!("origin {o:?}, want the first copy (incomplete)")),
            }),
            v6: false,
        },
        Case {
            name: "AGGREGATOR of 3 bytes",
            rfc: "RFC 7606 §7.7: attribute discard",
            msg: |c| {
                let a = [good_attrs(), med77(), attr(OT, 7, &[1, 2, 3])].concat();
                update(&[], &a, &v4(c))
            },
            expect: Discard(|b| match b.best.attrs.aggregator {
                None => Ok(()),
                a => Err(format!("aggregator {a:?} kept")),
            }),
            v6: false,
        },
        Case {
            name: "ATOMIC_AGGREGATE with a value",
            rfc: "RFC 7606 §7.6: attribute discard",
            msg: |c| {
                update(
                    &[],
                    &[good_attrs(), med77(), attr(WK, 6, &[1])].concat(),
                    &v4(c),
                )
            },
            expect: Discard(|b| {
                (!b.best.attrs.atomic_aggregate)
                    .then_some(())
                    .ok_or("ATOMIC_AGGREGATE kept".to_string())
            }),
            v6: false,
        },
        Case {
            name: "MP_REACH_NLRI next hop of 15 bytes",
            rfc: "RFC 7606 §7.11: NLRI cannot be located, session reset",
            msg: |c| {
                let a = [
                    mp_reach_v6(&NH6[..15], &v6(c)),
                    origin(0),
                    as_path(&[65001]),
                ];
                update(&[], &a.concat(), &[])
            },
            expect: Reset(3, 9),
            v6: true,
        },
        Case {
            name: "MP_REACH_NLRI with truncated NLRI",
            rfc: "RFC 7606 §5.3 / §7.11: NLRI cannot be parsed, session reset",
            msg: |c| {
                let nlri = &v6(c)[..4];
                let a = [mp_reach_v6(&NH6, nlri), origin(0), as_path(&[65001])].concat();
                update(&[], &a, &[])
            },
            expect: Reset(3, 9),
            v6: true,
        },
        Case {
            name: "MP_REACH_NLRI twice",
            rfc: "RFC 7606 §3(g): session reset",
            msg: |c| {
                let m = mp_reach_v6(&NH6, &v6(c));
                update(
                    &[],
                    &[m.clone(), m, origin(0), as_path(&[65001])].concat(),
                    &[],
                )
            },
            expect: Reset(3, 1),
            v6: true,
        },
        Case {
            name: "MP_REACH_NLRI flagged well-known (wrong flags)",
            rfc: "RFC 7606 §3(c); MP_REACH_NLRI errors are a session reset (§7.11)",
            msg: |c| {
                let mut m = mp_reach_v6(&NH6, &v6(c));
                m[0] = WK;
                update(&[], &[m, origin(0), as_path(&[65001])].concat(), &[])
            },
            expect: Reset(3, 4),
            v6: true,
        },
        Case {
            name: "trailing garbage after the NLRI",
            rfc: "RFC 7606 §5.3: NLRI field malformed, session reset",
            msg: |c| update(&[], &good_attrs(), &[v4(c), vec![0xff]].concat()),
            expect: Reset(3, 10),
            v6: false,
        },
        Case {
            name: "NLRI /33",
            rfc: "RFC 4271 §6.3, RFC 7606 §5.3",
            msg: |_| update(&[], &good_attrs(), &[33, 198, 18, 1, 1, 0]),
            expect: Reset(3, 10),
            v6: false,
        },
        Case {
            name: "withdrawn route /40",
            rfc: "RFC 4271 §6.3, RFC 7606 §5.3",
            msg: |_| update(&[40, 198, 18, 1, 1, 0], &[], &[]),
            expect: Reset(3, 10),
            v6: false,
        },
        Case {
            name: "unrecognized well-known attribute",
            rfc: "RFC 4271 §6.3 (not revised by RFC 7606)",
            msg: |c| update(&[], &[good_attrs(), attr(WK, 99, &[1])].concat(), &v4(c)),
            expect: Reset(3, 2),
            v6: false,
        },
        Case {
            name: "withdrawn routes length overruns the message",
            rfc: "RFC 7606 §5.3 / RFC 4271 §6.3: Malformed Attribute List",
            msg: |_| header(2, &[0, 40, 24, 198, 18, 1]),
            expect: Reset(3, 1),
            v6: false,
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc7606_malformed_updates() {
    if !loopback_usable("rfc7606_malformed_updates") {
        return;
    }
    let cases = cases();
    // One passive peer per case (127.0.0.10 on), so a reset in one case cannot slow
    // another down with the idle-hold back-off.
    let peers = (0..cases.len())
        .map(|i| peer_config(10 + i as u8, OPEN_HOLD_TIME))
        .collect();
    let tern = Tern::start(17941, peers).await;
    for (i, case) in cases.iter().enumerate() {
        let n = 10 + i as u8;
        let c = 100 + i as u8;
        let name = format!("{} ({})", case.name, case.rfc);
        let mut p = Raw::establish(lo(n), tern.at, &good_open(n), &name).await;
        // A valid announcement first: treat-as-withdraw must take it away.
        let (prefix, valid) = if case.v6 {
            let a = [mp_reach_v6(&NH6, &v6(c)), origin(0), as_path(&[65001])].concat();
            (v6s(c), update(&[], &a, &[]))
        } else {
            (v4s(c), update(&[], &good_attrs(), &v4(c)))
        };
        p.send(&valid).await;
        tern.present(&prefix, &name).await;
        p.send(&(case.msg)(c)).await;
        match &case.expect {
            Expect::TreatAsWithdraw => {
                tern.absent(
                    &prefix,
                    &name,
                    "the malformed UPDATE was not treated as withdraw",
                )
                .await;
                // The session is still up: another valid UPDATE goes through.
                p.send(&update(&[], &good_attrs(), &v4(c + 100))).await;
                tern.present(&v4s(c + 100), &format!("{name}: session kept"))
                    .await;
                assert!(
                    !tern.logged(&format!("down {}", lo(n))),
                    "{name}: the session went down: {:?}",
                    tern.log()
                );
            }
            Expect::Discard(check) => {
                // Wait for the malformed UPDATE's route (MED 77) to replace the first.
                let end = Instant::now() + Duration::from_secs(3);
                let b = loop {
                    let b = tern.present(&prefix, &name).await;
                    if b.best.attrs.med == Some(77) {
                        break b;
                    }
                    if Instant::now() > end {
                        panic!(
                            "{name}: the UPDATE was not used (attribute discard expected): {:?}; log: {:?}",
                            b.best.attrs,
                            tern.log()
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                };
                if let Err(e) = check(&b) {
                    panic!("{name}: {e}");
                }
                p.send(&update(&[], &good_attrs(), &v4(c + 100))).await;
                tern.present(&v4s(c + 100), &format!("{name}: session kept"))
                    .await;
            }
            Expect::Reset(code, subcode) => {
                let n = p.notification(&name).await;
                assert_eq!(
                    (n.code, n.subcode),
                    (*code, *subcode),
                    "{name}: NOTIFICATION {n}"
                );
                p.closed(&name).await;
                tern.absent(&prefix, &name, "the peer's routes outlived its session")
                    .await;
            }
        }
        eprintln!("ok: {name}");
    }
    tern.stop().await;
}

// ---------------------------------------------------------------------------------
// Header and OPEN errors.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_update_is_logged_once_with_its_bytes() {
    let case = "malformed UPDATE log";
    if !loopback_usable(case) {
        return;
    }
    let tern = Tern::start(17947, vec![peer_config(10, OPEN_HOLD_TIME)]).await;
    let mut p = Raw::establish(lo(10), tern.at, &good_open(10), case).await;
    let bad_origin = [attr(WK, 1, &[0, 0]), as_path(&[65001]), next_hop(NH)].concat();
    for c in [1, 2, 3] {
        p.send(&update(&[], &good_attrs(), &v4(c))).await;
        tern.present(&v4s(c), case).await;
        p.send(&update(&[], &bad_origin, &v4(c))).await;
        tern.absent(&v4s(c), case, "treat-as-withdraw").await;
    }
    let lines: Vec<String> = tern
        .log()
        .into_iter()
        .filter(|l| l.starts_with("rejected 127.0.0.10: malformed UPDATE"))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "logged once per kind per session: {lines:?}"
    );
    assert_eq!(
        lines[0],
        "rejected 127.0.0.10: malformed UPDATE (1 prefix): ORIGIN length 2 is not 1 (RFC 7606 treat-as-withdraw); bytes: 40 01 02 00 00; further ones like it this session are not logged"
    );
    tern.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_and_open_errors() {
    if !loopback_usable("header_and_open_errors") {
        return;
    }
    let peers = (10..40).map(|n| peer_config(n, OPEN_HOLD_TIME)).collect();
    let tern = Tern::start(17942, peers).await;

    // An UPDATE longer than 4096 bytes without the extended message capability (tern
    // does not offer it): Message Header Error / Bad Message Length, data the length.
    {
        let case = "UPDATE of 4097 bytes (RFC 4271 §6.1, RFC 8654)";
        let mut p = Raw::establish(lo(10), tern.at, &good_open(10), case).await;
        p.send(&update(&[], &good_attrs(), &v4(10))).await;
        tern.present(&v4s(10), case).await;
        let nlri: Vec<u8> = (0..)
            .map(|i: u32| {
                let [_, _, b, c] = i.to_be_bytes();
                [32, 198, 18, b, c]
            })
            .take(812)
            .flatten()
            .collect();
        let mut big = update(&[], &good_attrs(), &nlri);
        big.truncate(4097);
        big[16..18].copy_from_slice(&4097u16.to_be_bytes());
        assert_eq!(big.len(), 4097);
        p.send(&big).await;
        let n = p.notification(case).await;
        assert_eq!((n.code, n.subcode), (1, 2), "{case}: {n}");
        assert_eq!(&n.data[..], &[0x10, 0x01], "{case}: data is the bad length");
        p.closed(case).await;
        tern.absent(&v4s(10), case, "routes outlived the session")
            .await;
    }

    // A marker that is not all ones, and an unknown message type.
    for (n, case, bytes, want) in [
        (
            11u8,
            "marker not all ones (RFC 4271 §6.1)",
            {
                let mut k = keepalive();
                k[5] = 0;
                k
            },
            (1u8, 1u8),
        ),
        (12, "message type 9 (RFC 4271 §6.1)", header(9, &[]), (1, 3)),
    ] {
        let mut p = Raw::establish(lo(n), tern.at, &good_open(n), case).await;
        p.send(&bytes).await;
        let got = p.notification(case).await;
        assert_eq!((got.code, got.subcode), want, "{case}: {got}");
        p.closed(case).await;
    }

    // OPEN errors: each from its own peer, none may reach Established.
    let bad_version = {
        let mut o = good_open(13);
        o[19] = 3;
        o
    };
    let opt_param_1 = {
        // One optional parameter of type 1 (deprecated authentication), 1 byte long.
        let mut o = open_msg(AS, 30, peer_id(14), Vec::new());
        o.truncate(28);
        o.extend([3, 1, 1, 0]);
        let len = o.len() as u16;
        o[16..18].copy_from_slice(&len.to_be_bytes());
        o
    };
    // (peer, case, bytes, NOTIFICATION code and subcode, NOTIFICATION data)
    type OpenCase = (u8, &'static str, Vec<u8>, (u8, u8), Option<Vec<u8>>);
    let open_cases: Vec<OpenCase> = vec![
        (
            13,
            "OPEN version 3 (RFC 4271 §6.2: data is the version we support)",
            bad_version,
            (2, 1),
            Some(vec![0, 4]),
        ),
        (
            15,
            "OPEN from AS 64999, configured 64512 (Bad Peer AS)",
            open_msg(64999, 30, peer_id(15), Vec::new()),
            (2, 2),
            None,
        ),
        (
            16,
            "OPEN hold time 1 (Unacceptable Hold Time)",
            open_msg(AS, 1, peer_id(16), Vec::new()),
            (2, 6),
            None,
        ),
        (
            17,
            "OPEN hold time 2 (Unacceptable Hold Time)",
            open_msg(AS, 2, peer_id(17), Vec::new()),
            (2, 6),
            None,
        ),
        (
            18,
            "OPEN BGP identifier 0.0.0.0 (RFC 6286 §2.2: Bad BGP Identifier)",
            open_msg(AS, 30, Ipv4Addr::UNSPECIFIED, Vec::new()),
            (2, 3),
            None,
        ),
        (
            19,
            "OPEN BGP identifier equal to ours from an iBGP peer (RFC 6286 §2.2)",
            open_msg(AS, 30, TERN_ID, Vec::new()),
            (2, 3),
            None,
        ),
        (
            14,
            "OPEN optional parameter type 1 (Unsupported Optional Parameter)",
            opt_param_1,
            (2, 4),
            None,
        ),
        (
            20,
            "UPDATE before OPEN (RFC 6608: FSM error, unexpected message in OpenSent)",
            update(&[], &good_attrs(), &v4(20)),
            (5, 1),
            None,
        ),
        (
            21,
            "KEEPALIVE before OPEN (RFC 6608)",
            keepalive(),
            (5, 1),
            None,
        ),
        (
            22,
            "OPEN shorter than 29 bytes (Bad Message Length)",
            header(1, &[4, 0xfc, 0]),
            (1, 2),
            None,
        ),
    ];
    for (n, case, bytes, want, data) in open_cases {
        let mut p = Raw::connect(lo(n), tern.at)
            .await
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        p.send(&bytes).await;
        let got = p.notification(case).await;
        assert_eq!((got.code, got.subcode), want, "{case}: {got}");
        if let Some(d) = data {
            assert_eq!(&got.data[..], &d[..], "{case}: NOTIFICATION data");
        }
        p.closed(case).await;
        assert!(
            !tern.logged(&format!("up {}", lo(n))),
            "{case}: the session came up: {:?}",
            tern.log()
        );
    }

    // Unknown capabilities are ignored (RFC 5492 §5): the session comes up and works.
    {
        let case = "OPEN with unknown capabilities 0xf0 and 0x80";
        let extra = vec![
            Capability::Unknown {
                code: 0xf0,
                data: Bytes::from_static(b"hostile"),
            },
            Capability::Unknown {
                code: 0x80,
                data: Bytes::new(),
            },
        ];
        let open = open_msg(AS, 30, peer_id(23), extra);
        let mut p = Raw::establish(lo(23), tern.at, &open, case).await;
        p.send(&update(&[], &good_attrs(), &v4(23))).await;
        tern.present(&v4s(23), case).await;
        assert!(tern.logged(&format!("up {}", lo(23))), "{case}");
    }
    tern.stop().await;
}

// ---------------------------------------------------------------------------------
// Connection floods and slow-loris.

/// Opens `count` connections from `from`, `batch` at a time, each waiting until tern
/// closes it; returns how many tern closed within `each` (the rest it kept open).
async fn flood_closed_by_tern(
    from: Ipv4Addr,
    to: SocketAddr,
    count: usize,
    each: Duration,
) -> usize {
    let mut closed = 0;
    let batch = 50;
    for start in (0..count).step_by(batch) {
        let mut tasks = Vec::new();
        for _ in start..(start + batch).min(count) {
            tasks.push(tokio::spawn(async move {
                let Ok(mut r) = Raw::connect(from, to).await else {
                    // Refused at connect time is closed too (a full backlog).
                    return true;
                };
                loop {
                    match r.next(each).await {
                        Got::Closed => return true,
                        Got::Timeout => return false,
                        _ => continue,
                    }
                }
            }));
        }
        for t in tasks {
            if t.await.unwrap_or(false) {
                closed += 1;
            }
        }
    }
    closed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_floods_are_bounded_and_the_peer_still_comes_up() {
    if !loopback_usable("connection_floods") {
        return;
    }
    let tern = Tern::start(17943, vec![peer_config(20, Duration::from_secs(20))]).await;

    // 1000 connections from an address that is not a peer: each closed at once.
    let t = Instant::now();
    let closed = flood_closed_by_tern(lo(250), tern.at, 1000, Duration::from_secs(2)).await;
    let took = t.elapsed();
    assert_eq!(closed, 1000, "connections from a non-peer left open");
    // Generous under load: the point is that each is closed, not how fast.
    assert!(
        took < Duration::from_secs(30),
        "1000 refusals took {took:?}"
    );
    assert!(
        tern.logged(&format!("refused {}", lo(250))),
        "{:?}",
        tern.log()
    );
    eprintln!("1000 connections from a non-peer refused in {took:?}");

    // 200 connections from the configured peer's address that never say anything, all
    // kept open by the flooder.
    let t = Instant::now();
    let mut idle = Vec::new();
    for _ in 0..200 {
        match Raw::connect(lo(20), tern.at).await {
            Ok(r) => idle.push(r),
            Err(e) => panic!("connect {} #{}: {e}", lo(20), idle.len()),
        }
    }
    // The real peer (same address) must come up now, long before the 20 s the silent
    // connections would need to time out in OpenSent.
    let case = "peer after 200 silent connections from its address";
    let mut p = Raw::establish(lo(20), tern.at, &good_open(20), case).await;
    p.send(&update(&[], &good_attrs(), &v4(20))).await;
    tern.present(&v4s(20), case).await;
    let up_after = t.elapsed();
    // The silent connections would hold the peer out for their 20 s open hold time:
    // coming up well before that is the property (the figure is printed below).
    assert!(
        up_after < Duration::from_secs(15),
        "{case}: up after {up_after:?}"
    );
    // tern keeps at most the session's connection: every silent one is closed.
    let mut open = 0;
    for r in idle.iter_mut() {
        loop {
            match r.next(Duration::from_secs(2)).await {
                Got::Closed => break,
                Got::Timeout => {
                    open += 1;
                    break;
                }
                _ => continue,
            }
        }
    }
    assert_eq!(open, 0, "{open} of 200 silent connections still open");
    eprintln!("200 silent connections closed, real session up after {up_after:?}");
    tern.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_loris_is_closed_by_the_open_hold_timer_and_does_not_block_the_peer() {
    if !loopback_usable("slow_loris") {
        return;
    }
    let tern = Tern::start(
        17944,
        vec![
            peer_config(30, Duration::from_secs(1)),
            peer_config(31, Duration::from_secs(20)),
        ],
    )
    .await;

    // Alone: one byte, then nothing. tern's OPEN, then Hold Timer Expired after ~1 s.
    let case = "slow-loris alone";
    let t = Instant::now();
    let mut loris = Raw::connect(lo(30), tern.at)
        .await
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    loris.send(&[0xff]).await;
    let n = loris.notification(case).await;
    let took = t.elapsed();
    assert_eq!((n.code, n.subcode), (4, 0), "{case}: {n}");
    // Never before the 1 s open hold time; after it, as soon as a loaded machine lets
    // the timer run (the other peer's 20 s timer is the next thing that could fire).
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(15),
        "{case}: closed after {took:?}, the open hold time is 1 s"
    );
    eprintln!("{case}: closed {took:?} after connecting (open hold time 1 s)");
    loris.closed(case).await;

    // With the real peer behind it (open hold time 20 s): the peer comes up at once.
    let case = "peer behind a slow-loris from its address";
    let mut loris = Raw::connect(lo(31), tern.at)
        .await
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    loris.send(&[0xff]).await;
    // Let tern adopt the loris connection first (it answers with its OPEN).
    match loris.next(Duration::from_secs(2)).await {
        Got::Msg(Message::Open(_)) => {}
        _ => panic!("{case}: tern did not take the first connection"),
    }
    let t = Instant::now();
    let mut p = Raw::establish(lo(31), tern.at, &good_open(31), case).await;
    p.send(&update(&[], &good_attrs(), &v4(31))).await;
    tern.present(&v4s(31), case).await;
    let took = t.elapsed();
    // Well before the loris's 20 s open hold time would free the address.
    assert!(took < Duration::from_secs(15), "{case}: up after {took:?}");
    eprintln!("{case}: up after {took:?}");
    loris.closed(case).await;

    // From an address that is not a peer: closed at once, no timer needed.
    let case = "slow-loris from a non-peer";
    let t = Instant::now();
    let mut loris = Raw::connect(lo(251), tern.at)
        .await
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    loris.send(&[0xff]).await;
    loris.closed(case).await;
    // No timer is involved (the open hold time would be 240 s): closed on accept.
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "{case}: {:?}",
        t.elapsed()
    );
    eprintln!("{case}: closed after {:?}", t.elapsed());
    tern.stop().await;
}

// ---------------------------------------------------------------------------------
// A peer that stops reading.

fn sysctl_max(path: &str) -> usize {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.split_whitespace().last().and_then(|v| v.parse().ok()))
        .unwrap_or(4 << 20)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_stops_reading_is_dropped_by_the_send_hold_timer_with_bounded_memory() {
    if !loopback_usable("send_hold") {
        return;
    }
    let case = "peer that stops reading";
    // The raw peer listens with a small receive buffer; the session connects to it.
    let raw_at = SocketAddr::new(IpAddr::V4(lo(40)), 17945);
    let sock = TcpSocket::new_v4().unwrap_or_else(|e| panic!("{e}"));
    sock.set_recv_buffer_size(4096)
        .unwrap_or_else(|e| panic!("{e}"));
    sock.set_reuseaddr(true).unwrap_or_else(|e| panic!("{e}"));
    sock.bind(raw_at)
        .unwrap_or_else(|e| panic!("bind {raw_at}: {e}"));
    let listener = sock.listen(4).unwrap_or_else(|e| panic!("{e}"));

    let high_water = 64 << 10;
    let send_hold = Duration::from_secs(1);
    let cfg = DriverConfig {
        fsm: SessionConfig {
            local_as: AS,
            peer_as: AS,
            router_id: TERN_ID,
            hold_time: 30,
            keepalive: None,
            connect_retry: Duration::from_secs(1),
            passive: false,
            delay_open: None,
            idle_hold: Duration::from_secs(1),
            idle_hold_max: Duration::from_secs(4),
            capabilities: vec![Capability::Multiprotocol(Family::IPV4_UNICAST)],
            open_hold_time: Duration::from_secs(5),
            send_hold_time: Some(send_hold),
        },
        peer: raw_at,
        local_addr: Some(IpAddr::V4(lo(1))),
        password: None,
        ttl_security: None,
        write_high_water: high_water,
    };
    let (etx, mut events) = mpsc::channel(64);
    let h = session::spawn(cfg, etx);
    let _ = h.send(Command::Start).await;
    let (s, _) = tokio::time::timeout(Duration::from_secs(3), listener.accept())
        .await
        .unwrap_or_else(|_| panic!("{case}: the session never connected"))
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    let mut p = Raw {
        s,
        buf: BytesMut::new(),
        from: lo(40),
    };
    p.send(&open_msg(AS, 30, peer_id(40), Vec::new())).await;
    p.expect_open_keepalive(case).await;
    p.send(&keepalive()).await;
    let end = Instant::now() + Duration::from_secs(3);
    loop {
        match tokio::time::timeout_at(end.into(), events.recv()).await {
            Ok(Some(SessionEvent::Up { .. })) => break,
            Ok(Some(_)) => continue,
            _ => panic!("{case}: never Established"),
        }
    }

    // Now the peer reads nothing. Offer 1000 commands of 16 UPDATEs of ~4 KB (64 MB).
    let nlri: Vec<u8> = (0..780u32)
        .flat_map(|i| {
            let [_, _, b, c] = i.to_be_bytes();
            [32, 198, 19, b, c]
        })
        .collect();
    let one = Bytes::from(update(&[], &good_attrs(), &nlri));
    let per_cmd = one.len() * 16;
    let mut accepted = 0usize;
    for _ in 0..1000 {
        let cmd = Command::SendUpdates(vec![one.clone(); 16]);
        match tokio::time::timeout(Duration::from_millis(300), h.send(cmd)).await {
            Ok(Ok(())) => accepted += 1,
            _ => break,
        }
    }
    // What can be in flight: the command channel (64), what the task holds up to the
    // high-water mark plus one command, and the two kernel socket buffers.
    let sndbuf = sysctl_max("/proc/sys/net/ipv4/tcp_wmem");
    let bound = 64 + 2 + (high_water + sndbuf + 2 * 4096).div_ceil(per_cmd);
    eprintln!(
        "{case}: took {accepted} commands of {per_cmd} bytes before pushing back (bound {bound})"
    );
    assert!(
        accepted <= bound,
        "{case}: the session took {accepted} commands ({} MB) without pushing back",
        (accepted * per_cmd) >> 20
    );

    // The send hold timer ends the session.
    let t = Instant::now();
    let reason = loop {
        match tokio::time::timeout(Duration::from_secs(5), events.recv()).await {
            Ok(Some(SessionEvent::Down { reason, .. })) => break reason,
            Ok(Some(_)) => continue,
            _ => panic!("{case}: still up 5 s after it stopped reading"),
        }
    };
    assert_eq!(reason, DownReason::SendHoldTimerExpired, "{case}");
    eprintln!(
        "{case}: dropped by the send hold timer {:?} after the flood",
        t.elapsed()
    );
    // And the connection is closed: draining it ends in EOF or reset, having carried no
    // more than what was accepted.
    let mut got = 0usize;
    let mut chunk = vec![0u8; 1 << 16];
    let end = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match tokio::time::timeout_at(end, p.s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got += n,
            Err(_) => panic!("{case}: connection still open after the send hold timer"),
        }
    }
    assert!(
        got <= accepted * per_cmd + 4096,
        "{case}: {got} bytes arrived"
    );
    let _ = h.send(Command::Stop(None)).await;
}

/// The same stalled peer at the speaker: while its session takes no more UPDATEs, the
/// RIB task must go on serving everyone else (other peers, the owner's commands).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_peer_does_not_stall_the_speaker() {
    if !loopback_usable("stalled_peer") {
        return;
    }
    let case = "stalled peer";
    let stalled = PeerConfig {
        send_hold_time: Some(Duration::from_secs(6)),
        ..peer_config(50, OPEN_HOLD_TIME)
    };
    let tern = Tern::start(17946, vec![stalled, peer_config(51, OPEN_HOLD_TIME)]).await;

    // The stalled peer: a small receive buffer, and it never reads after the handshake.
    let sock = TcpSocket::new_v4().unwrap_or_else(|e| panic!("{e}"));
    sock.set_recv_buffer_size(4096)
        .unwrap_or_else(|e| panic!("{e}"));
    sock.bind(SocketAddr::new(IpAddr::V4(lo(50)), 0))
        .unwrap_or_else(|e| panic!("{e}"));
    let s = sock
        .connect(tern.at)
        .await
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    let mut stuck = Raw {
        s,
        buf: BytesMut::new(),
        from: lo(50),
    };
    stuck.send(&good_open(50)).await;
    stuck.expect_open_keepalive(case).await;
    stuck.send(&keepalive()).await;

    // The healthy peer reads everything and notes the prefixes it is sent.
    let mut healthy = Raw::establish(lo(51), tern.at, &good_open(51), case).await;
    let seen = Arc::new(Mutex::new(std::collections::HashSet::<String>::new()));
    let seen2 = Arc::clone(&seen);
    let reader = tokio::spawn(async move {
        loop {
            match healthy.next(Duration::from_secs(30)).await {
                Got::Msg(Message::Update(u)) => {
                    if let Ok(mut s) = seen2.lock() {
                        s.extend(u.nlri.iter().map(|n| n.prefix.to_string()));
                    }
                }
                Got::Msg(_) => {}
                _ => return,
            }
        }
    });
    let end = Instant::now() + Duration::from_secs(3);
    while !(tern.logged(&format!("up {}", lo(50))) && tern.logged(&format!("up {}", lo(51)))) {
        assert!(
            Instant::now() < end,
            "{case}: sessions not up: {:?}",
            tern.log()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // 2000 routes of ~3.6 KB UPDATEs each (900 communities): 7 MB for the stalled peer,
    // more than its socket buffers and the session's 1 MiB high-water mark (before the
    // fix the speaker stopped after about 1200).
    let attrs = tern_bgp::wire::PathAttributes {
        origin: Some(Origin::Igp),
        communities: (0..900).map(|i| Community(0xfc00_0000 + i)).collect(),
        ..Default::default()
    };
    let t = Instant::now();
    let last = 2000u32;
    for i in 1..=last {
        let [_, _, b, c] = i.to_be_bytes();
        let prefix: IpNet = format!("198.19.{b}.{c}/32")
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        let cmd = SpeakerCommand::Originate {
            prefix,
            attrs: attrs.clone(),
            source: tern_bgp::policy::RouteSource::Originated,
            interface: None,
        };
        if tokio::time::timeout(Duration::from_secs(2), tern.cmd.send(cmd))
            .await
            .is_err()
        {
            panic!(
                "{case}: the speaker stopped taking commands after {i} routes ({:?}); log: {:?}",
                t.elapsed(),
                tern.log()
            );
        }
    }
    // The speaker still answers, and the healthy peer gets the last route, while the
    // stalled peer's session is still up (its send hold timer has not fired yet).
    let want = format!("198.19.{}.{}/32", last >> 8, last & 0xff);
    let end = Instant::now() + Duration::from_secs(3);
    loop {
        if seen.lock().map(|s| s.contains(&want)).unwrap_or(false) {
            break;
        }
        assert!(
            Instant::now() < end,
            "{case}: the healthy peer never got {want}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = t.elapsed();
    assert!(
        !tern.logged(&format!("down {}", lo(50))),
        "{case}: the healthy peer waited for the stalled one's send hold timer ({took:?}): {:?}",
        tern.log()
    );
    let routes = tokio::time::timeout(Duration::from_secs(1), tern.routes())
        .await
        .unwrap_or_else(|_| panic!("{case}: the speaker does not answer"));
    assert_eq!(routes.len(), last as usize, "{case}");
    eprintln!("{case}: {last} routes to the healthy peer in {took:?} while the other stalled");

    // And the stalled session is ended by its send hold timer (6 s).
    let end = Instant::now() + Duration::from_secs(10);
    while !tern.logged(&format!("down {}", lo(50))) {
        assert!(
            Instant::now() < end,
            "{case}: stalled session never dropped: {:?}",
            tern.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let down = tern
        .log()
        .into_iter()
        .find(|l| l.starts_with(&format!("down {}", lo(50))));
    assert!(
        down.as_deref()
            .is_some_and(|l| l.contains("send hold timer")),
        "{case}: {down:?}"
    );
    drop(stuck);
    reader.abort();
    tern.stop().await;
}
