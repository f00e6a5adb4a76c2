//! Running a loop compiled for the widest vectors the processor has, chosen at run time:
//! the one home of the processor check and the `unsafe` call it allows. A [`Vectorised`]
//! loop is written plainly (the compiler vectorises it) and inlined into a copy compiled
//! for AVX-512, one for AVX2, and the portable one. Every instruction set gives the same
//! bits as long as each operation is rounded once and none is fused, which the loops keep
//! to (no `mul_add`).

/// A loop to run on the widest vectors; `run` must be `#[inline(always)]` so that it is
/// compiled into each copy.
pub(crate) trait Vectorised {
    /// What the loop returns.
    type Output;
    /// The loop.
    fn run(self) -> Self::Output;
}

/// A closure as a [`Vectorised`] loop, for loops whose arguments are many borrows: its body
/// is compiled into each copy where the compiler inlines it (a closure called once is).
pub(crate) struct Inlined<F>(pub(crate) F);

impl<R, F: FnOnce() -> R> Vectorised for Inlined<F> {
    type Output = R;
    #[inline(always)]
    fn run(self) -> R {
        (self.0)()
    }
}

/// The widest vectors allowed: `TL_MAX_SIMD=avx2` or `TL_MAX_SIMD=portable` caps the choice
/// (read once), so that tests can check that every path gives the same bits.
#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Cap {
    Portable,
    Avx2,
    Avx512,
}

fn cap() -> Cap {
    static CAP: std::sync::OnceLock<Cap> = std::sync::OnceLock::new();
    *CAP.get_or_init(|| match std::env::var("TL_MAX_SIMD").as_deref() {
        Ok("portable") => Cap::Portable,
        Ok("avx2") => Cap::Avx2,
        _ => Cap::Avx512,
    })
}

/// Runs `k` on the widest vectors available (and allowed).
pub(crate) fn widest<K: Vectorised>(k: K) -> K::Output {
    #[cfg(target_arch = "x86_64")]
    {
        let cap = cap();
        if cap >= Cap::Avx512 && std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the processor has AVX-512F, checked just above.
            return unsafe { on_avx512(k) };
        }
        if cap >= Cap::Avx2 && std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the processor has AVX2, checked just above.
            return unsafe { on_avx2(k) };
        }
    }
    k.run()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn on_avx512<K: Vectorised>(k: K) -> K::Output {
    k.run()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn on_avx2<K: Vectorised>(k: K) -> K::Output {
    k.run()
}
