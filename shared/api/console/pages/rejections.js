// Rejected entries of an instance: the entries.rejected events the API keeps
// (GET .../events?type=entries.rejected&since=&until=&cursor=&limit=), one row per rejected
// entry of each event's data.errors. A filtered page may be short or even empty while
// `next` is set (the API examines at most 1,000 events a page), so the page reads on until
// it has at least one row or `next` is null (or 20 pages were read), and offers "Load
// more" while `next` is set. `#/p/P/i/I/rejections?limit=N` sets the events per request
// (1..1000, default 100).

import { page, instancePath } from '../api.js';
import { h, fmt, num, field, errorBox, announce } from '../dom.js';

const MAX_READS = 20; // pages read per click, at most (empty filtered pages included)

/** "2026-05-19T10:00" (datetime-local, read as UTC) -> RFC 3339, or '' when empty. */
export function utc(value) {
  const v = value.trim();
  if (!v) return '';
  if (/[zZ]|[+-]\d\d:\d\d$/.test(v)) return v;
  return /T\d\d:\d\d$/.test(v) ? `${v}:00Z` : `${v}Z`;
}

export async function rejectionsPage({ p, i }) {
  const path = `${instancePath(p, i)}/events`;
  const asked = Number(new URLSearchParams(location.hash.split('?')[1] ?? '').get('limit'));
  const limit = Number.isInteger(asked) && asked >= 1 && asked <= 1000 ? asked : 100;
  const since = field('From (UTC, inclusive)', 'rejections-since', { type: 'datetime-local', step: 1 });
  const until = field('Until (UTC, exclusive)', 'rejections-until', { type: 'datetime-local', step: 1 });
  const filters = h('form', { class: 'toolbar filters', 'aria-label': 'Time filters' },
    since.row, until.row,
    h('button', { type: 'submit' }, 'Apply'),
    h('button', { type: 'reset', class: 'secondary' }, 'Clear'));
  const summary = h('p', { class: 'rejections-summary', 'aria-live': 'polite' });
  const tbody = h('tbody');
  const tableEl = h('table', { class: 'rejections' },
    h('caption', {}, 'Rejected entries, oldest first'),
    h('thead', {}, h('tr', {}, ['Event time', 'Event id', { label: 'Sequence', num: true }, 'Transaction id', 'Code', 'Pointer', 'Message']
      .map((x) => h('th', { scope: 'col', class: x.num ? 'num' : null }, x.label ?? x)))),
    tbody);
  const more = h('button', { type: 'button', class: 'more' }, 'Load more');
  const errorSlot = h('div');
  let state;

  function reset() {
    state = { cursor: undefined, done: false, events: 0, rows: 0, reads: 0, generation: (state?.generation ?? 0) + 1 };
    tbody.replaceChildren();
    errorSlot.replaceChildren();
  }

  async function read() {
    const mine = state.generation;
    more.disabled = true;
    section.setAttribute('aria-busy', 'true');
    const before = state.rows;
    let failed = false;
    try {
      for (let n = 0; n < MAX_READS && !state.done && state.rows === before; n++) {
        const r = await page(path, {
          type: 'entries.rejected', since: utc(since.input.value), until: utc(until.input.value),
          cursor: state.cursor, limit,
        });
        if (mine !== state.generation) return; // the filters changed meanwhile
        state.reads += 1;
        for (const e of r.items) {
          state.events += 1;
          for (const x of e.data?.errors ?? []) {
            state.rows += 1;
            tbody.append(h('tr', { 'data-event': e.id },
              h('td', {}, fmt.date(e.createdAt)),
              h('td', {}, h('code', {}, e.id)),
              num(x.sequence),
              h('td', { class: 'transaction' }, x.transactionId ?? '—'),
              h('td', { class: 'code' }, h('code', {}, x.code)),
              h('td', { class: 'pointer' }, x.pointer ? h('code', {}, x.pointer) : '—'),
              h('td', { class: 'message' }, x.message ?? '')));
          }
        }
        state.cursor = r.next ?? undefined;
        state.done = !r.next;
      }
    } catch (err) {
      failed = true;
      errorSlot.replaceChildren(errorBox(err));
    }
    if (mine !== state.generation) return;
    section.removeAttribute('aria-busy');
    tableEl.hidden = state.rows === 0;
    more.hidden = state.done;
    more.disabled = false;
    // A read that failed says so, not that the API has more (Load more tries again).
    summary.textContent = failed
      ? `${state.rows} rejected entries in ${state.events} events read before the error above; Load more tries again.`
      : state.done
        ? (state.rows ? `${state.rows} rejected entries in ${state.events} entries.rejected events; all read.`
          : 'No rejected entries in this time range.')
        : `${state.rows} rejected entries in ${state.events} events so far; the API has more (Load more reads on).`;
    summary.dataset.rows = String(state.rows);
    summary.dataset.done = String(state.done);
    announce(summary.textContent);
  }

  filters.addEventListener('submit', (e) => {
    e.preventDefault();
    reset();
    read();
  });
  filters.addEventListener('reset', () => {
    setTimeout(() => { reset(); read(); }, 0); // after the inputs are cleared
  });
  more.addEventListener('click', () => read());

  const section = h('section', { class: 'rejections-page' },
    h('h1', {}, 'Rejected entries of ', h('code', {}, i)),
    h('p', { class: 'muted' }, 'Entries the service accepted but could not apply (an unknown item, a total below sold and reserved…), from the instance\'s entries.rejected events: kept by the API whether or not a webhook reached a receiver. Each row is one entry: its log sequence, transaction id, error code, the JSON pointer into the entry and the message.'),
    filters, errorSlot, summary, tableEl, h('nav', { class: 'pager', 'aria-label': 'Rejected entries' }, more));
  reset();
  await read();
  return section;
}
