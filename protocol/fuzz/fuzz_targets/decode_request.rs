//! cargo-fuzz target: see `protocol::fuzzing::decode_request` for what is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| protocol::fuzzing::decode_request(data));
