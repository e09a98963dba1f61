//! `sfs`: the client of the self-certifying file system.

mod cache;
mod identity;
mod session;

fn main() {}
