//! cargo-fuzz target: see `colorweb::fuzzing::parse_request` for what is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| colorweb::fuzzing::parse_request(data));
