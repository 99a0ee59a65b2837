// The console's entry point: hash routes (#/p/P/i/I/...), sign-in, breadcrumbs.

import { token, decodeClaims, onChange, signOutByUser, signInPage, loadConfig, completeHostedSignIn } from './auth.js';
import { h, link, errorBox, route } from './dom.js';
import { projectsPage } from './pages/projects.js';
import { instancePage } from './pages/instance.js';
import { itemPage } from './pages/item.js';
import { productPage } from './pages/product.js';
import { subscriptionsPage } from './pages/subscriptions.js';
import { rejectionsPage } from './pages/rejections.js';
import { simulationPage } from './pages/simulation.js';

const main = document.getElementById('main');
const crumbs = document.getElementById('crumbs');
const who = document.getElementById('who');
const signOutButton = document.getElementById('sign-out');
const simulateLink = document.getElementById('simulate-link');

signOutButton.addEventListener('click', signOutByUser);
onChange(render);
window.addEventListener('hashchange', render);

/** A path segment of the address, decoded; null when it does not decode (`%E0%A4%A`). */
function decode(segment) {
  try {
    return decodeURIComponent(segment);
  } catch {
    return null;
  }
}

function parse(hash) {
  const parts = hash.split('?')[0].replace(/^#\/?/, '').split('/').filter(Boolean).map(decode);
  // An address that does not decode names no page: said so, not an uncaught error that
  // left the previous page showing.
  if (parts.includes(null)) return { page: 'invalid' };
  if (parts[0] === 'simulate' && parts.length === 1) return { page: 'simulation' };
  if (parts[0] === 'p' && parts[2] === 'i' && parts.length >= 4) {
    const [p, i] = [parts[1], parts[3]];
    if (parts.length === 4) return { page: 'instance', p, i };
    if (parts[4] === 'item' && parts[5]) return { page: 'item', p, i, x: parts[5] };
    if (parts[4] === 'product' && parts[5]) return { page: 'product', p, i, x: parts[5] };
    if (parts[4] === 'subscriptions') return { page: 'subscriptions', p, i };
    if (parts[4] === 'rejections') return { page: 'rejections', p, i };
  }
  return { page: 'projects' };
}

function invalidPage() {
  return h('section', { class: 'invalid' },
    h('h1', {}, 'Not a valid address'),
    h('p', {}, 'A part of this address is not valid percent-encoding. ', link('#/', 'Go to the projects'), '.'));
}

function breadcrumbs(r) {
  const trail = [link('#/', 'Projects')];
  if (r.p) trail.push(h('span', {}, r.p), link(route.instance(r.p, r.i), r.i));
  if (r.page === 'item') trail.push(link(route.item(r.p, r.i, r.x), `item ${r.x}`));
  if (r.page === 'product') trail.push(link(route.product(r.p, r.i, r.x), `product ${r.x}`));
  if (r.page === 'subscriptions') trail.push(link(route.subscriptions(r.p, r.i), 'Webhooks'));
  if (r.page === 'rejections') trail.push(link(route.rejections(r.p, r.i), 'Rejected entries'));
  if (r.page === 'simulation') trail.push(link('#/simulate', 'Simulate a market'));
  const last = trail[trail.length - 1];
  last.setAttribute('aria-current', 'page');
  crumbs.replaceChildren(h('ol', {}, trail.map((x) => h('li', {}, x))));
}

let generation = 0;

async function render() {
  const mine = ++generation;
  delete main.dataset.ready; // set again when this page is drawn
  const t = token();
  if (!t) {
    crumbs.replaceChildren();
    who.textContent = '';
    signOutButton.hidden = true;
    simulateLink.hidden = true;
    main.replaceChildren(signInPage());
    document.title = 'Sign in · Pricing console';
    main.querySelector('input')?.focus();
    return;
  }
  const claims = decodeClaims(t) || {};
  who.textContent = `tenant ${claims.tenant ?? claims.sub ?? '?'}`;
  if (claims.exp) who.title = `token valid until ${new Date(claims.exp * 1000).toISOString()}`;
  signOutButton.hidden = false;
  simulateLink.hidden = false;
  const r = parse(location.hash);
  breadcrumbs(r);
  main.replaceChildren(h('p', { class: 'muted', 'aria-busy': 'true' }, 'Loading…'));
  const pages = { projects: projectsPage, instance: instancePage, item: itemPage, product: productPage, subscriptions: subscriptionsPage, rejections: rejectionsPage, simulation: simulationPage, invalid: invalidPage };
  let content;
  try {
    content = await pages[r.page](r);
  } catch (err) {
    content = errorBox(err);
  }
  if (mine !== generation) return; // a newer navigation won
  main.replaceChildren(content);
  const heading = main.querySelector('h1');
  document.title = `${heading ? heading.textContent : 'Console'} · Pricing console`;
  main.focus({ preventScroll: true });
  main.dataset.ready = r.page;
}

// Which sign-in the service offers, then (back from a hosted sign-in page) the code exchange.
loadConfig().then(completeHostedSignIn).finally(render);
