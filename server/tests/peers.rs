//! Coherence between two sfsd instances sharing one state directory and one export
//! (`--peer-listen`, `--peer`): a change made through one reaches the lease holders of the
//! other as an INVALIDATE within a bounded delay, and datagrams that are not from an instance
//! holding the state directory's secret (forged, garbled, replayed) change nothing.
//!
//! The cross-instance test runs on the local backend and, where NFS-Ganesha can run (root,
//! the packages), again with both instances in front of one Ganesha (the keys the instances
//! exchange are then the NFS server's fsid and fileid). With `SFSD_TEST_BACKEND=nfs` the
//! tests skip: each instance would start its own Ganesha.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use protocol::*;
use ring::hmac;

const USERS: &[(&str, u8, u32, &str)] = &[("alice", 1, 0, "0")];

/// The bound the test holds the cross-instance INVALIDATE to (sfsd gathers changes for 2 ms;
/// the rest is loopback and two colors 0 on a shared, busy 2-core machine).
const BOUND: Duration = Duration::from_millis(500);

fn skip_on_nfs() -> bool {
    if common::ganesha::enabled() {
        eprintln!("skipped: the peer channel is tested on the local backend only");
        return true;
    }
    false
}

/// A free UDP port on 127.0.0.1 (bound, then released for sfsd to take).
fn free_udp() -> SocketAddr {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn start(area: &Area, listen: SocketAddr, peers: &[SocketAddr]) -> Sfsd {
    start_on(area, listen, peers, None)
}

/// [`start`], in front of the NFS server at `backend` if given.
fn start_on(area: &Area, listen: SocketAddr, peers: &[SocketAddr], backend: Option<&str>) -> Sfsd {
    let users = area.users(USERS);
    let listen = listen.to_string();
    let peers: Vec<String> = peers.iter().map(|p| p.to_string()).collect();
    let peers = peers.join(",");
    let mut args = vec![
        "--users",
        users.to_str().unwrap(),
        "--lease-secs",
        "30",
        "--peer-listen",
        &listen,
        // One name for all instances (as behind one DNS name), whatever port each listens on.
        "--location",
        "sfs.test%4004",
    ];
    if !peers.is_empty() {
        args.extend(["--peer", &peers]);
    }
    if let Some(b) = backend {
        args.extend(["--backend", b]);
    }
    area.start(&args)
}

#[test]
fn invalidate_reaches_the_clients_of_another_instance() {
    if skip_on_nfs() {
        return;
    }
    let area = Area::new();
    across_instances(&area, None);
}

#[test]
fn invalidate_reaches_the_clients_of_another_instance_over_nfs() {
    if skip_on_nfs() {
        return;
    }
    if let Some(why) = common::ganesha::unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let area = Area::new();
    let ganesha = common::ganesha::Ganesha::start(area.path(), &area.export());
    across_instances(&area, Some(&ganesha.url()));
}

/// Two instances on one export (or one NFS server): changes through either reach the lease
/// holders of the other.
fn across_instances(area: &Area, backend: Option<&str>) {
    std::fs::write(area.export().join("f"), b"v1").unwrap();
    let (pa, pb) = (free_udp(), free_udp());
    // Both instances get the same list; each skips its own address.
    let a = start_on(area, pa, &[pa, pb], backend);
    let b = start_on(area, pb, &[pa, pb], backend);
    assert_eq!(a.name, b.name, "one state directory, one name");

    let mut ca = a.connect();
    let mut cb = b.connect();
    let aa = ca.login("alice", 1).unwrap();
    let ab = cb.login("alice", 1).unwrap();
    let root = ca.mount(aa);
    let f = ca.lookup(aa, root, "f").unwrap();
    assert_eq!(ca.getattr(aa, f).unwrap().lease_ms, 30_000);
    // The handle A issued works on B (shared handle secret).
    assert_eq!(cb.getattr(ab, f).unwrap().size, 2);

    // A change through B: A's lease holder hears of it at once, not after 30 s.
    cb.write(ab, f, 0, b"v2-longer").unwrap();
    let written = Instant::now();
    match ca.next_message_timeout(Duration::from_secs(5)) {
        Some(ServerMessage::Invalidate(i)) => {
            assert_eq!(i.fh, f);
            assert!(i.attr.is_none(), "A has not seen the new attributes");
        }
        o => panic!("no INVALIDATE from the other instance: {o:?}"),
    }
    let delay = written.elapsed();
    eprintln!("cross-instance INVALIDATE after {delay:?} (from B's WRITE reply)");
    assert!(delay < BOUND, "{delay:?}");
    assert_eq!(ca.getattr(aa, f).unwrap().size, 9);

    // The other way round, for a directory: B's holder of the root hears of A's CREATE.
    cb.getattr(ab, root).unwrap();
    ca.create(aa, root, "new", 0o644).unwrap();
    match cb.next_message_timeout(Duration::from_secs(5)) {
        Some(ServerMessage::Invalidate(i)) => assert_eq!(i.fh, root),
        o => panic!("no INVALIDATE of the directory: {o:?}"),
    }
}

/// The channel key as sfsd derives it (`server/src/peers.rs`: `PeerKey::derive`).
fn peer_key(secret: &[u8]) -> hmac::Key {
    let root = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let tag = hmac::sign(&root, b"sfsd peer channel v1");
    hmac::Key::new(hmac::HMAC_SHA256, tag.as_ref())
}

/// A datagram as an instance sends it (the layout in `server/src/peers.rs`).
fn datagram(key: &hmac::Key, sender: u64, seq: u64, keys: &[(u64, u64)]) -> Vec<u8> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let mut b = b"SFSP".to_vec();
    b.extend_from_slice(&[1, 0]);
    b.extend_from_slice(&(keys.len() as u16).to_be_bytes());
    b.extend_from_slice(&sender.to_be_bytes());
    b.extend_from_slice(&seq.to_be_bytes());
    b.extend_from_slice(&now.to_be_bytes());
    for (fsid, fileid) in keys {
        b.extend_from_slice(&fsid.to_be_bytes());
        b.extend_from_slice(&fileid.to_be_bytes());
    }
    let tag = hmac::sign(key, &b);
    b.extend_from_slice(tag.as_ref());
    b
}

#[test]
fn forged_garbled_and_replayed_datagrams_change_nothing() {
    if skip_on_nfs() {
        return;
    }
    let area = Area::new();
    std::fs::write(area.export().join("f"), b"v1").unwrap();
    let pa = free_udp();
    let a = start(&area, pa, &[]);
    let mut ca = a.connect();
    let aa = ca.login("alice", 1).unwrap();
    let root = ca.mount(aa);
    let f = ca.lookup(aa, root, "f").unwrap();
    ca.getattr(aa, f).unwrap();
    let meta = std::fs::metadata(area.export().join("f")).unwrap();
    let obj = (meta.dev(), meta.ino());
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let quiet = |c: &mut Client, what: &str| {
        if let Some(m) = c.next_message_timeout(Duration::from_millis(400)) {
            panic!("{what} caused {m:?}");
        }
    };

    // Under a key not derived from this state directory's secret.
    let wrong = peer_key(b"not the handle secret");
    udp.send_to(&datagram(&wrong, 9, 1, &[obj]), pa).unwrap();
    quiet(&mut ca, "a datagram under the wrong key");
    // Garbage, empty, oversized, truncated.
    let secret = std::fs::read_to_string(area.state().join("handle.secret")).unwrap();
    let right = peer_key(secret.trim().as_bytes());
    let good = datagram(&right, 9, 1, &[obj]);
    for bad in [
        vec![],
        vec![0xAB; 100],
        vec![0; 65_000],
        good[..good.len() - 1].to_vec(),
        {
            let mut t = good.clone();
            t[40] ^= 1; // the key, after the tag was computed
            t
        },
    ] {
        udp.send_to(&bad, pa).unwrap();
    }
    quiet(&mut ca, "a garbled datagram");

    // The genuine datagram does invalidate (so the ones above failed for their faults).
    udp.send_to(&good, pa).unwrap();
    match ca.next_message_timeout(Duration::from_secs(5)) {
        Some(ServerMessage::Invalidate(i)) => assert_eq!(i.fh, f),
        o => panic!("a genuine datagram did not invalidate: {o:?}"),
    }
    // Its replay does not, though the lease is held again.
    ca.getattr(aa, f).unwrap();
    udp.send_to(&good, pa).unwrap();
    quiet(&mut ca, "a replayed datagram");
    // A later one that skips a number (a datagram was lost) ends every lease.
    let other = ca.create(aa, root, "g", 0o644).unwrap();
    ca.getattr(aa, other).unwrap();
    udp.send_to(&datagram(&right, 9, 3, &[]), pa).unwrap();
    let mut seen = Vec::new();
    while let Some(ServerMessage::Invalidate(i)) =
        ca.next_message_timeout(Duration::from_millis(500))
    {
        seen.push(i.fh);
    }
    assert!(seen.contains(&f) && seen.contains(&other), "{seen:?}");
}
