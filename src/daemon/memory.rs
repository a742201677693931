//! Giving memory back after a large snapshot, a large `tern routes` answer or a large
//! kernel batch (the FIB task calls it, see `tern_fib::task::TRIM_AFTER`). A
//! snapshot of a big cluster (thousands of Nodes and IPAM blocks) is validated as a
//! whole, and `tern routes` on a 100,000-route node builds tens of MB; the transient
//! peak is freed at once, but glibc's allocator keeps the pages (one arena per worker
//! thread), so the node's RSS would stay at the largest peak ever reached.
//! `malloc_trim` returns them. No crate offers it: it is one glibc call (elsewhere,
//! nothing to do).

/// Snapshots with at least this many documents are followed by a trim: below it the
/// peak is small and the call (which walks the heap) is not worth it.
pub const TRIM_AFTER_DOCUMENTS: usize = 1000;

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
