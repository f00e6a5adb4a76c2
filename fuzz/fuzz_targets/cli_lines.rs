//! The line formats the CLI reads outside programs: a `--hosts` file and `tl watch`'s
//! `+Fact(..)`/`-Fact(..)` lines. Each must parse or be refused, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = tensor_logic::eval::parse_hosts(text);
    for line in text.lines() {
        if let Some(change) = tensor_logic::Change::parse(line) {
            assert!(!change.relation.is_empty());
        }
    }
});
