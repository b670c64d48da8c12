// Drives the dashboard of a running `agentmesh serve` in Debian's headless
// Chromium (playwright-core, never a downloaded browser) and changes the mesh
// through the agentmesh CLI. Run by crates/agentmesh/tests/dashboard.rs:
//
//   node dashboard_browser.mjs <base-url> <agentmesh-binary> <screenshot-dir>
//
// The token comes in AGENTMESH_TOKEN. Prints one JSON report on stdout (the
// timings the Rust test checks); any failed check throws and exits non-zero.

import { execFileSync } from 'node:child_process';
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
  page.on('console', (m) => { if (m.type() === 'error') problems.push(m.text()); });
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
  await page.screenshot({ path: join(shots, 'board.png') });

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
  await page.screenshot({ path: join(shots, 'task.png'), fullPage: true });

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
  await page.waitForSelector('.task-page [data-action="priority"]');
  await page.click('[data-action="priority"]');
  await page.waitForSelector('dialog#confirm[open]');
  await page.selectOption('dialog#confirm select[name="priority"]', 'high');
  await page.click('#confirm-ok');
  await page.waitForSelector('.history .entry[data-kind="task_priority_changed"]', { timeout: 2000 });
  assert.equal(cli('task', 'show', 'codegen').priority, 'high');

  // ── The mission and its DAG, coloured by status.
  await page.click('#nav a[data-view="missions"]');
  await page.waitForSelector('.mission[data-mission="compiler"]');
  await page.click('.mission[data-mission="compiler"] a');
  await page.waitForSelector('.mission-page svg.dag a.status-completed[data-task="lexer"]');
  await page.waitForSelector('.mission-page svg.dag a.status-assigned[data-task="parser"]');
  await page.waitForSelector('.mission-page svg.dag a.status-cancelled[data-task="docs"]');
  await page.screenshot({ path: join(shots, 'mission.png'), fullPage: true });

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
  await page.click('#nav a[data-view="board"]');
  await page.click('#nav a[data-view="workers"]');
  await page.waitForSelector('.workers tr.idle');
  assert.ok((await page.textContent('.workers tr.idle')).includes('worker-1'));
  await page.screenshot({ path: join(shots, 'workers.png'), fullPage: true });
  await page.click('#nav a[data-view="ledger"]');
  await page.waitForSelector('.timeline .entry');
  cli('task', 'add', 'one more', '--id', 'late');
  await timed('enqueueToLedgerMs', () => page.waitForSelector('.timeline .entry a[href$="/task/late"]', { timeout: 1000 }));

  // ── A phone.
  const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
  await phone.addCookies(await context.cookies());
  const small = await phone.newPage();
  await small.goto(base + '/#/default/board');
  await small.waitForSelector('[data-status="pending"] .card');
  const overflow = await small.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 1, `the phone page scrolls sideways by ${overflow}px`);
  await small.screenshot({ path: join(shots, 'phone.png') });
  await phone.close();

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
