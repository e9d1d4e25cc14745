// Agents: governed agents with owner health, activation blockers and lifecycle history; and each
// registry agent's effective tools (its allowTools per service, with the toolRules on them).
import { h, fill, getJson, num, dateTime, errorBox, empty } from './lib.js';

const STATUSES = ['draft', 'pending_approval', 'approved', 'active', 'suspended', 'quarantined', 'retired'];

export function mount(root, ctx) {
  const status = h('select', { id: 'agent-status', 'aria-label': 'Status' }, h('option', { value: '' }, 'any status'), STATUSES.map((s) => h('option', { value: s }, s)));
  const search = h('input', { id: 'agent-search', type: 'search', placeholder: 'name, owner or tenant', 'aria-label': 'Search agents' });
  const count = h('span', { class: 'muted small' });
  const list = h('div', { id: 'agents' }, h('p', { class: 'muted' }, 'Loading…'));
  const tools = h('div', { id: 'agent-tools' }, h('p', { class: 'muted' }, 'Loading…'));
  fill(root, h('section', { class: 'card' },
    h('div', { class: 'toolbar' }, h('h2', {}, 'Governed agents'), search, status, count,
      h('button', { class: 'btn', type: 'button', onclick: () => { void load(); void loadTools(); } }, 'Refresh')),
    list),
  h('section', { class: 'card' }, h('h2', {}, 'Effective tools'),
    h('p', { class: 'muted small' }, 'What each agent\'s allowTools give it, per service, and the toolRules on those tools: a when condition on the arguments, a human\'s approval, a delegation for regulated data.'),
    tools));

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
  const loadTools = async () => {
    try {
      fill(tools, toolTable(await getJson('/v1/registry/services')));
    } catch (e) {
      fill(tools, errorBox(e, 'Registry'));
    }
  };
  void loadTools();
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

const split = (pattern) => {
  const i = pattern.indexOf('/');
  return i < 0 ? [pattern, ''] : [pattern.slice(0, i), pattern.slice(i + 1)];
};

/** True when a rule's tool pattern ('' the whole service, `name`, `prefix*`) covers an allowTools one. */
const covers = (rule, tool) => rule === '' || (tool !== '' && (rule.endsWith('*') ? tool.startsWith(rule.slice(0, -1)) : rule === tool));

/**
 * An agent entry's effective tools (pure): per service its allowTools tool patterns ('' for the
 * whole service), each with the toolRules covering it, and the rules on tools no pattern names
 * itself (a rule on one tool of a service allowed whole).
 */
export function effectiveTools(agent, services) {
  const mcp = new Set(services.filter((s) => s.protocol === 'mcp').map((s) => s.name));
  const groups = new Map();
  const group = (svc) => {
    if (!groups.has(svc)) groups.set(svc, { service: svc, mcp: mcp.has(svc), tools: [] });
    return groups.get(svc);
  };
  for (const p of agent.allowTools ?? []) {
    const [svc, tool] = split(p);
    group(svc).tools.push({ tool, rules: [] });
  }
  for (const r of agent.toolRules ?? []) {
    const [svc, tool] = split(r.tool);
    const g = group(svc);
    const hits = g.tools.filter((t) => !t.ruleOnly && covers(tool, t.tool));
    if (hits.length) hits.forEach((t) => t.rules.push(r));
    else g.tools.push({ tool, rules: [r], ruleOnly: true });
  }
  return [...groups.values()];
}

const marker = (kind, text, title) => h('span', { class: `chip ${kind}`, dataset: { marker: text.split(' ')[0] }, title }, text);

function markers(rules) {
  return rules.flatMap((r) => [
    r.when ? marker('chip-rule', `when ${r.when}`, `${r.tool}: allowed only when this holds for the call's arguments`) : null,
    r.approval === 'required' ? marker('chip-blocker', 'approval required', `${r.tool}: each call waits for a human in Approvals`) : null,
    r.dataClass === 'regulated' ? marker('chip-delegation', 'regulated', `${r.tool}: needs an approved delegation (task, tools/call, ${r.tool})`) : null,
  ]);
}

function toolItem(t, mcp) {
  return h('li', { dataset: { tool: t.tool || '*' } },
    h('span', { class: 'mono' }, t.tool || (mcp ? 'every tool' : 'the whole service')),
    t.ruleOnly ? h('span', { class: 'muted small' }, ' (a rule on a tool of a service allowed whole)') : null,
    ' ', markers(t.rules));
}

/** The table of every registry agent with allowTools or toolRules: one row per agent and service. */
export function toolTable(services) {
  const agents = services.filter((s) => s.kind === 'agent' && (s.allowTools?.length || s.toolRules?.length));
  if (!agents.length) return empty('No agent is allowed any tool.');
  const rows = agents.flatMap((a) => effectiveTools(a, services).map((g) =>
    h('tr', { dataset: { agent: a.name, service: g.service } },
      h('td', {}, h('strong', {}, a.name)),
      h('td', {}, h('span', { class: 'mono' }, g.service), g.mcp ? [' ', h('span', { class: 'pill' }, 'MCP')] : null),
      h('td', {}, h('ul', { class: 'tools' }, g.tools.map((t) => toolItem(t, g.mcp)))))));
  return h('table', { class: 'data' },
    h('thead', {}, h('tr', {}, ['Agent', 'Service', 'Tools and rules'].map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, rows));
}
