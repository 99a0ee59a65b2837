// A product: its counts, and sold against the expected booking curve as the pace model's
// explanations state them (actual = sold / capacity, expected = expectedSales × tau^curve)
// at each calculation of its first item.

import uPlot from '../vendor/uPlot.esm.js';
import { get, all, instancePath, seg } from '../api.js';
import { h, fmt, dl, link, route } from '../dom.js';

export async function productPage({ p, i, x }) {
  const base = instancePath(p, i);
  const d = await get(`${base}/products/${seg(x)}`);
  const itemIds = d.itemsNext ? await all(`${base}/items`, { productId: x }).then((r) => r.map((y) => y.itemId)) : d.items;
  const model = d.properties?.pricingModel;
  const section = h('section', { class: 'product' },
    h('h1', {}, 'Product ', h('code', {}, d.productId)),
    dl([
      ['Pricing model', model?.type ?? 'revenue (default)', 'model'],
      ['Capacity', fmt.int(d.capacity), 'capacity'],
      ['Sold', fmt.int(d.sold), 'sold'],
      ['Reserved (items and product)', fmt.int(d.reserved), 'reserved'],
      ['Reserved on the product', fmt.int(d.productReserved)],
      ['Available', fmt.int(d.available), 'available'],
      ['Oversold', fmt.int(d.oversold), 'oversold'],
      ['Expected sales (share of capacity)', fmt.pct(d.properties?.expectedSales)],
      ['Zone', d.metadata?.zone ?? null],
    ], { class: 'facts' }));
  const chart = h('figure', { class: 'chart', 'aria-labelledby': 'curve-title' },
    h('figcaption', { id: 'curve-title' }, 'Share sold against the expected booking curve, at each calculation'));
  section.append(chart);
  if (itemIds.length) {
    const history = await all(`${base}/items/${seg(itemIds[0])}/priceHistory`);
    const pace = history.filter((e) => e.explanation?.model?.type === 'pace');
    if (pace.length) {
      new uPlot({
        width: Math.max(320, Math.min(section.clientWidth || 760, 900)),
        height: 260,
        tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
        scales: { x: { time: true } },
        axes: [{ stroke: '#333', space: 80 }, { stroke: '#333', label: 'share of capacity', size: 70, values: (_, v) => v.map((y) => `${Math.round(y * 1000) / 10} %`) }],
        series: [
          {},
          { label: 'sold (actual)', stroke: '#b3261e', width: 2, points: { show: true }, value: (_, v) => fmt.pct(v) },
          { label: 'expected', stroke: '#1f5fbf', width: 2, dash: [6, 4], points: { show: true }, value: (_, v) => fmt.pct(v) },
        ],
      }, [pace.map((e) => Date.parse(e.calculatedAt) / 1000), pace.map((e) => e.explanation.model.actual), pace.map((e) => e.explanation.model.expected)], chart);
    } else {
      chart.append(h('p', {}, `The ${model?.type ?? 'revenue'} model's explanations carry no booking curve of the product; the items' pages show each price's explanation (for the revenue model the estimated demand and expected sales).`));
    }
  }
  section.append(h('h2', {}, `Items (${fmt.int(itemIds.length)})`),
    h('ul', { class: 'columns' }, itemIds.slice(0, 1000).map((id) => h('li', {}, link(route.item(p, i, id), id)))));
  // (The DOM's own append writes a null as the text "null".)
  if (itemIds.length > 1000) {
    section.append(h('p', { class: 'muted' }, 'The first 1,000 are listed; the instance page pages through all of them (filter by product).'));
  }
  return section;
}
