// Small DOM helpers: element builders, time formatting.

const SVG_NS = 'http://www.w3.org/2000/svg';

function fill(el, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** An HTML element: h('div', {class: 'x'}, 'text', child). */
export function h(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

/** An SVG element. */
export function s(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

/** Replaces the children of `el`. */
export function put(el, ...children) {
  el.replaceChildren();
  return fill(el, {}, children);
}

/** "3s", "5m", "2h", "4d" for a duration in milliseconds. */
export function span(ms) {
  if (!Number.isFinite(ms)) return '?';
  const sign = ms < 0 ? '-' : '';
  let v = Math.abs(ms) / 1000;
  if (v < 60) return sign + Math.floor(v) + 's';
  v /= 60;
  if (v < 60) return sign + Math.floor(v) + 'm';
  v /= 60;
  if (v < 48) return sign + Math.floor(v) + 'h';
  return sign + Math.floor(v / 24) + 'd';
}

/** How long ago an ISO instant was ("5m ago"), or how far ahead ("in 5m"). */
export function ago(iso) {
  if (!iso) return '';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  const d = Date.now() - t;
  return d >= 0 ? span(d) + ' ago' : 'in ' + span(-d);
}

/** A local time for an ISO instant. */
export function when(iso) {
  const t = Date.parse(iso);
  return Number.isNaN(t) ? String(iso || '') : new Date(t).toLocaleString();
}

/** "14:05" for an instant of today, "Dec 7 14:05" for another day. */
export function clock(iso) {
  const t = new Date(Date.parse(iso));
  if (Number.isNaN(t.getTime())) return String(iso || '');
  const pad = (n) => String(n).padStart(2, '0');
  const time = `${pad(t.getHours())}:${pad(t.getMinutes())}`;
  const today = new Date();
  if (t.toDateString() === today.toDateString()) return time;
  return t.toLocaleDateString(undefined, { month: 'short', day: 'numeric' }) + ' ' + time;
}

/** A short form of a long id. */
export function short(id) {
  const text = String(id || '');
  return text.length > 14 ? text.slice(0, 8) + '…' + text.slice(-4) : text;
}
