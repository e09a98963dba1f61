//! Response heads, written straight into the connection's output buffer, and the choice of
//! status for a request against a file (200, 206, 304, 416).

use std::cell::RefCell;
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::parser::{Method, Reject, Request};

/// What the server knows of a file when it answers: enough to build the head.
#[derive(Debug, Clone)]
pub struct FileMeta {
    pub len: u64,
    /// Whole seconds (HTTP dates have no finer resolution).
    pub mtime: SystemTime,
    /// `Last-Modified`'s value, formatted once per load.
    pub last_modified: String,
    pub content_type: &'static str,
}

impl FileMeta {
    pub fn new(len: u64, mtime: SystemTime, path: &str) -> FileMeta {
        let secs = mtime
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mtime = UNIX_EPOCH + std::time::Duration::from_secs(secs);
        FileMeta {
            len,
            mtime,
            last_modified: httpdate::fmt_http_date(mtime),
            content_type: content_type(path),
        }
    }
}

/// The part of the file a response carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Head only (HEAD, 304, 416).
    NoBody,
    /// Bytes `[start, end)` of the file.
    Body(u64, u64),
}

/// Writes the head of the answer to `req` about a file described by `meta` into `out`, and
/// says which bytes of the file follow it.
pub fn file_head(out: &mut Vec<u8>, req: &Request, meta: &FileMeta) -> Plan {
    let not_modified = req
        .if_modified_since
        .is_some_and(|since| meta.mtime <= since);
    let (status, span) = if not_modified {
        ("304 Not Modified", None)
    } else {
        match req.range.map(|r| r.resolve(meta.len)) {
            None => ("200 OK", Some((0, meta.len))),
            Some(Some(span)) => ("206 Partial Content", Some(span)),
            Some(None) => ("416 Range Not Satisfiable", None),
        }
    };
    let _ = write!(
        out,
        "HTTP/1.1 {status}\r\nServer: colorweb\r\nDate: {}\r\nLast-Modified: {}\r\nAccept-Ranges: bytes\r\n",
        date_now(),
        meta.last_modified
    );
    if !req.keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    match (status.as_bytes()[0], span) {
        (b'2', Some((start, end))) => {
            let _ = write!(
                out,
                "Content-Type: {}\r\nContent-Length: {}\r\n",
                meta.content_type,
                end - start
            );
            if status.starts_with("206") {
                let _ = write!(
                    out,
                    "Content-Range: bytes {}-{}/{}\r\n",
                    start,
                    end - 1,
                    meta.len
                );
            }
            out.extend_from_slice(b"\r\n");
            if req.method == Method::Head {
                Plan::NoBody
            } else {
                Plan::Body(start, end)
            }
        }
        (b'4', _) => {
            let _ = write!(
                out,
                "Content-Range: bytes */{}\r\nContent-Length: 0\r\n\r\n",
                meta.len
            );
            Plan::NoBody
        }
        _ => {
            out.extend_from_slice(b"\r\n");
            Plan::NoBody
        }
    }
}

/// An error status the server answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Rejected(Reject),
    NotFound,
}

/// Writes a complete error response (a short text body, `Connection: close` unless it is a
/// 404 on a connection that stays open).
pub fn error(out: &mut Vec<u8>, failure: Failure, method: Option<Method>, keep_alive: bool) {
    let (status, extra) = match failure {
        Failure::NotFound => ("404 Not Found", ""),
        Failure::Rejected(Reject::BadRequest) => ("400 Bad Request", ""),
        Failure::Rejected(Reject::MethodNotAllowed) => {
            ("405 Method Not Allowed", "Allow: GET, HEAD\r\n")
        }
        Failure::Rejected(Reject::PayloadTooLarge) => ("413 Content Too Large", ""),
        Failure::Rejected(Reject::HeadersTooLarge) => ("431 Request Header Fields Too Large", ""),
    };
    let body = format!("{status}\n");
    let _ = write!(
        out,
        "HTTP/1.1 {status}\r\nServer: colorweb\r\nDate: {}\r\n{extra}Content-Type: text/plain\r\nContent-Length: {}\r\n{}\r\n",
        date_now(),
        body.len(),
        if keep_alive {
            ""
        } else {
            "Connection: close\r\n"
        }
    );
    if method != Some(Method::Head) {
        out.extend_from_slice(body.as_bytes());
    }
}

thread_local! {
    /// The `Date` header's value for the current second, per worker thread: formatting a date
    /// per response would cost more than the rest of the head.
    static DATE: RefCell<(u64, String)> = const { RefCell::new((0, String::new())) };
}

fn date_now() -> String {
    let now = SystemTime::now();
    let secs = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    DATE.with(|d| {
        let mut d = d.borrow_mut();
        if d.0 != secs || d.1.is_empty() {
            *d = (secs, httpdate::fmt_http_date(now));
        }
        d.1.clone()
    })
}

/// `Content-Type` by extension; unknown types are `application/octet-stream` (as nginx's
/// default_type in the benchmark).
pub fn content_type(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    match ext.to_ascii_lowercase().as_str() {
        "html" | "htm" => "text/html",
        "txt" => "text/plain",
        "css" => "text/css",
        "js" => "text/javascript",
        "json" => "application/json",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::ByteRange;

    fn req(range: Option<ByteRange>, ims: Option<SystemTime>) -> Request {
        Request {
            method: Method::Get,
            path: "a.txt".into(),
            keep_alive: true,
            if_modified_since: ims,
            range,
        }
    }

    #[test]
    fn statuses() {
        let meta = FileMeta::new(
            10,
            UNIX_EPOCH + std::time::Duration::from_secs(1000),
            "a.txt",
        );
        let mut out = Vec::new();
        assert_eq!(
            file_head(&mut out, &req(None, None), &meta),
            Plan::Body(0, 10)
        );
        assert!(out.starts_with(b"HTTP/1.1 200 OK\r\n"));
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("Content-Length: 10\r\n"), "{text}");
        let mut out = Vec::new();
        let plan = file_head(&mut out, &req(Some(ByteRange::FromTo(2, 4)), None), &meta);
        assert_eq!(plan, Plan::Body(2, 5));
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("Content-Range: bytes 2-4/10\r\n"), "{text}");
        assert!(text.contains("Content-Length: 3\r\n"), "{text}");
        let mut out = Vec::new();
        let plan = file_head(&mut out, &req(Some(ByteRange::From(10)), None), &meta);
        assert_eq!(plan, Plan::NoBody);
        assert!(out.starts_with(b"HTTP/1.1 416 "));
        let mut out = Vec::new();
        let plan = file_head(&mut out, &req(None, Some(meta.mtime)), &meta);
        assert_eq!(plan, Plan::NoBody);
        assert!(out.starts_with(b"HTTP/1.1 304 "));
        let earlier = meta.mtime - std::time::Duration::from_secs(1);
        let mut out = Vec::new();
        assert_eq!(
            file_head(&mut out, &req(None, Some(earlier)), &meta),
            Plan::Body(0, 10)
        );
    }
}
