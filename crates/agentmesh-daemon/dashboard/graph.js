// A dependency graph drawn as SVG: tasks in layers (a task sits right of
// everything it depends on), edges from a dependency to its dependent.

import { s, short } from './dom.js';
import { statusWord } from './words.js';

const W = 170;
const H = 38;
const GAP_X = 60;
const GAP_Y = 16;

/**
 * nodes: [{id, label, status, focus}], edges: [{from, to}] (from must finish first).
 * link(id) gives the href of a node. Returns an <svg>.
 */
export function dag(nodes, edges, link) {
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const deps = new Map(nodes.map((n) => [n.id, []]));
  for (const e of edges) if (byId.has(e.from) && byId.has(e.to)) deps.get(e.to).push(e.from);
  const layer = new Map();
  const visiting = new Set();
  const depth = (id) => {
    if (layer.has(id)) return layer.get(id);
    if (visiting.has(id)) return 0; // a cycle the API would refuse; draw it anyway
    visiting.add(id);
    const d = deps.get(id).reduce((m, dep) => Math.max(m, depth(dep) + 1), 0);
    visiting.delete(id);
    layer.set(id, d);
    return d;
  };
  nodes.forEach((n) => depth(n.id));
  const columns = [];
  for (const n of nodes) {
    const d = layer.get(n.id);
    (columns[d] = columns[d] || []).push(n);
  }
  const pos = new Map();
  columns.forEach((col, x) => (col || []).forEach((n, y) => pos.set(n.id, { x: x * (W + GAP_X), y: y * (H + GAP_Y) })));
  const width = Math.max(1, columns.length) * (W + GAP_X) - GAP_X + 4;
  const height = Math.max(1, ...columns.map((c) => (c ? c.length : 0))) * (H + GAP_Y) - GAP_Y + 4;
  const svg = s('svg', {
    class: 'dag', viewBox: `-2 -2 ${width} ${height}`, width, height, role: 'img',
    'aria-label': `dependency graph of ${nodes.length} tasks`,
  });
  svg.append(s('defs', {}, s('marker', {
    id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse',
  }, s('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead' }))));
  for (const e of edges) {
    const a = pos.get(e.from);
    const b = pos.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
    const mid = (x1 + x2) / 2;
    svg.append(s('path', { class: 'edge', d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`, 'marker-end': 'url(#arrow)' }));
  }
  for (const n of nodes) {
    const p = pos.get(n.id);
    const label = n.label || short(n.id);
    const g = s('a', { href: link(n.id), class: `node status-${n.status}${n.focus ? ' focus' : ''}`, 'data-task': n.id },
      s('title', {}, `${n.id} (${statusWord(n.status).toLowerCase()})`),
      s('rect', { x: p.x, y: p.y, width: W, height: H, rx: 6 }),
      s('text', { x: p.x + 8, y: p.y + 15 }, label.length > 24 ? label.slice(0, 23) + '…' : label),
      s('text', { x: p.x + 8, y: p.y + 30, class: 'sub' }, statusWord(n.status)));
    svg.append(g);
  }
  return svg;
}
