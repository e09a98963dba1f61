//! Entry points for the fuzzer (`web/fuzz`) and for the hostile-input property tests
//! (`tests/hostile.rs`), so CI exercises the same checks without nightly.

use crate::parser::{self, MAX_HEADER_BYTES};
use crate::response::{self, FileMeta, Plan};

/// Parses `data` as the server would and checks what must hold for any input:
///
/// * no panic;
/// * a complete request took no more than it was given, and at most [`MAX_HEADER_BYTES`];
/// * its path is empty (the root) or has no `..`, `.` or empty component, no NUL and no leading `/`;
/// * parsing in two pieces (as bytes arrive) gives the same answer once all bytes are there:
///   an incomplete prefix never produces a request the whole would not;
/// * its range, resolved against a few file lengths, stays inside the file, and the head
///   written for it declares exactly the body bytes planned.
pub fn parse_request(data: &[u8]) {
    let whole = parser::parse(data);
    if let Ok(Some((req, n))) = &whole {
        assert!(*n <= data.len() && *n <= MAX_HEADER_BYTES);
        assert!(!req.path.starts_with('/'));
        // "" names the root itself (a directory: 404).
        for part in req.path.split('/').filter(|_| !req.path.is_empty()) {
            assert!(
                !matches!(part, "" | "." | ".."),
                "bad component in {:?}",
                req.path
            );
            assert!(!part.contains('\0'));
        }
        for len in [0u64, 1, 7, 4096, u64::MAX / 2] {
            if let Some(r) = req.range
                && let Some((s, e)) = r.resolve(len)
            {
                assert!(s < e && e <= len);
            }
            let meta = FileMeta::new(len, std::time::UNIX_EPOCH, &req.path);
            let mut head = Vec::new();
            let plan = response::file_head(&mut head, req, &meta);
            let text = String::from_utf8(head).expect("heads are ASCII");
            let declared: Option<u64> = text
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|v| v.trim().parse().ok());
            if let Plan::Body(s, e) = plan {
                assert_eq!(declared, Some(e - s));
            }
        }
    }
    if data.len() > 1 {
        let cut = data.len() / 2;
        if let Ok(Some((_, n))) = parser::parse(&data[..cut]) {
            // A request complete in the prefix is the same request in the whole.
            match &whole {
                Ok(Some((_, m))) => assert_eq!(*m, n),
                other => panic!("prefix parsed ({n} bytes) but whole gave {other:?}"),
            }
        }
    }
}
