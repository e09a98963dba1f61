//! Process CPU time, to report work per CPU-second beside wall-clock rates: on a shared
//! machine, wall-clock throughput moves with the neighbours' load, CPU cost much less.

use std::time::Duration;

/// User + system CPU time consumed so far by this process (all threads).
pub(crate) fn process_cpu_time() -> Duration {
    rusage(libc::RUSAGE_SELF)
}

/// User + system CPU time of this process's children that have been waited for.
pub(crate) fn children_cpu_time() -> Duration {
    rusage(libc::RUSAGE_CHILDREN)
}

fn rusage(who: libc::c_int) -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes a complete `rusage` into the pointer on success (return 0);
    // RUSAGE_SELF and RUSAGE_CHILDREN are always valid, and we only read the value after
    // checking the result.
    let usage = unsafe {
        if libc::getrusage(who, usage.as_mut_ptr()) != 0 {
            return Duration::ZERO;
        }
        usage.assume_init()
    };
    timeval(usage.ru_utime) + timeval(usage.ru_stime)
}

fn timeval(tv: libc::timeval) -> Duration {
    Duration::from_secs(tv.tv_sec.max(0) as u64) + Duration::from_micros(tv.tv_usec.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_advances_when_spinning() {
        // Spin until 20 ms of CPU time show (a loaded machine gives this thread only a share
        // of a CPU, so wall time is no measure), for at most 10 s of wall time.
        let before = process_cpu_time();
        let until = std::time::Instant::now() + Duration::from_secs(10);
        let mut x = 0u64;
        while process_cpu_time() - before < Duration::from_millis(20) {
            assert!(
                std::time::Instant::now() < until,
                "no CPU time counted after 10 s of spinning"
            );
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
    }

    #[test]
    fn children_cpu_time_counts_a_waited_child() {
        let before = children_cpu_time();
        let status = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
            .status()
            .unwrap();
        assert!(status.success());
        assert!(children_cpu_time() > before);
    }
}
