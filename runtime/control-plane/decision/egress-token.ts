/**
 * The egress path's token layer (issue 43): a Writ access token is issued for one registry entry
 * (`aud`), so a call carrying one reaches that entry or is refused 401, as an invalid credential
 * is (SPEC 4.1). Skipped when the call carries no Writ token. Pure.
 */
import { tokenMismatch } from '../../lib/access-token.js';
import { pass, refuse, skip, type PolicyLayer } from './driver.js';
import type { EgressContext } from './egress.js';

export const tokenLayer: PolicyLayer<EgressContext> = {
  name: 'token',
  decide(c) {
    const t = c.token;
    if (!t) return skip();
    if (!c.target) return refuse(401, 'identity', `access token is for ${JSON.stringify(t.aud)}, not an external host`);
    const why = tokenMismatch(t, { target: c.target.name });
    return why ? refuse(401, 'identity', why) : pass();
  },
  why: (c) => `access token issued for ${c.token!.aud}`,
};
