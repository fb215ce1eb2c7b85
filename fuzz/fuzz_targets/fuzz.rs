//! One libFuzzer binary for every target: `HOSTPULL_FUZZ_TARGET=NAME` picks
//! the contract check (src/contract.rs) each input runs through.

#![no_main]

use std::sync::OnceLock;

#[path = "../src/contract.rs"]
mod contract;

static TARGET: OnceLock<fn(&[u8])> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let check = TARGET.get_or_init(|| {
        let name = std::env::var("HOSTPULL_FUZZ_TARGET").expect("set HOSTPULL_FUZZ_TARGET");
        contract::TARGETS
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no fuzz target {name:?}"))
            .1
    });
    check(data);
});
