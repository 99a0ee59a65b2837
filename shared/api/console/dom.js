// Small DOM helpers: elements are built with textContent only (no HTML strings), and every
// number shown keeps the API's value in data-value, so tests compare exactly.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** A labelled input: {row, input}. */
export function field(label, id, attrs = {}) {
  const input = h('input', { id, name: id, type: 'text', ...attrs });
  return { input, row: h('div', { class: 'field' }, h('label', { for: id }, label), input) };
}

const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
const money = new Intl.NumberFormat('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 6 });
const decimal = new Intl.NumberFormat('en-US', { maximumFractionDigits: 4 });

export const fmt = {
  int: (n) => (n === null || n === undefined ? '—' : integer.format(n)),
  money: (n) => (n === null || n === undefined ? '—' : money.format(n)),
  dec: (n) => (n === null || n === undefined ? '—' : decimal.format(n)),
  pct: (n) => (n === null || n === undefined ? '—' : `${decimal.format(n * 100)} %`),
  date: (s) => (s ? new Date(s).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '—'),
  yesNo: (b) => (b ? 'yes' : 'no'),
};

/** A number cell: the formatted text, the API's value in data-value. */
export function num(value, kind = 'int', attrs = {}) {
  return h('td', { class: 'num', 'data-value': value ?? '', ...attrs }, fmt[kind](value));
}

/** A table with a caption, header cells and rows of cells (td elements or values). */
export function table(caption, headers, rows, attrs = {}) {
  return h('table', attrs,
    caption ? h('caption', {}, caption) : null,
    h('thead', {}, h('tr', {}, headers.map((x) => h('th', { scope: 'col', class: x.num ? 'num' : null }, x.label ?? x)))),
    h('tbody', {}, rows.map((cells) => h('tr', {}, cells.map((c) => (c instanceof Node ? c : h('td', {}, c ?? '—')))))));
}

/** A description list from [term, value] pairs. */
export function dl(pairs, attrs = {}) {
  return h('dl', attrs, pairs.filter(Boolean).map(([t, d, key]) =>
    [h('dt', {}, t), h('dd', key ? { 'data-key': key } : {}, d ?? '—')]));
}

export function link(href, text, attrs = {}) {
  return h('a', { href, ...attrs }, text);
}

export function errorBox(err) {
  return h('div', { class: 'error', role: 'alert' },
    h('strong', {}, err.status ? `The API answered ${err.status}: ` : 'Error: '), err.message);
}

/** Says something to screen readers without moving focus. */
export function announce(text) {
  const s = document.getElementById('status');
  if (s) s.textContent = text;
}

export const route = {
  instance: (p, i) => `#/p/${encodeURIComponent(p)}/i/${encodeURIComponent(i)}`,
  item: (p, i, x) => `${route.instance(p, i)}/item/${encodeURIComponent(x)}`,
  product: (p, i, x) => `${route.instance(p, i)}/product/${encodeURIComponent(x)}`,
  subscriptions: (p, i) => `${route.instance(p, i)}/subscriptions`,
  rejections: (p, i) => `${route.instance(p, i)}/rejections`,
};
