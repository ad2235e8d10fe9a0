//! How haq's heap gives memory back (issue 15 item 5: whatever a server sends, one
//! response costs a few MB, and only while it is read).
//!
//! A hostile response makes haq hold a buffer up to a `client.limits` size (a 1 MiB
//! line, a 2 MiB event, a 4 MiB answer) for as long as the response is read, then
//! frees it. glibc serves such buffers from `mmap` at first, but raises its mmap
//! threshold to the size of each one freed, after which the next ones come from the
//! arenas' heaps, where freed blocks stay part of the process while fragments of other
//! allocations sit above them: the heap then follows the history of responses, not the
//! buffers alive at once. A fixed threshold keeps every buffer of 1 MiB or more in its
//! own mapping, returned at its free; two arenas bound what the few threads that
//! allocate (the client's runtime, the dispatcher, the trace writer, the proxy's
//! runtime) can each keep. musl's allocator already maps large blocks on their own.
//! Measured on the hostile-server test (tests/it/hostile.rs, a debug build): peak
//! anonymous RSS 11.6 MiB without these settings, 9.5 MiB with them.

/// Sets the heap's mmap threshold to 1 MiB (fixed) and its arenas to two, once at the
/// start of the process, before any thread.
pub fn return_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's parameters; called before the
    // process starts any thread, as glibc asks.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}
