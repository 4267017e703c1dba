//! The process's memory allocator: mimalloc, asked for plain (unaligned) blocks whenever a
//! plain block already has the alignment. This is the crate's one `unsafe` module.
//!
//! The `mimalloc` crate's `GlobalAlloc` sends every request through `mi_malloc_aligned`.
//! When the current page of a size class has no free block, mimalloc then serves a request
//! whose size is not a power of two by over-allocating `size + align - 1` bytes, which lands in
//! the next size class, and the right class never gets a fresh page (mimalloc issue 889). A
//! znode's allocation of 224 bytes (8-aligned) was taking a 256-byte block this way, about 30
//! MiB per million znodes. Every mimalloc block of at least 8 bytes is 8-aligned (block sizes
//! are multiples of 8 and pages start 16-aligned), so requests aligned to 8 or less take
//! `mi_malloc`, as the standard library's `System` allocator does with `malloc`.
//!
//! [`configure`] also shortens mimalloc's purge delay (how long freed pages stay resident
//! before they are returned to the system) from v3's 1 s to 10 ms, v2's default: a purge only
//! happens when the allocator next runs, so after a burst of load the pages it freed stayed
//! resident while the server idled (about 10 MiB after loading 1,000,000 znodes).
#![allow(unsafe_code)]

use std::alloc::GlobalAlloc;
use std::alloc::Layout;
use std::ffi::c_void;

use libmimalloc_sys as ffi;

/// `mi_option_purge_delay` in mimalloc v3's option enum (mimalloc.h).
const OPTION_PURGE_DELAY: ffi::mi_option_t = 15;
/// Milliseconds a freed page stays resident before it is returned to the system.
const PURGE_DELAY_MS: std::ffi::c_long = 10;

/// Sets mimalloc's options; call first thing in `main`. An option set in the environment
/// (`MIMALLOC_PURGE_DELAY`) wins.
pub fn configure() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() && std::env::var_os("MIMALLOC_RESET_DELAY").is_none() {
        // SAFETY: a plain C call setting an integer option.
        unsafe { ffi::mi_option_set(OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
    }
}

/// Alignment every mimalloc block of at least this many bytes has.
const PLAIN_ALIGN: usize = 8;

/// mimalloc as the global allocator (`#[global_allocator] static A: Mimalloc = Mimalloc;`).
pub struct Mimalloc;

fn plain(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

// SAFETY: every pointer handed out comes from mimalloc with at least the layout's size and
// alignment (mimalloc's own aligned calls where a plain block might not have it), and every
// pointer given back is freed or resized by mimalloc, which accepts pointers from any of its
// allocation calls.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain C calls; a null result is passed on as allocation failure.
        unsafe {
            if plain(layout.align(), layout.size()) {
                ffi::mi_malloc(layout.size()).cast()
            } else {
                ffi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe {
            if plain(layout.align(), layout.size()) {
                ffi::mi_zalloc(layout.size()).cast()
            } else {
                ffi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: the caller gives back a pointer this allocator returned.
        unsafe { ffi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller gives back a pointer this allocator returned; the alignment test
        // is on the new size, which the moved block must satisfy.
        unsafe {
            if plain(layout.align(), new_size) {
                ffi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                ffi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option index is the purge delay's: before `configure` it holds v3's default of
    /// 1000 ms (unless the environment set it), after it 10.
    #[test]
    fn configure_sets_the_purge_delay() {
        // SAFETY: plain C calls reading an integer option.
        let before = unsafe { ffi::mi_option_get(OPTION_PURGE_DELAY) };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() || std::env::var_os("MIMALLOC_RESET_DELAY").is_some() {
            return;
        }
        assert_eq!(before, 1000);
        configure();
        // SAFETY: as above.
        assert_eq!(unsafe { ffi::mi_option_get(OPTION_PURGE_DELAY) }, PURGE_DELAY_MS);
    }

    /// Every size and alignment up to a few KiB comes back aligned and usable, through alloc,
    /// alloc_zeroed and realloc (grow and shrink).
    #[test]
    fn blocks_have_their_alignment() {
        let a = Mimalloc;
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            for size in (1..600).chain([1000, 4096, 5000]) {
                let Ok(layout) = Layout::from_size_align(size, align) else { continue };
                // SAFETY: non-zero sizes; every block is freed with its layout.
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null() && (p as usize).is_multiple_of(align), "alloc {size}/{align}");
                    p.write_bytes(0xAB, size);
                    let z = a.alloc_zeroed(layout);
                    assert!(!z.is_null() && (z as usize).is_multiple_of(align), "zalloc {size}/{align}");
                    assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                    let grown = a.realloc(p, layout, size * 3);
                    assert!(!grown.is_null() && (grown as usize).is_multiple_of(align), "grow {size}/{align}");
                    assert_eq!(*grown.add(size - 1), 0xAB);
                    let grown_layout = Layout::from_size_align_unchecked(size * 3, align);
                    let shrunk = a.realloc(grown, grown_layout, size / 2 + 1);
                    assert!(!shrunk.is_null() && (shrunk as usize).is_multiple_of(align), "shrink {size}/{align}");
                    assert_eq!(*shrunk, 0xAB);
                    a.dealloc(shrunk, Layout::from_size_align_unchecked(size / 2 + 1, align));
                    a.dealloc(z, layout);
                }
            }
        }
    }
}
