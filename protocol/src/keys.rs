//! Long-term keys: the server's static X25519 key and users' Ed25519 identity keys.
//!
//! Both are stored as small line-oriented text files so an operator can read, copy and diff
//! them; public keys have a one-line form (`ed25519:<hex>`, `x25519:<hex>`) that fits in a users
//! file or a log line.
//!
//! Server key file:
//! ```text
//! # sfs server key: keep secret
//! secret-key x25519:<64 hex>
//! public-key x25519:<64 hex>
//! ```
//! User key file: the same with `ed25519:` (the secret is the 32-byte Ed25519 seed).
//! `#` lines and blank lines are ignored; `public-key` is optional and checked when present.

use std::fmt;
use std::str::FromStr;

use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use rand::RngCore;
use rand::rngs::OsRng;
use snow::params::DHChoice;
use snow::resolvers::{CryptoResolver, DefaultResolver};

use crate::error::KeyError;
use crate::hex;
use crate::name::{HostId, Location, PUBLIC_KEY_LEN, ServerName};

const X25519_PREFIX: &str = "x25519:";
const ED25519_PREFIX: &str = "ed25519:";

/// Parses `<prefix><64 hex>` into 32 bytes.
fn parse_prefixed(text: &str, prefix: &'static str) -> Result<[u8; 32], KeyError> {
    let text = text.trim();
    let hexpart = text
        .strip_prefix(prefix)
        .ok_or_else(|| KeyError::BadPrefix {
            expected: prefix,
            found: hex::snippet(text),
        })?;
    hex::decode::<32>(hexpart).ok_or_else(|| KeyError::BadHex {
        expected: 64,
        found: hex::snippet(hexpart),
    })
}

/// The lines of a key file: (secret, optional public) in `prefix` form.
fn parse_key_file(
    text: &str,
    prefix: &'static str,
) -> Result<([u8; 32], Option<[u8; 32]>), KeyError> {
    let mut secret = None;
    let mut public = None;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(v) = line.strip_prefix("secret-key ") {
            secret = Some(parse_prefixed(v, prefix)?);
        } else if let Some(v) = line.strip_prefix("public-key ") {
            public = Some(parse_prefixed(v, prefix)?);
        } else {
            return Err(KeyError::UnknownLine {
                line: i + 1,
                text: hex::snippet(line),
            });
        }
    }
    Ok((secret.ok_or(KeyError::MissingLine("secret-key"))?, public))
}

/// The server's static X25519 keypair, whose public half the HOSTID certifies.
#[derive(Clone)]
pub struct ServerKeypair {
    secret: [u8; 32],
    public: [u8; PUBLIC_KEY_LEN],
}

impl ServerKeypair {
    /// A fresh keypair from the operating system's random source.
    pub fn generate() -> ServerKeypair {
        let mut secret = [0u8; 32];
        OsRng.fill_bytes(&mut secret);
        ServerKeypair::from_secret(secret)
    }

    /// The keypair of a 32-byte X25519 secret.
    pub fn from_secret(secret: [u8; 32]) -> ServerKeypair {
        let mut dh = DefaultResolver
            .resolve_dh(&DHChoice::Curve25519)
            .expect("snow's default resolver provides X25519");
        dh.set(&secret);
        let mut public = [0u8; PUBLIC_KEY_LEN];
        public.copy_from_slice(dh.pubkey());
        ServerKeypair { secret, public }
    }

    /// The public key (what the HOSTID hashes).
    pub fn public_key(&self) -> &[u8; PUBLIC_KEY_LEN] {
        &self.public
    }

    /// The secret key bytes (for the handshake).
    pub fn secret_key(&self) -> &[u8; 32] {
        &self.secret
    }

    /// The HOSTID of this key at `location`.
    pub fn host_id(&self, location: &Location) -> HostId {
        HostId::compute(location, &self.public)
    }

    /// The self-certifying name of this key at `location`.
    pub fn server_name(&self, location: Location) -> ServerName {
        ServerName::for_key(location, &self.public)
    }

    /// The public key in one-line form, `x25519:<hex>`.
    pub fn public_key_text(&self) -> String {
        format!("{X25519_PREFIX}{}", hex::encode(&self.public))
    }

    /// The key file text (contains the secret).
    pub fn to_text(&self) -> String {
        format!(
            "# sfs server key: keep secret\nsecret-key {X25519_PREFIX}{}\npublic-key {}\n",
            hex::encode(&self.secret),
            self.public_key_text()
        )
    }

    /// Parses a key file written by [`ServerKeypair::to_text`].
    pub fn from_text(text: &str) -> Result<ServerKeypair, KeyError> {
        let (secret, public) = parse_key_file(text, X25519_PREFIX)?;
        let kp = ServerKeypair::from_secret(secret);
        match public {
            Some(p) if p != kp.public => Err(KeyError::PublicMismatch),
            _ => Ok(kp),
        }
    }
}

impl fmt::Debug for ServerKeypair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerKeypair")
            .field("public", &self.public_key_text())
            .finish_non_exhaustive()
    }
}

/// A user's Ed25519 public key, as listed in a server's users file.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UserPublicKey(VerifyingKey);

impl UserPublicKey {
    /// The key of 32 raw bytes; fails when they are not a curve point.
    pub fn from_bytes(bytes: &[u8; 32]) -> Result<UserPublicKey, KeyError> {
        VerifyingKey::from_bytes(bytes)
            .map(UserPublicKey)
            .map_err(|_| KeyError::InvalidEd25519)
    }

    /// The 32 raw bytes.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    pub(crate) fn verifying_key(&self) -> &VerifyingKey {
        &self.0
    }
}

impl fmt::Display for UserPublicKey {
    /// `ed25519:<64 hex digits>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{ED25519_PREFIX}{}", hex::encode(self.0.as_bytes()))
    }
}

impl fmt::Debug for UserPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UserPublicKey({self})")
    }
}

impl FromStr for UserPublicKey {
    type Err = KeyError;

    /// Parses `ed25519:<64 hex digits>` (surrounding white space ignored).
    fn from_str(s: &str) -> Result<Self, KeyError> {
        UserPublicKey::from_bytes(&parse_prefixed(s, ED25519_PREFIX)?)
    }
}

/// A user's Ed25519 identity keypair, used to sign LOGIN messages.
#[derive(Clone)]
pub struct UserKeypair {
    signing: SigningKey,
}

impl UserKeypair {
    /// A fresh keypair from the operating system's random source.
    pub fn generate() -> UserKeypair {
        UserKeypair {
            signing: SigningKey::generate(&mut OsRng),
        }
    }

    /// The keypair of a 32-byte Ed25519 seed.
    pub fn from_seed(seed: [u8; 32]) -> UserKeypair {
        UserKeypair {
            signing: SigningKey::from_bytes(&seed),
        }
    }

    /// The public key.
    pub fn public_key(&self) -> UserPublicKey {
        UserPublicKey(self.signing.verifying_key())
    }

    /// Signs `message`.
    pub(crate) fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.signing.sign(message).to_bytes()
    }

    /// The key file text (contains the secret seed).
    pub fn to_text(&self) -> String {
        format!(
            "# sfs user key: keep secret\nsecret-key {ED25519_PREFIX}{}\npublic-key {}\n",
            hex::encode(self.signing.as_bytes()),
            self.public_key()
        )
    }

    /// Parses a key file written by [`UserKeypair::to_text`].
    pub fn from_text(text: &str) -> Result<UserKeypair, KeyError> {
        let (secret, public) = parse_key_file(text, ED25519_PREFIX)?;
        let kp = UserKeypair::from_seed(secret);
        match public {
            Some(p) if p != kp.public_key().to_bytes() => Err(KeyError::PublicMismatch),
            _ => Ok(kp),
        }
    }
}

impl fmt::Debug for UserKeypair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserKeypair")
            .field("public", &self.public_key())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_key_file_round_trip() {
        let kp = ServerKeypair::generate();
        let back = ServerKeypair::from_text(&kp.to_text()).unwrap();
        assert_eq!(back.public_key(), kp.public_key());
        assert_eq!(back.secret_key(), kp.secret_key());
        let tampered = kp
            .to_text()
            .replace("public-key x25519:", "public-key x25519:0");
        assert!(ServerKeypair::from_text(&tampered).is_err());
    }

    #[test]
    fn user_key_file_and_public_line() {
        let kp = UserKeypair::generate();
        let back = UserKeypair::from_text(&kp.to_text()).unwrap();
        assert_eq!(back.public_key(), kp.public_key());
        let line = kp.public_key().to_string();
        assert_eq!(line.parse::<UserPublicKey>().unwrap(), kp.public_key());
        assert!(matches!(
            "rsa:00".parse::<UserPublicKey>(),
            Err(KeyError::BadPrefix { .. })
        ));
        assert!(matches!(
            "ed25519:00".parse::<UserPublicKey>(),
            Err(KeyError::BadHex { .. })
        ));
        let other = UserKeypair::generate();
        let mixed = format!(
            "secret-key ed25519:{}\npublic-key {}\n",
            hex::encode(kp.signing.as_bytes()),
            other.public_key()
        );
        assert_eq!(
            UserKeypair::from_text(&mixed).unwrap_err(),
            KeyError::PublicMismatch
        );
        assert_eq!(
            UserKeypair::from_text("# nothing\n").unwrap_err(),
            KeyError::MissingLine("secret-key")
        );
    }

    #[test]
    fn x25519_public_matches_rfc7748() {
        // RFC 7748 section 6.1, Alice.
        let secret =
            hex::decode::<32>("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
                .unwrap();
        let kp = ServerKeypair::from_secret(secret);
        assert_eq!(
            hex::encode(kp.public_key()),
            "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
        );
    }
}
