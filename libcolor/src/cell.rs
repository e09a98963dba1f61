//! `ColorCell<T>`: state owned by one color.
//!
//! Callbacks of one color never overlap, and each runs after the previous one finished, with
//! a happens-before edge between them (the slot state machine's acquire-release transitions,
//! see `state.rs`). State touched only by one color therefore needs no lock, and a
//! `ColorCell` says so in the type: it hands out `&mut T` only inside a callback of its color
//! on its runtime, checked against the running color on every access. Anywhere else
//! (another color, another runtime, a helper thread, outside any callback) access fails with
//! [`WrongColor`] (or panics, with [`ColorCell::with`]).
//!
//! ```
//! use libcolor::{Color, ColorCell, Runtime};
//! use std::sync::Arc;
//!
//! let rt = Runtime::builder().workers(2).build().unwrap();
//! let h = rt.handle();
//! let table = Arc::new(ColorCell::new(&h, Color(3), Vec::new()));
//! for i in 0..10 {
//!     let table = table.clone();
//!     h.cpucb(Color(3), move || table.with(|t| t.push(i)));
//! }
//! let (table2, h2) = (table.clone(), h.clone());
//! h.cpucb(Color(3), move || {
//!     assert_eq!(table2.with(|t| t.len()), 10);
//!     h2.stop();
//! });
//! // Outside a callback of color 3 the state is out of reach:
//! assert!(table.try_with(|t| t.len()).is_err());
//! rt.run().unwrap();
//! ```

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::color::Color;
use crate::handle::Handle;

/// Access to a [`ColorCell`] from outside a callback of its color and runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("ColorCell of {owner} accessed from {running}")]
pub struct WrongColor {
    /// The cell's color.
    pub owner: Color,
    /// What was running instead: `None` outside any callback (or in another runtime).
    pub running: RunningColor,
}

/// What was running when a [`ColorCell`] was accessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunningColor {
    /// No callback of the cell's runtime was running on this thread.
    None,
    /// A callback of this color (of the cell's runtime) was running.
    Color(Color),
    /// The cell was already borrowed by an enclosing `with` on this thread.
    Reentrant,
}

impl std::fmt::Display for RunningColor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunningColor::None => write!(f, "outside any callback of its runtime"),
            RunningColor::Color(c) => write!(f, "a callback of {c}"),
            RunningColor::Reentrant => write!(f, "inside its own `with` (re-entrant access)"),
        }
    }
}

/// A value owned by one color of one runtime: reachable only from that color's callbacks.
pub struct ColorCell<T> {
    runtime: u64,
    color: Color,
    /// Set while a `with` holds the `&mut T`, so a re-entrant `with` cannot alias it.
    borrowed: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through `try_with`, which checks that the calling thread
// is running a callback of `color` on `runtime`. Callbacks of one color (one slot) never run
// concurrently, and consecutive ones are ordered by the slot's acquire-release state
// transitions (or run on the uniprocessor loop's single thread), so at most one thread
// accesses the value at a time and each access happens-after the previous one; `borrowed`
// rules out re-entrant aliasing on that thread. Moving the value between threads needs
// `T: Send`. Tested by `tests/color_cell.rs`.
unsafe impl<T: Send> Sync for ColorCell<T> {}
// SAFETY: as above; the cell owns a `T`, which may move between threads if `T: Send`.
unsafe impl<T: Send> Send for ColorCell<T> {}

impl<T> std::fmt::Debug for ColorCell<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColorCell")
            .field("color", &self.color)
            .finish_non_exhaustive()
    }
}

impl<T> ColorCell<T> {
    /// A cell owned by `color` on the runtime of `handle`.
    pub fn new(handle: &Handle, color: impl Into<Color>, value: T) -> ColorCell<T> {
        ColorCell {
            runtime: handle.core.common().id,
            color: color.into(),
            borrowed: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// The owning color.
    pub fn color(&self) -> Color {
        self.color
    }

    /// Runs `f` on the value if the calling thread is running a callback of the cell's color
    /// on the cell's runtime; otherwise returns [`WrongColor`] without touching it.
    pub fn try_with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Result<R, WrongColor> {
        let running = match crate::core::running() {
            Some((runtime, color)) if runtime == self.runtime => RunningColor::Color(color),
            _ => RunningColor::None,
        };
        if running != RunningColor::Color(self.color) {
            return Err(WrongColor {
                owner: self.color,
                running,
            });
        }
        if self.borrowed.swap(true, Ordering::Relaxed) {
            return Err(WrongColor {
                owner: self.color,
                running: RunningColor::Reentrant,
            });
        }
        struct Release<'a>(&'a AtomicBool);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Relaxed);
            }
        }
        let _release = Release(&self.borrowed);
        // SAFETY: we are inside a callback of `self.color` on `self.runtime` (checked above),
        // so no other thread can be inside `try_with` on this cell (see the `Sync` impl), and
        // `borrowed` was false, so no enclosing `try_with` on this thread holds a reference.
        // The `&mut` does not outlive this call.
        let value = unsafe { &mut *self.value.get() };
        Ok(f(value))
    }

    /// [`ColorCell::try_with`], panicking on access from the wrong color: that is a
    /// concurrency bug in the program, like a `RefCell` double borrow.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        match self.try_with(f) {
            Ok(r) => r,
            Err(err) => panic!("{err}"),
        }
    }

    /// The value, once nobody else can reach the cell.
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }

    /// Mutable access through exclusive ownership of the cell (no color check needed).
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }
}
