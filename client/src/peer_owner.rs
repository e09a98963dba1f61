//! Who is at the other end of a loopback TCP connection: the owner of the peer's socket.
//!
//! `sfs nfs` serves the files of its owner's sfs identity over NFS on 127.0.0.1, which every
//! local process can reach, and NFS carries no authentication a local process could not forge
//! (AUTH_UNIX names any uid it likes). So the loopback server answers only connections whose
//! other end is a socket owned by its own user or by root (the kernel's NFS client; root can
//! read this process's memory anyway), as SFS's client checked that its NFS peer was the
//! kernel. A loopback peer's socket is in this host's `/proc/net/tcp` (or `tcp6`) with the uid
//! that created it; TCP has no SO_PEERCRED.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Whether `sfs nfs` may serve the connection from `peer` to its listener at `local`:
/// the peer's socket belongs to `me` or to root. Unknown peers (not on this host, or
/// already gone) are refused.
pub(crate) fn admits(local: SocketAddr, peer: SocketAddr, me: u32) -> bool {
    match owner(local, peer) {
        Some(uid) if uid == me || uid == 0 => true,
        found => {
            tracing::warn!(
                %peer,
                owner = ?found,
                "refused an NFS connection: only this user and the kernel may use this server"
            );
            false
        }
    }
}

/// The uid owning the local socket bound to `peer` and connected to `local`, if this host has
/// one.
pub(crate) fn owner(local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    let table = match peer {
        SocketAddr::V4(_) => "/proc/net/tcp",
        SocketAddr::V6(_) => "/proc/net/tcp6",
    };
    let text = std::fs::read_to_string(table).ok()?;
    owner_in(&text, local, peer)
}

/// [`owner`] over the text of a `/proc/net/tcp`-style table.
fn owner_in(table: &str, local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    table.lines().skip(1).find_map(|line| {
        let mut fields = line.split_whitespace();
        let _slot = fields.next()?;
        let bound = parse_endpoint(fields.next()?)?;
        let connected = parse_endpoint(fields.next()?)?;
        // state, tx:rx queues, timer, retransmits, then the uid.
        let uid = fields.nth(4)?.parse().ok()?;
        (same(bound, peer) && same(connected, local)).then_some(uid)
    })
}

/// Equal addresses, an IPv4 address matching its IPv6-mapped form.
fn same(a: SocketAddr, b: SocketAddr) -> bool {
    let v6 = |ip: IpAddr| match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    a.port() == b.port() && v6(a.ip()) == v6(b.ip())
}

/// `0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6). The kernel prints each 32-bit
/// word of the address as the host-order value of its bytes in memory, so the bytes come back
/// with `to_ne_bytes`; the port is printed in host order.
fn parse_endpoint(text: &str) -> Option<SocketAddr> {
    let (addr, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = addr.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn finds_the_owner_of_a_real_loopback_peer() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let out = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_in, peer) = l.accept().unwrap();
        assert_eq!(peer, out.local_addr().unwrap());
        let me = rustix::process::geteuid().as_raw();
        assert_eq!(owner(l.local_addr().unwrap(), peer), Some(me));
        // The listener's side of the same connection is not the peer.
        assert_eq!(owner(peer, l.local_addr().unwrap()), Some(me));
        let elsewhere: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(owner(l.local_addr().unwrap(), elsewhere), None);
    }

    #[test]
    fn parses_table_lines_and_refuses_strangers() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
            0: 0100007F:9C40 0100007F:0801 01 00000000:00000000 00:00000000 00000000  1001        0 1 1 0\n\
            1: 0100007F:0801 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0\n\
            2: garbage\n";
        let local: SocketAddr = "127.0.0.1:2049".parse().unwrap();
        let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        assert_eq!(owner_in(table, local, peer), Some(1001));
        assert_eq!(owner_in(table, peer, local), Some(0));
        let other: SocketAddr = "127.0.0.1:40001".parse().unwrap();
        assert_eq!(owner_in(table, local, other), None);
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:40000".parse().unwrap();
        assert!(same(mapped, peer));
        assert_eq!(
            parse_endpoint("00000000000000000000000001000000:0016"),
            Some("[::1]:22".parse().unwrap())
        );
        assert_eq!(parse_endpoint("0100007F"), None);
        assert_eq!(parse_endpoint("7F:0016"), None);
    }
}
