//! sfsd, the parallel SFS-like file server on libcolor, as a library: [`run::serve`] starts
//! a server from its settings and runs it until it is told to stop; `main.rs` is the
//! command line around it. With the `testing` feature (and in its own tests), `sim` runs
//! color 0's bookkeeping between in-memory client and server connections in virtual time.
//!
//! Mutexes are `parking_lot`'s, which do not poison: a panicking callback or storage job must
//! not wedge the threads that go on to shut the server down, and every mutex here guards data
//! whose updates are single inserts, removes or stores, so it stays consistent after a panic.

mod boot;
mod changes;
pub mod cli;
mod color0;
mod config;
mod conn;
mod disk_watch;
mod fs;
mod ids;
mod leases;
mod limits;
mod listener;
mod lock_ops;
mod locks;
mod narrow;
mod output;
mod peers;
mod read;
mod replies;
mod server;
mod settings;
mod startups;
mod state;
mod stats;
mod trust;
mod users;

pub mod run;
#[cfg(any(test, feature = "testing"))]
pub mod sim;
