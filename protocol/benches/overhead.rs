//! The record layer's overhead over the raw cipher, measured robustly on a busy machine:
//! raw and record operations are interleaved round by round and the *minimum* time of each is
//! kept, so interference from other processes (which only ever adds time) cancels out.
//!
//! Run: `cargo bench -p sfs-protocol --bench overhead`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use protocol::record::{HEADER_LEN, Opener, Sealer};
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};

const KEY: [u8; 32] = [0x5a; 32];

fn time(f: &mut impl FnMut()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

fn measure(label: &str, n: usize, rounds: usize) {
    let cipher = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &KEY).unwrap());
    let nonce = || Nonce::assume_unique_for_key([0u8; 12]);
    let aad = (n as u32).to_be_bytes();
    let payload: Vec<u8> = (0..n).map(|i| i as u8).collect();

    // Sealing.
    let mut raw_buf = payload.clone();
    let mut raw_seal = || {
        let _ = black_box(
            cipher
                .seal_in_place_separate_tag(nonce(), Aad::from(aad), black_box(&mut raw_buf))
                .unwrap(),
        );
    };
    let mut sealer = Sealer::new(&KEY, n);
    let mut out = Vec::with_capacity(n + 64);
    let start = sealer.begin(&mut out);
    out.extend_from_slice(&payload);
    let mut seal = || {
        out.truncate(HEADER_LEN + n);
        sealer.finish(black_box(&mut out), start).unwrap();
    };

    // Opening: both decrypt a fresh copy of a valid ciphertext, copied outside the timing.
    let mut ct = payload.clone();
    let tag = cipher
        .seal_in_place_separate_tag(nonce(), Aad::from(aad), &mut ct)
        .unwrap();
    let record = Sealer::new(&KEY, n).seal(&payload).unwrap();
    let mut raw_work = ct.clone();
    let mut rec_work = record.clone();

    let (mut best_raw_seal, mut best_seal) = (Duration::MAX, Duration::MAX);
    let (mut best_raw_open, mut best_open) = (Duration::MAX, Duration::MAX);
    for _ in 0..rounds {
        best_raw_seal = best_raw_seal.min(time(&mut raw_seal));
        best_seal = best_seal.min(time(&mut seal));

        raw_work.copy_from_slice(&ct);
        best_raw_open = best_raw_open.min(time(&mut || {
            cipher
                .open_in_place_separate_tag(
                    nonce(),
                    Aad::from(aad),
                    tag,
                    black_box(&mut raw_work),
                    0..,
                )
                .unwrap();
        }));
        rec_work.copy_from_slice(&record);
        let mut opener = Opener::new(&KEY, n);
        best_open = best_open.min(time(&mut || {
            black_box(opener.open_in_place(black_box(&mut rec_work)).unwrap());
        }));
    }
    let mib = n as f64 / (1024.0 * 1024.0);
    let row = |what: &str, raw: Duration, ours: Duration| {
        println!(
            "{label:>6} {what:<5} raw cipher {:>9.1} us ({:>6.0} MiB/s)   record {:>9.1} us ({:>6.0} MiB/s)   overhead {:+.1}%",
            raw.as_secs_f64() * 1e6,
            mib / raw.as_secs_f64(),
            ours.as_secs_f64() * 1e6,
            mib / ours.as_secs_f64(),
            (ours.as_secs_f64() / raw.as_secs_f64() - 1.0) * 100.0
        );
    };
    row("seal", best_raw_seal, best_seal);
    row("open", best_raw_open, best_open);
}

fn main() {
    // `cargo test --benches` runs bench targets with no arguments besides --bench; keep that
    // quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let scale = if quick { 1 } else { 50 };
    measure("64KiB", 64 * 1024, 40 * scale);
    measure("1MiB", 1024 * 1024, 4 * scale);
}
