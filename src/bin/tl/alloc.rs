//! The process's allocator: mimalloc, which keeps freed large blocks for reuse (repeated
//! evaluations and training steps allocate tensors of the same sizes, which the system
//! allocator returns to the kernel and faults back in page by page), and which ends the
//! process with E0601 and exit code 1 where the system refuses memory, instead of the
//! standard library's abort (SIGABRT). The memory budget (§15) refuses programs before they
//! allocate; this catches what gets past it, a `--max-memory` above what the machine has.
//! Where the library handles a refusal itself (a tensor's buffer, `tensor::fallible`), the
//! null goes back to it, and its error names the tensor.

use std::alloc::{GlobalAlloc, Layout};
use std::io::Write;

pub struct Refusing;

// SAFETY: every call is mimalloc's own; a null result ends the process before anyone
// could use it, or goes to a caller that handles it (`tensor::fallible`).
unsafe impl GlobalAlloc for Refusing {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        checked(unsafe { mimalloc::MiMalloc.alloc(layout) }, layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        checked(
            unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) },
            layout.size(),
        )
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        checked(
            unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) },
            new_size,
        )
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }
}

fn checked(ptr: *mut u8, size: usize) -> *mut u8 {
    if ptr.is_null() && size > 0 && !tensor_logic::tensor::fallible::is_handled() {
        refused(size);
    }
    ptr
}

/// Reports the refusal and exits. The message is formatted on the stack: the heap is
/// what just failed.
fn refused(size: usize) -> ! {
    let mut buf = [0u8; 512];
    let mut out = std::io::Cursor::new(&mut buf[..]);
    let gib = size as f64 / (1u64 << 30) as f64;
    let _ = write!(
        out,
        "error[E0601]: the system would not give {gib:.2} GiB ({size} bytes) that the memory budget allowed\n  = lower `--max-memory` to what this machine has free, or make the program's tensors smaller\n"
    );
    let n = out.position() as usize;
    let _ = std::io::stderr().write_all(&buf[..n]);
    std::process::exit(1)
}
