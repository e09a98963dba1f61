//! Shared test scaffolding: every runtime configuration worth testing, and a bounded run.
#![allow(dead_code)]

use std::sync::mpsc;
use std::time::Duration;

use libcolor::{Builder, Error, Handle, QueueMode, Runtime, Stats};

/// Every flavour and queue arrangement the guarantees must hold for.
pub(crate) fn configurations() -> Vec<(&'static str, Builder)> {
    vec![
        ("uni", Runtime::builder().uniprocessor()),
        ("mp2-steal", Runtime::builder().workers(2)),
        ("mp4-steal", Runtime::builder().workers(4)),
        ("mp3-nosteal", Runtime::builder().workers(3).stealing(false)),
        (
            "mp3-shared",
            Runtime::builder().workers(3).queue_mode(QueueMode::Shared),
        ),
        ("mp4-window1", Runtime::builder().workers(4).window(1)),
    ]
}

/// Builds a runtime, lets `setup` schedule work, runs it on its own thread and fails the test
/// if it has not stopped within `limit` (instead of hanging the suite).
pub(crate) fn run_bounded(
    name: &str,
    builder: Builder,
    limit: Duration,
    setup: impl FnOnce(&Handle),
) -> Result<Stats, Error> {
    let runtime = builder.build().expect("runtime builds");
    setup(&runtime.handle());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(runtime.run());
    });
    match rx.recv_timeout(limit) {
        Ok(result) => result,
        Err(_) => panic!("{name}: runtime did not stop within {limit:?}"),
    }
}
