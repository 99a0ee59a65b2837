// Sign-in. The token lives in sessionStorage (this tab only, gone when it closes) and in
// requests' Authorization header; never in a URL, a cookie or localStorage. The client
// secret is sent once to /oauth2/token and not kept.

import { h, field } from './dom.js';

const KEY = 'pricing-console.token';
let notice = '';
const listeners = [];

export function token() {
  const t = sessionStorage.getItem(KEY);
  if (!t) return null;
  const claims = decodeClaims(t);
  if (claims?.exp && claims.exp * 1000 <= Date.now()) {
    sessionStorage.removeItem(KEY);
    notice = 'Your token expired. Sign in again.';
    return null;
  }
  return t;
}

/** The token's claims, read (not verified: the API verifies it). */
export function decodeClaims(t) {
  try {
    const part = t.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    const json = new TextDecoder().decode(Uint8Array.from(atob(part), (c) => c.charCodeAt(0)));
    return JSON.parse(json);
  } catch {
    return null;
  }
}

export function onChange(f) {
  listeners.push(f);
}

function changed() {
  for (const f of listeners) f();
}

export function signIn(t) {
  sessionStorage.setItem(KEY, t.trim());
  notice = '';
  changed();
}

export function signOut(message = '') {
  const had = sessionStorage.getItem(KEY) !== null;
  sessionStorage.removeItem(KEY);
  notice = message;
  if (had) changed();
}

/** Client credentials grant of the standalone service (DESIGN.md section 3). */
async function requestToken(clientId, clientSecret) {
  const response = await fetch(new URL('../oauth2/token', document.baseURI), {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'client_credentials', client_id: clientId, client_secret: clientSecret }),
    cache: 'no-store',
    credentials: 'omit', // no cookies; and a 401's Basic challenge opens no browser dialog
  });
  const body = await response.json().catch(() => null);
  if (response.status === 404 || response.status === 405) {
    throw new Error('This deployment has no /oauth2/token (on AWS, get a token from your identity provider and paste it).');
  }
  if (!response.ok || !body?.access_token) {
    throw new Error(body?.error_description || `The token endpoint answered ${response.status}.`);
  }
  return body.access_token;
}

/** The sign-in page. */
export function signInPage() {
  const error = h('p', { class: 'error', role: 'alert', id: 'sign-in-error' });
  const id = field('Client id', 'client-id', { autocomplete: 'username', required: true });
  const secret = field('Client secret', 'client-secret', { type: 'password', autocomplete: 'current-password', required: true });
  const pasted = field('Bearer token', 'token', { type: 'password', autocomplete: 'off', required: true });
  const show = (e) => { error.textContent = e.message; };
  const credentials = h('form', { class: 'card', 'aria-labelledby': 'cc-title' },
    h('h2', { id: 'cc-title' }, 'With a client id and secret'),
    h('p', { class: 'muted' }, 'The standalone service prints a client at its first start; tokens from it last one hour.'),
    id.row, secret.row,
    h('button', { type: 'submit' }, 'Sign in'));
  credentials.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.textContent = '';
    try {
      signIn(await requestToken(id.input.value.trim(), secret.input.value));
    } catch (err) {
      show(err);
    }
  });
  const paste = h('form', { class: 'card', 'aria-labelledby': 'tk-title' },
    h('h2', { id: 'tk-title' }, 'With a token'),
    h('p', { class: 'muted' }, 'For example from `standalone token --tenant T`, or from your identity provider on AWS.'),
    pasted.row,
    h('button', { type: 'submit' }, 'Use this token'));
  paste.addEventListener('submit', (e) => {
    e.preventDefault();
    const t = pasted.input.value.trim().replace(/^Bearer\s+/i, '');
    if (!decodeClaims(t)) {
      error.textContent = 'That is not a JWT (three dot-separated parts).';
      return;
    }
    signIn(t);
  });
  return h('section', { class: 'sign-in' },
    h('h1', {}, 'Sign in'),
    notice ? h('p', { class: 'notice', role: 'status' }, notice) : null,
    error,
    h('div', { class: 'cards' }, credentials, paste),
    h('p', { class: 'muted small' }, 'The token is kept in this tab only (session storage) and sent in the Authorization header of API requests. The console can do only what the API lets this token do.'));
}
