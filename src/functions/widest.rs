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

/// Runs `k` on the widest vectors available.
pub(crate) fn widest<K: Vectorised>(k: K) -> K::Output {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the processor has AVX-512F, checked just above.
            return unsafe { on_avx512(k) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
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
