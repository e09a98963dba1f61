//! Bookmarks: short names for self-certifying server names.
//!
//! `~/.sfs/bookmarks` (or the file `SFS_BOOKMARKS` names) holds lines `ALIAS @HOST%PORT,HOSTID`;
//! `#` starts a comment, blank lines are ignored. The CLI accepts `ALIAS:/path` wherever it
//! takes a remote name, and a `--namespace` mount shows each alias as a symlink to its server.

use std::path::PathBuf;

use protocol::ServerName;

/// One bookmark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bookmark {
    /// The short name.
    pub alias: String,
    /// The server it stands for (without a path).
    pub server: ServerName,
}

/// The bookmarks file: `SFS_BOOKMARKS`, else `~/.sfs/bookmarks`.
pub(crate) fn default_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SFS_BOOKMARKS") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".sfs").join("bookmarks"))
}

/// Whether `alias` can be a bookmark: non-empty, not `.`/`..`, not starting with `@`, and
/// without `/`, `:` or whitespace (so `alias:/path` and the namespace root are unambiguous).
pub(crate) fn valid_alias(alias: &str) -> bool {
    !alias.is_empty()
        && alias != "."
        && alias != ".."
        && !alias.starts_with('@')
        && !alias
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
}

/// Parses a bookmarks file; errors name the line.
pub(crate) fn parse(text: &str) -> Result<Vec<Bookmark>, String> {
    let mut out: Vec<Bookmark> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let n = i + 1;
        let mut words = line.split_whitespace();
        let (Some(alias), Some(name), None) = (words.next(), words.next(), words.next()) else {
            return Err(format!(
                "line {n}: expected `ALIAS @HOST%PORT,HOSTID`, got {line:?}"
            ));
        };
        if !valid_alias(alias) {
            return Err(format!(
                "line {n}: {alias:?} is not a usable alias (no `/`, `:`, leading `@`, `.` or `..`)"
            ));
        }
        let server: ServerName = name.parse().map_err(|e| format!("line {n}: {name}: {e}"))?;
        if server
            .path()
            .is_some_and(|p| !p.trim_matches('/').is_empty())
        {
            return Err(format!(
                "line {n}: {name}: a bookmark names a server, not a path below it"
            ));
        }
        if out.iter().any(|b| b.alias == alias) {
            return Err(format!("line {n}: {alias:?} is defined twice"));
        }
        out.push(Bookmark {
            alias: alias.to_owned(),
            server: server.without_path(),
        });
    }
    Ok(out)
}

/// Reads the bookmarks file (none when it does not exist).
pub(crate) fn load() -> Result<Vec<Bookmark>, String> {
    let Some(path) = default_path() else {
        return Ok(Vec::new());
    };
    // Bookmarks say which server a name reaches, so only their owner may have written them
    // (a root mount reads root's); they are not secret.
    let me = rustix::process::geteuid().as_raw();
    let rules = crate::owned_file::Rules {
        owners: &[me],
        secret: false,
        max_len: crate::owned_file::BOOKMARKS_MAX,
    };
    match crate::owned_file::read(&path, rules) {
        Ok(Some(text)) => parse(&text).map_err(|e| format!("{}: {e}", path.display())),
        Ok(None) => Ok(Vec::new()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// `ALIAS:/path` (or `ALIAS:`) rewritten as `@SERVER/path` using `marks`; a name starting
/// with `@` is returned unchanged. `Ok(None)`: not an alias form at all.
pub(crate) fn expand_with(text: &str, marks: &[Bookmark]) -> Result<Option<String>, String> {
    if text.starts_with('@') {
        return Ok(Some(text.to_owned()));
    }
    let Some((alias, path)) = text.split_once(':') else {
        return Ok(None);
    };
    if !valid_alias(alias) {
        return Ok(None);
    }
    let Some(b) = marks.iter().find(|b| b.alias == alias) else {
        return Err(format!(
            "no bookmark {alias:?} (add `{alias} @HOST%PORT,HOSTID` to {})",
            default_path()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "~/.sfs/bookmarks".into())
        ));
    };
    if !path.is_empty() && !path.starts_with('/') {
        return Err(format!(
            "{text}: the path after `{alias}:` must start with `/`"
        ));
    }
    Ok(Some(format!("{}{path}", b.server)))
}

/// [`expand_with`] using the bookmarks file, read only for alias forms.
pub(crate) fn expand(text: &str) -> Result<Option<String>, String> {
    if text.starts_with('@') || !text.contains(':') {
        return expand_with(text, &[]);
    }
    expand_with(text, &load()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    #[test]
    fn parses_lines_comments_and_reports_errors_by_line() {
        let text =
            format!("# mine\nwork @127.0.0.1%4010,{ID}  # office\n\nhome @example.org,{ID}\n");
        let m = parse(&text).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].alias, "work");
        assert_eq!(m[0].server.to_string(), format!("@127.0.0.1%4010,{ID}"));
        assert_eq!(m[1].alias, "home");
        let e = parse("\nwork\n").unwrap_err();
        assert!(e.starts_with("line 2:"), "{e}");
        assert!(parse(&format!("a:b @h,{ID}")).is_err());
        assert!(parse(&format!("@a @h,{ID}")).is_err());
        assert!(parse("a @not-a-name").is_err());
        assert!(
            parse(&format!("a @h,{ID}\na @h,{ID}"))
                .unwrap_err()
                .contains("twice")
        );
        assert!(parse(&format!("a @h,{ID}/sub")).is_err());
    }

    #[test]
    fn expands_alias_paths() {
        let m = parse(&format!("w @127.0.0.1%4010,{ID}")).unwrap();
        let srv = format!("@127.0.0.1%4010,{ID}");
        assert_eq!(
            expand_with("w:/a/b", &m).unwrap(),
            Some(format!("{srv}/a/b"))
        );
        assert_eq!(expand_with("w:", &m).unwrap(), Some(srv.clone()));
        assert_eq!(expand_with(&srv, &m).unwrap(), Some(srv.clone()));
        assert!(expand_with("x:/a", &m).unwrap_err().contains("no bookmark"));
        assert!(expand_with("w:a", &m).is_err());
        assert_eq!(expand_with("plain", &m).unwrap(), None);
    }
}
