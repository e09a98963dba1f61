//! ONC RPC (RFC 5531) over TCP, sans I/O: record marking, calls with AUTH_SYS credentials,
//! and the reply header.
//!
//! Calls are packed with `nfs3_types`' RPC types. Incoming records are assembled by
//! [`RecordReader`], which refuses a record larger than its bound *before* buffering it (a
//! fragment header declares the length), so a backend cannot make sfsd buffer more than one
//! bounded record per connection.

use nfs3_types::rpc::{auth_unix, call_body, opaque_auth};
use nfs3_types::xdr_codec::{Opaque, Pack};
use protocol::error::DecodeError;
use protocol::xdr::Reader;

/// AUTH_SYS carries at most 16 supplementary groups (RFC 5531, `authsys_parms`).
pub(crate) const AUTH_SYS_MAX_GIDS: usize = 16;
/// The machine name sfsd puts in its AUTH_SYS credentials.
const MACHINE_NAME: &[u8] = b"sfsd";
/// The last-fragment bit of a record mark.
const LAST_FRAGMENT: u32 = 0x8000_0000;

/// The identity a call is made for (the requesting user's mapped ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AuthSys {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups; only the first [`AUTH_SYS_MAX_GIDS`] are sent.
    pub gids: Vec<u32>,
}

impl AuthSys {
    fn opaque_auth(&self) -> opaque_auth<'static> {
        let gids = self.gids.iter().copied().take(AUTH_SYS_MAX_GIDS).collect();
        opaque_auth::auth_unix(&auth_unix {
            stamp: 0,
            machinename: Opaque::borrowed(MACHINE_NAME),
            uid: self.uid,
            gid: self.gid,
            gids,
        })
    }
}

/// Appends one call, as one record (record mark included), to `out`.
pub(crate) fn encode_call(
    out: &mut Vec<u8>,
    xid: u32,
    prog: u32,
    vers: u32,
    proc: u32,
    auth: Option<&AuthSys>,
    args: &impl Pack,
) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    let body = call_body {
        rpcvers: 2,
        prog,
        vers,
        proc,
        cred: auth.map_or_else(opaque_auth::default, AuthSys::opaque_auth),
        verf: opaque_auth::default(),
    };
    // Packing into a Vec cannot fail (the only errors are the writer's and over-4-GiB
    // lengths, which our arguments never have).
    let packed = xid.pack(out).and_then(|_| 0u32.pack(out)); // msg_type CALL
    let packed = packed
        .and_then(|_| body.pack(out))
        .and_then(|_| args.pack(out));
    debug_assert!(packed.is_ok());
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&(len | LAST_FRAGMENT).to_be_bytes());
}

/// Why a call did not get a result from the backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RpcError {
    #[error("the backend refused the call: {0}")]
    Refused(&'static str),
    #[error("malformed reply: {0}")]
    Malformed(#[from] DecodeError),
}

/// Reads a reply record's header: its xid, then either the procedure's results (the rest of
/// the record) or why there are none.
pub(crate) fn decode_reply(record: &[u8]) -> Result<(u32, Result<&[u8], RpcError>), DecodeError> {
    let mut r = Reader::new(record);
    let xid = r.u32("xid")?;
    let mtype = r.u32("message type")?;
    if mtype != 1 {
        return Err(DecodeError::BadDiscriminant {
            what: "message type",
            value: mtype,
        });
    }
    let result = match r.u32("reply status")? {
        0 => {
            let _flavor = r.u32("verifier flavor")?;
            r.opaque(400, "verifier")?;
            match r.u32("accept status")? {
                0 => Ok(r.rest()),
                1 => Err(RpcError::Refused("program unavailable")),
                2 => Err(RpcError::Refused("program version mismatch")),
                3 => Err(RpcError::Refused("procedure unavailable")),
                4 => Err(RpcError::Refused("garbage arguments")),
                5 => Err(RpcError::Refused("system error")),
                value => {
                    return Err(DecodeError::BadDiscriminant {
                        what: "accept status",
                        value,
                    });
                }
            }
        }
        1 => match r.u32("reject status")? {
            0 => Err(RpcError::Refused("RPC version mismatch")),
            1 => Err(RpcError::Refused(match r.u32("auth status")? {
                1 => "bad credentials",
                2 => "credentials rejected (AUTH_SYS not accepted?)",
                5 => "authentication too weak (the export wants another flavor)",
                _ => "authentication error",
            })),
            value => {
                return Err(DecodeError::BadDiscriminant {
                    what: "reject status",
                    value,
                });
            }
        },
        value => {
            return Err(DecodeError::BadDiscriminant {
                what: "reply status",
                value,
            });
        }
    };
    Ok((xid, result))
}

/// A record larger than the bound, or a stream that is not record-marked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("backend record of {len} bytes or more exceeds the limit of {max}")]
pub(crate) struct TooLarge {
    pub len: usize,
    pub max: usize,
}

/// Assembles records from a byte stream, never buffering more than one bounded record.
#[derive(Debug)]
pub(crate) struct RecordReader {
    /// Bytes received and not yet assembled (at most one fragment header's worth past the
    /// bound, see [`RecordReader::push`]).
    input: Vec<u8>,
    /// The record being assembled from earlier fragments.
    record: Vec<u8>,
    max: usize,
}

impl RecordReader {
    pub(crate) fn new(max: usize) -> RecordReader {
        RecordReader {
            input: Vec::new(),
            record: Vec::new(),
            max,
        }
    }

    /// Adds received bytes. The caller must drain [`RecordReader::next_record`] after each
    /// push; with that, the buffer holds at most one record plus one read.
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.input.extend_from_slice(data);
    }

    /// The next complete record, if one has arrived.
    pub(crate) fn next_record(&mut self) -> Result<Option<Vec<u8>>, TooLarge> {
        loop {
            if self.input.len() < 4 {
                return Ok(None);
            }
            let mark =
                u32::from_be_bytes([self.input[0], self.input[1], self.input[2], self.input[3]]);
            let len = (mark & !LAST_FRAGMENT) as usize;
            let total = self.record.len().saturating_add(len);
            if total > self.max {
                return Err(TooLarge {
                    len: total,
                    max: self.max,
                });
            }
            if self.input.len() < 4 + len {
                // Reserve what the declared (bounded) fragment needs, once.
                self.input.reserve(4 + len - self.input.len());
                return Ok(None);
            }
            if self.record.is_empty() && mark & LAST_FRAGMENT != 0 {
                // The common case, a one-fragment record: hand over the bytes without a copy
                // when nothing follows them.
                let rec = if self.input.len() == 4 + len {
                    let mut v = std::mem::take(&mut self.input);
                    v.drain(..4);
                    v
                } else {
                    let rec = self.input[4..4 + len].to_vec();
                    self.input.drain(..4 + len);
                    rec
                };
                return Ok(Some(rec));
            }
            self.record.extend_from_slice(&self.input[4..4 + len]);
            self.input.drain(..4 + len);
            if mark & LAST_FRAGMENT != 0 {
                return Ok(Some(std::mem::take(&mut self.record)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(xid: u32, body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        for w in [xid, 1, 0, 0, 0, 0] {
            v.extend_from_slice(&w.to_be_bytes());
        }
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn calls_are_one_record_with_auth_sys() {
        let mut out = Vec::new();
        let auth = AuthSys {
            uid: 1000,
            gid: 100,
            gids: (0..40).collect(),
        };
        encode_call(&mut out, 7, 100_003, 3, 1, Some(&auth), &5u32);
        let mark = u32::from_be_bytes(out[..4].try_into().unwrap());
        assert_eq!(mark & LAST_FRAGMENT, LAST_FRAGMENT);
        assert_eq!((mark & !LAST_FRAGMENT) as usize, out.len() - 4);
        let mut r = Reader::new(&out[4..]);
        assert_eq!(r.u32("").unwrap(), 7); // xid
        assert_eq!(r.u32("").unwrap(), 0); // CALL
        assert_eq!(r.u32("").unwrap(), 2); // RPC version
        assert_eq!(r.u32("").unwrap(), 100_003);
        assert_eq!(r.u32("").unwrap(), 3);
        assert_eq!(r.u32("").unwrap(), 1);
        assert_eq!(r.u32("").unwrap(), 1); // AUTH_SYS
        let cred = r.opaque(400, "").unwrap();
        let mut c = Reader::new(cred);
        c.u32("").unwrap(); // stamp
        assert_eq!(c.opaque(255, "").unwrap(), b"sfsd");
        assert_eq!(c.u32("").unwrap(), 1000);
        assert_eq!(c.u32("").unwrap(), 100);
        // Only the 16 groups AUTH_SYS can carry.
        assert_eq!(c.u32("").unwrap(), 16);
        assert_eq!(r.u32("").unwrap(), 0); // verifier AUTH_NONE
        assert_eq!(r.opaque(400, "").unwrap(), b"");
        assert_eq!(r.u32("").unwrap(), 5); // the arguments
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn reply_headers() {
        let r = reply(9, &[1, 2, 3, 4]);
        let (xid, res) = decode_reply(&r).unwrap();
        assert_eq!((xid, res), (9, Ok(&[1u8, 2, 3, 4][..])));
        let mut denied = Vec::new();
        for w in [3u32, 1, 1, 1, 5] {
            denied.extend_from_slice(&w.to_be_bytes());
        }
        assert!(matches!(
            decode_reply(&denied),
            Ok((3, Err(RpcError::Refused(_))))
        ));
        // A CALL where a reply belongs, a truncated header, an unknown status.
        assert!(decode_reply(&[0, 0, 0, 1, 0, 0, 0, 0]).is_err());
        assert!(decode_reply(&[0, 0, 0, 1, 0, 0]).is_err());
        let mut bad = reply(1, &[]);
        bad[8..12].copy_from_slice(&7u32.to_be_bytes());
        assert!(decode_reply(&bad).is_err());
    }

    #[test]
    fn records_are_assembled_and_bounded() {
        let mut rr = RecordReader::new(16);
        // Two fragments, delivered a byte at a time, then a one-fragment record.
        let mut wire = Vec::new();
        wire.extend_from_slice(&3u32.to_be_bytes());
        wire.extend_from_slice(b"abc");
        wire.extend_from_slice(&(2 | LAST_FRAGMENT).to_be_bytes());
        wire.extend_from_slice(b"de");
        wire.extend_from_slice(&(1 | LAST_FRAGMENT).to_be_bytes());
        wire.extend_from_slice(b"f");
        let mut got = Vec::new();
        for b in &wire {
            rr.push(&[*b]);
            while let Some(r) = rr.next_record().unwrap() {
                got.push(r);
            }
        }
        assert_eq!(got, vec![b"abcde".to_vec(), b"f".to_vec()]);
        // A record declared larger than the bound is refused from its header alone.
        let mut rr = RecordReader::new(16);
        rr.push(&(0x7fff_ffff | LAST_FRAGMENT).to_be_bytes());
        assert!(rr.next_record().is_err());
        // So is one whose fragments add up past it.
        let mut rr = RecordReader::new(16);
        for _ in 0..2 {
            rr.push(&10u32.to_be_bytes());
            rr.push(&[0; 10]);
        }
        assert!(matches!(rr.next_record(), Err(TooLarge { len: 20, .. })));
    }
}
