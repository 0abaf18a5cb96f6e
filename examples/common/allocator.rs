//! glibc's allocator, tuned for training: shared by the `train` tool and chapter 15's example.

/// Asks glibc's allocator to keep the memory a training step frees for the next step,
/// instead of handing its large blocks back to the system and faulting fresh pages in again
/// (with glibc's defaults that costs about a quarter of a step). No effect elsewhere.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes two thresholds of the allocator, before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20); // blocks up to 32 MiB from the heap
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30); // and the heap not trimmed below 1 GiB
    }
}
