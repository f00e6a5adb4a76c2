//! Faults (issue 17): `tl run` and `tl train` killed at random moments leave every output and
//! checkpoint either as it was or complete, and a later run leaves no temporary file; a
//! write that fails midway is a clear error that keeps the old file.
#![cfg(unix)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A small deterministic generator of kill delays.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n.max(1)
    }
}

/// Starts `tl args` in `dir`, kills it with SIGKILL after `delay` (if still running), and
/// waits for it.
fn kill_after(dir: &Path, args: &[&str], delay: Duration) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tl"))
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(delay);
    let _ = child.kill();
    let _ = child.wait();
}

fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tl-"))
        .collect()
}

const PROGRAM: &str = "N : 300\nK = 1\nA : real[N, N]\nA[i, j] = K * i + j\nB[i] = K * A[i, j]\n\
    C[i, j] = A[i, j] * A[j, i] + K\n\"a.tsv\" = A\n\"b.npy\" = B\n\"c.tsv\" = C\n";
const OUTPUTS: [&str; 3] = ["a.tsv", "b.npy", "c.tsv"];

#[test]
fn killed_runs_leave_each_output_old_or_new_and_no_temporaries() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.tl"), PROGRAM).unwrap();
    // The complete outputs of the two versions a killed run may be between.
    let mut versions = Vec::new();
    let mut took = Duration::ZERO;
    for k in ["K=1", "K=2"] {
        let start = Instant::now();
        let out = common::tl(dir.path(), &["run", "p.tl", "--set", k]);
        took = took.max(start.elapsed());
        assert!(out.status.success(), "{}", common::stderr(&out));
        let files: Vec<Vec<u8>> = OUTPUTS
            .iter()
            .map(|f| std::fs::read(dir.path().join(f)).unwrap())
            .collect();
        versions.push(files);
    }
    let mut rng = Lcg(17);
    let span = took.as_micros() as u64 * 12 / 10;
    for i in 0..100 {
        let k = if i % 2 == 0 { "K=1" } else { "K=2" };
        let delay = Duration::from_micros(rng.below(span));
        kill_after(dir.path(), &["run", "p.tl", "--set", k], delay);
        for (n, f) in OUTPUTS.iter().enumerate() {
            let now = std::fs::read(dir.path().join(f)).unwrap();
            assert!(
                versions.iter().any(|v| v[n] == now),
                "after a kill at {delay:?}, `{f}` is neither version ({} bytes)",
                now.len()
            );
        }
    }
    let out = common::tl(dir.path(), &["run", "p.tl"]);
    assert!(out.status.success());
    assert_eq!(temporaries(dir.path()), Vec::<String>::new());
}

#[test]
fn killed_training_leaves_a_whole_checkpoint_and_no_temporaries() {
    let dir = tempfile::tempdir().unwrap();
    let src = "X = [[1, 0], [0, 1], [1, 1], [0, 0]]\nT = [1, 0, 1, 0]\nW : real[2]\nW ~ zeros\n\
        B ~ zeros\nY[e] = sig(W[i] X[e, i] + B)\nLoss = (Y[e] - T[e])^2\n";
    std::fs::write(dir.path().join("m.tl"), src).unwrap();
    let args = [
        "train",
        "m.tl",
        "--steps",
        "400",
        "--save",
        "ck.safetensors",
        "--save-every",
        "1",
        "--quiet",
    ];
    let start = Instant::now();
    let out = common::tl(dir.path(), &args);
    let took = start.elapsed();
    assert!(out.status.success(), "{}", common::stderr(&out));
    let mut rng = Lcg(29);
    let span = took.as_micros() as u64 * 12 / 10;
    for _ in 0..100 {
        let delay = Duration::from_micros(rng.below(span));
        kill_after(dir.path(), &args, delay);
        let ck = dir.path().join("ck.safetensors");
        let loaded = tensor_logic::learn::checkpoint::load(&ck);
        assert!(
            loaded.is_ok(),
            "after a kill at {delay:?}: {:?}",
            loaded.err()
        );
    }
    let out = common::tl(dir.path(), &args);
    assert!(out.status.success());
    assert_eq!(temporaries(dir.path()), Vec::<String>::new());
}

#[test]
fn a_write_that_fails_midway_is_an_error_and_keeps_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.tl"), PROGRAM).unwrap();
    let out = common::tl(dir.path(), &["run", "p.tl"]);
    assert!(out.status.success());
    let old = std::fs::read(dir.path().join("a.tsv")).unwrap();
    // A file-size limit of 64 KiB with its signal ignored: writing past it fails (EFBIG), as
    // a full disk does (ENOSPC).
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "trap '' XFSZ; ulimit -f 128; exec '{}' run p.tl --set K=2",
            env!("CARGO_BIN_EXE_tl")
        ))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot write `") && err.contains("a.tsv"),
        "{err}"
    );
    assert_eq!(std::fs::read(dir.path().join("a.tsv")).unwrap(), old);
    assert_eq!(temporaries(dir.path()), Vec::<String>::new());
}
