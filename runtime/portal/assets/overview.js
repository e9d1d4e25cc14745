// Overview (SPEC "Portal"): chain badge, governance panel, enforcement feed.
import { h, fill, getJson, num, time, every, chip, countdown, decisionPill, short, errorBox, empty } from './lib.js';

const FEED_MAX = 100;
/** SPEC posture buckets in their fixed precedence; `other` (not yet active) comes last. */
const POSTURE = [
  ['owner_inactive', 'Owner inactive'],
  ['blocked', 'Blocked'],
  ['active_healthy', 'Active, healthy'],
  ['other', 'Other (not active)'],
];
const SENTINELS = new Set(['(unattributed)', '(team-owned)', '(unassigned)']);

export function mount(root, ctx) {
  const badge = h('div', { id: 'chain-badge', class: 'badge unknown', role: 'status', 'aria-live': 'polite', dataset: { state: 'loading' } }, 'Checking the audit chain…');
  const gov = h('div', { id: 'governance' }, h('p', { class: 'muted' }, 'Loading…'));
  const feed = h('ol', { id: 'feed', class: 'feed', 'aria-live': 'polite', 'aria-label': 'Enforcement feed, newest first' });
  const feedNote = h('p', { class: 'muted small' }, 'Polling the audit log every second.');
  fill(
    root,
    h('div', { class: 'grid overview' },
      h('section', { class: 'col' },
        h('div', { class: 'card' }, h('h2', {}, 'Audit chain'), badge,
          h('p', { class: 'muted small' }, `Proves the integrity of the records held in memory (the last ${num(ctx.config.ringSize)}).`)),
        h('div', { class: 'card' }, h('h2', {}, 'Governance'), gov)),
      h('section', { class: 'card col feed-card' }, h('h2', {}, 'Enforcement feed'), feedNote, feed)),
  );

  let lastSeq = -1;
  const stops = [
    every(2000, () => verify(badge)),
    every(15000, () => governance(gov, ctx)),
    every(1000, async () => {
      try {
        const records = await getJson(`/v1/audit?limit=${FEED_MAX}`);
        const newest = records.at(-1)?.seq ?? -1;
        if (newest < lastSeq) {
          feed.replaceChildren();
          lastSeq = -1;
        }
        const fresh = records.filter((r) => r.seq > lastSeq);
        if (!fresh.length && feed.childElementCount) return;
        const firstLoad = lastSeq < 0;
        for (const r of fresh) feed.prepend(feedItem(r, !firstLoad));
        while (feed.childElementCount > FEED_MAX) feed.lastElementChild.remove();
        if (!feed.childElementCount) feed.append(h('li', { class: 'empty' }, 'No audit records yet.'));
        else feed.querySelector(':scope > li.empty')?.remove();
        lastSeq = Math.max(lastSeq, newest);
        feedNote.textContent = `Polling the audit log every second${lastSeq > 0 ? ` · newest record #${num(lastSeq)}` : ''}`;
        feedNote.classList.remove('warn-text');
      } catch (e) {
        feedNote.textContent = `Audit log unavailable: ${e.message}`;
        feedNote.classList.add('warn-text');
      }
    }),
  ];
  return () => stops.forEach((s) => s());
}

async function verify(badge) {
  let state;
  let text;
  try {
    const v = await getJson('/v1/audit/verify', {}, 4000);
    if (v && v.ok === true) {
      state = 'verified';
      text = 'Chain verified';
    } else if (v && v.ok === false && Number.isInteger(v.brokenAtSeq)) {
      state = 'broken';
      text = `Chain broken at seq ${v.brokenAtSeq}`;
    } else {
      throw new Error('unexpected answer');
    }
  } catch {
    // Unknown is never shown as verified.
    state = 'unavailable';
    text = 'Chain status unavailable';
  }
  badge.dataset.state = state;
  badge.className = `badge ${state === 'verified' ? 'ok' : state === 'broken' ? 'bad' : 'unknown'}`;
  badge.textContent = text;
  badge.title = state === 'unavailable' ? '/v1/audit/verify could not be reached: integrity unknown' : '';
}

async function governance(box, ctx) {
  if (!ctx.config.identityAuthority) {
    fill(box, h('div', { class: 'notice warn' }, 'No identity authority configured (AGENT_IDP_URL): governance data unavailable.'));
    return;
  }
  let s;
  try {
    s = await getJson('api/identity/v1/governance/summary');
  } catch (e) {
    fill(box, errorBox(e, 'Governance summary'));
    return;
  }
  const total = POSTURE.reduce((n, [k]) => n + (s.posture[k] ?? 0), 0);
  fill(
    box,
    h('div', { class: 'totals' },
      h('div', { class: 'stat', id: 'governed' }, h('strong', { dataset: { value: s.totals.governed } }, num(s.totals.governed)), h('span', {}, 'governed')),
      h('div', { class: 'stat warn', id: 'ungoverned' }, h('strong', { dataset: { value: s.totals.ungoverned } }, num(s.totals.ungoverned)), h('span', {}, 'ungoverned')),
      h('div', { class: 'stat muted' }, h('strong', {}, num(s.totals.retired)), h('span', {}, 'retired (excluded)'))),
    h('div', { class: 'bar', role: 'img', 'aria-label': 'Posture of governed agents' },
      POSTURE.map(([k]) => (s.posture[k] ? h('span', { class: `seg p-${k}`, style: { flexGrow: String(s.posture[k]) }, title: `${k}: ${s.posture[k]}` }) : null))),
    h('ul', { class: 'posture' },
      POSTURE.map(([k, label]) =>
        h('li', { dataset: { bucket: k }, class: `p-${k}` }, h('span', { class: 'dot' }), label,
          h('strong', { class: 'count' }, num(s.posture[k] ?? 0)),
          h('span', { class: 'muted small' }, total ? `${Math.round(((s.posture[k] ?? 0) * 100) / total)}%` : '')))),
    h('div', { class: 'split' },
      breakdown('By owner', 'owner', s.by_owner.map((o) => ({ key: o.key, label: o.display ? `${o.display}` : o.key, sub: o.display ? o.key : '', ...o }))),
      breakdown('By department', 'dept', s.by_department.map((d) => ({ label: d.key, sub: '', ...d })))),
    h('p', { class: 'muted small' }, `Summary generated ${time(s.generated_at)}`),
  );
}

function breakdown(title, kind, rows) {
  return h('div', {},
    h('h3', {}, title),
    rows.length
      ? h('table', { class: 'mini', id: `by-${kind}` },
          h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, kind === 'owner' ? 'Owner' : 'Department'), h('th', { scope: 'col', class: 'n' }, 'Agents'), h('th', { scope: 'col' }, 'Posture'))),
          h('tbody', {}, rows.map((r) =>
            h('tr', { dataset: { key: r.key, agents: r.agents } },
              h('td', { class: SENTINELS.has(r.key) ? 'sentinel' : '' }, r.label, r.sub ? h('div', { class: 'muted small mono' }, r.sub) : null),
              h('td', { class: 'n' }, num(r.agents)),
              h('td', {}, POSTURE.map(([k]) => (r.posture[k] ? h('span', { class: `tiny p-${k}`, title: k }, num(r.posture[k])) : null)))))))
      : empty('No governed agents.'));
}

export function feedItem(r, isNew) {
  const who = r.actor ? `${r.actor}` : (r.subject ?? 'anonymous');
  const chips = [];
  if (r.rule) chips.push(chip('rule', r.rule, 'deciding rule'));
  if (r.task) chips.push(chip('task', `task ${r.task}`, 'task'));
  // An MCP message (tool.call): the tool it names and the digest of its arguments (never the arguments).
  if (r.tool) chips.push(chip('tool', `tool ${short(r.tool, 40)}`, r.argsDigest ? `arguments sha256:${r.argsDigest}` : 'tool'));
  if (r.delegationId && r.allow && r.delegationExp !== undefined) {
    chips.push(h('span', { class: 'chip chip-delegation', title: `delegation ${r.delegationId}` }, `delegation ${short(r.delegationId, 12)} · `, countdown(r.delegationExp)));
  } else if (r.delegationId) {
    chips.push(chip('delegation', `delegation ${short(r.delegationId, 12)}`));
  }
  return h('li', { class: `feed-item ${r.allow ? 'allow' : 'deny'}${isNew ? ' new' : ''}`, dataset: { seq: r.seq, action: r.action, allow: r.allow } },
    h('div', { class: 'line1' },
      decisionPill(r.allow),
      h('span', { class: 'action mono' }, r.action),
      h('span', { class: 'who' }, who, r.service ? h('span', { class: 'muted' }, ' → ', r.service) : null),
      h('time', { class: 'muted small', datetime: r.time }, time(r.time)),
      h('span', { class: 'muted small mono' }, `#${r.seq}`)),
    h('div', { class: 'reason' }, r.reason),
    chips.length ? h('div', { class: 'chips' }, chips) : null);
}
