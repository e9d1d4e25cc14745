// Shared helpers of the portal: DOM building (text only, never HTML from data), fetching,
// formatting and the live countdowns.

/** h('div', {class: 'x', onclick}, child, 'text') -> element. Strings become text nodes. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    // CSSOM, not a style attribute: the portal's CSP has no 'unsafe-inline'.
    else if (k === 'style') Object.assign(el.style, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// The operator's management credential (an API key or a workforce bearer token) where the
// management API asks for one (WRIT_API_AUTH=keys): held for this tab only (sessionStorage, gone
// when the tab closes), sent as `Authorization: Bearer` on the portal's own data calls, never put
// in a URL. A 401 announces `portal:credential` so the shell can ask for one.
const CREDENTIAL = 'portal.credential';
export const credential = () => sessionStorage.getItem(CREDENTIAL) ?? '';
export function setCredential(value) {
  if (value) sessionStorage.setItem(CREDENTIAL, value);
  else sessionStorage.removeItem(CREDENTIAL);
}

/** fetch + JSON with a timeout and the operator's credential; throws HttpError (status 0 when unreachable). */
export async function getJson(url, init = {}, timeoutMs = 5000) {
  const cred = credential();
  const headers = cred ? { ...init.headers, authorization: `Bearer ${cred}` } : init.headers;
  let res;
  try {
    res = await fetch(url, { ...init, headers, signal: AbortSignal.timeout(timeoutMs), cache: 'no-store' });
  } catch (e) {
    throw new HttpError(0, e?.name === 'TimeoutError' ? 'timed out' : 'unreachable');
  }
  if (res.status === 401) window.dispatchEvent(new CustomEvent('portal:credential', { detail: { refused: Boolean(cred) } }));
  const text = await res.text();
  let body;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  if (!res.ok) throw new HttpError(res.status, errorText(body) ?? `HTTP ${res.status}`);
  return body;
}

/** The message of either error shape: `{error: string}`, `{error: {code, message}}`, `{detail: [...]}`. */
function errorText(body) {
  if (!body) return undefined;
  if (typeof body.error === 'string') return body.error;
  if (body.error?.message) return body.error.message;
  if (Array.isArray(body.detail)) return body.detail.map((d) => `${(d.loc ?? []).join('.')}: ${d.msg}`).join('; ');
  return undefined;
}

export const postJson = (url, body) =>
  getJson(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

const nf = new Intl.NumberFormat('en-US');
export const num = (n) => (typeof n === 'number' && Number.isFinite(n) ? nf.format(n) : '–');

export function time(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso ?? '') : d.toLocaleTimeString('en-GB', { hour12: false });
}

export function dateTime(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso ?? '');
  return `${d.toLocaleDateString('en-CA')} ${d.toLocaleTimeString('en-GB', { hour12: false })}`;
}

/** 75 -> "1m 15s"; negative -> "expired". */
export function remaining(seconds) {
  if (!(seconds > 0)) return 'expired';
  const s = Math.floor(seconds);
  const d = Math.floor(s / 86400);
  const hh = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  if (d) return `${d}d ${hh}h`;
  if (hh) return `${hh}h ${m}m`;
  if (m) return `${m}m ${s % 60}s`;
  return `${s % 60}s`;
}

/** A span counting down to `expSeconds` (epoch seconds), refreshed by tickCountdowns. */
export function countdown(expSeconds, prefix = '') {
  const el = h('span', { class: 'countdown', dataset: { exp: String(expSeconds), prefix } });
  paintCountdown(el, Date.now() / 1000);
  return el;
}

function paintCountdown(el, now) {
  const left = Number(el.dataset.exp) - now;
  el.textContent = `${el.dataset.prefix ?? ''}${left > 0 ? `expires in ${remaining(left)}` : 'expired'}`;
  el.classList.toggle('expired', !(left > 0));
  el.classList.toggle('soon', left > 0 && left < 300);
}

export function tickCountdowns() {
  const now = Date.now() / 1000;
  for (const el of document.querySelectorAll('.countdown[data-exp]')) paintCountdown(el, now);
}

export const short = (s, n = 8) => (s && s.length > n ? s.slice(0, n) : (s ?? ''));

export const chip = (kind, text, title) => h('span', { class: `chip chip-${kind}`, title }, text);

export const decisionPill = (allow) => h('span', { class: `pill ${allow ? 'allow' : 'deny'}` }, allow ? 'allow' : 'deny');

/** Replaces the children of `el`. */
export function fill(el, ...children) {
  el.replaceChildren(...children.flat(Infinity).filter((c) => c !== undefined && c !== null && c !== false));
}

/** Runs `fn` now and every `ms`, skipping a tick while the previous run is still going. */
export function every(ms, fn) {
  let busy = false;
  const run = async () => {
    if (busy) return;
    busy = true;
    try {
      await fn();
    } finally {
      busy = false;
    }
  };
  void run();
  const t = setInterval(run, ms);
  return () => clearInterval(t);
}

/** "Nothing here" placeholder row or block. */
export const empty = (text) => h('p', { class: 'empty' }, text);

export function errorBox(e, what) {
  return h('div', { class: 'notice warn', role: 'status' }, `${what} unavailable: ${e?.message ?? e}`);
}
