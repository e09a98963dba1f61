//! `sfs`: the client of the self-certifying file system.
//!
//! One encrypted session per server ([`session`]), mount-free commands ([`commands`]), a
//! FUSE file system ([`fuse`]) and a loopback NFSv3 server ([`nfs`]) so the kernel can mount a
//! remote tree.
//!
//! Mutexes are `parking_lot`'s, which do not poison: a FUSE or NFS thread that panics must not
//! wedge every later request. Each guards maps and counters whose updates are single inserts,
//! removes or stores, so the data is still consistent after a holder panicked.

mod bookmarks;
mod cache;
mod caller_groups;
mod cli;
mod commands;
mod first_poll;
mod fuse;
mod identity;
mod interrupt;
mod log_fields;
mod namespace;
mod nfs;
mod owned_file;
mod peer_owner;
mod progress;
mod session;
mod sweep;

use clap::Parser;
use tracing_subscriber::fmt::writer::BoxMakeWriter;

use cli::{Cli, Command};
use commands::{CmdError, Ctx};

fn main() {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("SFS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("sfs={level},{level}")));
    let name = command_name(&cli.command);
    // A mount lives long and may log to a file: give it timestamps.
    let (timestamps, log_file) = match &cli.command {
        Command::Mount {
            foreground: true,
            log: Some(path),
            nfs: false,
            ..
        } => match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            Ok(f) => (true, Some(f)),
            Err(e) => {
                eprintln!("sfs: mount: {}: cannot open the log: {e}", path.display());
                std::process::exit(1);
            }
        },
        Command::Mount { .. } => (true, None),
        _ => (false, None),
    };
    // Colours only for a terminal (not in the background mount's log file).
    let ansi = log_file.is_none() && std::io::IsTerminal::is_terminal(&std::io::stderr());
    // A log line that cannot be written (a full disk) is dropped. tracing would otherwise say
    // so on standard error, which for a background mount is the same file: that write fails
    // too, and `eprint!` panics, taking the mount down with the disk.
    let report_lost_lines = log_file.is_none();
    let writer = match log_file {
        // A std mutex, not parking_lot's: tracing-subscriber implements `MakeWriter` for
        // `std::sync::Mutex<W>` only, and only tracing locks it (to write a log line).
        Some(f) => BoxMakeWriter::new(std::sync::Mutex::new(f)),
        None => BoxMakeWriter::new(std::io::stderr),
    };
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(ansi)
        .log_internal_errors(report_lost_lines)
        .with_target(false)
        .fmt_fields(log_fields::escaped());
    if timestamps {
        fmt.init();
    } else {
        fmt.without_time().init();
    }
    let code = match run(cli) {
        Ok(()) => 0,
        Err(CmdError::Reported) => 1,
        Err(e) => {
            eprintln!("sfs: {name}: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code);
}

fn command_name(c: &Command) -> &'static str {
    match c {
        Command::Keygen { .. } => "keygen",
        Command::Ls { .. } => "ls",
        Command::Stat { .. } => "stat",
        Command::Cat { .. } => "cat",
        Command::Get { .. } => "get",
        Command::Put { .. } => "put",
        Command::Rm { .. } => "rm",
        Command::Mkdir { .. } => "mkdir",
        Command::Mv { .. } => "mv",
        Command::Nfs { .. } => "nfs",
        Command::Mount { .. } => "mount",
        Command::Umount { .. } => "umount",
    }
}

fn run(cli: Cli) -> Result<(), CmdError> {
    if let Command::Keygen { out, force } = &cli.command {
        let path = match out.clone().or_else(identity::default_path) {
            Some(p) => p,
            None => return Err(CmdError::Usage("no --out and no HOME".into())),
        };
        let key = identity::keygen(&path, *force)?;
        println!("wrote {} (keep it secret)", path.display());
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        println!(
            "add this line to the server's users file (its last two fields are the uid and gid \
             this key acts as on the server; these are yours here):"
        );
        println!(
            "  {} {} {uid} {gid}",
            identity::user_name(cli.user.as_deref()),
            key.public_key()
        );
        println!("{}", key.public_key());
        return Ok(());
    }
    if let Command::Umount { dir } = &cli.command {
        return commands::mount::umount(dir);
    }
    if let Command::Mount {
        namespace: None,
        idle_secs: Some(_),
        ..
    } = &cli.command
    {
        return Err(CmdError::Usage(
            "--idle-secs applies to --namespace mounts only".into(),
        ));
    }
    if let Command::Mount {
        dir,
        namespace,
        log,
        foreground: false,
        nfs: false,
        ..
    } = &cli.command
    {
        let Some(dir) = namespace.as_ref().or(dir.as_ref()) else {
            return Err(CmdError::Usage("no mount point".into()));
        };
        // Before any thread exists: the background process is a fresh `sfs ... -f`.
        return commands::mount::daemonize(dir, log.as_deref(), cli.verbose);
    }
    let id = identity::load(cli.identity.as_deref(), cli.user.as_deref())?;
    // A mount answers many small requests, each waiting on the server: with one worker its
    // task, the stream's writer and its reader run on one thread, which halves the thread
    // wake-ups per request (8-10 to 4 context switches measured for a `chmod`, and the
    // round trip 1.5-2x shorter on a busy 2-CPU machine) for about a tenth less sequential
    // write throughput. The transfer commands keep two, to seal and open records in parallel.
    let workers = if matches!(cli.command, Command::Mount { .. }) {
        1
    } else {
        2
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let opts = session::Options {
            request_timeout: std::time::Duration::from_secs_f64(cli.timeout),
            ..session::Options::default()
        };
        let mut ctx = Ctx::new(id, opts);
        match cli.command {
            Command::Ls {
                long,
                json,
                targets,
            } => commands::list::ls(&mut ctx, &targets, long, json).await,
            Command::Stat { json, targets } => commands::list::stat(&mut ctx, &targets, json).await,
            Command::Cat { targets } => commands::transfer::cat(&mut ctx, &targets).await,
            Command::Get {
                recursive,
                remote,
                local,
            } => commands::transfer::get(&mut ctx, &remote, local.as_deref(), recursive).await,
            Command::Put {
                recursive,
                local,
                remote,
            } => commands::transfer::put(&mut ctx, &local, &remote, recursive).await,
            Command::Rm { recursive, targets } => {
                commands::edit::rm(&mut ctx, &targets, recursive).await
            }
            Command::Mkdir { parents, targets } => {
                commands::edit::mkdir(&mut ctx, &targets, parents).await
            }
            Command::Mv { from, to } => commands::edit::mv(&mut ctx, &from, &to).await,
            Command::Nfs { name, listen } => commands::mount::nfs(&mut ctx, &name, listen).await,
            Command::Mount {
                namespace: Some(dir),
                idle_secs,
                ..
            } => {
                commands::mount::mount_namespace(
                    &mut ctx,
                    &dir,
                    std::time::Duration::from_secs_f64(idle_secs.unwrap_or(300.0)),
                )
                .await
            }
            Command::Mount {
                name: Some(name),
                dir: Some(dir),
                nfs: true,
                listen,
                ..
            } => commands::mount::mount_nfs(&mut ctx, &name, &dir, listen).await,
            Command::Mount {
                name: Some(name),
                dir: Some(dir),
                multi_user,
                identities,
                ..
            } => {
                let users = multi_user.then_some(identities);
                commands::mount::mount_fuse(&mut ctx, &name, &dir, users).await
            }
            Command::Mount { .. } => Err(CmdError::Usage(
                "mount needs NAME DIR, or --namespace DIR".into(),
            )),
            Command::Keygen { .. } | Command::Umount { .. } => Ok(()),
        }
    })
}
