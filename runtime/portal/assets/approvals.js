// Approvals: held egress requests (control plane) and pending task delegations (identity
// authority), each approved or denied by a named approver; deny needs a reason.
import { h, fill, getJson, postJson, every, countdown, dateTime, errorBox, empty, short, num } from './lib.js';

const APPROVER_KEY = 'portal.approver';

export function mount(root, ctx) {
  const approver = h('input', { id: 'approver', name: 'approver', autocomplete: 'username', required: true, placeholder: 'e.g. alice@example.com', value: localStorage.getItem(APPROVER_KEY) ?? '' });
  approver.addEventListener('change', () => localStorage.setItem(APPROVER_KEY, approver.value.trim()));
  const msg = h('div', { id: 'approval-msg', role: 'status', 'aria-live': 'polite', class: 'msg' });
  const egress = h('div', { id: 'egress-requests' }, h('p', { class: 'muted' }, 'Loading…'));
  const delegations = h('div', { id: 'delegations' }, h('p', { class: 'muted' }, 'Loading…'));
  fill(
    root,
    h('div', { class: 'card approver-bar' },
      h('label', { for: 'approver' }, 'Approving as'), approver,
      h('span', { class: 'muted small' }, 'Recorded as the approver on every decision below. Deny needs a reason.'),
      msg),
    h('section', { class: 'card' }, h('h2', {}, 'Held egress requests'),
      h('p', { class: 'muted small' }, 'Requests the forward proxy is holding open; approving releases the waiting client at once.'), egress),
    h('section', { class: 'card' }, h('h2', {}, 'Task delegations'),
      h('p', { class: 'muted small' }, 'Delegation requests of agents, waiting for a human on the identity authority.'), delegations),
  );

  const who = () => {
    const v = approver.value.trim();
    if (!v) {
      say(msg, 'Enter your name in “Approving as” first.', true);
      approver.focus();
      return undefined;
    }
    localStorage.setItem(APPROVER_KEY, v);
    return v;
  };

  const act = async (kind, id, verb, reasonInput, refresh, extra = {}) => {
    const a = who();
    if (!a) return;
    const reason = reasonInput.value.trim();
    if (verb === 'deny' && !reason) {
      say(msg, 'A reason is required to deny.', true);
      reasonInput.focus();
      return;
    }
    const url = kind === 'egress' ? `/v1/egress/requests/${encodeURIComponent(id)}/${verb}` : `api/identity/v1/delegations/${encodeURIComponent(id)}/${verb}`;
    try {
      await postJson(url, verb === 'deny' ? { approver: a, reason } : { approver: a, ...extra });
      say(msg, `${kind === 'egress' ? 'Egress request' : 'Delegation'} ${short(id)} ${verb === 'deny' ? 'denied' : 'approved'}.`, false);
    } catch (e) {
      say(msg, `Could not ${verb} ${short(id)}: ${e.message}`, true);
    }
    await refresh();
  };

  const loadEgress = async () => {
    try {
      const list = await getJson('/v1/egress/requests?limit=100');
      // An approval names the digest of exactly the request shown (required with API auth on).
      const digests = new Map(list.map((r) => [r.id, r.digest]));
      renderEgress(egress, list, (id, verb, input) => act('egress', id, verb, input, loadEgress, { digest: digests.get(id) }));
    } catch (e) {
      fill(egress, errorBox(e, 'Egress approval queue'));
    }
  };
  const loadDelegations = async () => {
    if (!ctx.config.identityAuthority) return fill(delegations, h('div', { class: 'notice warn' }, 'No identity authority configured (AGENT_IDP_URL).'));
    try {
      const list = await getJson('api/identity/v1/delegations');
      renderDelegations(delegations, list, (id, verb, input) => act('delegation', id, verb, input, loadDelegations));
    } catch (e) {
      fill(delegations, errorBox(e, 'Delegations'));
    }
  };
  const stops = [every(2000, loadEgress), every(4000, loadDelegations)];
  return () => stops.forEach((s) => s());
}

function say(el, text, bad) {
  el.textContent = text;
  el.className = `msg ${bad ? 'bad-text' : 'ok-text'}`;
}

/** Re-renders a pending table only when its set of ids changed, so typing is never lost. */
function sameIds(box, ids) {
  const key = ids.join(',');
  if (box.dataset.ids === key) return true;
  box.dataset.ids = key;
  return false;
}

function decideCell(id, onAct) {
  const reason = h('input', { class: 'reason-input', 'aria-label': `Reason for ${id}`, placeholder: 'reason (required to deny)', maxlength: 2048 });
  return h('td', {}, h('div', { class: 'decide' }, reason,
    h('button', { class: 'btn approve', type: 'button', dataset: { id }, onclick: () => onAct(id, 'approve', reason) }, 'Approve'),
    h('button', { class: 'btn deny', type: 'button', dataset: { id }, onclick: () => onAct(id, 'deny', reason) }, 'Deny')));
}

/** A pending table (re-rendered only when its ids change) above a "recently decided" one. */
function renderQueue(box, list, spec, onAct) {
  const pending = list.filter((r) => r.status === 'pending');
  const done = list.filter((r) => r.status !== 'pending').slice(0, 15);
  const pendingBox = box.querySelector('.pending-box') ?? h('div', { class: 'pending-box' });
  const doneBox = box.querySelector('.done-box') ?? h('div', { class: 'done-box' });
  if (!pendingBox.isConnected) fill(box, pendingBox, doneBox);
  const table = (cls, cols, rows) =>
    h('table', { class: cls }, h('thead', {}, h('tr', {}, cols.map((t) => h('th', { scope: 'col' }, t)))), h('tbody', {}, rows));
  if (!sameIds(pendingBox, pending.map((r) => r.id))) {
    fill(pendingBox, pending.length
      ? table('data', [...spec.pendingCols, 'Decision'], pending.map((r) => h('tr', { dataset: { id: r.id, target: r.target ?? '' } }, spec.pendingRow(r), decideCell(r.id, onAct))))
      : empty(spec.emptyText));
  }
  fill(doneBox, done.length ? [h('h3', {}, 'Recently decided'), table('data compact', spec.doneCols, done.map((r) => h('tr', {}, spec.doneRow(r))))] : null);
}

const status = (r) => h('td', {}, h('span', { class: `pill s-${r.status}` }, r.status));

function renderEgress(box, list, onAct) {
  renderQueue(box, list, {
    emptyText: 'Nothing is waiting for approval.',
    pendingCols: ['Requested', 'Agent', 'Target', 'Service', 'Action / resource', 'Why held', 'Hold'],
    pendingRow: (r) => [
      h('td', { class: 'nowrap' }, dateTime(r.requestedAt)),
      h('td', {}, r.actor, h('div', { class: 'muted small mono', title: r.actorDid }, short(r.actorDid, 24))),
      h('td', { class: 'mono' }, r.target),
      h('td', {}, r.service),
      h('td', {}, toolCall(r) ? toolCallCell(toolCall(r)) : [h('span', { class: 'mono' }, r.action), h('div', { class: 'muted small break' }, r.resource)]),
      h('td', { class: 'small' }, toolCall(r)?.why ?? r.reason),
      h('td', { class: 'nowrap' }, countdown(Date.parse(r.expiresAt) / 1000),
        r.held === false ? h('div', { class: 'muted small' }, 'connection lost; the agent\'s retry gets the decision') : null),
    ],
    doneCols: ['Requested', 'Agent', 'Target', 'Status', 'By', 'Note'],
    doneRow: (r) => [
      h('td', { class: 'nowrap' }, dateTime(r.requestedAt)),
      h('td', {}, r.actor),
      h('td', { class: 'mono' }, r.target),
      status(r),
      h('td', {}, r.approver ?? '–'),
      h('td', { class: 'small' }, r.denyReason ?? (r.status === 'approved' && !r.usedAt ? 'waiting for the agent\'s retry' : '')),
    ],
  }, onAct);
}

function renderDelegations(box, list, onAct) {
  renderQueue(box, list, {
    emptyText: 'No delegation is waiting for approval.',
    pendingCols: ['Requested', 'Agent', 'Task', 'Action / resource', 'Why', 'TTL'],
    pendingRow: (d) => [
      h('td', { class: 'nowrap' }, dateTime(d.requestedAt)),
      h('td', {}, d.actorName),
      h('td', { class: 'mono' }, d.task),
      h('td', {}, h('span', { class: 'mono' }, d.action), h('div', { class: 'muted small break' }, d.resource)),
      h('td', { class: 'small' }, d.reason),
      h('td', { class: 'nowrap' }, `${num(Math.round(d.ttlSeconds / 60))} min`),
    ],
    doneCols: ['Requested', 'Agent', 'Task', 'Status', 'By', 'Valid until / note'],
    doneRow: (d) => [
      h('td', { class: 'nowrap' }, dateTime(d.requestedAt)),
      h('td', {}, d.actorName),
      h('td', { class: 'mono' }, d.task),
      status(d),
      h('td', {}, d.approver ?? '–'),
      h('td', { class: 'small' }, d.status === 'approved' && d.notAfter ? countdown(d.notAfter) : (d.denyReason ?? '')),
    ],
  }, onAct);
}

const ARGS = '; arguments ';

/**
 * A held MCP tool call (pure): its service, tool and argument digest from the resource
 * (`<service>/<tool> sha256:<hex>`), the canonical arguments from the reason (`...; arguments
 * <JSON>`); undefined for any other held request.
 */
export function toolCall(r) {
  if (r.action !== 'tools/call') return undefined;
  const m = /^([^/\s]+)\/(\S+) sha256:([0-9a-f]{64})$/.exec(r.resource ?? '');
  if (!m) return undefined;
  const reason = r.reason ?? '';
  const at = reason.indexOf(ARGS);
  const args = at < 0 ? undefined : reason.slice(at + ARGS.length);
  let pretty = args;
  try {
    if (args !== undefined) pretty = JSON.stringify(JSON.parse(args), null, 2);
  } catch {
    // shown as written
  }
  return { service: m[1], tool: m[2], digest: m[3], args, pretty, why: at < 0 ? reason : reason.slice(0, at) };
}

/** The held call: service/tool, the digest (checked against the arguments shown where the page can), the arguments as text. */
function toolCallCell(t) {
  const check = h('span', { class: 'muted small digest-check' }, '');
  void checkDigest(check, t.args, t.digest);
  return h('div', { class: 'tool-call', dataset: { service: t.service, tool: t.tool, digest: t.digest } },
    h('span', { class: 'chip chip-tool' }, 'tool call'), ' ',
    h('strong', { class: 'mono' }, `${t.service}/${t.tool}`),
    h('div', { class: 'muted small mono break', title: `SHA-256 of the arguments' canonical JSON (RFC 8785): ${t.digest}` }, `sha256:${t.digest.slice(0, 16)}…`, ' ', check),
    t.pretty === undefined
      ? h('div', { class: 'warn-text small' }, 'arguments not shown')
      : h('pre', { class: 'tool-args mono small', 'aria-label': `Arguments of ${t.service}/${t.tool}` }, t.pretty));
}

/** Whether the digest is the SHA-256 of the arguments shown (Web Crypto: a secure origin only). */
async function checkDigest(el, args, digest) {
  if (args === undefined) return;
  if (!globalThis.crypto?.subtle) {
    el.textContent = 'digest not checked here';
    return;
  }
  const sum = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(args)));
  const ok = [...sum].map((b) => b.toString(16).padStart(2, '0')).join('') === digest;
  el.textContent = ok ? 'matches the arguments' : 'does not match the arguments shown';
  el.className = `small digest-check ${ok ? 'ok-text' : 'bad-text'}`;
}
