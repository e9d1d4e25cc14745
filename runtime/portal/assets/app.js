// The portal shell: config, hash router, keyboard shortcuts, the metrics footer, the
// pending-approvals counter and the credential bar. Each view module exports mount(root, ctx) -> unmount().
import { credential, getJson, num, every, setCredential, tickCountdowns } from './lib.js';
import * as overview from './overview.js';
import * as approvals from './approvals.js';
import * as agents from './agents.js';
import * as audit from './audit.js';
import * as tokens from './tokens.js';

const VIEWS = { overview, approvals, agents, audit, tokens };
const main = document.getElementById('main');
let current = { name: '', unmount: () => {} };

/** Allow and deny totals of the decisions counter from Prometheus text. */
export function decisionCounts(text, name) {
  const out = { allow: 0, deny: 0 };
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const m = /decision="(allow|deny)"[^}]*}\s+([0-9.eE+-]+)/.exec(line);
    if (m) out[m[1]] += Number(m[2]);
  }
  return out;
}

async function refreshFooter(ctx) {
  const status = document.getElementById('metrics-status');
  try {
    const res = await fetch('/metrics', { cache: 'no-store', signal: AbortSignal.timeout(5000) });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    const c = decisionCounts(await res.text(), ctx.config.decisionsMetric);
    for (const k of ['allow', 'deny']) {
      const el = document.getElementById(`count-${k}`);
      el.textContent = num(c[k]);
      el.dataset.value = String(c[k]);
    }
    status.textContent = `${ctx.config.decisionsMetric} · ${new Date().toLocaleTimeString('en-GB', { hour12: false })}`;
    status.classList.remove('warn-text');
    document.querySelector('footer.bottom').classList.remove('stale');
  } catch (e) {
    status.textContent = `metrics unavailable (${e.message ?? e})`;
    status.classList.add('warn-text');
    document.querySelector('footer.bottom').classList.add('stale');
  }
}

async function refreshPending() {
  const el = document.getElementById('pending-count');
  try {
    const list = await getJson('/v1/egress/requests?status=pending&limit=500');
    el.textContent = num(list.length);
    el.hidden = list.length === 0;
  } catch {
    el.hidden = true;
  }
}

function route(ctx, again = false) {
  const name = (location.hash.replace(/^#\/?/, '').split(/[/?]/)[0] || 'overview').toLowerCase();
  const view = VIEWS[name] ? name : 'overview';
  if (view === current.name && !again) return;
  current.unmount();
  main.replaceChildren();
  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.view === view) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  document.title = `${view.charAt(0).toUpperCase()}${view.slice(1)} · ${ctx.config.title}`;
  current = { name: view, unmount: VIEWS[view].mount(main, ctx) ?? (() => {}) };
}

async function loadConfig(ctx) {
  try {
    ctx.config = await getJson('api/config');
  } catch {
    // Unknown whether an identity authority is configured: the views ask it anyway, and what
    // they are told (401, 503 "not configured", unreachable) is what they show.
    ctx.config ??= { title: 'Authority Command Center', decisionsMetric: 'authz_decisions_total', identityAuthority: true, ringSize: 1000 };
  }
  document.getElementById('title').textContent = ctx.config.title;
}

/**
 * The credential bar: shown when a data call is answered 401 (the management API asks for a
 * credential, or refused the one held); a credential entered there is held for this tab and the
 * view reloads with it. "Forget credential" drops it.
 */
function credentialBar(ctx) {
  const form = document.getElementById('signin');
  const input = document.getElementById('credential');
  const status = document.getElementById('signin-status');
  const forget = document.getElementById('signout');
  const reload = async () => {
    forget.hidden = !credential();
    await loadConfig(ctx);
    route(ctx, true);
    void refreshFooter(ctx);
    void refreshPending();
  };
  window.addEventListener('portal:credential', (e) => {
    status.textContent = e.detail?.refused
      ? 'The management API refused this credential (401): enter another.'
      : 'The management API needs a credential (401): an API key or a bearer token with the scopes of the views you use.';
    if (!form.hidden) return;
    form.hidden = false;
    input.focus();
  });
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    setCredential(input.value.trim());
    input.value = '';
    form.hidden = true;
    void reload();
  });
  forget.addEventListener('click', () => {
    setCredential('');
    void reload();
  });
  forget.hidden = !credential();
}

async function start() {
  const ctx = {};
  credentialBar(ctx);
  await loadConfig(ctx);
  window.addEventListener('hashchange', () => route(ctx));
  document.addEventListener('keydown', (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey || /^(INPUT|TEXTAREA|SELECT)$/.test(e.target?.tagName ?? '')) return;
    const names = Object.keys(VIEWS);
    const i = Number(e.key) - 1;
    if (names[i]) {
      location.hash = `#/${names[i]}`;
      main.focus();
    }
  });
  route(ctx);
  every(3000, () => refreshFooter(ctx));
  every(3000, refreshPending);
  setInterval(tickCountdowns, 1000);
}

void start();
