//! cargo-fuzz target: see `protocol::fuzzing::login_verify` for what is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| protocol::fuzzing::login_verify(data));
