//! Other processes the benchmarks start and measure: signals, CPU time, resident memory.

use std::time::Duration;

use rustix::process::{Pid, Signal};

/// Sends `signal` to `pid`; a process that already exited is not an error (nothing printed).
pub fn signal(pid: u32, signal: Signal) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// utime + stime of a process (fields 14 and 15 of /proc/PID/stat, in USER_HZ = 100 ticks).
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces.
    let after = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// Resident memory of a process in bytes (VmRSS of /proc/PID/status).
pub fn rss_bytes(pid: u32) -> Option<u64> {
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
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(rss_bytes(pid), None);
        signal(pid, Signal::TERM); // silently nothing
    }
}
