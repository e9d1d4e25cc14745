// Audit explorer: the held ring (last 1000 records), filtered by actor, service, rule,
// action and decision; each record's hash and its link to the previous record.
import { h, fill, getJson, num, dateTime, decisionPill, short, errorBox, empty } from './lib.js';

const RULES = ['identity', 'registry', 'inline', 'opa', 'delegation'];

export function mount(root, ctx) {
  const f = {
    actor: h('input', { id: 'f-actor', type: 'search', placeholder: 'actor or subject', 'aria-label': 'Actor or subject' }),
    service: h('select', { id: 'f-service', 'aria-label': 'Service' }, h('option', { value: '' }, 'any service')),
    rule: h('select', { id: 'f-rule', 'aria-label': 'Rule' }, h('option', { value: '' }, 'any rule'), RULES.map((r) => h('option', { value: r }, r))),
    action: h('select', { id: 'f-action', 'aria-label': 'Action' }, h('option', { value: '' }, 'any action')),
    decision: h('select', { id: 'f-decision', 'aria-label': 'Decision' }, h('option', { value: '' }, 'allow and deny'), h('option', { value: 'allow' }, 'allow'), h('option', { value: 'deny' }, 'deny')),
  };
  const count = h('span', { class: 'muted small', id: 'audit-count' });
  const table = h('div', { id: 'audit' }, h('p', { class: 'muted' }, 'Loading…'));
  fill(root, h('section', { class: 'card' },
    h('div', { class: 'toolbar' }, h('h2', {}, 'Audit log'), Object.values(f), count,
      h('button', { class: 'btn', type: 'button', onclick: () => load() }, 'Refresh')),
    h('p', { class: 'muted small' }, `The last ${num(ctx.config.ringSize)} records held by the control plane, newest first. A link is checked against the previous record's hash.`),
    table));

  let records = [];
  const options = (sel, values) => {
    const keep = sel.value;
    const first = sel.options[0];
    sel.replaceChildren(first, ...values.map((v) => h('option', { value: v }, v)));
    sel.value = values.includes(keep) ? keep : '';
  };
  const render = () => {
    const q = f.actor.value.trim().toLowerCase();
    const shown = records.filter((r) =>
      (!q || [r.actor, r.subject].some((v) => v && v.toLowerCase().includes(q))) &&
      (!f.service.value || r.service === f.service.value) &&
      (!f.rule.value || r.rule === f.rule.value) &&
      (!f.action.value || r.action === f.action.value) &&
      (!f.decision.value || (f.decision.value === 'allow') === r.allow));
    count.textContent = `${num(shown.length)} of ${num(records.length)} records`;
    const bySeq = new Map(records.map((r) => [r.seq, r]));
    fill(table, shown.length
      ? h('table', { class: 'data audit' },
          h('thead', {}, h('tr', {}, ['Seq', 'Time', 'Action', 'Actor / subject', 'Service', 'Task', 'Rule', 'Decision', 'Reason', 'Hash links'].map((t) => h('th', { scope: 'col' }, t)))),
          h('tbody', {}, shown.slice().reverse().map((r) => row(r, bySeq.get(r.seq - 1)))))
      : empty(records.length ? 'No record matches the filters.' : 'No audit records yet.'));
  };
  const load = async () => {
    try {
      records = await getJson(`/v1/audit?limit=${ctx.config.ringSize}`);
      options(f.service, [...new Set(records.map((r) => r.service).filter(Boolean))].sort());
      options(f.action, [...new Set(records.map((r) => r.action))].sort());
      render();
    } catch (e) {
      fill(table, errorBox(e, 'Audit log'));
    }
  };
  for (const el of Object.values(f)) el.addEventListener(el.tagName === 'INPUT' ? 'input' : 'change', render);
  table.addEventListener('click', (e) => {
    const a = e.target.closest('a[data-goto]');
    if (!a) return;
    e.preventDefault();
    const target = document.getElementById(`seq-${a.dataset.goto}`);
    if (target) {
      target.scrollIntoView({ block: 'center' });
      target.focus();
    }
  });
  void load();
  return () => {};
}

function row(r, prev) {
  // The first held record links to a record outside the ring: nothing to compare with.
  const linkOk = prev ? prev.hash === r.prevHash : undefined;
  const who = r.actor ? [r.actor, r.subject ? h('div', { class: 'muted small' }, `for ${r.subject}`) : null] : (r.subject ?? '–');
  return h('tr', { id: `seq-${r.seq}`, tabindex: '-1', dataset: { seq: r.seq, allow: r.allow }, class: r.allow ? '' : 'row-deny' },
    h('td', { class: 'mono n' }, String(r.seq)),
    h('td', { class: 'nowrap small' }, dateTime(r.time)),
    h('td', { class: 'mono small' }, r.action),
    h('td', {}, who),
    h('td', {}, r.service ?? '–'),
    h('td', { class: 'mono small' }, r.task ?? ''),
    h('td', {}, r.rule ? h('span', { class: 'chip chip-rule' }, r.rule) : ''),
    h('td', {}, decisionPill(r.allow)),
    h('td', { class: 'small break' }, r.reason, r.delegationId ? h('div', { class: 'muted' }, `delegation ${r.delegationId}`) : null),
    h('td', { class: 'mono small hashes' },
      h('div', { title: r.hash }, 'hash ', short(r.hash, 10)),
      h('div', { title: r.prevHash },
        'prev ',
        prev ? h('a', { href: `#/audit`, dataset: { goto: prev.seq } }, short(r.prevHash, 10)) : short(r.prevHash, 10),
        linkOk === true ? h('span', { class: 'ok-text', title: 'matches the previous record' }, ' ✓') : null,
        linkOk === false ? h('span', { class: 'bad-text', title: 'does not match the previous record' }, ' ✗') : null)));
}
