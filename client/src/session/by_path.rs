//! Requests by path from the export's root, which ride with a new connection's LOGIN when it
//! makes one ([`Client::connection_with`]): FETCH (an object and a regular file's first
//! bytes) and CREATEAT (a file made), each in the first round trip after the handshake.

use protocol::{Attr, CreateHow, Data, FileHandle, FileType, NfsStatus, ReplyBody, RequestOp};

use super::Client;
use super::error::{ProtocolError, SessionError};

/// What a FETCH found: the object and, for a regular file, its first bytes.
#[derive(Debug)]
pub(crate) struct Fetched {
    pub fh: FileHandle,
    pub attr: Attr,
    /// The file's bytes from offset 0 (empty for other types).
    pub data: Data,
    /// Whether `data` reaches the end of the file.
    pub eof: bool,
}

/// Most bytes asked for: the server clamps it to what fits one record. A FETCH riding with a
/// new connection's LOGIN asks for less, what TCP's first flight carries
/// ([`super::conn::FIRST_FLIGHT_FETCH`]).
const COUNT: u32 = u32::MAX;

impl Client {
    /// The object at `path` from the export's root, and a regular file's first bytes. `None`
    /// when the server cannot FETCH (a version before 5, or a backend without it): the caller
    /// walks with MOUNT and LOOKUP instead.
    pub(crate) async fn fetch(&self, path: &str) -> Result<Option<Fetched>, SessionError> {
        self.fetch_up_to(path, COUNT).await
    }

    /// [`Client::fetch`] without the bytes: the object at `path` and its attributes, in the
    /// first round trip after the handshake on a new session (as MOUNT and a LOOKUP per
    /// component would tell, in one). `sfs put` finds the directory it creates in this way.
    pub(crate) async fn fetch_object(&self, path: &str) -> Result<Option<Fetched>, SessionError> {
        self.fetch_up_to(path, 0).await
    }

    async fn fetch_up_to(&self, path: &str, count: u32) -> Result<Option<Fetched>, SessionError> {
        let since = self.inner.cache.stamp();
        let first_flight = RequestOp::Fetch {
            path: path.as_bytes().to_vec(),
            count: count.min(super::conn::FIRST_FLIGHT_FETCH),
        };
        let (conn, early) = self.connection_with(Some(first_flight)).await?;
        if !protocol::handshake::has_fetch(conn.version) {
            return Ok(None);
        }
        let reply = match early {
            // Busy: asked again below, with the usual pauses.
            Some(Err(NfsStatus::Jukebox)) | None => {
                let op = RequestOp::Fetch {
                    path: path.as_bytes().to_vec(),
                    count,
                };
                self.call(op).await
            }
            Some(r) => r.map_err(SessionError::Nfs),
        };
        let (fh, attr, eof, data) = match reply {
            Ok(ReplyBody::Fetch {
                fh,
                attr,
                eof,
                data,
            }) => (fh, attr, eof, data),
            Err(SessionError::Nfs(NfsStatus::NotSupp)) => return Ok(None),
            Err(e) => return Err(e),
            Ok(other) => return Err(self.unexpected(&other)),
        };
        // A server's word is checked before anything is written where the user asked: no more
        // than one record's worth, and bytes only for a regular file.
        if data.len() > conn.read_max as usize {
            return Err(self.protocol_error(ProtocolError::ReadTooLong {
                asked: conn.read_max,
                got: data.len(),
            }));
        }
        if attr.ftype != FileType::Regular && !data.is_empty() {
            return Err(self.protocol_error(ProtocolError::UnexpectedReply(protocol::Proc::Fetch)));
        }
        self.inner.cache.put(fh, attr, since);
        Ok(Some(Fetched {
            fh,
            attr,
            data,
            eof,
        }))
    }

    /// CREATEAT: the regular file at `path` from the export's root made as `how` says, and its
    /// attributes. `None` when the server cannot (a version before 11): the caller finds the
    /// directory and sends CREATE instead.
    pub(crate) async fn create_at(
        &self,
        path: &str,
        how: CreateHow,
    ) -> Result<Option<(FileHandle, Attr)>, SessionError> {
        // Unchecked may have opened an existing file; the others made this one.
        let made = !matches!(how, CreateHow::Unchecked(_));
        let since = self.inner.cache.stamp();
        let op = RequestOp::CreateAt {
            path: path.as_bytes().to_vec(),
            how,
        };
        let (conn, early) = self.connection_with(Some(op.clone())).await?;
        if !protocol::handshake::has_create_at(conn.version) {
            return Ok(None);
        }
        let reply = match early {
            Some(Err(NfsStatus::Jukebox)) | None => self.call(op).await,
            Some(r) => r.map_err(SessionError::Nfs),
        };
        let (dir, made_obj) = match reply {
            Ok(ReplyBody::CreateAt { dir, made }) => (dir, *made),
            Err(SessionError::Nfs(NfsStatus::NotSupp)) => return Ok(None),
            Err(e) => return Err(e),
            Ok(other) => return Err(self.unexpected(&other)),
        };
        // The directory gained a name: what this client knew of it goes (after the fact, as
        // the directory was not known before the reply).
        let name = last_component(path);
        self.inner.cache.naming(&dir, name);
        self.inner.cache.begin(&dir).end(None);
        let made = self.made(&dir, name, made_obj, (since, None), made).await?;
        Ok(Some((made.fh, made.attr)))
    }
}

/// The name a CREATEAT path makes: its last component.
fn last_component(path: &str) -> &[u8] {
    path.rsplit('/').next().unwrap_or(path).as_bytes()
}
