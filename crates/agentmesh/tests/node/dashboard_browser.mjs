// Drives the dashboard of a running `agentmesh serve` in Debian's headless
// Chromium (playwright-core, never a downloaded browser) and changes the mesh
// through the agentmesh CLI and the HTTP API, as workers do. Every page is
// also held to the layout rules of `layoutProblems`, on a desktop and on a
// phone. Run by crates/agentmesh/tests/dashboard.rs:
//
//   node dashboard_browser.mjs <base-url> <agentmesh-binary> <screenshot-dir>
//
// The token comes in AGENTMESH_TOKEN. Prints one JSON report on stdout (the
// timings the Rust test checks); any failed check throws and exits non-zero.

import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

const [base, bin, shots] = process.argv.slice(2);
const token = process.env.AGENTMESH_TOKEN;
mkdirSync(shots, { recursive: true });

const cli = (...args) => {
  const out = execFileSync(bin, ['--server', base, '--json', ...args], { encoding: 'utf8' });
  return JSON.parse(out);
};

const api = async (path, body) => {
  const response = await fetch(`${base}/v1/meshes/${path}`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  assert.ok(response.ok, `${path}: ${response.status} ${text}`);
  return JSON.parse(text);
};

/**
 * What breaks the layout of the page it runs in, in words (runs in the page):
 * - two visible leaves overlap, unless one contains the other. A leaf is a run
 *   of text, a control (button, input, select, textarea, image, SVG) or a badge;
 * - a badge (a filled, rounded label in type smaller than the page's) is taller
 *   than one line: it has swallowed content that is not a label;
 * - anything reaches past the right edge of the viewport outside a container
 *   that scrolls or clips, or the page itself is wider than the viewport.
 */
function layoutProblems() {
  const problems = [];
  const describe = (el) => {
    const cls = typeof el.className === 'string' && el.className.trim() ? '.' + el.className.trim().split(/\s+/).join('.') : '';
    const text = (el.innerText || el.value || el.textContent || '').trim().replace(/\s+/g, ' ');
    return `${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}${cls} "${text.length > 40 ? text.slice(0, 39) + '…' : text}"`;
  };
  const pageFont = parseFloat(getComputedStyle(document.body).fontSize);
  const isBadge = (style) => style.backgroundColor !== 'rgba(0, 0, 0, 0)'
    && parseFloat(style.borderTopLeftRadius) > 0 && parseFloat(style.fontSize) < pageFont;
  const clipped = (el) => {
    for (let up = el.parentElement; up && up !== document.body; up = up.parentElement) {
      if (getComputedStyle(up).overflowX !== 'visible') return true;
    }
    return false;
  };
  const CONTROLS = ['button', 'input', 'select', 'textarea', 'img', 'svg'];
  const leaves = [];
  const walk = (el) => {
    const style = getComputedStyle(el);
    if (style.display === 'none') return;
    const box = el.getBoundingClientRect();
    if (style.visibility === 'visible' && Number(style.opacity) > 0 && box.width > 0 && box.height > 0) {
      if (box.right > window.innerWidth + 1 && !clipped(el)) {
        problems.push(`${describe(el)} reaches ${Math.round(box.right)}px, past the ${window.innerWidth}px viewport`);
      }
      if (CONTROLS.includes(el.tagName.toLowerCase())) {
        leaves.push({ el, box });
        return;
      }
      if (isBadge(style)) {
        leaves.push({ el, box });
        if (box.height > 2.2 * parseFloat(style.fontSize)) {
          problems.push(`${describe(el)} is styled as a badge but is ${Math.round(box.height)}px tall: a badge holds one line`);
        }
      }
    }
    for (const node of el.childNodes) {
      if (node.nodeType === Node.ELEMENT_NODE) walk(node);
      else if (node.nodeType === Node.TEXT_NODE && node.textContent.trim() && style.visibility === 'visible') {
        const range = document.createRange();
        range.selectNodeContents(node);
        for (const r of range.getClientRects()) if (r.width > 0 && r.height > 0) leaves.push({ el, box: r });
      }
    }
  };
  walk(document.body);
  for (let i = 0; i < leaves.length; i++) {
    for (let j = i + 1; j < leaves.length; j++) {
      const a = leaves[i], b = leaves[j];
      if (a.el.contains(b.el) || b.el.contains(a.el)) continue;
      const across = Math.min(a.box.right, b.box.right) - Math.max(a.box.left, b.box.left);
      const down = Math.min(a.box.bottom, b.box.bottom) - Math.max(a.box.top, b.box.top);
      if (across > 1 && down > 1) problems.push(`${describe(a.el)} overlaps ${describe(b.el)}`);
    }
  }
  const wide = document.documentElement.scrollWidth;
  if (wide > window.innerWidth) problems.push(`the page is ${wide}px wide in a ${window.innerWidth}px viewport`);
  return [...new Set(problems)];
}

/** A screenshot for the docs, without the notes the page's own actions left. */
const shot = async (page, name, fullPage = false) => {
  await page.evaluate(() => document.getElementById('toasts').replaceChildren());
  await page.screenshot({ path: join(shots, name), fullPage });
};

const report = {};
const timed = async (name, what) => {
  const started = performance.now();
  await what();
  report[name] = Math.round(performance.now() - started);
};

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  // ── The layout check finds what it is meant to find, on a page made to break it.
  const fixture = await browser.newPage({ viewport: { width: 400, height: 300 } });
  await fixture.setContent(`<style>body { font: 14px sans-serif; margin: 0 }
    .tag { font-size: 11px; background: #ddd; border-radius: 4px }
    p { position: absolute; top: 0; margin: 0 }</style>
    <p>first words</p><p style="left: 20px">second words</p>
    <div style="margin-top: 40px; width: 900px">too wide</div>
    <ol class="tag"><li>one</li><li>two</li><li>three</li></ol>
    <div style="overflow-x: auto"><div style="width: 900px">wide, inside a scroller</div></div>`);
  const caught = await fixture.evaluate(layoutProblems);
  for (const want of [/^p "first words" overlaps p "second words"$/, /^div "too wide" reaches 900px/,
    /^ol\.tag .* is styled as a badge but is \d+px tall/, /^the page is 900px wide in a 400px viewport$/]) {
    assert.ok(caught.some((p) => want.test(p)), `the layout check missed ${want}: ${JSON.stringify(caught)}`);
  }
  assert.equal(caught.length, 4, JSON.stringify(caught));
  await fixture.close();

  // Something to keep out of reach of a visitor without the token.
  cli('task', 'add', 'secret groundwork', '--id', 'groundwork', '--priority', 'low');

  // ── Without credentials: the login page, never data.
  const stranger = await browser.newContext();
  const peek = await stranger.newPage();
  for (const path of ['/', '/v1/meshes/default/tasks', '/v1/meshes/default/tasks/groundwork', '/v1/meshes', '/metrics']) {
    const response = await peek.goto(base + path);
    assert.equal(response.status(), path === '/' ? 200 : 401, path);
    assert.equal(await peek.locator('form[action="/login"]').count(), 1, `${path}: login page`);
    assert.ok(!(await peek.content()).includes('secret groundwork'), `${path} leaked a task`);
  }
  // A wrong token is refused.
  await peek.goto(base + '/');
  await peek.fill('#token', 'x'.repeat(64));
  await peek.click('button[type=submit]');
  await peek.waitForSelector('.notice');
  assert.equal((await stranger.cookies()).length, 0);
  await stranger.close();

  // ── Log in through the form.
  const context = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  const page = await context.newPage();
  const problems = [];
  // The form's refused enqueue is the one failed request the page may log.
  let refusalExpected = false;
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    if (refusalExpected && m.text().includes('status of 400')) return;
    problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(String(e)));
  await page.goto(base + '/');
  await page.fill('#token', token);
  await page.click('button[type=submit]');
  await page.waitForSelector('#live[data-state="live"]');
  await page.waitForSelector('[data-status="pending"] [data-task="groundwork"]');
  const cookies = await context.cookies();
  assert.equal(cookies.length, 1);
  assert.equal(cookies[0].httpOnly, true);
  assert.equal(cookies[0].sameSite, 'Strict');
  assert.equal(await page.evaluate(() => document.cookie), '', 'the page cannot read the cookie');
  assert.equal(await page.evaluate(() => window.localStorage.length), 0);

  // ── A task enqueued through the CLI appears within a second.
  cli('mission', 'add', 'compiler', '--title', 'A small compiler', '--goal', 'lexer, parser, code generator, docs');
  cli('task', 'add', 'write the lexer', '--id', 'lexer', '--mission', 'compiler', '--mode', 'code_change', '--priority', 'high');
  await timed('enqueueToBoardMs', () => page.waitForSelector('[data-status="pending"] [data-task="lexer"]', { timeout: 1000 }));
  cli('task', 'add', 'write the parser', '--id', 'parser', '--mission', 'compiler', '--depends-on', 'lexer');
  cli('task', 'add', 'generate code', '--id', 'codegen', '--mission', 'compiler', '--depends-on', 'parser', '--tag', 'gpu');
  cli('task', 'add', 'write the docs', '--id', 'docs', '--mission', 'compiler', '--depends-on', 'parser');
  cli('task', 'add', 'benchmark it', '--id', 'bench', '--mission', 'compiler', '--depends-on', 'codegen', '--not-before', '2h');
  await page.waitForSelector('[data-status="pending"] [data-task="bench"]', { timeout: 1000 });
  // Why a card waits: its dependencies, tags, not-before.
  const codegen = await page.textContent('[data-task="codegen"] .whys');
  assert.ok(codegen.includes('parser') && codegen.includes('gpu'), codegen);
  assert.ok((await page.textContent('[data-task="bench"] .whys')).includes('not before'));

  // ── Claimed and completed through the CLI, the card moves.
  const claim = cli('claim', '--node', 'laptop', '--session', 'worker-1');
  assert.equal(claim.id, 'lexer');
  await timed('claimToBoardMs', () => page.waitForSelector('[data-status="assigned"] [data-task="lexer"]', { timeout: 1000 }));
  const holder = await page.textContent('[data-status="assigned"] [data-task="lexer"] .holder');
  assert.ok(holder.includes('worker-1') && holder.includes('laptop'), holder);
  cli('complete', '--session', 'worker-1', '--task', 'lexer', '--epoch', String(claim.dispatchNonce), '--summary', 'lexer done');
  await timed('completeToBoardMs', () => page.waitForSelector('[data-status="completed"] [data-task="lexer"]', { timeout: 1000 }));
  cli('claim', '--node', 'desktop', '--session', 'worker-2');
  await page.waitForSelector('[data-status="assigned"] [data-task="parser"]', { timeout: 1000 });
  await shot(page, 'board.png');

  // ── The filters.
  await page.fill('.filters input[name="tag"]', 'gpu');
  await page.waitForFunction(() => document.querySelectorAll('.card').length === 1);
  assert.equal(await page.getAttribute('.card', 'data-task'), 'codegen');
  await page.fill('.filters input[name="tag"]', '');
  await page.waitForSelector('[data-task="groundwork"]');

  // ── The task page: its ledger history and its dependency graph.
  await page.click('[data-task="lexer"] a.title');
  await page.waitForSelector('.timeline .entry[data-kind="task_completed"]');
  const kinds = await page.$$eval('.history .entry', (els) => els.map((e) => e.dataset.kind));
  assert.deepEqual(kinds, ['task_dispatched', 'task_claimed', 'task_completed']);
  // Down from the lexer: parser, then codegen and docs, then bench.
  for (const id of ['lexer', 'parser', 'codegen', 'docs', 'bench']) {
    await page.waitForSelector(`.graph svg.dag a[data-task="${id}"]`);
  }
  assert.equal(await page.locator('.graph svg.dag path.edge').count(), 4);
  await shot(page, 'task.png', true);

  // ── Cancel from the page, behind a confirmation, and see the ledger entry.
  await page.click('.graph svg.dag a[data-task="docs"]');
  await page.waitForSelector('.task-page [data-action="cancel"]');
  await page.click('[data-action="cancel"]');
  await page.waitForSelector('dialog#confirm[open]');
  await page.fill('dialog#confirm input[name="reason"]', 'not needed after all');
  await page.click('#confirm-ok');
  await timed('cancelToTimelineMs', () => page.waitForSelector('.history .entry[data-kind="task_cancelled"]', { timeout: 2000 }));
  assert.equal(cli('task', 'show', 'docs').status, 'cancelled');
  const ledger = cli('ledger', 'tail', '--kind', 'task_cancelled');
  assert.ok(ledger.some((e) => e.payload.taskId === 'docs'), JSON.stringify(ledger));

  // ── Change a priority from the page.
  await page.evaluate(() => { window.location.hash = '#/default/task/codegen'; });
  await page.waitForSelector('.task-page select[data-action="priority"]');
  await page.selectOption('.task-page select[data-action="priority"]', 'high');
  await page.waitForSelector('.history .entry[data-kind="task_priority_changed"]', { timeout: 2000 });
  assert.equal(await page.textContent('.history .entry[data-kind="task_priority_changed"] .detail'), 'Normal → High');
  assert.equal(cli('task', 'show', 'codegen').priority, 'high');

  // ── The mission and its DAG, coloured by status.
  await page.click('#nav a[data-view="missions"]');
  await page.waitForSelector('.mission[data-mission="compiler"]');
  await page.click('.mission[data-mission="compiler"] a');
  await page.waitForSelector('.mission-page svg.dag a.status-completed[data-task="lexer"]');
  await page.waitForSelector('.mission-page svg.dag a.status-assigned[data-task="parser"]');
  await page.waitForSelector('.mission-page svg.dag a.status-cancelled[data-task="docs"]');
  await shot(page, 'mission.png', true);

  // ── A forced requeue of the completed lexer, behind a confirmation; backing
  // out of the dialog changes nothing.
  await page.evaluate(() => { window.location.hash = '#/default/task/lexer'; });
  await page.waitForSelector('.task-page [data-action="force-requeue"]');
  await page.click('[data-action="force-requeue"]');
  await page.waitForSelector('dialog#confirm[open]');
  await page.click('dialog#confirm button[value="cancel"]');
  assert.equal(cli('task', 'show', 'lexer').status, 'completed');
  await page.click('[data-action="force-requeue"]');
  await page.waitForSelector('dialog#confirm[open]');
  await page.click('#confirm-ok');
  await page.waitForSelector('.history .entry[data-kind="task_requeued"]', { timeout: 2000 });
  assert.equal(cli('task', 'show', 'lexer').status, 'pending');

  // ── Workers, and the live ledger.
  await page.click('#nav a[data-view="workers"]');
  await page.waitForSelector('.workers tr.busy');
  assert.ok((await page.textContent('.workers tr.busy')).includes('worker-2'));
  const idle = await fetch(`${base}/v1/meshes/default/idle-sessions`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ nodeId: 'laptop', sessionId: 'worker-1', providerType: 'claude-cli' }),
  });
  assert.equal(idle.status, 200, await idle.text());
  const reserved = cli('reserve', 'src/parser', '--scope', 'compiler-repo', '--session', 'worker-1', '--node', 'laptop', '--reason', 'parser rewrite');
  assert.equal(reserved.granted, true, JSON.stringify(reserved));
  await page.click('#nav a[data-view="board"]');
  await page.click('#nav a[data-view="workers"]');
  await page.waitForSelector('.workers tr.idle');
  assert.ok((await page.textContent('.workers tr.idle')).includes('worker-1'));
  // Who holds which paths.
  const reservation = await page.textContent(`.workers tr.reservation[data-reservation="${reserved.reservation.id}"]`);
  for (const word of ['worker-1 on laptop', 'src/parser', 'exclusive', 'compiler-repo', 'parser rewrite']) {
    assert.ok(reservation.includes(word), `${word} in ${reservation}`);
  }
  // A webhook whose receiver is gone: failing after its two attempts, shown
  // with its error, and resumed from the page.
  const hook = cli('webhook', 'add', 'http://127.0.0.1:9/nowhere', '--kind', 'task_*', '--description', 'CI bot');
  cli('task', 'add', 'tell the bot', '--id', 'hooked');
  const until = Date.now() + 10000;
  while (cli('webhook', 'show', hook.webhook.id).state !== 'failing') {
    assert.ok(Date.now() < until, 'the webhook never turned failing');
    await new Promise((r) => setTimeout(r, 50));
  }
  await page.click('#nav a[data-view="board"]');
  await page.click('#nav a[data-view="workers"]');
  const hookRow = `.workers tr.webhook.failing[data-webhook="${hook.webhook.id}"]`;
  await page.waitForSelector(hookRow);
  const hookText = await page.textContent(hookRow);
  for (const word of ['http://127.0.0.1:9/nowhere', 'CI bot', 'task_*', 'failing since', 'could not connect']) {
    assert.ok(hookText.includes(word), `${word} in ${hookText}`);
  }
  await shot(page, 'workers.png', true);
  await page.click(`${hookRow} [data-action="webhook-resume"]`);
  await page.waitForSelector('dialog#confirm[open]');
  await page.click('#confirm-ok');
  while (cli('webhook', 'show', hook.webhook.id).log.length < 4) {
    assert.ok(Date.now() < until, 'the resumed webhook was never tried again');
    await new Promise((r) => setTimeout(r, 50));
  }
  // Remove it from the page, then add one from the form: a refusal names the
  // field; the secret is shown once; the new subscription is listed.
  await page.click(`${hookRow} [data-action="webhook-remove"]`);
  await page.waitForSelector('dialog#confirm[open]');
  await page.click('#confirm-ok');
  await page.waitForSelector(hookRow, { state: 'detached', timeout: 5000 });
  assert.equal(cli('webhook', 'list').webhooks.length, 0);
  await page.fill('#webhook-url', 'http://hooks.example.com/x');
  refusalExpected = true;
  await page.click('#add-webhook');
  await page.waitForSelector('.webhook-result .error');
  refusalExpected = false;
  assert.ok((await page.textContent('.webhook-result')).includes('url'), await page.textContent('.webhook-result'));
  assert.equal(cli('webhook', 'list').webhooks.length, 0, 'a refused webhook adds nothing');
  await page.fill('#webhook-url', 'http://127.0.0.1:9/from-the-page');
  await page.fill('#webhook-kinds', 'task_completed, task_failed');
  await page.fill('#webhook-description', 'release bot');
  await page.click('#add-webhook');
  await page.waitForSelector('.webhook-result .webhook-secret');
  assert.ok((await page.textContent('.webhook-secret')).startsWith('whsec_'));
  const formed = cli('webhook', 'list').webhooks;
  assert.equal(formed.length, 1);
  assert.deepEqual(formed[0].kinds, ['task_completed', 'task_failed']);
  await page.waitForSelector(`.workers tr.webhook[data-webhook="${formed[0].id}"]`);
  cli('webhook', 'remove', formed[0].id);
  await page.click('#nav a[data-view="ledger"]');
  await page.waitForSelector('.timeline .entry');
  cli('task', 'add', 'one more', '--id', 'late');
  await timed('enqueueToLedgerMs', () => page.waitForSelector('.timeline .entry a[href$="/task/late"]', { timeout: 1000 }));

  await shot(page, 'ledger.png');

  // ── A task created from the form: the API's refusal next to the field it
  // names, then the new task's page, claimed through the CLI and shown running.
  await page.click('#new-task');
  await page.waitForSelector('form.new-task');
  await page.fill('#new-message', '   ');
  refusalExpected = true;
  await page.click('form.new-task button[type="submit"]');
  await page.waitForSelector('[data-field="message"] .field-error:not([hidden])');
  refusalExpected = false;
  assert.equal(await page.textContent('[data-field="message"] .field-error'), 'must not be empty');
  assert.equal(await page.textContent('.form-error'), 'invalid message: must not be empty');
  assert.equal(await page.getAttribute('#new-message', 'aria-invalid'), 'true');
  await shot(page, 'new.png');
  await page.fill('#new-message', 'run the integration tests');
  await page.selectOption('#new-priority', 'high');
  await page.fill('#new-missionId', 'compiler');
  await page.fill('#new-dependsOn', 'lexer, ');
  await page.fill('#new-requiredTags', 'linux');
  await page.fill('#new-targetNodeId', 'ci-box');
  await page.click('form.new-task button[type="submit"]');
  await page.waitForSelector('.task-page h1 .badge.status-pending');
  const created = decodeURIComponent(new URL(page.url()).hash.split('/').pop());
  const enqueued = cli('task', 'show', created);
  assert.equal(enqueued.message, 'run the integration tests');
  assert.equal(enqueued.priority, 'high');
  assert.equal(enqueued.missionId, 'compiler');
  assert.deepEqual(enqueued.dependsOn, ['lexer']);
  assert.deepEqual(enqueued.requiredTags, ['linux']);
  assert.equal(enqueued.targetNodeId, 'ci-box');
  // It waits for the lexer, requeued above; done, the claim takes the new task
  // (pinned to the claiming node, it comes before every open task).
  assert.ok((await page.textContent('.facts')).includes('waits for lexer (pending)'));
  const again = cli('claim', '--node', 'lexer-box', '--session', 'lexer-1');
  assert.equal(again.id, 'lexer');
  cli('complete', '--session', 'lexer-1', '--task', 'lexer', '--epoch', String(again.dispatchNonce), '--summary', 'lexer again');
  const ci = cli('claim', '--node', 'ci-box', '--session', 'ci-1', '--tag', 'linux');
  // On a mismatch, say what the pinned task looked like and what the ledger
  // recorded around the claim, so a failure can be read without a rerun.
  const pinnedContext = () => JSON.stringify({
    pinned: cli('task', 'show', created),
    ledger: cli('ledger', 'tail', '--limit', '12').map((e) => [e.kind, e.payload.taskId, e.timestamp]),
  });
  assert.equal(ci.id, created, ci.id === created ? '' : pinnedContext());
  await timed('claimToTaskPageMs', () => page.waitForSelector('.task-page h1 .badge.status-assigned', { timeout: 1000 }));
  assert.equal(await page.textContent('.task-page h1 .badge'), 'Running');
  assert.ok((await page.textContent('.facts')).includes('ci-1 on ci-box'));

  // ── Its worker's progress reports, with its heartbeats, show while it runs.
  const beat = (percent, note) => api('default/heartbeats',
    { taskId: created, sessionId: 'ci-1', epoch: ci.dispatchNonce, leaseMs: 600000, progress: { percent, note } });
  await beat(50, 'running the tests');
  await timed('progressToTaskPageMs', () => page.waitForSelector('.progress-section .meter[aria-valuenow="50"]', { timeout: 1000 }));
  assert.equal(await page.textContent('.progress-section .note'), 'running the tests');
  assert.equal(await page.textContent('.progress-section .percent'), '50%');
  await page.waitForSelector('.history .entry[data-kind="task_progress"]');
  await beat(80, 'writing the report');
  await page.waitForSelector('.progress-section .meter[aria-valuenow="80"]', { timeout: 1000 });
  assert.equal(await page.textContent('.progress-section .note'), 'writing the report');
  await shot(page, 'progress.png', true);
  await page.click('#nav a[data-view="board"]');
  const progressCard = `[data-status="assigned"] [data-task="${created}"] .task-progress`;
  await page.waitForSelector(progressCard);
  const onCard = await page.textContent(progressCard);
  assert.ok(onCard.includes('80%') && onCard.includes('writing the report'), onCard);

  // ── A task whose dependency failed is blocked, with the dependency linked.
  cli('task', 'add', 'prepare the fixtures', '--id', 'fixtures', '--target-node', 'fixture-box');
  cli('task', 'add', 'run the slow suite', '--id', 'slow-suite', '--depends-on', 'fixtures');
  const fixtures = cli('claim', '--node', 'fixture-box', '--session', 'fixture-1');
  assert.equal(fixtures.id, 'fixtures');
  cli('complete', '--session', 'fixture-1', '--task', 'fixtures', '--epoch', String(fixtures.dispatchNonce), '--failed', '--reason', 'disk full');
  await page.waitForSelector('[data-status="blocked"] [data-task="slow-suite"]', { timeout: 1000 });
  assert.equal(await page.locator('[data-status="pending"] [data-task="slow-suite"]').count(), 0);
  assert.equal(await page.textContent('[data-status="blocked"] .count'), '1');
  const chip = '[data-task="slow-suite"] .why.blocked';
  assert.equal(await page.textContent(chip), 'blocked: dependency fixtures failed');
  assert.match(await page.getAttribute(`${chip} a`, 'href'), /\/task\/fixtures$/);
  await shot(page, 'blocked.png');
  await page.click('[data-task="slow-suite"] a.title');
  await page.waitForSelector('.task-page h1 .badge.status-blocked');
  assert.equal(await page.textContent('.task-page h1 .badge'), 'Blocked');
  assert.equal(await page.textContent('.facts .reason'), 'blocked: dependency fixtures failed');
  await page.click('.facts .reason a');
  await page.waitForSelector('.task-page h1 .badge.status-failed');
  assert.ok((await page.textContent('.facts')).includes('disk full'));

  // ── A task run by `agentmesh work`: its command's output lines show on the
  // task page while it runs, then the task is done with the last one.
  cli('--mesh', 'work', 'task', 'add', 'run the steps', '--id', 'steps');
  await page.evaluate(() => { window.location.hash = '#/work/task/steps'; });
  await page.waitForSelector('.task-page h1 .badge.status-pending');
  const worker = spawn(bin, ['--server', base, '--mesh', 'work', 'work', '--node', 'w-node', '--session', 'w-steps', '--once', '--',
    'sh', '-c', 'for i in 1 2 3; do echo step $i; sleep 1; done'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let workerLog = '';
  worker.stderr.on('data', (chunk) => { workerLog += chunk; });
  const workerDone = new Promise((resolve) => worker.on('exit', (code) => resolve(code)));
  let workerExited = false;
  workerDone.then(() => { workerExited = true; });
  await page.waitForSelector('.task-page h1 .badge.status-assigned', { timeout: 5000 });
  await page.waitForFunction(() => /step [12]/.test(document.querySelector('.progress-section .note')?.textContent || ''), null, { timeout: 5000 });
  const seenStep = await page.textContent('.progress-section .note');
  assert.ok(!workerExited, `the step (${seenStep}) shows while the command still runs`);
  assert.equal(await workerDone, 0, workerLog);
  await page.waitForSelector('.task-page h1 .badge.status-completed', { timeout: 5000 });
  assert.ok((await page.textContent('.facts')).includes('step 3'), await page.textContent('.facts'));

  // ── Ready now: what a worker claims next, in claim order, and why the rest wait.
  const plan = (...args) => cli('--mesh', 'plan', ...args);
  plan('task', 'add', 'provision the machine', '--id', 'provision', '--target-node', 'n-provision');
  plan('task', 'add', 'compile the release', '--id', 'compile', '--target-node', 'n-compile');
  plan('task', 'add', 'package it', '--id', 'package', '--depends-on', 'provision');
  plan('task', 'add', 'test the release', '--id', 'test', '--depends-on', 'compile');
  const compile = plan('claim', '--node', 'n-compile', '--session', 's-compile');
  const provision = plan('claim', '--node', 'n-provision', '--session', 's-provision');
  plan('complete', '--session', 's-provision', '--task', 'provision', '--epoch', String(provision.dispatchNonce), '--failed', '--reason', 'no disk');
  plan('task', 'add', 'a low one', '--id', 'low', '--priority', 'low');
  plan('task', 'add', 'an older normal one', '--id', 'older');
  plan('task', 'add', 'a newer urgent one', '--id', 'urgent', '--priority', 'high', '--tag', 'gpu');
  plan('task', 'add', 'a later one', '--id', 'later', '--not-before', '2h');
  await page.evaluate(() => { window.location.hash = '#/plan/ready'; });
  await page.waitForSelector('.ready-list li[data-task="urgent"]');
  const order = (list) => page.$$eval(`.${list} li`, (els) => els.map((e) => e.dataset.task));
  assert.deepEqual(await order('ready-list'), ['urgent', 'older', 'low']);
  assert.ok((await page.textContent('.ready-list li[data-task="urgent"]')).includes('needs tag gpu'));
  assert.deepEqual(await order('waiting-list'), ['package', 'test', 'later']);
  const reasons = (id) => page.$$eval(`.waiting-list li[data-task="${id}"] .reason`, (els) => els.map((e) => e.textContent));
  assert.deepEqual(await reasons('package'), ['blocked: dependency provision failed']);
  assert.match(await page.getAttribute('.waiting-list li[data-task="package"] .reason a', 'href'), /^#\/plan\/task\/provision$/);
  assert.deepEqual(await reasons('test'), ['waits for compile (running)']);
  assert.match(await page.getAttribute('.waiting-list li[data-task="test"] .reason a', 'href'), /^#\/plan\/task\/compile$/);
  const later = await reasons('later');
  assert.equal(later.length, 1);
  assert.match(later[0], /^not before \d\d:\d\d$|^not before \S+ \S+ \d\d:\d\d$/);
  await shot(page, 'ready.png', true);
  // Live: the dependency done, its dependent is ready, before the younger normal one.
  plan('complete', '--session', 's-compile', '--task', 'compile', '--epoch', String(compile.dispatchNonce), '--summary', 'compiled');
  await page.waitForSelector('.ready-list li[data-task="test"]', { timeout: 1000 });
  assert.deepEqual(await order('ready-list'), ['urgent', 'test', 'older', 'low']);
  assert.deepEqual(await order('waiting-list'), ['package', 'later']);
  // For one worker: what its claim takes, in its order, and why the rest is not for it.
  plan('task', 'add', 'on the build box', '--id', 'pinned-build', '--target-node', 'build-box');
  await page.waitForSelector('.ready-list li[data-task="pinned-build"]', { timeout: 1000 });
  await page.fill('.worker-filter input[name="node"]', 'build-box');
  await page.press('.worker-filter input[name="node"]', 'Enter');
  await page.waitForSelector('.worker-list li[data-task="pinned-build"]');
  assert.deepEqual(await order('worker-list'), ['pinned-build', 'test', 'older', 'low']);
  assert.deepEqual(await order('elsewhere-list'), ['urgent']);
  assert.deepEqual(await page.$$eval('.elsewhere-list li[data-task="urgent"] .reason', (els) => els.map((e) => e.textContent)), ['needs tag gpu']);
  await page.fill('.worker-filter input[name="tags"]', 'gpu');
  await page.press('.worker-filter input[name="tags"]', 'Enter');
  await page.waitForFunction(() => document.querySelectorAll('.elsewhere-list li').length === 0);
  assert.deepEqual(await order('worker-list'), ['pinned-build', 'urgent', 'test', 'older', 'low']);
  // And the claim agrees: the node's pinned task first.
  assert.equal(plan('claim', '--node', 'build-box', '--session', 's-build', '--tag', 'gpu').id, 'pinned-build');

  // ── Every page, on a desktop and on a phone: nothing overlaps, nothing spills sideways.
  const pages = ['default/board', `default/task/${created}`, 'default/task/slow-suite', 'plan/ready', 'default/missions',
    'default/mission/compiler', 'default/ledger', 'default/workers', 'default/new'];
  const broken = [];
  for (const [device, viewport] of [['desktop', { width: 1280, height: 800 }], ['phone', { width: 390, height: 844 }]]) {
    const visit = await browser.newContext({ viewport, isMobile: device === 'phone', hasTouch: device === 'phone' });
    await visit.addCookies(await context.cookies());
    const look = await visit.newPage();
    for (const path of pages) {
      await look.goto(`${base}/#/${path}`);
      await look.waitForSelector('#main[data-updated]');
      await look.waitForSelector('#live[data-state="live"]');
      for (const problem of await look.evaluate(layoutProblems)) broken.push(`${device} ${path}: ${problem}`);
      if (device === 'phone' && path === 'default/board') await look.screenshot({ path: join(shots, 'phone.png') });
    }
    await visit.close();
  }
  assert.deepEqual(broken, [], `layout problems:\n${broken.join('\n')}`);

  // ── 10,000 tasks: the board's first paint.
  for (let batch = 0; batch < 10; batch++) {
    const tasks = Array.from({ length: 1000 }, (_, i) => ({ message: `bulk task ${batch * 1000 + i}` }));
    const response = await fetch(`${base}/v1/meshes/big/tasks/batch`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ tasks }),
    });
    assert.equal(response.status, 201, await response.text());
  }
  const big = await context.newPage();
  const started = performance.now();
  await big.goto(base + '/#/big/board');
  await big.waitForSelector('[data-status="pending"] .card');
  report.bigBoardWallMs = Math.round(performance.now() - started);
  // From the navigation's start to the board's columns being filled, by the page's clock.
  report.bigBoardFirstPaintMs = Math.round(await big.evaluate(() => Number(document.getElementById('main').dataset.painted)));
  report.bigBoardCount = await big.textContent('[data-status="pending"] .count');
  report.bigBoardCards = await big.locator('[data-status="pending"] .card').count();

  assert.deepEqual(problems, []);
} catch (err) {
  // What the page showed when a check failed.
  for (const context of browser.contexts()) {
    for (const p of context.pages()) {
      await p.screenshot({ path: join(shots, 'failure.png'), fullPage: true }).catch(() => {});
      process.stderr.write(`page ${p.url()}:\n${await p.locator('body').innerText().catch(() => '?')}\n`);
    }
  }
  throw err;
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(report) + '\n');
