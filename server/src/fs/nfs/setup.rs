//! Start-up, before the runtime runs: parse the backend URL, ask the port mapper for the NFS
//! and MOUNT ports it does not give, and MOUNT the export for its root handle. These few
//! calls block (with timeouts): nothing else is running yet.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use protocol::xdr::Reader;

use super::ops::{self, Raw};
use super::rpc::{self, AuthSys, RecordReader};

const PMAP_PROG: u32 = 100_000;
const PMAP_VERS: u32 = 2;
const PMAP_GETPORT: u32 = 3;
pub(crate) const MOUNT_PROG: u32 = 100_005;
pub(crate) const MOUNT_VERS: u32 = 3;
const MOUNT_MNT: u32 = 1;
pub(crate) const NFS_PROG: u32 = 100_003;
pub(crate) const NFS_VERS: u32 = 3;
const TIMEOUT: Duration = Duration::from_secs(5);

/// `nfs://HOST[:PORT]/EXPORT[?mountport=N]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BackendUrl {
    pub host: String,
    pub nfs_port: Option<u16>,
    pub mount_port: Option<u16>,
    /// The export path, from its leading `/`.
    pub export: String,
}

impl std::str::FromStr for BackendUrl {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<BackendUrl> {
        let rest = s
            .strip_prefix("nfs://")
            .ok_or_else(|| anyhow!("backend URL {s:?} must start with nfs://"))?;
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let slash = rest
            .find('/')
            .ok_or_else(|| anyhow!("backend URL {s:?} has no export path (nfs://HOST/EXPORT)"))?;
        let (authority, export) = rest.split_at(slash);
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| anyhow!("unclosed [ in {s:?}"))?;
            (h, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            bail!("backend URL {s:?} has no host");
        }
        let port_of = |p: &str| {
            p.parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| anyhow!("bad port {p:?} in {s:?}"))
        };
        let nfs_port = port.map(port_of).transpose()?;
        let mut mount_port = None;
        for kv in query.into_iter().flat_map(|q| q.split('&')) {
            match kv.split_once('=') {
                Some(("mountport", p)) => mount_port = Some(port_of(p)?),
                _ => bail!("unknown option {kv:?} in {s:?} (known: mountport=N)"),
            }
        }
        Ok(BackendUrl {
            host: host.to_string(),
            nfs_port,
            mount_port,
            export: export.to_string(),
        })
    }
}

/// One blocking call on a fresh connection; returns the procedure's results.
fn call(
    addr: SocketAddr,
    prog: u32,
    vers: u32,
    proc: u32,
    auth: &AuthSys,
    args: &Raw,
) -> Result<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&addr, TIMEOUT)
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(TIMEOUT))?;
    s.set_write_timeout(Some(TIMEOUT))?;
    let mut rec = Vec::new();
    rpc::encode_call(&mut rec, 1, prog, vers, proc, Some(auth), args);
    s.write_all(&rec)?;
    let mut rr = RecordReader::new(64 * 1024);
    let mut buf = [0u8; 4096];
    loop {
        let n = s
            .read(&mut buf)
            .with_context(|| format!("reading from {addr}"))?;
        if n == 0 {
            return Err(
                NotAnswering(format!("{addr} closed the connection without answering")).into(),
            );
        }
        rr.push(&buf[..n]);
        if let Some(r) = rr.next_record()? {
            let (_, res) = rpc::decode_reply(&r)?;
            let body = res.with_context(|| format!("program {prog} at {addr}"))?;
            return Ok(body.to_vec());
        }
    }
}

/// The TCP port of `prog` version `vers`, from the port mapper on port 111.
fn getport(host: SocketAddr, prog: u32, vers: u32, auth: &AuthSys) -> Result<u16> {
    let pm = SocketAddr::new(host.ip(), 111);
    let body = call(
        pm,
        PMAP_PROG,
        PMAP_VERS,
        PMAP_GETPORT,
        auth,
        &ops::getport(prog, vers),
    )
    .context("asking the port mapper (give the port in the URL to skip it)")?;
    let port = Reader::new(&body).u32("port")?;
    match u16::try_from(port) {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(NotAnswering(format!(
            "program {prog} version {vers} is not registered with the port mapper at {pm}"
        ))
        .into()),
    }
}

/// What start-up learned: where the NFS service is, and the export's root handle.
#[derive(Debug)]
pub(crate) struct Mounted {
    pub nfs_addr: SocketAddr,
    pub root_fh: Vec<u8>,
}

/// The backend did not answer: nothing listens, or its program is not registered yet (an
/// NFS server still starting), as opposed to an answer that refuses us.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct NotAnswering(String);

/// Whether `e` says the backend is not up (yet), which waiting may mend.
fn not_answering(e: &anyhow::Error) -> bool {
    use std::io::ErrorKind as K;
    e.chain().any(|c| {
        c.is::<NotAnswering>()
            || c.downcast_ref::<std::io::Error>().is_some_and(|io| {
                matches!(
                    io.kind(),
                    K::ConnectionRefused
                        | K::ConnectionReset
                        | K::ConnectionAborted
                        | K::NotConnected
                        | K::TimedOut
                        | K::WouldBlock
                        | K::UnexpectedEof
                )
            })
    })
}

/// [`mount`], tried again with backoff while the backend is not answering (see
/// [`not_answering`]) for up to `wait`, so sfsd can start alongside its NFS server. An answer
/// that refuses (MOUNT denied, a malformed reply) ends the wait at once.
pub(crate) fn mount_waiting(url: &BackendUrl, wait: Duration) -> Result<Mounted> {
    let started = Instant::now();
    let mut delay = Duration::from_millis(100);
    loop {
        match mount(url) {
            Err(e) if not_answering(&e) && started.elapsed() + delay <= wait => {
                tracing::warn!(
                    error = format!("{e:#}"),
                    waited_s = started.elapsed().as_secs(),
                    wait_s = wait.as_secs(),
                    "the NFS backend is not answering yet; trying again"
                );
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            Err(e) if not_answering(&e) && !wait.is_zero() => {
                return Err(e.context(format!(
                    "the backend did not answer within {} s (--backend-wait-secs)",
                    wait.as_secs()
                )));
            }
            r => return r,
        }
    }
}

/// Resolves the URL's host, finds the ports and MOUNTs the export (as root, the way a kernel
/// client mounts; every later call carries the requesting user's credentials).
pub(crate) fn mount(url: &BackendUrl) -> Result<Mounted> {
    let host = (url.host.as_str(), 0)
        .to_socket_addrs()
        .with_context(|| format!("resolving {}", url.host))?
        .next()
        .ok_or_else(|| anyhow!("{} has no address", url.host))?;
    let root = AuthSys {
        uid: 0,
        gid: 0,
        gids: Vec::new(),
    };
    let nfs_port = match url.nfs_port {
        Some(p) => p,
        None => getport(host, NFS_PROG, NFS_VERS, &root)?,
    };
    let mount_port = match url.mount_port {
        Some(p) => p,
        None => getport(host, MOUNT_PROG, MOUNT_VERS, &root)?,
    };
    let mnt_addr = SocketAddr::new(host.ip(), mount_port);
    let body = call(
        mnt_addr,
        MOUNT_PROG,
        MOUNT_VERS,
        MOUNT_MNT,
        &root,
        &ops::mnt(url.export.as_bytes()),
    )
    .context("MOUNT")?;
    let root_fh = match ops::mnt_result(&mut Reader::new(&body))? {
        Ok(fh) if !fh.is_empty() => fh.to_vec(),
        Ok(_) => bail!("MOUNT of {} returned an empty handle", url.export),
        Err(code) => bail!("MOUNT of {} refused (mountstat3 {code})", url.export),
    };
    Ok(Mounted {
        nfs_addr: SocketAddr::new(host.ip(), nfs_port),
        root_fh,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_silence_is_waited_out() {
        use std::io::{Error, ErrorKind};
        let io = |k| anyhow::Error::from(Error::from(k)).context("MOUNT");
        for k in [
            ErrorKind::ConnectionRefused,
            ErrorKind::ConnectionReset,
            ErrorKind::TimedOut,
            ErrorKind::WouldBlock,
            ErrorKind::UnexpectedEof,
        ] {
            assert!(not_answering(&io(k)), "{k:?}");
        }
        let unregistered =
            anyhow::Error::from(NotAnswering("not registered".into())).context("port mapper");
        assert!(not_answering(&unregistered));
        // Answers that refuse, and local trouble, are not waited out.
        assert!(!not_answering(&io(ErrorKind::PermissionDenied)));
        assert!(!not_answering(&anyhow!(
            "MOUNT of /x refused (mountstat3 13)"
        )));
        assert!(!not_answering(&anyhow!("resolving nas: no address")));
    }

    #[test]
    fn waiting_ends_at_its_limit() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let url: BackendUrl = format!("nfs://127.0.0.1:{port}/e?mountport={port}")
            .parse()
            .unwrap();
        let started = Instant::now();
        let e = mount_waiting(&url, Duration::from_millis(500)).unwrap_err();
        let took = started.elapsed();
        assert!(format!("{e:#}").contains("did not answer within"), "{e:#}");
        assert!(
            took >= Duration::from_millis(300),
            "gave up early: {took:?}"
        );
        assert!(took < Duration::from_secs(5), "{took:?}");
        let e = mount_waiting(&url, Duration::ZERO).unwrap_err();
        assert!(!format!("{e:#}").contains("did not answer within"), "{e:#}");
    }

    #[test]
    fn urls() {
        let u: BackendUrl = "nfs://127.0.0.1:2049/export?mountport=20048"
            .parse()
            .unwrap();
        assert_eq!(
            u,
            BackendUrl {
                host: "127.0.0.1".into(),
                nfs_port: Some(2049),
                mount_port: Some(20048),
                export: "/export".into()
            }
        );
        let u: BackendUrl = "nfs://[::1]/a/b".parse().unwrap();
        assert_eq!(
            (u.host.as_str(), u.nfs_port, u.export.as_str()),
            ("::1", None, "/a/b")
        );
        let u: BackendUrl = "nfs://nas/".parse().unwrap();
        assert_eq!((u.host.as_str(), u.mount_port), ("nas", None));
        for bad in [
            "http://x/e",
            "nfs://x",
            "nfs:///e",
            "nfs://x:0/e",
            "nfs://x:99999/e",
            "nfs://x/e?mountport=",
            "nfs://x/e?port=1",
            "nfs://[::1/e",
        ] {
            assert!(bad.parse::<BackendUrl>().is_err(), "{bad} parsed");
        }
    }
}
