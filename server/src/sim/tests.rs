//! Lease, INVALIDATE and READ races, each interleaving chosen and run deterministically.

use std::time::Duration;

use protocol::{FileHandle, NfsStatus, Reply, ReplyBody, RequestOp, ServerMessage, StableHow};

use super::{ConnId, Delivery, Sim, SimConfig};

const LEASE: Duration = Duration::from_secs(10);
const LEASE_MS: u32 = 10_000;

fn sim() -> Sim {
    Sim::new(SimConfig {
        lease: LEASE,
        ..SimConfig::default()
    })
}

fn write(fh: FileHandle, data: &[u8]) -> RequestOp {
    RequestOp::Write {
        fh,
        offset: 0,
        stable: StableHow::FileSync,
        data: data.to_vec().into(),
    }
}

fn read(fh: FileHandle) -> RequestOp {
    RequestOp::Read {
        fh,
        offset: 0,
        count: 4096,
    }
}

/// The reply to request `id` among `msgs`.
fn reply(msgs: &[ServerMessage], id: u64) -> Result<ReplyBody, NfsStatus> {
    msgs.iter()
        .find_map(|m| match m {
            ServerMessage::Reply(Reply { id: i, result }) if *i == id => Some(result.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no reply to {id} in {msgs:?}"))
}

/// The handles `msgs` invalidate, in order.
fn invalidated(msgs: &[ServerMessage]) -> Vec<FileHandle> {
    msgs.iter()
        .filter_map(|m| match m {
            ServerMessage::Invalidate(i) => Some(i.fh),
            _ => None,
        })
        .collect()
}

/// The lease a GETATTR or READ reply carries.
fn lease_of(result: &Result<ReplyBody, NfsStatus>) -> u32 {
    match result {
        Ok(ReplyBody::GetAttr { attr }) => attr.lease_ms,
        Ok(ReplyBody::Read { attr: Some(a), .. }) => a.lease_ms,
        other => panic!("{other:?}"),
    }
}

/// `conn` asks for `fh`'s attributes and everything runs to the end: the lease granted.
fn getattr(sim: &mut Sim, conn: ConnId, fh: FileHandle) -> u32 {
    let id = sim.send(conn, RequestOp::GetAttr { fh });
    sim.drive();
    lease_of(&reply(&sim.received(conn), id))
}

#[test]
fn a_write_tells_the_lease_holder_before_the_writers_reply_goes_out() {
    let mut sim = sim();
    let f = sim.create_file(b"v1");
    let (a, b) = (sim.connect(), sim.connect());
    assert_eq!(getattr(&mut sim, a, f), LEASE_MS);
    let id = sim.send(b, write(f, b"v2-longer"));
    sim.deliver(Delivery::ToServer(b));
    sim.deliver(Delivery::Finished(b));
    // Color 0 queued A's INVALIDATE before B's reply, and nothing for B.
    assert_eq!(
        sim.pending(),
        vec![Delivery::Invalidate(a), Delivery::Reply(b)]
    );
    // Hold B's reply: A is told first, with the new attributes and lease 0.
    sim.deliver(Delivery::Invalidate(a));
    sim.deliver(Delivery::ToClient(a));
    let told = sim.received(a);
    match told.as_slice() {
        [ServerMessage::Invalidate(i)] => {
            assert_eq!(i.fh, f);
            assert_eq!(i.attr.map(|a| (a.size, a.lease_ms)), Some((9, 0)));
        }
        other => panic!("{other:?}"),
    }
    assert!(sim.received(b).is_empty());
    sim.drive();
    let msgs = sim.received(b);
    assert!(matches!(
        reply(&msgs, id),
        Ok(ReplyBody::Write { count: 9, .. })
    ));
    assert!(invalidated(&msgs).is_empty(), "the writer is not told");
    // A no longer holds a lease: a second change tells nobody until A asks again.
    sim.send(b, write(f, b"v3"));
    sim.drive();
    assert!(sim.received(a).is_empty());
}

#[test]
fn a_read_lease_recorded_after_a_conflicting_change_is_revoked() {
    let mut sim = sim();
    let f = sim.create_file(b"old");
    let (a, b) = (sim.connect(), sim.connect());
    let id = sim.send(a, read(f));
    // A's READ is answered in its color; its lease is on its way to color 0 when B's WRITE
    // gets there first: the change finds no holder to tell.
    sim.deliver(Delivery::ToServer(a));
    sim.send(b, write(f, b"new"));
    sim.deliver(Delivery::ToServer(b));
    sim.deliver(Delivery::Finished(b));
    assert!(!sim.pending().contains(&Delivery::Invalidate(a)));
    // Then A's lease is recorded: it was read before the change, so A is told.
    sim.deliver(Delivery::ReadLease(a));
    assert!(sim.pending().contains(&Delivery::Invalidate(a)));
    sim.drive();
    let msgs = sim.received(a);
    assert_eq!(lease_of(&reply(&msgs, id)), LEASE_MS);
    assert_eq!(invalidated(&msgs), vec![f]);
    // The reply came first, then the INVALIDATE that ends its lease.
    assert!(matches!(msgs.last(), Some(ServerMessage::Invalidate(_))));
    // A's connection no longer reuses that lease: its next READ asks color 0 again.
    sim.send(a, read(f));
    sim.deliver(Delivery::ToServer(a));
    assert!(sim.pending().contains(&Delivery::ReadLease(a)));
}

#[test]
fn a_read_lease_recorded_before_the_change_is_told_by_the_change() {
    let mut sim = sim();
    let f = sim.create_file(b"old");
    let (a, b) = (sim.connect(), sim.connect());
    sim.send(a, read(f));
    sim.deliver(Delivery::ToServer(a));
    sim.deliver(Delivery::ReadLease(a));
    assert!(sim.pending().iter().all(|d| *d == Delivery::ToClient(a)));
    sim.send(b, write(f, b"new"));
    sim.deliver(Delivery::ToServer(b));
    sim.deliver(Delivery::Finished(b));
    assert_eq!(
        sim.pending(),
        vec![
            Delivery::ToClient(a),
            Delivery::Invalidate(a),
            Delivery::Reply(b)
        ]
    );
    sim.drive();
    assert_eq!(invalidated(&sim.received(a)), vec![f], "told once");
}

#[test]
fn a_held_read_lease_is_reused_until_an_invalidate_ends_it() {
    let mut sim = sim();
    let f = sim.create_file(b"data");
    let (a, b) = (sim.connect(), sim.connect());
    sim.send(a, read(f));
    sim.drive();
    // Half the lease later A reads again: it reuses what is left, color 0 is not asked.
    sim.advance(LEASE / 2 - Duration::from_millis(1));
    let id = sim.send(a, read(f));
    sim.deliver(Delivery::ToServer(a));
    assert_eq!(sim.pending(), vec![Delivery::ToClient(a)]);
    sim.drive();
    let left = lease_of(&reply(&sim.received(a), id));
    assert!(
        left <= LEASE_MS / 2 + 1 && left > LEASE_MS / 2 - 10,
        "{left}"
    );
    // B's change ends it (INVALIDATE in A's color): A's next READ asks again.
    sim.send(b, write(f, b"changed"));
    sim.drive();
    assert_eq!(invalidated(&sim.received(a)), vec![f]);
    sim.send(a, read(f));
    sim.deliver(Delivery::ToServer(a));
    assert!(sim.pending().contains(&Delivery::ReadLease(a)));
}

#[test]
fn an_expired_lease_is_not_told() {
    let mut sim = sim();
    let f = sim.create_file(b"v1");
    let (a, b, c) = (sim.connect(), sim.connect(), sim.connect());
    assert_eq!(getattr(&mut sim, a, f), LEASE_MS);
    sim.advance(Duration::from_millis(1));
    assert_eq!(getattr(&mut sim, c, f), LEASE_MS);
    // A's lease has run out, C's has a millisecond left.
    sim.advance(LEASE - Duration::from_millis(1));
    sim.send(b, write(f, b"v2"));
    sim.drive();
    assert!(invalidated(&sim.received(a)).is_empty());
    assert_eq!(invalidated(&sim.received(c)), vec![f]);
}

/// A connection at its share of leases is granted a new one all the same: its oldest lease
/// ends to make room, it is told (INVALIDATE, before the reply), and changes of that object
/// are no longer told to it; changes of what it still holds are.
#[test]
fn a_connection_at_its_share_ends_its_oldest_lease_and_is_told() {
    let mut sim = Sim::new(SimConfig {
        lease: LEASE,
        max_leases_per_conn: 1,
        ..SimConfig::default()
    });
    let (f, g) = (sim.create_file(b"f"), sim.create_file(b"g"));
    let (a, b) = (sim.connect(), sim.connect());
    assert_eq!(getattr(&mut sim, a, f), LEASE_MS);
    let id = sim.send(a, RequestOp::GetAttr { fh: g });
    sim.drive();
    let msgs = sim.received(a);
    assert_eq!(
        lease_of(&reply(&msgs, id)),
        LEASE_MS,
        "granted, not lease 0"
    );
    assert_eq!(invalidated(&msgs), vec![f], "the oldest lease ended, told");
    assert!(
        matches!(msgs.last(), Some(ServerMessage::Reply(_))),
        "told before the reply: {msgs:?}"
    );
    assert!(!sim.lease_capped(a));
    // Other connections are not touched by A's share.
    assert_eq!(getattr(&mut sim, b, g), LEASE_MS);
    sim.send(b, write(f, b"f2"));
    sim.drive();
    assert!(
        invalidated(&sim.received(a)).is_empty(),
        "A holds f no more"
    );
    sim.send(b, write(g, b"g2"));
    sim.drive();
    assert_eq!(invalidated(&sim.received(a)), vec![g]);
}

#[test]
fn the_reaper_drops_a_lease_at_its_expiry_and_not_before() {
    let mut sim = Sim::new(SimConfig {
        lease: LEASE,
        max_leases_per_conn: 1,
        ..SimConfig::default()
    });
    let f = sim.create_file(b"f");
    let (a, b) = (sim.connect(), sim.connect());
    assert_eq!(getattr(&mut sim, a, f), LEASE_MS);
    sim.advance(LEASE - Duration::from_millis(1));
    assert_eq!(sim.reap(), 0);
    sim.advance(Duration::from_millis(1));
    assert_eq!(sim.reap(), 1);
    sim.send(b, write(f, b"f2"));
    sim.drive();
    assert!(
        invalidated(&sim.received(a)).is_empty(),
        "a reaped lease is not told"
    );
}

#[test]
fn a_closed_connection_is_forgotten_and_never_told() {
    let mut sim = sim();
    let f = sim.create_file(b"v1");
    let (a, b) = (sim.connect(), sim.connect());
    assert_eq!(getattr(&mut sim, a, f), LEASE_MS);
    // A's READ lease is on its way to color 0 when A closes, and reaches it first.
    sim.send(a, read(f));
    sim.deliver(Delivery::ToServer(a));
    sim.close(a);
    sim.deliver(Delivery::ReadLease(a));
    sim.deliver(Delivery::Forget(a));
    sim.send(b, write(f, b"v2"));
    sim.drive();
    let msgs = sim.received(a);
    assert!(invalidated(&msgs).is_empty(), "{msgs:?}");
    // Color 0 holds nothing for A any more: no INVALIDATE is even queued for it.
    sim.send(b, write(f, b"v3"));
    sim.deliver(Delivery::ToServer(b));
    sim.deliver(Delivery::Finished(b));
    assert_eq!(sim.pending(), vec![Delivery::Reply(b)]);
}

#[test]
fn an_invalidate_reaching_a_connection_closed_meanwhile_is_dropped() {
    let mut sim = sim();
    let f = sim.create_file(b"v1");
    let (a, b) = (sim.connect(), sim.connect());
    assert_eq!(getattr(&mut sim, a, f), LEASE_MS);
    // A closes in its color; B's change reaches color 0 before the news of it does.
    sim.close(a);
    let id = sim.send(b, write(f, b"v2"));
    sim.deliver(Delivery::ToServer(b));
    sim.deliver(Delivery::Finished(b));
    assert!(sim.pending().contains(&Delivery::Invalidate(a)));
    sim.drive();
    assert!(
        sim.received(a).is_empty(),
        "nothing is written to a closed connection"
    );
    let written = reply(&sim.received(b), id);
    assert!(
        matches!(written, Ok(ReplyBody::Write { .. })),
        "{written:?}"
    );
}

/// Two READs answered before color 0 recorded either lease both announce one; over the
/// connection's share of one, recording the second ends the first, which it is told of, and
/// the connection goes on holding the second.
#[test]
fn a_read_lease_over_the_share_ends_the_older_one() {
    let mut sim = Sim::new(SimConfig {
        lease: LEASE,
        max_leases_per_conn: 1,
        ..SimConfig::default()
    });
    let (f, g) = (sim.create_file(b"f"), sim.create_file(b"g"));
    let (a, b) = (sim.connect(), sim.connect());
    let (rf, rg) = (sim.send(a, read(f)), sim.send(a, read(g)));
    sim.deliver(Delivery::ToServer(a));
    sim.deliver(Delivery::ToServer(a));
    assert_eq!(
        sim.pending(),
        vec![
            Delivery::ToClient(a),
            Delivery::ReadLease(a),
            Delivery::ToClient(a),
            Delivery::ReadLease(a)
        ]
    );
    sim.drive();
    let msgs = sim.received(a);
    assert_eq!(lease_of(&reply(&msgs, rf)), LEASE_MS);
    assert_eq!(lease_of(&reply(&msgs, rg)), LEASE_MS);
    assert_eq!(
        invalidated(&msgs),
        vec![f],
        "the older lease ends to make room"
    );
    // A holds g's lease: its next READ of g renews it, and B's change of g tells A.
    let again = sim.send(a, read(g));
    sim.drive();
    let msgs = sim.received(a);
    assert_eq!(lease_of(&reply(&msgs, again)), LEASE_MS);
    assert!(invalidated(&msgs).is_empty());
    sim.send(b, write(g, b"g2"));
    sim.drive();
    assert_eq!(invalidated(&sim.received(a)), vec![g]);
}
