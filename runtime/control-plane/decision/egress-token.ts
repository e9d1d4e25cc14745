/**
 * The egress path's token layer (issue 43): a Writ access token is issued for one registry entry
 * (`aud`), so a call carrying one reaches that entry or is refused 401, as an invalid credential
 * is (SPEC 4.1); and it must hold every scope of the entry's `requireScope` (its space-separated
 * words), or is refused 403 naming them all (`insufficientScope`: RFC 6750 `insufficient_scope`).
 * Skipped when the call carries no Writ token. Pure.
 */
import { tokenMismatch } from '../../lib/access-token.js';
import { missingScopes, neededScopes } from '../../lib/protected-resource.js';
import { pass, refuse, skip, type PolicyLayer } from './driver.js';
import type { EgressContext } from './egress.js';

export const tokenLayer: PolicyLayer<EgressContext> = {
  name: 'token',
  decide(c) {
    const t = c.token;
    if (!t) return skip();
    if (!c.target) return refuse(401, 'identity', `access token is for ${JSON.stringify(t.aud)}, not an external host`);
    const why = tokenMismatch(t, { target: c.target.name });
    if (why) return refuse(401, 'identity', why);
    const needed = neededScopes(c.target.requireScope);
    const missing = missingScopes(t.scope, needed);
    if (!missing.length) return pass();
    return refuse(403, 'identity', `access token lacks scope ${missing.join(' ')} for ${c.target.name}`, { extra: { insufficientScope: needed } });
  },
  why: (c) => `access token issued for ${c.token!.aud}`,
};
