//! `sfs-bench mount`: what a user of a network file system sees, through a real kernel mount.
//! The same workloads run on `sfs mount` (FUSE, to a local sfsd) and on sshfs (to a throwaway
//! OpenSSH sshd on loopback, with chacha20-poly1305@openssh.com, the AEAD sfs uses), in one
//! run, interleaved, several repetitions, medians:
//!
//! - `seq-write`: a large file written in 1 MiB calls, then fsync;
//! - `seq-read`: that file read back on a fresh mount (the client's page cache is empty; the
//!   server's is warm, so this measures protocol and client, not the disk);
//! - `untar`: `tar -x` of a source tree (a tarball made from `--tree`, several copies), then
//!   `sync -f`;
//! - `cp-r`: `cp -r` of the tree (extracted locally once) into the mount, then `sync -f`;
//! - `ls-lR-cold`: `ls -lR` of the extracted trees and the copy on a fresh mount;
//! - `ls-lR-warm`: the same again on that mount (the client's caches warm);
//! - `find`: `find` of them, names only, on a fresh mount;
//! - `find+stat`: a walk of them on a fresh mount, `lstat` of every entry;
//! - `rm-r`: `rm -r` of them on a fresh mount.
//!
//! A third column, `local`, runs the same workloads in the exported directory itself (no
//! mount, no network: "fresh mount" means nothing there), the bound both aim at. All systems
//! export the same directory, cleaned between runs through the local file system. CPU seconds are read from /proc: server = sfsd, or sshd with its session
//! processes; client = the `sfs mount` process, or sshfs with its ssh. Work the kernel does
//! for the FUSE requests is charged to the benchmark process and reported for neither.

mod journal;
mod mounts;
mod workloads;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Serialize;

use crate::read::servers::{self, Server};
use crate::read::sftp::{self, Sshd};
use crate::report::{median, spread};
use mounts::{Mounted, Recipe, System};
use workloads::{Outcome, Workload};

const BIG_FILE: &str = "big.bin";
const TREE_DIR: &str = "tree";
/// Where `cp-r` copies the tree to.
const COPY_DIR: &str = "copy";
const BENCH_USER: &str = "bench";
/// The sshfs cipher: the same AEAD as sfs's records.
const CIPHER: &str = "chacha20-poly1305@openssh.com";

#[derive(clap::Args, Debug)]
pub(crate) struct MountArgs {
    /// Size of the file of seq-write and seq-read, e.g. 256MiB, 1GiB
    #[arg(long, default_value = "256MiB", value_parser = crate::read::parse_size)]
    file_size: u64,
    /// Source tree to tar for untar and find+stat (build output and .git excluded)
    #[arg(long, default_value = ".")]
    tree: PathBuf,
    /// Copies of the tree extracted per untar run
    #[arg(long, default_value_t = 4)]
    tree_copies: usize,
    /// Repetitions; the systems alternate within each
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Only sfs (no sshd/sshfs)
    #[arg(long)]
    no_sshfs: bool,
    /// No local-directory column
    #[arg(long)]
    no_local: bool,
    /// Write one JSON object per workload and system and line to FILE
    #[arg(long)]
    json: Option<PathBuf>,
    /// The sfsd binary [default: next to sfs-bench]
    #[arg(long)]
    sfsd: Option<PathBuf>,
    /// The sfs binary [default: next to sfs-bench]
    #[arg(long)]
    sfs: Option<PathBuf>,
    /// Directory for the export, server state and mount points [default: a temporary
    /// directory]
    #[arg(long)]
    workdir: Option<PathBuf>,
}

/// One run of one workload on one system, with the CPU it cost.
#[derive(Clone, Copy, Debug)]
struct Sample {
    outcome: Outcome,
    server_cpu: Duration,
    client_cpu: Duration,
}

/// A summary line of the table and of the JSON output.
#[derive(Debug, Serialize)]
struct Row {
    workload: Workload,
    system: &'static str,
    unit: &'static str,
    /// Median rate over the repetitions.
    rate: f64,
    min: f64,
    max: f64,
    /// Bytes or entries per run.
    amount: u64,
    /// Median CPU seconds per run.
    server_cpu_s: f64,
    client_cpu_s: f64,
    reps: usize,
    /// How the machine's idle CPUs waited ([`crate::cpu_idle`]): figures taken under
    /// different settings are not comparable.
    cpu_idle: String,
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// The name of the user this process runs as (the sshfs login).
fn user_name() -> anyhow::Result<String> {
    let out = Command::new("id")
        .arg("-un")
        .output()
        .context("running id -un")?;
    let name = String::from_utf8(out.stdout)?.trim().to_string();
    if name.is_empty() {
        bail!("id -un printed no user name");
    }
    Ok(name)
}

/// Everything the runs share.
struct Bench {
    workdir: PathBuf,
    export: PathBuf,
    recipe: Recipe,
    server: Server,
    sshd: Option<Sshd>,
    tarball: PathBuf,
    /// The tarball extracted locally: what `cp-r` copies.
    source: PathBuf,
    entries: u64,
    copies: usize,
    file_size: u64,
}

pub(crate) fn run(args: MountArgs) -> anyhow::Result<()> {
    for tool in ["fusermount3", "tar", "sync", "taskset"] {
        if !have(tool) {
            bail!("`{tool}` not found (fusermount3 is in the fuse3 package)");
        }
    }
    if !Path::new("/dev/fuse").exists() {
        bail!("/dev/fuse is missing: no FUSE here");
    }
    if !args.no_sshfs {
        sftp::check_available()?;
        if !have("sshfs") {
            bail!("`sshfs` not found (install sshfs, or pass --no-sshfs)");
        }
    }
    if args.reps == 0 || args.tree_copies == 0 {
        bail!("--reps and --tree-copies must be at least 1");
    }
    let sfsd = crate::read::servers::locate_sfsd(args.sfsd.as_deref())?;
    let sfs = servers::locate_binary("sfs", args.sfs.as_deref())?;
    let _tmp;
    let workdir = match &args.workdir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.canonicalize()?
        }
        None => {
            _tmp = tempfile::tempdir()?;
            _tmp.path().to_path_buf()
        }
    };
    let export = workdir.join("export");
    let home = workdir.join("home");
    for d in [&export, &home] {
        std::fs::create_dir_all(d)?;
    }
    let tarball = workdir.join("tree.tar");
    workloads::make_tarball(&args.tree, &tarball)?;
    let entries = workloads::tar_entries(&tarball)?;
    let source = workdir.join("source");
    if source.exists() {
        std::fs::remove_dir_all(&source)?;
    }
    workloads::extract(&tarball, &source)?;

    let identity = workdir.join("bench.key");
    let public = servers::sfs_keygen(&sfs, &home, &identity)?;
    let users = workdir.join("users");
    // The export was just made by this process: its owner is who the files should belong to.
    servers::write_users_file(&users, BENCH_USER, &public, &export)?;
    let cpus: Vec<usize> =
        (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
    let server = Server::start(
        &sfsd,
        &cpus,
        &[],
        &workdir.join("state"),
        &export,
        None,
        &users,
    )?;
    let sshd = if args.no_sshfs {
        None
    } else {
        Some(Sshd::start(&workdir.join("ssh"), &cpus, CIPHER)?)
    };
    let recipe = Recipe {
        sfs,
        identity,
        user: BENCH_USER.to_string(),
        server: server.name.to_string(),
        sshfs_remote: format!("{}@127.0.0.1:{}", user_name()?, export.display()),
        export: export.clone(),
    };
    let bench = Bench {
        workdir: workdir.clone(),
        export,
        recipe,
        server,
        sshd,
        tarball,
        source,
        entries,
        copies: args.tree_copies,
        file_size: args.file_size,
    };
    let mut systems = vec![System::Sfs];
    if !args.no_sshfs {
        systems.push(System::Sshfs);
    }
    if !args.no_local {
        systems.push(System::Local);
    }
    if let Some(device) = journal::unjournaled_ext4(&workdir) {
        eprintln!(
            "mount: warning: {} is on ext4 without a journal ({device}), where each create \
             slows down with every file deleted there in the last minutes (this run's own \
             `rm -r`s included), in every column by a different amount; pass --workdir on a \
             journaled file system (benches/README.md, \"stop 41\")",
            workdir.display()
        );
    }
    let cpu_idle = crate::cpu_idle::describe();
    eprintln!(
        "mount: {} file, tree of {} entries x {} copies, {} rep(s); {} CPU(s), shared with \
         whatever else runs here; {cpu_idle}",
        human(args.file_size),
        entries,
        args.tree_copies,
        args.reps,
        cpus.len()
    );
    // samples[system][workload] = one Sample per repetition.
    let mut samples = vec![vec![Vec::new(); Workload::ALL.len()]; systems.len()];
    for rep in 0..args.reps {
        for (si, &system) in systems.iter().enumerate() {
            eprint!("  rep {}/{}: {} ... ", rep + 1, args.reps, system.name());
            let got = measure(&bench, system)
                .with_context(|| format!("{} (rep {})", system.name(), rep + 1))?;
            for (wi, s) in got.into_iter().enumerate() {
                eprint!(
                    "{} {:.0} ",
                    Workload::ALL[wi].name(),
                    s.outcome.rate(Workload::ALL[wi])
                );
                samples[si][wi].push(s);
            }
            eprintln!();
        }
    }
    let mut rows = Vec::new();
    for (wi, &w) in Workload::ALL.iter().enumerate() {
        for (si, &system) in systems.iter().enumerate() {
            rows.push(summarise(w, system, &samples[si][wi], &cpu_idle));
        }
    }
    print_table(&rows, &systems);
    if let Some(path) = &args.json {
        crate::report::write_json_lines(path, &rows)?;
    }
    bench.server.stop();
    Ok(())
}

/// Every workload once on `system`, each mount fresh where the workload needs a cold client.
fn measure(b: &Bench, system: System) -> anyhow::Result<Vec<Sample>> {
    let mnt = b.workdir.join(format!("mnt-{}", system.name()));
    let log = b.workdir.join(format!("{}.log", system.name()));
    let server_cpu = || match system {
        System::Sfs => b.server.cpu_time(),
        System::Sshfs => b.sshd.as_ref().map(Sshd::cpu_time).unwrap_or_default(),
        System::Local => Duration::ZERO,
    };
    let mount = || Mounted::mount(system, &b.recipe, b.sshd.as_ref(), &mnt, &log);
    let timed = |m: &Mounted, f: &dyn Fn(&Path) -> anyhow::Result<Outcome>| {
        let (s0, c0) = (server_cpu(), m.cpu_time());
        let outcome = f(&m.dir)?;
        Ok::<_, anyhow::Error>(Sample {
            outcome,
            server_cpu: server_cpu().saturating_sub(s0),
            client_cpu: m.cpu_time().saturating_sub(c0),
        })
    };
    // One workload alone on a fresh mount (a cold client).
    let fresh = |f: &dyn Fn(&Path) -> anyhow::Result<Outcome>| {
        let m = mount()?;
        let sample = timed(&m, f)?;
        m.unmount();
        Ok::<_, anyhow::Error>(sample)
    };
    clean(&b.export)?;
    let mut out = Vec::new();
    out.push(fresh(&|d| {
        workloads::seq_write(&d.join(BIG_FILE), b.file_size)
    })?);
    let m = mount()?;
    out.push(timed(&m, &|d| {
        workloads::seq_read(&d.join(BIG_FILE), b.file_size)
    })?);
    out.push(timed(&m, &|d| {
        workloads::untar(&b.tarball, &d.join(TREE_DIR), b.copies, b.entries)
    })?);
    out.push(timed(&m, &|d| {
        workloads::cp_r(&b.source, &d.join(COPY_DIR), b.entries)
    })?);
    m.unmount();
    // What the walks and rm -r cover, counted locally (not timed).
    let made = [b.export.join(TREE_DIR), b.export.join(COPY_DIR)];
    let entries = workloads::count_entries(&[&made[0], &made[1]])?;
    let roots = |d: &Path| [d.join(TREE_DIR), d.join(COPY_DIR)];
    let m = mount()?;
    for _cold_then_warm in 0..2 {
        out.push(timed(&m, &|d| {
            let r = roots(d);
            workloads::ls_lr(&[&r[0], &r[1]], entries)
        })?);
    }
    m.unmount();
    out.push(fresh(&|d| {
        let r = roots(d);
        let o = workloads::find_names(&[&r[0], &r[1]])?;
        if o.amount != entries {
            bail!(
                "find listed {} entries, the directory holds {entries}",
                o.amount
            );
        }
        Ok(o)
    })?);
    out.push(fresh(&|d| {
        let r = roots(d);
        let mut o = workloads::find_stat(&r[0])?;
        o.amount += workloads::find_stat(&r[1])?.amount;
        Ok(o)
    })?);
    out.push(fresh(&|d| {
        let r = roots(d);
        workloads::rm_r(&[&r[0], &r[1]], entries)
    })?);
    clean(&b.export)?;
    Ok(out)
}

/// Removes what the workloads made, through the local file system.
fn clean(export: &Path) -> anyhow::Result<()> {
    let _ = std::fs::remove_file(export.join(BIG_FILE));
    for d in [TREE_DIR, COPY_DIR] {
        match std::fs::remove_dir_all(export.join(d)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).context("cleaning the export"),
        }
    }
    Ok(())
}

fn summarise(w: Workload, system: System, samples: &[Sample], cpu_idle: &str) -> Row {
    let rates: Vec<f64> = samples.iter().map(|s| s.outcome.rate(w)).collect();
    let (min, max) = spread(&rates);
    let secs = |f: fn(&Sample) -> Duration| {
        median(
            &samples
                .iter()
                .map(|s| f(s).as_secs_f64())
                .collect::<Vec<_>>(),
        )
    };
    Row {
        workload: w,
        system: system.name(),
        unit: w.unit(),
        rate: median(&rates),
        min,
        max,
        amount: samples.first().map_or(0, |s| s.outcome.amount),
        server_cpu_s: secs(|s| s.server_cpu),
        client_cpu_s: secs(|s| s.client_cpu),
        reps: samples.len(),
        cpu_idle: cpu_idle.to_string(),
    }
}

/// The table: rates per system, then sfs's rate over each other system's (the first system
/// is sfs), then CPU seconds of the systems that have a server and a client.
fn print_table(rows: &[Row], systems: &[System]) {
    print!("{:<12}{:>6}", "workload", "unit");
    for s in systems {
        print!("{:>28}", format!("{} (min-max)", s.name()));
    }
    for s in &systems[1..] {
        print!("{:>11}", format!("sfs/{}", s.name()));
    }
    let with_cpu = |s: &System| *s != System::Local;
    for s in systems.iter().filter(|s| with_cpu(s)) {
        print!("{:>22}", format!("cpu-s srv/cli {}", s.name()));
    }
    println!();
    for chunk in rows.chunks(systems.len()) {
        let w = chunk[0].workload;
        print!("{:<12}{:>6}", w.name(), w.unit());
        for r in chunk {
            print!(
                "{:>28}",
                format!("{:.1} ({:.1}-{:.1})", r.rate, r.min, r.max)
            );
        }
        for r in &chunk[1..] {
            print!("{:>10.2}x", chunk[0].rate / r.rate);
        }
        for r in chunk.iter().filter(|r| r.system != "local") {
            print!(
                "{:>22}",
                format!("{:.2} / {:.2}", r.server_cpu_s, r.client_cpu_s)
            );
        }
        println!();
    }
}

fn human(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.0} MiB", n as f64 / (1u64 << 20) as f64)
    }
}
