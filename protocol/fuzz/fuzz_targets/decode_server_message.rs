//! cargo-fuzz target: see `protocol::fuzzing::decode_server_message` for what is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| protocol::fuzzing::decode_server_message(data));
