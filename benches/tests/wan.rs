//! Smoke test of `sfs-bench wan`: a short HTTPS run over the emulated link must take at
//! least the RTT to its first byte and at least the link's serialisation time for the file,
//! and must leave no namespace behind. Lower bounds only: a busy machine may add any delay.
//! Needs root (network namespaces, TUN devices), nginx, curl and openssl; skipped with a
//! message otherwise.

use std::process::Command;

fn tool_missing(program: &str, arg: &str) -> bool {
    Command::new(program).arg(arg).output().is_err()
}

#[test]
fn an_https_download_over_the_link_is_delayed_and_rate_limited() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: sfs-bench wan needs root (network namespaces, TUN devices)");
        return;
    }
    for (program, arg) in [
        ("ip", "-V"),
        ("curl", "--version"),
        ("/usr/sbin/nginx", "-v"),
        ("openssl", "version"),
    ] {
        if tool_missing(program, arg) {
            eprintln!("skipped: {program} is not installed (scripts/bench-peers.sh)");
            return;
        }
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        eprintln!("skipped: no /dev/net/tun");
        return;
    }
    // A container may forbid namespaces even to root: then there is nothing to test here.
    let probe = format!("sfswan-probe-{}", std::process::id());
    let made = Command::new("ip")
        .args(["netns", "add", &probe])
        .output()
        .is_ok_and(|o| o.status.success());
    if !made {
        eprintln!("skipped: cannot create a network namespace here");
        return;
    }
    let _ = Command::new("ip").args(["netns", "del", &probe]).status();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("wan.json");
    let out = Command::new(env!("CARGO_BIN_EXE_sfs-bench"))
        .args([
            "wan",
            "--rate",
            "40mbit",
            "--rtt",
            "40",
            "--buffers",
            "default",
        ])
        .args([
            "--size",
            "2MiB",
            "--tools",
            "https",
            "--first-byte-reps",
            "1",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("TUNSETIFF") {
        eprintln!("skipped: no TUN devices here: {stderr}");
        return;
    }
    assert!(out.status.success(), "sfs-bench wan failed: {stderr}");
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&json)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let row = |kind: &str| {
        rows.iter()
            .find(|r| r["kind"] == kind && r["tool"] == "https")
            .unwrap_or_else(|| panic!("no {kind} https row in {rows:?}"))
    };
    // TCP handshake, TLS 1.3 handshake, request: at least 3 RTTs to the first byte.
    let first = row("first-byte")["first_byte_s"].as_f64().unwrap();
    assert!(
        first >= 3.0 * 0.040,
        "first byte after {first} s over a 40 ms RTT"
    );
    // 2 MiB at 40 Mbit/s is 0.42 s on the wire, plus the handshakes.
    let bulk = row("bulk");
    let wall = bulk["wall_s"].as_f64().unwrap();
    assert!(
        wall >= 0.42 + 0.08,
        "2 MiB in {wall} s: faster than 40 Mbit/s"
    );
    assert!(bulk["to_client"]["bytes"].as_u64().unwrap() >= 2 << 20);
    // Nothing left: the namespaces are named after the benchmark's pid.
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        !list.lines().any(|l| l.starts_with("sfswan-")
            && l.split('-')
                .nth(1)
                .and_then(|p| p.parse::<u32>().ok())
                .is_some_and(|p| { !std::path::Path::new(&format!("/proc/{p}")).exists() })),
        "namespaces left behind: {list}"
    );
}
