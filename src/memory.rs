//! How warren's process gives freed memory back to the system: Rust code allocates with
//! mimalloc (see `main.rs`), SQLite with the C library's malloc.

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

/// Returns the memory SQLite freed to the system. SQLite allocates with the C library's malloc,
/// and glibc keeps what was freed in its per-thread arenas: the poll benchmark at 50,000 queues
/// measured 14 to 26 MB held there for 2.5 MB in use, a tenth of warren's memory. Called after
/// each poll's write; it takes no pointers and only gives free pages back.
pub fn release_sqlite_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim has no preconditions; it returns free memory at the top of each
        // arena and unused whole pages inside them to the system.
        unsafe {
            malloc_trim(0);
        }
    }
}
