// Tokens: the access tokens the identity authority issued (GET /v1/tokens: never a token's
// value), each beside the delegation it derives from (task, action, resource, its status), with
// its agent, human, audience, scope, lifetime and whether it is active, expired or revoked (by
// its own revocation or its delegation's). Pages of 100; "Load more" follows the cursor.
import { h, fill, getJson, num, dateTime, errorBox, empty, short } from './lib.js';

const PAGE = 100;

export function mount(root, ctx) {
  const delegation = h('input', { id: 'token-delegation', type: 'search', placeholder: 'delegation id', 'aria-label': 'Delegation id' });
  const agent = h('input', { id: 'token-agent', type: 'search', placeholder: 'agent', 'aria-label': 'Agent' });
  const count = h('span', { class: 'muted small', id: 'token-count' });
  const list = h('div', { id: 'tokens' }, h('p', { class: 'muted' }, 'Loading…'));
  const more = h('button', { class: 'btn', type: 'button', id: 'token-more', hidden: true, onclick: () => load(true) }, 'Load more');
  fill(
    root,
    h(
      'section',
      { class: 'card' },
      h(
        'div',
        { class: 'toolbar' },
        h('h2', {}, 'Issued tokens'),
        delegation,
        agent,
        count,
        h('button', { class: 'btn', type: 'button', onclick: () => load(false) }, 'Refresh'),
      ),
      list,
      more,
    ),
  );

  let tokens = [];
  let next = null;
  let delegations = new Map();
  const render = () => {
    count.textContent = `${num(tokens.length)} shown`;
    more.hidden = !next;
    fill(
      list,
      tokens.length
        ? h(
            'table',
            { class: 'data' },
            h(
              'thead',
              {},
              h(
                'tr',
                {},
                ['Token', 'Status', 'Agent', 'Human', 'Audience', 'Scope', 'Issued', 'Expires', 'Delegation'].map((t) => h('th', { scope: 'col' }, t)),
              ),
            ),
            h(
              'tbody',
              {},
              tokens.map((t) => row(t, delegations.get(t.delegationId))),
            ),
          )
        : empty('No token issued yet (or none matches).'),
    );
  };
  const query = (after) => {
    const q = new URLSearchParams({ limit: String(PAGE) });
    if (delegation.value.trim()) q.set('delegation', delegation.value.trim());
    if (agent.value.trim()) q.set('agent', agent.value.trim());
    if (after) q.set('after', after);
    return q;
  };
  const load = async (append) => {
    if (!ctx.config.identityAuthority) return fill(list, h('div', { class: 'notice warn' }, 'No identity authority configured (AGENT_IDP_URL).'));
    try {
      const [page, dels] = await Promise.all([
        getJson(`api/identity/v1/tokens?${query(append ? next : null)}`),
        append ? null : getJson('api/identity/v1/delegations').catch(() => []),
      ]);
      if (dels) delegations = new Map(dels.map((d) => [d.id, d]));
      tokens = append ? [...tokens, ...page.tokens] : page.tokens;
      next = page.next;
      render();
    } catch (e) {
      fill(list, errorBox(e, 'Issued tokens'));
    }
  };
  for (const input of [delegation, agent]) input.addEventListener('change', () => load(false));
  void load(false);
  return () => {};
}

function status(t) {
  if (t.status === 'revoked')
    return h(
      'span',
      { class: 'pill bad', title: t.revokedAt ? `revoked ${dateTime(t.revokedAt)}` : undefined },
      t.revokedBy === 'delegation' ? 'revoked (delegation)' : 'revoked',
    );
  return h('span', { class: `pill s-${t.status}` }, t.status);
}

function delegationCell(t, d) {
  if (!t.delegationId) return h('span', { class: 'muted small' }, 'none (client credentials)');
  return [
    h('span', { class: 'mono small', title: t.delegationId }, short(t.delegationId, 13)),
    d ? h('div', { class: 'small' }, `${d.task} · ${d.action} · ${d.resource} `, h('span', { class: `pill s-${d.status}` }, d.status)) : null,
  ];
}

function row(t, d) {
  return h(
    'tr',
    { dataset: { jti: t.jti, status: t.status, delegation: t.delegationId ?? '' } },
    h('td', { class: 'mono small', title: t.jti }, short(t.jti.replace(/^urn:uuid:/, ''), 13)),
    h('td', {}, status(t)),
    h('td', {}, h('strong', {}, t.agent), h('div', { class: 'muted small mono', title: t.agentDid }, short(t.agentDid, 20))),
    h('td', {}, t.human ?? h('span', { class: 'muted' }, '–')),
    h('td', { class: 'mono small' }, t.audience),
    h('td', { class: 'mono small' }, t.scope || '–'),
    h('td', { class: 'small' }, h('time', { datetime: t.issuedAt }, dateTime(t.issuedAt))),
    h('td', { class: 'small' }, h('time', { datetime: t.expiresAt }, dateTime(t.expiresAt))),
    h('td', {}, delegationCell(t, d)),
  );
}
