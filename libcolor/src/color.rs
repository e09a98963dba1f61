//! Colors: the unit of mutual exclusion and ordering.

/// Number of entries in the color-to-worker table (the libasync-smp paper, section 4.2: colors are
/// mapped through a 1024-entry array; colors congruent modulo its size share an entry).
pub const COLOR_SLOTS: usize = 1024;

/// A callback's color. Callbacks of one color never run at the same time and run in the
/// order they were scheduled; callbacks of different colors may run in parallel.
///
/// Colors are *not* inherited: a callback scheduled from inside a colored callback has
/// [`Color::DEFAULT`] unless it names one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Color(pub u32);

impl Color {
    /// Color 0: the color of every callback that names none. A program that never names a
    /// color runs exactly like a single-threaded event loop.
    pub const DEFAULT: Color = Color(0);

    /// The entry of the color-to-worker table this color maps to. Two colors with the same
    /// slot are scheduled as one (they never run in parallel), which is safe, merely
    /// conservative.
    #[inline]
    pub(crate) fn slot(self) -> usize {
        self.0 as usize % COLOR_SLOTS
    }
}

impl From<u32> for Color {
    fn from(value: u32) -> Self {
        Color(value)
    }
}

impl std::fmt::Display for Color {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "color {}", self.0)
    }
}
