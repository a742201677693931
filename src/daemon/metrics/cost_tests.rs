//! A scrape's cost against the table's size: the FIB's and the RIB's sizes come from
//! counters, so asking them and encoding the text allocate the same with a big table
//! as with none. An allocator that counts this thread's allocations measures it; the
//! FIB task runs on the same thread (a current-thread runtime).
//!
//! `scrape_cost_at_a_million_routes` gives the figures (run it with `--ignored
//! --nocapture`); the test that always runs compares 0 and 20,000 routes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipnet::{IpNet, Ipv6Net};
use tern_bgp::speaker::RibCounts;
use tern_fib::memory::MemoryFib;
use tern_fib::task::{run, FibMsg, Inputs, KernelNews, RouteFilter, Routes};
use tern_fib::{Route, RouteKind};
use tokio::sync::{mpsc, oneshot, watch};

use super::process;
use super::render::{encode_facts, Facts};
use crate::control::proto::{PeerInfo, StatusReply};

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    static BYTES: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting allocations made on the current thread.
struct Counting;

fn count(bytes: usize) {
    // `try_with`: allocations while the thread's locals are torn down go uncounted.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
    let _ = BYTES.try_with(|c| c.set(c.get() + bytes as u64));
}

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` and `layout` come from the same allocator, as the caller promises.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: passed on unchanged; the caller's promises hold for the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocated() -> (u64, u64) {
    (ALLOCS.with(Cell::get), BYTES.with(Cell::get))
}

struct Identity;

impl RouteFilter for Identity {
    type News = Routes;
    fn filter(&mut self, news: Routes) -> Routes {
        news
    }
}

/// The `i`th of a million distinct documentation prefixes (2001:db8::/32 in /64s).
fn prefix(i: u32) -> IpNet {
    let hi = (i >> 16) as u16;
    let lo = (i & 0xffff) as u16;
    let addr = std::net::Ipv6Addr::new(0x2001, 0xdb8, hi, lo, 0, 0, 0, 0);
    IpNet::V6(Ipv6Net::new(addr, 64).unwrap())
}

/// A FIB task holding `n` installed routes.
async fn fib_with(n: u32) -> mpsc::Sender<FibMsg> {
    let (commands, crx) = mpsc::channel(8);
    let (routes, rrx) = mpsc::channel(8);
    let (gtx, _) = watch::channel(true);
    tokio::spawn(run(
        MemoryFib::default(),
        Inputs {
            commands: crx,
            routes: rrx,
            filter: Identity,
            kernel: Arc::new(KernelNews::default()),
            grace: gtx,
            predecessor: None,
            release_freed: || {},
        },
    ));
    routes.send(Routes::Converged).await.unwrap();
    let mut i = 0;
    while i < n {
        let end = (i + 50_000).min(n);
        let batch = (i..end)
            .map(|i| {
                let r = Route {
                    prefix: prefix(i),
                    kind: RouteKind::Blackhole,
                    metric: 0,
                    table: 254,
                };
                (r.prefix, Some(r))
            })
            .collect();
        routes.send(Routes::Want(batch)).await.unwrap();
        i = end;
    }
    // Route news and commands come on separate channels: wait until the task has
    // taken every route.
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let (tx, rx) = oneshot::channel();
        commands.send(FibMsg::Counts(tx)).await.unwrap();
        if rx.await.unwrap().installed == n as usize {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the FIB task did not take {n} routes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The route channel stays open, as a running daemon's does.
    std::mem::forget(routes);
    commands
}

/// What `fib`'s routes cost one scrape: (allocations, bytes, time).
async fn scrape(fib: &mpsc::Sender<FibMsg>, n: u32) -> (u64, u64, Duration) {
    let status = StatusReply {
        peers: (1..=3)
            .map(|i| PeerInfo {
                address: format!("198.51.100.{i}"),
                kind: "global".into(),
                state: "Established".into(),
                ..PeerInfo::default()
            })
            .collect(),
        ..StatusReply::default()
    };
    // Warm up (the first call may allocate once-only things), then measure.
    for round in 0..2 {
        let (a0, b0) = allocated();
        let t0 = Instant::now();
        let (tx, rx) = oneshot::channel();
        fib.send(FibMsg::Counts(tx)).await.unwrap();
        let counts = rx.await.unwrap();
        assert_eq!(counts.installed, n as usize);
        let text = encode_facts(&Facts {
            status: Some(status.clone()),
            rib: Some(RibCounts {
                ipv4_prefixes: 0,
                ipv6_prefixes: u64::from(n),
                paths: u64::from(n),
            }),
            fib: Some(counts),
            process: process::read(),
            ..Facts::default()
        });
        let took = t0.elapsed();
        let (a1, b1) = allocated();
        assert!(text.contains(&format!("tern_fib_routes{{state=\"installed\"}} {n}\n")));
        if round == 1 {
            return (a1 - a0, b1 - b0, took);
        }
    }
    unreachable!()
}

/// What `tern fib`'s report (the scrape's source before the counts) costs.
async fn report(fib: &mpsc::Sender<FibMsg>) -> (u64, u64, Duration) {
    let (a0, b0) = allocated();
    let t0 = Instant::now();
    let (tx, rx) = oneshot::channel();
    fib.send(FibMsg::Report(tx)).await.unwrap();
    let r = rx.await.unwrap();
    let took = t0.elapsed();
    let (a1, b1) = allocated();
    drop(r);
    (a1 - a0, b1 - b0, took)
}

#[tokio::test(flavor = "current_thread")]
async fn a_scrape_allocates_the_same_with_a_table_as_without() {
    let empty = scrape(&fib_with(0).await, 0).await;
    let full = scrape(&fib_with(20_000).await, 20_000).await;
    // A number's digits may grow the text's buffer once more: a few allocations of
    // slack, where copying the table would take tens of thousands.
    assert!(full.0 <= empty.0 + 4, "allocations: {full:?} vs {empty:?}");
    assert!(full.1 <= empty.1 + 4096, "bytes: {full:?} vs {empty:?}");
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "a measurement: cargo test -p tern --lib scrape_cost -- --ignored --nocapture"]
async fn scrape_cost_at_a_million_routes() {
    for n in [0, 100_000, 1_000_000] {
        let fib = fib_with(n).await;
        let (allocs, bytes, took) = scrape(&fib, n).await;
        println!("{n} routes: scrape {allocs} allocations, {bytes} bytes, {took:?}");
        let (allocs, bytes, took) = report(&fib).await;
        println!("{n} routes: tern fib report (the old source) {allocs} allocations, {bytes} bytes, {took:?}");
    }
}
