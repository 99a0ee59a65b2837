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

/**
 * Pages through a cursor listing one page at a time, with `prev` and `next` buttons:
 * `read(cursor)` fetches a page (`{next, ...}`), `show(answer, at)` puts page `at` (from 0)
 * on screen, `failed(err, to)` says a turn to page `to` failed, and `reading(to)` and
 * `settled(at)` bracket each turn. The buttons are disabled while a page is read, the page
 * moves only once its answer arrived, and an answer overtaken by a newer turn (or by
 * `restart`) is dropped: a double click on Next, or a click after a failed turn, moved
 * twice and showed the first page's rows as the third. Returns `{restart}` (back to the
 * first page, a promise of its turn).
 */
export function pager({ prev, next, read, show, failed, reading = () => {}, settled = () => {} }) {
  const cursors = [undefined];
  let at = 0;
  let generation = 0;
  async function turn(to) {
    const mine = ++generation;
    prev.disabled = true;
    next.disabled = true;
    reading(to);
    try {
      const answer = await read(cursors[to]);
      if (mine !== generation) return;
      at = to;
      cursors[to + 1] = answer.next ?? null;
      show(answer, at);
    } catch (err) {
      if (mine !== generation) return;
      // The pager stays on the page it showed, so a click tries the same turn again.
      failed(err, to);
    } finally {
      if (mine === generation) {
        prev.disabled = at === 0;
        next.disabled = !cursors[at + 1];
        settled(at);
      }
    }
  }
  prev.addEventListener('click', () => turn(at - 1));
  next.addEventListener('click', () => turn(at + 1));
  return {
    restart() {
      cursors.length = 1;
      at = 0;
      return turn(0);
    },
  };
}
