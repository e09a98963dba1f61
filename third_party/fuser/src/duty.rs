//! Which of the pinned event loop threads read the kernel's requests (sfs's patch, see
//! `Config::pin_threads`).
//!
//! The kernel hands a request to the threads blocked reading `/dev/fuse` in the order they
//! started waiting, whatever CPU its caller runs on. With one thread pinned to each CPU, the
//! requests of a program that stays on one CPU therefore alternate between the threads, and
//! every other one wakes a thread on another CPU: on the 2-vCPU virtual machines measured, a
//! request answered in the process took 32-37 us that way, and 15 us with only the thread on
//! the caller's CPU reading.
//!
//! So a thread of its own looks, now and then (at most once per [`LOOK_EVERY`]), at the CPU
//! the caller of a request just read last ran on, in `/proc/PID/stat`: the caller sleeps
//! there until answered, and wakes there if that CPU is free. Not the reading threads
//! themselves: reading a process's `stat` waits while that process is in the middle of an
//! `execve`, which may itself wait for a request of this file system (the program's file),
//! and a reading thread must never wait for a request only it could read. When the last
//! [`LOOKS`] looks all found the callers on one CPU, only that CPU's thread reads; as soon
//! as a look finds a caller elsewhere (a program the scheduler moved, or programs on several
//! CPUs at once), every thread reads again, as without this patch. Neither way does a thread wait for the
//! file system's work while others wait to read (sfs answers or parks every request at
//! once), so one reading thread is no bottleneck: it is what fuser runs with on one CPU.

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

/// The least time between two looks at a caller's CPU (a look costs about 10 us, and a
/// wake-up of the looking thread).
const LOOK_EVERY: Duration = Duration::from_millis(4);
/// Looks in a row that must agree on one CPU before only its thread reads.
const LOOKS: usize = 4;

/// The reading duty of a session's pinned threads: thread `i` runs on `cpus[i]`.
pub(crate) struct Duty {
    cpus: Vec<usize>,
    /// Callers for the looking thread to look at: at most one waits, the rest are dropped.
    to_look: SyncSender<u32>,
    state: Mutex<State>,
    /// One per thread, so that a change wakes only the threads it lets read.
    turn: Vec<Condvar>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Readers {
    Everyone,
    Only(usize),
}

struct State {
    readers: Readers,
    /// The session ended: every thread returns.
    ended: bool,
    /// The threads of the CPUs the last looks found callers on, the newest at `looks[next - 1]`.
    looks: [Option<usize>; LOOKS],
    next: usize,
    /// Looks taken so far.
    taken: u64,
}

impl Duty {
    /// Every thread reads until the looks agree. Starts the looking thread, which ends with
    /// the duty.
    pub(crate) fn start(cpus: Vec<usize>) -> Arc<Duty> {
        let (to_look, callers) = sync_channel(1);
        let turn = cpus.iter().map(|_| Condvar::new()).collect();
        let duty = Arc::new(Duty {
            cpus,
            to_look,
            state: Mutex::new(State {
                readers: Readers::Everyone,
                ended: false,
                looks: [None; LOOKS],
                next: 0,
                taken: 0,
            }),
            turn,
        });
        let weak = Arc::downgrade(&duty);
        let started = std::thread::Builder::new()
            .name("fuse-caller-cpu".into())
            .spawn(move || look(&weak, &callers));
        if let Err(e) = started {
            log::warn!("cannot start the thread that looks where callers run ({e})");
        }
        duty
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until thread `me` may read: false if the session ended instead.
    pub(crate) fn wait_turn(&self, me: usize) -> bool {
        let mut s = self.state();
        while !s.ended && !s.readers.let_read(me) {
            s = self.turn[me].wait(s).unwrap_or_else(|p| p.into_inner());
        }
        !s.ended
    }

    /// Ends the session for every thread (a thread saw the device go, or left its loop).
    pub(crate) fn end(&self) {
        self.state().ended = true;
        for t in &self.turn {
            t.notify_one();
        }
    }

    /// Called by a thread after it read a request of process `pid` (0: the kernel's own):
    /// hands the caller to the looking thread, unless one already waits for it.
    pub(crate) fn after_request(&self, pid: u32) {
        if pid != 0 {
            let _ = self.to_look.try_send(pid);
        }
    }

    /// A look found a caller on `cpu`.
    fn caller_seen_on(&self, cpu: usize) {
        self.note(self.cpus.iter().position(|&c| c == cpu));
    }

    /// Notes a look that found a caller with `thread` (None: on a CPU without one), and lets
    /// the threads read accordingly.
    fn note(&self, thread: Option<usize>) {
        let mut s = self.state();
        let at = s.next;
        s.taken += 1;
        s.looks[at] = thread;
        s.next = (at + 1) % LOOKS;
        let readers = match s.looks {
            [Some(t), ref rest @ ..] if rest.iter().all(|&l| l == Some(t)) => Readers::Only(t),
            _ => Readers::Everyone,
        };
        if readers == s.readers {
            return;
        }
        s.readers = readers;
        log::debug!("reading threads: {readers:?}");
        match readers {
            Readers::Only(t) => self.turn[t].notify_one(),
            Readers::Everyone => self.turn.iter().for_each(Condvar::notify_one),
        }
    }
}

impl Readers {
    fn let_read(self, thread: usize) -> bool {
        match self {
            Readers::Everyone => true,
            Readers::Only(t) => t == thread,
        }
    }
}

/// The looking thread: looks where each caller handed to it runs, at most once per
/// [`LOOK_EVERY`], until the duty ends.
fn look(duty: &Weak<Duty>, callers: &Receiver<u32>) {
    while let Ok(pid) = callers.recv() {
        let cpu = caller_cpu(pid);
        let Some(duty) = duty.upgrade() else { return };
        if let Some(cpu) = cpu {
            duty.caller_seen_on(cpu);
        }
        drop(duty);
        std::thread::sleep(LOOK_EVERY);
    }
}

/// The CPU thread `pid` last ran on (field 39 of `/proc/PID/stat`), if it still exists.
fn caller_cpu(pid: u32) -> Option<usize> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    cpu_of_stat(&stat)
}

/// Field 39 ("processor") of a `/proc/PID/stat` line. The command name (field 2) is in
/// parentheses and may itself hold spaces and parentheses, so fields are counted from the
/// last `)`: the state (field 3) is the first after it.
fn cpu_of_stat(stat: &[u8]) -> Option<usize> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    rest.split_ascii_whitespace().nth(39 - 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn the_cpu_field_is_counted_after_the_command_name() {
        // A command name with spaces and parentheses, as a program may name itself.
        let mut line = b"4242 (a) b (c) S".to_vec();
        for field in 4..=52 {
            let value = if field == 39 { 7 } else { field };
            line.extend_from_slice(format!(" {value}").as_bytes());
        }
        assert_eq!(cpu_of_stat(&line), Some(7));
        assert_eq!(cpu_of_stat(b"4242 (short) S 1 2"), None);
        assert_eq!(cpu_of_stat(b"no parenthesis"), None);
    }

    #[test]
    fn a_threads_cpu_is_read_from_proc() {
        let me = nix::unistd::gettid().as_raw() as u32;
        // SAFETY: sysconf takes an integer and touches no memory of ours.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        let seen = caller_cpu(me).expect("this thread's stat");
        assert!((seen as i64) < cpus.max(1), "{seen} of {cpus}");
        assert_eq!(caller_cpu(u32::MAX), None, "no such thread");
    }

    #[test]
    fn one_thread_reads_once_the_looks_agree_and_everyone_at_the_first_that_does_not() {
        // Threads on CPUs 4, 6 and 9.
        let d = Duty::start(vec![4, 6, 9]);
        let readers = |d: &Duty| d.state().readers;
        assert_eq!(readers(&d), Readers::Everyone, "at the start");
        for _ in 1..LOOKS {
            d.caller_seen_on(6);
            assert_eq!(readers(&d), Readers::Everyone, "not yet");
        }
        d.caller_seen_on(6);
        assert_eq!(readers(&d), Readers::Only(1));
        d.caller_seen_on(4);
        assert_eq!(readers(&d), Readers::Everyone, "a caller elsewhere");
        for _ in 1..LOOKS {
            d.caller_seen_on(9);
        }
        assert_eq!(readers(&d), Readers::Everyone, "the older look still disagrees");
        d.caller_seen_on(9);
        assert_eq!(readers(&d), Readers::Only(2));
        for _ in 0..LOOKS {
            d.caller_seen_on(3);
        }
        assert_eq!(readers(&d), Readers::Everyone, "callers on a CPU without a thread");
    }

    #[test]
    fn callers_are_looked_at_on_a_thread_of_their_own_at_most_once_per_interval() {
        let d = Duty::start(vec![0, 1]);
        let me = nix::unistd::gettid().as_raw() as u32;
        let taken = |d: &Duty| d.state().taken;
        d.after_request(0);
        std::thread::sleep(LOOK_EVERY * 10);
        assert_eq!(taken(&d), 0, "the kernel's own request is not looked at");
        let begin = std::time::Instant::now();
        while begin.elapsed() < LOOK_EVERY * 20 {
            d.after_request(me);
        }
        std::thread::sleep(LOOK_EVERY * 5);
        let n = taken(&d);
        assert!((1..=26).contains(&n), "{n} looks in 20 intervals");
        let weak = Arc::downgrade(&d);
        drop(d);
        std::thread::sleep(LOOK_EVERY * 5);
        assert!(weak.upgrade().is_none(), "the looking thread holds no duty alive");
    }

    #[test]
    fn only_the_threads_let_read_read_and_a_change_wakes_them() {
        let d = Duty::start(vec![4, 6, 9]);
        for _ in 0..LOOKS {
            d.caller_seen_on(4);
        }
        let reads = Arc::new(AtomicUsize::new(0));
        let thread = |i| {
            let (d, reads) = (d.clone(), reads.clone());
            std::thread::spawn(move || {
                let mine = d.wait_turn(i);
                reads.fetch_add(1, Ordering::SeqCst);
                mine
            })
        };
        let one = thread(1);
        assert!(d.wait_turn(0), "thread 0 reads");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(reads.load(Ordering::SeqCst), 0, "thread 1 waits its turn");
        for _ in 0..LOOKS {
            d.caller_seen_on(6);
        }
        assert!(one.join().unwrap(), "thread 1's turn, not the end");
        // Started only now: on the way from thread 0's turn to thread 1's, the first look
        // that disagrees lets every thread read, and a thread waiting then may take it.
        let two = thread(2);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(reads.load(Ordering::SeqCst), 1, "thread 2 waits");
        d.caller_seen_on(9);
        assert!(two.join().unwrap(), "everyone reads again");
        assert!(d.wait_turn(0));
    }

    #[test]
    fn the_end_releases_every_waiting_thread() {
        let d = Duty::start(vec![0, 1, 2]);
        for _ in 0..LOOKS {
            d.caller_seen_on(0);
        }
        let waiters: Vec<_> = (1..3)
            .map(|i| {
                let d = d.clone();
                std::thread::spawn(move || d.wait_turn(i))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        d.end();
        for w in waiters {
            assert!(!w.join().unwrap(), "woken by the end, not given a turn");
        }
        assert!(!d.wait_turn(0), "the reader too sees the end");
    }
}
