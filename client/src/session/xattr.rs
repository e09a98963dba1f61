//! The extended-attribute operations (GETXATTR, SETXATTR, LISTXATTR, REMOVEXATTR; POSIX ACLs
//! travel as `system.posix_acl_*` attributes). Values, names and lists arrive bounded by
//! Linux's own limits ([`protocol::xattr`]): the decoder refuses a hostile server's larger
//! ones before allocating, so a caller may hand them to the kernel as they are. Answers to
//! GETXATTR and LISTXATTR are cached like attributes ([`crate::cache::AttrCache::put_xattr`]).

use protocol::{FileHandle, NfsStatus, ReplyBody, RequestOp};

use super::Client;
use super::error::SessionError;
use crate::cache::{XattrAnswer, XattrKey};

impl Client {
    /// GETXATTR: the whole value of `name`. Answers (an absent attribute included) are
    /// cached per user while the object's attributes are: `ls -l` asks every file it lists
    /// for `system.posix_acl_access`, a round trip each otherwise.
    pub(crate) async fn getxattr(
        &self,
        fh: &FileHandle,
        name: &[u8],
    ) -> Result<Vec<u8>, SessionError> {
        if self.known_without(fh, name) {
            return Err(SessionError::Nfs(NfsStatus::NoXattr));
        }
        let authno = self.authno().await?;
        if self.listed_without(fh, authno, name) {
            return Err(SessionError::Nfs(NfsStatus::NoXattr));
        }
        let key = (authno, Some(name.to_vec()));
        match self.inner.cache.get_xattr(fh, &key) {
            Some(XattrAnswer::Value(v)) => return Ok(v),
            Some(XattrAnswer::Missing) => return Err(SessionError::Nfs(NfsStatus::NoXattr)),
            _ => {}
        }
        let op = RequestOp::GetXattr {
            fh: *fh,
            name: name.to_vec(),
        };
        let since = self.inner.cache.stamp();
        let answer = match self.call(op).await {
            Ok(ReplyBody::GetXattr { value }) => XattrAnswer::Value(value),
            Ok(other) => return Err(self.unexpected(&other)),
            Err(SessionError::Nfs(NfsStatus::NoXattr)) => XattrAnswer::Missing,
            Err(e) => return Err(e),
        };
        self.inner.cache.put_xattr(*fh, key, answer.clone(), since);
        match answer {
            XattrAnswer::Value(v) => Ok(v),
            _ => Err(SessionError::Nfs(NfsStatus::NoXattr)),
        }
    }

    /// GETXATTR's answer from the cache alone, with the authno it is cached for, if it is
    /// there and this client's authno is known without waiting ([`Client::authno_now`]): what
    /// [`Client::getxattr`] would answer without a request.
    pub(crate) fn getxattr_cached(
        &self,
        fh: &FileHandle,
        name: &[u8],
    ) -> Option<(u32, Result<Vec<u8>, SessionError>)> {
        let authno = self.authno_now()?;
        if self.known_without(fh, name) || self.listed_without(fh, authno, name) {
            return Some((authno, Err(SessionError::Nfs(NfsStatus::NoXattr))));
        }
        let answer = match self
            .inner
            .cache
            .get_xattr(fh, &(authno, Some(name.to_vec())))?
        {
            XattrAnswer::Value(v) => Ok(v),
            XattrAnswer::Missing => Err(SessionError::Nfs(NfsStatus::NoXattr)),
            XattrAnswer::Names(_) => return None,
        };
        Some((authno, answer))
    }

    /// Whether the cache answers `asked` of `fh` (for user `asked.0`: a name's value, or the
    /// list of names when `None`), by the answer itself or by what it shows of the name
    /// ([`Client::getxattr_cached`]'s rules).
    pub(crate) fn xattr_answered(&self, fh: &FileHandle, asked: &XattrKey) -> bool {
        let (authno, name) = asked;
        self.inner.cache.get_xattr(fh, asked).is_some()
            || name.as_deref().is_some_and(|name| {
                self.known_without(fh, name) || self.listed_without(fh, *authno, name)
            })
    }

    /// Whether `name` is `security.capability` on an object this client made new and no
    /// one gave one since ([`crate::cache::AttrCache::known_without_caps`]).
    fn known_without(&self, fh: &FileHandle, name: &[u8]) -> bool {
        name == b"security.capability" && self.inner.cache.known_without_caps(fh)
    }

    /// Whether the cached list of `fh`'s names for user `authno` (LISTXATTR's answer, or
    /// LISTDIR's "none") shows `name` absent, where that is exact ([`absent_unless_listed`]).
    fn listed_without(&self, fh: &FileHandle, authno: u32, name: &[u8]) -> bool {
        absent_unless_listed(name)
            && matches!(
                self.inner.cache.get_xattr(fh, &(authno, None)),
                Some(XattrAnswer::Names(names)) if !names.iter().any(|n| n == name)
            )
    }

    /// LISTXATTR's answer from the cache alone, as [`Client::getxattr_cached`].
    pub(crate) fn listxattr_cached(&self, fh: &FileHandle) -> Option<(u32, Vec<Vec<u8>>)> {
        let authno = self.authno_now()?;
        match self.inner.cache.get_xattr(fh, &(authno, None))? {
            XattrAnswer::Names(names) => Some((authno, names)),
            _ => None,
        }
    }

    /// SETXATTR with `flags` ([`protocol::xattr::flags`]). The object's ctime moves (and an
    /// ACL changes its mode), so its cached attributes are replaced by the reply's.
    pub(crate) async fn setxattr(
        &self,
        fh: &FileHandle,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> Result<(), SessionError> {
        self.inner.cache.xattr_changing(fh);
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

    /// LISTXATTR: the names the server lets this user see, cached as GETXATTR's answers are.
    pub(crate) async fn listxattr(&self, fh: &FileHandle) -> Result<Vec<Vec<u8>>, SessionError> {
        let key = (self.authno().await?, None);
        if let Some(XattrAnswer::Names(names)) = self.inner.cache.get_xattr(fh, &key) {
            return Ok(names);
        }
        let since = self.inner.cache.stamp();
        match self.call(RequestOp::ListXattr { fh: *fh }).await? {
            ReplyBody::ListXattr { names } => {
                let answer = XattrAnswer::Names(names.clone());
                self.inner.cache.put_xattr(*fh, key, answer, since);
                Ok(names)
            }
            other => Err(self.unexpected(&other)),
        }
    }

    /// REMOVEXATTR.
    pub(crate) async fn removexattr(
        &self,
        fh: &FileHandle,
        name: &[u8],
    ) -> Result<(), SessionError> {
        self.inner.cache.xattr_changing(fh);
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

/// Whether a name absent from a file's LISTXATTR answer is absent (GETXATTR `NoXattr`) for
/// the same user: true of `security.` and `system.posix_acl_` names, which Linux lets anyone
/// read and lists whenever they are there (the security module checks reading and listing
/// alike). Not of `user.` names, which need read permission to get (`EACCES`) but not to
/// list, nor of `trusted.` ones, which a server hides from users not mapped to root. `ls -l`
/// asks for such a name per file (the ACL; the FUSE mount answers the label itself): the list
/// reads it ahead in one request per file (`ls` of newer coreutils asks LISTXATTR itself),
/// and with LISTDIR's answer none.
pub(crate) fn absent_unless_listed(name: &[u8]) -> bool {
    name.starts_with(b"security.") || name.starts_with(b"system.posix_acl_")
}
