//! The extended-attribute operations (GETXATTR, SETXATTR, LISTXATTR, REMOVEXATTR; POSIX ACLs
//! travel as `system.posix_acl_*` attributes). Values, names and lists arrive bounded by
//! Linux's own limits ([`protocol::xattr`]): the decoder refuses a hostile server's larger
//! ones before allocating, so a caller may hand them to the kernel as they are.

use protocol::{FileHandle, ReplyBody, RequestOp};

use super::Client;
use super::error::SessionError;

impl Client {
    /// GETXATTR: the whole value of `name`.
    pub async fn getxattr(&self, fh: &FileHandle, name: &[u8]) -> Result<Vec<u8>, SessionError> {
        let op = RequestOp::GetXattr {
            fh: *fh,
            name: name.to_vec(),
        };
        let reply = self.call(op).await?;
        match reply {
            ReplyBody::GetXattr { value } => Ok(value),
            other => Err(self.unexpected(&other)),
        }
    }

    /// SETXATTR with `flags` ([`protocol::xattr::flags`]). The object's ctime moves (and an
    /// ACL changes its mode), so its cached attributes are replaced by the reply's.
    pub async fn setxattr(
        &self,
        fh: &FileHandle,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> Result<(), SessionError> {
        let change = self.inner.cache.begin(fh);
        let op = RequestOp::SetXattr {
            fh: *fh,
            name: name.to_vec(),
            value: value.to_vec(),
            flags,
        };
        match self.call(op).await? {
            ReplyBody::SetXattr { attr } => {
                change.end(attr);
                Ok(())
            }
            other => Err(self.unexpected(&other)),
        }
    }

    /// LISTXATTR: the names the server lets this user see.
    pub async fn listxattr(&self, fh: &FileHandle) -> Result<Vec<Vec<u8>>, SessionError> {
        match self.call(RequestOp::ListXattr { fh: *fh }).await? {
            ReplyBody::ListXattr { names } => Ok(names),
            other => Err(self.unexpected(&other)),
        }
    }

    /// REMOVEXATTR.
    pub async fn removexattr(&self, fh: &FileHandle, name: &[u8]) -> Result<(), SessionError> {
        let change = self.inner.cache.begin(fh);
        let op = RequestOp::RemoveXattr {
            fh: *fh,
            name: name.to_vec(),
        };
        match self.call(op).await? {
            ReplyBody::RemoveXattr { attr } => {
                change.end(attr);
                Ok(())
            }
            other => Err(self.unexpected(&other)),
        }
    }
}
