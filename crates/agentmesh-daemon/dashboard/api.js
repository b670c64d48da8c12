// The public HTTP API, read with the session cookie. Requests that change
// something carry the header the daemon requires of cookie requests.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
    // A refused field is named first: "invalid dependsOn[0]: must not be blank".
    const named = code === 'invalid_input' ? /^invalid ([A-Za-z.]+)(?:\[(\d+)\])?: (.*)$/s.exec(message || '') : null;
    this.field = named ? named[1] : null;
    this.index = named && named[2] !== undefined ? Number(named[2]) : null;
    this.problem = named ? named[3] : message;
  }
}

async function call(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: { Accept: 'application/json' } };
  if (method !== 'GET') {
    init.headers['Content-Type'] = 'application/json';
    init.headers['X-Agentmesh-Request'] = '1';
    init.body = JSON.stringify(body || {});
  }
  const response = await fetch(path, init);
  if (response.status === 401) {
    window.location.assign('/');
    throw new ApiError(401, 'unauthorized', 'signed out');
  }
  const text = await response.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = null; }
  if (!response.ok) {
    const error = (json && json.error) || {};
    throw new ApiError(response.status, error.code || 'http_' + response.status, error.message || text);
  }
  return json;
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const text = q.toString();
  return text ? '?' + text : '';
}

const enc = encodeURIComponent;

/** Every mesh of the database. */
export const meshes = () => call('GET', '/v1/meshes');

/** The API of one mesh. */
export function mesh(id) {
  const base = '/v1/meshes/' + enc(id);
  return {
    id,
    base,
    tasks: (params) => call('GET', base + '/tasks' + query(params)),
    task: (taskId) => call('GET', base + '/tasks/' + enc(taskId)),
    enqueue: (body) => call('POST', base + '/tasks', body),
    cancel: (taskId, reason) => call('POST', base + '/tasks/' + enc(taskId) + '/cancel', { reason }),
    requeue: (taskId, force, reason) =>
      call('POST', base + '/tasks/' + enc(taskId) + '/requeue', { force: !!force, reason }),
    priority: (taskId, priority, reason) =>
      call('POST', base + '/tasks/' + enc(taskId) + '/priority', { priority, reason }),
    status: () => call('GET', base + '/status'),
    ledger: (params) => call('GET', base + '/ledger' + query(params)),
    slice: (params) => call('GET', base + '/ledger/slice' + query(params)),
    missions: () => call('GET', base + '/missions'),
    mission: (missionId) => call('GET', base + '/missions/' + enc(missionId)),
    held: () => call('GET', base + '/events/held'),
    requeueHeld: (heldEntryId) => call('POST', base + '/events/held/requeue', { ids: [heldEntryId] }),
    idle: () => call('GET', base + '/idle-sessions'),
    reservations: (params) => call('GET', base + '/reservations' + query(params)),
    addWebhook: (body) => call('POST', base + '/webhooks', body),
    webhookRemove: (id) => call('DELETE', base + '/webhooks/' + enc(id)),
    webhookResume: (id) => call('POST', base + '/webhooks/' + enc(id) + '/resume'),
    webhookSkip: (id) => call('POST', base + '/webhooks/' + enc(id) + '/skip'),
  };
}

/** The daemon's counters, as `name{labels}` → value. */
export async function metrics() {
  const response = await fetch('/metrics', { credentials: 'same-origin' });
  if (!response.ok) return {};
  const out = {};
  for (const line of (await response.text()).split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    out[line.slice(0, at)] = Number(line.slice(at + 1));
  }
  return out;
}

/** Signs out: the daemon forgets the cookie. */
export async function logout() {
  await fetch('/logout', { method: 'POST', credentials: 'same-origin', headers: { 'X-Agentmesh-Request': '1' } });
  window.location.assign('/');
}
