//! `sfs-bench wan`: sfs over a long fat link, on one machine, beside HTTPS and sftp.
//!
//! This kernel has no `netem` qdisc, so the link is built in user space: two network
//! namespaces joined by two TUN devices and a relay (threads of this process) that delays
//! every packet by RTT/2 each way and serialises it at `--rate` behind a drop-tail queue
//! ([`relay`]). The servers (sfsd, nginx with TLS 1.3, OpenSSH's sshd) run in namespace `b`,
//! the clients (`sfs get`/`put`, curl, sftp) in namespace `a`; one end-to-end TCP connection
//! per transfer crosses the relay, with the kernel's own congestion control at both ends.
//!
//! For each RTT and buffer setting it measures, side by side, a bulk download of the same
//! file with each tool (and `sfs put` of a local copy) and the time to fetch a 1-byte file
//! end to end (the `sfs get` process from start to exit against curl's time to first byte and
//! total time), the number issue work aims to bring to about 3 RTTs for sfs.

mod link;
mod peers;
mod relay;
mod report;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::read::{BENCH_USER, DATA_FILE, parse_size, prepare_exports};
use crate::report::median;
use link::{Buffers, Link, TunMode};
use peers::{ClientRun, SfsClient};
use relay::LinkShape;
use report::Row;

/// The 1-byte file of the first-byte measurements.
const TINY_FILE: &str = "tiny.bin";

#[derive(clap::Args, Debug)]
pub(crate) struct WanArgs {
    /// Link rate, e.g. 1gbit, 100mbit, 500kbit (bits per second; 0 for no limit)
    #[arg(long, default_value = "1gbit", value_parser = parse_rate)]
    rate: u64,
    /// Round-trip times in milliseconds (each a separate link)
    #[arg(long, value_delimiter = ',', default_value = "50,100")]
    rtt: Vec<f64>,
    /// Size of the file transferred, e.g. 256MiB (smaller for quick runs)
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    size: u64,
    /// TCP buffer limits in both namespaces: `default` (what a new namespace starts with:
    /// the root namespace's tcp_rmem and tcp_wmem), `large` (their maxima raised to 64 MiB)
    #[arg(long, value_delimiter = ',', default_value = "default,large")]
    buffers: Vec<Buffers>,
    /// Drop-tail queue of the link in bytes [default: one bandwidth-delay product, at least
    /// 1 MiB]
    #[arg(long, value_parser = parse_size)]
    queue: Option<u64>,
    /// MTU of the TUN devices (the MSS TCP uses is 52 bytes less)
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// No segmentation offload through the TUN devices: every MTU-sized packet crosses the
    /// relay on its own (then use a large --mtu such as 65520, or the relay's packet rate
    /// limits the link). By default the devices carry virtio-net headers with TSO, as a VM's
    /// virtio-net does: TCP segments at the MTU while the relay moves 64 KiB super-packets
    #[arg(long)]
    no_gso: bool,
    /// Tools measured
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "https,sfs-get,sfs-put,sftp"
    )]
    tools: Vec<Tool>,
    /// Repetitions of each bulk transfer (medians)
    #[arg(long, default_value_t = 1)]
    reps: usize,
    /// Repetitions of each first-byte fetch (medians); 0 to skip them
    #[arg(long, default_value_t = 5)]
    first_byte_reps: usize,
    /// sfsd worker threads [default: this machine's CPUs]
    #[arg(long)]
    workers: Option<usize>,
    /// Write one JSON object per measurement and line to FILE
    #[arg(long)]
    json: Option<PathBuf>,
    /// The sfsd binary [default: next to sfs-bench]
    #[arg(long)]
    sfsd: Option<PathBuf>,
    /// The sfs binary [default: next to sfs-bench]
    #[arg(long)]
    sfs: Option<PathBuf>,
    /// Measure nothing: print the tables of the measurements a previous run wrote with
    /// --json to FILE
    #[arg(long, value_name = "FILE")]
    from_json: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Tool {
    /// curl from nginx over TLS 1.3 (AES-256-GCM) to a file in /dev/shm
    Https,
    /// `sfs get` to a file in /dev/shm
    SfsGet,
    /// `sfs put` of a local file of the same size
    SfsPut,
    /// OpenSSH sftp `get` to a file in /dev/shm (aes256-gcm)
    Sftp,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Https => "https",
            Tool::SfsGet => "sfs-get",
            Tool::SfsPut => "sfs-put",
            Tool::Sftp => "sftp",
        }
    }
}

/// Parses `1gbit`, `100mbit`, `500kbit`, `1000000` (bits per second).
pub(crate) fn parse_rate(text: &str) -> Result<u64, String> {
    let t = text.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a rate like 1gbit"))?;
    let scale = match unit.trim().trim_end_matches("/s").trim_end_matches("ps") {
        "" | "bit" | "b" => 1.0,
        "kbit" | "k" => 1e3,
        "mbit" | "m" => 1e6,
        "gbit" | "g" => 1e9,
        other => {
            return Err(format!(
                "unknown rate unit `{other}` (use kbit, mbit, gbit)"
            ));
        }
    };
    Ok((n * scale).round() as u64)
}

/// What every link setting shares.
struct Bench {
    sfsd: PathBuf,
    client: SfsClient,
    work: PathBuf,
    export: PathBuf,
    users: PathBuf,
    local_file: PathBuf,
    /// Where every download goes (each tool writes a file there, deleted after each run): in
    /// memory (/dev/shm) where there is one, so no disk is involved.
    sink: PathBuf,
    size: u64,
    workers: usize,
    tools: Vec<Tool>,
    reps: usize,
    first_byte_reps: usize,
}

pub(crate) fn run(args: WanArgs) -> anyhow::Result<()> {
    if let Some(path) = &args.from_json {
        return report::replay(path);
    }
    if !rustix::process::geteuid().is_root() {
        bail!("sfs-bench wan needs root (network namespaces and TUN devices)");
    }
    if args.reps == 0 || args.rtt.is_empty() || args.buffers.is_empty() {
        bail!("--reps, --rtt and --buffers need at least one value");
    }
    if !(576..=65535).contains(&args.mtu) {
        bail!("--mtu must be within 576..=65535");
    }
    peers::available("ip")?;
    link::install_signal_cleanup();
    let mut tools = Vec::new();
    for &t in &args.tools {
        let needs: &[&str] = match t {
            Tool::Https => &["curl", "nginx", "openssl"],
            Tool::Sftp => &["sshd", "sftp"],
            Tool::SfsGet | Tool::SfsPut => &[],
        };
        match needs.iter().try_for_each(|n| peers::available(n)) {
            Ok(()) => tools.push(t),
            Err(e) => eprintln!("note: skipping {}: {e:#}", t.name()),
        }
    }
    let sfsd = crate::read::servers::locate_sfsd(args.sfsd.as_deref())?;
    let sfs = crate::read::servers::locate_binary("sfs", args.sfs.as_deref())?;
    let scratch = tempfile::tempdir().context("creating a work directory")?;
    let work = scratch.path().to_path_buf();
    link::Cleanup::add_dir(&work);
    let export = prepare_exports(&work, 1, DATA_FILE, args.size)?.remove(0);
    std::fs::write(export.join(TINY_FILE), b"x")?;
    let local_dir = prepare_exports(&work.join("local"), 1, DATA_FILE, args.size)?.remove(0);
    let sink_dir = tempfile::tempdir_in(if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    })
    .context("creating a directory for downloads")?;
    link::Cleanup::add_dir(sink_dir.path());
    let identity = work.join("identity");
    let public = crate::read::servers::sfs_keygen(&sfs, &work, &identity)?;
    let users = work.join("users");
    crate::read::servers::write_users_file(&users, BENCH_USER, &public, &export)?;
    let bench = Bench {
        sfsd,
        client: SfsClient {
            sfs,
            identity,
            user: BENCH_USER.into(),
            home: work.clone(),
        },
        export,
        users,
        local_file: local_dir.join(DATA_FILE),
        sink: sink_dir.path().join("download.bin"),
        size: args.size,
        workers: args.workers.unwrap_or_else(libcolor::available_cpus),
        tools,
        reps: args.reps,
        first_byte_reps: args.first_byte_reps,
        work,
    };
    let tun = TunMode {
        mtu: args.mtu,
        gso: !args.no_gso,
    };
    if !tun.gso && tun.mtu < 9000 {
        eprintln!(
            "note: without offload each {}-byte packet crosses the relay alone; the relay may \
             limit the link (use --mtu 65520)",
            tun.mtu
        );
    }
    let mut rows = Vec::new();
    for &rtt in &args.rtt {
        for &buffers in &args.buffers {
            let bdp = (args.rate as f64 * rtt / 1000.0 / 8.0) as u64;
            let shape = LinkShape {
                one_way: Duration::from_secs_f64(rtt / 2000.0),
                rate_bps: args.rate,
                queue_bytes: args.queue.unwrap_or(bdp.max(1 << 20)),
                header_bytes: 0,
            };
            eprintln!(
                "wan: rtt {rtt} ms, {} Mbit/s, queue {} KiB, mtu {}{}, buffers {buffers:?}",
                args.rate as f64 / 1e6,
                shape.queue_bytes >> 10,
                tun.mtu,
                if tun.gso { " with gso" } else { "" }
            );
            let link = Link::new(shape, tun, buffers)?;
            eprintln!(
                "  namespaces {} / {}; congestion control {}; tcp_rmem {}; tcp_wmem {}",
                link.ns_a,
                link.ns_b,
                link.sysctl_a("net.ipv4.tcp_congestion_control"),
                link.sysctl_a("net.ipv4.tcp_rmem"),
                link.sysctl_a("net.ipv4.tcp_wmem"),
            );
            let measured = measure_setting(&bench, &link, rtt, args.rate, buffers)
                .with_context(|| format!("rtt {rtt} ms, buffers {buffers:?}"));
            drop(link);
            rows.extend(measured?);
        }
    }
    println!();
    println!(
        "wan: {} Mbit/s link, {} MiB file, mtu {}{}, one run (ratios are within it)",
        args.rate as f64 / 1e6,
        args.size >> 20,
        tun.mtu,
        if tun.gso { " with gso" } else { "" }
    );
    report::print(&rows);
    if let Some(path) = &args.json {
        crate::report::write_json_lines(path, &rows)?;
    }
    Ok(())
}

/// One measurement's raw numbers.
struct Sample {
    run: ClientRun,
    server_cpu: f64,
    relay_cpu: f64,
    /// The kernel's share of the relay's CPU time.
    relay_kernel: Option<f64>,
    to_client: relay::Counts,
    to_server: relay::Counts,
    curl: Option<peers::CurlTimes>,
}

/// Runs one client while sampling the server's and the relay's CPU and counting packets.
fn sample(
    link: &Link,
    server: &peers::NsServer,
    cmd: std::process::Command,
    stdin: Option<&str>,
    what: &str,
    sink: &std::path::Path,
) -> anyhow::Result<Sample> {
    let relay = link.relay();
    let (c0, s0) = (relay.stats[1].snapshot(), relay.stats[0].snapshot());
    let relay0 = relay.cpu_times();
    let sampler = peers::sample_server(server);
    let run = peers::run_client(cmd, stdin, what);
    let _ = std::fs::remove_file(sink);
    let server_cpu = peers::cpu_s(sampler.finish());
    let run = run?;
    let diff = |now: relay::Counts, then: relay::Counts| relay::Counts {
        packets: now.packets - then.packets,
        bytes: now.bytes - then.bytes,
        dropped: now.dropped - then.dropped,
        write_errors: now.write_errors - then.write_errors,
    };
    let curl = run
        .stdout
        .contains("sfs-bench-curl")
        .then(|| peers::parse_curl(&run.stdout))
        .transpose()?;
    Ok(Sample {
        server_cpu,
        relay_cpu: peers::cpu_s(relay.cpu_times().since(relay0)),
        relay_kernel: relay.cpu_times().since(relay0).system_share(),
        to_client: diff(relay.stats[1].snapshot(), c0),
        to_server: diff(relay.stats[0].snapshot(), s0),
        curl,
        run,
    })
}

/// How long a put waits before it starts (see `stream`'s PUT_SETTLE: freshly freed memory on
/// this VM makes the next large write fast, memory freed a while ago slow).
const PUT_SETTLE: Duration = Duration::from_secs(3);

fn measure_setting(
    b: &Bench,
    link: &Link,
    rtt: f64,
    rate: u64,
    buffers: Buffers,
) -> anyhow::Result<Vec<Row>> {
    let wants = |t: Tool| b.tools.contains(&t);
    let sfsd = if wants(Tool::SfsGet) || wants(Tool::SfsPut) {
        Some(peers::start_sfsd(
            link, &b.sfsd, &b.work, &b.export, &b.users, b.workers,
        )?)
    } else {
        None
    };
    let nginx = if wants(Tool::Https) {
        Some(peers::start_nginx(
            link,
            &b.work.join("nginx"),
            &b.export,
            b.workers,
        )?)
    } else {
        None
    };
    let sshd = if wants(Tool::Sftp) {
        Some(peers::start_sshd(link, &b.work.join("sshd"))?)
    } else {
        None
    };
    let mut rows = Vec::new();
    let row = |kind: &'static str, tool: Tool, bytes: u64, samples: &[Sample]| {
        let med = |f: &dyn Fn(&Sample) -> f64| median(&samples.iter().map(f).collect::<Vec<_>>());
        let wall = med(&|s| s.run.wall.as_secs_f64());
        let curl = |f: fn(&peers::CurlTimes) -> f64| {
            samples[0].curl.is_some().then(|| {
                median(
                    &samples
                        .iter()
                        .filter_map(|s| s.curl.as_ref().map(f))
                        .collect::<Vec<_>>(),
                )
            })
        };
        let last = samples.last().expect("at least one sample");
        Row {
            kind: kind.into(),
            tool: tool.name().into(),
            rtt_ms: rtt,
            rate_bps: rate,
            buffers,
            bytes,
            reps: samples.len(),
            wall_s: wall,
            mb_per_s: (kind == "bulk").then(|| bytes as f64 / 1e6 / wall),
            first_byte_s: curl(|c| c.first_byte),
            total_s: curl(|c| c.total),
            client_cpu_s: med(&|s| s.run.cpu.as_secs_f64()),
            server_cpu_s: med(&|s| s.server_cpu),
            relay_cpu_s: med(&|s| s.relay_cpu),
            to_client: last.to_client,
            to_server: last.to_server,
        }
    };

    // First byte: a 1-byte file, end to end, over fresh connections.
    if b.first_byte_reps > 0 {
        if let Some((server, name)) = &sfsd {
            let samples = (0..b.first_byte_reps)
                .map(|_| {
                    sample(
                        link,
                        server,
                        b.client.get(link, name, TINY_FILE, &b.sink),
                        None,
                        "sfs get (1 byte)",
                        &b.sink,
                    )
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            rows.push(row("first-byte", Tool::SfsGet, 1, &samples));
            eprintln!(
                "  first byte: sfs get {:.1} ms",
                rows.last().map_or(0.0, |r| r.wall_s * 1000.0)
            );
        }
        if let Some(server) = &nginx {
            let samples = (0..b.first_byte_reps)
                .map(|_| {
                    sample(
                        link,
                        server,
                        peers::curl_command(link, TINY_FILE, &b.sink),
                        None,
                        "curl (1 byte)",
                        &b.sink,
                    )
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let r = row("first-byte", Tool::Https, 1, &samples);
            eprintln!(
                "  first byte: curl {:.1} ms (first byte {:.1} ms)",
                r.wall_s * 1000.0,
                r.first_byte_s.unwrap_or(0.0) * 1000.0
            );
            rows.push(r);
        }
    }

    // Bulk transfers, the tools interleaved within each repetition.
    let mut bulk: Vec<(Tool, Vec<Sample>)> = b.tools.iter().map(|&t| (t, Vec::new())).collect();
    for rep in 0..b.reps {
        for (tool, samples) in bulk.iter_mut() {
            let s = match *tool {
                Tool::Https => {
                    let server = nginx.as_ref().context("nginx")?;
                    let s = sample(
                        link,
                        server,
                        peers::curl_command(link, DATA_FILE, &b.sink),
                        None,
                        "curl",
                        &b.sink,
                    )?;
                    let got = s.curl.map_or(0, |c| c.size);
                    if got != b.size {
                        bail!("curl downloaded {got} bytes, not {}", b.size);
                    }
                    s
                }
                Tool::SfsGet => {
                    let (server, name) = sfsd.as_ref().context("sfsd")?;
                    sample(
                        link,
                        server,
                        b.client.get(link, name, DATA_FILE, &b.sink),
                        None,
                        "sfs get",
                        &b.sink,
                    )?
                }
                Tool::SfsPut => {
                    let (server, name) = sfsd.as_ref().context("sfsd")?;
                    std::thread::sleep(PUT_SETTLE);
                    let s = sample(
                        link,
                        server,
                        b.client.put(link, name, &b.local_file, "put.bin"),
                        None,
                        "sfs put",
                        &b.sink,
                    )?;
                    let landed = std::fs::metadata(b.export.join("put.bin"))
                        .map(|m| m.len())
                        .unwrap_or(0);
                    let _ = std::fs::remove_file(b.export.join("put.bin"));
                    if landed != b.size {
                        bail!("sfs put left {landed} bytes, not {}", b.size);
                    }
                    s
                }
                Tool::Sftp => {
                    let (server, key) = sshd.as_ref().context("sshd")?;
                    let batch = format!(
                        "get {} {}\n",
                        b.export.join(DATA_FILE).display(),
                        b.sink.display()
                    );
                    sample(
                        link,
                        server,
                        peers::sftp_command(link, key),
                        Some(&batch),
                        "sftp",
                        &b.sink,
                    )?
                }
            };
            eprintln!(
                "  rep {}/{}: {} {:.1} MB/s ({:.2} s; relay {:.2} CPU-s, {:.0}% kernel, {} drops, {} + {} packets)",
                rep + 1,
                b.reps,
                tool.name(),
                b.size as f64 / 1e6 / s.run.wall.as_secs_f64(),
                s.run.wall.as_secs_f64(),
                s.relay_cpu,
                s.relay_kernel.unwrap_or(0.0) * 100.0,
                s.to_client.dropped + s.to_server.dropped,
                s.to_client.packets,
                s.to_server.packets,
            );
            samples.push(s);
        }
    }
    for (tool, samples) in &bulk {
        rows.push(row("bulk", *tool, b.size, samples));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!(parse_rate("1gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("100mbit"), Ok(100_000_000));
        assert_eq!(parse_rate("2.5Gbit"), Ok(2_500_000_000));
        assert_eq!(parse_rate("500kbit"), Ok(500_000));
        assert_eq!(parse_rate("1000"), Ok(1000));
        assert_eq!(parse_rate("0"), Ok(0));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("1gbyte").is_err());
    }
}
