//! Decoding a packed UPDATE allocates a fixed handful of times, never once per prefix,
//! and so does taking it into the RIB (only the table's own nodes, one per several
//! prefixes): counted with a wrapping global allocator, per thread, so that tests
//! running side by side do not count each other.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use ipnet::{IpNet, Ipv4Net};
use tern_bgp::rib::{PeerSource, Rib};
use tern_bgp::wire::pack::{self, NextHop};
use tern_bgp::wire::*;

struct Counting;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn allocs() -> usize {
    ALLOCS.with(Cell::get)
}

// SAFETY: forwards every call unchanged to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // A thread being torn down has no counter any more: not counted then.
        let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn prefixes(n: u32) -> Vec<Nlri> {
    (0..n)
        .map(|i| {
            Nlri::new(IpNet::V4(
                Ipv4Net::new(Ipv4Addr::from(0xC612_0000 + i), 32).unwrap_or_default(),
            ))
        })
        .collect()
}

fn attributes() -> PathAttributes {
    PathAttributes {
        origin: Some(Origin::Igp),
        as_path: Some(AsPath::from_sequence([64512])),
        next_hop: Some(Ipv4Addr::new(203, 0, 113, 1)),
        ..PathAttributes::default()
    }
}

fn allocations_to_decode(n: u32) -> usize {
    let prefixes = prefixes(n);
    let attrs = attributes();
    let mut out = Vec::new();
    let opts = CodecOptions::modern();
    assert!(pack::announcements(
        &attrs,
        Family::IPV4_UNICAST,
        &NextHop::Classic,
        &prefixes,
        &opts,
        &mut out
    )
    .is_ok());
    assert_eq!(out.len(), 1);
    let msg = out.remove(0);
    let before = allocs();
    let m = Message::decode(msg, &opts);
    let used = allocs() - before;
    assert!(matches!(m, Ok(Message::Update(ref u)) if u.nlri.len() == n as usize));
    used
}

#[test]
fn decoding_does_not_allocate_per_prefix() {
    let small = allocations_to_decode(4);
    let large = allocations_to_decode(800);
    // The NLRI vector grows by doubling: a few reallocations, not 800 allocations.
    assert!(
        large <= small + 12,
        "4 prefixes: {small} allocations, 800 prefixes: {large}"
    );
}

/// Allocations to take an UPDATE of `n` new prefixes into an empty RIB, and the
/// number of Loc-RIB changes it gave.
fn allocations_to_import(n: u32) -> (usize, usize) {
    let source = Arc::new(PeerSource {
        address: IpAddr::V4(Ipv4Addr::new(203, 0, 113, 1)),
        router_id: Ipv4Addr::new(203, 0, 113, 1),
        asn: 64512,
        ebgp: false,
        rr_client: false,
        local: false,
    });
    let u = Update {
        attributes: attributes(),
        nlri: prefixes(n),
        ..Update::default()
    };
    let mut rib = Rib::new(1);
    let before = allocs();
    let changes = rib.apply_update(&source, &u);
    (allocs() - before, changes.len())
}

#[test]
fn the_rib_does_not_allocate_per_prefix() {
    let (small, four) = allocations_to_import(4);
    let (large, many) = allocations_to_import(800);
    assert_eq!((four, many), (4, 800), "every prefix is a Loc-RIB change");
    // The table's B-tree allocates a node per six to eleven prefixes; a path, a
    // list or an ECMP set per prefix would be 800 allocations or more each.
    assert!(
        large <= small + 800 / 4,
        "4 prefixes: {small} allocations, 800 prefixes: {large}"
    );
}
