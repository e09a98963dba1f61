//! How log lines show their fields: every value escaped as the commands' diagnostics are.
//!
//! A mount logs names and errors that a server (or, in a many-user mount, another local user)
//! chose. tracing-subscriber escapes ESC and a few other control characters, but not carriage
//! returns, newlines or the rest of C0, which can forge or hide log lines when the log is read
//! on a terminal (`tail -f`). So each field is formatted, then shown with `shown::escaped`:
//! unchanged when it has no control character, shell-quoted when it has.

use std::fmt::Write as _;

use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::{Writer, debug_fn};

use crate::commands::shown;

/// The field formatter for every log line: `message key=value ...`, each part escaped.
pub(crate) fn escaped() -> impl for<'w> FormatFields<'w> + Send + Sync + 'static {
    debug_fn(
        |w: &mut Writer<'_>, field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
            let mut text = String::new();
            if field.name() != "message" {
                let _ = write!(text, "{}=", field.name());
            }
            let _ = write!(text, "{value:?}");
            w.write_str(&shown::escaped(&text))
        },
    )
    .delimited(" ")
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn log_lines_carry_no_control_characters_but_their_newline() {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let b2 = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || Sink(b2.clone()))
            .with_ansi(false)
            .without_time()
            .fmt_fields(super::escaped())
            .finish();
        let name = "evil\r\x1b]0;owned\x07\nFAKE LINE\x0b";
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!("namespace: {name}: not found");
            tracing::warn!(server = %name, error = "x", "bad record");
            tracing::warn!("plain message");
        });
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text:?}");
        for c in text.chars().filter(|c| c.is_control()) {
            assert_eq!(c, '\n', "{text:?}");
        }
        assert!(
            lines[0].contains("evil") && lines[0].contains("FAKE LINE"),
            "{text}"
        );
        assert!(
            lines[1].contains("server=") && lines[1].contains("bad record"),
            "{text}"
        );
        assert!(lines[2].ends_with("plain message"), "{text}");
    }
}
