// An item: its price over time (priceHistory) with its sales (itemSale entries of the log)
// on the same time axis, and the explanation of each price on hover, click or keyboard.

import uPlot from '../vendor/uPlot.esm.js';
import { get, all, instancePath, seg } from '../api.js';
import { h, fmt, num, table, dl, link, announce, route } from '../dom.js';

/** What the revenue model's explanation carries, in words (shared/core revenue.rs). */
const REVENUE = [
  ['remainingDemand', 'Estimated demand from now on (units, at this price)', 'dec'],
  ['expectedSales', 'Expected sales of the product from now on (units)', 'dec'],
  ['sellsOut', 'Expected to sell out', 'yesNo'],
  ['demandLevel', 'Estimated demand over the whole period at the default price (units)', 'dec'],
  ['priceResponse', 'Price response (demand × e^(−r·Δprice))', 'dec'],
  ['bidPrice', 'Bid price (value of a unit of capacity)', 'money'],
  ['unitsLeft', 'Units the product has left', 'int'],
  ['timeLeft', 'Share of the sales period to come', 'pct'],
  ['demandLeft', 'Share of demand to come (booking curve)', 'pct'],
  ['unitsObserved', 'Units sold so far (data behind the estimate)', 'int'],
  ['curve', 'Booking curve from', null],
  ['beliefRefuted', 'Sales fell far short of the expected sales (the default looked above the market)', 'yesNo'],
];

export async function itemPage({ p, i, x }) {
  const base = `${instancePath(p, i)}/items/${seg(x)}`;
  const [item, history] = await Promise.all([get(base), all(`${base}/priceHistory`)]);
  const ps = item.properties?.priceSettings ?? {};
  const section = h('section', { class: 'item' },
    h('h1', {}, 'Item ', h('code', {}, item.itemId), item.removed ? h('span', { class: 'badge removed' }, 'removed') : null),
    item.removed ? h('p', { class: 'notice', role: 'note' },
      'This item was removed: it is no longer priced, and the price history below ends with its last price before the removal.') : null,
    dl([
      ['Product', link(route.product(p, i, item.productId), item.productId)],
      ['Sold', fmt.int(item.sold), 'sold'],
      ['Reserved', fmt.int(item.reserved), 'reserved'],
      ['Available', fmt.int(item.available), 'available'],
      ['Oversold', fmt.int(item.oversold), 'oversold'],
      ['Current price', item.removed ? 'none (removed)' : (history.length ? fmt.money(history[history.length - 1].price) : 'none yet'), 'price'],
      ['Price settings', `min ${fmt.money(ps.min)}, max ${fmt.money(ps.max)}, default ${fmt.money(ps.default)}, multiplier ${fmt.dec(ps.multiplier ?? 1)}`],
      ['Sales period', period(item.properties?.salesPeriod)],
      // Where scheduled pricing applies, as the API works it out: the item's own period,
      // else its sales period (it showed the property as set: "—" when none was set).
      ['Dynamic pricing period', item.dynamicPricingPeriods?.length
        ? item.dynamicPricingPeriods.map(period).join('; ')
          + (item.properties?.dynamicPricingPeriod ? '' : ' (its sales period)')
        : 'none'],
      ['Dynamic pricing', fmt.yesNo(item.properties?.dynamicPricing ?? true)],
      item.priceMatches?.length ? ['Price matches', item.priceMatches.map((m) => `${m.itemId} = ${m.sourceItemId} × ${m.ratio} + ${m.offset}`).join('; ')] : null,
    ], { class: 'facts' }));
  const explain = h('section', { class: 'card explanation', 'aria-labelledby': 'explain-title', 'aria-live': 'polite' },
    h('h2', { id: 'explain-title' }, 'Explanation'),
    h('p', { class: 'muted' }, 'Hover over or click a price on the plot, or choose a row below.'));
  const chartBox = h('figure', { class: 'chart', 'aria-labelledby': 'chart-title' },
    h('figcaption', { id: 'chart-title' }, 'Price over time (line) and sales at the price paid (dots)'));
  const salesBox = h('section', { 'aria-labelledby': 'sales-title' }, h('h2', { id: 'sales-title' }, 'Sales'),
    h('p', { class: 'muted', 'aria-busy': 'true' }, 'Reading the entry log…'));
  section.append(h('div', { class: 'split' }, chartBox, explain));

  const show = (k) => {
    if (k === null || k === undefined || !history[k]) return;
    explain.replaceChildren(h('h2', { id: 'explain-title' }, 'Explanation'), ...explanation(history[k]));
    explain.dataset.sequence = history[k].sequence;
    section.querySelectorAll('table.history tr[aria-selected]').forEach((tr) => tr.removeAttribute('aria-selected'));
    section.querySelector(`table.history tr[data-index="${k}"]`)?.setAttribute('aria-selected', 'true');
  };

  const historyTable = table(null, ['Calculated', 'Trigger', 'Status', { label: 'Price', num: true }, { label: 'Previous', num: true }, 'Model', ''],
    history.map((e, k) => [
      h('td', {}, fmt.date(e.calculatedAt)), h('td', {}, e.trigger), h('td', {}, e.status ?? '—'),
      num(e.price, 'money', { class: 'num price' }), num(e.previousPrice, 'money'),
      h('td', {}, e.explanation?.model?.type ?? '—'),
      h('td', {}, h('button', { type: 'button', class: 'explain', onclick: () => show(k), 'aria-label': `Explain the price of ${fmt.date(e.calculatedAt)}` }, 'Explain')),
    ]), { class: 'history', 'aria-labelledby': 'history-title' });
  historyTable.querySelectorAll('tbody tr').forEach((tr, k) => { tr.dataset.index = k; tr.dataset.sequence = history[k].sequence; });
  section.append(salesBox,
    h('section', { 'aria-labelledby': 'history-title' }, h('h2', { id: 'history-title' }, `Price history (${history.length})`),
      history.length ? historyTable : h('p', {}, 'No prices calculated yet.')));

  // The log is read after the page shows; the plot waits for the sales.
  sales(p, i, x).then((sold) => {
    salesBox.replaceChildren(h('h2', { id: 'sales-title' }, `Sales (${sold.length})`),
      sold.length ? table(null, ['Sold at', { label: 'Quantity', num: true }, { label: 'Price', num: true }, 'Currency', 'Transaction', { label: 'Sequence', num: true }],
        sold.map((s) => [h('td', {}, fmt.date(new Date(s.t * 1000).toISOString())), num(s.quantity), num(s.price, 'money'), h('td', {}, s.currency ?? '—'),
          h('td', {}, s.transactionId ?? '—'), num(s.sequence)]), { class: 'sales' }) : h('p', {}, 'No sales in the log.'));
    plot(chartBox, history, sold, show);
    if (history.length) show(history.length - 1);
    section.dataset.ready = 'true';
    announce('Plot ready');
  }).catch((err) => {
    salesBox.replaceChildren(h('p', { class: 'error', role: 'alert' }, `Reading the log failed: ${err.message}`));
    section.dataset.ready = 'true';
  });
  return section;
}

function period(x) {
  return x ? `${fmt.date(x.start)} – ${fmt.date(x.end)}` : '—';
}

/** The item's itemSale entries, read from the signed log (the payload of each JWS). The
 *  time is the sale's soldAt, else the entry's timestamp, else when it was received. */
async function sales(p, i, itemId) {
  const out = [];
  // An entry the service rejected (a return of more than was sold, say) stays in the log
  // but was never applied: its sequence is in an entries.rejected event, and it is not a
  // sale (shown as one, the table disagreed with the item's sold count).
  const rejected = new Set();
  for (const e of await all(`${instancePath(p, i)}/events`, { type: 'entries.rejected' })) {
    for (const x of e.data?.errors ?? []) rejected.add(x.sequence);
  }
  let after = 0;
  for (;;) {
    const r = await get(`${instancePath(p, i)}/entries`, { after, limit: 1000 });
    for (const e of r.items) {
      const entry = payload(e.jwt);
      if (entry?.type !== 'itemSale' || entry.data?.itemId !== itemId) continue;
      if (rejected.has(e.sequence)) continue;
      const when = entry.data.soldAt ?? entry.timestamp ?? e.receivedAt;
      out.push({ t: Date.parse(when) / 1000, quantity: entry.data.quantity ?? 1, price: entry.data.price,
        currency: entry.data.currency, transactionId: e.transactionId, sequence: e.sequence });
    }
    if (r.next === null || r.next === undefined || !r.items.length) break;
    after = r.next;
  }
  return out.sort((a, b) => a.t - b.t);
}

function payload(jwt) {
  try {
    const b = jwt.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return JSON.parse(new TextDecoder().decode(Uint8Array.from(atob(b), (c) => c.charCodeAt(0))));
  } catch {
    return null;
  }
}

function plot(box, history, sold, show) {
  if (!history.length && !sold.length) {
    box.append(h('p', {}, 'Nothing to plot yet.'));
    return;
  }
  // One x axis (seconds): price points and sales merged; each series null where it has none.
  const points = [
    ...history.map((e, k) => ({ t: Date.parse(e.calculatedAt) / 1000, price: e.price, k })),
    // Returns (a negative quantity) are listed with the sales, not drawn as one.
    ...sold.filter((s) => s.quantity > 0).map((s) => ({ t: s.t, sale: s.price, s })),
  ].sort((a, b) => a.t - b.t);
  const xs = points.map((q) => q.t);
  const prices = points.map((q) => q.price ?? null);
  const salePrices = points.map((q) => q.sale ?? null);
  const width = Math.max(320, Math.min(box.clientWidth || 760, 900));
  const u = new uPlot({
    width,
    height: 300,
    title: undefined,
    // The time axis in UTC, as every other time of the console (it was the browser's zone).
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
    scales: { x: { time: true } },
    axes: [{ stroke: '#333', space: 80 }, { stroke: '#333', label: 'price', size: 70 }],
    series: [
      { label: 'time (UTC)', value: (_, v) => (v === null ? '—' : `${new Date(v * 1000).toISOString().replace('T', ' ').slice(0, 19)}Z`) },
      { label: 'price', stroke: '#1f5fbf', width: 2, spanGaps: true, paths: uPlot.paths.stepped({ align: 1 }),
        points: { show: true, size: 6, fill: '#1f5fbf' }, value: (_, v) => fmt.money(v) },
      { label: 'sale (price paid)', stroke: '#b3261e', fill: '#b3261e', paths: () => null,
        points: { show: true, size: 10, fill: '#b3261e', stroke: '#b3261e' }, value: (_, v) => fmt.money(v) },
    ],
    hooks: {
      setCursor: [(u) => {
        const idx = u.cursor.idx;
        if (idx !== null && idx !== undefined && !locked && points[idx]?.k !== undefined) show(points[idx].k);
      }],
    },
  }, [xs, prices, salePrices], box);
  let locked = false;
  u.over.addEventListener('click', () => {
    const idx = u.cursor.idx;
    // A click on a price keeps its explanation shown; a click elsewhere lets hover go on.
    locked = idx !== null && idx !== undefined && points[idx]?.k !== undefined;
    if (locked) show(points[idx].k);
  });
  box.append(h('p', { class: 'muted small' }, `${history.length} prices, ${sold.length} sales. Every value is the API's: prices from priceHistory, sales from the itemSale entries of the log.`));
}

function explanation(e) {
  const x = e.explanation ?? {};
  const m = x.model ?? {};
  const parts = [dl([
    ['Price', fmt.money(e.price), 'price'],
    ['Previous price', fmt.money(e.previousPrice)],
    ['Calculated', fmt.date(e.calculatedAt)],
    ['Calculation', e.calculationId],
    ['Trigger', e.trigger],
    ['Sequence', String(e.sequence)],
    ['Status', e.status],
    ['Model', m.type ?? '—', 'model'],
    ['Default price', fmt.money(x.defaultPrice)],
    ['Item multiplier', fmt.dec(x.itemMultiplier)],
    ['Product multiplier (M)', fmt.dec(x.productMultiplier)],
    ['Raw (default × multipliers)', fmt.money(x.raw)],
    x.maxStepChange ? ['Step cap', JSON.stringify(x.maxStepChange)] : null,
    x.bound ? ['Bound applied', JSON.stringify(x.bound)] : null,
    x.rounding ? ['Rounding', `${fmt.money(x.rounding.from)} → ${fmt.money(x.rounding.to)} (step ${x.rounding.step})`] : null,
    x.match ? ['Price match', JSON.stringify(x.match)] : null,
    x.matchSkipped ? ['Match skipped', JSON.stringify(x.matchSkipped)] : null,
    x.kept ? ['Kept', JSON.stringify(x.kept)] : null,
  ])];
  if (m.type === 'revenue') {
    parts.push(h('h3', {}, 'Demand (revenue model)'),
      dl(REVENUE.filter(([k]) => k in m).map(([k, label, kind]) => [label, kind ? fmt[kind](m[k]) : String(m[k]), k]), { class: 'demand' }));
    if (m.note) parts.push(h('p', { class: 'muted' }, `Note: ${m.note}`));
  } else if (m.type) {
    const rest = Object.entries(m).filter(([k]) => k !== 'type');
    parts.push(h('h3', {}, `Model inputs (${m.type})`),
      dl(rest.map(([k, v]) => [k, typeof v === 'number' ? fmt.dec(v) : (typeof v === 'object' ? JSON.stringify(v) : String(v)), k]), { class: 'inputs' }));
  }
  return parts;
}
