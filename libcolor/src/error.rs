//! Why a runtime stopped with an error.

use crate::color::Color;

/// What stopped a runtime, or kept it from starting.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A callback panicked. The runtime does not guess whether the program's state is still
    /// consistent: it logs the panic, stops every worker and reports it here.
    #[error("a callback of {color} panicked: {message}")]
    CallbackPanicked {
        /// The color of the callback.
        color: Color,
        /// The panic's message.
        message: String,
    },
    /// A blocking call in the helper pool panicked.
    #[error("a blocking call for {color} panicked: {message}")]
    HelperPanicked {
        /// The color the call was made for.
        color: Color,
        /// The panic's message.
        message: String,
    },
    /// Waiting for readiness (epoll) failed: no event can be delivered any more.
    #[error("the poller failed: {0}")]
    Poll(#[source] std::io::Error),
    /// The poller, a worker thread or a waker could not be made.
    #[error("cannot start the runtime: {0}")]
    Start(#[source] std::io::Error),
    /// `Builder::pin` or `Builder::pin_to` named a CPU this process may not run on.
    #[error("cannot pin worker {worker} to CPU {cpu}: no such CPU, or not allowed")]
    Pin {
        /// The worker's index.
        worker: usize,
        /// The CPU it was to run on.
        cpu: usize,
    },
}

pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}
