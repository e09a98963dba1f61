//! sfs-bench: the experiments of "Multiprocessor Support for Event-Driven Programs"
//! (Zeldovich et al., USENIX 2003) run on this code.

mod cipher;
mod cpu_idle;
mod cputime;
mod idle;
mod mount;
mod procs;
mod read;
mod report;
mod stream;
mod svg;
mod tasks;
mod wan;
mod web;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "sfs-bench",
    version,
    about = "Reproduce the libasync-smp paper's experiments on libcolor and sfsd",
    long_about = "Reproduce the libasync-smp paper's experiments on this code base.\n\n\
        Every subcommand measures its configurations side by side in one run (warm-up, a \
        measured window, several repetitions, medians) and prints ratios next to absolute \
        numbers: on a shared, noisy machine only the ratios are comparable across runs."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Task-rate benchmark of the libasync-smp paper Table 2: chained callbacks of 16 colors under each
    /// queue configuration, beside the same workload on tokio.
    Tasks(tasks::TasksArgs),
    /// Read throughput of the libasync-smp paper Figure 10: K clients reading a cached file from sfsd with
    /// 1..N CPUs, as one multiprocessor server, the uniprocessor baseline, and N copies.
    ///
    /// Columns: median MB/s and its spread; speedup over `uni` on 1 CPU; `mp/ncopy` at the
    /// same CPU count; `mp/this` (sfsd over a peer); the server's CPU-seconds per GB; that
    /// over the cipher's own cost measured in this run (`x cipher`); the kernel's share of the
    /// server's CPU (`kern%`); the busiest color's share of callback time (`serial%`) and the
    /// Amdahl bound it implies. benches/README.md explains each mode.
    Read(read::ReadArgs),
    /// One client, one stream: `sfs get`/`put` of a cached file beside OpenSSH sftp and scp
    /// with the same cipher, MB/s and CPU-s/GB of server and client.
    ///
    /// Columns: median MB/s and its spread; server and client CPU-seconds per GB; the
    /// kernel's share of the server's CPU (`kern%`); the server's cost over the cipher's
    /// (sealing for get, opening for put); sfs's rate over each peer's.
    Stream(stream::StreamArgs),
    /// What idle authenticated connections cost the server (resident memory per connection),
    /// and whether they slow an active reader.
    Idle(idle::IdleArgs),
    /// File-system workloads through a real mount: sequential write and read of a large file,
    /// untar and find+stat of a source tree, on `sfs mount` (FUSE) and on sshfs with the same
    /// cipher (chacha20-poly1305), side by side.
    Mount(mount::MountArgs),
    /// A long fat link on one machine (two network namespaces joined by TUN devices and a
    /// delaying, rate-limiting relay): `sfs get`/`put` beside HTTPS (nginx, curl) and sftp,
    /// MB/s and the time to fetch a 1-byte file in RTTs. Needs root.
    Wan(wan::WanArgs),
    /// The web server of the libasync-smp paper's Figures 7-9: wrk's keep-alive clients fetch
    /// small cached files from colorweb with 1..N CPUs (`mp`), its uniprocessor flavour, N
    /// copies on one port, and nginx with N workers; then a concurrency sweep.
    Web(web::WebArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Tasks(args) => tasks::run(args),
        Command::Read(args) => read::run(args),
        Command::Stream(args) => stream::run(args),
        Command::Idle(args) => idle::run(args),
        Command::Mount(args) => mount::run(args),
        Command::Wan(args) => wan::run(args),
        Command::Web(args) => web::run(args),
    }
}
