//! How warren's process gives freed memory back to the system (its allocator is mimalloc, see
//! `main.rs`).

/// mimalloc returns freed pages to the system 10 ms after they were freed, but only once the
/// thread that owns them allocates again: pages freed during a poll in the heaps of threads that
/// then sat idle stayed resident. Measured with the poll benchmark at 50,000 queues and the
/// Prometheus source: VmRSS 165 and 232 MB in two runs for the same 82 MB held, and 139 MB with
/// pages purged at once, at the same CPU per poll (p50 292 against 290 ms). Called first thing
/// in `main` (and by the benchmarks, to measure the same process).
pub fn purge_freed_pages_at_once() {
    extern "C" {
        fn mi_option_set(option: i32, value: std::os::raw::c_long);
    }
    // `mi_option_purge_delay` in mimalloc.h (the same position in its v2 and v3 headers).
    const MI_OPTION_PURGE_DELAY: i32 = 15;
    // Names the crate so that its C library is linked wherever this function is.
    let _ = mimalloc::MiMalloc;
    // SAFETY: mi_option_set only stores an option value; mimalloc reads it at its next purge.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 0) }
}
