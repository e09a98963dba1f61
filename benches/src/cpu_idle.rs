//! How this machine's idle CPUs wait for work, printed beside benchmark figures.
//!
//! Every request through a mount wakes threads on other CPUs, and on a virtual machine
//! waking a halted virtual CPU costs a round trip through the host. The guest's `haltpoll`
//! idle driver polls for a while before halting (`guest_halt_poll_ns`), and that one setting
//! moved a two-process ping-pong across this machine's CPUs from 62 to 7 us, and sshfs's
//! untar from 345 to 728 entries/s, in one session (benches/README.md, "stop 44"). Figures
//! taken under different settings are not comparable, so the benchmarks say which held.

/// Where the kernel says how idle CPUs wait.
const DRIVER: &str = "/sys/devices/system/cpu/cpuidle/current_driver";
const GOVERNOR: &str = "/sys/devices/system/cpu/cpuidle/current_governor_ro";
const HALT_POLL_NS: &str = "/sys/module/haltpoll/parameters/guest_halt_poll_ns";

/// One line: the idle driver and governor, and the guest's polling limit where the
/// `haltpoll` driver runs.
pub(crate) fn describe() -> String {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    describe_from(
        read(DRIVER).as_deref(),
        read(GOVERNOR).as_deref(),
        read(HALT_POLL_NS).as_deref(),
    )
}

fn describe_from(driver: Option<&str>, governor: Option<&str>, poll_ns: Option<&str>) -> String {
    let (driver, governor) = (driver.map(str::trim), governor.map(str::trim));
    let mut line = match (driver, governor) {
        (Some(d), Some(g)) => format!("CPU idle: driver {d}, governor {g}"),
        (Some(d), None) => format!("CPU idle: driver {d}"),
        (None, Some(g)) => format!("CPU idle: governor {g}"),
        (None, None) => "CPU idle: unknown (no cpuidle in /sys)".to_string(),
    };
    let poll = poll_ns.and_then(|p| p.trim().parse::<u64>().ok());
    if driver == Some("haltpoll")
        && let Some(ns) = poll
    {
        if ns == 0 {
            line.push_str(
                ", guest_halt_poll_ns 0 (an idle virtual CPU halts at once: each wake-up \
                 across CPUs goes through the host)",
            );
        } else {
            line.push_str(&format!(
                ", guest_halt_poll_ns {ns} (an idle virtual CPU polls up to {} us before \
                 halting)",
                ns / 1000
            ));
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_virtual_machine_that_halts_at_once_says_so() {
        let d = describe_from(Some("haltpoll\n"), Some("haltpoll\n"), Some("0\n"));
        assert!(
            d.starts_with("CPU idle: driver haltpoll, governor haltpoll"),
            "{d}"
        );
        assert!(
            d.contains("guest_halt_poll_ns 0 (an idle virtual CPU halts at once"),
            "{d}"
        );
    }

    #[test]
    fn a_polling_limit_is_given_in_microseconds() {
        let d = describe_from(Some("haltpoll"), None, Some("50000"));
        assert_eq!(
            d,
            "CPU idle: driver haltpoll, guest_halt_poll_ns 50000 (an idle virtual CPU polls up \
             to 50 us before halting)"
        );
    }

    #[test]
    fn other_drivers_and_missing_files_are_named_plainly() {
        // The haltpoll module may be loaded while another driver runs: its limit is moot.
        assert_eq!(
            describe_from(Some("intel_idle"), Some("menu"), Some("200000")),
            "CPU idle: driver intel_idle, governor menu"
        );
        assert_eq!(
            describe_from(None, None, None),
            "CPU idle: unknown (no cpuidle in /sys)"
        );
        assert_eq!(
            describe_from(Some("haltpoll"), None, Some("garbage")),
            "CPU idle: driver haltpoll"
        );
    }
}
