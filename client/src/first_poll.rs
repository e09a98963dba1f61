//! Starting a task on the thread that has its work, and handing it to the runtime only once
//! it waits for something.
//!
//! A FUSE request is read by one of fuser's threads. Spawned from there onto the runtime, it
//! wakes a runtime thread (a wake-up crosses CPUs and costs tens of microseconds on a VM)
//! only for that thread to seal the request and send it, and then the runtime thread is
//! woken again by the reply. Polled first where it was read instead, a request answered
//! from the cache is answered there, and one that goes to the server is sent from there
//! ([`crate::session`] writes a small request to the socket from the sending thread). Its
//! future then waits, parked here and not on the runtime: the wake that ends the wait (the
//! reply, handed over by the runtime's reader task) spawns it onto the runtime from the
//! runtime's own thread, where spawning wakes nobody.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Wake, Waker};

use parking_lot::Mutex;
use tokio::runtime::Handle;

type Work = Pin<Box<dyn Future<Output = ()> + Send>>;

enum Slot {
    /// Its first poll is under way.
    Polling,
    /// Woken during its first poll: the poller spawns it.
    WokenWhilePolling,
    /// Waiting, parked here: the next wake spawns it.
    Parked(Work),
    /// Spawned onto the runtime (or done), which wakes it from now on.
    Gone,
}

struct FirstPoll {
    rt: Handle,
    slot: Mutex<Slot>,
}

impl Wake for FirstPoll {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut slot = self.slot.lock();
        match std::mem::replace(&mut *slot, Slot::Gone) {
            Slot::Polling | Slot::WokenWhilePolling => *slot = Slot::WokenWhilePolling,
            Slot::Parked(work) => {
                drop(slot);
                self.rt.spawn(work);
            }
            Slot::Gone => {}
        }
    }
}

/// Polls `work` once on this thread, inside `rt`'s context; if it must wait, it goes on as a
/// task of `rt` once woken ([module docs](self)).
pub(crate) fn spawn_here(rt: &Handle, work: impl Future<Output = ()> + Send + 'static) {
    let mut work: Work = Box::pin(work);
    let first = Arc::new(FirstPoll {
        rt: rt.clone(),
        slot: Mutex::new(Slot::Polling),
    });
    let waker = Waker::from(first.clone());
    let _inside = rt.enter();
    if work
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_ready()
    {
        return;
    }
    let mut slot = first.slot.lock();
    match std::mem::replace(&mut *slot, Slot::Gone) {
        Slot::Polling => *slot = Slot::Parked(work),
        _ => {
            drop(slot);
            rt.spawn(work);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Work done at once is done on the calling thread; work that waits goes on on the
    /// runtime when woken, however the wake and the first poll's end cross.
    #[test]
    fn work_runs_here_then_on_the_runtime_once_woken() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let here = std::thread::current().id();
        let (tx, rx) = std::sync::mpsc::channel();
        spawn_here(rt.handle(), async move {
            tx.send(std::thread::current().id()).unwrap();
        });
        assert_eq!(rx.recv().unwrap(), here, "ready at once: ran here");

        // Woken during its first poll (as `yield_now` does): goes on on the runtime.
        struct YieldOnce(bool);
        impl Future for YieldOnce {
            type Output = ();
            fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> std::task::Poll<()> {
                if self.0 {
                    return std::task::Poll::Ready(());
                }
                self.0 = true;
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        spawn_here(rt.handle(), async move {
            YieldOnce(false).await;
            tx.send(std::thread::current().id()).unwrap();
        });
        let resumed = rx.recv_timeout(Duration::from_secs(5));
        assert!(
            resumed.is_ok_and(|t| t != here),
            "woken while polled: resumed on the runtime"
        );

        let done = Arc::new(AtomicUsize::new(0));
        for round in 0..200u64 {
            let (wake, waited) = tokio::sync::oneshot::channel::<()>();
            let d = done.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            // Woken from the runtime, sooner or later than the first poll's end.
            let delay = Duration::from_micros(round % 50);
            rt.spawn(async move {
                std::thread::sleep(delay);
                let _ = wake.send(());
            });
            spawn_here(rt.handle(), async move {
                waited.await.unwrap();
                d.fetch_add(1, Ordering::SeqCst);
                tx.send(std::thread::current().id()).unwrap();
            });
            // Sent already at the first poll: done here; else resumed on the runtime.
            rx.recv_timeout(Duration::from_secs(5))
                .unwrap_or_else(|_| panic!("round {round}: a wake was lost"));
        }
        assert_eq!(done.load(Ordering::SeqCst), 200);
    }
}
