// Calls to the public API with the signed-in user's token. The API is the origin the
// console was served from: /console/ lives beside /projects, /oauth2/token and the rest.

import { token, signOut } from './auth.js';

export const API = new URL('../', document.baseURI);

/** How long a request may wait for the API's answer (a simulation takes a few seconds). */
const ANSWER_WITHIN_MS = 60_000;

export class ApiError extends Error {
  constructor(status, problem, path) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
    this.path = path;
  }
}

/** GET a path of the API (relative, e.g. "projects"), answered as JSON. */
export async function get(path, params = {}) {
  return call('GET', path, params);
}

/** POST a JSON body to a path of the API, answered as JSON (a problem: ApiError). */
export async function post(path, body, params = {}) {
  return call('POST', path, params, body);
}

async function call(method, path, params, payload) {
  const url = new URL(path.replace(/^\//, ''), API);
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, v);
  }
  const t = token();
  // No request was sent: the sign-in page replaces the page (see token()).
  if (!t) throw new ApiError(401, { title: 'Not signed in: sign in again' }, path);
  const headers = { authorization: `Bearer ${t}`, accept: 'application/json' };
  if (payload !== undefined) headers['content-type'] = 'application/json';
  let response;
  try {
    response = await fetch(url, {
      method,
      headers,
      body: payload === undefined ? undefined : JSON.stringify(payload),
      cache: 'no-store',
      credentials: 'omit', // no cookies; and a 401's Basic challenge opens no browser dialog
      // A service that hangs ends the wait with a message, not "Loading…" for good.
      signal: AbortSignal.timeout(ANSWER_WITHIN_MS),
    });
  } catch (err) {
    // No answer at all ("Failed to fetch" said little): the service is down or unreachable.
    const what = err?.name === 'TimeoutError'
      ? `The service did not answer within ${ANSWER_WITHIN_MS / 1000} s`
      : `The service at ${API.origin} cannot be reached`;
    throw new Error(`${what}; try again.`);
  }
  const body = await response.json().catch(() => null);
  if (response.status === 401) {
    signOut('Your session ended (the token expired or was refused). Sign in again.');
  }
  if (!response.ok) throw new ApiError(response.status, body, path);
  return body;
}

/** One page of a listing: {items, next}. */
export function page(path, { cursor, limit = 100, ...params } = {}) {
  return get(path, { ...params, cursor, limit });
}

/** Every page of a listing, merged; `onPage(countSoFar)` reports progress. */
export async function all(path, params = {}, onPage) {
  const items = [];
  let cursor;
  do {
    const p = await page(path, { ...params, cursor, limit: 1000 });
    items.push(...p.items);
    cursor = p.next;
    onPage?.(items.length);
  } while (cursor);
  return items;
}

/** Path segment, escaped. */
export const seg = (s) => encodeURIComponent(s);
export const instancePath = (p, i) => `projects/${seg(p)}/instances/${seg(i)}`;
