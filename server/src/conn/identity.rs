//! Who a connection's requests act as: the answers to LOGIN (whose signature the protocol end
//! checked), NARROW and SESSION, which need the server's users file, reply caches and locks.

use std::sync::Arc;
use std::time::Instant;

use protocol::server::{Sender, login_refusal};
use protocol::{LoginError, NfsStatus, ReplyBody, VerifiedLogin};

use super::Conn;
use crate::server::Server;

/// A LOGIN whose signature was checked: the users file says whether its key may act as the
/// user it claims, and with which credentials; the connection's table gives them an authno.
pub(super) fn login(
    srv: &Arc<Server>,
    c: &mut Conn,
    verified: Result<VerifiedLogin, LoginError>,
) -> Result<ReplyBody, NfsStatus> {
    let Some(sc) = c.phase.live() else {
        return Err(NfsStatus::Acces);
    };
    let result = match verified {
        Ok(v) => match srv.users.lookup(&v.user, &v.public_key) {
            Some(creds) => match sc.assign(creds.clone()) {
                Some(Ok(authno)) => {
                    tracing::info!(conn = c.id, user = %v.user, uid = creds.uid, authno, "login");
                    Ok(ReplyBody::Login { authno })
                }
                _ => Err(NfsStatus::Acces),
            },
            None => {
                tracing::warn!(conn = c.id, user = %v.user, "login refused: key not authorised");
                Err(NfsStatus::Acces)
            }
        },
        Err(e) => {
            tracing::warn!(conn = c.id, error = %e, "login refused");
            Err(login_refusal(&e))
        }
    };
    if result.is_ok() {
        c.logged_in(srv);
    }
    result
}

/// NARROW: a new authno for the sender's credentials with fewer groups
/// ([`crate::narrow`]); only a logged-in sender has any to narrow.
pub(super) fn narrow(
    c: &mut Conn,
    authno: u32,
    sender: &Sender<crate::users::Creds>,
    gid: u32,
    groups: &[u32],
) -> Result<ReplyBody, NfsStatus> {
    let id = c.id;
    match (sender, c.phase.live().and_then(|sc| sc.auth_table())) {
        (Sender::User(base), Some(auth)) => crate::narrow::assign(auth, base, gid, groups)
            .inspect(|narrowed| {
                tracing::debug!(conn = id, user = %base.name, authno, narrowed, gid, "narrow");
            })
            .map(|authno| ReplyBody::Narrow { authno }),
        // Anonymous (0) or never assigned: nothing to narrow.
        _ => Err(NfsStatus::Acces),
    }
}

/// SESSION: binds the connection to its client's reply cache ([`crate::replies`]), once.
pub(super) fn session(
    srv: &Arc<Server>,
    c: &mut Conn,
    client_id: [u8; protocol::sequence::CLIENT_ID_LEN],
    slots: u32,
) -> Result<ReplyBody, NfsStatus> {
    if c.client.is_some() {
        // One record per connection: a client has one id.
        return Err(NfsStatus::Inval);
    }
    let bound = srv.clients.bind(&client_id, slots, c.id, Instant::now())?;
    tracing::debug!(
        conn = c.id,
        client = bound.record.key,
        resumed = bound.resumed,
        "session"
    );
    srv.locks
        .lock()
        .client_back(crate::locks::LockClient::record(bound.record.key));
    c.client = Some(bound.record);
    Ok(ReplyBody::Session {
        slots: bound.slots,
        resumed: bound.resumed,
    })
}
