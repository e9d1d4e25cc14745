// Agents: governed agents with owner health, activation blockers and lifecycle history.
import { h, fill, getJson, num, dateTime, errorBox, empty } from './lib.js';

const STATUSES = ['draft', 'pending_approval', 'approved', 'active', 'suspended', 'quarantined', 'retired'];

export function mount(root, ctx) {
  const status = h('select', { id: 'agent-status', 'aria-label': 'Status' }, h('option', { value: '' }, 'any status'), STATUSES.map((s) => h('option', { value: s }, s)));
  const search = h('input', { id: 'agent-search', type: 'search', placeholder: 'name, owner or tenant', 'aria-label': 'Search agents' });
  const count = h('span', { class: 'muted small' });
  const list = h('div', { id: 'agents' }, h('p', { class: 'muted' }, 'Loading…'));
  fill(root, h('section', { class: 'card' },
    h('div', { class: 'toolbar' }, h('h2', {}, 'Governed agents'), search, status, count,
      h('button', { class: 'btn', type: 'button', onclick: () => load() }, 'Refresh')),
    list));

  let agents = [];
  const render = () => {
    const q = search.value.trim().toLowerCase();
    const shown = agents.filter((a) => (!status.value || a.status === status.value) &&
      (!q || [a.agent_name, a.owner_ref, a.owner_display, a.tenant_id].some((v) => v && v.toLowerCase().includes(q))));
    count.textContent = `${num(shown.length)} of ${num(agents.length)}`;
    fill(list, shown.length
      ? h('table', { class: 'data' },
          h('thead', {}, h('tr', {}, ['Agent', 'Status', 'Owner', 'Sponsor', 'Risk', 'Runtime', 'Activation blockers', 'Lifecycle'].map((t) => h('th', { scope: 'col' }, t)))),
          h('tbody', {}, shown.map(row)))
      : empty(agents.length ? 'No agent matches.' : 'No governed agents yet.'));
  };
  const load = async () => {
    if (!ctx.config.identityAuthority) return fill(list, h('div', { class: 'notice warn' }, 'No identity authority configured (AGENT_IDP_URL).'));
    try {
      agents = await getJson('api/identity/v1/governance/agents');
      render();
    } catch (e) {
      fill(list, errorBox(e, 'Governed agents'));
    }
  };
  search.addEventListener('input', render);
  status.addEventListener('change', render);
  void load();
  return () => {};
}

function ownerHealth(a) {
  if (!a.owner_ok) return h('span', { class: 'pill bad' }, 'owner missing');
  if (!a.owner_active) return h('span', { class: 'pill warn' }, 'owner inactive');
  return h('span', { class: 'pill ok' }, 'owner active');
}

function row(a) {
  return h('tr', { dataset: { agent: a.agent_name, status: a.status } },
    h('td', {}, h('strong', {}, a.agent_name), h('div', { class: 'muted small' }, a.tenant_id)),
    h('td', {}, h('span', { class: `pill s-${a.status}` }, a.status)),
    h('td', {}, a.owner_display ?? a.owner_ref, h('div', {}, ownerHealth(a), ' ', h('span', { class: 'muted small' }, a.owner_type))),
    h('td', {}, a.business_sponsor ? [a.sponsor_display ?? a.business_sponsor, a.sponsor_active === false ? h('div', {}, h('span', { class: 'pill warn' }, 'inactive')) : null] : h('span', { class: 'muted' }, '–')),
    h('td', {}, a.risk_tier ? h('span', { class: `pill r-${a.risk_tier}` }, a.risk_tier) : h('span', { class: 'muted' }, '–')),
    h('td', { class: 'mono small' }, a.approved_runtime ?? '–'),
    h('td', { class: 'blockers' }, a.activation_blockers.length
      ? a.activation_blockers.map((b) => h('span', { class: 'chip chip-blocker' }, b))
      : h('span', { class: 'ok-text small' }, 'ready')),
    h('td', {}, h('details', {},
      h('summary', {}, `${num(a.history.length)} event${a.history.length === 1 ? '' : 's'}`),
      h('ol', { class: 'history' }, a.history.map((e) =>
        h('li', {}, h('time', { class: 'muted small', datetime: e.at }, dateTime(e.at)), ' ', h('strong', {}, e.action), ' by ', e.by, e.detail ? h('div', { class: 'muted small' }, e.detail) : null))))));
}
