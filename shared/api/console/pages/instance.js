// An instance: its products and items with sold, reserved, available and the current price.
// Items are paged by the API's cursor (10,000 items stay one page at a time); the current
// prices are the latest calculation's, read once from instancePrices (all of its pages).

import { get, page, all, instancePath, seg } from '../api.js';
import { h, fmt, num, table, dl, link, errorBox, announce, route, pager } from '../dom.js';

const SIZES = [25, 100, 500];

export async function instancePage({ p, i }) {
  const base = instancePath(p, i);
  // In parallel, but the details' answer speaks first: for an unknown instance its 404,
  // not the prices call's 400 (which names the instanceId it was given).
  const [d, prices] = await Promise.all([get(base), latestPrices(p, i).catch((e) => e)]);
  if (prices instanceof Error) throw prices;
  const products = d.productsNext ? await all(`${base}/products`) : d.products;
  const { appliedSequence, lastSequence } = d.processing;
  const main = (d.meta?.dates ?? []).find((x) => (x.tags ?? []).includes('main'));
  const section = h('section', { class: 'instance' },
    h('h1', {}, d.name || d.instanceId, ' ', h('code', {}, d.instanceId)),
    h('p', { class: 'actions' }, link(route.subscriptions(p, i), 'Webhooks: subscriptions, deliveries, attempts'), ' · ',
      link(route.rejections(p, i), 'Rejected entries')),
    dl([
      ['Project', d.projectId],
      ['Scheduled pricing', d.active ? 'active' : (d.deactivated ? 'deactivated' : 'inactive'), 'active'],
      ['Main date', main ? `${fmt.date(main.date?.start)} – ${fmt.date(main.date?.end)}` : null],
      ['Deactivation date', fmt.date(d.deactivationDate)],
      ['Time zone', d.timeZone],
      ['Log', `${fmt.int(appliedSequence)} of ${fmt.int(lastSequence)} entries applied`, 'processing'],
      ['Latest calculation', prices.calculatedAt ? `${fmt.date(prices.calculatedAt)} (${prices.calculationId}, sequence ${prices.sequence})` : 'none yet', 'calculation'],
    ], { class: 'facts' }));
  section.append(h('h2', { id: 'products-title' }, 'Products'));
  section.append(table(null,
    ['Product', 'Model', { label: 'Capacity', num: true }, { label: 'Sold', num: true }, { label: 'Reserved', num: true },
      { label: 'Available', num: true }, { label: 'Oversold', num: true }],
    products.map((x) => [
      h('td', {}, link(route.product(p, i, x.productId), x.productId)),
      h('td', { class: 'model', 'data-product': x.productId }, '…'),
      num(x.capacity), num(x.sold), num(x.reserved), num(x.available), num(x.oversold),
    ]), { class: 'products', 'aria-labelledby': 'products-title' }));
  section.querySelectorAll('table.products tbody tr').forEach((tr, k) => { tr.dataset.product = products[k].productId; });
  models(base, section);
  section.append(itemsBlock(p, i, products, prices));
  return section;
}

/** Fills in each product's pricing model (from product details). */
async function models(base, section) {
  for (const cell of section.querySelectorAll('td.model')) {
    get(`${base}/products/${seg(cell.dataset.product)}`)
      .then((d) => { cell.textContent = d.properties?.pricingModel?.type ?? 'revenue (default)'; })
      .catch(() => { cell.textContent = '?'; });
  }
}

/** The latest calculation's prices: {calculationId, calculatedAt, sequence, byItem: Map}. */
async function latestPrices(p, i) {
  const byItem = new Map();
  let head = {};
  let cursor;
  do {
    const r = await page(`projects/${seg(p)}/instancePrices`, { instanceId: i, cursor, limit: 100 });
    for (const x of r.items) {
      if (x.instanceId !== i) continue;
      if (head.calculationId && x.calculationId !== head.calculationId) {
        byItem.clear(); // a newer calculation landed between pages: it starts over
      }
      head = x;
      for (const { itemId, price } of x.prices) byItem.set(itemId, price);
    }
    cursor = r.next;
  } while (cursor);
  return { calculationId: head.calculationId, calculatedAt: head.calculatedAt, sequence: head.sequence, byItem };
}

function itemsBlock(p, i, products, prices) {
  const base = instancePath(p, i);
  const state = { size: 100, productId: '' };
  const body = h('div', { class: 'items-page' });
  const info = h('span', { class: 'page-info', 'aria-live': 'polite' });
  const prev = h('button', { type: 'button', class: 'prev' }, 'Previous page');
  const next = h('button', { type: 'button', class: 'next' }, 'Next page');
  const size = h('select', { id: 'page-size' }, SIZES.map((n) => h('option', { value: n, selected: n === state.size }, String(n))));
  const product = h('select', { id: 'product-filter' },
    h('option', { value: '' }, 'all products'),
    products.map((x) => h('option', { value: x.productId }, x.productId)));
  const goto = h('input', { id: 'goto-item', type: 'text', autocomplete: 'off', placeholder: 'item id' });
  const gotoForm = h('form', { class: 'inline' },
    h('label', { for: 'goto-item' }, 'Open item'), goto, h('button', { type: 'submit' }, 'Open'));
  gotoForm.addEventListener('submit', (e) => {
    e.preventDefault();
    if (goto.value.trim()) location.hash = route.item(p, i, goto.value.trim());
  });

  const items = pager({
    prev,
    next,
    read: (cursor) => page(`${base}/items`, { cursor, limit: state.size, productId: state.productId }),
    reading(to) {
      body.setAttribute('aria-busy', 'true');
      info.textContent = `Reading page ${to + 1}…`;
    },
    show(r, at) {
      const rows = r.items.map((x) => {
        const price = prices.byItem.get(x.itemId);
        return [
          h('td', {}, link(route.item(p, i, x.itemId), x.itemId)),
          h('td', {}, x.productId),
          h('td', {}, fmt.yesNo(x.dynamicPricing)),
          num(x.sold), num(x.reserved), num(x.available), num(x.oversold),
          num(price, 'money', { class: 'num price' }),
        ];
      });
      const t = table(null, ['Item', 'Product', 'Dynamic pricing', { label: 'Sold', num: true }, { label: 'Reserved', num: true },
        { label: 'Available', num: true }, { label: 'Oversold', num: true }, { label: 'Current price', num: true }], rows,
      { class: 'items', 'aria-labelledby': 'items-title' });
      t.querySelectorAll('tbody tr').forEach((tr, k) => { tr.dataset.item = r.items[k].itemId; });
      const first = at * state.size + 1;
      info.textContent = r.items.length
        ? `Page ${at + 1}: items ${fmt.int(first)}–${fmt.int(first + r.items.length - 1)}${r.next ? '' : ' (last page)'}`
        : 'No items.';
      body.replaceChildren(t);
      announce(info.textContent);
    },
    failed(err, to) {
      body.replaceChildren(errorBox(err));
      info.textContent = `Page ${to + 1} could not be read`;
    },
    settled(at) {
      body.removeAttribute('aria-busy');
      body.dataset.page = at + 1;
    },
  });
  size.addEventListener('change', () => { state.size = Number(size.value); items.restart(); });
  product.addEventListener('change', () => { state.productId = product.value; items.restart(); });
  items.restart();
  return h('section', { 'aria-labelledby': 'items-title' },
    h('h2', { id: 'items-title' }, 'Items'),
    h('p', { class: 'muted small' }, prices.calculationId
      ? `Current price: the latest calculation's (${prices.calculationId}); a dash means the item has no price yet.`
      : 'No prices yet: ask for a calculation (POST /projects/{projectId}/calculatePrices).'),
    h('div', { class: 'toolbar' },
      h('span', { class: 'field inline' }, h('label', { for: 'product-filter' }, 'Product'), product),
      h('span', { class: 'field inline' }, h('label', { for: 'page-size' }, 'Items per page'), size),
      gotoForm),
    body,
    h('nav', { class: 'pager', 'aria-label': 'Item pages' }, prev, info, next));
}
