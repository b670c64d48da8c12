-- Three columns of the inbox's event rows go: the v2 protocol version, the scope
-- and the dispatching coordinator (its JSON identity). Each repeats a field of the
-- event's payload, which keeps the whole envelope and is what every read hands
-- out, and no statement selects or filters by them. The event id and the
-- addressee (`intended_for`, which the overview groups by) stay in columns.
ALTER TABLE mesh_pending_events DROP COLUMN protocol_version;
ALTER TABLE mesh_pending_events DROP COLUMN scope;
ALTER TABLE mesh_pending_events DROP COLUMN dispatched_by;
