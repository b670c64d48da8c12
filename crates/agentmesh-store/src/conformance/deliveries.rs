//! Rules of the session delivery queue: inserting and reading back, statuses that
//! never move backwards and final statuses nothing leaves, retries counting
//! attempts, the active view (priority, age, expiry), confirmed deliveries, expiry,
//! deletion, validation and mesh isolation.

use agentmesh_core::{DeliveryStatus, NewSessionDelivery, SessionDelivery};

use super::support::*;
use crate::{DeliveryUpdate, Store};

/// A delivery is queued unless given a status, stored as given, listed as returned, and replaced by its id.
pub fn session_delivery_is_queued_by_default_and_read_back(store: &dyn Store) {
    let new = NewSessionDelivery {
        task_id: Some("t1".into()),
        deliver_after: Some(at(0).iso()),
        expires_at: Some(at(3_600).iso()),
        source_coordinator_session_id: Some("coord-1".into()),
        source_coordinator_daemon_id: Some("daemon_mach_abc".into()),
        ..delivery("d1", "s1", 7)
    };
    let stored = insert_delivery(store, MESH, new, at(1));
    let expected = SessionDelivery {
        id: "d1".into(),
        mesh_id: MESH.into(),
        node_id: Some("node-1".into()),
        session_id: Some("s1".into()),
        provider_type: Some(PROVIDER.into()),
        task_id: Some("t1".into()),
        kind: "task".into(),
        priority: 7,
        message: "deliver d1".into(),
        status: DeliveryStatus::Queued,
        deliver_after: Some(at(0).iso()),
        expires_at: Some(at(3_600).iso()),
        attempt_count: 0,
        source_coordinator_session_id: Some("coord-1".into()),
        source_coordinator_daemon_id: Some("daemon_mach_abc".into()),
        last_error: None,
        created_at: at(1).iso(),
        updated_at: at(1).iso(),
    };
    assert_eq!(stored, expected, "expected the delivery as given, queued, stamped with now");
    assert_eq!(
        active_deliveries(store, MESH, Some("s1"), at(2)),
        std::slice::from_ref(&expected),
        "expected the session's active deliveries to hold exactly the stored delivery"
    );

    let delivering =
        NewSessionDelivery { status: Some(DeliveryStatus::Delivering), ..delivery("d2", "s1", 0) };
    let d2 = insert_delivery(store, MESH, delivering, at(2));
    assert_eq!(d2.status, DeliveryStatus::Delivering, "expected the status given at insert");

    let again = NewSessionDelivery { message: "replacement".into(), ..delivery("d1", "s2", 1) };
    let replaced = insert_delivery(store, MESH, again, at(3));
    assert_eq!(replaced.message, "replacement", "expected the replacing delivery's message");
    assert_eq!(active_delivery_ids(store, MESH, None, at(4)), ["d1", "d2"], "expected one row per id");
    assert_eq!(
        active_delivery(store, MESH, "d1", at(4)),
        replaced,
        "expected d1 to be the replacing delivery"
    );
    assert_eq!(
        active_delivery_ids(store, MESH, Some("s1"), at(4)),
        ["d2"],
        "expected the replaced delivery to have left session s1"
    );
}

/// Statuses only move up the ranks (delivered, acked, completed); an acked delivery never goes back to queued.
pub fn session_delivery_status_never_moves_backwards(store: &dyn Store) {
    insert_delivery(
        store,
        MESH,
        NewSessionDelivery { task_id: Some("t1".into()), ..delivery("d1", "s1", 0) },
        at(0),
    );
    assert_eq!(delivery_status(store, MESH, "d1"), DeliveryStatus::Queued, "expected d1 queued");

    assert!(
        set_delivery_status(store, MESH, "d1", DeliveryStatus::Delivered, at(1)),
        "expected queued -> delivered"
    );
    assert!(
        active_delivery_ids(store, MESH, None, at(1)).is_empty(),
        "expected a delivered delivery not active"
    );
    assert_eq!(delivery_status(store, MESH, "d1"), DeliveryStatus::Delivered, "expected d1 delivered");

    assert!(
        set_delivery_status(store, MESH, "d1", DeliveryStatus::Acked, at(2)),
        "expected delivered -> acked"
    );
    let acked = active_delivery(store, MESH, "d1", at(2));
    assert_eq!(acked.status, DeliveryStatus::Acked, "expected d1 acked");
    assert_eq!(acked.updated_at, at(2).iso(), "expected the change stamped with its now");

    for backwards in [DeliveryStatus::Queued, DeliveryStatus::Delivering, DeliveryStatus::Delivered] {
        assert!(
            !set_delivery_status(store, MESH, "d1", backwards, at(3)),
            "expected acked -> {backwards} refused (returns false)"
        );
        assert_eq!(
            active_delivery(store, MESH, "d1", at(3)),
            acked,
            "expected the refused move to {backwards} to leave d1 exactly as it was"
        );
    }

    assert!(
        set_delivery_status(store, MESH, "d1", DeliveryStatus::Completed, at(4)),
        "expected acked -> completed"
    );
    assert!(
        active_delivery_ids(store, MESH, None, at(4)).is_empty(),
        "expected a completed delivery not active"
    );
    assert_eq!(delivery_status(store, MESH, "d1"), DeliveryStatus::Completed, "expected d1 completed");
    for backwards in [DeliveryStatus::Queued, DeliveryStatus::Acked] {
        assert!(
            !set_delivery_status(store, MESH, "d1", backwards, at(5)),
            "expected completed -> {backwards} refused"
        );
    }
    assert!(active_delivery_ids(store, MESH, None, at(5)).is_empty(), "expected d1 still completed");
}

/// Failed, expired and cancelled deliveries are final: nothing moves out, not even to another final status.
pub fn final_session_delivery_statuses_are_never_left(store: &dyn Store) {
    for (i, end) in
        [DeliveryStatus::Failed, DeliveryStatus::Expired, DeliveryStatus::Cancelled].into_iter().enumerate()
    {
        let id = format!("d-{end}");
        let task = format!("t-{end}");
        let new = NewSessionDelivery { task_id: Some(task.clone()), ..delivery(&id, "s1", 0) };
        insert_delivery(store, MESH, new, at(i as i64));
        assert!(
            set_delivery_status(store, MESH, &id, DeliveryStatus::Acked, at(10)),
            "expected {id} acked first"
        );
        assert!(
            set_delivery_status(store, MESH, &id, end, at(11)),
            "expected acked -> {end} (into a final status)"
        );
        for target in DeliveryStatus::ALL {
            assert!(
                !set_delivery_status(store, MESH, &id, target, at(12)),
                "expected {end} -> {target} refused: {end} is final"
            );
        }
        assert!(
            !active_delivery_ids(store, MESH, None, at(12)).contains(&id),
            "expected the {end} delivery never active again"
        );
        assert_eq!(delivery_status(store, MESH, &id), end, "expected the {end} delivery to stay {end}");
    }
}

/// A retry counts an attempt and records its error; a plain change clears the error; a retry may move backwards.
pub fn session_delivery_retries_count_attempts_and_record_the_error(store: &dyn Store) {
    insert_delivery(
        store,
        MESH,
        NewSessionDelivery { status: Some(DeliveryStatus::Delivering), ..delivery("d1", "s1", 0) },
        at(0),
    );
    let retry = |error: &str| DeliveryUpdate { last_error: Some(error.into()), increment_attempt: true };
    let set = |status, update: &DeliveryUpdate, now| {
        ok(
            store.set_session_delivery_status(MESH, "d1", status, update, now),
            "set_session_delivery_status(d1)",
        )
    };

    assert!(set(DeliveryStatus::Queued, &retry("session busy"), at(1)), "expected the first retry to apply");
    let after_one = active_delivery(store, MESH, "d1", at(1));
    assert_eq!(after_one.status, DeliveryStatus::Queued, "expected d1 queued for its retry");
    assert_eq!(after_one.attempt_count, 1, "expected one attempt counted");
    assert_eq!(after_one.last_error.as_deref(), Some("session busy"), "expected the retry's error recorded");
    assert_eq!(after_one.updated_at, at(1).iso(), "expected the retry stamped with its now");

    assert!(set(DeliveryStatus::Queued, &retry("timeout"), at(2)), "expected the second retry to apply");
    let after_two = active_delivery(store, MESH, "d1", at(2));
    assert_eq!(after_two.attempt_count, 2, "expected two attempts counted");
    assert_eq!(after_two.last_error.as_deref(), Some("timeout"), "expected the latest error recorded");

    assert!(
        set(DeliveryStatus::Queued, &DeliveryUpdate::default(), at(3)),
        "expected a plain queued -> queued"
    );
    let plain = active_delivery(store, MESH, "d1", at(3));
    assert_eq!(plain.attempt_count, 2, "expected a change without increment_attempt to count no attempt");
    assert_eq!(plain.last_error, None, "expected a change without an error to clear the recorded error");

    // A retry is a fresh attempt: it may move a delivered delivery back to queued.
    assert!(
        set(DeliveryStatus::Delivered, &DeliveryUpdate::default(), at(4)),
        "expected queued -> delivered"
    );
    assert!(
        set(DeliveryStatus::Queued, &retry("lost on the way"), at(5)),
        "expected a retry to skip the rank rule"
    );
    let retried = active_delivery(store, MESH, "d1", at(5));
    assert_eq!(retried.status, DeliveryStatus::Queued, "expected the retried delivery queued again");
    assert_eq!(retried.attempt_count, 3, "expected three attempts counted");
}

/// A status change of an unknown id, or of another mesh's delivery, is `NotFound`.
pub fn session_delivery_status_of_an_unknown_id_is_not_found(store: &dyn Store) {
    let d1 = insert_delivery(store, MESH, delivery("d1", "s1", 0), at(0));
    for status in [DeliveryStatus::Acked, DeliveryStatus::Cancelled] {
        assert_not_found(
            store.set_session_delivery_status(MESH, "nope", status, &DeliveryUpdate::default(), at(1)),
            "delivery",
            MESH,
            "nope",
            "a status change of an unknown delivery",
        );
    }
    assert_not_found(
        store.set_session_delivery_status(
            OTHER_MESH,
            "d1",
            DeliveryStatus::Cancelled,
            &DeliveryUpdate::default(),
            at(1),
        ),
        "delivery",
        OTHER_MESH,
        "d1",
        "a status change of mesh A's delivery through mesh B",
    );
    assert_eq!(active_deliveries(store, MESH, None, at(1)), [d1], "expected d1 untouched");
}

/// Active deliveries are the delivering, queued and acked ones unexpired at `now`: highest priority first, then oldest.
pub fn active_session_deliveries_are_waiting_unexpired_and_ordered(store: &dyn Store) {
    let with_status = |id: &str, session: &str, priority: i64, status| NewSessionDelivery {
        status: Some(status),
        ..delivery(id, session, priority)
    };
    insert_delivery(store, MESH, delivery("low-old", "s1", 0), at(1));
    insert_delivery(store, MESH, with_status("high-old", "s1", 10, DeliveryStatus::Acked), at(2));
    insert_delivery(store, MESH, with_status("high-new", "s1", 10, DeliveryStatus::Delivering), at(3));
    insert_delivery(store, MESH, delivery("mid", "s1", 5), at(4));
    insert_delivery(store, MESH, delivery("other-session", "s2", 7), at(5));
    insert_delivery(store, MESH, delivery("negative", "s1", -3), at(0));
    let expiring = |id: &str, expires: i64| NewSessionDelivery {
        expires_at: Some(at(expires).iso()),
        ..delivery(id, "s1", 20)
    };
    insert_delivery(store, MESH, expiring("expired", 50), at(6));
    insert_delivery(store, MESH, expiring("unexpired", 1_000), at(7));
    for (id, status) in [
        ("delivered", DeliveryStatus::Delivered),
        ("completed", DeliveryStatus::Completed),
        ("failed", DeliveryStatus::Failed),
        ("expired-status", DeliveryStatus::Expired),
        ("cancelled", DeliveryStatus::Cancelled),
    ] {
        insert_delivery(store, MESH, with_status(id, "s1", 30, status), at(8));
    }
    insert_delivery(store, OTHER_MESH, delivery("elsewhere", "s1", 99), at(1));

    assert_eq!(
        active_delivery_ids(store, MESH, None, at(60)),
        ["unexpired", "high-old", "high-new", "other-session", "mid", "low-old", "negative"],
        "expected the mesh's waiting, unexpired deliveries, highest priority first, then oldest"
    );
    assert_eq!(
        active_delivery_ids(store, MESH, Some("s1"), at(60)),
        ["unexpired", "high-old", "high-new", "mid", "low-old", "negative"],
        "expected only session s1's deliveries, in the same order"
    );
    assert_eq!(
        active_delivery_ids(store, MESH, None, at(40))[..2],
        ["expired".to_owned(), "unexpired".to_owned()],
        "expected the delivery expiring at 50s still listed at 40s, oldest first among priority 20"
    );
    assert_eq!(
        active_delivery_ids(store, MESH, Some("s3"), at(60)),
        Vec::<String>::new(),
        "expected none for s3"
    );
    assert_eq!(
        active_delivery_ids(store, OTHER_MESH, None, at(60)),
        ["elsewhere"],
        "expected B's own delivery"
    );
}

/// Expiry moves only waiting deliveries whose expiresAt is at or before `now` to expired, in the mesh, and counts them.
pub fn expire_stale_session_deliveries_expires_only_waiting_ones(store: &dyn Store) {
    let expiring = |id: &str, status, expires: i64| NewSessionDelivery {
        task_id: Some(format!("t-{id}")),
        status: Some(status),
        expires_at: Some(at(expires).iso()),
        ..delivery(id, "s1", 0)
    };
    insert_delivery(store, MESH, expiring("queued-past", DeliveryStatus::Queued, 10), at(0));
    insert_delivery(store, MESH, expiring("delivering-at-now", DeliveryStatus::Delivering, 20), at(1));
    insert_delivery(store, MESH, expiring("acked-past", DeliveryStatus::Acked, 5), at(2));
    insert_delivery(store, MESH, expiring("queued-future", DeliveryStatus::Queued, 100), at(3));
    insert_delivery(store, MESH, delivery("queued-forever", "s1", 0), at(4));
    insert_delivery(store, MESH, expiring("delivered-past", DeliveryStatus::Delivered, 5), at(5));
    insert_delivery(store, MESH, expiring("completed-past", DeliveryStatus::Completed, 5), at(6));
    insert_delivery(store, OTHER_MESH, expiring("elsewhere-past", DeliveryStatus::Queued, 5), at(0));

    let expired = ok(store.expire_stale_session_deliveries(MESH, at(20)), "expire_stale_session_deliveries");
    assert_eq!(expired, 3, "expected the three waiting deliveries expiring at or before now expired");
    // Read at 0s, where no expiry has passed: the expired ones are gone because of their status.
    assert_eq!(
        active_delivery_ids(store, MESH, None, at(0)),
        ["queued-future", "queued-forever"],
        "expected only the unexpired waiting deliveries still waiting"
    );
    for id in ["queued-past", "delivering-at-now", "acked-past"] {
        assert!(
            !set_delivery_status(store, MESH, id, DeliveryStatus::Queued, at(21)),
            "expected {id} final (expired)"
        );
        assert_eq!(delivery_status(store, MESH, id), DeliveryStatus::Expired, "expected {id} expired");
    }
    for (id, status) in
        [("delivered-past", DeliveryStatus::Delivered), ("completed-past", DeliveryStatus::Completed)]
    {
        assert_eq!(
            delivery_status(store, MESH, id),
            status,
            "expected {id} kept as it was: expiry only moves waiting deliveries"
        );
    }
    assert_eq!(
        ok(store.expire_stale_session_deliveries(MESH, at(20)), "expire again"),
        0,
        "expected nothing left to expire"
    );
    assert_eq!(
        active_delivery_ids(store, OTHER_MESH, None, at(0)),
        ["elsewhere-past"],
        "expected mesh B's delivery untouched by expiry in mesh A"
    );
    assert_eq!(
        ok(store.expire_stale_session_deliveries(OTHER_MESH, at(20)), "expire in B"),
        1,
        "expected B's one"
    );
}

/// The meshes with deliveries or dispatches are listed once each, sorted; a mesh
/// with only tasks is not.
pub fn meshes_with_deliveries_or_dispatches_are_listed_once(store: &dyn Store) {
    let listed = |store: &dyn Store| ok(store.meshes_with_deliveries_or_dispatches(), "meshes listing");
    assert!(listed(store).is_empty(), "expected no mesh before anything is recorded");
    insert_delivery(store, "z-deliveries", delivery("d1", "s1", 0), at(0));
    insert_delivery(store, "z-deliveries", delivery("d2", "s2", 0), at(0));
    record_dispatch(store, "a-dispatches", direct_dispatch("t1", Some("s1")), at(0));
    insert_delivery(store, "m-both", delivery("d3", "s1", 0), at(0));
    record_dispatch(store, "m-both", direct_dispatch("t2", Some("s1")), at(0));
    enqueue(store, "tasks-only", new_task("only a task"), at(0));
    assert_eq!(listed(store), ["a-dispatches", "m-both", "z-deliveries"]);
}

/// A blank id or kind, or an unparsable deliverAfter or expiresAt, is invalid input naming the field; nothing is stored.
/// (An empty message is not: see [`session_delivery_without_a_message_is_stored_with_an_empty_message`].)
pub fn session_delivery_rejects_bad_input_naming_the_field(store: &dyn Store) {
    let kept = insert_delivery(store, MESH, delivery("kept", "s1", 0), at(0));
    let cases = [
        ("id", NewSessionDelivery { id: " ".into(), ..delivery("x", "s1", 0) }),
        ("kind", NewSessionDelivery { kind: String::new(), ..delivery("kept", "s2", 0) }),
        (
            "expiresAt",
            NewSessionDelivery { expires_at: Some("tomorrow".into()), ..delivery("kept", "s2", 0) },
        ),
        (
            "deliverAfter",
            NewSessionDelivery { deliver_after: Some("soon".into()), ..delivery("kept", "s2", 0) },
        ),
    ];
    for (field, bad) in cases {
        let what = format!("insert_session_delivery with a bad {field}");
        assert_invalid_input(store.insert_session_delivery(MESH, &bad, at(1)), field, &what);
        assert_eq!(
            active_deliveries(store, MESH, None, at(1)),
            std::slice::from_ref(&kept),
            "expected {what} to store nothing"
        );
    }
}

/// Inserting in mesh B a delivery with an id mesh A has leaves A's delivery as it was (B's is refused or kept apart).
pub fn session_delivery_id_in_another_mesh_leaves_the_first_mesh_alone(store: &dyn Store) {
    let a = insert_delivery(store, MESH, delivery("shared", "s1", 0), at(0));
    let in_b = NewSessionDelivery { message: "mesh B's message".into(), ..delivery("shared", "s9", 5) };
    if let Ok(b) = store.insert_session_delivery(OTHER_MESH, &in_b, at(1)) {
        assert_eq!(b.mesh_id, OTHER_MESH, "expected B's delivery stored in B");
        assert_eq!(
            active_deliveries(store, OTHER_MESH, None, at(2)),
            [b],
            "expected B's delivery listed in B"
        );
    }
    assert_eq!(
        active_deliveries(store, MESH, None, at(2)),
        [a],
        "expected a delivery inserted in mesh B not to replace or remove mesh A's delivery of the same id"
    );
    assert!(
        set_delivery_status(store, MESH, "shared", DeliveryStatus::Acked, at(3)),
        "expected mesh A's delivery still there to move"
    );
}

/// A delivery without a message is stored with an empty message, as later
/// versions of the original store it (`message ?? ''`), not refused.
pub fn session_delivery_without_a_message_is_stored_with_an_empty_message(store: &dyn Store) {
    let blank = NewSessionDelivery { message: String::new(), ..delivery("d-blank", "s1", 0) };
    let stored = insert_delivery(store, MESH, blank, at(0));
    assert_eq!(stored.message, "", "expected the empty message kept as it is");
    assert_eq!(
        active_delivery(store, MESH, "d-blank", at(1)).message,
        "",
        "expected the delivery listed with an empty message"
    );
}

/// One delivery is read by its id whatever its status, with its attempts and
/// last error; an unknown id, or one of another mesh, reads as none.
pub fn session_delivery_is_read_by_id_whatever_its_status(store: &dyn Store) {
    insert_delivery(store, MESH, delivery("d1", "s1", 0), at(0));
    let retry = DeliveryUpdate { last_error: Some("pty busy".into()), increment_attempt: true };
    ok(store.set_session_delivery_status(MESH, "d1", DeliveryStatus::Queued, &retry, at(1)), "retry");
    assert!(set_delivery_status(store, MESH, "d1", DeliveryStatus::Failed, at(2)), "expected d1 to fail");
    let read = delivery_by_id(store, MESH, "d1");
    let read = read.expect("expected a failed delivery still readable by its id");
    assert_eq!(read.status, DeliveryStatus::Failed);
    assert_eq!(read.attempt_count, 1, "expected the retry counted");
    assert_eq!(read.updated_at, at(2).iso());
    assert!(active_deliveries(store, MESH, None, at(3)).is_empty(), "a failed delivery is not active");
    assert_eq!(delivery_by_id(store, MESH, "nope"), None);
    assert_eq!(delivery_by_id(store, OTHER_MESH, "d1"), None, "mesh B sees none of A's");
}
