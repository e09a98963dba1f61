//! What can go wrong with a request, with the underlying error kept as the source.
//!
//! The top-level message says what failed and with which server; the cause is the error's
//! [`source`](std::error::Error::source), so callers can inspect it and printing the whole
//! chain (`{:#}` through `anyhow`, or [`SessionError::report`]) shows everything.

use std::error::Error as _;
use std::fmt;
use std::time::Duration;

use protocol::{NfsStatus, Proc};

/// What went wrong with a request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionError {
    /// The server answered with an error status.
    #[error("{}", status_message(*.0))]
    Nfs(NfsStatus),
    /// No connection could be made.
    #[error("cannot reach {name}")]
    Connect {
        /// The server.
        name: String,
        /// Why.
        #[source]
        source: ConnectError,
    },
    /// The handshake failed: for instance the server is not the one the HOSTID names.
    #[error("refusing server {name}")]
    Handshake {
        /// The server.
        name: String,
        /// Why, as the protocol crate found it.
        #[source]
        source: protocol::HandshakeError,
    },
    /// The stream broke while a non-idempotent request was outstanding: it may or may not
    /// have been done, so it is not repeated blindly.
    #[error(
        "connection to {name} lost during {proc:?}; not retried because it is not idempotent \
         (check the result and repeat if needed)"
    )]
    NotRetried {
        /// The server.
        name: String,
        /// The request.
        proc: Proc,
    },
    /// The server stayed connected but did not answer within the request timeout, and the
    /// request could not be completed on a new connection either (or was not repeated
    /// because it is not idempotent).
    #[error("server {name} did not answer {proc:?} within {} s; {after}", secs(*.timeout))]
    Timeout {
        /// The server.
        name: String,
        /// The request.
        proc: Proc,
        /// The per-request timeout that expired.
        timeout: Duration,
        /// What happened next.
        after: AfterTimeout,
        /// Why reconnecting failed, when it did.
        #[source]
        source: Option<Box<SessionError>>,
    },
    /// The data to send could not be read (a local file being copied to the server).
    #[error("reading the local data")]
    Source(#[source] std::io::Error),
    /// The server sent something this client cannot make sense of.
    #[error("protocol error with {name}")]
    Protocol {
        /// The server.
        name: String,
        /// What made no sense.
        #[source]
        source: ProtocolError,
    },
}

impl SessionError {
    /// The message with its causes, `: `-separated (for logs, which print one line).
    pub(crate) fn report(&self) -> Report<'_> {
        Report(self)
    }
}

/// Why no connection could be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// Connecting, or reading or writing during the handshake, failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// TCP connect plus handshake took longer than [`super::Options::connect_timeout`].
    #[error("timed out")]
    TimedOut,
    /// [`super::Options::connect_attempts`] was 0 (treated as 1, so never seen in practice).
    #[error("no attempt made")]
    NoAttempt,
    /// The server hung up before the handshake ended.
    #[error("server closed the connection during the handshake")]
    ClosedInHandshake,
    /// The new connection broke before the LOGIN reply came.
    #[error("connection lost during login")]
    LostDuringLogin,
    /// An idempotent request lost its connection on every retry.
    #[error("connection keeps breaking")]
    KeepsBreaking,
}

/// A reply or exchange this client cannot make sense of.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProtocolError {
    /// The LOGIN arguments could not be signed.
    #[error("cannot sign login")]
    SignLogin(#[source] protocol::LoginError),
    /// LOGIN was answered with another procedure's reply.
    #[error("LOGIN answered with {0:?}")]
    LoginAnswer(Proc),
    /// A request was answered with another procedure's reply.
    #[error("unexpected reply {0:?}")]
    UnexpectedReply(Proc),
    /// A directory listing went past a bound of [`super::limits`], or asked for the same
    /// cookie twice (which would go round for ever).
    #[error("server sent an endless listing ({0})")]
    EndlessListing(String),
    /// A READ reply carried more data than the request asked for.
    #[error("server sent more data than asked ({got} bytes for a READ of {asked})")]
    ReadTooLong {
        /// The count asked for.
        asked: u32,
        /// The bytes sent.
        got: usize,
    },
}

/// What the session did after a request timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterTimeout {
    /// It tried to reconnect and could not (the error's source says why).
    ReconnectFailed,
    /// It retried on new connections; none answered in time either.
    GaveUp {
        /// Timed-out attempts in all.
        attempts: u32,
    },
    /// It did not repeat the request, which is not idempotent.
    NotRetried,
}

impl fmt::Display for AfterTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AfterTimeout::ReconnectFailed => write!(f, "reconnecting failed"),
            AfterTimeout::GaveUp { attempts } => write!(f, "gave up after {attempts} attempts"),
            AfterTimeout::NotRetried => write!(
                f,
                "not retried because it is not idempotent (check the result and repeat if \
                 needed)"
            ),
        }
    }
}

/// A [`SessionError`] with its chain of causes (see [`SessionError::report`]).
pub(crate) struct Report<'a>(&'a SessionError);

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(c) = cause {
            write!(f, ": {c}")?;
            cause = c.source();
        }
        Ok(())
    }
}

/// A duration in seconds as a user reads it ("30", "0.3").
pub(super) fn secs(d: Duration) -> String {
    format!("{}", (d.as_secs_f64() * 1000.0).round() / 1000.0)
}

/// The message a shell user expects for a status (`ls` says "No such file or directory"): the
/// protocol's [`NfsStatus::description`] in sentence case. NFS's "not owner" (PERM) reads as
/// "Permission denied", the words a shell prints for both refusals.
pub(crate) fn status_message(s: NfsStatus) -> String {
    let s = if s == NfsStatus::Perm {
        NfsStatus::Acces
    } else {
        s
    };
    let text = s.description();
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_messages_read_as_a_shell_prints_them() {
        assert_eq!(
            status_message(NfsStatus::NoEnt),
            "No such file or directory"
        );
        assert_eq!(status_message(NfsStatus::Acces), "Permission denied");
        assert_eq!(status_message(NfsStatus::Perm), "Permission denied");
        assert_eq!(status_message(NfsStatus::RoFs), "Read-only file system");
        assert_eq!(status_message(NfsStatus::NotEmpty), "Directory not empty");
        assert_eq!(status_message(NfsStatus::Stale), "Stale file handle");
        assert_eq!(status_message(NfsStatus::Io), "I/O error");
    }

    #[test]
    fn report_shows_every_cause_once() {
        let e = SessionError::Timeout {
            name: "@h,x".into(),
            proc: Proc::Null,
            timeout: Duration::from_millis(300),
            after: AfterTimeout::ReconnectFailed,
            source: Some(Box::new(SessionError::Connect {
                name: "@h,x".into(),
                source: ConnectError::TimedOut,
            })),
        };
        assert_eq!(
            e.to_string(),
            "server @h,x did not answer Null within 0.3 s; reconnecting failed"
        );
        assert_eq!(
            e.report().to_string(),
            "server @h,x did not answer Null within 0.3 s; reconnecting failed: cannot reach \
             @h,x: timed out"
        );
        let io = SessionError::Connect {
            name: "@h,x".into(),
            source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into(),
        };
        let cause = io.source().expect("the io error is the source");
        assert!(cause.downcast_ref::<ConnectError>().is_some());
    }
}
