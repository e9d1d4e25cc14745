/**
 * The optional org-wide veto (OPA), the last layer of both paths: skipped when no OPA is
 * configured; its verdict is an answer, and any failure to get one denies (rule `opa`).
 */
import { ask, pass, refuse, skip, type PolicyLayer } from './driver.js';
import { isFailure, type Answers, type PolicySnapshot } from './types.js';

/** The veto layer of a path whose OPA input is `inputOf(context)`. */
export function vetoLayer<C extends { readonly snap: PolicySnapshot }>(inputOf: (c: Readonly<C>) => Record<string, unknown>): PolicyLayer<C> {
  return {
    name: 'opa',
    decide(c, a) {
      if (!c.snap.settings.opa) return skip();
      const v = a.opa;
      if (!v) return ask({ kind: 'opa', input: inputOf(c) });
      if (isFailure(v)) return refuse(403, 'opa', `decision error: ${v.failed}`);
      if (!v.allow) return refuse(403, 'opa', `opa: ${v.reason}`);
      return pass();
    },
    why: (_c, a: Answers) => (a.opa && !isFailure(a.opa) && a.opa.reason) || 'policy allowed',
  };
}
