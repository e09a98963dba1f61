//! Request parsing: `httparse` reads the request line and headers; this module checks the few
//! headers the server acts on and turns the target into a safe path under the root.
//!
//! Everything is bounded before it is parsed: a request whose header block is not complete
//! within [`MAX_HEADER_BYTES`] is refused (431) without waiting for more, and at most
//! [`MAX_HEADERS`] header lines are accepted. Nothing here panics on any input (fuzzed:
//! `web/fuzz`, and `tests/hostile.rs` runs the same entry point as a proptest).

use std::time::SystemTime;

/// Largest request header block (request line, headers, blank line) accepted.
pub const MAX_HEADER_BYTES: usize = 8 * 1024;
/// Most header lines accepted in one request.
pub const MAX_HEADERS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
}

/// A single byte range (`Range: bytes=...`), not yet resolved against a file's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// `a-b`, with `a <= b` (inclusive, as written).
    FromTo(u64, u64),
    /// `a-`.
    From(u64),
    /// `-n`: the last `n` bytes.
    Suffix(u64),
}

impl ByteRange {
    /// The half-open span `[start, end)` this range selects in a file of `len` bytes, or `None`
    /// if it selects nothing (416).
    pub fn resolve(self, len: u64) -> Option<(u64, u64)> {
        match self {
            ByteRange::FromTo(a, b) => (a < len).then(|| (a, b.min(len - 1) + 1)),
            ByteRange::From(a) => (a < len).then_some((a, len)),
            ByteRange::Suffix(n) => (n > 0 && len > 0).then(|| (len - n.min(len), len)),
        }
    }
}

/// One parsed request: what the server needs of it and nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: Method,
    /// The target's path, percent-decoded and normalised, relative to the root: components
    /// joined by `/`, without empty, `.` or `..` components and without a leading `/`. A
    /// target ending in `/` names `index.html` in that directory.
    pub path: String,
    /// Whether the connection stays open after the response (HTTP/1.1 unless `close`,
    /// HTTP/1.0 only with `keep-alive`).
    pub keep_alive: bool,
    pub if_modified_since: Option<SystemTime>,
    /// A single range; multiple ranges, malformed ranges and `If-Range` make this `None` (the
    /// whole file is sent, which RFC 9110 allows).
    pub range: Option<ByteRange>,
}

/// Why a request is refused; each maps to a status and closes the connection afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// 400: malformed syntax, a bad target, a missing `Host` in HTTP/1.1.
    BadRequest,
    /// 405: a well-formed method other than GET and HEAD.
    MethodNotAllowed,
    /// 413: a request with a body (this server takes none).
    PayloadTooLarge,
    /// 431: header block larger than [`MAX_HEADER_BYTES`] or more than [`MAX_HEADERS`] lines.
    HeadersTooLarge,
}

/// Parses the request at the start of `buf`: `Ok(None)` if it is not complete yet, else the
/// request and the bytes it took.
pub fn parse(buf: &[u8]) -> Result<Option<(Request, usize)>, Reject> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            return if buf.len() >= MAX_HEADER_BYTES {
                Err(Reject::HeadersTooLarge)
            } else {
                Ok(None)
            };
        }
        Err(httparse::Error::TooManyHeaders) => return Err(Reject::HeadersTooLarge),
        Err(_) => {
            return Err(if buf.len() > MAX_HEADER_BYTES {
                Reject::HeadersTooLarge
            } else {
                Reject::BadRequest
            });
        }
    };
    if len > MAX_HEADER_BYTES {
        return Err(Reject::HeadersTooLarge);
    }
    // httparse only reports Complete with all three set.
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(Reject::BadRequest);
    };
    let method = match method {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        // httparse has checked it is a token.
        _ => return Err(Reject::MethodNotAllowed),
    };
    let mut keep_alive = version == 1;
    let (mut hosts, mut if_modified_since, mut range, mut if_range) = (0, None, None, false);
    for h in req.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("host") {
            hosts += 1;
        } else if name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && version == 0 {
                    keep_alive = true;
                }
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            let n: u64 = std::str::from_utf8(h.value)
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse().ok())
                .ok_or(Reject::BadRequest)?;
            if n > 0 {
                return Err(Reject::PayloadTooLarge);
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Reject::PayloadTooLarge);
        } else if name.eq_ignore_ascii_case("if-modified-since") {
            // An invalid date is ignored (RFC 9110 13.1.3).
            if_modified_since = std::str::from_utf8(h.value)
                .ok()
                .and_then(|s| httpdate::parse_http_date(s.trim()).ok());
        } else if name.eq_ignore_ascii_case("range") {
            range = if range.is_some() {
                None
            } else {
                parse_range(h.value)
            };
        } else if name.eq_ignore_ascii_case("if-range") {
            if_range = true;
        }
    }
    if version == 1 && hosts != 1 {
        return Err(Reject::BadRequest);
    }
    let path = normalise_target(target)?;
    Ok(Some((
        Request {
            method,
            path,
            keep_alive,
            if_modified_since,
            range: if if_range { None } else { range },
        },
        len,
    )))
}

/// `bytes=a-b`, `bytes=a-` or `bytes=-n`; anything else (several ranges, other units, bad
/// numbers, `a > b`) is `None`, and the header is ignored.
pub fn parse_range(value: &[u8]) -> Option<ByteRange> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let spec = value.strip_prefix("bytes=")?.trim();
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let num = |s: &str| -> Option<u64> {
        let s = s.trim();
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    match (a.trim().is_empty(), b.trim().is_empty()) {
        (true, true) => None,
        (true, false) => Some(ByteRange::Suffix(num(b)?)),
        (false, true) => Some(ByteRange::From(num(a)?)),
        (false, false) => {
            let (a, b) = (num(a)?, num(b)?);
            (a <= b).then_some(ByteRange::FromTo(a, b))
        }
    }
}

/// The origin-form target `/p/a/t/h?query` as a path relative to the root: the query is
/// dropped, `%XX` decoded, empty and `.` components skipped; `..`, NUL, non-UTF-8 and targets
/// not starting with `/` are 400. No component can climb out of the root, and the file is
/// then opened beneath the root's descriptor (see [`crate::fsroot`]) so symlinks cannot either.
pub fn normalise_target(target: &str) -> Result<String, Reject> {
    let raw = target.split(['?', '#']).next().unwrap_or("");
    if !raw.starts_with('/') {
        return Err(Reject::BadRequest);
    }
    let decoded = percent_decode(raw.as_bytes()).ok_or(Reject::BadRequest)?;
    let decoded = String::from_utf8(decoded).map_err(|_| Reject::BadRequest)?;
    let mut out = String::with_capacity(decoded.len());
    for part in decoded.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(Reject::BadRequest),
            p if p.contains('\0') => return Err(Reject::BadRequest),
            p => {
                if !out.is_empty() {
                    out.push('/');
                }
                out.push_str(p);
            }
        }
    }
    if decoded.ends_with('/') {
        if !out.is_empty() {
            out.push('/');
        }
        out.push_str("index.html");
    }
    Ok(out)
}

fn percent_decode(s: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            let hi = (hex[0] as char).to_digit(16)?;
            let lo = (hex[1] as char).to_digit(16)?;
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Request {
        parse(text.as_bytes()).unwrap().unwrap().0
    }

    #[test]
    fn a_simple_get_keeps_the_connection_alive() {
        let r = ok("GET /a/b.txt?x=1 HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(r.method, Method::Get);
        assert_eq!(r.path, "a/b.txt");
        assert!(r.keep_alive);
        assert_eq!(r.range, None);
        let r = ok("HEAD / HTTP/1.0\r\n\r\n");
        assert_eq!(
            (r.method, r.path.as_str(), r.keep_alive),
            (Method::Head, "index.html", false)
        );
        assert!(ok("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
        assert!(!ok("GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, close\r\n\r\n").keep_alive);
    }

    #[test]
    fn partial_requests_wait_and_oversized_ones_are_431() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\nHost: h\r\n"), Ok(None));
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.resize(MAX_HEADER_BYTES, b'a');
        assert_eq!(parse(&big), Err(Reject::HeadersTooLarge));
        let mut many = String::from("GET / HTTP/1.1\r\n");
        for i in 0..=MAX_HEADERS {
            many.push_str(&format!("X{i}: y\r\n"));
        }
        many.push_str("\r\n");
        assert_eq!(parse(many.as_bytes()), Err(Reject::HeadersTooLarge));
    }

    #[test]
    fn refusals() {
        let r = |t: &str| parse(t.as_bytes());
        assert_eq!(
            r("POST / HTTP/1.1\r\nHost: h\r\n\r\n"),
            Err(Reject::MethodNotAllowed)
        );
        assert_eq!(r("G(T / HTTP/1.1\r\n\r\n"), Err(Reject::BadRequest));
        assert_eq!(
            r("GET / HTTP/1.1\r\n\r\n"),
            Err(Reject::BadRequest),
            "no Host"
        );
        assert_eq!(
            r("GET /../etc/passwd HTTP/1.1\r\nHost: h\r\n\r\n"),
            Err(Reject::BadRequest)
        );
        assert_eq!(
            r("GET /a/%2e%2e/%2e%2e/x HTTP/1.1\r\nHost: h\r\n\r\n"),
            Err(Reject::BadRequest)
        );
        assert_eq!(
            r("GET /a%00 HTTP/1.1\r\nHost: h\r\n\r\n"),
            Err(Reject::BadRequest)
        );
        assert_eq!(
            r("GET /%zz HTTP/1.1\r\nHost: h\r\n\r\n"),
            Err(Reject::BadRequest)
        );
        assert_eq!(
            r("GET http://h/ HTTP/1.1\r\nHost: h\r\n\r\n"),
            Err(Reject::BadRequest)
        );
        assert_eq!(
            r("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"),
            Err(Reject::PayloadTooLarge)
        );
        assert_eq!(
            r("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: x\r\n\r\n"),
            Err(Reject::BadRequest)
        );
        assert!(r("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n").is_ok());
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_range(b"bytes=0-9"), Some(ByteRange::FromTo(0, 9)));
        assert_eq!(parse_range(b"bytes=5-"), Some(ByteRange::From(5)));
        assert_eq!(parse_range(b"bytes=-3"), Some(ByteRange::Suffix(3)));
        for bad in [
            "bytes=9-0",
            "bytes=0-1,3-4",
            "items=0-1",
            "bytes=-",
            "bytes=a-b",
            "bytes=+1-2",
        ] {
            assert_eq!(parse_range(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(ByteRange::FromTo(0, 9).resolve(5), Some((0, 5)));
        assert_eq!(ByteRange::FromTo(5, 9).resolve(5), None);
        assert_eq!(ByteRange::From(4).resolve(5), Some((4, 5)));
        assert_eq!(ByteRange::Suffix(10).resolve(5), Some((0, 5)));
        assert_eq!(ByteRange::Suffix(2).resolve(5), Some((3, 5)));
        assert_eq!(ByteRange::Suffix(0).resolve(5), None);
        assert_eq!(ByteRange::From(0).resolve(0), None);
    }

    #[test]
    fn pipelined_requests_are_taken_one_at_a_time() {
        let two = b"GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n";
        let (first, n) = parse(two).unwrap().unwrap();
        assert_eq!(first.path, "a");
        let (second, m) = parse(&two[n..]).unwrap().unwrap();
        assert_eq!(second.path, "b");
        assert_eq!(n + m, two.len());
    }
}
