//! Why a runtime stopped with an error.

use crate::color::Color;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A callback panicked. The runtime does not guess whether the program's state is still
    /// consistent: it logs the panic, stops every worker and reports it here.
    #[error("a callback of {color} panicked: {message}")]
    CallbackPanicked { color: Color, message: String },
    /// A blocking call in the helper pool panicked.
    #[error("a blocking call for {color} panicked: {message}")]
    HelperPanicked { color: Color, message: String },
    #[error("the poller failed: {0}")]
    Poll(#[source] std::io::Error),
    #[error("cannot start the runtime: {0}")]
    Start(#[source] std::io::Error),
    #[error("cannot pin worker {worker} to CPU {cpu}: no such CPU, or not allowed")]
    Pin { worker: usize, cpu: usize },
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
