//! Record layer throughput beside the raw cipher, so its overhead is known.
//!
//! For each size:
//! - `cipher_encrypt`: ChaCha20-Poly1305 (ring) `seal_in_place_separate_tag` on a buffer, nothing else.
//! - `seal_in_place`: [`Sealer::finish`] on a payload already in the record buffer (the server's
//!   READ path: file bytes are read into the buffer, then sealed).
//! - `seal_into`: [`Sealer::seal_into`], which also copies the payload into the output.
//! - `cipher_decrypt` / `open_in_place`: the same for the receiving side; both get a fresh copy
//!   of the ciphertext from an untimed setup.
//!
//! Run: `cargo bench -p sfs-protocol --bench records`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use protocol::record::{HEADER_LEN, Opener, Sealer};
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, Tag, UnboundKey};

const KEY: [u8; 32] = [0x5a; 32];

fn bench_size(c: &mut Criterion, label: &str, n: usize) {
    let mut g = c.benchmark_group(format!("records_{label}"));
    g.throughput(Throughput::Bytes(n as u64));
    g.sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let payload: Vec<u8> = (0..n).map(|i| i as u8).collect();
    let cipher = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &KEY).unwrap());
    let nonce = || Nonce::assume_unique_for_key([0u8; 12]);
    let aad = (n as u32).to_be_bytes();

    let mut buf = payload.clone();
    g.bench_function("cipher_encrypt", |b| {
        b.iter(|| {
            let tag = cipher
                .seal_in_place_separate_tag(nonce(), Aad::from(aad), black_box(&mut buf))
                .unwrap();
            let _ = black_box(tag);
        })
    });

    let mut sealer = Sealer::new(&KEY, n);
    let mut out = Vec::with_capacity(n + 64);
    let start = sealer.begin(&mut out);
    out.extend_from_slice(&payload);
    g.bench_function("seal_in_place", |b| {
        b.iter(|| {
            out.truncate(HEADER_LEN + n);
            sealer.finish(black_box(&mut out), start).unwrap();
        })
    });

    let mut sealer = Sealer::new(&KEY, n);
    let mut out = Vec::with_capacity(n + 64);
    g.bench_function("seal_into", |b| {
        b.iter(|| {
            out.clear();
            sealer.seal_into(black_box(&payload), &mut out).unwrap();
        })
    });

    let mut ct = payload.clone();
    let tag: Tag = cipher
        .seal_in_place_separate_tag(nonce(), Aad::from(aad), &mut ct)
        .unwrap();
    g.bench_function("cipher_decrypt", |b| {
        b.iter_batched_ref(
            || ct.clone(),
            |ct| {
                cipher
                    .open_in_place_separate_tag(nonce(), Aad::from(aad), tag, black_box(ct), 0..)
                    .unwrap();
            },
            BatchSize::LargeInput,
        )
    });

    let record = Sealer::new(&KEY, n).seal(&payload).unwrap();
    g.bench_function("open_in_place", |b| {
        b.iter_batched_ref(
            || (Opener::new(&KEY, n), record.clone()),
            |(opener, rec)| {
                black_box(opener.open_in_place(black_box(rec)).unwrap());
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn records(c: &mut Criterion) {
    bench_size(c, "64KiB", 64 * 1024);
    bench_size(c, "1MiB", 1024 * 1024);
}

criterion_group!(benches, records);
criterion_main!(benches);
