//! The raw cipher's cost, measured in the same run as the server it is compared with: sealing
//! and opening records of the benchmark's READ size with the protocol's own record layer
//! (the cipher the run uses), in place, single-threaded, in CPU time.

use std::time::Duration;

use protocol::record::{Cipher, HEADER_LEN, Opener, RecordKey, RecordStart, Sealer};
use serde::Serialize;

/// CPU seconds per GB (10^9 bytes of payload) for each direction.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct CipherCost {
    pub seal_cpu_s_per_gb: f64,
    pub open_cpu_s_per_gb: f64,
}

/// Seals (and opens) `record` -byte payloads for about `budget` of CPU time each; the best of
/// three rounds, so a preempted round does not count.
///
/// One buffer is sealed and opened in place over and over, as sfsd seals a READ reply and the
/// client opens it: no copy of the payload is counted, only the cipher and the record
/// framing, so the servers' costs are compared with the cipher itself. (Until November 2026
/// the payload was copied into the record first, which added 5-8% here.)
pub(crate) fn measure(cipher: Cipher, record: usize, budget: Duration) -> CipherCost {
    let key: RecordKey = [7; 32];
    let max = record + 1024;
    let mut best_seal = f64::INFINITY;
    let mut best_open = f64::INFINITY;
    for _ in 0..3 {
        let mut sealer = Sealer::with_cipher(cipher, &key, max);
        let mut opener = Opener::with_cipher(cipher, &key, max);
        let mut buf = vec![0x5au8; HEADER_LEN + record];
        let (mut seal_bytes, mut seal_time) = (0usize, Duration::ZERO);
        let (mut open_bytes, mut open_time) = (0usize, Duration::ZERO);
        while seal_time < budget / 3 {
            buf.truncate(HEADER_LEN + record); // the opened payload, without the old tag
            let t = thread_cpu_time();
            sealer
                .finish(&mut buf, RecordStart::BUFFER_START)
                .expect("a record within the limit seals");
            seal_time += thread_cpu_time().saturating_sub(t);
            seal_bytes += record;
            let t = thread_cpu_time();
            let opened = opener
                .open_in_place(&mut buf)
                .expect("our own record opens")
                .len();
            open_time += thread_cpu_time().saturating_sub(t);
            open_bytes += opened;
        }
        best_seal = best_seal.min(per_gb(seal_time, seal_bytes));
        best_open = best_open.min(per_gb(open_time, open_bytes));
    }
    CipherCost {
        seal_cpu_s_per_gb: best_seal,
        open_cpu_s_per_gb: best_open,
    }
}

fn per_gb(t: Duration, bytes: usize) -> f64 {
    t.as_secs_f64() / (bytes as f64 / 1e9).max(1e-12)
}

/// CPU time of the calling thread.
fn thread_cpu_time() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cipher_costs_something_and_less_than_a_second_per_megabyte() {
        for cipher in [Cipher::ChaCha20Poly1305, Cipher::Aes256Gcm] {
            let c = measure(cipher, 64 * 1024, Duration::from_millis(30));
            assert!(c.seal_cpu_s_per_gb > 0.001, "{cipher:?} {c:?}");
            assert!(c.seal_cpu_s_per_gb < 1000.0, "{cipher:?} {c:?}");
            assert!(
                c.open_cpu_s_per_gb > 0.001 && c.open_cpu_s_per_gb < 1000.0,
                "{cipher:?} {c:?}"
            );
        }
    }
}
