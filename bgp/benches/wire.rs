//! Codec throughput: UPDATEs/s and prefixes/s for decode and encode of
//! (a) one prefix per UPDATE, (b) UPDATEs packed full of IPv4 /32s, (c) IPv6 /128s in
//! MP_REACH_NLRI. Run: `cargo bench -p tern-bgp --bench wire`.
//! Criterion's "thrpt" line is prefixes per second; UPDATEs per second are printed.

use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use tern_bgp::wire::pack::{self, NextHop};
use tern_bgp::wire::*;

fn attrs() -> PathAttributes {
    PathAttributes {
        origin: Some(Origin::Igp),
        as_path: Some(AsPath::from_sequence([64512, 64513])),
        next_hop: Some(Ipv4Addr::new(203, 0, 113, 1)),
        local_pref: Some(100),
        communities: vec![Community(0xFDE8_0001)],
        ..PathAttributes::default()
    }
}

struct Case {
    name: &'static str,
    family: Family,
    next_hop: NextHop,
    prefixes: Vec<Nlri>,
    per_update: Option<usize>,
}

fn cases() -> Vec<Case> {
    let v4: Vec<Nlri> = (0..100_000u32)
        .map(|i| {
            Nlri::new(IpNet::V4(
                Ipv4Net::new(Ipv4Addr::from(0xC612_0000 + i), 32).unwrap_or_default(),
            ))
        })
        .collect();
    let v6: Vec<Nlri> = (0..100_000u128)
        .map(|i| {
            Nlri::new(IpNet::V6(
                Ipv6Net::new(Ipv6Addr::from((0x2001_0db8u128 << 96) + i), 128).unwrap_or_default(),
            ))
        })
        .collect();
    let nh6 = NextHop::Mp(MpNextHop::V6 {
        global: "2001:db8::1".parse().unwrap_or(Ipv6Addr::UNSPECIFIED),
        link_local: None,
    });
    vec![
        Case {
            name: "a_one_prefix_per_update",
            family: Family::IPV4_UNICAST,
            next_hop: NextHop::Classic,
            prefixes: v4[..10_000].to_vec(),
            per_update: Some(1),
        },
        Case {
            name: "b_packed_ipv4_32s",
            family: Family::IPV4_UNICAST,
            next_hop: NextHop::Classic,
            prefixes: v4,
            per_update: None,
        },
        Case {
            name: "c_ipv6_mp_reach_128s",
            family: Family::IPV6_UNICAST,
            next_hop: nh6,
            prefixes: v6,
            per_update: None,
        },
    ]
}

fn encode(c: &Case, opts: &CodecOptions) -> Vec<Bytes> {
    let mut out = Vec::new();
    let chunk = c.per_update.unwrap_or(c.prefixes.len());
    for part in c.prefixes.chunks(chunk) {
        if let Err(e) = pack::announcements(&attrs(), c.family, &c.next_hop, part, opts, &mut out) {
            panic!("encode {}: {e}", c.name);
        }
    }
    out
}

fn bench(cr: &mut Criterion) {
    let opts = CodecOptions::modern();
    for c in cases() {
        let msgs = encode(&c, &opts);
        let n = c.prefixes.len();
        println!(
            "{}: {} prefixes in {} UPDATEs ({:.1} prefixes/UPDATE)",
            c.name,
            n,
            msgs.len(),
            n as f64 / msgs.len() as f64
        );
        let mut g = cr.benchmark_group(c.name);
        g.throughput(Throughput::Elements(n as u64));
        g.measurement_time(Duration::from_secs(4));
        g.sample_size(20);
        g.bench_function("decode", |b| {
            b.iter(|| {
                let mut count = 0usize;
                for m in &msgs {
                    if let Ok(Message::Update(u)) = Message::decode(m.clone(), &opts) {
                        count += u.announced_count();
                    }
                }
                assert_eq!(count, n);
                black_box(count)
            })
        });
        g.bench_function("encode", |b| b.iter(|| black_box(encode(&c, &opts).len())));
        g.finish();
        let t = std::time::Instant::now();
        let rounds = 20;
        for _ in 0..rounds {
            for m in &msgs {
                black_box(Message::decode(m.clone(), &opts).is_ok());
            }
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "{}: decode {:.2} M UPDATEs/s, {:.2} M prefixes/s",
            c.name,
            (msgs.len() * rounds) as f64 / s / 1e6,
            (n * rounds) as f64 / s / 1e6
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
