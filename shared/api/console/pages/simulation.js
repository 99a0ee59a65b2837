// Simulation: a market scenario (PRICING.md) as a form, run by POST /simulations; the
// answer's mean revenue per model with its 95 % confidence interval plotted against the
// optimum (uPlot), and its numbers in a table. Every number shown is the API's; an error is
// shown next to the field the problem's pointer names.

import uPlot from '../vendor/uPlot.esm.js';
import { post } from '../api.js';
import { h, fmt, num, table, errorBox, announce } from '../dom.js';

const MODELS = ['default', 'pace', 'timeBased', 'tiers', 'fixed', 'revenue'];
const DEFAULT_MODELS = ['default', 'pace', 'timeBased', 'tiers', 'fixed'];
const MAX_ITEMS = 5;

/** Scenarios to start from; each within the API's caps (docs/api.md, "Simulations"). */
export const EXAMPLES = {
  quick: {
    label: 'Quick: 10 days, 50 seats, one item',
    scenario: {
      name: 'quick', days: 10, slotsPerDay: 24, capacity: 50, expectedSales: 0.9,
      items: [{ itemId: 'ga', priceSettings: { min: 20, max: 100, default: 50 }, arrivals: 150,
        shape: [[0, 1], [1, 2]], willingnessToPay: { type: 'exponential', mean: 40 } }],
      pastInstances: 0, runs: 40, seed: 1,
    },
  },
  lateSurge: {
    label: 'Late surge (PRICING.md): half the buyers in the last days',
    scenario: {
      name: 'late-surge', days: 30, slotsPerDay: 24, capacity: 200, expectedSales: 0.96,
      items: [{ itemId: 'ga', priceSettings: { min: 30, max: 120, default: 61.11 }, arrivals: 896.3,
        shape: [[0, 1], [0.8, 1.5], [1, 12]], willingnessToPay: { type: 'exponential', mean: 40 } }],
      pastInstances: 1, runs: 30, seed: 1,
    },
  },
  twoItems: {
    label: 'Two items sharing 200 seats (standard and premium)',
    scenario: {
      name: 'premium-two-items', days: 30, slotsPerDay: 24, capacity: 200, expectedSales: 0.9839,
      items: [
        { itemId: 'ga', priceSettings: { min: 30, max: 120, default: 79.86 }, arrivals: 800,
          shape: [[0, 0.5], [1, 2]], willingnessToPay: { type: 'exponential', mean: 40 } },
        { itemId: 'vip', priceSettings: { min: 80, max: 300, default: 134.56 }, arrivals: 120,
          shape: [[0, 1], [1, 1]], willingnessToPay: { type: 'logistic', location: 160, scale: 25 } },
      ],
      pastInstances: 0, runs: 30, seed: 1,
    },
  },
};

const WTP = {
  exponential: [['mean', 'Mean']],
  logistic: [['location', 'Location'], ['scale', 'Scale']],
  uniform: [['low', 'Low'], ['high', 'High']],
};

let formSeq = 0;

export async function simulationPage() {
  const id = `sim${++formSeq}`;
  const section = h('section', { class: 'simulation' }, h('h1', {}, 'Simulate a market'),
    h('p', { class: 'muted' }, 'A market scenario (the format of ', h('code', {}, 'standalone simulate market --scenario'),
      ', PRICING.md) is simulated by the API (', h('code', {}, 'POST /simulations'),
      ') for each model; revenue per model is compared with the optimal dynamic policy. ',
      'Limits: runs × (past instances + 1) × (models × (days × slots a day × items + capacity) + buyers ÷ 10) at most 300,000 (about 0.3 s of the server).'));
  const general = h('div', { class: 'form-errors', 'aria-live': 'polite' });
  const results = h('div', { class: 'results', 'aria-live': 'polite' });

  // Example chooser.
  const exampleSelect = h('select', { id: `${id}-example` },
    Object.entries(EXAMPLES).map(([k, e]) => h('option', { value: k }, e.label)));
  const loadButton = h('button', { type: 'button', class: 'secondary', onclick: () => load(EXAMPLES[exampleSelect.value].scenario) }, 'Load example');

  // Market fields.
  const market = h('fieldset', { class: 'grid' }, h('legend', {}, 'Market'));
  const inputs = {};
  const add = (parent, key, label, attrs = {}, hint) => {
    const f = numberField(`${id}-${key.replace(/\//g, '-')}`, label, `/${key}`, attrs, hint);
    inputs[key] = f.input;
    parent.append(f.row);
    return f.input;
  };
  const nameField = textField(`${id}-name`, 'Name', '/name');
  inputs.name = nameField.input;
  market.append(nameField.row);
  add(market, 'days', 'Days (sales period; the event at its end)', { min: 1, max: 365, step: 1 });
  add(market, 'slotsPerDay', 'Price calculations a day', { min: 1, max: 24, step: 1 });
  add(market, 'capacity', 'Capacity (shared by the items)', { min: 1, max: 1000, step: 1 });
  add(market, 'expectedSales', 'Expected sales (fraction of capacity)', { min: 0, max: 1, step: 'any' });

  const itemsBox = h('div', { class: 'items' });
  const addItemButton = h('button', { type: 'button', class: 'secondary', onclick: () => { addItem(itemsBox, id, null); renumber(itemsBox); } }, 'Add item');

  const modelsBox = h('fieldset', { class: 'models' }, h('legend', {}, 'Models'),
    MODELS.map((m) => h('label', { class: 'check' },
      h('input', { type: 'checkbox', name: 'models', value: m, checked: DEFAULT_MODELS.includes(m) }), ` ${m}`)));
  // Not a field of the scenario: the console's own check names it (the API's 400 for no
  // model names the query parameter).
  modelsBox.dataset.pointer = '/models';

  const monteCarlo = h('fieldset', { class: 'grid' }, h('legend', {}, 'Monte Carlo'));
  add(monteCarlo, 'runs', 'Runs', { min: 1, max: 1000, step: 1 });
  add(monteCarlo, 'pastInstances', 'Past instances (a model may learn from them)', { min: 0, max: 5, step: 1 });
  add(monteCarlo, 'seed', 'Seed', { min: 0, step: 1 });

  const runButton = h('button', { type: 'submit' }, 'Run simulation');
  const form = h('form', { class: 'simulation-form', novalidate: true, 'aria-describedby': `${id}-general` },
    h('div', { class: 'toolbar' }, h('label', { for: exampleSelect.id }, 'Example'), exampleSelect, loadButton),
    market,
    h('h2', {}, 'Items'), itemsBox, addItemButton,
    modelsBox, monteCarlo,
    h('div', { class: 'toolbar' }, runButton));
  general.id = `${id}-general`;

  function load(s) {
    clearErrors(form, general);
    inputs.name.value = s.name;
    for (const k of ['days', 'slotsPerDay', 'capacity', 'expectedSales', 'runs', 'pastInstances', 'seed']) {
      inputs[k].value = s[k] ?? '';
    }
    itemsBox.replaceChildren();
    for (const item of s.items) addItem(itemsBox, id, item);
    renumber(itemsBox);
    announce(`Loaded the scenario ${s.name}.`);
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearErrors(form, general);
    const scenario = read(inputs, itemsBox);
    const models = [...modelsBox.querySelectorAll('input:checked')].map((c) => c.value);
    if (!models.length) {
      // Sent without `models`, the API compares its default list: not what was chosen.
      const message = 'choose at least one model to compare';
      showProblem({ status: 400, message, problem: { errors: [{ pointer: '/models', message }] } }, form, general);
      return;
    }
    runButton.disabled = true;
    results.setAttribute('aria-busy', 'true');
    results.replaceChildren(h('p', { class: 'muted' }, 'Simulating…'));
    try {
      const report = await post('simulations', scenario, { models: models.join(',') });
      results.replaceChildren(...show(report));
      announce(`Simulated ${report.runs} runs of ${report.models.length} models.`);
    } catch (err) {
      results.replaceChildren();
      showProblem(err, form, general);
    } finally {
      runButton.disabled = false;
      results.removeAttribute('aria-busy');
    }
  });

  load(EXAMPLES.quick.scenario);
  section.append(form, general, results);
  return section;
}

function numberField(id, label, pointer, attrs = {}, hint) {
  const input = h('input', { id, name: id, type: 'number', inputmode: 'decimal', 'data-pointer': pointer, ...attrs });
  const row = h('div', { class: 'field' }, h('label', { for: id }, label), input, hint ? h('span', { class: 'muted small' }, hint) : null);
  return { input, row };
}

function textField(id, label, pointer, attrs = {}, hint) {
  const input = h('input', { id, name: id, type: 'text', 'data-pointer': pointer, ...attrs });
  const row = h('div', { class: 'field' }, h('label', { for: id }, label), input, hint ? h('span', { class: 'muted small' }, hint) : null);
  return { input, row };
}

let itemSeq = 0;

/** One item's fieldset; its inputs name their field by `data-key` (re-pointed by renumber). */
function addItem(box, id, item) {
  if (box.children.length >= MAX_ITEMS) return;
  const k = `${id}-item${++itemSeq}`;
  const it = item ?? { itemId: `item-${box.children.length + 1}`, priceSettings: { min: 20, max: 100, default: 50 },
    arrivals: 100, shape: [[0, 1], [1, 1]], willingnessToPay: { type: 'exponential', mean: 40 } };
  const set = h('fieldset', { class: 'item grid' }, h('legend', {}, 'Item'));
  const f = (key, label, value, attrs, text) => {
    const made = (text ? textField : numberField)(`${k}-${key.replace(/\//g, '-')}`, label, '', attrs);
    made.input.dataset.key = key;
    made.input.value = value ?? '';
    set.append(made.row);
    return made.input;
  };
  f('itemId', 'Item id', it.itemId, {}, true);
  f('priceSettings/min', 'Lowest price', it.priceSettings?.min, { min: 0, step: 'any' });
  f('priceSettings/default', 'Default price', it.priceSettings?.default, { min: 0, step: 'any' });
  f('priceSettings/max', 'Highest price', it.priceSettings?.max, { min: 0, step: 'any' });
  f('arrivals', 'Expected buyers (whole period)', it.arrivals, { min: 0, step: 'any' });
  const shape = f('shape', 'Arrival shape: share:weight, …', (it.shape ?? []).map(([x, w]) => `${x}:${w}`).join(', '), {
    'aria-describedby': `${k}-shape-hint` }, true);
  set.append(h('p', { id: `${k}-shape-hint`, class: 'muted small hint' },
    'Relative arrival intensity over the elapsed share of the period, e.g. 0:1, 0.8:1.5, 1:12 (from share 0 to 1).'));
  shape.classList.add('wide');
  const typeId = `${k}-wtp-type`;
  const type = h('select', { id: typeId, 'data-key': 'willingnessToPay/type' },
    Object.keys(WTP).map((t) => h('option', { value: t, selected: t === it.willingnessToPay?.type }, t)));
  set.append(h('div', { class: 'field' }, h('label', { for: typeId }, 'Willingness to pay'), type));
  const params = h('div', { class: 'wtp-params grid' });
  set.append(params);
  const drawParams = (values) => {
    params.replaceChildren();
    for (const [key, label] of WTP[type.value]) {
      const made = numberField(`${k}-wtp-${key}`, label, '', { step: 'any' });
      made.input.dataset.key = `willingnessToPay/${key}`;
      if (set.dataset.pointer) made.input.dataset.pointer = `${set.dataset.pointer}/willingnessToPay/${key}`;
      made.input.value = values?.[key] ?? '';
      params.append(made.row);
    }
  };
  type.addEventListener('change', () => drawParams(null));
  drawParams(it.willingnessToPay);
  const remove = h('button', { type: 'button', class: 'secondary remove-item', onclick: () => {
    if (box.children.length > 1) { set.remove(); renumber(box); }
  } }, 'Remove item');
  set.append(h('div', {}, remove));
  box.append(set);
}

/** Items are numbered in order: legends and the pointers their inputs answer to. */
function renumber(box) {
  [...box.children].forEach((set, i) => {
    set.querySelector('legend').textContent = `Item ${i + 1}`;
    set.dataset.pointer = `/items/${i}`;
    for (const el of set.querySelectorAll('[data-key]')) el.dataset.pointer = `/items/${i}/${el.dataset.key}`;
    const remove = set.querySelector('.remove-item');
    remove.setAttribute('aria-label', `Remove item ${i + 1}`);
    remove.disabled = box.children.length === 1;
  });
}

/** A number when the text is one; else the text itself, so that the API names the field. */
function value(input) {
  const text = input.value.trim();
  if (text === '') return undefined;
  const n = Number(text);
  return Number.isFinite(n) ? n : text;
}

/** The scenario document the form describes (fields left empty are left out). */
function read(inputs, box) {
  const s = { name: inputs.name.value };
  for (const k of ['days', 'slotsPerDay', 'capacity', 'expectedSales']) s[k] = value(inputs[k]);
  s.items = [...box.children].map((set) => {
    const get = (key) => set.querySelector(`[data-key="${key}"]`);
    const wtp = { type: get('willingnessToPay/type').value };
    for (const [key] of WTP[wtp.type]) wtp[key] = value(get(`willingnessToPay/${key}`));
    return {
      itemId: get('itemId').value,
      priceSettings: { min: value(get('priceSettings/min')), max: value(get('priceSettings/max')), default: value(get('priceSettings/default')) },
      arrivals: value(get('arrivals')),
      shape: shapeOf(get('shape').value),
      willingnessToPay: wtp,
    };
  });
  for (const k of ['pastInstances', 'runs', 'seed']) s[k] = value(inputs[k]);
  return JSON.parse(JSON.stringify(s)); // drops the undefined fields
}

/** "0:1, 1:2" as [[0, 1], [1, 2]]; a point that is not two numbers is sent as written. */
function shapeOf(text) {
  return text.split(',').map((p) => p.trim()).filter(Boolean).map((p) => {
    const parts = p.split(':').map((x) => x.trim());
    const nums = parts.map(Number);
    return parts.length === 2 && nums.every((n) => parts.every((x) => x !== '') && Number.isFinite(n)) ? nums : p;
  });
}

function clearErrors(form, general) {
  for (const el of form.querySelectorAll('.field-error')) el.remove();
  for (const el of form.querySelectorAll('[aria-invalid]')) {
    el.removeAttribute('aria-invalid');
    const ids = (el.getAttribute('aria-describedby') || '').split(' ').filter((x) => x && !x.endsWith('-error'));
    if (ids.length) el.setAttribute('aria-describedby', ids.join(' '));
    else el.removeAttribute('aria-describedby');
  }
  general.replaceChildren();
}

/** The input a pointer names: itself, else the nearest field it lies in (`/items/0/shape/2`). */
function target(form, pointer) {
  let p = pointer;
  while (p) {
    const el = form.querySelector(`[data-pointer="${CSS.escape(p)}"]`);
    if (el) return el;
    p = p.slice(0, p.lastIndexOf('/'));
  }
  return null;
}

/** A problem's errors next to the fields they name (focus on the first); the rest above. */
function showProblem(err, form, general) {
  const errors = err.problem?.errors ?? [];
  let first = null;
  const unplaced = [];
  for (const e of errors) {
    const el = target(form, e.pointer);
    if (!el) { unplaced.push(e); continue; }
    const errId = `${el.id || el.dataset.pointer.replace(/\W/g, '-')}-error`;
    const msg = h('p', { class: 'field-error error', id: errId, 'data-for': e.pointer }, `${e.pointer}: ${e.message}`);
    if (el.tagName === 'FIELDSET') el.append(msg);
    else {
      el.setAttribute('aria-invalid', 'true');
      el.setAttribute('aria-describedby', [el.getAttribute('aria-describedby'), errId].filter(Boolean).join(' '));
      el.closest('.field').append(msg);
    }
    first ??= el.tagName === 'FIELDSET' ? el.querySelector('input, select') : el;
  }
  if (!errors.length || unplaced.length) {
    const detail = unplaced.length ? unplaced.map((e) => `${e.pointer || '(the scenario)'}: ${e.message}`).join('; ') : null;
    general.append(errorBox(detail ? { status: err.status, message: detail } : err));
  }
  if (first) first.focus();
  announce(`The API refused the scenario: ${err.message}`);
}

/** The report: chart and table. */
function show(report) {
  const chartBox = h('div', { class: 'sim-chart' });
  const figure = h('figure', { class: 'chart' },
    h('figcaption', {}, `Mean revenue per model (95 % confidence interval) against the optimum: ${report.scenario}, ${fmt.int(report.runs)} runs`),
    chartBox);
  const rows = report.models.map((m) => [
    h('th', { scope: 'row' }, m.label),
    num(m.revenue.mean, 'money', { 'data-key': 'revenue' }),
    num(m.revenue.ci95, 'money', { 'data-key': 'ci95' }),
    num(m.sold.mean, 'dec', { 'data-key': 'sold' }),
    num(m.percentOfOptimal, 'dec', { 'data-key': 'percentOfOptimal' }),
  ]);
  const models = table('Models', ['Model', { label: 'Mean revenue', num: true }, { label: '± 95 % CI', num: true },
    { label: 'Units sold (mean)', num: true }, { label: '% of optimal', num: true }], rows, { class: 'sim-models' });
  models.querySelectorAll('tbody tr').forEach((tr, i) => { tr.dataset.model = report.models[i].label; });
  const prices = Object.entries(report.bestFixed.prices);
  const refs = table('References (from the true demand)', ['Reference', { label: 'Expected revenue', num: true }], [
    [h('th', { scope: 'row' }, 'Optimal dynamic policy'), num(report.optimal.revenue, 'money', { 'data-key': 'optimal' })],
    [h('th', { scope: 'row' }, 'Fluid bound'), num(report.fluidBound, 'money', { 'data-key': 'fluidBound' })],
    [h('th', { scope: 'row' }, 'Best fixed prices'), num(report.bestFixed.revenue, 'money', { 'data-key': 'bestFixed' })],
  ], { class: 'sim-references' });
  const fixed = table('Best fixed price per item', ['Item', { label: 'Price', num: true }],
    prices.map(([item, p]) => [h('th', { scope: 'row' }, item), num(p, 'money', { 'data-item': item })]), { class: 'sim-fixed' });
  const out = [h('h2', {}, 'Result'), figure, h('div', { class: 'cards' }, h('div', {}, models), h('div', {}, refs, fixed))];
  // Drawn once the figure is in the page (uPlot measures nothing, but the width is the box's).
  requestAnimationFrame(() => chart(chartBox, report));
  return out;
}

function chart(box, report) {
  const models = report.models;
  const n = models.length;
  const xs = models.map((_, i) => i);
  const means = models.map((m) => m.revenue.mean);
  // ci95 is null for one run: no interval drawn.
  const lo = models.map((m) => m.revenue.mean - (m.revenue.ci95 ?? 0));
  const hi = models.map((m) => m.revenue.mean + (m.revenue.ci95 ?? 0));
  const optimal = report.optimal.revenue;
  const fixed = report.bestFixed.revenue;
  const refs = [[optimal, '#1d6b2c', [8, 4]], [fixed, '#7a4d00', [3, 4]]];
  const top = Math.max(optimal, fixed, ...hi, 1) * 1.08;
  const width = Math.max(320, Math.min(box.clientWidth || 760, 900));
  new uPlot({
    width,
    height: 320,
    scales: { x: { time: false, range: [-0.5, n - 0.5] }, y: { range: [0, top] } },
    axes: [
      { stroke: '#333', splits: () => xs, values: (u, splits) => splits.map((v) => models[v]?.label ?? ''), grid: { show: false } },
      { stroke: '#333', label: 'revenue', size: 80, values: (u, splits) => splits.map((v) => fmt.int(v)) },
    ],
    series: [
      { label: 'model', value: (u, v) => (v === null || v === undefined ? '—' : models[v]?.label ?? '—') },
      { label: 'mean revenue', stroke: '#1f5fbf', fill: 'rgba(31, 95, 191, 0.35)', width: 1,
        paths: uPlot.paths.bars({ size: [0.5, 90] }), points: { show: false }, value: (u, v) => fmt.money(v) },
      { label: 'optimum', stroke: '#1d6b2c', dash: [8, 4], width: 2, paths: () => null, points: { show: false }, value: () => fmt.money(optimal) },
      { label: 'best fixed prices', stroke: '#7a4d00', dash: [3, 4], width: 2, paths: () => null, points: { show: false }, value: () => fmt.money(fixed) },
    ],
    legend: { live: true },
    hooks: {
      draw: [(u) => {
        const ctx = u.ctx;
        const px = uPlot.pxRatio;
        ctx.save();
        // The references across the whole plot.
        for (const [v, color, dash] of refs) {
          const y = u.valToPos(v, 'y', true);
          ctx.strokeStyle = color;
          ctx.lineWidth = 2 * px;
          ctx.setLineDash(dash.map((d) => d * px));
          ctx.beginPath();
          ctx.moveTo(u.bbox.left, y);
          ctx.lineTo(u.bbox.left + u.bbox.width, y);
          ctx.stroke();
        }
        // Whiskers: the 95 % confidence interval of each mean.
        ctx.setLineDash([]);
        ctx.strokeStyle = '#1b1b1b';
        ctx.lineWidth = 2 * px;
        const w = 10 * px;
        for (let i = 0; i < n; i++) {
          const x = u.valToPos(i, 'x', true);
          const y0 = u.valToPos(lo[i], 'y', true);
          const y1 = u.valToPos(hi[i], 'y', true);
          ctx.beginPath();
          ctx.moveTo(x, y0); ctx.lineTo(x, y1);
          ctx.moveTo(x - w, y0); ctx.lineTo(x + w, y0);
          ctx.moveTo(x - w, y1); ctx.lineTo(x + w, y1);
          ctx.stroke();
        }
        ctx.restore();
      }],
    },
  }, [xs, means, means.map(() => optimal), means.map(() => fixed)], box);
  box.append(h('p', { class: 'muted small' },
    'Bars: mean revenue of the scored instance; whiskers: its 95 % confidence interval; dashed: the optimal dynamic policy and the best fixed prices. Every value is the API\'s (POST /simulations).'));
}
