//! Facts about what BIRD 2, GoBGP and FRR send in the capture lab
//! (`tern_interop::capture`), checked on the committed fixture and on a live capture.
//! Each check names the implementation and the message it expects, so a failure says
//! which real-world encoding the codec no longer reads.

#![allow(dead_code)]

use std::net::IpAddr;

use tern::decode::{decode_all, Decoded, Input, Overrides};
use tern_bgp::wire::{Capability, Family, Message, Nlri, Open, RefreshSubtype, Update};

pub const BIRD: &str = "203.0.113.1";
pub const GOBGP: &str = "203.0.113.2";
pub const FRR: &str = "203.0.113.3";
pub const BIRD_IBGP: &str = "203.0.113.4";

/// Reads a capture and decodes every message.
pub fn decode_capture(bytes: &[u8], name: &str) -> (Vec<Decoded>, Vec<String>) {
    let cap = tern::capture::read_pcap(bytes, name).unwrap_or_else(|e| panic!("{e}"));
    let inputs = cap.messages.into_iter().map(Input::from).collect();
    (decode_all(inputs, Overrides::default()), cap.warnings)
}

/// Values as the strings a person reads (`64502:200`).
fn texts<T: ToString>(v: &[T]) -> Vec<String> {
    v.iter().map(|c| c.to_string()).collect()
}

fn from(d: &Decoded, ip: &str) -> bool {
    d.flow
        .as_deref()
        .is_some_and(|f| f.starts_with(&format!("{ip}:")))
}

fn messages<'a>(all: &'a [Decoded], ip: &'a str) -> impl Iterator<Item = &'a Message> + 'a {
    all.iter()
        .filter(move |d| from(d, ip))
        .filter_map(|d| d.message.as_ref())
}

fn updates<'a>(all: &'a [Decoded], ip: &'a str) -> impl Iterator<Item = &'a Update> + 'a {
    messages(all, ip).filter_map(|m| match m {
        Message::Update(u) => Some(u),
        _ => None,
    })
}

/// The first OPEN `ip` sent to `to`.
fn open_of<'a>(all: &'a [Decoded], ip: &str, to: &str) -> &'a Open {
    all.iter()
        .filter(|d| {
            from(d, ip)
                && d.flow
                    .as_deref()
                    .is_some_and(|f| f.contains(&format!("-> {to}:")))
        })
        .find_map(|d| match &d.message {
            Some(Message::Open(o)) => Some(o),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no OPEN from {ip} to {to}"))
}

fn net(s: &str) -> Nlri {
    Nlri::new(s.parse().unwrap_or_else(|e| panic!("{s}: {e}")))
}

fn announces(u: &Update, prefix: &str) -> bool {
    let p = net(prefix).prefix;
    u.nlri
        .iter()
        .chain(u.mp_reach.iter().flat_map(|m| &m.nlri))
        .any(|n| n.prefix == p)
}

fn withdraws(u: &Update, prefix: &str) -> bool {
    let p = net(prefix).prefix;
    u.withdrawn
        .iter()
        .chain(u.mp_unreach.iter().flat_map(|m| &m.withdrawn))
        .any(|n| n.prefix == p)
}

/// Checks everything the lab is known to make the three implementations send.
pub fn check_lab_capture(all: &[Decoded]) {
    let bad: Vec<String> = all
        .iter()
        .filter_map(|d| {
            d.error
                .as_ref()
                .map(|e| format!("#{}: {}", d.index, e.reason))
        })
        .collect();
    assert!(
        bad.is_empty(),
        "messages from real daemons failed to decode: {bad:?}"
    );
    assert!(all.len() > 100, "only {} messages captured", all.len());

    // OPENs and their capabilities.
    let bird = open_of(all, BIRD, GOBGP);
    assert_eq!(
        (bird.asn(), bird.hold_time, bird.bgp_id.to_string()),
        (64501, 9, BIRD.to_string())
    );
    for want in [
        "add-path",
        "extended-next-hop ipv4-unicast via ipv6",
        "graceful-restart",
        "enhanced-route-refresh",
        "extended-message",
        "4-octet-as 64501",
    ] {
        assert!(
            bird.capabilities
                .iter()
                .any(|c| c.to_string().starts_with(want)),
            "BIRD OPEN lacks {want}: {:?}",
            bird.capabilities
        );
    }
    let frr = open_of(all, FRR, BIRD);
    assert!(
        frr.capabilities.contains(&Capability::Fqdn {
            hostname: "frr-tor".into(),
            domain: String::new()
        }),
        "FRR FQDN: {:?}",
        frr.capabilities
    );
    assert_eq!(open_of(all, GOBGP, BIRD).asn(), 64502);
    assert!(open_of(all, GOBGP, BIRD)
        .capabilities
        .iter()
        .any(|c| matches!(c, Capability::AddPath(_))));

    // GoBGP: announcement with communities, IPv4 and IPv6 withdrawals at runtime.
    let g: Vec<&Update> = updates(all, GOBGP).collect();
    let u = g
        .iter()
        .find(|u| announces(u, "198.18.2.0/24"))
        .unwrap_or_else(|| panic!("GoBGP never announced 198.18.2.0/24"));
    assert_eq!(texts(&u.attributes.communities), ["64502:200"]);
    assert_eq!(texts(&u.attributes.large_communities), ["64502:2:2"]);
    assert!(
        g.iter().any(|u| withdraws(u, "198.18.2.64/26")),
        "GoBGP withdrawal of 198.18.2.64/26"
    );
    assert!(
        g.iter().any(|u| withdraws(u, "2001:db8:2:1::/64")),
        "GoBGP MP_UNREACH of 2001:db8:2:1::/64"
    );
    assert!(
        g.iter().any(|u| u
            .nlri
            .iter()
            .chain(u.mp_reach.iter().flat_map(|m| &m.nlri))
            .any(|n| n.path_id.is_some())),
        "GoBGP sent no ADD-PATH ids"
    );

    // BIRD: communities of all three kinds, an IPv6 route with a link-local next hop,
    // End-of-RIB for both families, BoRR/EoRR, and a shutdown message.
    let b: Vec<&Update> = updates(all, BIRD).collect();
    let u = b
        .iter()
        .find(|u| announces(u, "198.18.1.0/24"))
        .unwrap_or_else(|| panic!("BIRD never announced 198.18.1.0/24"));
    assert_eq!(texts(&u.attributes.large_communities), ["64501:1:2"]);
    assert_eq!(texts(&u.attributes.extended_communities), ["rt:64501:7"]);
    assert!(
        b.iter().any(|u| u
            .mp_reach
            .as_ref()
            .is_some_and(|m| m.next_hop.to_string().contains("(fe80::"))),
        "BIRD link-local next hop"
    );
    // FRR 8.4.4 now and then resets its session with BIRD ("Invalid network field" on a
    // well-formed UPDATE); after that it may skip End-of-RIB, so it is only required of
    // FRR on a capture without such a reset.
    let frr_reset =
        messages(all, FRR).any(|m| matches!(m, Message::Notification(n) if n.code == 3));
    let eor_senders: &[&str] = if frr_reset {
        &[BIRD, GOBGP]
    } else {
        &[BIRD, GOBGP, FRR]
    };
    for fam in [Family::IPV4_UNICAST, Family::IPV6_UNICAST] {
        for &ip in eor_senders {
            assert!(
                updates(all, ip).any(|u| u.end_of_rib_family() == Some(fam)),
                "End-of-RIB {fam} from {ip}"
            );
        }
    }
    let refresh = |ip: &str, sub: RefreshSubtype| {
        messages(all, ip).any(|m| matches!(m, Message::RouteRefresh(r) if r.subtype == sub))
    };
    assert!(
        refresh(BIRD, RefreshSubtype::Request) && refresh(FRR, RefreshSubtype::Request),
        "ROUTE-REFRESH requests"
    );
    assert!(
        refresh(BIRD, RefreshSubtype::BeginningOfRibRefresh)
            && refresh(BIRD, RefreshSubtype::EndOfRibRefresh),
        "BIRD BoRR/EoRR"
    );
    let shutdown = |ip: &str| {
        messages(all, ip).find_map(|m| match m {
            Message::Notification(n) => n.shutdown_message().map(String::from),
            _ => None,
        })
    };
    assert_eq!(shutdown(BIRD).as_deref(), Some("maintenance window"));
    assert_eq!(shutdown(FRR).as_deref(), Some("rack 7 power work"));

    // iBGP: LOCAL_PREF and ORIGIN as set by the client BIRD.
    let u = updates(all, BIRD_IBGP)
        .find(|u| announces(u, "198.18.4.0/26"))
        .unwrap_or_else(|| panic!("iBGP route missing"));
    assert_eq!(u.attributes.local_pref, Some(250));
    assert_eq!(
        u.attributes.origin.map(|o| o.to_string()).as_deref(),
        Some("incomplete")
    );

    // FRR: the aggregate carries ATOMIC_AGGREGATE and AGGREGATOR; its IPv6 routes over
    // the IPv4 session carry an IPv4-mapped next hop.
    let f: Vec<&Update> = updates(all, FRR).collect();
    let agg = f
        .iter()
        .find(|u| announces(u, "198.18.0.0/22"))
        .unwrap_or_else(|| panic!("FRR aggregate missing"));
    assert!(agg.attributes.atomic_aggregate);
    assert_eq!(
        agg.attributes
            .aggregator
            .map(|a| (a.asn, IpAddr::V4(a.address).to_string())),
        Some((64503, FRR.to_string()))
    );
    assert!(f.iter().any(|u| u
        .mp_reach
        .as_ref()
        .is_some_and(|m| m.next_hop.to_string() == "::ffff:203.0.113.3")));
}

/// Every decoded message re-encodes to the same value; the fixed-layout ones
/// (KEEPALIVE, NOTIFICATION, ROUTE-REFRESH) to the very same bytes.
pub fn check_reencoding(all: &[Decoded]) {
    for d in all {
        let Some(m) = &d.message else { continue };
        let bytes = m
            .encode(&d.options)
            .unwrap_or_else(|e| panic!("#{} {}: re-encode: {e}", d.index, m.kind()));
        let back = Message::decode(bytes.clone(), &d.options)
            .unwrap_or_else(|e| panic!("#{}: {e}", d.index));
        let strip = |m: Message| match m {
            Message::Update(u) => Message::Update(Update {
                errors: Vec::new(),
                ..u
            }),
            m => m,
        };
        assert_eq!(strip(back), strip(m.clone()), "#{} {}", d.index, m.kind());
        if matches!(
            m,
            Message::Keepalive | Message::Notification(_) | Message::RouteRefresh(_)
        ) {
            assert_eq!(
                tern_bgp::wire::hex(&bytes),
                d.hex,
                "#{} {} bytes",
                d.index,
                m.kind()
            );
        }
    }
}
