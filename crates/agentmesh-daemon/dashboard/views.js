// The views. Each has mount(ctx), which builds what stays (filters, headings,
// forms), and update(ctx, entries), which refetches what it shows; the app
// calls update again when the mesh's stream says it changed.

import { h, put, span, ago, when, short } from './dom.js';
import { dag } from './graph.js';
import { metrics } from './api.js';
import {
  statusOf, statusWord, badge, priorityWord, kindWord, KINDS, reasonWords, counterWords, waits, limits, plain,
} from './words.js';

const COLUMNS = ['pending', 'blocked', 'assigned', 'completed', 'failed', 'cancelled'];
const PAGE = 50;
/** The largest page `GET .../tasks` answers. */
const MAX = 1000;
const PRIORITIES = ['high', 'normal', 'low'];
const RANK = { high: 2, normal: 1, low: 0 };

/** Claim order: higher priority first, then the older task (the listing is in enqueue order). */
function claimOrder(a, b) {
  const rank = (t) => RANK[t.priority || 'normal'] ?? 1;
  return rank(b) - rank(a) || (a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : 0);
}

/** A worker's latest progress report: a bar when it gave a percent, its note, and when. */
function progressReport(p) {
  const percent = Number.isFinite(p.percent) ? p.percent : null;
  let bar = null;
  if (percent !== null) {
    bar = h('div', { class: 'meter', role: 'progressbar', 'aria-label': 'progress', 'aria-valuemin': 0, 'aria-valuemax': 100, 'aria-valuenow': percent }, h('span'));
    bar.firstChild.style.width = `${percent}%`;
  }
  return h('div', { class: 'task-progress' },
    bar,
    percent !== null ? h('span', { class: 'percent' }, `${percent}%`) : null,
    p.note ? h('span', { class: 'note' }, p.note) : null,
    h('time', { datetime: p.at, title: when(p.at) }, ago(p.at)));
}

/** "worker-1 on laptop". */
function holder(t) {
  return `${t.assignedSessionId || '?'} on ${t.assignedNodeId || '?'}`;
}

function card(ctx, t, known) {
  const now = Date.now();
  const status = statusOf(t);
  const notes = [];
  if (t.status === 'pending') {
    // A blocked task's first reason is its block.
    waits(ctx, t, known, now).forEach((reason, i) => notes.push(h('span', { class: status === 'blocked' && i === 0 ? 'why blocked' : 'why' }, reason)));
    for (const limit of limits(t)) notes.push(h('span', { class: 'why limit' }, limit));
  }
  const running = t.status === 'assigned' && t.assignedSessionId
    ? h('div', { class: 'holder' }, h('span', {}, holder(t)),
      t.dispatchTimestamp ? h('span', {}, `for ${span(now - Date.parse(t.dispatchTimestamp))}`) : null,
      t.updatedAt ? h('span', {}, `heard ${ago(t.updatedAt)}`) : null,
      t.leaseExpiresAt ? h('span', {}, `lease ends ${ago(t.leaseExpiresAt)}`) : null)
    : null;
  return h('article', { class: `card status-${status}`, 'data-task': t.id },
    h('a', { class: 'title', href: ctx.link('task', t.id) }, t.message.length > 140 ? t.message.slice(0, 139) + '…' : t.message),
    h('div', { class: 'meta' },
      h('span', { class: `prio prio-${t.priority || 'normal'}`, title: 'priority' }, priorityWord(t.priority)),
      t.taskMode ? h('span', {}, plain(t.taskMode)) : null,
      h('span', { title: when(t.createdAt) }, ago(t.createdAt)),
      t.dispatchNonce ? h('span', { title: 'the fencing epoch of its latest claim' }, 'epoch ', t.dispatchNonce) : null,
      h('span', { class: 'id', title: t.id }, short(t.id))),
    running,
    t.status === 'assigned' && t.progress ? progressReport(t.progress) : null,
    notes.length ? h('div', { class: 'whys' }, notes) : null);
}

// ── Board ─────────────────────────────────────────────────────────────────

const FILTER_WORDS = { tag: 'tag', node: 'node', session: 'session', mission: 'mission', q: 'text' };

const board = {
  filters: { tag: '', node: '', session: '', mission: '', q: '' },
  shown: Object.fromEntries(COLUMNS.map((st) => [st, PAGE])),
  blockedSeen: 0,

  mount(ctx) {
    this.shown = Object.fromEntries(COLUMNS.map((st) => [st, PAGE]));
    const inputs = Object.keys(this.filters).map((key) =>
      h('input', {
        type: 'search', name: key, value: this.filters[key], 'aria-label': FILTER_WORDS[key], placeholder: FILTER_WORDS[key],
        oninput: (e) => { this.filters[key] = e.target.value; clearTimeout(this.typing); this.typing = setTimeout(() => ctx.refresh(), 250); },
      }));
    this.columns = h('div', { class: 'columns' }, COLUMNS.map((st) => h('section', { class: 'column', 'data-status': st },
      h('h2', {}, statusWord(st), ' ', h('span', { class: 'count' })), h('div', { class: 'cards' }), h('div', { class: 'more' }))));
    put(ctx.main, h('form', { class: 'filters', onsubmit: (e) => e.preventDefault() }, inputs), this.columns);
  },

  async update(ctx) {
    const filtered = Object.values(this.filters).some((v) => v.trim());
    const list = (status, limit) => ctx.api.tasks({ status, ...this.filters, limit });
    const stored = COLUMNS.filter((st) => st !== 'blocked');
    // The API keeps a blocked task pending: the pending page is read long enough
    // to fill the column once the blocked ones are set apart.
    const want = (st) => this.shown[st] + 1 + (st === 'pending' ? this.blockedSeen : 0);
    const [status, blocked, ...pages] = await Promise.all([
      ctx.api.status(), list('blocked', MAX), ...stored.map((st) => list(st, want(st))),
    ]);
    const lists = Object.fromEntries(stored.map((st, i) => [st, pages[i]]));
    let pending = lists.pending.filter((t) => !t.blockedReason);
    if (pending.length <= this.shown.pending && lists.pending.length === want('pending') && blocked.length > this.blockedSeen) {
      pending = (await list('pending', this.shown.pending + 1 + blocked.length)).filter((t) => !t.blockedReason);
    }
    this.blockedSeen = blocked.length;
    Object.assign(lists, { pending, blocked });
    const totals = { ...status.tasks, blocked: blocked.length, pending: (status.tasks.pending || 0) - blocked.length };
    const known = new Map(COLUMNS.flatMap((st) => lists[st]).map((t) => [t.id, t]));
    for (const st of COLUMNS) {
      const col = this.columns.querySelector(`[data-status="${st}"]`);
      const more = lists[st].length > this.shown[st];
      const shown = more ? lists[st].slice(0, this.shown[st]) : lists[st];
      const count = filtered ? `${shown.length}${more ? '+' : ''}` : `${Math.max(0, totals[st] || 0)}${st === 'blocked' && blocked.length === MAX ? '+' : ''}`;
      col.querySelector('.count').textContent = count;
      put(col.querySelector('.cards'), shown.map((t) => card(ctx, t, known)));
      put(col.querySelector('.more'), more
        ? h('button', { type: 'button', class: 'quiet', onclick: () => { this.shown[st] += PAGE * 4; ctx.refresh(); } }, `show more (${shown.length} shown)`)
        : null);
    }
    ctx.main.dataset.painted = String(performance.now());
  },
};

// ── Ready now ─────────────────────────────────────────────────────────────

/** Every pending task, page by page (at most `pages` pages). */
async function allPending(ctx, pages = 5) {
  const tasks = [];
  for (let page = 0; page < pages; page++) {
    const batch = await ctx.api.tasks({ status: 'pending', limit: MAX, offset: page * MAX });
    tasks.push(...batch);
    if (batch.length < MAX) return { tasks, complete: true };
  }
  return { tasks, complete: false };
}

/** The tasks `ids` names that `known` lacks, fetched: a task, or null for no such task. */
async function fetchMissing(ctx, ids, known) {
  const missing = [...new Set(ids)].filter((id) => !known.has(id));
  const found = await Promise.all(missing.map((id) => ctx.api.task(id).catch((err) => (err.status === 404 ? null : undefined))));
  missing.forEach((id, i) => { if (found[i] !== undefined) known.set(id, found[i]); });
}

function blockingDependency(t) {
  const named = /^dependency_failed:(.+)$/.exec(t.blockedReason || '');
  return named ? [named[1]] : [];
}

const ready = {
  mount(ctx) {
    // The worker to look at, when one is named: kept while the page updates.
    this.worker = { node: '', session: '', tags: '' };
    const input = (name, label, hint) => h('label', {}, label, ' ', h('input', {
      name, type: 'text', placeholder: hint, 'aria-label': label,
      onchange: (e) => { this.worker[name] = e.target.value.trim(); ctx.refresh(); },
    }));
    // The heading, the worker's form and its queue, then the mesh's lists.
    put(ctx.main,
      h('div', { class: 'ready-head' }, h('h1', {}, 'Ready now'), h('p', { class: 'hint' }, 'loading…')),
      h('form', { class: 'filters worker-filter', onsubmit: (e) => e.preventDefault() },
        h('span', { class: 'hint' }, 'For one worker: '),
        input('node', 'Node', 'its node'), input('session', 'Session', 'its session'), input('tags', 'Tags', 'gpu, linux')),
      h('div', { class: 'worker-ready' }),
      h('div', { class: 'ready-page' }));
  },

  async update(ctx) {
    const { tasks, complete } = await allPending(ctx);
    const known = new Map(tasks.map((t) => [t.id, t]));
    await fetchMissing(ctx, tasks.flatMap((t) => [...(t.dependsOn || []), ...blockingDependency(t)]), known);
    const now = Date.now();
    const rows = [...tasks].sort(claimOrder).map((t) => ({ t, why: waits(ctx, t, known, now) }));
    const readyNow = rows.filter((r) => !r.why.length);
    const waiting = rows.filter((r) => r.why.length);
    const line = (t) => [
      h('a', { class: 'title', href: ctx.link('task', t.id) }, t.message.length > 120 ? t.message.slice(0, 119) + '…' : t.message),
      h('span', { class: 'meta' },
        t.priority && t.priority !== 'normal' ? h('span', { class: `prio prio-${t.priority}` }, priorityWord(t.priority)) : null,
        h('span', { class: 'id', title: t.id }, short(t.id)),
        h('span', { title: when(t.createdAt) }, 'enqueued ', ago(t.createdAt)),
        t.missionId ? h('a', { href: ctx.link('mission', t.missionId) }, t.missionId) : null,
        limits(t).map((limit) => h('span', { class: 'limit' }, limit))),
    ];
    put(ctx.main.querySelector('.ready-head'),
      h('h1', {}, 'Ready now ', h('span', { class: 'count' }, String(readyNow.length))),
      h('p', { class: 'hint' }, 'The tasks a worker claims next, in order: higher priority first, then the oldest. ',
        'A worker takes the first it qualifies for; one that needs a tag, a node or a session goes only to such a worker.'),
      complete ? null : h('p', { class: 'hint' }, `Only the first ${tasks.length} pending tasks are read.`));
    put(ctx.main.querySelector('.ready-page'),
      this.worker.node || this.worker.session ? h('h2', {}, 'Every worker') : null,
      readyNow.length
        ? h('ol', { class: 'queue ready-list' }, readyNow.map(({ t }) => h('li', { 'data-task': t.id }, line(t))))
        : h('p', { class: 'hint' }, 'Nothing is ready to claim.'),
      h('h2', {}, 'Waiting ', h('span', { class: 'count' }, String(waiting.length))),
      waiting.length
        ? h('ul', { class: 'queue waiting-list' }, waiting.map(({ t, why }) => h('li', { 'data-task': t.id, class: `status-${statusOf(t)}` },
          line(t), h('span', { class: 'reasons' }, why.map((reason) => h('span', { class: 'reason' }, reason))))))
        : h('p', { class: 'hint' }, 'No pending task waits.'));
    put(ctx.main.querySelector('.worker-ready'), forWorker(this.worker, readyNow.map((r) => r.t), line));
  },
};

/**
 * What one worker (its node, session and tags, as the form names them) would
 * claim from the ready tasks, in the order its claim walks them: pinned to its
 * session first, then to its node, then open to anyone; each by priority and
 * age. The ready tasks it may not take are listed with why.
 */
function forWorker(worker, ready, line) {
  if (!worker.node && !worker.session) return null;
  const tags = new Set(worker.tags.split(',').map((t) => t.trim()).filter(Boolean));
  const why = (t) => {
    const out = [];
    const missing = (t.requiredTags || []).filter((tag) => !tags.has(tag));
    if (missing.length) out.push((missing.length > 1 ? 'needs tags ' : 'needs tag ') + missing.join(', '));
    if (t.targetSessionId && t.targetSessionId !== worker.session) out.push('only for session ' + t.targetSessionId);
    else if (!t.targetSessionId && t.targetNodeId && t.targetNodeId !== worker.node) out.push('only on node ' + t.targetNodeId);
    return out;
  };
  const tier = (t) => (t.targetSessionId ? 0 : t.targetNodeId ? 1 : 2);
  const takes = ready.filter((t) => !why(t).length).sort((a, b) => tier(a) - tier(b) || claimOrder(a, b));
  const elsewhere = ready.filter((t) => why(t).length);
  const who = [worker.session && `session ${worker.session}`, worker.node && `node ${worker.node}`].filter(Boolean).join(' on ');
  return [
    h('h2', {}, `Next for ${who} `, h('span', { class: 'count' }, String(takes.length))),
    takes.length
      ? h('ol', { class: 'queue worker-list' }, takes.map((t, i) => h('li', { 'data-task': t.id, class: i === 0 ? 'next' : '' }, line(t))))
      : h('p', { class: 'hint' }, 'Nothing ready that this worker may take.'),
    elsewhere.length ? h('h2', {}, 'Not for this worker ', h('span', { class: 'count' }, String(elsewhere.length))) : null,
    elsewhere.length
      ? h('ul', { class: 'queue elsewhere-list' }, elsewhere.map((t) => h('li', { 'data-task': t.id },
        line(t), h('span', { class: 'reasons' }, why(t).map((reason) => h('span', { class: 'reason' }, reason))))))
      : null,
  ];
}

// ── A new task ────────────────────────────────────────────────────────────

/** The form's controls, by the wire name of the field each fills. */
const NEW_FIELDS = ['message', 'priority', 'missionId', 'dependsOn', 'requiredTags', 'targetNodeId', 'targetSessionId'];

const create = {
  mount(ctx) {
    const field = (name, label, control, hint) => {
      control.id = `new-${name}`;
      control.name = name;
      control.setAttribute('aria-describedby', `new-${name}-error`);
      return h('div', { class: 'field', 'data-field': name },
        h('label', { for: control.id }, label), control,
        hint ? h('span', { class: 'hint' }, hint) : null,
        h('span', { class: 'field-error', id: `new-${name}-error`, hidden: true }));
    };
    this.missions = h('datalist', { id: 'new-missions' });
    this.error = h('p', { class: 'form-error', role: 'alert', hidden: true });
    this.form = h('form', { class: 'new-task', onsubmit: (e) => { e.preventDefault(); this.submit(ctx); } },
      field('message', 'What to do', h('textarea', { rows: 4, required: true, placeholder: 'the instruction for the worker' })),
      h('div', { class: 'row' },
        field('priority', 'Priority', h('select', {}, PRIORITIES.map((p) => h('option', { value: p, selected: p === 'normal' }, priorityWord(p))))),
        field('missionId', 'Mission', h('input', { type: 'text', list: 'new-missions', value: ctx.arg || '', placeholder: 'none' }))),
      field('dependsOn', 'Depends on', h('input', { type: 'text', placeholder: 'task ids' }), 'separated by commas or spaces; each must be done first'),
      h('fieldset', {}, h('legend', {}, 'Who may claim it'),
        field('requiredTags', 'Tags the worker must have', h('input', { type: 'text', placeholder: 'e.g. gpu, os=linux' })),
        h('div', { class: 'row' },
          field('targetNodeId', 'Only on node', h('input', { type: 'text', placeholder: 'any node' })),
          field('targetSessionId', 'Only for session', h('input', { type: 'text', placeholder: 'any session' })))),
      this.error,
      h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Enqueue the task')),
      this.missions);
    put(ctx.main, h('div', { class: 'new-page' }, h('h1', {}, 'New task'), this.form));
  },

  async update(ctx) {
    const list = await ctx.api.missions();
    put(this.missions, list.map((m) => h('option', { value: m.id }, m.title || m.id)));
  },

  async submit(ctx) {
    const form = this.form;
    const value = (name) => form.elements[name].value.trim();
    const words = (name) => value(name).split(/[\s,]+/).filter(Boolean);
    for (const name of NEW_FIELDS) {
      form.elements[name].removeAttribute('aria-invalid');
      put(form.querySelector(`#new-${name}-error`)).hidden = true;
    }
    this.error.hidden = true;
    const body = { message: form.elements.message.value, priority: value('priority') };
    if (value('missionId')) body.missionId = value('missionId');
    if (words('dependsOn').length) body.dependsOn = words('dependsOn');
    if (words('requiredTags').length) body.requiredTags = words('requiredTags');
    if (value('targetNodeId')) body.targetNodeId = value('targetNodeId');
    if (value('targetSessionId')) body.targetSessionId = value('targetSessionId');
    const button = form.querySelector('button[type="submit"]');
    button.disabled = true;
    try {
      const t = await ctx.api.enqueue(body);
      ctx.toast(`enqueued ${short(t.id)}`);
      window.location.hash = ctx.link('task', t.id);
    } catch (err) {
      put(this.error, err.message).hidden = false;
      if (NEW_FIELDS.includes(err.field)) {
        const control = form.elements[err.field];
        const item = err.index !== null && err.index !== undefined ? `item ${err.index + 1}: ` : '';
        control.setAttribute('aria-invalid', 'true');
        put(form.querySelector(`#new-${err.field}-error`), item + err.problem).hidden = false;
        control.focus();
      }
    } finally {
      button.disabled = false;
    }
  },
};

// ── Task ──────────────────────────────────────────────────────────────────

async function neighbourhood(ctx, task) {
  const nodes = new Map([[task.id, { id: task.id, status: statusOf(task), label: task.message, focus: true }]]);
  const edges = [];
  const LIMIT = 60;
  // Up: what it depends on, three levels.
  let frontier = [task];
  for (let level = 0; level < 3 && frontier.length && nodes.size < LIMIT; level++) {
    const next = [];
    for (const t of frontier) {
      for (const dep of t.dependsOn || []) {
        edges.push({ from: dep, to: t.id });
        if (nodes.has(dep) || nodes.size >= LIMIT) continue;
        try {
          const d = await ctx.api.task(dep);
          nodes.set(dep, { id: dep, status: statusOf(d), label: d.message });
          next.push(d);
        } catch {
          nodes.set(dep, { id: dep, status: 'missing', label: dep });
        }
      }
    }
    frontier = next;
  }
  // Down: what depends on it, three levels.
  frontier = [task];
  for (let level = 0; level < 3 && frontier.length && nodes.size < LIMIT; level++) {
    const next = [];
    for (const t of frontier) {
      const dependents = await ctx.api.tasks({ dependsOn: t.id, limit: LIMIT });
      for (const d of dependents) {
        edges.push({ from: t.id, to: d.id });
        if (nodes.has(d.id) || nodes.size >= LIMIT) continue;
        nodes.set(d.id, { id: d.id, status: statusOf(d), label: d.message });
        next.push(d);
      }
    }
    frontier = next;
  }
  return { nodes: [...nodes.values()], edges };
}

/** What a ledger entry says beyond its kind, in words. */
function entryDetail(e) {
  const p = e.payload || {};
  switch (e.kind) {
    case 'task_dispatched': return p.message || '';
    case 'task_priority_changed': return `${priorityWord(p.from)} → ${priorityWord(p.to)}` + (p.reason ? `: ${p.reason}` : '');
    case 'task_progress': return [Number.isFinite(p.percent) ? `${p.percent}%` : '', p.note || ''].filter(Boolean).join(' ');
    case 'task_unblocked': return p.dependencyId ? `dependency ${p.dependencyId} is back in the queue` : '';
    case 'reservation_granted': case 'reservation_released': case 'reservation_expired': case 'reservation_renewed':
      return (p.patterns || []).join(', ');
    case 'reservation_denied': return `${(p.patterns || []).join(', ')}: held by ` +
      (p.conflicts || []).map((c) => `${c.sessionId} on ${c.nodeId}` + (c.taskId ? ` for ${c.taskId}` : '')).join('; ');
    default: return reasonWords(p.reason) || p.error || p.summary || p.result || '';
  }
}

function entryLine(ctx, e) {
  const p = e.payload || {};
  const who = [e.sessionId, e.nodeId].filter(Boolean).join(' on ');
  const detail = String(entryDetail(e) || '');
  return h('li', { class: `entry kind-${e.kind}`, 'data-kind': e.kind },
    h('time', { datetime: e.timestamp, title: e.timestamp }, when(e.timestamp)),
    h('span', { class: 'kind', title: e.kind }, kindWord(e.kind)),
    p.taskId ? h('a', { href: ctx.link('task', p.taskId), class: 'id', title: p.taskId }, short(p.taskId)) : null,
    who ? h('span', { class: 'who' }, who) : null,
    detail ? h('span', { class: 'detail' }, detail.length > 200 ? detail.slice(0, 199) + '…' : detail) : null);
}

/** One line of the task's facts: a label and what follows it. */
function fact(label, ...value) {
  return [h('dt', {}, label), h('dd', {}, value)];
}

const task = {
  mount(ctx) {
    this.id = ctx.arg;
    put(ctx.main, h('div', { class: 'task-page' }, h('p', { class: 'hint' }, 'loading…')));
  },

  async update(ctx) {
    const t = await ctx.api.task(this.id);
    const [history, graph, reserved] = await Promise.all([
      ctx.api.ledger({ task: t.id, tail: 500 }), neighbourhood(ctx, t),
      (t.paths || []).length ? ctx.api.reservations({ scope: t.pathsScope }) : [],
    ]);
    const mine = reserved.filter((r) => r.taskId === t.id);
    const known = new Map(graph.nodes.filter((n) => !n.focus).map((n) => [n.id, n.status === 'missing' ? null : { id: n.id, status: n.status }]));
    const status = statusOf(t);
    const open = t.status === 'pending' || t.status === 'assigned';
    const now = Date.now();
    const why = t.status === 'pending' ? waits(ctx, t, known, now) : [];
    const priority = open
      ? h('select', { name: 'priority', 'aria-label': 'priority', 'data-action': 'priority', onchange: (e) => changePriority(ctx, t, e.target) },
        PRIORITIES.map((p) => h('option', { value: p, selected: p === (t.priority || 'normal') }, priorityWord(p))))
      : priorityWord(t.priority);
    const facts = [
      fact('Status', badge(status), why.length ? h('span', { class: 'reasons' }, why.map((r) => h('span', { class: 'reason' }, r))) : null),
      fact('Priority', priority),
      t.archived ? fact('Archived', 'finished long enough ago to leave the hot database: kept in the archive, read-only') : null,
      t.missionId ? fact('Mission', h('a', { href: ctx.link('mission', t.missionId) }, t.missionId)) : null,
      t.taskMode ? fact('Kind of work', plain(t.taskMode), t.readonly ? ' (read-only)' : '') : null,
      (t.dependsOn || []).length ? fact('Depends on', h('span', { class: 'deps' }, t.dependsOn.map((id) => h('span', {},
        h('a', { href: ctx.link('task', id), title: id }, short(id)),
        known.has(id) ? ` (${known.get(id) ? statusWord(known.get(id).status).toLowerCase() : 'no such task'})` : '')))) : null,
      limits(t).length ? fact('Who may claim it', limits(t).join('; ')) : null,
      (t.paths || []).length ? fact('Paths', h('span', { class: 'paths' }, t.paths.join(', ')),
        mine.length ? ` (reserved by ${mine[0].sessionId} on ${mine[0].nodeId})` : t.status === 'pending' ? ' (reserved when claimed)' : '') : null,
      t.assignedSessionId ? fact(t.status === 'assigned' ? 'Worker' : 'Last worker', holder(t)) : null,
      t.status === 'assigned' && t.dispatchTimestamp ? fact('Running for', span(now - Date.parse(t.dispatchTimestamp))) : null,
      t.status === 'assigned' && t.leaseExpiresAt ? fact('Lease', `ends ${ago(t.leaseExpiresAt)}`) : null,
      t.notBefore ? fact('Not before', when(t.notBefore)) : null,
      fact('Enqueued', h('span', { title: when(t.createdAt) }, ago(t.createdAt))),
      t.finishedAt ? fact('Finished', h('span', { title: when(t.finishedAt) }, ago(t.finishedAt))) : null,
      t.finalSummary ? fact('Summary', t.finalSummary) : null,
      t.failureReason ? fact('Why it failed', reasonWords(t.failureReason)) : null,
      t.cancelReason && t.cancelReason !== t.failureReason ? fact('Why it was cancelled', reasonWords(t.cancelReason)) : null,
      t.requeueCount ? fact('Requeued', `${t.requeueCount} time${t.requeueCount === 1 ? '' : 's'}`) : null,
      t.dispatchNonce ? fact('Epoch', String(t.dispatchNonce)) : null,
    ];
    const actions = [];
    if (open) {
      actions.push(h('button', { type: 'button', class: 'danger', 'data-action': 'cancel', onclick: () => act(ctx, `Cancel task ${t.id}?`, (reason) => ctx.api.cancel(t.id, reason)) }, 'Cancel'));
    }
    if (!t.archived && (t.status === 'failed' || t.status === 'cancelled')) {
      actions.push(h('button', { type: 'button', 'data-action': 'requeue', onclick: () => act(ctx, `Put task ${t.id} back in the queue?`, (reason) => ctx.api.requeue(t.id, false, reason)) }, 'Requeue'));
    }
    if (t.status === 'assigned' || (t.status === 'completed' && !t.archived)) {
      const text = t.status === 'assigned'
        ? `Take task ${t.id} from ${holder(t)} and put it back in the queue?`
        : `Run the finished task ${t.id} again?`;
      actions.push(h('button', { type: 'button', 'data-action': 'force-requeue', onclick: () => act(ctx, text, (reason) => ctx.api.requeue(t.id, true, reason)) }, 'Requeue anyway'));
    }
    const raw = Object.entries(t).map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, typeof v === 'object' ? JSON.stringify(v) : String(v))));
    const firstLine = t.message.split('\n')[0];
    const title = firstLine.length > 160 ? firstLine.slice(0, 159) + '…' : firstLine;
    put(ctx.main.querySelector('.task-page'),
      h('h1', {}, badge(status), ' ', title),
      title !== t.message ? h('p', { class: 'message' }, t.message) : null,
      actions.length ? h('div', { class: 'actions' }, actions) : null,
      t.progress || t.status === 'assigned'
        ? h('section', { class: 'progress-section' }, h('h2', {}, t.status === 'assigned' ? 'Progress' : 'Last progress report'),
          t.progress ? progressReport(t.progress) : h('p', { class: 'hint' }, 'No progress reported yet.'))
        : null,
      h('dl', { class: 'facts' }, facts),
      h('section', { class: 'graph' }, h('h2', {}, 'Dependencies'),
        graph.nodes.length > 1 ? null : h('p', { class: 'hint' }, 'No dependencies either way.'),
        dag(graph.nodes, graph.edges, (id) => ctx.link('task', id))),
      h('section', { class: 'history' }, h('h2', {}, 'History'), h('ol', { class: 'timeline' }, history.map((e) => entryLine(ctx, e)))),
      h('details', { class: 'raw' }, h('summary', {}, 'All fields'), h('div', { class: 'scroll' }, h('table', { class: 'fields' }, raw))));
  },
};

async function changePriority(ctx, t, select) {
  try {
    await ctx.api.priority(t.id, select.value);
    ctx.toast(`priority: ${priorityWord(select.value).toLowerCase()}`);
  } catch (err) {
    ctx.toast(err.message, true);
  }
  ctx.refresh();
}

async function act(ctx, text, run, ...extra) {
  const reason = h('input', { type: 'text', name: 'reason', placeholder: 'reason (optional)', 'aria-label': 'reason' });
  if (!(await ctx.confirm(text, [...extra, reason]))) return;
  try {
    await run(reason.value.trim() || undefined);
    ctx.toast('done');
  } catch (err) {
    ctx.toast(err.message, true);
  }
  ctx.refresh();
}

// ── Missions ──────────────────────────────────────────────────────────────

const MISSION_PARTS = ['completed', 'assigned', 'pending', 'failed', 'cancelled'];

function missionProgress(p) {
  const parts = MISSION_PARTS.map((st) => (p[st] ? h('span', { class: `bar status-${st}`, 'data-width': p[st] / Math.max(1, p.total) }) : null));
  const bar = h('div', { class: 'progress', title: MISSION_PARTS.map((st) => `${statusWord(st)} ${p[st] || 0}`).join(', ') }, parts);
  for (const el of bar.children) el.style.flexGrow = el.dataset.width;
  return h('div', { class: 'progress-line' }, bar, h('span', {}, `${p.percentComplete}% of ${p.total} done`));
}

const missions = {
  mount(ctx) { put(ctx.main, h('div', { class: 'missions' })); },
  async update(ctx) {
    const list = await ctx.api.missions();
    put(ctx.main.querySelector('.missions'), h('h1', {}, 'Missions'),
      list.length ? h('ul', { class: 'mission-list' }, list.map((m) => h('li', { class: 'mission', 'data-mission': m.id },
        h('a', { href: ctx.link('mission', m.id) }, m.title || m.id), ' ', h('span', { class: 'badge', title: m.status }, statusWord(m.status)),
        missionProgress(m.progress)))) : h('p', { class: 'hint' }, 'No missions in this mesh.'));
  },
};

const mission = {
  mount(ctx) { this.id = ctx.arg; put(ctx.main, h('div', { class: 'mission-page' })); },
  async update(ctx) {
    const m = await ctx.api.mission(this.id);
    const ids = new Set(m.tasks.map((t) => t.id));
    const nodes = m.tasks.map((t) => ({ id: t.id, status: statusOf(t), label: t.message }));
    const edges = m.tasks.flatMap((t) => (t.dependsOn || []).filter((d) => ids.has(d)).map((d) => ({ from: d, to: t.id })));
    put(ctx.main.querySelector('.mission-page'),
      h('h1', {}, m.title || m.id, ' ', h('span', { class: 'badge', title: m.status }, statusWord(m.status))),
      m.goal ? h('p', {}, m.goal) : null,
      missionProgress(m.progress),
      h('div', { class: 'actions' }, h('a', { class: 'button', href: ctx.link('new', m.id) }, 'New task in this mission')),
      h('section', { class: 'graph' }, h('h2', {}, 'Tasks'), dag(nodes, edges, (id) => ctx.link('task', id))));
  },
};

// ── Workers and coordinators ──────────────────────────────────────────────

const workers = {
  mount(ctx) { put(ctx.main, h('div', { class: 'workers' }), webhookForm(ctx)); },
  async update(ctx) {
    const [status, held, counters, assigned, reservations] = await Promise.all([
      ctx.api.status(), ctx.api.held(), metrics(), ctx.api.tasks({ status: 'assigned', limit: MAX }), ctx.api.reservations(),
    ]);
    // An assigned task's updatedAt moves with its claim and every heartbeat.
    const running = new Map(assigned.map((t) => [t.id, t]));
    const nodes = new Map();
    const at = (node) => { if (!nodes.has(node)) nodes.set(node, []); return nodes.get(node); };
    for (const a of status.activeAssignments) {
      const t = running.get(a.id);
      at(a.nodeId || '?').push(h('tr', { class: 'busy' }, h('td', {}, a.sessionId || '?'), h('td', {}, 'working'),
        h('td', {}, h('a', { href: ctx.link('task', a.id) }, a.message.slice(0, 60)), t && t.progress ? progressReport(t.progress) : null),
        h('td', {}, a.dispatchTimestamp ? span(Date.now() - Date.parse(a.dispatchTimestamp)) : ''),
        h('td', {}, t ? ago(t.updatedAt) : ''),
        h('td', {}, a.leaseExpiresAt ? `lease ends ${ago(a.leaseExpiresAt)}` : ''), h('td', {}, a.epoch)));
    }
    for (const i of status.idleSessions) {
      at(i.nodeId).push(h('tr', { class: 'idle' }, h('td', {}, i.sessionId), h('td', {}, 'idle', i.providerType ? ` (${i.providerType})` : ''), h('td', {}, ''),
        h('td', {}, ''), h('td', {}, ''), h('td', {}, 'report ends ' + ago(new Date(i.expiresAt).toISOString())), h('td', {}, '')));
    }
    const drains = Object.entries(counters)
      .filter(([k]) => k.startsWith('agentmesh_drain') || k === 'agentmesh_delivered_events_total')
      .map(([k, v]) => [k.replace(/^agentmesh_/, ''), v]);
    const table = (heads, rows) => h('div', { class: 'scroll' }, h('table', {}, h('tr', {}, heads.map((c) => h('th', {}, c))), rows));
    put(ctx.main.querySelector('.workers'),
      h('h1', {}, 'Workers'),
      nodes.size ? [...nodes.entries()].map(([node, rows]) => h('section', { class: 'node' }, h('h2', {}, 'Node ', node),
        table(['Session', 'State', 'Task', 'Running for', 'Last heard', 'Lease or report', 'Epoch'], rows)))
        : h('p', { class: 'hint' }, 'No busy or idle sessions.'),
      h('h1', {}, 'Coordinators'),
      table(['Daemon', 'Run', 'Session', 'Events waiting'],
        status.pendingByCoordinator.map((c) => h('tr', {}, h('td', {}, c.daemonId || (c.runId || c.sessionId ? '' : 'everyone (broadcast)')), h('td', {}, c.runId || ''), h('td', {}, c.sessionId || ''), h('td', {}, c.count)))),
      h('section', { class: 'reservations' }, h('h1', {}, 'Path reservations'),
      reservations.length
        ? table(['Holder', 'Paths', 'Kind', 'Task', 'Until', 'Repository', 'Why'], reservations.map((r) => h('tr', { class: 'reservation', 'data-reservation': r.id },
          h('td', {}, `${r.sessionId} on ${r.nodeId}`), h('td', {}, r.patterns.join(', ')), h('td', {}, r.exclusive ? 'exclusive' : 'shared'),
          h('td', {}, r.taskId ? h('a', { href: ctx.link('task', r.taskId), title: r.taskId }, short(r.taskId)) : ''),
          h('td', {}, r.expiresAt ? `lapses ${ago(r.expiresAt)}` : 'while the task is held'), h('td', {}, r.scope), h('td', {}, r.reason || ''))))
        : h('p', { class: 'hint' }, 'No paths are reserved.')),
      h('section', { class: 'webhooks' }, h('h1', {}, 'Webhooks'),
      (status.webhooks || []).length
        ? table(['Receiver', 'Sends', 'State', 'Delivered', 'Last attempt', ''], status.webhooks.map((w) => {
          const last = w.log && w.log.length ? w.log[w.log.length - 1] : null;
          const failing = w.state === 'failing';
          return h('tr', { class: failing ? 'webhook failing' : 'webhook', 'data-webhook': w.id },
            h('td', { title: w.id }, w.url, w.description ? h('div', { class: 'hint' }, w.description) : null),
            h('td', {}, (w.kinds.length ? w.kinds.map((k) => (k.endsWith('*') ? k : kindWord(k))).join(', ') : 'every entry') + (w.tags.length ? ` of tasks tagged ${w.tags.join(', ')}` : '')),
            h('td', {}, failing ? `failing since ${ago(w.failingSince)}: ${w.lastError || ''}`
              : w.stuckOn ? `retrying (${w.failures} failed): ${w.lastError || ''}` : 'delivering'),
            h('td', {}, w.delivered),
            h('td', {}, last ? `${last.status || 'no answer'} in ${last.latencyMs} ms, ${ago(last.at)}` : 'none yet'),
            h('td', {}, failing ? [
              h('button', { type: 'button', 'data-action': 'webhook-resume', onclick: () => act(ctx, `Deliver again to ${w.url}, from the entry it is stuck on?`, () => ctx.api.webhookResume(w.id)) }, 'Resume'), ' ',
              h('button', { type: 'button', class: 'quiet', 'data-action': 'webhook-skip', onclick: () => act(ctx, `Skip the entry ${w.url} is stuck on (it will never be sent there)?`, () => ctx.api.webhookSkip(w.id)) }, 'Skip entry'), ' ',
            ] : '',
            h('button', { type: 'button', class: 'quiet', 'data-action': 'webhook-remove', onclick: () => act(ctx, `Remove the webhook to ${w.url}? Nothing more is sent there.`, () => ctx.api.webhookRemove(w.id)) }, 'Remove')));
        }))
        : h('p', { class: 'hint' }, 'No webhooks. Add one with: agentmesh webhook add URL')),
      h('h2', {}, `Held events (${held.length})`),
      held.length ? h('ul', { class: 'held' }, held.map((e) => h('li', {},
        h('span', { class: 'kind' }, e.event ? plain(e.event) : 'an event'), ' ', reasonWords(e.reason), ' ',
        e.taskId ? h('a', { href: ctx.link('task', e.taskId), title: e.taskId }, short(e.taskId)) : null, ' ', ago(e.heldAt), ' ',
        h('button', { type: 'button', 'data-action': 'requeue-held', onclick: () => act(ctx, `Put the held event ${e.event || e.heldEntryId} back in the inbox?`, () => ctx.api.requeueHeld(e.heldEntryId)) }, 'Put back'))))
        : h('p', { class: 'hint' }, 'No events are held.'),
      h('h2', {}, 'Coordinator events, since this daemon started'),
      h('table', { class: 'counters' }, drains.map(([k, v]) => h('tr', {}, h('th', { title: k }, counterWords(k)), h('td', {}, v)))));
  },
};

/** The form that adds a webhook; kept across the page's live updates. */
function webhookForm(ctx) {
  const url = h('input', { type: 'text', id: 'webhook-url', name: 'url', placeholder: 'receiver URL: https, or http to a loopback host', 'aria-label': 'receiver URL' });
  const kinds = h('input', { type: 'text', id: 'webhook-kinds', name: 'kinds', placeholder: 'kinds: task_completed, task_* (every kind when empty)', 'aria-label': 'ledger kinds' });
  const description = h('input', { type: 'text', id: 'webhook-description', name: 'description', placeholder: 'what it is for', 'aria-label': 'description' });
  const out = h('p', { class: 'webhook-result', 'aria-live': 'polite' });
  const submit = async (e) => {
    e.preventDefault();
    const body = { url: url.value.trim(), kinds: kinds.value.split(',').map((k) => k.trim()).filter(Boolean) };
    if (description.value.trim()) body.description = description.value.trim();
    try {
      const added = await ctx.api.addWebhook(body);
      put(out, 'Added ', h('code', {}, added.webhook.id), '. Its signing secret, shown this once (receivers check signatures with it): ',
        h('code', { class: 'webhook-secret' }, added.secret));
      url.value = ''; kinds.value = ''; description.value = '';
    } catch (err) {
      put(out, h('span', { class: 'error' }, err.message));
    }
    ctx.refresh();
  };
  return h('form', { class: 'add-webhook', onsubmit: submit }, h('h2', {}, 'Add a webhook'),
    h('div', { class: 'fields' }, url, kinds, description, h('button', { type: 'submit', id: 'add-webhook' }, 'Add webhook')), out);
}

// ── Ledger ────────────────────────────────────────────────────────────────

const ledger = {
  mount(ctx) {
    this.kind = '';
    this.cursor = null; // null: live tail; otherwise paging from the start
    this.shown = false;
    this.list = h('ol', { class: 'timeline tail' });
    this.pager = h('div', { class: 'pager' });
    put(ctx.main, h('h1', {}, 'Ledger'),
      h('form', { class: 'filters', onsubmit: (e) => e.preventDefault() },
        h('select', { name: 'kind', 'aria-label': 'kind', onchange: (e) => { this.kind = e.target.value; this.shown = false; ctx.refresh(); } },
          h('option', { value: '' }, 'every kind'), KINDS.map((k) => h('option', { value: k }, kindWord(k)))),
        h('button', { type: 'button', class: 'quiet', onclick: () => { this.cursor = null; this.shown = false; ctx.refresh(); } }, 'Newest, live'),
        h('button', { type: 'button', class: 'quiet', onclick: () => { this.cursor = ''; ctx.refresh(); } }, 'From the start')),
      this.list, this.pager);
  },
  async update(ctx, entries) {
    if (this.cursor === null) {
      if (entries && this.shown) {
        // Live: the stream's new entries go on top.
        for (const e of entries) if (!this.kind || e.kind === this.kind) this.list.prepend(entryLine(ctx, e));
        while (this.list.children.length > 300) this.list.lastChild.remove();
        return;
      }
      const tail = await ctx.api.ledger({ tail: 100, kind: this.kind });
      put(this.list, tail.reverse().map((e) => entryLine(ctx, e)));
      put(this.pager);
      this.shown = true;
      return;
    }
    this.shown = false;
    const page = await ctx.api.slice({ afterId: this.cursor, kind: this.kind, limit: 100 });
    put(this.list, page.entries.map((e) => entryLine(ctx, e)));
    put(this.pager, page.cursor.hasMore
      ? h('button', { type: 'button', onclick: () => { this.cursor = page.cursor.nextAfterId; ctx.refresh(); } }, 'Next page')
      : h('span', { class: 'hint' }, 'End of the ledger.'));
  },
};

export const views = { board, ready, new: create, task, missions, mission, workers, ledger };
