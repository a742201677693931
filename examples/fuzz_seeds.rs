//! Writes the fuzz seed corpus `bgp/fuzz/seeds/decode/`: every message of the captured
//! fixtures (`bgp/tests/fixtures/*.pcap`) plus synthetic messages from the encoder,
//! each prefixed with the options byte the fuzz target reads (bit 0 4-octet AS, bit 1
//! extended message, bits 2/3 ADD-PATH IPv4/IPv6).
//! Run: `cargo run --example fuzz_seeds` and commit the result.

use std::net::Ipv4Addr;
use std::path::Path;

use tern::decode::{decode_all, Input, Overrides};
use tern_bgp::wire::pack::{self, NextHop};
use tern_bgp::wire::*;

fn options_byte(o: &CodecOptions) -> u8 {
    u8::from(o.four_octet_as)
        | u8::from(o.extended_message) << 1
        | u8::from(o.add_path_ipv4) << 2
        | u8::from(o.add_path_ipv6) << 3
}

/// A flat list of seeds, one after the other: long on purpose, read top to bottom.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = root.join("bgp/fuzz/seeds/decode");
    std::fs::create_dir_all(&out)?;
    let mut seeds: Vec<(String, Vec<u8>)> = Vec::new();

    let mut fixtures: Vec<_> = std::fs::read_dir(root.join("bgp/tests/fixtures"))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap" || x == "pcapng"))
        .collect();
    fixtures.sort();
    for f in fixtures {
        let name = f
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let cap = tern::capture::read_pcap(&std::fs::read(&f)?, &f.display().to_string())?;
        let inputs = cap.messages.into_iter().map(Input::from).collect();
        let mut seen = std::collections::HashSet::new();
        for d in decode_all(inputs, Overrides::default()) {
            let Some(bytes) = hex_to_bytes(&d.hex) else {
                continue;
            };
            // One seed per distinct message is enough: keepalives repeat.
            if seen.insert(bytes.clone()) {
                let mut s = vec![options_byte(&d.options)];
                s.extend(bytes);
                seeds.push((format!("{name}-{:03}", d.index), s));
            }
        }
    }

    let attrs = PathAttributes {
        origin: Some(Origin::Incomplete),
        as_path: Some(AsPath::from_sequence([64512, 4_200_000_000])),
        next_hop: Some(Ipv4Addr::new(203, 0, 113, 1)),
        med: Some(5),
        local_pref: Some(200),
        atomic_aggregate: true,
        aggregator: Some(Aggregator {
            asn: 4_200_000_001,
            address: Ipv4Addr::new(198, 51, 100, 9),
        }),
        communities: vec![Community::NO_EXPORT],
        originator_id: Some(Ipv4Addr::new(198, 51, 100, 2)),
        cluster_list: vec![Ipv4Addr::new(198, 51, 100, 3)],
        extended_communities: vec![ExtendedCommunity([0, 2, 0xfd, 0xe8, 0, 0, 0, 1])],
        large_communities: vec![LargeCommunity {
            global: 64512,
            local1: 1,
            local2: 2,
        }],
        unknown: vec![RawAttribute {
            flags: 0xc0,
            code: 200,
            data: bytes::Bytes::from_static(b"opaque"),
        }],
        kernel_priority: None,
    };
    let v4: Vec<Nlri> = ["198.18.0.0/26", "198.18.1.7/32", "0.0.0.0/0"]
        .iter()
        .filter_map(|s| s.parse().ok())
        .map(Nlri::new)
        .collect();
    let v6: Vec<Nlri> = ["2001:db8:1::/48", "2001:db8::7/128"]
        .iter()
        .filter_map(|s| s.parse().ok())
        .map(Nlri::new)
        .collect();
    for sel in 0u8..16 {
        let o = CodecOptions {
            four_octet_as: sel & 1 != 0,
            extended_message: sel & 2 != 0,
            add_path_ipv4: sel & 4 != 0,
            add_path_ipv6: sel & 8 != 0,
        };
        let with_ids = |l: &[Nlri], on: bool| -> Vec<Nlri> {
            l.iter()
                .enumerate()
                .map(|(i, n)| Nlri {
                    path_id: on.then_some(i as u32 + 1),
                    ..*n
                })
                .collect()
        };
        let mut msgs = Vec::new();
        pack::announcements(
            &attrs,
            Family::IPV4_UNICAST,
            &NextHop::Classic,
            &with_ids(&v4, o.add_path_ipv4),
            &o,
            &mut msgs,
        )?;
        let nh = NextHop::Mp(MpNextHop::V6 {
            global: "2001:db8::1".parse()?,
            link_local: Some("fe80::1".parse()?),
        });
        pack::announcements(
            &attrs,
            Family::IPV6_UNICAST,
            &nh,
            &with_ids(&v6, o.add_path_ipv6),
            &o,
            &mut msgs,
        )?;
        let nh = NextHop::Mp(MpNextHop::V6 {
            global: "2001:db8::2".parse()?,
            link_local: None,
        });
        pack::announcements(
            &attrs,
            Family::IPV4_UNICAST,
            &nh,
            &with_ids(&v4, o.add_path_ipv4),
            &o,
            &mut msgs,
        )?;
        pack::withdrawals(
            Family::IPV6_UNICAST,
            &with_ids(&v6, o.add_path_ipv6),
            &o,
            &mut msgs,
        )?;
        for (i, m) in msgs.into_iter().enumerate() {
            let mut s = vec![sel];
            s.extend_from_slice(&m);
            seeds.push((format!("synthetic-{sel:02}-{i}"), s));
        }
    }
    let o = CodecOptions::modern();
    for m in [
        Message::Update(Update::end_of_rib(Family::IPV6_UNICAST)),
        Message::Notification(Notification::shutdown("maintenance window")),
        Message::RouteRefresh(RouteRefresh {
            family: Family::IPV4_UNICAST,
            subtype: RefreshSubtype::BeginningOfRibRefresh,
        }),
    ] {
        let mut s = vec![options_byte(&o)];
        s.extend_from_slice(&m.encode(&o)?);
        seeds.push((format!("synthetic-{}", m.kind().to_lowercase()), s));
    }

    for old in std::fs::read_dir(&out)?.flatten() {
        std::fs::remove_file(old.path())?;
    }
    for (name, data) in &seeds {
        std::fs::write(out.join(name), data)?;
    }
    println!("wrote {} seeds to {}", seeds.len(), out.display());
    Ok(())
}

fn hex_to_bytes(s: &str) -> Option<Vec<u8>> {
    hex::decode(s).ok()
}
