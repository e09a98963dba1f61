//! colorweb: a static-file HTTP/1.1 server on libcolor, the second application of the
//! libasync-smp paper (Zeldovich et al., USENIX 2003, section 5.3, Figures 7-9).
//!
//! Structure as the paper's: accepting in color 0; each connection's reading, parsing and
//! response building in the connection's own color (so connections run in parallel); the
//! shared file cache sharded, each shard's loads and accounting in the shard's color. See
//! README.md for what is bounded and how it compares with nginx.

pub mod cache;
pub mod conn;
pub mod fsroot;
pub mod fuzzing;
pub mod output;
pub mod parser;
pub mod response;
pub mod server;
