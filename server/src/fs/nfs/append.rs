//! APPEND in front of an NFSv3 server, which has no append: GETATTR for the size, then WRITE
//! at that size, with the APPENDs of one object taking turns inside sfsd ([`Turns`]) so that
//! no two of them read the same size.
//!
//! That makes appends through this sfsd atomic with respect to each other, and nothing more:
//! another NFS client of the backend (or a process on the backend's machine) appending
//! between our GETATTR and WRITE is overwritten, as two NFS clients overwrite each other.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use protocol::{Data, FileType, NfsStatus, Proc, ReplyBody, StableHow};

use super::{NfsState, Obj, Outcome, leased, ops, outcome, results};
use crate::fs::{Done, ObjKey};
use crate::users::Creds;

/// APPENDs waiting for their turn on one object; past it they are answered JUKEBOX (the
/// client tries again a little later), so a flood costs bounded memory.
const MAX_WAITING_PER_OBJECT: usize = 256;
/// APPENDs waiting for their turn on all objects together.
const MAX_WAITING: usize = 4096;

/// Someone whose turn it is: runs with the turn, or with JUKEBOX when the queues are full.
type Waiter = Box<dyn FnOnce(Result<Turn, NfsStatus>) + Send>;

#[derive(Default)]
struct Queues {
    /// Objects with an APPEND under way, and the APPENDs waiting behind it. An object is
    /// here exactly while some APPEND holds its turn, so the map holds at most the objects
    /// being appended to right now.
    waiting: HashMap<ObjKey, VecDeque<Waiter>>,
    /// Waiters in all queues.
    total: usize,
}

/// Turns on objects: one holder per object at a time, the others queued in arrival order.
#[derive(Default)]
pub(crate) struct Turns {
    queues: Mutex<Queues>,
}

/// The right to append to one object; the next waiter gets it when this is dropped.
pub(crate) struct Turn {
    turns: Arc<Turns>,
    key: ObjKey,
}

impl Turns {
    /// Runs `waiter` with the turn on `key`: now if no one holds it, else after those before.
    pub(crate) fn take(self: &Arc<Self>, key: ObjKey, waiter: Waiter) {
        let mut q = self.queues.lock();
        let total = q.total;
        match q.waiting.get_mut(&key) {
            None => {
                q.waiting.insert(key, VecDeque::new());
                drop(q);
                waiter(Ok(Turn {
                    turns: self.clone(),
                    key,
                }));
            }
            Some(queue) if queue.len() >= MAX_WAITING_PER_OBJECT || total >= MAX_WAITING => {
                drop(q);
                waiter(Err(NfsStatus::Jukebox));
            }
            Some(queue) => {
                queue.push_back(waiter);
                q.total += 1;
            }
        }
    }

    /// Objects with an APPEND under way (for tests).
    #[cfg(test)]
    fn objects(&self) -> usize {
        self.queues.lock().waiting.len()
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut q = self.turns.queues.lock();
        let next = q.waiting.get_mut(&self.key).and_then(VecDeque::pop_front);
        match next {
            Some(next) => {
                q.total -= 1;
                drop(q);
                // The next waiter only sends a call (completed later, on the link's color), so
                // this never nests deeper than one waiter.
                next(Ok(Turn {
                    turns: self.turns.clone(),
                    key: self.key,
                }));
            }
            None => {
                q.waiting.remove(&self.key);
            }
        }
    }
}

/// An APPEND waiting for, or holding, its object's turn.
pub(super) struct Pending {
    pub creds: Creds,
    pub o: Obj,
    pub lease: u32,
    pub stable: StableHow,
    pub data: Data,
    pub done: Done<Outcome>,
}

impl NfsState {
    /// APPEND of `p.data` to `p.o`, in `p.o`'s turn: GETATTR, then WRITE at the size it gave.
    pub(super) fn append(self: &Arc<Self>, p: Pending) {
        let me = self.clone();
        self.appends.take(
            p.o.key,
            Box::new(move |turn| match turn {
                Err(s) => (p.done)(Outcome::err(s)),
                Ok(turn) => me.append_in_turn(p, turn),
            }),
        );
    }

    fn append_in_turn(self: &Arc<Self>, p: Pending, turn: Turn) {
        let Pending {
            creds,
            o,
            lease,
            stable,
            data,
            done,
        } = p;
        let args = ops::pack(&nfs3_types::nfs3::GETATTR3args {
            object: ops::fh3(o.b.as_slice()),
        });
        // The WRITE at the size found goes as the same user.
        let write_creds = creds.clone();
        self.call(&creds, Proc::GetAttr, args, move |me, res| {
            let size = results(res, ops::fattr).and_then(|a| match a.ftype {
                _ if a.nlink == 0 => Err(NfsStatus::Stale),
                FileType::Regular => Ok(a.size),
                FileType::Directory => Err(NfsStatus::IsDir),
                _ => Err(NfsStatus::Inval),
            });
            // An early answer drops `turn` with this closure: the next APPEND goes on.
            let size = match size {
                Ok(s) if s.checked_add(data.len() as u64).is_some() => s,
                Ok(_) => return done(Outcome::err(NfsStatus::FBig)),
                Err(s) => return done(Outcome::err(s)),
            };
            let sent = data.len() as u32;
            let args = ops::write(o.b.as_slice(), size, stable, &data);
            drop(data);
            me.call(&write_creds, Proc::Write, args, move |_, res| {
                let r = results(res, |r| {
                    let a = ops::wcc(r)?;
                    let count = r.u32("count")?;
                    let committed = StableHow::decode(r)?;
                    let verifier = r.fixed::<8>("write verifier")?;
                    Ok((a, count, committed, verifier))
                });
                // The next APPEND may read the size now: this one's data is in.
                drop(turn);
                done(outcome(r, |(a, count, committed, verifier), out| {
                    let a = leased(a, lease);
                    out.leased.push((o.key, o.fh));
                    out.changed.push((o.key, o.fh, a));
                    Ok(ReplyBody::Append {
                        attr: a,
                        count: count.min(sent),
                        committed,
                        verifier,
                        offset: size,
                    })
                }))
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waiter that records its turn (or refusal) and keeps the turn in `held`.
    fn waiter(log: &Arc<Mutex<Vec<(u32, bool)>>>, held: &Arc<Mutex<Vec<Turn>>>, n: u32) -> Waiter {
        let (log, held) = (log.clone(), held.clone());
        Box::new(move |t| {
            log.lock().push((n, t.is_ok()));
            if let Ok(t) = t {
                held.lock().push(t);
            }
        })
    }

    #[test]
    fn one_turn_per_object_in_arrival_order_and_the_map_empties() {
        let turns = Arc::new(Turns::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        let held = Arc::new(Mutex::new(Vec::new()));
        turns.take((1, 1), waiter(&log, &held, 1));
        turns.take((1, 1), waiter(&log, &held, 2));
        turns.take((1, 2), waiter(&log, &held, 3));
        turns.take((1, 1), waiter(&log, &held, 4));
        // 1 and 3 (another object) run; 2 and 4 wait.
        assert_eq!(*log.lock(), [(1, true), (3, true)]);
        let first = held.lock().remove(0);
        drop(first);
        assert_eq!(*log.lock(), [(1, true), (3, true), (2, true)]);
        // Dropping every turn in order lets 4 run, then empties the map.
        release_all(&held);
        assert_eq!(log.lock().last(), Some(&(4, true)));
        assert_eq!(turns.objects(), 0);
        assert_eq!(turns.queues.lock().total, 0);
    }

    #[test]
    fn a_full_queue_answers_jukebox() {
        let turns = Arc::new(Turns::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        let held = Arc::new(Mutex::new(Vec::new()));
        for n in 0..=MAX_WAITING_PER_OBJECT as u32 + 1 {
            turns.take((1, 1), waiter(&log, &held, n));
        }
        let refused: Vec<_> = log.lock().iter().filter(|(_, ok)| !ok).copied().collect();
        assert_eq!(refused, [(MAX_WAITING_PER_OBJECT as u32 + 1, false)]);
        release_all(&held);
        assert_eq!(turns.objects(), 0);
    }

    /// Drops every held turn, and those the drops hand on, outside the lock (a dropped turn
    /// runs the next waiter, which takes it).
    fn release_all(held: &Arc<Mutex<Vec<Turn>>>) {
        loop {
            let turns = std::mem::take(&mut *held.lock());
            if turns.is_empty() {
                return;
            }
            drop(turns);
        }
    }
}
