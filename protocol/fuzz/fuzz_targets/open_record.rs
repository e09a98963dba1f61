//! cargo-fuzz target: see `protocol::fuzzing::open_records` for what is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| protocol::fuzzing::open_records(data));
