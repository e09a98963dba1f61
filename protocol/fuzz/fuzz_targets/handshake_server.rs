//! cargo-fuzz target: see `protocol::fuzzing::server_handshake` for what is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| protocol::fuzzing::server_handshake(data));
