//! The `gemm` crate called directly on f32 square matrices, the baseline for the dense
//! benchmark's "our overhead" figure: `cargo bench --bench gemm_direct -- 1024 2048 --threads 1`
//! prints the best of ten runs per size in milliseconds, one `size ms` line each.

use std::time::Instant;

fn main() {
    let mut threads = 1usize;
    let mut sizes = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--threads" => threads = args.next().and_then(|t| t.parse().ok()).unwrap_or(1),
            // cargo bench passes `--bench` to every harness-less bench.
            "--bench" => {}
            size => sizes.extend(size.parse::<usize>().ok()),
        }
    }
    for n in sizes {
        let a: Vec<f32> = (0..n * n)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
            .collect();
        let b: Vec<f32> = (0..n * n)
            .map(|i| ((i * 104729) % 1000) as f32 / 1000.0)
            .collect();
        let mut c = vec![0f32; n * n];
        let parallelism = if threads > 1 {
            gemm::Parallelism::Rayon(threads)
        } else {
            gemm::Parallelism::None
        };
        let mut best = f64::INFINITY;
        for _ in 0..10 {
            let start = Instant::now();
            // SAFETY: a, b and c hold n×n row-major f32 elements and c aliases neither input.
            unsafe {
                gemm::gemm(
                    n,
                    n,
                    n,
                    c.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    a.as_ptr(),
                    1,
                    n as isize,
                    b.as_ptr(),
                    1,
                    n as isize,
                    0.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    parallelism,
                );
            }
            best = best.min(start.elapsed().as_secs_f64() * 1e3);
        }
        println!("{n} {best:.2}");
    }
}
