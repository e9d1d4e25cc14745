/** Egress approval queue: `createApprovalQueue({store, audit})` and its management routes. */
export { createApprovalQueue, EGRESS_CHANNEL, DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT } from './queue.js';
export type { ApprovalQueue, ApprovalQueueOptions, ListOptions } from './queue.js';
export { approvalRoutes, ApproveBody, DenyBody, type ApprovalRoutesDeps, type QueueSource } from './routes.js';
export { EGRESS_STATUSES, type EgressRequest, type EgressRequestInput, type EgressStatus, type HoldResult } from './record.js';
