//! Placeholder: filled in by the protocol issue.
