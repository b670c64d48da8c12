// The views. Each has mount(ctx), which builds what stays (filters, headings),
// and update(ctx, entries), which refetches what it shows; the app calls update
// again when the mesh's stream says it changed.

import { h, put, span, ago, when, short } from './dom.js';
import { dag } from './graph.js';
import { metrics } from './api.js';

const STATUSES = ['pending', 'assigned', 'completed', 'failed', 'cancelled'];
const PAGE = 50;

function card(ctx, t) {
  const now = Date.now();
  const why = [];
  if (t.status === 'pending') {
    if (t.dependsOn && t.dependsOn.length) why.push(h('span', { class: 'why deps' }, 'after ', t.dependsOn.map(short).join(', ')));
    if (t.requiredTags && t.requiredTags.length) why.push(h('span', { class: 'why tags' }, 'needs ', t.requiredTags.join(', ')));
    if (t.notBefore && Date.parse(t.notBefore) > now) why.push(h('span', { class: 'why later' }, 'not before ', ago(t.notBefore)));
    if (t.blockedReason) why.push(h('span', { class: 'why blocked' }, t.blockedReason));
    if (t.parked) why.push(h('span', { class: 'why parked' }, 'parked'));
    if (t.targetNodeId) why.push(h('span', { class: 'why pin' }, 'node ', t.targetNodeId));
    if (t.targetSessionId) why.push(h('span', { class: 'why pin' }, 'session ', t.targetSessionId));
  }
  const holder = t.status === 'assigned' && t.assignedSessionId
    ? h('div', { class: 'holder' }, `${t.assignedSessionId} @ ${t.assignedNodeId || '?'}`,
      t.dispatchTimestamp ? ` · for ${span(now - Date.parse(t.dispatchTimestamp))}` : '',
      t.updatedAt ? ` · last heard ${ago(t.updatedAt)}` : '',
      t.leaseExpiresAt ? ` · lease ${ago(t.leaseExpiresAt)}` : '')
    : null;
  return h('article', { class: `card status-${t.status}`, 'data-task': t.id },
    h('a', { class: 'title', href: ctx.link('task', t.id) }, t.message.length > 140 ? t.message.slice(0, 139) + '…' : t.message),
    h('div', { class: 'meta' },
      h('span', { class: `prio prio-${t.priority || 'normal'}` }, t.priority || 'normal'),
      t.taskMode ? h('span', {}, t.taskMode) : null,
      h('span', { title: when(t.createdAt) }, ago(t.createdAt)),
      t.dispatchNonce ? h('span', { title: 'epoch' }, 'epoch ', t.dispatchNonce) : null,
      h('span', { class: 'id' }, short(t.id))),
    holder,
    why.length ? h('div', { class: 'whys' }, why) : null);
}

// ── Board ─────────────────────────────────────────────────────────────────

const board = {
  filters: { tag: '', node: '', session: '', mission: '', q: '' },
  shown: Object.fromEntries(STATUSES.map((st) => [st, PAGE])),

  mount(ctx) {
    this.shown = Object.fromEntries(STATUSES.map((st) => [st, PAGE]));
    const inputs = Object.keys(this.filters).map((key) =>
      h('input', {
        type: 'search', name: key, value: this.filters[key], 'aria-label': key,
        placeholder: key === 'q' ? 'text' : key,
        oninput: (e) => { this.filters[key] = e.target.value; clearTimeout(this.typing); this.typing = setTimeout(() => ctx.refresh(), 250); },
      }));
    this.columns = h('div', { class: 'columns' }, STATUSES.map((st) => h('section', { class: 'column', 'data-status': st },
      h('h2', {}, st, ' ', h('span', { class: 'count' })), h('div', { class: 'cards' }), h('div', { class: 'more' }))));
    put(ctx.main, h('form', { class: 'filters', onsubmit: (e) => e.preventDefault() }, inputs), this.columns);
  },

  async update(ctx) {
    const filtered = Object.values(this.filters).some((v) => v.trim());
    const [status, ...pages] = await Promise.all([
      ctx.api.status(),
      ...STATUSES.map((st) => ctx.api.tasks({ status: st, ...this.filters, limit: this.shown[st] + 1 })),
    ]);
    STATUSES.forEach((st, i) => {
      const col = this.columns.querySelector(`[data-status="${st}"]`);
      const tasks = pages[i];
      const more = tasks.length > this.shown[st];
      const list = more ? tasks.slice(0, this.shown[st]) : tasks;
      const total = status.tasks[st] || 0;
      col.querySelector('.count').textContent = filtered ? `${list.length}${more ? '+' : ''}` : String(total);
      put(col.querySelector('.cards'), list.map((t) => card(ctx, t)));
      put(col.querySelector('.more'), more
        ? h('button', { type: 'button', class: 'quiet', onclick: () => { this.shown[st] += PAGE * 4; ctx.refresh(); } }, `show more (${list.length} shown)`)
        : null);
    });
    ctx.main.dataset.painted = String(performance.now());
  },
};

// ── Task ──────────────────────────────────────────────────────────────────

async function neighbourhood(ctx, task) {
  const nodes = new Map([[task.id, { id: task.id, status: task.status, label: task.message, focus: true }]]);
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
          nodes.set(dep, { id: dep, status: d.status, label: d.message });
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
        nodes.set(d.id, { id: d.id, status: d.status, label: d.message });
        next.push(d);
      }
    }
    frontier = next;
  }
  return { nodes: [...nodes.values()], edges };
}

function entryLine(ctx, e) {
  const p = e.payload || {};
  const who = [e.sessionId, e.nodeId].filter(Boolean).join(' @ ');
  const detail = [p.from && p.to ? `${p.from} → ${p.to}` : '', p.reason || p.error || p.result || p.summary || ''].filter(Boolean).join(': ');
  return h('li', { class: `entry kind-${e.kind}`, 'data-kind': e.kind },
    h('time', { datetime: e.timestamp, title: e.timestamp }, when(e.timestamp)),
    h('span', { class: 'kind' }, e.kind),
    p.taskId ? h('a', { href: ctx.link('task', p.taskId), class: 'id' }, short(p.taskId)) : null,
    who ? h('span', { class: 'who' }, who) : null,
    detail ? h('span', { class: 'detail' }, String(detail).slice(0, 200)) : null);
}

const task = {
  mount(ctx) {
    this.id = ctx.arg;
    put(ctx.main, h('div', { class: 'task-page' }, h('p', {}, 'loading…')));
  },

  async update(ctx) {
    const t = await ctx.api.task(this.id);
    const [history, graph] = await Promise.all([ctx.api.ledger({ task: t.id, tail: 500 }), neighbourhood(ctx, t)]);
    const actions = [];
    if (t.status === 'pending' || t.status === 'assigned') {
      actions.push(h('button', { type: 'button', class: 'danger', 'data-action': 'cancel', onclick: () => act(ctx, `Cancel task ${t.id}?`, (reason) => ctx.api.cancel(t.id, reason)) }, 'Cancel'));
    }
    if (t.status !== 'pending') {
      actions.push(h('button', { type: 'button', 'data-action': 'requeue', onclick: () => act(ctx, `Requeue task ${t.id}?`, (reason) => ctx.api.requeue(t.id, false, reason)) }, 'Requeue'));
    }
    if (t.status === 'pending' || t.status === 'assigned') {
      actions.push(h('button', { type: 'button', 'data-action': 'priority', onclick: () => changePriority(ctx, t) }, 'Change priority'));
    }
    actions.push(h('button', { type: 'button', 'data-action': 'force-requeue', onclick: () => act(ctx, `Force a requeue of task ${t.id}, whatever its status and retry budget?`, (reason) => ctx.api.requeue(t.id, true, reason)) }, 'Force requeue'));
    const fields = Object.entries(t).map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, typeof v === 'object' ? JSON.stringify(v) : String(v))));
    put(ctx.main.querySelector('.task-page'),
      h('h1', {}, h('span', { class: `badge status-${t.status}` }, t.status), ' ', t.message.slice(0, 200)),
      h('div', { class: 'actions' }, actions),
      h('section', { class: 'graph' }, h('h2', {}, 'Dependencies'),
        graph.nodes.length > 1 ? null : h('p', { class: 'hint' }, 'no dependencies either way'),
        dag(graph.nodes, graph.edges, (id) => ctx.link('task', id))),
      h('section', { class: 'history' }, h('h2', {}, 'History'), h('ol', { class: 'timeline' }, history.map((e) => entryLine(ctx, e)))),
      h('section', {}, h('h2', {}, 'Fields'), h('table', { class: 'fields' }, fields)));
  },
};

async function changePriority(ctx, t) {
  const now = t.priority || 'normal';
  const choice = h('select', { name: 'priority', 'aria-label': 'priority' },
    ['high', 'normal', 'low'].map((p) => h('option', { value: p, selected: p === now }, p)));
  await act(ctx, `Change the priority of task ${t.id} (now ${now})?`, (reason) => ctx.api.priority(t.id, choice.value, reason), choice);
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

function progress(p) {
  const parts = STATUSES.map((st) => p[st] ? h('span', { class: `bar status-${st}`, style: null, 'data-width': p[st] / Math.max(1, p.total) }) : null);
  const bar = h('div', { class: 'progress', title: STATUSES.map((st) => `${st} ${p[st] || 0}`).join(', ') }, parts);
  for (const el of bar.children) el.style.flexGrow = el.dataset.width;
  return h('div', { class: 'progress-line' }, bar, h('span', {}, `${p.percentComplete}% of ${p.total}`));
}

const missions = {
  mount(ctx) { put(ctx.main, h('div', { class: 'missions' })); },
  async update(ctx) {
    const list = await ctx.api.missions();
    put(ctx.main.querySelector('.missions'), h('h1', {}, 'Missions'),
      list.length ? h('ul', { class: 'mission-list' }, list.map((m) => h('li', { class: 'mission', 'data-mission': m.id },
        h('a', { href: ctx.link('mission', m.id) }, m.title || m.id), ' ', h('span', { class: 'badge' }, m.status),
        progress(m.progress)))) : h('p', { class: 'hint' }, 'no missions in this mesh'));
  },
};

const mission = {
  mount(ctx) { this.id = ctx.arg; put(ctx.main, h('div', { class: 'mission-page' })); },
  async update(ctx) {
    const detail = await ctx.api.mission(this.id);
    const m = detail;
    const ids = new Set(detail.tasks.map((t) => t.id));
    const nodes = detail.tasks.map((t) => ({ id: t.id, status: t.status, label: t.message }));
    const edges = detail.tasks.flatMap((t) => (t.dependsOn || []).filter((d) => ids.has(d)).map((d) => ({ from: d, to: t.id })));
    put(ctx.main.querySelector('.mission-page'),
      h('h1', {}, m.title || m.id, ' ', h('span', { class: 'badge' }, m.status)),
      m.goal ? h('p', {}, m.goal) : null,
      progress(m.progress),
      h('section', { class: 'graph' }, h('h2', {}, 'Tasks'), dag(nodes, edges, (id) => ctx.link('task', id))));
  },
};

// ── Workers and coordinators ──────────────────────────────────────────────

const workers = {
  mount(ctx) { put(ctx.main, h('div', { class: 'workers' })); },
  async update(ctx) {
    const [status, held, counters, assigned] = await Promise.all([
      ctx.api.status(), ctx.api.held(), metrics(), ctx.api.tasks({ status: 'assigned', limit: 1000 }),
    ]);
    // An assigned task's updatedAt moves with its claim and every heartbeat.
    const heard = new Map(assigned.map((t) => [t.id, t.updatedAt]));
    const nodes = new Map();
    const at = (node) => { if (!nodes.has(node)) nodes.set(node, []); return nodes.get(node); };
    for (const a of status.activeAssignments) {
      at(a.nodeId || '?').push(h('tr', { class: 'busy' }, h('td', {}, a.sessionId || '?'), h('td', {}, 'busy'),
        h('td', {}, h('a', { href: ctx.link('task', a.id) }, a.message.slice(0, 60))),
        h('td', {}, a.dispatchTimestamp ? span(Date.now() - Date.parse(a.dispatchTimestamp)) : ''),
        h('td', {}, heard.has(a.id) ? ago(heard.get(a.id)) : ''),
        h('td', {}, a.leaseExpiresAt ? ago(a.leaseExpiresAt) : ''), h('td', {}, a.epoch)));
    }
    for (const i of status.idleSessions) {
      at(i.nodeId).push(h('tr', { class: 'idle' }, h('td', {}, i.sessionId), h('td', {}, 'idle'), h('td', {}, i.providerType),
        h('td', {}, ''), h('td', {}, ''), h('td', {}, 'report ends ' + ago(new Date(i.expiresAt).toISOString())), h('td', {}, '')));
    }
    const drains = Object.entries(counters).filter(([k]) => k.startsWith('agentmesh_drain'));
    put(ctx.main.querySelector('.workers'),
      h('h1', {}, 'Workers'),
      nodes.size ? [...nodes.entries()].map(([node, rows]) => h('section', { class: 'node' }, h('h2', {}, node),
        h('table', {}, h('tr', {}, ['session', 'state', 'task', 'held for', 'last heard', 'lease / report', 'epoch'].map((c) => h('th', {}, c))), rows)))
        : h('p', { class: 'hint' }, 'no busy or idle sessions'),
      h('h1', {}, 'Coordinators'),
      h('table', {}, h('tr', {}, ['daemon', 'run', 'session', 'inbox depth'].map((c) => h('th', {}, c))),
        status.pendingByCoordinator.map((c) => h('tr', {}, h('td', {}, c.daemonId || (c.runId || c.sessionId ? '' : '(broadcast)')), h('td', {}, c.runId || ''), h('td', {}, c.sessionId || ''), h('td', {}, c.count)))),
      h('h2', {}, `Held events (${held.length})`),
      h('ul', { class: 'held' }, held.map((e) => h('li', {},
        h('span', { class: 'kind' }, e.event || '?'), ' ', e.reason || '', ' ',
        e.taskId ? h('a', { href: ctx.link('task', e.taskId) }, short(e.taskId)) : null, ' ', ago(e.heldAt), ' ',
        h('button', { type: 'button', 'data-action': 'requeue-held', onclick: () => act(ctx, `Put held event ${e.event || e.heldEntryId} back in the inbox?`, () => ctx.api.requeueHeld(e.heldEntryId)) }, 'Requeue')))),
      h('h2', {}, 'Drain counters (this daemon)'),
      h('table', { class: 'counters' }, drains.map(([k, v]) => h('tr', {}, h('th', {}, k.replace(/^agentmesh_/, '')), h('td', {}, v)))));
  },
};

// ── Ledger ────────────────────────────────────────────────────────────────

const ledger = {
  mount(ctx) {
    this.kind = '';
    this.cursor = null; // null: live tail; otherwise paging from the start
    this.list = h('ol', { class: 'timeline live' });
    this.pager = h('div', { class: 'pager' });
    const kinds = ['', 'task_dispatched', 'task_claimed', 'task_completed', 'task_failed', 'task_cancelled', 'task_requeued', 'task_priority_changed', 'task_reclaimed', 'task_blocked', 'task_unblocked', 'completion_refused', 'heartbeat_refused', 'event_held', 'event_held_requeued'];
    put(ctx.main, h('h1', {}, 'Ledger'),
      h('form', { class: 'filters', onsubmit: (e) => e.preventDefault() },
        h('select', { name: 'kind', 'aria-label': 'kind', onchange: (e) => { this.kind = e.target.value; ctx.refresh(); } }, kinds.map((k) => h('option', { value: k }, k || 'every kind'))),
        h('button', { type: 'button', class: 'quiet', onclick: () => { this.cursor = null; ctx.refresh(); } }, 'live tail'),
        h('button', { type: 'button', class: 'quiet', onclick: () => { this.cursor = ''; ctx.refresh(); } }, 'from the start')),
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
      ? h('button', { type: 'button', onclick: () => { this.cursor = page.cursor.nextAfterId; ctx.refresh(); } }, 'next page')
      : h('span', { class: 'hint' }, 'end of the ledger'));
  },
};

export const views = { board, task, missions, mission, workers, ledger };
