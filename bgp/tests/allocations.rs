//! Decoding a packed UPDATE allocates a fixed handful of times, never once per prefix:
//! counted with a wrapping global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};

use ipnet::{IpNet, Ipv4Net};
use tern_bgp::wire::pack::{self, NextHop};
use tern_bgp::wire::*;

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call unchanged to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
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

fn allocations_to_decode(n: u32) -> usize {
    let prefixes: Vec<Nlri> = (0..n)
        .map(|i| {
            Nlri::new(IpNet::V4(
                Ipv4Net::new(Ipv4Addr::from(0xC612_0000 + i), 32).unwrap_or_default(),
            ))
        })
        .collect();
    let attrs = PathAttributes {
        origin: Some(Origin::Igp),
        as_path: Some(AsPath::from_sequence([64512])),
        next_hop: Some(Ipv4Addr::new(203, 0, 113, 1)),
        ..PathAttributes::default()
    };
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
    let before = ALLOCS.load(Ordering::Relaxed);
    let m = Message::decode(msg, &opts);
    let used = ALLOCS.load(Ordering::Relaxed) - before;
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
