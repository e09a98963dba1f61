//! NARROW: an authno acting as a logged-in user with a subset of that user's groups.
//!
//! A client serves many local processes of one user over one login, and each process has its
//! own effective gid and supplementary groups. So that group permissions, `chown` to one's own
//! group and the group of new objects behave as they would locally, the client asks for an
//! authno with the process's groups. The server grants the intersection with the groups the
//! users file gives the login (never more), so narrowing is only ever a loss of rights: a
//! client that lies gets at most what its LOGIN already gave it. See docs/PROTOCOL.md,
//! "Narrowed authnos".

use protocol::{AuthTable, NfsStatus};

use crate::users::Creds;

/// Most authnos one user may hold on one connection (its login and the narrowed ones), so one
/// local user cannot use up the connection's table (1024 authnos) that others log in through.
pub(crate) const MAX_AUTHNOS_PER_USER: usize = 64;

/// The credentials `base` narrowed to primary group `gid` and supplementary `groups`: `gid`
/// must be one of `base`'s groups (`Perm` otherwise: a process's effective gid decides the
/// group of what it creates, so a silent substitute would not behave as locally), and of
/// `groups` only those `base` has are kept, once each, in `base`'s order.
pub(crate) fn narrowed(base: &Creds, gid: u32, groups: &[u32]) -> Result<Creds, NfsStatus> {
    if base.anonymous {
        return Err(NfsStatus::Acces);
    }
    if !base.gids.contains(&gid) {
        return Err(NfsStatus::Perm);
    }
    // `base.gids` is the users file's list: walking it (not `groups`) keeps each group once
    // and the result no longer than what the users file grants.
    let mut gids = Vec::with_capacity(1 + groups.len().min(base.gids.len()));
    gids.push(gid);
    for g in &base.gids {
        if groups.contains(g) && !gids.contains(g) {
            gids.push(*g);
        }
    }
    Ok(Creds {
        name: base.name.clone(),
        uid: base.uid,
        gids,
        anonymous: false,
    })
}

/// Assigns an authno in `table` to `base` (the credentials of the request's authno) narrowed
/// to `gid` and `groups`, or returns the one those credentials already have; refused when the
/// user already holds [`MAX_AUTHNOS_PER_USER`] authnos on this connection.
pub(crate) fn assign(
    table: &mut AuthTable<Creds>,
    base: &Creds,
    gid: u32,
    groups: &[u32],
) -> Result<u32, NfsStatus> {
    let creds = narrowed(base, gid, groups)?;
    if let Some(authno) = table.find(&creds) {
        return Ok(authno);
    }
    let same_user = |c: &Creds| c.uid == base.uid && c.name == base.name;
    if table.count_matching(same_user) >= MAX_AUTHNOS_PER_USER {
        return Err(NfsStatus::Acces);
    }
    table.assign(creds).map_err(|_| NfsStatus::Acces)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Creds {
        Creds {
            name: "alice".into(),
            uid: 1000,
            gids: vec![100, 200, 300],
            anonymous: false,
        }
    }

    #[test]
    fn keeps_only_granted_groups_once() {
        let n = narrowed(&alice(), 200, &[300, 999, 300, 200, 100]).unwrap();
        assert_eq!(n.gids, vec![200, 100, 300]);
        assert_eq!(narrowed(&alice(), 100, &[]).unwrap().gids, vec![100]);
        // A users file that repeats a group: still once.
        let mut twice = alice();
        twice.gids = vec![100, 200, 300, 200];
        assert_eq!(narrowed(&twice, 300, &[200]).unwrap().gids, vec![300, 200]);
        assert_eq!(narrowed(&alice(), 999, &[100]), Err(NfsStatus::Perm));
        assert_eq!(
            narrowed(&Creds::anonymous(65534, 65534), 65534, &[]),
            Err(NfsStatus::Acces)
        );
    }

    #[test]
    fn per_user_bound_and_reuse() {
        let mut t = AuthTable::new();
        let base = t.assign(alice()).unwrap();
        assert_eq!(base, 1);
        let a = assign(&mut t, &alice(), 200, &[]).unwrap();
        assert_eq!(assign(&mut t, &alice(), 200, &[]).unwrap(), a);
        // The same credentials as the login: its authno.
        assert_eq!(assign(&mut t, &alice(), 100, &[200, 300]).unwrap(), base);
        let mut wide = alice();
        wide.gids = (0..200).collect();
        for g in 2..MAX_AUTHNOS_PER_USER as u32 {
            assign(&mut t, &wide, g, &[]).unwrap();
        }
        assert_eq!(t.len(), MAX_AUTHNOS_PER_USER);
        assert_eq!(assign(&mut t, &wide, 150, &[]), Err(NfsStatus::Acces));
        // Another user is not affected.
        let mut bob = alice();
        bob.name = "bob".into();
        bob.uid = 1001;
        assert!(assign(&mut t, &bob, 100, &[]).is_ok());
    }
}
