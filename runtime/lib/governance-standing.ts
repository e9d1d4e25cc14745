/**
 * The governance standing rule (SPEC 3.1): a governed agent acts (makes calls, through `/authz`,
 * the forward proxy or the broker) only while its lifecycle status is `active`; in any other
 * status it acts for no one. One pure function, asked by the decision point
 * (control-plane/decision, the governance layer) and by the identity authority's authority
 * preview (`operate`, identity/enterprise/preview), so the preview never promises what the
 * decision refuses. Here, on neutral ground, because neither service imports the other.
 */

/** The one lifecycle status in which a governed agent may act. */
export const ACTING_STATUS = 'active';

/** True when a governed agent in `status` may act now. */
export function mayAct(status: string): boolean {
  return status === ACTING_STATUS;
}
