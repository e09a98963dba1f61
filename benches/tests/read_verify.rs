//! `sfs-bench read --verify` against the real sfsd (issue: it once failed on every run because
//! it assumed replies come in the order of the requests, which the protocol does not promise).
//! Two workers and two clients make replies overtake each other; the run must check every byte
//! and pass, and the same run over a file with one byte changed must fail and say where.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// `cargo build -p sfsd` (another package: no `CARGO_BIN_EXE_sfsd` here); its executable.
fn sfsd() -> PathBuf {
    let out = Command::new(env!("CARGO"))
        .args([
            "build",
            "-p",
            "sfsd",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .stderr(Stdio::inherit())
        .output()
        .expect("run cargo build -p sfsd");
    assert!(out.status.success(), "cargo build -p sfsd failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == "sfsd")
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
        .expect("cargo did not report the sfsd executable")
}

fn verified_read(sfsd: &Path, workdir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sfs-bench"))
        .arg("read")
        .arg("--sfsd")
        .arg(sfsd)
        .arg("--workdir")
        .arg(workdir)
        .args([
            "--cpus",
            "2",
            "--modes",
            "mp",
            "--clients",
            "2",
            "--window",
            "8",
        ])
        .args(["--warmup", "0", "--duration", "1", "--reps", "1"])
        .args(["--file-size", "4MiB", "--chunk", "65536", "--verify"])
        .output()
        .expect("run sfs-bench")
}

#[test]
fn every_byte_is_checked_whatever_order_the_replies_come_in() {
    let sfsd = sfsd();
    let work = tempfile::tempdir().unwrap();
    let run = verified_read(&sfsd, work.path());
    let text = |o: &Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    assert!(
        run.status.success(),
        "verified read failed:\n{}",
        text(&run)
    );
    let row = text(&run)
        .lines()
        .find(|l| l.starts_with("mp "))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no mp row:\n{}", text(&run)));
    let mbps: f64 = row.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(mbps > 0.0, "nothing was read: {row}");

    // The same size with one byte changed: the bench keeps the file and must catch the byte.
    let file = work.path().join("export-0/data.bin");
    let mut bytes = std::fs::read(&file).unwrap();
    let at = 3 * 65536 + 17;
    bytes[at] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let run = verified_read(&sfsd, work.path());
    assert!(
        !run.status.success(),
        "a changed byte went unnoticed:\n{}",
        text(&run)
    );
    assert!(
        text(&run).contains(&format!("wrong byte at offset {at}")),
        "{}",
        text(&run)
    );
}
