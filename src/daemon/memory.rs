//! Giving memory back after a large snapshot, a large `tern routes` answer, a large
//! kernel batch (the FIB task calls it, see `tern_fib::task::TRIM_AFTER`) or once the
//! speaker packed its table (`tern_bgp::speaker::set_release_freed`). A
//! snapshot of a big cluster (thousands of Nodes and IPAM blocks) is validated as a
//! whole, and `tern routes` on a 100,000-route node builds tens of MB; the transient
//! peak is freed at once, but glibc's allocator keeps the pages (one arena per worker
//! thread), so the node's RSS would stay at the largest peak ever reached.
//! `malloc_trim` returns them. No crate offers it: it is one glibc call (elsewhere,
//! nothing to do).
//!
//! [`tune`] sets glibc's allocator up for that at start, before any thread runs: large
//! buffers (128 KiB and up) always come from `mmap`, so freeing one gives it back at
//! once. By default glibc raises that threshold after the first large free (up to 32
//! MB), and the FIB's whole-table plans then came from the heap, between long-lived
//! B-tree nodes that kept their pages: after a full withdrawal of 100,000 routes the
//! RSS stayed 8–225% above the empty daemon's, with the fixed threshold 9–12%.
//!
//! The number of arenas is left to glibc. One arena (`M_ARENA_MAX` 1) was tried: with
//! the fixed threshold it saved no memory (settled 160 against 164 B/route at 100,000
//! routes) and cost time, as the FIB's kernel read and the speaker's ingest took turns
//! at its lock (a restart's full RIB back in 0.31–0.35 s instead of 0.20).

/// Snapshots with at least this many documents are followed by a trim: below it the
/// peak is small and the call (which walks the heap) is not worth it.
pub const TRIM_AFTER_DOCUMENTS: usize = 1000;

/// Large allocations at or above this size come from `mmap` (glibc's initial value,
/// kept fixed).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 128 * 1024;

/// Sets the allocator up as the module doc says. Call before any thread starts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune() {
    // SAFETY: mallopt only changes the allocator's parameters; called before the
    // runtime's threads exist.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

/// Sets the allocator up (nothing to do on this platform).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune() {}

/// Returns freed heap pages to the kernel.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_freed() {
    // SAFETY: malloc_trim only walks and trims the allocator's own free lists; it takes
    // no pointers from us and is safe to call at any time from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Returns freed heap pages to the kernel (nothing to do on this platform).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_freed() {}
