//! The load client of `sfs-bench read`: a real protocol client (handshake, LOGIN, MOUNT,
//! LOOKUP, pipelined READs) that, by default, does not open the READ replies: it only frames
//! them, so its CPU cost per byte stays far below the server's (which seals every byte). With
//! `verify` it opens, decodes and checks every reply against the file's known contents.

use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use anyhow::{Context, bail};
use protocol::client::blocking::BlockingClient;
use protocol::{FileHandle, ReplyBody, RequestOp, ServerMessage, ServerName, UserKeypair};

/// Byte `i` of every benchmark file, so `--verify` can check any range without the file.
pub(crate) fn pattern_byte(offset: u64) -> u8 {
    (offset.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// What one load client reads, from where.
#[derive(Clone)]
pub(crate) struct Target {
    pub name: ServerName,
    pub file: String,
    pub file_size: u64,
}

#[derive(Clone)]
pub(crate) struct LoadConfig {
    pub user: String,
    pub identity: Arc<UserKeypair>,
    /// READ size (clamped to what the server's records allow).
    pub chunk: u32,
    /// Outstanding READs per connection.
    pub window: usize,
    pub verify: bool,
    /// The record cipher to ask for: the protocol versions offered follow from it.
    pub cipher: CipherChoice,
}

/// Which record cipher the load clients ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CipherChoice {
    /// What `sfs` itself asks for: AES-256-GCM where this CPU has AES instructions.
    Auto,
    /// ChaCha20-Poly1305 (protocol versions 2 and 3 only).
    Chacha,
    /// AES-256-GCM (version 4; the server picks it only if it has AES instructions too).
    Aes,
}

impl CipherChoice {
    /// The protocol versions offered.
    pub(crate) fn versions(self) -> Vec<u32> {
        match self {
            CipherChoice::Auto => protocol::handshake::versions_here(),
            // Every ChaCha20 version: a server that does not watch its disk stops at 15.
            CipherChoice::Chacha => protocol::SUPPORTED_VERSIONS
                .iter()
                .copied()
                .filter(|&v| !protocol::handshake::uses_aes(v))
                .collect(),
            CipherChoice::Aes => protocol::SUPPORTED_VERSIONS.to_vec(),
        }
    }

    /// The cipher this machine's client would end up with (the server agreeing).
    pub(crate) fn cipher(self) -> protocol::record::Cipher {
        protocol::record::Cipher::for_version(self.versions().into_iter().max().unwrap_or(2))
    }
}

/// Counters shared with the orchestrator.
#[derive(Default)]
pub(crate) struct Progress {
    pub bytes: AtomicU64,
    pub stop: AtomicBool,
}

/// A load client's connection: protocol's blocking client, and the authno its LOGIN got.
struct Conn {
    client: BlockingClient<TcpStream>,
    authno: u32,
}

impl Conn {
    fn send(&mut self, op: RequestOp) -> anyhow::Result<u64> {
        Ok(self.client.send(self.authno, op)?)
    }

    fn call(&mut self, op: RequestOp) -> anyhow::Result<ReplyBody> {
        self.client
            .call(self.authno, op)?
            .map_err(|status| anyhow::anyhow!("server answered {status:?}"))
    }
}

fn connect(target: &Target, config: &LoadConfig) -> anyhow::Result<(Conn, FileHandle, u32)> {
    let (mut conn, root, max_io) = session(target, config)?;
    let file = match conn.call(RequestOp::Lookup {
        dir: root,
        name: target.file.as_bytes().to_vec(),
    })? {
        ReplyBody::Lookup { fh, .. } => fh,
        other => bail!("unexpected LOOKUP reply {other:?}"),
    };
    Ok((conn, file, max_io))
}

/// A logged-in connection to `target`'s server: the connection, the export's root handle and
/// the largest READ or WRITE its records carry.
fn session(target: &Target, config: &LoadConfig) -> anyhow::Result<(Conn, FileHandle, u32)> {
    let addr = target.name.location().socket_addr_string();
    let stream = TcpStream::connect(&addr).with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let handshake = protocol::HandshakeConfig {
        versions: config.cipher.versions(),
        ..protocol::HandshakeConfig::default()
    };
    let client = BlockingClient::handshake(stream, &target.name, handshake)?;
    let max_io = client.conn.max_io();
    let mut conn = Conn { client, authno: 0 };
    conn.authno = conn
        .client
        .login(&config.user, &config.identity)?
        .map_err(|status| anyhow::anyhow!("LOGIN refused: {status:?}"))?;
    let root = match conn.call(RequestOp::Mount {
        path: b"/".to_vec(),
    })? {
        ReplyBody::Mount { fh, .. } => fh,
        other => bail!("unexpected MOUNT reply {other:?}"),
    };
    Ok((conn, root, max_io))
}

/// Makes sure `target.file` holds `target.file_size` bytes of [`pattern_byte`], writing it
/// through the server if it does not (a backend the bench cannot write to directly, such as
/// an NFS export of a Gluster volume). Returns whether it wrote. A file of the right size is
/// taken as it is (`--verify` would catch other contents).
pub(crate) fn ensure_file(target: &Target, config: &LoadConfig) -> anyhow::Result<bool> {
    let (mut conn, root, max_io) = session(target, config)?;
    let name = target.file.as_bytes().to_vec();
    if let Ok(ReplyBody::Lookup {
        attr: Some(attr), ..
    }) = conn.call(RequestOp::Lookup {
        dir: root,
        name: name.clone(),
    }) && attr.size == target.file_size
    {
        return Ok(false);
    }
    let fh = match conn.call(RequestOp::Create {
        dir: root,
        name,
        how: protocol::CreateHow::Unchecked(protocol::SetAttr {
            mode: Some(0o644),
            size: Some(0),
            ..protocol::SetAttr::default()
        }),
    })? {
        ReplyBody::Create(protocol::NewObject { fh: Some(fh), .. }) => fh,
        other => bail!("unexpected CREATE reply {other:?}"),
    };
    let chunk = u64::from(max_io.min(1 << 20));
    let mut offset = 0;
    while offset < target.file_size {
        let n = chunk.min(target.file_size - offset);
        let data: Vec<u8> = (offset..offset + n).map(pattern_byte).collect();
        match conn.call(RequestOp::Write {
            fh,
            offset,
            stable: protocol::StableHow::Unstable,
            data: data.into(),
        })? {
            ReplyBody::Write { count, .. } if u64::from(count) == n => offset += n,
            other => bail!("unexpected WRITE reply at {offset}: {other:?}"),
        }
    }
    conn.call(RequestOp::Commit {
        fh,
        offset: 0,
        count: 0,
    })?;
    Ok(true)
}

/// An authenticated connection (handshake, LOGIN, MOUNT, LOOKUP done) left idle: what
/// `sfs-bench idle` opens by the thousand.
pub(crate) struct IdleConnection {
    _conn: Conn,
}

pub(crate) fn connect_idle(target: &Target, config: &LoadConfig) -> anyhow::Result<IdleConnection> {
    let (conn, _, _) = connect(target, config)?;
    Ok(IdleConnection { _conn: conn })
}

/// Reads the target file round and round until `progress.stop`, adding payload bytes to
/// `progress.bytes`.
pub(crate) fn run(target: &Target, config: &LoadConfig, progress: &Progress) -> anyhow::Result<()> {
    let (mut conn, fh, max_io) = connect(target, config)?;
    let chunk = u64::from(config.chunk.min(max_io).max(1));
    let mut next_offset = 0u64;
    // Request id -> offset: replies come in whatever order the server's workers finish them
    // (the protocol matches them by id), so the offset a reply answers is looked up, not
    // assumed from the order of sending.
    let mut in_flight = std::collections::HashMap::with_capacity(config.window);
    let mut issue = |conn: &mut Conn, in_flight: &mut std::collections::HashMap<u64, u64>| {
        let offset = next_offset;
        next_offset += chunk;
        if next_offset >= target.file_size {
            next_offset = 0;
        }
        let id = conn.send(RequestOp::Read {
            fh,
            offset,
            count: chunk as u32,
        })?;
        if config.verify {
            in_flight.insert(id, offset);
        }
        anyhow::Ok(())
    };
    for _ in 0..config.window.max(1) {
        issue(&mut conn, &mut in_flight)?;
    }
    while !progress.stop.load(Relaxed) {
        let bytes = if config.verify {
            let message = conn.client.next_message()?;
            match message.context("the server closed the connection")? {
                ServerMessage::Reply(reply) => {
                    let offset = in_flight
                        .remove(&reply.id)
                        .with_context(|| format!("a reply to request {} never sent", reply.id))?;
                    match reply.result {
                        Ok(ReplyBody::Read { data, .. }) => {
                            verify_read(&data, offset, chunk, target.file_size)?;
                            data.len() as u64
                        }
                        other => bail!("READ failed: {other:?}"),
                    }
                }
                ServerMessage::Invalidate(_) => continue,
            }
        } else {
            // Frame only: the record length is all the cheap client needs. (Which request a
            // reply answers does not matter: each is replaced by one new READ.) The opener's
            // nonce counter is not advanced, so after the first skipped record this
            // connection can never open a record again: skip mode is for the measurement
            // phase only.
            conn.client.skip_message()? as u64
        };
        progress.bytes.fetch_add(bytes, Relaxed);
        issue(&mut conn, &mut in_flight)?;
    }
    Ok(())
}

/// Checks that a READ at `offset` of `chunk` bytes got exactly the file's bytes there.
fn verify_read(data: &[u8], offset: u64, chunk: u64, file_size: u64) -> anyhow::Result<()> {
    let want = chunk.min(file_size - offset) as usize;
    if data.len() != want {
        bail!("short READ at {offset}: {} of {want} bytes", data.len());
    }
    if let Some(bad) = (0..data.len()).find(|&i| data[i] != pattern_byte(offset + i as u64)) {
        bail!("wrong byte at offset {}", offset + bad as u64);
    }
    Ok(())
}
