//! Other processes the benchmarks start and measure: signals, CPU time, resident memory.

use std::time::Duration;

use rustix::process::{Pid, Signal};

/// Sends `signal` to `pid`; a process that already exited is not an error (nothing printed).
pub(crate) fn signal(pid: u32, signal: Signal) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// A process's CPU time as the kernel accounts it: in user space, and in the kernel on its
/// behalf (system calls; on loopback also the receiving side of TCP, which runs inside the
/// sender's send).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CpuTimes {
    pub user: Duration,
    pub system: Duration,
}

impl CpuTimes {
    pub(crate) fn total(self) -> Duration {
        self.user + self.system
    }

    /// What was used between `earlier` and `self` (zero where a counter went backwards: a
    /// process that exited in between).
    pub(crate) fn since(self, earlier: CpuTimes) -> CpuTimes {
        CpuTimes {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }

    /// The kernel's share of the total, if any time was used.
    pub(crate) fn system_share(self) -> Option<f64> {
        let total = self.total().as_secs_f64();
        (total > 0.0).then(|| self.system.as_secs_f64() / total)
    }
}

impl std::iter::Sum for CpuTimes {
    fn sum<I: Iterator<Item = CpuTimes>>(iter: I) -> CpuTimes {
        iter.fold(CpuTimes::default(), |a, b| CpuTimes {
            user: a.user + b.user,
            system: a.system + b.system,
        })
    }
}

/// utime and stime of a process (fields 14 and 15 of /proc/PID/stat, in USER_HZ = 100 ticks).
pub(crate) fn cpu_times(pid: u32) -> Option<CpuTimes> {
    parse_cpu_times(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// utime and stime of one thread of this process. (`/proc/TID/stat` would not do: for a
/// thread id it sums the whole thread group, like `/proc/PID/stat`.)
pub(crate) fn thread_cpu_times(tid: u32) -> Option<CpuTimes> {
    parse_cpu_times(&std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?)
}

fn parse_cpu_times(stat: &str) -> Option<CpuTimes> {
    // The command name (field 2) is in parentheses and may contain spaces.
    let after = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> Option<Duration> {
        let t: u64 = fields.get(i)?.parse().ok()?;
        Some(Duration::from_millis(t * 10))
    };
    Some(CpuTimes {
        user: ticks(11)?,
        system: ticks(12)?,
    })
}

/// Whether a child has exited but is not reaped yet (a zombie: its /proc entry still holds
/// its final CPU times), or is gone altogether.
pub(crate) fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat.get(i + 2..))
            .is_some_and(|rest| rest.starts_with('Z') || rest.starts_with('X')),
        Err(_) => true,
    }
}

/// utime + stime of a process.
pub(crate) fn cpu_time(pid: u32) -> Option<Duration> {
    cpu_times(pid).map(CpuTimes::total)
}

/// Resident memory of a process in bytes (VmRSS of /proc/PID/status).
pub(crate) fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_and_cpu_time_and_a_gone_process_has_neither() {
        let me = std::process::id();
        assert!(rss_bytes(me).unwrap() > 1 << 20);
        let until = std::time::Instant::now() + Duration::from_millis(30);
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        assert!(cpu_time(me).is_some());
        assert!(!exited(me));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(rss_bytes(pid), None);
        signal(pid, Signal::TERM); // silently nothing
    }

    /// The CPU times of a shell command, read from its zombie before it is reaped.
    fn times_of(command: &str) -> CpuTimes {
        let mut child = std::process::Command::new("sh")
            .args(["-c", command])
            .spawn()
            .unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            if stat[stat.rfind(')').unwrap() + 2..].starts_with('Z') {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{command} still runs");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(exited(pid), "a zombie has exited");
        let times = cpu_times(pid).unwrap();
        child.wait().unwrap();
        times
    }

    #[test]
    fn cpu_time_is_split_between_user_space_and_the_kernel() {
        // Reading /dev/zero is the kernel clearing memory; a shell loop is all user space.
        let kernel = times_of("exec dd if=/dev/zero of=/dev/null bs=1M count=20000 status=none");
        let user = times_of("i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done");
        assert!(kernel.system_share().unwrap() > 0.5, "{kernel:?}");
        // Clearing 20 GB takes a third of a second even at 60 GB/s: ticks count 10 ms each.
        assert!(kernel.total() >= Duration::from_millis(150), "{kernel:?}");
        assert!(user.system_share().unwrap() < 0.5, "{user:?}");
        assert_eq!(kernel.total(), kernel.user + kernel.system);
        let both = [kernel, user].into_iter().sum::<CpuTimes>();
        assert_eq!(both.since(user), kernel);
        assert_eq!(user.since(both), CpuTimes::default(), "never negative");
        assert_eq!(CpuTimes::default().system_share(), None);
    }
}
