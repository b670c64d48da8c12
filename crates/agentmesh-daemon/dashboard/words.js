// The words a person reads: statuses, ledger kinds, reasons and counters in
// plain English, and why a pending task waits. The machine names stay in the
// data-* attributes and in the tooltips.

import { h, short, clock } from './dom.js';

/** "v2_enforce" → "v2 enforce", "taskMode" → "task mode": the fallback for a name without words. */
export function plain(name) {
  return String(name || '').replace(/_/g, ' ').replace(/([a-z])([A-Z])/g, '$1 $2').toLowerCase();
}

/** A task's status as the dashboard shows it: a pending task a failed dependency holds back is blocked. */
export function statusOf(task) {
  return task.status === 'pending' && task.blockedReason ? 'blocked' : task.status;
}

const STATUS_WORDS = {
  pending: 'Pending', blocked: 'Blocked', assigned: 'Running', completed: 'Done',
  failed: 'Failed', cancelled: 'Cancelled', missing: 'Missing',
};

/** "Running" for `assigned`, and so on. */
export function statusWord(status) {
  const word = STATUS_WORDS[status] || plain(status);
  return word.charAt(0).toUpperCase() + word.slice(1);
}

/** A status as a badge; the status code is its class and its tooltip. */
export function badge(status) {
  return h('span', { class: `badge status-${status}`, title: status }, statusWord(status));
}

/** "High", "Normal", "Low". */
export function priorityWord(priority) {
  return statusWord(priority || 'normal');
}

const KIND_WORDS = {
  task_dispatched: 'enqueued',
  task_claimed: 'claimed',
  task_completed: 'done',
  task_failed: 'failed',
  task_cancelled: 'cancelled',
  task_requeued: 'requeued',
  task_priority_changed: 'priority changed',
  task_reclaimed: 'taken back from its worker',
  task_blocked: 'blocked',
  task_unblocked: 'unblocked',
  task_progress: 'progress',
  completion_refused: 'completion refused',
  heartbeat_refused: 'heartbeat refused',
  event_held: 'event held',
  event_held_requeued: 'held event put back',
  reservation_granted: 'paths reserved',
  reservation_denied: 'paths refused',
  reservation_renewed: 'reservation renewed',
  reservation_released: 'paths released',
  reservation_expired: 'reservation lapsed',
  webhook_added: 'webhook added',
  webhook_removed: 'webhook removed',
  webhook_failing: 'webhook failing',
  webhook_resumed: 'webhook resumed',
  webhook_skipped: 'webhook skipped an entry',
};

/** The ledger kinds a person may filter by, in lifecycle order. */
export const KINDS = Object.keys(KIND_WORDS);

/** A ledger entry's kind in words. */
export function kindWord(kind) {
  return KIND_WORDS[kind] || plain(kind);
}

const REASON_WORDS = {
  lease_expired: 'its lease ran out',
  stale_epoch: 'an older claim (stale epoch)',
  not_assigned_to_session: 'not assigned to that session',
  invalid_transition: 'the task had moved on',
  v2_enforce_unversioned_quarantined: 'quarantined: no version',
  v2_enforce_validation_failed_quarantined: 'quarantined: failed validation',
  pending_retention_expired: 'never drained before the inbox kept it no longer',
  pending_trim_dropped: 'dropped when the inbox was trimmed',
};

/** A reason code in words; free text (anything with a space) as it is. */
export function reasonWords(reason) {
  if (reason === undefined || reason === null || reason === '') return '';
  const text = String(reason);
  if (/\s/.test(text)) return text;
  const dependency = /^dependency_failed:(.+)$/.exec(text);
  if (dependency) return `dependency ${dependency[1]} failed`;
  return REASON_WORDS[text] || plain(text);
}

const COUNTER_WORDS = {
  'drains_total{kind="drain"}': 'Drains answered',
  'drains_total{kind="watch"}': 'Watches answered',
  delivered_events_total: 'Events handed to coordinators',
  v2Delivered: 'Delivered to the coordinator they were for',
  v2RoutedAway: 'Left for another coordinator',
  v2DedupSkipped: 'Skipped: already drained',
  v2ValidationFailedAccepted: 'Failed validation, delivered anyway',
  v2ReattributedToDrainer: 'Handed to the drainer after its coordinator restarted',
  v1BroadcastAccepted: 'Without a version, delivered to every coordinator',
  v2ValidationFailedQuarantined: 'Failed validation, held',
  v1UnversionedQuarantined: 'Without a version, held',
};

/** A drain counter of `/metrics` (less its `agentmesh_` prefix) in words. */
export function counterWords(name) {
  if (COUNTER_WORDS[name]) return COUNTER_WORDS[name];
  const decision = /decision="([^"]+)"/.exec(name);
  if (decision) return COUNTER_WORDS[decision[1]] || statusWord(plain(decision[1]));
  return statusWord(plain(name.replace(/_total\b/, '').replace(/[{}"=]/g, ' ').trim()));
}

/** A link to a task, by its short id. */
function taskLink(ctx, id) {
  return h('a', { href: ctx.link('task', id), class: 'id', title: id }, short(id));
}

/**
 * Why a pending task cannot be claimed now, one entry per reason (each a list
 * of text and links): its block, its unfinished dependencies, its not-before
 * time, its parking. `known` maps a dependency's id to the dependency (or null
 * when there is no such task); one it lacks is named as "after" it, status unknown.
 */
export function waits(ctx, task, known, now = Date.now()) {
  const out = [];
  const blockedBy = /^dependency_failed:(.+)$/.exec(task.blockedReason || '');
  if (blockedBy) {
    const dep = known.get(blockedBy[1]);
    const how = dep && dep.status === 'cancelled' ? 'was cancelled' : 'failed';
    out.push(['blocked: dependency ', taskLink(ctx, blockedBy[1]), ' ' + how]);
  } else if (task.blockedReason) {
    out.push(['blocked: ' + reasonWords(task.blockedReason)]);
  }
  for (const id of task.dependsOn || []) {
    if (blockedBy && id === blockedBy[1]) continue;
    const dep = known.get(id);
    if (dep && dep.status === 'completed') continue;
    if (dep === undefined) {
      out.push(['after ', taskLink(ctx, id)]);
      continue;
    }
    const what = dep === null ? 'no such task' : statusWord(statusOf(dep)).toLowerCase();
    out.push(['waits for ', taskLink(ctx, id), ` (${what})`]);
  }
  const notBefore = Date.parse(task.notBefore || '');
  if (notBefore > now) out.push(['not before ' + clock(task.notBefore)]);
  if (task.parked) {
    const why = task.parked.reason || task.parked.parkedReason;
    out.push([why ? 'parked: ' + reasonWords(why) : 'parked']);
  }
  return out;
}

/** Who may claim a task, when not everyone may: tags, a node or a session. */
export function limits(task) {
  const out = [];
  const tags = task.requiredTags || [];
  if (tags.length) out.push((tags.length > 1 ? 'needs tags ' : 'needs tag ') + tags.join(', '));
  if (task.targetNodeId) out.push('only on node ' + task.targetNodeId);
  if (task.targetSessionId) out.push('only for session ' + task.targetSessionId);
  return out;
}
