//! Server-chosen strings made safe to show on a terminal.
//!
//! A server names its files, and a hostile one can put terminal control sequences in those
//! names (to retitle the window, move the cursor, hide other output or fake a prompt), as
//! OpenSSH's scp learnt (CVE-2019-6109). So a name that holds a control character (C0, DEL,
//! C1) or bytes that are not UTF-8 is shown quoted as GNU `ls` quotes it on a terminal
//! (`--quoting-style=shell-escape`): `'a'$'\033''b'`, every such byte as an octal escape, and
//! the result can be pasted back into a shell. Other names are shown as they are. Listings sent
//! to a pipe stay raw, as `ls` does, and `--json` is exact; diagnostics are always escaped.

use std::borrow::Cow;
use std::io::IsTerminal;

/// `name` as GNU `ls` shows it on a terminal: unchanged unless it holds a control character
/// or bytes that are not UTF-8.
pub(crate) fn quoted(name: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(name) {
        Ok(s) if !s.chars().any(char::is_control) => Cow::Borrowed(s),
        _ => Cow::Owned(shell_escape(name)),
    }
}

/// A string of ours that may carry server-chosen parts (an error message with a path): every
/// control character escaped, as [`quoted`] does.
pub(crate) fn escaped(text: &str) -> Cow<'_, str> {
    quoted(text.as_bytes())
}

/// A name for standard output: [`quoted`] on a terminal, raw (lossy UTF-8) into a pipe or file.
pub(crate) fn on_stdout(name: &[u8]) -> Cow<'_, str> {
    if std::io::stdout().is_terminal() {
        quoted(name)
    } else {
        String::from_utf8_lossy(name)
    }
}

/// What the quoted text being built ends with.
#[derive(PartialEq)]
enum Run {
    Nothing,
    /// An open `'...` of printable characters.
    Quoted,
    /// A closed `$'\ooo'` group, which more escapes extend.
    Escaped,
}

/// The shell-escape quoting: printable runs in single quotes, the rest as `$'\ooo'`.
fn shell_escape(name: &[u8]) -> String {
    let mut out = String::new();
    let mut run = Run::Nothing;
    let mut rest = name;
    while !rest.is_empty() {
        let (good, bad) = match std::str::from_utf8(rest) {
            Ok(s) => (s, &[][..]),
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                let n = e.error_len().unwrap_or(bad.len());
                // `valid_up_to` marks where the UTF-8 prefix ends.
                (std::str::from_utf8(good).unwrap_or_default(), &bad[..n])
            }
        };
        for c in good.chars() {
            if c.is_control() {
                let mut buf = [0; 4];
                escape_bytes(&mut out, &mut run, c.encode_utf8(&mut buf).as_bytes());
            } else {
                if run != Run::Quoted {
                    out.push('\'');
                    run = Run::Quoted;
                }
                if c == '\'' {
                    out.push_str("'\\''");
                } else {
                    out.push(c);
                }
            }
        }
        escape_bytes(&mut out, &mut run, bad);
        rest = &rest[good.len() + bad.len()..];
    }
    if run == Run::Quoted {
        out.push('\'');
    }
    out
}

/// Appends `bytes` as octal escapes: to the `$'...'` group just written, or a new one (closing
/// a quoted run first).
fn escape_bytes(out: &mut String, run: &mut Run, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    match run {
        Run::Quoted => out.push_str("'$'"),
        Run::Escaped => {
            out.pop();
        }
        Run::Nothing => out.push_str("$'"),
    }
    for b in bytes {
        out.push_str(&format!("\\{b:03o}"));
    }
    out.push('\'');
    *run = Run::Escaped;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_unchanged() {
        for n in ["a", "with space", "été", "日本", "it's"] {
            assert_eq!(quoted(n.as_bytes()), n);
        }
    }

    #[test]
    fn control_characters_are_escaped_as_gnu_ls_does() {
        assert_eq!(quoted(b"a\x1bb"), r"'a'$'\033''b'");
        assert_eq!(quoted(b"\x1b]0;owned\x07"), r"$'\033'']0;owned'$'\007'");
        assert_eq!(
            quoted(b"\x07\x1b[2J"),
            r"$'\007\033''[2J'",
            "one group for a run"
        );
        assert_eq!(quoted(b"line\n"), r"'line'$'\012'");
        assert_eq!(quoted(b"del\x7f"), r"'del'$'\177'");
        // C1 controls (U+009B is a one-character CSI on many terminals), byte by byte.
        assert_eq!(quoted("x\u{9b}2J".as_bytes()), r"'x'$'\302\233''2J'");
        // Not UTF-8.
        assert_eq!(quoted(b"bad\xffname"), r"'bad'$'\377''name'");
        // A quote inside a quoted name.
        assert_eq!(quoted(b"it's\x01"), r"'it'\''s'$'\001'");
        assert_eq!(escaped("x\x1b[2Jy"), r"'x'$'\033''[2Jy'");
    }

    #[test]
    fn nothing_escaped_keeps_a_control_byte() {
        let all: Vec<u8> = (0..=255u8).collect();
        let shown = quoted(&all);
        assert!(!shown.bytes().any(|b| b < 0x20 || b == 0x7f), "{shown:?}");
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
    }
}
