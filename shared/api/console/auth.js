// Sign-in. The token lives in sessionStorage (this tab only, gone when it closes) and in
// requests' Authorization header; never in a URL, a cookie or localStorage. The client
// secret is sent once to /oauth2/token and not kept. Where the service names a hosted
// authorization server (config.json: the Cognito hosted UI on AWS), also the authorization
// code grant with PKCE (RFC 7636, S256) for a public client: the verifier and state wait in
// sessionStorage during the round trip, the code is taken out of the address bar at once.

import { h, field } from './dom.js';

const KEY = 'pricing-console.token';
const PKCE_KEY = 'pricing-console.pkce';
const HOSTED_KEY = 'pricing-console.hosted'; // set while the token came from the hosted sign-in
let config = { hostedSignIn: null };
let notice = '';
const listeners = [];

export function token() {
  const t = sessionStorage.getItem(KEY);
  if (!t) return null;
  const claims = decodeClaims(t);
  if (claims?.exp && claims.exp * 1000 <= Date.now()) {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(HOSTED_KEY);
    notice = 'Your token expired. Sign in again.';
    // Sign out at once, not at the next navigation: an action on the page (a next page,
    // Apply, Run) found the token expired and showed "The API answered 401" while the
    // page still looked signed in. After this call, so that a render asking for the token
    // is not re-entered.
    queueMicrotask(changed);
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
  sessionStorage.removeItem(HOSTED_KEY);
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

/** The Sign out button: the token goes; after a hosted sign-in, the hosted UI's session
 *  too (its logout endpoint sends the browser back to the console). */
export function signOutByUser() {
  const hosted = config.hostedSignIn;
  const viaHosted = sessionStorage.getItem(HOSTED_KEY) !== null;
  signOut('Signed out.');
  if (viaHosted && hosted?.logoutUrl) {
    const url = new URL(hosted.logoutUrl);
    url.search = new URLSearchParams({ client_id: hosted.clientId, logout_uri: redirectUri(hosted) });
    location.assign(url.href);
  }
}

/** Reads config.json (which sign-in the service offers); none if it cannot be read. */
export async function loadConfig() {
  try {
    const r = await fetch(new URL('config.json', document.baseURI), { cache: 'no-store', credentials: 'omit' });
    if (r.ok) config = await r.json();
  } catch {
    config = { hostedSignIn: null };
  }
  return config;
}

const b64url = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes)))
  .replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
const random = (n) => b64url(crypto.getRandomValues(new Uint8Array(n)));

/** Where the authorization server sends the browser back: the console's own address. */
function redirectUri(hosted) {
  return hosted.redirectUri || new URL('./', document.baseURI).href;
}

/** Goes to the hosted sign-in page with a fresh S256 code challenge and state. */
async function startHostedSignIn(hosted) {
  const verifier = random(32); // 43 characters of the unreserved set
  const challenge = b64url(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier)));
  const state = random(16);
  sessionStorage.setItem(PKCE_KEY, JSON.stringify({ verifier, state, hash: location.hash }));
  const url = new URL(hosted.authorizeUrl);
  url.search = new URLSearchParams({
    response_type: 'code', client_id: hosted.clientId, redirect_uri: redirectUri(hosted),
    scope: hosted.scope, state, code_challenge: challenge, code_challenge_method: 'S256',
  });
  location.assign(url.href);
}

/** Back from the hosted sign-in page (?code=&state= or ?error=): takes the code out of the
 *  address bar, checks the state, exchanges code and verifier for a token. True if this
 *  was such a return. */
export async function completeHostedSignIn() {
  const params = new URLSearchParams(location.search);
  if (!params.has('code') && !params.has('error')) return false;
  let pending = null;
  try {
    pending = JSON.parse(sessionStorage.getItem(PKCE_KEY));
  } catch { /* none */ }
  sessionStorage.removeItem(PKCE_KEY);
  history.replaceState(null, '', new URL('./', document.baseURI).pathname + (pending?.hash || location.hash));
  const hosted = config.hostedSignIn;
  if (params.has('error')) {
    notice = `The sign-in page answered: ${params.get('error_description') || params.get('error')}`;
  } else if (!hosted || !pending || !pending.verifier) {
    notice = 'A sign-in came back that this tab did not start. Sign in again.';
  } else if (params.get('state') !== pending.state) {
    notice = 'The sign-in came back with a wrong state (not the request this tab sent). Sign in again.';
  } else {
    try {
      const response = await fetch(hosted.tokenUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({
          grant_type: 'authorization_code', client_id: hosted.clientId, code: params.get('code'),
          redirect_uri: redirectUri(hosted), code_verifier: pending.verifier,
        }),
        cache: 'no-store',
        credentials: 'omit',
      });
      const body = await response.json().catch(() => null);
      if (!response.ok || !body?.access_token) {
        throw new Error(body?.error_description || body?.error || `the token endpoint answered ${response.status}`);
      }
      sessionStorage.setItem(KEY, body.access_token); // the access token only; no id or refresh token kept
      sessionStorage.setItem(HOSTED_KEY, '1');
      notice = '';
    } catch (err) {
      notice = `Signing in failed: ${err.message}. Sign in again.`;
    }
  }
  return true;
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
  const hosted = config.hostedSignIn;
  let hostedCard = null;
  if (hosted) {
    const go = h('button', { type: 'button', class: 'hosted' }, 'Sign in with your account');
    go.addEventListener('click', () => startHostedSignIn(hosted).catch(show));
    hostedCard = h('section', { class: 'card', 'aria-labelledby': 'hosted-title' },
      h('h2', { id: 'hosted-title' }, 'With your account'),
      h('p', { class: 'muted' }, `On the sign-in page of ${new URL(hosted.authorizeUrl).host} (authorization code with PKCE); you come back here signed in.`),
      go);
  }
  return h('section', { class: 'sign-in' },
    h('h1', {}, 'Sign in'),
    notice ? h('p', { class: 'notice', role: 'status' }, notice) : null,
    error,
    h('div', { class: 'cards' }, hostedCard, credentials, paste),
    h('p', { class: 'muted small' }, 'The token is kept in this tab only (session storage) and sent in the Authorization header of API requests. The console can do only what the API lets this token do.'));
}
