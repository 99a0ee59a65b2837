// Webhooks of an instance: its subscriptions and the project's, each with its deliveries
// and their attempts; and the instance's rejected entries as the API reports them (the
// entries.rejected webhooks: their bodies go to the receiver, the delivery log keeps the
// record of each).

import { all, page, seg, instancePath } from '../api.js';
import { h, fmt, num, table, dl, link, route, errorBox, pager } from '../dom.js';

const PAGE = 25;

export async function subscriptionsPage({ p, i }) {
  const [own, project] = await Promise.all([
    all(`${instancePath(p, i)}/subscriptions`),
    all(`projects/${seg(p)}/subscriptions`),
  ]);
  const subs = [...own, ...project];
  const rejected = h('section', { class: 'rejected', 'aria-labelledby': 'rejected-title' },
    h('h2', { id: 'rejected-title' }, 'Rejected entries'),
    h('p', {}, link(route.rejections(p, i), 'Every rejected entry of this instance'), ' (sequence, transaction id, code, pointer, message), from the events the API keeps, with time filters.'),
    h('p', { class: 'muted' }, 'Below: their entries.rejected webhooks in the delivery logs of this page\'s subscriptions, and how each delivery went.'));
  const rejectedRows = [];
  const section = h('section', { class: 'subscriptions' },
    h('h1', {}, 'Webhooks of ', h('code', {}, i)),
    rejected,
    h('h2', {}, `Subscriptions (${subs.length})`));
  if (!subs.length) section.append(h('p', {}, 'No subscriptions: this instance\'s events reach nobody. Subscribe with POST .../subscriptions.'));
  const cards = await Promise.all(subs.map((s) => subscriptionCard(p, i, s, rejectedRows)));
  section.append(...cards);
  // The cards fill the rows as their delivery logs arrive: newest first, whatever came back
  // first (the order changed from one load to the next).
  rejectedRows.sort((a, b) => (b.createdAt ?? '').localeCompare(a.createdAt ?? '') || a.webhookId.localeCompare(b.webhookId));
  rejected.append(rejectedRows.length
    ? table(null, ['Created', 'Webhook id', 'Subscription', 'Status', { label: 'Attempts', num: true }, 'Receiver answered'],
      rejectedRows.map((d) => [h('td', {}, fmt.date(d.createdAt)), h('td', {}, h('code', {}, d.webhookId)), h('td', {}, d.subscriptionId),
        h('td', { class: `status ${d.status}` }, d.status), num(d.attempt), h('td', {}, d.responseStatus ?? d.error ?? '—')]),
      { class: 'rejected-webhooks' })
    : h('p', { class: 'none' }, 'No entries.rejected webhooks in the delivery logs (the newest 1,000 per subscription are read).'));
  return section;
}

async function subscriptionCard(p, i, s, rejectedRows) {
  const card = h('section', { class: 'card subscription', 'data-subscription': s.subscriptionId, 'aria-labelledby': `s-${s.subscriptionId}` },
    h('h3', { id: `s-${s.subscriptionId}` }, s.description || s.callbackUrl, ' ', h('span', { class: `badge ${s.status}` }, s.status)),
    dl([
      ['Subscription', s.subscriptionId],
      ['Scope', s.instanceId ? `instance ${s.instanceId}` : 'project (every instance)'],
      ['Callback URL', s.callbackUrl],
      ['Events', (s.events ?? []).join(', ')],
      ['Created', fmt.date(s.createdAt)],
      s.disabledAt ? ['Disabled', `${fmt.date(s.disabledAt)}: ${s.disabledReason ?? ''}`] : null,
    ], { class: 'facts' }));
  const path = `projects/${seg(p)}/subscriptions/${seg(s.subscriptionId)}/deliveries`;
  // Rejected entries: the newest 1,000 deliveries are scanned for entries.rejected.
  try {
    const recent = await page(path, { limit: 1000 });
    rejectedRows.push(...recent.items.filter((d) => d.eventType === 'entries.rejected' && (d.instanceId ?? i) === i));
  } catch (err) {
    card.append(errorBox(err));
  }
  const body = h('div', { class: 'deliveries' });
  const prev = h('button', { type: 'button' }, 'Newer');
  const next = h('button', { type: 'button' }, 'Older');
  const info = h('span', { 'aria-live': 'polite' });
  await pager({
    prev,
    next,
    read: (cursor) => page(path, { cursor, limit: PAGE }),
    show(r, at) {
      body.replaceChildren(r.items.length ? table(`Deliveries, newest first (page ${at + 1})`,
        ['Created', 'Event', 'Instance', 'Status', { label: 'Attempts', num: true }, 'Last answer', 'Next attempt', 'Attempts and reports'],
        r.items.map((d) => [
          h('td', {}, fmt.date(d.createdAt)), h('td', {}, d.eventType), h('td', {}, d.instanceId ?? '—'),
          h('td', { class: `status ${d.status}` }, d.status), num(d.attempt),
          h('td', {}, d.responseStatus ?? d.error ?? '—'), h('td', {}, fmt.date(d.nextAttemptAt)),
          h('td', {}, attempts(d)),
        ]), { class: 'deliveries-table' }) : h('p', {}, 'No deliveries yet.'));
      body.querySelectorAll(':scope > table > tbody > tr').forEach((tr, k) => { tr.dataset.delivery = r.items[k].deliveryId; });
      info.textContent = `page ${at + 1}`;
    },
    failed(err, to) {
      body.replaceChildren(errorBox(err));
      info.textContent = `page ${to + 1} could not be read`;
    },
  }).restart();
  card.append(body, h('nav', { class: 'pager', 'aria-label': `Deliveries of ${s.subscriptionId}` }, prev, info, next));
  return card;
}

function attempts(d) {
  return h('details', {},
    h('summary', {}, `${d.attempts?.length ?? 0} attempt(s)${d.clientReports?.length ? `, ${d.clientReports.length} report(s)` : ''}`),
    table(null, ['#', 'At', 'Answer', { label: 'ms', num: true }],
      (d.attempts ?? []).map((a) => [h('td', {}, String(a.attempt)), h('td', {}, fmt.date(a.attemptedAt)), h('td', {}, a.responseStatus ?? a.error ?? '—'), num(a.durationMs)]),
      { class: 'attempts' }),
    d.clientReports?.length ? h('ul', {}, d.clientReports.map((c) => h('li', {}, `${fmt.date(c.reportedAt)}: ${c.status ?? ''} ${c.message}`))) : null,
    h('p', { class: 'small muted' }, `delivery ${d.deliveryId}`));
}
