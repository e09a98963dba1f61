//! `sfsd`: the parallel SFS-like file server on libcolor. See `sfsd --help`; the server
//! itself is the library ([`sfsd::run`]).

use clap::Parser;

use sfsd::cli::{Cli, Command};

fn main() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SFSD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Init { state, location } => sfsd::run::init(&state, &location),
        Command::Serve(args) => sfsd::run::serve(*args),
    };
    if let Err(e) = result {
        eprintln!("sfsd: error: {e:#}");
        std::process::exit(1);
    }
}
