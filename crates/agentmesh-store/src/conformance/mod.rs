//! The backend-agnostic conformance suite: the behaviour every [`Store`] must show,
//! one public function per rule, each taking a fresh, empty store.
//!
//! A backend runs the suite by expanding [`conformance_tests!`](crate::conformance_tests)
//! in one of its integration tests, with an expression that builds a fresh store
//! holder (anything that derefs to a type implementing [`Store`]) and one that
//! builds [`Racers`] (handles on one fresh database, for the [`concurrency`] rules):
//!
//! ```text
//! agentmesh_store::conformance_tests!(TestDb::new(), racing: TestDb::racers());
//! ```
//!
//! Each rule becomes its own `#[test]`, named after the rule, so a failure names the
//! broken rule and `cargo test <group>` runs a group (`claim`, `ledger`, ...).
//!
//! The rules only use the product's operations: the [`Store`] traits, and the
//! import of `agentmesh migrate` ([`TransferStore`]) where a rule needs rows no
//! operation would produce (an old assignment, a record the original wrote). They
//! use fixed instants ([`support::T0`] plus offsets): no sleeps, no clock (the
//! [`concurrency`] rules add threads). They assert what a caller can observe
//! (returned values, stored tasks, ledger entries), never how a backend stores it.
//!
//! - [`tasks`]: enqueue and its validation, batches, imported rows, read views,
//!   mesh isolation of tasks and claims.
//! - [`claims`]: claim order, the gates and their refusals, dependencies and blocks,
//!   node identity, what a claim stamps.
//! - [`lifecycle`]: completion and its fencing and matching, fail, cancel, requeue,
//!   reclaim, heartbeats, leases, and the ledger entries of every state change.
//! - [`ledger`]: import, ordered reads and their filters, the slice protocol.
//! - [`dispatches`]: direct dispatches, their status changes by task and by session,
//!   stale marking, cleanup and deletion by task.
//! - [`deliveries`]: the session delivery queue, its statuses that never move
//!   backwards, retries, the active view, confirmation and expiry.
//! - [`sessions`]: idle sessions, completion fingerprints and conflicts, the
//!   tool-call rate guard.
//! - [`holds`]: in-flight holds: the first instant kept by an upsert, reads by
//!   task, the list in held order, release.
//! - [`reservations`]: path reservations: denials naming each conflict once,
//!   shared and exclusive, fenced renew and release, lapse and sweep, tasks
//!   that declare paths; [`reservation_race`] the race of many processes that
//!   each backend's `multiprocess` test runs, checked against the ledger.
//! - [`guardrail`]: the read-only guardrail on the messages of read-only tasks.
//! - [`inbox`]: the coordinator inbox: stamping, fingerprint and event-id dedup,
//!   the drain window, peek, ack, retract, mesh isolation, and a
//!   routing property over interleaved queues and drains.
//! - [`inbox_reconcile`]: superseded refine acceptances and alerts about finished
//!   tasks, left out of what a drain hands out.
//! - [`inbox_routing`]: re-attribution, sibling sessions, backlogs, system scope,
//!   enforce-mode quarantine.
//! - [`concurrency`]: the isolation contract raced: each racing pair on several
//!   threads and several handles on one database, many rounds, each checked
//!   against the invariant the contract promises.
//! - [`missions`]: missions and their derived progress, the scheduler cursor and
//!   round-robin placement.
//! - [`webhooks`]: webhook subscriptions: where they start, the secret kept
//!   apart, progress written by version, resume, skip and removal recorded;
//!   the sequence number of each entry of a slice.
//! - [`archive`]: retention: what a step archives and never does, archived
//!   rows read back marked and in the ledger's order, archived dependencies
//!   and ids, a webhook cursor holding the ledger back, expired cursors.
//! - [`support`]: the clock, builders and assertion helpers the rules share.
//!
//! [`Store`]: crate::Store
//! [`TransferStore`]: crate::transfer::TransferStore

pub mod archive;
pub mod claim_race;
pub mod claims;
pub mod concurrency;
pub mod crash;
pub mod deliveries;
pub mod dispatches;
pub mod guardrail;
pub mod holds;
pub mod inbox;
pub mod inbox_reconcile;
pub mod inbox_routing;
pub mod ledger;
pub mod lifecycle;
pub mod missions;
pub mod reservation_race;
pub mod reservations;
pub mod sessions;
pub mod support;
pub mod tasks;
pub mod transfer;
pub mod webhooks;

pub use archive::*;
pub use claims::*;
pub use concurrency::*;
pub use deliveries::*;
pub use dispatches::*;
pub use guardrail::*;
pub use holds::*;
pub use inbox::*;
pub use inbox_reconcile::*;
pub use inbox_routing::*;
pub use ledger::*;
pub use lifecycle::*;
pub use missions::*;
pub use reservations::*;
pub use sessions::*;
pub use tasks::*;
pub use webhooks::*;

/// Expands into one `#[test]` per conformance rule, each running the rule against a
/// fresh store built by the given expression.
///
/// The first expression is evaluated once per test and must produce something that
/// derefs to a type implementing [`Store`](crate::Store), for example a struct that
/// owns a temporary directory and the store opened in it (the directory then lives
/// exactly as long as the test). The `racing:` expression is evaluated once per
/// [`concurrency`] rule and must produce a [`Racers`]: handles on one fresh
/// database.
///
/// This macro holds the one list of rules; a rule function that is not listed here
/// is not run by any backend.
#[macro_export]
macro_rules! conformance_tests {
    ($make_store:expr, racing: $make_racers:expr) => {
        $crate::conformance_tests!(@racing $make_racers;
            race_two_claims_by_one_session_take_one_task,
            race_two_claims_for_one_node_stay_within_its_gates,
            race_enqueue_and_completion_of_its_dependency_leave_the_dependent_claimable_once,
            race_opposite_dependencies_never_store_a_cycle,
            race_two_drains_by_one_coordinator_deliver_each_event_once,
            race_concurrent_upserts_of_one_mission_create_it_once,
            race_completion_and_reclaim_one_wins,
            race_overlapping_exclusive_reservations_grant_one,
            race_claims_of_tasks_over_one_path_take_one,
        );
        $crate::conformance_tests!(@rules $make_store;
            // Retention and the archive.
            archive_moves_only_finished_tasks_past_their_window,
            archived_tasks_keep_their_dependency_and_their_id,
            archived_ledger_entries_stay_in_the_ledgers_order,
            a_tasks_history_reads_the_archive_and_the_hot_ledger,
            a_webhook_cursor_holds_the_ledger_back,
            a_cursor_before_a_drop_expires_and_names_where_to_go_on,
            a_meshs_own_windows_apply_to_it_alone,
            a_meshs_own_events_window_applies_to_its_drained_events,
            // Tasks and the queue.
            enqueue_returns_a_pending_task_and_records_task_dispatched,
            enqueue_without_an_id_assigns_a_fresh_one,
            enqueue_rejects_a_blank_message_and_changes_nothing,
            enqueue_rejects_an_unknown_mode_or_priority_and_changes_nothing,
            enqueue_rejects_a_duplicate_id_and_changes_nothing,
            enqueue_of_an_id_another_mesh_holds_follows_the_id_scope,
            enqueue_rejects_a_dependency_cycle_and_changes_nothing,
            enqueue_batch_is_all_or_nothing,
            enqueue_batch_members_may_depend_on_earlier_members,
            queue_entries_are_in_creation_order,
            queue_entries_filter_by_status,
            imported_task_is_stored_as_given_and_an_existing_id_is_kept,
            ids_follow_the_id_rule_on_enqueue_and_odd_stored_rows_stay_readable,
            mesh_summaries_list_every_mesh_with_its_counts,
            imported_tasks_keep_dependency_readiness,
            find_task_finds_by_id_within_the_mesh,
            node_load_counts_the_exact_node,
            oldest_pending_created_at_is_the_oldest_pending_enqueue,
            stats_by_status_counts_each_present_status,
            active_assignments_list_oldest_dispatch_first,
            unknown_task_fields_survive_a_round_trip,
            meshes_are_isolated_for_tasks_and_claims,
            readonly_guardrail_refuses_forbidden_operations_and_changes_nothing,
            // Claims.
            claims_are_fifo_among_equal_priority,
            claims_take_higher_priority_first_within_a_tier,
            claims_take_session_pins_then_node_pins_then_open_tasks,
            a_session_holds_one_task_at_a_time,
            claim_with_nothing_pending_is_refused,
            claim_with_a_blank_session_or_node_is_invalid,
            required_tags_gate_claims,
            dependency_chain_claims_in_order,
            unmet_dependency_refuses_claims,
            failed_dependency_blocks_its_pending_dependents,
            cancelled_dependency_blocks_its_pending_dependents,
            requeued_dependency_lifts_the_block,
            not_before_delays_claims,
            daemon_id_forms_name_one_busy_node,
            readonly_tasks_run_beside_each_other_while_writes_wait,
            provider_cap_limits_parallel_sessions,
            convergence_is_never_claimed_by_a_worktree,
            node_pins_match_every_id_form_and_only_that_node,
            claim_stamps_the_assignment_and_records_task_claimed,
            claim_stamps_the_claimants_transcript_profile,
            claim_skips_tasks_of_difficulties_the_claimant_does_not_take,
            epoch_increases_on_every_claim_and_reclaim,
            // Lifecycle.
            complete_with_matching_session_and_epoch_completes,
            complete_and_claim_completes_then_claims_the_next,
            complete_and_claim_with_a_refused_report_claims_nothing,
            complete_and_claim_with_a_blank_node_changes_nothing,
            repeated_completion_is_refused_and_recorded,
            completion_matching_uses_dispatch_time_under_clock_skew,
            completion_matching_prefers_the_exact_task_id,
            complete_without_task_id_finds_the_sessions_task,
            completion_without_an_assigned_task_is_refused,
            completion_matches_a_padded_session_after_trimming,
            stale_epoch_completion_is_refused_and_recorded,
            completion_from_another_session_is_refused,
            completion_naming_a_task_no_longer_held_is_refused_and_the_live_task_stays,
            fail_marks_the_task_failed_with_its_reason,
            cancel_withdraws_pending_and_assigned_tasks,
            priority_changes_reorder_claims_and_finished_tasks_refuse_them,
            cancel_of_a_finished_task_is_refused_and_changes_nothing,
            requeue_spends_the_default_retry_budget,
            requeue_of_an_assigned_task_needs_force,
            retry_budget_refusal_is_written_to_cancel_reason,
            reclaim_returns_the_task_and_the_fourth_fails_it,
            heartbeat_extends_the_lease_for_the_current_holder,
            heartbeat_progress_is_stored_and_recorded_when_new,
            expired_leases_lists_only_lapsed_assignments,
            reclaim_if_lease_expired_rechecks_the_lease,
            every_state_change_records_its_ledger_entries,
            // Ledger.
            ledger_import_rejects_a_blank_kind,
            read_ledger_ordered_filters_by_tail_since_and_kind,
            kind_filters_cover_task_kinds_and_rare_kinds_alike,
            read_ledger_ordered_keeps_append_order,
            read_ledger_ordered_tail_is_newest_in_append_order,
            ledger_import_counts_only_new_entries,
            ledger_import_rejects_an_invalid_entry_and_imports_nothing,
            ledger_slice_default_and_clamped_limits,
            ledger_slice_orders_by_timestamp_then_id_after_the_cursor,
            ledger_slice_pages_every_entry_exactly_once,
            ledger_slice_unknown_after_id_gives_an_empty_page,
            ledger_slice_by_sequence_sees_an_entry_committed_late,
            ledger_slice_filters_by_kind,
            ledger_is_isolated_by_mesh,
            // Direct dispatches.
            direct_dispatch_is_recorded_and_listed_oldest_first,
            recording_a_direct_dispatch_again_replaces_the_row,
            direct_dispatch_status_with_a_task_id_changes_only_that_row,
            direct_dispatch_status_without_a_task_id_changes_the_sessions_open_rows,
            completed_and_failed_direct_dispatches_never_change,
            mark_stale_direct_dispatches_touches_only_old_dispatched_rows,
            pruning_ended_dispatches_deletes_only_old_ended_rows,
            direct_dispatches_are_deleted_by_task,
            direct_dispatch_rejects_bad_input_naming_the_field,
            direct_dispatches_are_isolated_by_mesh,
            direct_dispatch_of_a_task_id_in_another_mesh_leaves_the_first_mesh_alone,
            direct_dispatch_is_read_by_task_whatever_its_status,
            recorded_direct_dispatch_is_an_assigned_task_with_a_confirmed_delivery,
            recording_a_direct_dispatch_of_an_existing_id_changes_nothing,
            task_delivery_is_confirmed_by_delivered_acked_or_completed_only,
            recording_a_direct_dispatch_rejects_bad_input_naming_the_field,
            // Session deliveries.
            session_delivery_is_queued_by_default_and_read_back,
            session_delivery_status_never_moves_backwards,
            final_session_delivery_statuses_are_never_left,
            session_delivery_retries_count_attempts_and_record_the_error,
            session_delivery_status_of_an_unknown_id_is_not_found,
            active_session_deliveries_are_waiting_unexpired_and_ordered,
            expire_stale_session_deliveries_expires_only_waiting_ones,
            meshes_with_deliveries_or_dispatches_are_listed_once,
            session_delivery_rejects_bad_input_naming_the_field,
            session_delivery_id_in_another_mesh_leaves_the_first_mesh_alone,
            session_delivery_without_a_message_is_stored_with_an_empty_message,
            session_delivery_is_read_by_id_whatever_its_status,
            // In-flight holds.
            inflight_hold_is_stored_and_read_back_by_task,
            inflight_hold_upsert_keeps_the_first_held_at,
            inflight_holds_are_listed_by_mesh_in_held_order,
            inflight_hold_delete_reports_whether_it_was_held,
            inflight_hold_rejects_bad_input_naming_the_field,
            // Path reservations.
            reservation_conflict_is_denied_naming_each_holder_once,
            reservation_shared_and_exclusive_combine_as_documented,
            reservation_renew_and_release_are_fenced,
            reservation_lapses_at_its_time_to_live,
            reservations_are_apart_per_mesh,
            reservation_rejects_bad_input_naming_the_field,
            claim_reserves_a_tasks_paths_and_skips_a_task_over_reserved_ones,
            enqueue_refuses_bad_paths_naming_the_field,
            // Webhook subscriptions.
            webhook_starts_after_its_own_entry_and_keeps_its_secret_apart,
            webhook_progress_is_written_only_over_the_version_read,
            webhook_resume_skip_and_remove_are_recorded,
            ledger_slice_names_each_entrys_sequence,
            // Idle sessions, fingerprints, conflicts, rate guard.
            idle_sessions_are_scoped_by_mesh,
            setting_an_idle_session_again_refreshes_it,
            expired_idle_sessions_are_hidden_and_pruned,
            delete_idle_session_reports_whether_it_existed,
            idle_session_rejects_blank_fields_naming_them,
            completion_fingerprint_is_found_until_its_ttl_passes,
            completion_fingerprint_in_another_mesh_leaves_the_first_mesh_alone,
            completion_fingerprint_sweep_removes_only_expired_ones,
            completion_conflict_is_recorded_once_per_id,
            recent_completion_conflicts_are_newest_first_within_the_window,
            recent_completion_conflicts_are_capped_at_50,
            tool_call_rate_guard_trips_on_the_sixth_call_in_the_window,
            tool_call_rate_guard_counts_one_tool_in_one_mesh,
            tool_call_rate_guard_forgets_calls_outside_the_window,
            prune_tool_calls_deletes_calls_before_the_cutoff,
            completion_fingerprints_are_listed_latest_first_while_in_force,
            recent_tool_calls_are_read_newest_first_with_their_caller_role,
            // Missions and placement.
            upsert_mission_creates_an_active_mission_and_records_mission_created,
            upsert_mission_says_whether_it_created_the_mission,
            mission_source_is_written_once,
            upsert_mission_updates_and_keeps_the_creation_time,
            missions_are_listed_by_status_most_recently_updated_first,
            mission_id_used_in_another_mesh_follows_the_id_scope,
            mission_progress_is_counted_from_its_tasks,
            mission_of_an_unknown_id_is_not_found,
            upsert_mission_rejects_bad_input_naming_the_field,
            scheduler_cursor_starts_at_zero_and_bump_returns_the_value_before,
            round_robin_rotates_the_winner_among_equally_loaded_nodes,
            // Coordinator inbox.
            inbox_queue_stamps_the_v2_envelope_by_event_name,
            inbox_a_used_fingerprint_refuses_a_new_event_drained_or_not,
            inbox_a_drained_event_id_is_skipped_when_queued_again,
            inbox_unicast_is_reattributed_on_its_machine_and_never_crosses_machines,
            inbox_sibling_session_unicast_waits_for_its_own_session,
            inbox_two_live_runs_on_one_machine_keep_their_own_unicasts,
            inbox_an_ended_or_stale_run_has_its_unicasts_reattributed,
            inbox_only_events_reach_past_non_matching_events,
            inbox_only_events_take_matches_from_between_the_events_they_leave,
            inbox_a_backlog_for_another_coordinator_never_starves_the_drainer,
            inbox_enforce_mode_quarantines_v1_events_with_an_event_held_entry,
            inbox_an_unrecoverable_held_entry_is_skipped_and_stays_held,
            inbox_peek_shows_what_a_drain_would_deliver_and_changes_nothing,
            inbox_delivered_events_are_never_delivered_again,
            inbox_ack_counts_what_it_changes,
            inbox_events_are_deleted_by_id,
            inbox_meshes_are_isolated,
            inbox_retract_removes_only_undelivered_dispatch_blocked_events_of_the_task,
            inbox_system_scope_events_go_to_no_coordinator,
            inbox_pending_events_are_counted_by_addressee,
            inbox_a_late_touch_does_not_revive_an_ended_coordinator,
            inbox_drains_oldest_first_at_most_limit_events,
            inbox_property_every_event_reaches_its_coordinators_at_most_once,
            inbox_a_superseded_refine_accepted_is_not_delivered,
            inbox_alerts_about_finished_tasks_are_dropped,
            inbox_a_broadcast_terminal_event_reaches_only_its_dispatcher,
            inbox_also_known_as_widens_a_drain_to_that_ids_unicasts,
        );
    };
    (@racing $make_racers:expr; $($rule:ident),* $(,)?) => {
        $(
            #[test]
            fn $rule() {
                let racers = $make_racers;
                $crate::conformance::$rule(&racers);
            }
        )*
    };
    (@rules $make_store:expr; $($rule:ident),* $(,)?) => {
        $(
            #[test]
            fn $rule() {
                let holder = $make_store;
                $crate::conformance::$rule(&*holder);
            }
        )*
    };
}

/// Expands into one `#[test]` per rule of [`transfer`], each on fresh stores
/// built by the expression as [`conformance_tests!`] builds them: one store for
/// the rules of one, a source and a target for the copies.
///
/// [`conformance_tests!`]: crate::conformance_tests
#[macro_export]
macro_rules! transfer_conformance_tests {
    ($make_store:expr) => {
        $crate::transfer_conformance_tests!(@one $make_store;
            transfer_pages_of_any_size_read_the_same_records,
            transfer_a_record_of_another_mesh_is_refused,
        );
        $crate::transfer_conformance_tests!(@two $make_store;
            transfer_copy_round_trips_every_kind_and_is_idempotent,
            transfer_copies_the_archive_before_the_hot_ledger,
            transfer_an_id_held_by_another_mesh_is_a_conflict,
        );
    };
    (@one $make_store:expr; $($rule:ident),* $(,)?) => {
        $(
            #[test]
            fn $rule() {
                let holder = $make_store;
                $crate::conformance::transfer::$rule(&*holder);
            }
        )*
    };
    (@two $make_store:expr; $($rule:ident),* $(,)?) => {
        $(
            #[test]
            fn $rule() {
                let (source, target) = ($make_store, $make_store);
                $crate::conformance::transfer::$rule(&*source, &*target);
            }
        )*
    };
}
