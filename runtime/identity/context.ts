/** What the identity routes share: store, clock, issuer key, settings. */
import type { Store } from '../store/factory.js';
import { ApiError } from '../lib/errors.js';
import type { ChangeFeed } from './change-feed.js';
import type { IssuerKey } from './vc.js';
import type { VerifyIndex } from './verify-index.js';

export interface IdentitySettings {
  issuerDid: string;
  /** Base URL the status list is served under (credentialStatus ids). */
  publicUrl: string;
  membershipTtlSeconds: number;
  capabilityTtlSeconds: number;
  defaultAudience: string;
  clockSkewSeconds: number;
}

export interface IdentityContext {
  store: Store;
  now: () => number;
  settings: IdentitySettings;
  /** The loaded issuer key; throws 503 until it is loaded. */
  issuer(): IssuerKey;
  /** Committed identity changes from the store (migration 0014), for the in-memory views. */
  changes?: ChangeFeed;
  /** Verify-presentation step 3 in memory; absent or not current: the store is read. */
  verifyIndex?: VerifyIndex;
}

export const notReady = () => new ApiError(503, 'not_ready', 'identity authority is starting (issuer key not loaded yet)');
