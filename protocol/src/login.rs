//! User login: proving possession of an Ed25519 key inside one session.
//!
//! As in SFS, users authenticate separately from the server and after it: the handshake proved
//! the server's key, now each user signs
//!
//! ```text
//! "SFS-LOGIN-1\0" || session_id[32] || HOSTID[20] || u64be(seqno) || u32be(len(user)) || user
//! ```
//!
//! The session id binds the signature to this connection (a signature from another session does
//! not verify), the HOSTID to this server, the sequence number lets the server refuse a replay
//! inside the session. Many users can log in over one session; each successful login gets an
//! authno that the user's requests carry, and authno 0 is anonymous.

use crate::error::LoginError;
use crate::handshake::SESSION_ID_LEN;
use crate::keys::{UserKeypair, UserPublicKey};
use crate::name::HostId;

/// The domain tag at the start of every signed LOGIN statement.
pub const LOGIN_TAG: &[u8] = b"SFS-LOGIN-1\0";
/// Longest user name accepted, in bytes.
pub const MAX_USER_NAME_LEN: usize = 255;
/// The authno of anonymous requests.
pub const ANONYMOUS: u32 = 0;
/// How far behind the highest sequence number seen a login may still arrive (out-of-order
/// delivery by a pipelining client), as in IPsec's anti-replay window.
pub const REPLAY_WINDOW: u64 = 64;

/// The arguments of a LOGIN request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginArgs {
    /// The user name the client claims.
    pub user: String,
    /// The key the user proves possession of.
    pub public_key: UserPublicKey,
    /// Per-session sequence number, never reused.
    pub seqno: u64,
    /// Ed25519 signature over [`login_statement`].
    pub signature: [u8; 64],
}

/// A login whose signature verified: the server now looks the key up in its users table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedLogin {
    /// The user name claimed (the server decides whether the key may act as that user).
    pub user: String,
    /// The key that signed.
    pub public_key: UserPublicKey,
}

/// Checks a user name: 1 to 255 bytes, no control characters.
pub fn check_user_name(user: &str) -> Result<(), LoginError> {
    if user.is_empty() {
        return Err(LoginError::BadUserName("empty"));
    }
    if user.len() > MAX_USER_NAME_LEN {
        return Err(LoginError::BadUserName("longer than 255 bytes"));
    }
    if user.chars().any(char::is_control) {
        return Err(LoginError::BadUserName("contains control characters"));
    }
    Ok(())
}

/// The exact bytes a LOGIN signature covers.
pub fn login_statement(
    session_id: &[u8; SESSION_ID_LEN],
    host_id: &HostId,
    seqno: u64,
    user: &str,
) -> Vec<u8> {
    let mut m = Vec::with_capacity(LOGIN_TAG.len() + 32 + 20 + 8 + 4 + user.len());
    m.extend_from_slice(LOGIN_TAG);
    m.extend_from_slice(session_id);
    m.extend_from_slice(host_id.as_bytes());
    m.extend_from_slice(&seqno.to_be_bytes());
    m.extend_from_slice(&(user.len() as u32).to_be_bytes());
    m.extend_from_slice(user.as_bytes());
    m
}

/// Client side: builds signed LOGIN arguments with fresh sequence numbers for one session.
#[derive(Debug, Clone)]
pub struct LoginSigner {
    session_id: [u8; SESSION_ID_LEN],
    host_id: HostId,
    next_seqno: u64,
}

impl LoginSigner {
    /// A signer for the session `session_id` with the server `host_id`.
    pub fn new(session_id: [u8; SESSION_ID_LEN], host_id: HostId) -> LoginSigner {
        LoginSigner {
            session_id,
            host_id,
            next_seqno: 1,
        }
    }

    /// Signs a login of `user` with `key`, using the next sequence number.
    pub fn sign(&mut self, user: &str, key: &UserKeypair) -> Result<LoginArgs, LoginError> {
        check_user_name(user)?;
        let seqno = self.next_seqno;
        // 2^64 logins will not happen; saturating keeps this panic-free regardless (the
        // verifier then refuses the repeated number).
        self.next_seqno = self.next_seqno.saturating_add(1);
        Ok(sign_login(
            &self.session_id,
            &self.host_id,
            seqno,
            user,
            key,
        ))
    }
}

/// Signs a login with an explicit sequence number (see [`LoginSigner`] for the usual way).
pub fn sign_login(
    session_id: &[u8; SESSION_ID_LEN],
    host_id: &HostId,
    seqno: u64,
    user: &str,
    key: &UserKeypair,
) -> LoginArgs {
    LoginArgs {
        user: user.to_owned(),
        public_key: key.public_key(),
        seqno,
        signature: key.sign(&login_statement(session_id, host_id, seqno, user)),
    }
}

/// Server side: verifies LOGINs of one session and refuses replayed sequence numbers.
#[derive(Debug, Clone)]
pub struct LoginVerifier {
    session_id: [u8; SESSION_ID_LEN],
    host_id: HostId,
    /// Highest sequence number accepted, if any.
    highest: Option<u64>,
    /// Bit i set: `highest - i` was accepted.
    window: u64,
}

impl LoginVerifier {
    /// A verifier for the session `session_id` of the server `host_id`.
    pub fn new(session_id: [u8; SESSION_ID_LEN], host_id: HostId) -> LoginVerifier {
        LoginVerifier {
            session_id,
            host_id,
            highest: None,
            window: 0,
        }
    }

    fn check_fresh(&self, seqno: u64) -> Result<(), LoginError> {
        let Some(highest) = self.highest else {
            return Ok(());
        };
        if seqno > highest {
            return Ok(());
        }
        let behind = highest - seqno;
        if behind >= REPLAY_WINDOW {
            return Err(LoginError::TooOld { seqno, highest });
        }
        if self.window & (1 << behind) != 0 {
            return Err(LoginError::Replayed(seqno));
        }
        Ok(())
    }

    fn mark_used(&mut self, seqno: u64) {
        match self.highest {
            Some(h) if seqno <= h => self.window |= 1 << (h - seqno),
            Some(h) => {
                let shift = seqno - h;
                self.window = if shift >= 64 { 0 } else { self.window << shift };
                self.window |= 1;
                self.highest = Some(seqno);
            }
            None => {
                self.window = 1;
                self.highest = Some(seqno);
            }
        }
    }

    /// Verifies `args`. A sequence number is consumed only by a login whose signature verifies,
    /// so a forgery cannot burn a legitimate client's number.
    pub fn verify(&mut self, args: &LoginArgs) -> Result<VerifiedLogin, LoginError> {
        check_user_name(&args.user)?;
        self.check_fresh(args.seqno)?;
        let statement = login_statement(&self.session_id, &self.host_id, args.seqno, &args.user);
        let sig = ed25519_dalek::Signature::from_bytes(&args.signature);
        args.public_key
            .verifying_key()
            .verify_strict(&statement, &sig)
            .map_err(|_| LoginError::BadSignature)?;
        self.mark_used(args.seqno);
        Ok(VerifiedLogin {
            user: args.user.clone(),
            public_key: args.public_key,
        })
    }
}

/// Most logins one session may hold.
pub const MAX_LOGINS_PER_SESSION: usize = 1024;

/// Server side: the authnos of one session, each mapping to the server's credentials `T` for
/// that user. Authno 0 is anonymous and never assigned; logging in again as the same
/// credentials returns the same authno.
#[derive(Debug, Clone)]
pub struct AuthTable<T> {
    entries: Vec<T>,
}

impl<T> Default for AuthTable<T> {
    fn default() -> Self {
        AuthTable {
            entries: Vec::new(),
        }
    }
}

impl<T: PartialEq> AuthTable<T> {
    /// An empty table.
    pub fn new() -> AuthTable<T> {
        AuthTable::default()
    }

    /// Assigns an authno (1, 2, ...) to `credentials`, or returns the one they already have.
    pub fn assign(&mut self, credentials: T) -> Result<u32, LoginError> {
        if let Some(authno) = self.find(&credentials) {
            return Ok(authno);
        }
        if self.entries.len() >= MAX_LOGINS_PER_SESSION {
            return Err(LoginError::TooManyLogins(MAX_LOGINS_PER_SESSION));
        }
        self.entries.push(credentials);
        Ok(self.entries.len() as u32)
    }

    /// The authno `credentials` already have, if any.
    pub fn find(&self, credentials: &T) -> Option<u32> {
        let i = self.entries.iter().position(|c| c == credentials)?;
        Some(i as u32 + 1)
    }

    /// How many authnos have credentials for which `f` holds (a server bounds what one user
    /// may hold with it).
    pub fn count_matching(&self, f: impl Fn(&T) -> bool) -> usize {
        self.entries.iter().filter(|c| f(c)).count()
    }

    /// The credentials of `authno`; `None` for anonymous (0) or an authno never assigned.
    pub fn get(&self, authno: u32) -> Option<&T> {
        let i = usize::try_from(authno).ok()?.checked_sub(1)?;
        self.entries.get(i)
    }

    /// Number of authnos assigned.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no authno is assigned.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (LoginSigner, LoginVerifier, UserKeypair) {
        let sid = [3u8; 32];
        let hid = HostId::from_bytes([4u8; 20]);
        (
            LoginSigner::new(sid, hid),
            LoginVerifier::new(sid, hid),
            UserKeypair::from_seed([5u8; 32]),
        )
    }

    #[test]
    fn replay_window() {
        let (_, mut v, key) = setup();
        let sid = [3u8; 32];
        let hid = HostId::from_bytes([4u8; 20]);
        let login = |n| sign_login(&sid, &hid, n, "alice", &key);
        v.verify(&login(10)).unwrap();
        v.verify(&login(8)).unwrap(); // out of order, within the window
        assert_eq!(v.verify(&login(8)), Err(LoginError::Replayed(8)));
        assert_eq!(v.verify(&login(10)), Err(LoginError::Replayed(10)));
        v.verify(&login(100)).unwrap();
        assert_eq!(
            v.verify(&login(9)),
            Err(LoginError::TooOld {
                seqno: 9,
                highest: 100
            })
        );
        v.verify(&login(99)).unwrap();
        v.verify(&login(u64::MAX)).unwrap();
        assert_eq!(
            v.verify(&login(u64::MAX)),
            Err(LoginError::Replayed(u64::MAX))
        );
    }

    #[test]
    fn forged_login_does_not_burn_the_seqno() {
        let (mut s, mut v, key) = setup();
        let good = s.sign("alice", &key).unwrap();
        let mut bad = good.clone();
        bad.signature[0] ^= 1;
        assert_eq!(v.verify(&bad), Err(LoginError::BadSignature));
        v.verify(&good).unwrap();
    }

    #[test]
    fn auth_table_assigns_from_one() {
        let mut t = AuthTable::new();
        assert_eq!(t.assign("alice").unwrap(), 1);
        assert_eq!(t.assign("bob").unwrap(), 2);
        assert_eq!(t.assign("alice").unwrap(), 1);
        assert_eq!(t.get(0), None);
        assert_eq!(t.get(2), Some(&"bob"));
        assert_eq!(t.get(3), None);
    }
}
