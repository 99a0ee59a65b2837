// Projects and their instances: active, dates, processing lag.

import { page, get, instancePath } from '../api.js';
import { h, fmt, num, table, link, errorBox, route } from '../dom.js';

const PAGE = 25;

export async function projectsPage() {
  const section = h('section', {}, h('h1', {}, 'Projects'));
  const list = h('div', { class: 'projects' });
  section.append(list);
  await more(list, section, undefined);
  return section;
}

async function more(list, section, cursor) {
  const projects = await page('projects', { cursor, limit: PAGE });
  if (!projects.items.length && !cursor) {
    list.append(h('p', {}, 'No projects yet. Create one with POST /projects (README, walk-through).'));
  }
  // Built at once, shown in the API's order (appended as each finished, the order changed
  // from one load to the next).
  const cards = await Promise.all(projects.items.map((p) => projectCard(p)));
  list.append(...cards);
  section.querySelector('.more-projects')?.remove();
  if (projects.next) {
    section.append(moreButton('more-projects', 'More projects', () => more(list, section, projects.next)));
  }
}

async function projectCard(p) {
  const card = h('section', { class: 'card project', 'data-project': p.projectId, 'aria-labelledby': `p-${p.projectId}` },
    h('h2', { id: `p-${p.projectId}` }, p.name || p.projectId, ' ', h('code', {}, p.projectId)),
    h('p', { class: 'muted small' }, `created ${fmt.date(p.createdAt)}`));
  const body = h('div');
  card.append(body);
  await instances(p.projectId, body, undefined);
  return card;
}

async function instances(projectId, body, cursor) {
  const listing = await page(`projects/${encodeURIComponent(projectId)}/instances`, { cursor, limit: PAGE });
  if (!listing.items.length && !cursor) {
    body.append(h('p', { class: 'muted' }, 'No instances.'));
    return;
  }
  const rows = listing.items.map((i) => {
    const lag = h('td', { class: 'num lag', 'aria-busy': 'true' }, '…');
    const main = h('td', { class: 'main-date' }, '…');
    processing(projectId, i.instanceId, lag, main);
    return [
      h('td', {}, link(route.instance(projectId, i.instanceId), i.name ? `${i.name} (${i.instanceId})` : i.instanceId)),
      h('td', { 'data-value': String(i.active) }, i.active ? 'active' : (i.deactivated ? 'deactivated' : 'inactive')),
      main,
      h('td', {}, fmt.date(i.deactivationDate)),
      h('td', {}, i.timeZone ?? '—'),
      h('td', {}, fmt.date(i.createdAt)),
      lag,
    ];
  });
  body.querySelector('.more-instances')?.remove();
  body.append(table(null, ['Instance', 'Scheduled pricing', 'Main date', 'Deactivation', 'Time zone', 'Created',
    { label: 'Processing lag (entries)', num: true }], rows, { class: 'instances', 'data-project': projectId }));
  if (listing.next) {
    body.append(moreButton('more-instances', 'More instances', () => instances(projectId, body, listing.next)));
  }
}

/** A "More" button: disabled while it loads, and a failure is said next to it (it threw
 * an uncaught error and the page did not change when the service was down). */
function moreButton(cls, label, load) {
  const button = h('button', { type: 'button', class: cls }, label);
  button.addEventListener('click', async () => {
    button.disabled = true;
    if (button.nextElementSibling?.classList.contains('error')) button.nextElementSibling.remove();
    try {
      await load();
    } catch (err) {
      button.disabled = false;
      button.after(errorBox(err));
    }
  });
  return button;
}

/** The lag (entries stored but not applied yet) and the main date, from the details. */
async function processing(projectId, instanceId, lag, main) {
  try {
    const d = await get(instancePath(projectId, instanceId));
    const { appliedSequence, lastSequence } = d.processing;
    const behind = Math.max(0, lastSequence - appliedSequence);
    lag.replaceChildren(fmt.int(behind));
    lag.dataset.value = behind;
    lag.title = `applied ${appliedSequence} of ${lastSequence}`;
    const dates = d.meta?.dates ?? [];
    const m = dates.find((x) => (x.tags ?? []).includes('main')) ?? null;
    main.replaceChildren(m ? `${fmt.date(m.date?.start)} – ${fmt.date(m.date?.end)}` : '—');
  } catch (err) {
    lag.replaceChildren(errorBox(err));
  } finally {
    lag.removeAttribute('aria-busy');
  }
}
