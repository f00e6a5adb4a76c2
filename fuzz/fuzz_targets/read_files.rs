//! Every file reader on arbitrary bytes (`.tsv`, `.csv`, `.npy`, `.safetensors`, `.txt`, and
//! checkpoints): each must give data or a diagnostic, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensor_logic::{RunOptions, Session, Settings};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, bytes)) = data.split_first() else { return };
    let ext = ["tsv", "csv", "npy", "safetensors", "txt"][pick as usize % 5];
    let Ok(dir) = tempfile::tempdir() else { return };
    let file = dir.path().join(format!("f.{ext}"));
    if std::fs::write(&file, bytes).is_err() {
        return;
    }
    let _ = tensor_logic::learn::checkpoint::load(&file);
    let mut s = Session::new();
    let src = format!("A = \"f.{ext}\"\nA?\n");
    if s.load_source("read.tl", &src, dir.path()).is_err() {
        return;
    }
    let settings = Settings { max_iters: 50, max_memory: 1 << 22, ..Settings::default() };
    let _ = s.run(&RunOptions { settings, ..RunOptions::default() });
});
