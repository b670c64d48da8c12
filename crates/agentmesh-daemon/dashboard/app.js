// The dashboard's shell: the address (#/<mesh>/<view>/<arg>), the mesh
// switcher, the live stream, the confirmation dialog.

import * as api from './api.js';
import { h, put } from './dom.js';
import { views } from './views.js';

const main = document.getElementById('main');
const live = document.getElementById('live');
const switcher = document.getElementById('mesh-switch');

let current = null; // { mesh, view, arg, api }
let stream = null;
let running = null;
let again = false;
let pending = [];

function parse() {
  const parts = window.location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  const [mesh, view, ...rest] = parts;
  return { mesh: mesh || null, view: views[view] ? view : 'board', arg: rest.join('/') || null };
}

function link(view, arg, mesh) {
  const m = encodeURIComponent(mesh || (current && current.mesh) || 'default');
  return `#/${m}/${view}` + (arg ? '/' + encodeURIComponent(arg) : '');
}

const toasts = document.getElementById('toasts');
function toast(text, bad) {
  const note = h('div', { class: bad ? 'toast bad' : 'toast', role: 'status' }, text);
  toasts.append(note);
  setTimeout(() => note.remove(), 4000);
}

const dialog = document.getElementById('confirm');
function confirm(text, extra) {
  put(document.getElementById('confirm-text'), text);
  put(document.getElementById('confirm-extra'), extra || null);
  dialog.returnValue = '';
  dialog.showModal();
  return new Promise((resolve) => dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true }));
}

const ctx = {
  main,
  link,
  toast,
  confirm,
  refresh: () => refresh(),
  get api() { return current.api; },
  get arg() { return current.arg; },
};

/** Runs the view's update; one at a time, and once more if asked meanwhile. */
async function refresh(entries) {
  if (entries) pending.push(...entries);
  if (running) { again = true; return running; }
  running = (async () => {
    do {
      again = false;
      const batch = pending;
      pending = [];
      const at = current;
      try {
        await views[at.view].update(ctx, batch.length ? batch : null);
        if (at === current) main.dataset.updated = String(Date.now());
      } catch (err) {
        // An update the address left behind has nothing left to show.
        if (err.status !== 401 && at === current) toast(err.message, true);
      }
    } while (again);
  })();
  try { await running; } finally { running = null; }
}

function connect(mesh) {
  if (stream) stream.close();
  live.dataset.state = 'connecting';
  live.textContent = 'connecting';
  stream = new EventSource(`/v1/meshes/${encodeURIComponent(mesh)}/stream`);
  let dropped = false;
  stream.addEventListener('ready', () => {
    live.dataset.state = 'live';
    live.textContent = 'live';
    // Back after a drop: what changed meanwhile is not replayed, so refetch.
    if (dropped) refresh();
  });
  stream.addEventListener('changed', (e) => {
    const data = JSON.parse(e.data);
    refresh(data.entries || []);
  });
  stream.onerror = () => { dropped = true; live.dataset.state = 'offline'; live.textContent = 'reconnecting'; };
}

async function route() {
  const want = parse();
  if (!want.mesh) {
    window.location.replace(link('board', null, switcher.value || 'default'));
    return;
  }
  const meshChanged = !current || current.mesh !== want.mesh;
  current = { ...want, api: api.mesh(want.mesh) };
  if (![...switcher.options].some((o) => o.value === want.mesh)) switcher.append(h('option', { value: want.mesh }, want.mesh));
  switcher.value = want.mesh;
  for (const a of document.querySelectorAll('a[data-view]')) {
    a.href = link(a.dataset.view);
    a.classList.toggle('here', a.dataset.view === want.view || (a.dataset.view === 'missions' && want.view === 'mission'));
  }
  document.body.dataset.view = want.view;
  if (meshChanged) connect(want.mesh);
  delete main.dataset.updated;
  views[want.view].mount(ctx);
  await refresh();
}

async function start() {
  document.getElementById('logout').addEventListener('click', () => api.logout());
  switcher.addEventListener('change', () => { window.location.hash = link('board', null, switcher.value); });
  try {
    const list = await api.meshes();
    const ids = list.map((m) => m.meshId);
    if (!ids.length) ids.push('default');
    put(switcher, ids.map((id) => h('option', { value: id }, id)));
  } catch (err) {
    toast(err.message, true);
  }
  window.addEventListener('hashchange', route);
  await route();
}

start();
