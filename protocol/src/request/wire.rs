//! The wire form of requests: how each [`RequestOp`] is encoded and decoded (XDR, as
//! `docs/PROTOCOL.md` lays out each procedure's arguments).

use super::*;

pub(crate) fn put_fh(buf: &mut Vec<u8>, fh: &FileHandle) {
    xdr::put_opaque(buf, fh.as_bytes());
}

pub(crate) fn get_fh(r: &mut Reader<'_>) -> Result<FileHandle, DecodeError> {
    let bytes = r.opaque(MAX_HANDLE_LEN, "file handle")?;
    FileHandle::from_slice(bytes).map_err(|_| DecodeError::BadHandleLength(bytes.len()))
}

pub(crate) fn get_name(r: &mut Reader<'_>) -> Result<Vec<u8>, DecodeError> {
    r.opaque_vec(MAX_NAME_LEN, "file name")
}

impl RequestOp {
    /// Whether doing this request twice has the same effect as doing it once, so a client may
    /// send it again after a broken connection without the reply cache's help: the
    /// procedure's rule ([`Proc::is_idempotent`]), and a SETATTR that sets only modes, owners
    /// or times, without a guard (setting them again sets the same; a truncation done again
    /// could cut what was written since, and a guard fails on the first try's ctime).
    pub fn is_idempotent(&self) -> bool {
        match self {
            RequestOp::SetAttr {
                attr, guard: None, ..
            } => attr.size.is_none(),
            op => op.proc().is_idempotent(),
        }
    }

    /// The procedure of this operation.
    pub fn proc(&self) -> Proc {
        match self {
            RequestOp::Null => Proc::Null,
            RequestOp::Mount { .. } => Proc::Mount,
            RequestOp::Fetch { .. } => Proc::Fetch,
            RequestOp::Login(_) => Proc::Login,
            RequestOp::GetAttr { .. } => Proc::GetAttr,
            RequestOp::SetAttr { .. } => Proc::SetAttr,
            RequestOp::Lookup { .. } => Proc::Lookup,
            RequestOp::Access { .. } => Proc::Access,
            RequestOp::ReadLink { .. } => Proc::ReadLink,
            RequestOp::Open { .. } => Proc::Open,
            RequestOp::Close { .. } => Proc::Close,
            RequestOp::Narrow { .. } => Proc::Narrow,
            RequestOp::Session { .. } => Proc::Session,
            RequestOp::Sequence { .. } => Proc::Sequence,
            RequestOp::Read { .. } => Proc::Read,
            RequestOp::Write { .. } => Proc::Write,
            RequestOp::Append { .. } => Proc::Append,
            RequestOp::Create { .. } => Proc::Create,
            RequestOp::CreateAt { .. } => Proc::CreateAt,
            RequestOp::Mkdir { .. } => Proc::Mkdir,
            RequestOp::Symlink { .. } => Proc::Symlink,
            RequestOp::Mknod { .. } => Proc::Mknod,
            RequestOp::Remove { .. } => Proc::Remove,
            RequestOp::Rmdir { .. } => Proc::Rmdir,
            RequestOp::Rename { .. } => Proc::Rename,
            RequestOp::Rename2 { .. } => Proc::Rename2,
            RequestOp::Link { .. } => Proc::Link,
            RequestOp::ReadDir { .. } => Proc::ReadDir,
            RequestOp::ReadDirPlus { .. } => Proc::ReadDirPlus,
            RequestOp::ListDir { .. } => Proc::ListDir,
            RequestOp::FsStat { .. } => Proc::FsStat,
            RequestOp::FsInfo { .. } => Proc::FsInfo,
            RequestOp::PathConf { .. } => Proc::PathConf,
            RequestOp::Commit { .. } => Proc::Commit,
            RequestOp::GetXattr { .. } => Proc::GetXattr,
            RequestOp::SetXattr { .. } => Proc::SetXattr,
            RequestOp::ListXattr { .. } => Proc::ListXattr,
            RequestOp::RemoveXattr { .. } => Proc::RemoveXattr,
            RequestOp::Lock(_) => Proc::Lock,
            RequestOp::Unlock(_) => Proc::Unlock,
            RequestOp::TestLock(_) => Proc::TestLock,
        }
    }

    /// Appends the procedure number and the arguments.
    pub(crate) fn encode(&self, buf: &mut Vec<u8>) {
        xdr::put_u32(buf, self.proc().code());
        match self {
            RequestOp::Null => {}
            RequestOp::Mount { path } => xdr::put_opaque(buf, path),
            RequestOp::Fetch { path, count } => {
                xdr::put_opaque(buf, path);
                xdr::put_u32(buf, *count);
            }
            RequestOp::Login(a) => {
                xdr::put_opaque(buf, a.user.as_bytes());
                xdr::put_fixed(buf, &a.public_key.to_bytes());
                xdr::put_u64(buf, a.seqno);
                xdr::put_fixed(buf, &a.signature);
            }
            RequestOp::Session { client_id, slots } => {
                xdr::put_fixed(buf, client_id);
                xdr::put_u32(buf, *slots);
            }
            RequestOp::Sequence { slot, seq, op } => {
                xdr::put_u32(buf, *slot);
                xdr::put_u32(buf, *seq);
                op.encode(buf);
            }
            RequestOp::Lock(a) => crate::lock::put_lock(buf, a),
            RequestOp::Unlock(a) => crate::lock::put_unlock(buf, a),
            RequestOp::TestLock(a) => crate::lock::put_test(buf, a),
            RequestOp::Narrow { gid, groups } => {
                xdr::put_u32(buf, *gid);
                xdr::put_count(buf, groups.len());
                for g in groups {
                    xdr::put_u32(buf, *g);
                }
            }
            RequestOp::GetAttr { fh }
            | RequestOp::ReadLink { fh }
            | RequestOp::Open { fh }
            | RequestOp::Close { fh }
            | RequestOp::FsStat { fh }
            | RequestOp::FsInfo { fh }
            | RequestOp::ListXattr { fh }
            | RequestOp::PathConf { fh } => put_fh(buf, fh),
            RequestOp::GetXattr { fh, name } | RequestOp::RemoveXattr { fh, name } => {
                put_fh(buf, fh);
                xdr::put_opaque(buf, name);
            }
            RequestOp::SetXattr {
                fh,
                name,
                value,
                flags,
            } => {
                put_fh(buf, fh);
                xdr::put_opaque(buf, name);
                xdr::put_opaque(buf, value);
                xdr::put_u32(buf, *flags);
            }
            RequestOp::SetAttr { fh, attr, guard } => {
                put_fh(buf, fh);
                attr.encode(buf);
                xdr::put_option(buf, guard.as_ref(), |b, t| t.encode(b));
            }
            RequestOp::Lookup { dir, name }
            | RequestOp::Remove { dir, name }
            | RequestOp::Rmdir { dir, name } => {
                put_fh(buf, dir);
                xdr::put_opaque(buf, name);
            }
            RequestOp::Access { fh, access } => {
                put_fh(buf, fh);
                xdr::put_u32(buf, *access);
            }
            RequestOp::Read { fh, offset, count } | RequestOp::Commit { fh, offset, count } => {
                put_fh(buf, fh);
                xdr::put_u64(buf, *offset);
                xdr::put_u32(buf, *count);
            }
            RequestOp::Write {
                fh,
                offset,
                stable,
                data,
            } => encode_write_args(buf, fh, *offset, *stable, data),
            RequestOp::Append { fh, stable, data } => {
                put_fh(buf, fh);
                xdr::put_u32(buf, *stable as u32);
                xdr::put_opaque(buf, data);
            }
            RequestOp::Create { dir, name, how } => {
                put_fh(buf, dir);
                xdr::put_opaque(buf, name);
                how.encode(buf);
            }
            RequestOp::CreateAt { path, how } => {
                xdr::put_opaque(buf, path);
                how.encode(buf);
            }
            RequestOp::Mkdir { dir, name, attr } => {
                put_fh(buf, dir);
                xdr::put_opaque(buf, name);
                attr.encode(buf);
            }
            RequestOp::Symlink {
                dir,
                name,
                attr,
                target,
            } => {
                put_fh(buf, dir);
                xdr::put_opaque(buf, name);
                attr.encode(buf);
                xdr::put_opaque(buf, target);
            }
            RequestOp::Mknod {
                dir,
                name,
                kind,
                attr,
            } => {
                put_fh(buf, dir);
                xdr::put_opaque(buf, name);
                xdr::put_u32(buf, kind.ftype() as u32);
                attr.encode(buf);
                if let SpecialKind::Char(major, minor) | SpecialKind::Block(major, minor) = kind {
                    xdr::put_u32(buf, *major);
                    xdr::put_u32(buf, *minor);
                }
            }
            RequestOp::Rename {
                from_dir,
                from_name,
                to_dir,
                to_name,
            } => {
                put_fh(buf, from_dir);
                xdr::put_opaque(buf, from_name);
                put_fh(buf, to_dir);
                xdr::put_opaque(buf, to_name);
            }
            RequestOp::Rename2 {
                from_dir,
                from_name,
                to_dir,
                to_name,
                flags,
            } => {
                put_fh(buf, from_dir);
                xdr::put_opaque(buf, from_name);
                put_fh(buf, to_dir);
                xdr::put_opaque(buf, to_name);
                xdr::put_u32(buf, *flags);
            }
            RequestOp::Link { fh, dir, name } => {
                put_fh(buf, fh);
                put_fh(buf, dir);
                xdr::put_opaque(buf, name);
            }
            RequestOp::ReadDir {
                dir,
                cookie,
                verifier,
                count,
            } => {
                put_fh(buf, dir);
                xdr::put_u64(buf, *cookie);
                xdr::put_fixed(buf, verifier);
                xdr::put_u32(buf, *count);
            }
            RequestOp::ReadDirPlus {
                dir,
                cookie,
                verifier,
                dircount,
                maxcount,
            }
            | RequestOp::ListDir {
                dir,
                cookie,
                verifier,
                dircount,
                maxcount,
            } => {
                put_fh(buf, dir);
                xdr::put_u64(buf, *cookie);
                xdr::put_fixed(buf, verifier);
                xdr::put_u32(buf, *dircount);
                xdr::put_u32(buf, *maxcount);
            }
        }
    }

    /// Reads the procedure number and the arguments.
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<RequestOp, DecodeError> {
        let proc = Proc::decode(r)?;
        RequestOp::decode_args(proc, r)
    }

    /// Reads the arguments of `proc`.
    fn decode_args(proc: Proc, r: &mut Reader<'_>) -> Result<RequestOp, DecodeError> {
        Ok(match proc {
            Proc::Session => RequestOp::Session {
                client_id: r.fixed::<{ crate::sequence::CLIENT_ID_LEN }>("client id")?,
                slots: r.u32("slots")?,
            },
            Proc::Sequence => {
                let slot = r.u32("slot")?;
                let seq = r.u32("sequence number")?;
                // Checked before the inner arguments are read: a SEQUENCE in a SEQUENCE (and so
                // on) is refused at once, never decoded recursively.
                let inner = Proc::decode(r)?;
                if !inner.is_sequenced() {
                    return Err(DecodeError::BadDiscriminant {
                        what: "sequenced procedure",
                        value: inner.code(),
                    });
                }
                RequestOp::Sequence {
                    slot,
                    seq,
                    op: Box::new(RequestOp::decode_args(inner, r)?),
                }
            }
            Proc::Null => RequestOp::Null,
            Proc::Mount => RequestOp::Mount {
                path: r.opaque_vec(MAX_PATH_LEN, "mount path")?,
            },
            Proc::Fetch => RequestOp::Fetch {
                path: r.opaque_vec(MAX_PATH_LEN, "fetch path")?,
                count: r.u32("count")?,
            },
            Proc::Login => {
                let user = r.string(MAX_USER_NAME_LEN, "user name")?;
                let key = r.fixed::<32>("user public key")?;
                let public_key = UserPublicKey::from_bytes(&key)
                    .map_err(|_| DecodeError::BadPublicKey("user public key"))?;
                RequestOp::Login(LoginArgs {
                    user,
                    public_key,
                    seqno: r.u64("login sequence number")?,
                    signature: r.fixed::<64>("login signature")?,
                })
            }
            Proc::Narrow => {
                let gid = r.u32("narrow gid")?;
                let n = r.count(4, "narrow groups")?;
                if n > MAX_NARROW_GROUPS {
                    return Err(DecodeError::LimitExceeded {
                        what: "narrow groups",
                        len: n as u64,
                        max: MAX_NARROW_GROUPS as u64,
                    });
                }
                let mut groups = Vec::with_capacity(n);
                for _ in 0..n {
                    groups.push(r.u32("narrow group")?);
                }
                RequestOp::Narrow { gid, groups }
            }
            Proc::Lock => RequestOp::Lock(crate::lock::get_lock(r)?),
            Proc::Unlock => RequestOp::Unlock(crate::lock::get_unlock(r)?),
            Proc::TestLock => RequestOp::TestLock(crate::lock::get_test(r)?),
            Proc::GetAttr => RequestOp::GetAttr { fh: get_fh(r)? },
            Proc::ReadLink => RequestOp::ReadLink { fh: get_fh(r)? },
            Proc::Open => RequestOp::Open { fh: get_fh(r)? },
            Proc::Close => RequestOp::Close { fh: get_fh(r)? },
            Proc::FsStat => RequestOp::FsStat { fh: get_fh(r)? },
            Proc::FsInfo => RequestOp::FsInfo { fh: get_fh(r)? },
            Proc::PathConf => RequestOp::PathConf { fh: get_fh(r)? },
            Proc::ListXattr => RequestOp::ListXattr { fh: get_fh(r)? },
            Proc::GetXattr => RequestOp::GetXattr {
                fh: get_fh(r)?,
                name: xattr::get_name(r)?,
            },
            Proc::RemoveXattr => RequestOp::RemoveXattr {
                fh: get_fh(r)?,
                name: xattr::get_name(r)?,
            },
            Proc::SetXattr => RequestOp::SetXattr {
                fh: get_fh(r)?,
                name: xattr::get_name(r)?,
                value: xattr::get_value(r)?,
                flags: match r.u32("xattr flags")? {
                    f if f & !xattr::flags::ALL == 0 => f,
                    value => {
                        return Err(DecodeError::BadDiscriminant {
                            what: "xattr flags",
                            value,
                        });
                    }
                },
            },
            Proc::SetAttr => RequestOp::SetAttr {
                fh: get_fh(r)?,
                attr: SetAttr::decode(r)?,
                guard: r.option("guard", Time::decode)?,
            },
            Proc::Lookup => RequestOp::Lookup {
                dir: get_fh(r)?,
                name: get_name(r)?,
            },
            Proc::Remove => RequestOp::Remove {
                dir: get_fh(r)?,
                name: get_name(r)?,
            },
            Proc::Rmdir => RequestOp::Rmdir {
                dir: get_fh(r)?,
                name: get_name(r)?,
            },
            Proc::Access => RequestOp::Access {
                fh: get_fh(r)?,
                access: r.u32("access")?,
            },
            Proc::Read => RequestOp::Read {
                fh: get_fh(r)?,
                offset: r.u64("offset")?,
                count: r.u32("count")?,
            },
            Proc::Commit => RequestOp::Commit {
                fh: get_fh(r)?,
                offset: r.u64("offset")?,
                count: r.u32("count")?,
            },
            Proc::Write => RequestOp::Write {
                fh: get_fh(r)?,
                offset: r.u64("offset")?,
                stable: StableHow::decode(r)?,
                data: r.opaque_data(usize::MAX, "write data")?,
            },
            Proc::Append => RequestOp::Append {
                fh: get_fh(r)?,
                stable: StableHow::decode(r)?,
                data: r.opaque_data(usize::MAX, "append data")?,
            },
            Proc::Create => RequestOp::Create {
                dir: get_fh(r)?,
                name: get_name(r)?,
                how: CreateHow::decode(r)?,
            },
            Proc::CreateAt => RequestOp::CreateAt {
                path: r.opaque_vec(MAX_PATH_LEN, "create path")?,
                how: CreateHow::decode(r)?,
            },
            Proc::Mkdir => RequestOp::Mkdir {
                dir: get_fh(r)?,
                name: get_name(r)?,
                attr: SetAttr::decode(r)?,
            },
            Proc::Symlink => RequestOp::Symlink {
                dir: get_fh(r)?,
                name: get_name(r)?,
                attr: SetAttr::decode(r)?,
                target: r.opaque_vec(MAX_PATH_LEN, "symlink target")?,
            },
            Proc::Rename => RequestOp::Rename {
                from_dir: get_fh(r)?,
                from_name: get_name(r)?,
                to_dir: get_fh(r)?,
                to_name: get_name(r)?,
            },
            Proc::Mknod => {
                let dir = get_fh(r)?;
                let name = get_name(r)?;
                let ftype = r.u32("mknod type")?;
                let attr = SetAttr::decode(r)?;
                let kind = match ftype {
                    3 => SpecialKind::Block(r.u32("device major")?, r.u32("device minor")?),
                    4 => SpecialKind::Char(r.u32("device major")?, r.u32("device minor")?),
                    6 => SpecialKind::Socket,
                    7 => SpecialKind::Fifo,
                    value => {
                        return Err(DecodeError::BadDiscriminant {
                            what: "mknod type",
                            value,
                        });
                    }
                };
                RequestOp::Mknod {
                    dir,
                    name,
                    kind,
                    attr,
                }
            }
            Proc::Rename2 => RequestOp::Rename2 {
                from_dir: get_fh(r)?,
                from_name: get_name(r)?,
                to_dir: get_fh(r)?,
                to_name: get_name(r)?,
                flags: match r.u32("rename flags")? {
                    f if f & !rename_flags::ALL == 0 => f,
                    value => {
                        return Err(DecodeError::BadDiscriminant {
                            what: "rename flags",
                            value,
                        });
                    }
                },
            },
            Proc::Link => RequestOp::Link {
                fh: get_fh(r)?,
                dir: get_fh(r)?,
                name: get_name(r)?,
            },
            Proc::ReadDir => RequestOp::ReadDir {
                dir: get_fh(r)?,
                cookie: r.u64("cookie")?,
                verifier: r.fixed::<8>("cookie verifier")?,
                count: r.u32("count")?,
            },
            Proc::ReadDirPlus => RequestOp::ReadDirPlus {
                dir: get_fh(r)?,
                cookie: r.u64("cookie")?,
                verifier: r.fixed::<8>("cookie verifier")?,
                dircount: r.u32("dircount")?,
                maxcount: r.u32("maxcount")?,
            },
            Proc::ListDir => RequestOp::ListDir {
                dir: get_fh(r)?,
                cookie: r.u64("cookie")?,
                verifier: r.fixed::<8>("cookie verifier")?,
                dircount: r.u32("dircount")?,
                maxcount: r.u32("maxcount")?,
            },
        })
    }
}

/// WRITE arguments; `data` is the tail of the record.
pub(crate) fn encode_write_args(
    buf: &mut Vec<u8>,
    fh: &FileHandle,
    offset: u64,
    stable: StableHow,
    data: &[u8],
) {
    put_fh(buf, fh);
    xdr::put_u64(buf, offset);
    xdr::put_u32(buf, stable as u32);
    xdr::put_opaque(buf, data);
}

impl CreateHow {
    fn encode(&self, buf: &mut Vec<u8>) {
        match self {
            CreateHow::Unchecked(a) => {
                xdr::put_u32(buf, 0);
                a.encode(buf);
            }
            CreateHow::Guarded(a) => {
                xdr::put_u32(buf, 1);
                a.encode(buf);
            }
            CreateHow::Exclusive(v) => {
                xdr::put_u32(buf, 2);
                xdr::put_fixed(buf, v);
            }
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<CreateHow, DecodeError> {
        Ok(match r.u32("create mode")? {
            0 => CreateHow::Unchecked(SetAttr::decode(r)?),
            1 => CreateHow::Guarded(SetAttr::decode(r)?),
            2 => CreateHow::Exclusive(r.fixed::<8>("create verifier")?),
            value => {
                return Err(DecodeError::BadDiscriminant {
                    what: "create mode",
                    value,
                });
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SetAttr, SetTime, Time};

    fn setattr(attr: SetAttr, guard: Option<Time>) -> RequestOp {
        RequestOp::SetAttr {
            fh: FileHandle::from_bytes([1; 48]),
            attr,
            guard,
        }
    }

    #[test]
    fn a_setattr_of_modes_owners_or_times_is_idempotent_and_a_truncation_is_not() {
        let chmod = SetAttr {
            mode: Some(0o640),
            ..SetAttr::default()
        };
        let touch = SetAttr {
            atime: SetTime::ServerTime,
            mtime: SetTime::ClientTime(Time {
                seconds: 7,
                nanos: 0,
            }),
            uid: Some(3),
            ..SetAttr::default()
        };
        let truncate = SetAttr {
            size: Some(0),
            ..chmod
        };
        assert!(setattr(chmod, None).is_idempotent());
        assert!(setattr(touch, None).is_idempotent());
        assert!(!setattr(truncate, None).is_idempotent());
        let guard = Some(Time {
            seconds: 1,
            nanos: 2,
        });
        assert!(!setattr(chmod, guard).is_idempotent());
        // Other requests follow their procedure.
        let remove = RequestOp::Remove {
            dir: FileHandle::from_bytes([1; 48]),
            name: b"x".to_vec(),
        };
        assert!(!remove.is_idempotent());
        let read = RequestOp::Read {
            fh: FileHandle::from_bytes([1; 48]),
            offset: 0,
            count: 1,
        };
        assert!(read.is_idempotent());
    }
}
