// Seeds an instance through the public API, as a client would: a project, an instance,
// two products, items, sales over a few calculations, a reservation, a rejected entry and
// a subscription whose receiver answers. Used by console.test.mjs; also runnable by hand:
//   node tests/console/seed.mjs http://127.0.0.1:8080 "$TOKEN" [items]

import http from 'node:http';

export async function api(base, token, method, path, body) {
  const headers = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(base + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

/** Every page of a listing, merged. */
export async function all(base, token, path) {
  const out = [];
  let cursor = null;
  do {
    const sep = path.includes('?') ? '&' : '?';
    const page = await api(base, token, 'GET',
      path + sep + 'limit=1000' + (cursor ? '&cursor=' + encodeURIComponent(cursor) : ''));
    out.push(...page.items);
    cursor = page.next;
  } while (cursor);
  return out;
}

/** Waits until the instance applied everything it was sent. */
export async function settle(base, token, project, instance) {
  for (let i = 0; i < 200; i++) {
    const d = await api(base, token, 'GET', `/projects/${project}/instances/${instance}`);
    if (d.processing.appliedSequence >= d.processing.lastSequence) return d;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('the instance did not catch up with its log');
}

async function calculate(base, token, project, instance, reason) {
  const before = await api(base, token, 'GET', `/projects/${project}/instancePrices?instanceId=${instance}`);
  const seqBefore = before.items[0]?.sequence ?? 0;
  await api(base, token, 'POST', `/projects/${project}/calculatePrices`,
    { instanceIds: [instance], metadata: { reason } });
  for (let i = 0; i < 300; i++) {
    const p = await api(base, token, 'GET', `/projects/${project}/instancePrices?instanceId=${instance}`);
    if ((p.items[0]?.sequence ?? 0) > seqBefore) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('no calculation arrived');
}

/** A webhook receiver on a free loopback port that answers 204 (and 500 to its first call,
 *  so the delivery log shows a retry). */
export function receiver() {
  let calls = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      calls += 1;
      res.statusCode = calls === 1 ? 500 : 204;
      res.end();
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

export async function seed(base, token, { items = 10_000, callbackUrl } = {}) {
  const project = 'festival';
  const instance = 'day-1';
  await api(base, token, 'POST', '/projects', { projectId: project, name: 'Summer festival' });
  await api(base, token, 'POST', '/projects', { projectId: 'club', name: 'Club nights' });
  await api(base, token, 'POST', `/projects/${project}/instances`, {
    instanceId: instance,
    name: 'Day 1',
    timeZone: 'Europe/Berlin',
    active: true,
    deactivationDate: '2027-07-02T00:00:00Z',
    meta: {
      dates: [{
        date: { start: '2027-07-01T16:00:00Z', end: '2027-07-01T23:00:00Z' },
        description: 'Day 1',
        tags: ['main'],
      }],
    },
  });
  await api(base, token, 'POST', `/projects/${project}/instances`, { instanceId: 'day-2', name: 'Day 2' });
  let subscription = null;
  if (callbackUrl) {
    subscription = await api(base, token, 'POST', `/projects/${project}/instances/${instance}/subscriptions`,
      { callbackUrl, description: 'console test receiver' });
  }
  const entries = `/projects/${project}/instances/${instance}/entries`;
  const period = { start: '2026-10-01T00:00:00Z', end: '2027-07-01T16:00:00Z' };
  await api(base, token, 'POST', entries, { entries: [
    { type: 'productRegistration', transactionId: 'p-ga',
      data: { productId: 'ga', capacity: 20_000, expectedSales: 0.9 } },
    { type: 'productRegistration', transactionId: 'p-vip',
      data: { productId: 'vip', capacity: 200, expectedSales: 1, pricingModel: 'pace' } },
    { type: 'itemRegistration', transactionId: 'i-ga-early', data: {
      itemId: 'ga-early', productId: 'ga', salesPeriod: period,
      priceSettings: { min: 39, max: 89, default: 49 } } },
    { type: 'itemRegistration', transactionId: 'i-vip', data: {
      itemId: 'vip-lounge', productId: 'vip', salesPeriod: period,
      priceSettings: { min: 120, max: 300, default: 150 } } },
  ] });
  // Seats: many items of one product, registered 1,000 per request.
  for (let start = 0; start < items; start += 1000) {
    const batch = [];
    for (let i = start; i < Math.min(items, start + 1000); i++) {
      const id = 'seat-' + String(i).padStart(5, '0');
      batch.push({ type: 'itemRegistration', transactionId: 'i-' + id, data: {
        itemId: id, productId: 'ga', salesPeriod: period,
        priceSettings: { min: 30, max: 120, default: 55 } } });
    }
    await api(base, token, 'POST', entries, { entries: batch });
  }
  await settle(base, token, project, instance);
  await calculate(base, token, project, instance, 'launch');
  // Sales in rounds, each followed by a calculation, so the history has steps and sales.
  const now = Date.now();
  let n = 0;
  for (let round = 0; round < 4; round++) {
    const sales = [];
    for (let k = 0; k <= round; k++) {
      n += 1;
      sales.push({ type: 'itemSale', transactionId: `order-${n}`,
        timestamp: new Date(now - (4 - round) * 1000).toISOString(),
        data: { itemId: 'ga-early', quantity: 2 + k, price: 49, currency: 'EUR' } });
      sales.push({ type: 'itemSale', transactionId: `order-vip-${n}`,
        data: { itemId: 'vip-lounge', quantity: 1 + round, price: 150, currency: 'EUR' } });
      sales.push({ type: 'itemSale', transactionId: `order-seat-${n}`,
        data: { itemId: 'seat-' + String(n).padStart(5, '0'), quantity: 1, price: 55 } });
    }
    if (round === 2) {
      // The price history lists the calculations that change a price (docs/api.md): a
      // floor above every price ga-early had moves its price, so its history has a step.
      sales.push({ type: 'itemProperties', transactionId: 'ga-early-floor',
        data: { itemId: 'ga-early', patch: [
          { op: 'replace', path: '/priceSettings/default', value: 80 },
          { op: 'replace', path: '/priceSettings/min', value: 77 },
        ] } });
    }
    await api(base, token, 'POST', entries, { entries: sales });
    await settle(base, token, project, instance);
    await calculate(base, token, project, instance, `round ${round + 1}`);
  }
  await api(base, token, 'POST', entries, { entries: [
    { type: 'itemReservation', transactionId: 'hold-1', data: { itemId: 'vip-lounge', reserved: 5 } },
    // A semantic error: an unknown item. Rejected when applied, reported by webhook.
    { type: 'itemSale', transactionId: 'order-bad', data: { itemId: 'no-such-seat', quantity: 1, price: 10 } },
  ] });
  await settle(base, token, project, instance);
  // A second run with two rejections (its own entries.rejected event): a return of more
  // than was sold and an unknown product.
  await api(base, token, 'POST', entries, { entries: [
    { type: 'itemSale', transactionId: 'return-bad', data: { itemId: 'vip-lounge', quantity: -1000, price: 150 } },
    { type: 'itemRegistration', transactionId: 'i-orphan', data: {
      itemId: 'orphan', productId: 'no-such-product', salesPeriod: period,
      priceSettings: { min: 1, max: 2, default: 1 } } },
  ] });
  await settle(base, token, project, instance);
  return { project, instance, subscription };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [base, token, items] = process.argv.slice(2);
  const r = await receiver();
  const url = `http://127.0.0.1:${r.address().port}/hook`;
  console.log(JSON.stringify(await seed(base, token, { items: Number(items ?? 1000), callbackUrl: url })));
  console.log('receiver', url, '(ctrl-c to stop)');
}
