//! Work under way, by key: whoever starts it holds a [`Started`]; others find its [`End`] and
//! wait for it instead of doing the same work again.
//!
//! The read-aheads ([`super::listing_ahead`], [`super::xattr_ahead`], [`super::files_ahead`])
//! each start a request for a key (a listing for a user, an attribute name of a file, a
//! file's bytes) that a program may ask for itself a moment later; the program's request
//! waits for the read-ahead's, then finds its answer where the read-ahead put it.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

type Ends<K> = Arc<Mutex<HashMap<K, watch::Receiver<()>>>>;

/// The keys whose work is under way, each with the end its waiters see.
pub(super) struct UnderWay<K> {
    ends: Ends<K>,
}

/// Another handle on the same keys (a task that outlives the borrow holds one).
impl<K> Clone for UnderWay<K> {
    fn clone(&self) -> Self {
        UnderWay {
            ends: self.ends.clone(),
        }
    }
}

impl<K> Default for UnderWay<K> {
    fn default() -> Self {
        UnderWay {
            ends: Arc::default(),
        }
    }
}

/// Work under way for a key, from its start to its end: dropping it (done, failed, or its task
/// gone) takes the key off and wakes every waiter.
pub(super) struct Started<K: Hash + Eq> {
    ends: Ends<K>,
    key: K,
    // Dropped after `drop` took the key off: a waiter woken finds it gone.
    _end: watch::Sender<()>,
}

impl<K: Hash + Eq> Started<K> {
    pub(super) fn key(&self) -> &K {
        &self.key
    }
}

impl<K: Hash + Eq> Drop for Started<K> {
    fn drop(&mut self) {
        self.ends.lock().remove(&self.key);
    }
}

/// The end of work under way, to wait for.
pub(super) struct End(watch::Receiver<()>);

impl End {
    /// Waits until the work ends (it never sends: its end is its sender going).
    pub(super) async fn wait(mut self) {
        let _ = self.0.changed().await;
    }
}

impl<K: Hash + Eq + Clone> UnderWay<K> {
    /// Starts work for `key`, unless some is under way for it.
    pub(super) fn start(&self, key: K) -> Option<Started<K>> {
        self.start_or_end(key).ok()
    }

    /// Starts work for `key`, or, if some is under way for it, its end.
    pub(super) fn start_or_end(&self, key: K) -> Result<Started<K>, End> {
        let mut ends = self.ends.lock();
        if let Some(end) = ends.get(&key) {
            return Err(End(end.clone()));
        }
        let (tx, rx) = watch::channel(());
        ends.insert(key.clone(), rx);
        Ok(Started {
            ends: self.ends.clone(),
            key,
            _end: tx,
        })
    }

    /// The end of the work under way for `key`, if any.
    pub(super) fn end(&self, key: &K) -> Option<End> {
        self.ends.lock().get(key).cloned().map(End)
    }

    /// Whether work is under way for `key`.
    pub(super) fn busy(&self, key: &K) -> bool {
        self.ends.lock().contains_key(key)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn work_starts_once_and_its_end_wakes_every_waiter_with_the_key_gone() {
        let under_way = UnderWay::<u8>::default();
        let started = under_way.start(1).expect("first start");
        assert!(under_way.start(1).is_none(), "already under way");
        assert!(under_way.busy(&1) && !under_way.busy(&2));
        assert!(
            under_way.end(&2).is_none(),
            "nothing under way for another key"
        );
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let end = under_way.end(&1).expect("under way");
                tokio::spawn(end.wait())
            })
            .collect();
        let Err(third) = under_way.start_or_end(1) else {
            panic!("started twice");
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            waiters.iter().all(|w| !w.is_finished()),
            "woken before the end"
        );
        drop(started);
        for w in waiters {
            tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .expect("woken at the end")
                .unwrap();
        }
        third.wait().await;
        assert!(!under_way.busy(&1), "the key is off once it ends");
        assert!(under_way.start(1).is_some(), "and may start again");
    }

    #[test]
    fn a_clone_sees_the_same_work() {
        let under_way = UnderWay::<u8>::default();
        let other = under_way.clone();
        let started = other.start(1).expect("first start");
        assert!(under_way.busy(&1) && under_way.start(1).is_none());
        drop(started);
        assert!(!under_way.busy(&1));
    }
}
