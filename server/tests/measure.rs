//! Serial-fraction measurement (ignored by default; run it in release mode):
//!
//! `cargo test --release -p sfsd --test measure -- --ignored --nocapture`
//!
//! K clients read one large, page-cached file over their own connection for a few seconds
//! (1 MiB READs, 4 in flight each); sfsd then stops on SIGTERM and prints libcolor's counters,
//! from which this prints the share of callback time spent in color 0. On a small machine the
//! clients compete with the server for the same CPUs.

mod common;

use std::time::{Duration, Instant};

use common::*;
use protocol::*;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore]
fn serial_fraction_of_a_bulk_read() {
    let clients = env_or("MEASURE_CLIENTS", 4) as usize;
    let secs = env_or("MEASURE_SECS", 5);
    let workers = env_or("MEASURE_WORKERS", 2).to_string();
    let size = 64usize << 20;
    let area = Area::new();
    std::fs::write(area.export().join("big"), vec![0x5au8; size]).unwrap();
    // Start with --uniprocessor when MEASURE_WORKERS=0.
    let mut s = if workers == "0" {
        Sfsd::start(area.path(), &["--anonymous-read", "--uniprocessor"])
    } else {
        Sfsd::start(area.path(), &["--anonymous-read", "--workers", &workers])
    };
    let deadline = Instant::now() + Duration::from_secs(secs);
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (name, addr) = (s.name.clone(), s.addr);
            std::thread::spawn(move || {
                let mut c = Client::connect(&name, addr);
                let root = c.mount(0);
                let f = c.lookup(0, root, "big").unwrap();
                let chunk = 1u64 << 20;
                let mut bytes = 0u64;
                let mut off = 0u64;
                let mut pending = std::collections::VecDeque::new();
                while Instant::now() < deadline {
                    while pending.len() < 4 {
                        pending.push_back(c.send(
                            0,
                            RequestOp::Read {
                                fh: f,
                                offset: off,
                                count: chunk as u32,
                            },
                        ));
                        off = (off + chunk) % size as u64;
                    }
                    let id = pending.pop_front().unwrap();
                    if let Ok(ReplyBody::Read { data, .. }) = c.wait_reply(id) {
                        bytes += data.len() as u64;
                    }
                }
                for id in pending {
                    let _ = c.wait_reply(id);
                }
                bytes
            })
        })
        .collect();
    let started = Instant::now();
    let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let elapsed = started.elapsed().as_secs_f64();
    assert!(s.terminate());
    let stats = s
        .stdout
        .lock()
        .unwrap()
        .iter()
        .find(|l| l.starts_with("sfsd-stats: "))
        .cloned()
        .unwrap();
    println!(
        "clients={clients} workers={workers} throughput={:.1} MiB/s",
        total as f64 / elapsed / (1 << 20) as f64
    );
    println!("{stats}");
}
