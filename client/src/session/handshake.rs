//! The async handshake driver: runs a protocol [`Handshake`] to its end over a tokio stream,
//! step for step as the protocol crate's blocking [`protocol::handshake::complete`] does.
//! Generic over the side, so the session's tests drive their fake server with it too.

use protocol::handshake::{Completed, DriveError, Handshake};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Runs `hs` over `stream` until the session is established; the bytes received past the
/// handshake are in [`Completed::rest`]. On a handshake error the machine's last output (a
/// server's version refusal) is still sent, best effort.
pub(crate) async fn complete<S, T>(
    mut hs: Handshake<S>,
    stream: &mut T,
) -> Result<Completed, DriveError>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = [0u8; 4096];
    let mut rest = Vec::new();
    loop {
        if hs.has_output() {
            stream.write_all(&hs.take_output()).await?;
        }
        if !hs.wants_input() {
            break;
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(DriveError::Closed);
        }
        match hs.receive(&buf[..n]) {
            Ok(used) => rest.extend_from_slice(&buf[used..n]),
            Err(e) => {
                if hs.has_output() {
                    let _ = stream.write_all(&hs.take_output()).await;
                }
                return Err(e.into());
            }
        }
    }
    stream.flush().await?;
    let session = hs.into_session()?;
    Ok(Completed { session, rest })
}
