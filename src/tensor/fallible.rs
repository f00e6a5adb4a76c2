//! Allocations whose failure the caller handles: a tensor's buffer that the memory budget
//! (§15) let through but the system refuses becomes E0601 naming the tensor. A process's
//! allocator that ends the process on a refused allocation (the `tl` binary's) asks
//! [`is_handled`] first and returns null instead, so the library reports it.

use std::cell::Cell;

thread_local! {
    static HANDLED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, whose allocations' failures it handles (`try_reserve`, a null from the
/// allocator turned into `None`).
pub fn handled<T>(f: impl FnOnce() -> T) -> T {
    let was = HANDLED.with(|h| h.replace(true));
    let out = f();
    HANDLED.with(|h| h.set(was));
    out
}

/// Whether the allocation being made now is inside [`handled`].
pub fn is_handled() -> bool {
    HANDLED.try_with(Cell::get).unwrap_or(false)
}
