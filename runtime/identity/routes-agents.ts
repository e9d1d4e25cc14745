/** Agents: register, provision (did:key + Membership and capability VCs), read, verify a VP. */
import { subApi } from '../lib/api.js';
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { generateKeyPairSync, createPublicKey } from 'node:crypto';
import { ApiError, conflict, forbidden, notFound } from '../lib/errors.js';
import { grants, mayApplyAs, principalOf, producerScope } from '../lib/api-auth.js';
import type { Capability } from '../store/schema/identity.js';
import type { IdentityContext } from './context.js';
import { didKeyFromPublicKey, rawPrivateSeed, rawPublicKey } from './did.js';
import { INACTIVE_AGENT, type AgentStatus } from './enterprise/governance/model.js';
import { identityRepo, type AgentRow, type DesiredAgent, type NewCredential } from './repo.js';
import {
  AgentCreateSchema,
  AgentName,
  AgentRecordSchema,
  AgentsApplyResultSchema,
  AgentsApplySchema,
  body,
  err,
  errors,
  json,
  ProvisionSchema,
  VerifyRequestSchema,
  VerifyResponseSchema,
} from './schemas.js';
import { CAPABILITY_TYPE, checkPresentation, issueCredential, MEMBERSHIP_TYPE } from './vc.js';
import type { Step3 } from './verify-index.js';

const NameParam = z.object({ name: AgentName.openapi({ param: { name: 'name', in: 'path' } }) });

export const agentRecord = (a: AgentRow) => ({
  name: a.name,
  role: a.role,
  did: a.did,
  capabilities: a.capabilities,
  provisioned: a.did !== null,
  ...(a.retiredAt ? { retired_at: new Date(a.retiredAt).toISOString() } : {}),
});

export interface VerifyAnswer {
  ok: boolean;
  agentName: string | null;
  agentDid: string | null;
  reason: string;
  membershipJti: string | null;
  exp: number | null;
}

/** SPEC 4.4 verify-presentation, all three steps; never throws. */
export async function verifyPresentation(ctx: IdentityContext, vp: string, audience?: string, nonce?: string): Promise<VerifyAnswer> {
  const fail = (reason: string, agentDid: string | null = null): VerifyAnswer => ({
    ok: false,
    agentName: null,
    agentDid,
    reason,
    membershipJti: null,
    exp: null,
  });
  const issuer = ctx.issuer();
  const r = await checkPresentation(vp, {
    issuerDid: issuer.did,
    issuerKey: issuer.publicKey,
    audience: audience ?? ctx.settings.defaultAudience,
    nonce,
    nowSec: Math.floor(ctx.now() / 1000),
    skewSec: ctx.settings.clockSkewSeconds,
  });
  if (!r.ok) return fail(r.reason, r.holderDid ?? null);
  // Step 3 from memory while the index is current, else from the store (fail closed on a stale view).
  const step3 = ctx.verifyIndex?.lookup(r.membershipJti, r.holderDid) ?? (await step3FromStore(ctx, r.membershipJti, r.holderDid));
  if (step3.revoked) return fail('membership credential revoked', r.holderDid);
  if (step3.agent === undefined) return fail('holder did is not a registered agent (unknown or rotated key)', r.holderDid);
  return {
    ok: true,
    agentName: step3.agent,
    agentDid: r.holderDid,
    reason: 'verified',
    membershipJti: r.membershipJti,
    exp: Math.min(r.vpExp, r.membershipExp),
  };
}

async function step3FromStore(ctx: IdentityContext, jti: string, did: string): Promise<Step3> {
  const repo = identityRepo(ctx.store);
  const [revoked, agent] = await Promise.all([repo.revokedAmong([jti]), repo.agentByDid(did)]);
  return { revoked: revoked.size > 0, agent: agent?.name };
}

export function agentRoutes(ctx: IdentityContext): OpenAPIHono {
  const app = subApi();
  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/agents',
      tags: ['agents'],
      summary: 'Register an agent (idempotent on name; a repeat updates role and capabilities)',
      request: { body: body(AgentCreateSchema) },
      responses: { 201: json(z.object({ name: z.string(), status: z.literal('registered') }), 'Registered'), ...errors },
    }),
    async (c) => {
      const a = c.req.valid('json');
      await identityRepo(ctx.store).upsertAgent({ name: a.name, role: a.role, capabilities: a.capabilities as Capability[] }, ctx.now());
      return c.json({ name: a.name, status: 'registered' as const }, 201);
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/agents/apply',
      tags: ['agents'],
      summary:
        "A producer's whole desired set of agents (the registry's apply model): create, update, retire what it manages and no longer declares (credentials revoked, records kept); unchanged writes nothing",
      request: { body: body(AgentsApplySchema) },
      responses: {
        200: json(AgentsApplyResultSchema, 'Names per outcome; conflicts name the producer that manages them'),
        403: err('With auth on: applying as an owner needs the scope `identity:owner:<owner>`'),
        ...errors,
      },
    }),
    async (c) => {
      const b = c.req.valid('json');
      if (!mayApplyAs(c, 'identity', b.owner))
        throw forbidden('forbidden', `applying as owner ${JSON.stringify(b.owner)} needs the scope ${producerScope('identity', b.owner)} (or admin)`);
      const { revokedMemberships, ...result } = await identityRepo(ctx.store).applyAgents(b.owner, b.agents as DesiredAgent[], ctx.now());
      // This replica knows at once; the others through the change feed.
      for (const jti of revokedMemberships) ctx.verifyIndex?.noteRevoked(jti);
      if (result.retired.length) await ctx.changes?.settled();
      return c.json(result, 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/agents',
      tags: ['agents'],
      summary: 'List agents (never with keys)',
      responses: { 200: json(z.array(AgentRecordSchema)), ...errors },
    }),
    async (c) => c.json((await identityRepo(ctx.store).listAgents()).map(agentRecord), 200),
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/v1/agents/{name}',
      tags: ['agents'],
      summary: 'One agent',
      request: { params: NameParam },
      responses: { 200: json(AgentRecordSchema), 404: err('Unknown agent'), ...errors },
    }),
    async (c) => {
      const { name } = c.req.valid('param');
      const a = await identityRepo(ctx.store).getAgent(name);
      if (!a) throw notFound('agent', name);
      return c.json(agentRecord(a), 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/agents/{name}/provision',
      tags: ['agents'],
      summary: 'Issue a did:key, a Membership VC and capability VCs. Re-provisioning rotates the key and revokes the previous credentials.',
      request: { params: NameParam },
      responses: {
        200: json(ProvisionSchema),
        403: err('Already provisioned, and the caller lacks identity:admin (WRIT_API_AUTH=keys)'),
        404: err('Unknown agent'),
        409: err('The agent is suspended, quarantined or retired (governance), or retired by its producer: no new identity'),
        ...errors,
      },
    }),
    async (c) => {
      const { name } = c.req.valid('param');
      const repo = identityRepo(ctx.store);
      const agent = await repo.getAgent(name);
      if (!agent) throw notFound('agent', name);
      const caller = principalOf(c);
      const guard = (current: { did: string | null; retiredAt?: string | null }, governance: string | undefined) => {
        // Retired by its producer (no longer declared): declared again first, then provisioned.
        if (current.retiredAt) throw conflict('agent_retired', `agent ${name} is retired (no longer declared by its producer): declare it again first`);
        // Re-provisioning replaces a live identity (its credentials are revoked): with
        // WRIT_API_AUTH=keys it needs identity:admin, not only the identity:write of a first one.
        if (caller && current.did !== null && !grants(caller, 'identity:admin'))
          throw new ApiError(
            403,
            'forbidden',
            `agent ${name} is already provisioned: re-provisioning (which revokes its credentials) needs the identity:admin scope`,
          );
        // A suspended, quarantined or retired agent acts for no one: a new identity would undo the
        // Membership VC revocation its standing made.
        if (governance !== undefined && INACTIVE_AGENT.has(governance as AgentStatus))
          throw conflict('agent_not_in_standing', `agent ${name} is ${governance} (governance): it gets no new identity`);
      };
      guard(agent, undefined); // refused before any signing; checked again under the lock
      const issuer = ctx.issuer();
      const { privateKey } = generateKeyPairSync('ed25519');
      const pub = rawPublicKey(createPublicKey(privateKey));
      const did = didKeyFromPublicKey(pub);
      const nowSec = Math.floor(ctx.now() / 1000);
      const statusListUrl = `${ctx.settings.publicUrl}/status/default`;
      const membership = await issueCredential(issuer, {
        subjectDid: did,
        type: MEMBERSHIP_TYPE,
        claims: { name: agent.name, role: agent.role, memberOf: issuer.did },
        ttlSeconds: ctx.settings.membershipTtlSeconds,
        nowSec,
        statusListUrl,
      });
      const caps = await Promise.all(
        agent.capabilities.map((cap) =>
          issueCredential(issuer, {
            subjectDid: did,
            type: CAPABILITY_TYPE,
            claims: { agent: agent.name, action: cap.action, resource: cap.resource, ...(cap.constraints ? { constraints: cap.constraints } : {}) },
            ttlSeconds: ctx.settings.capabilityTtlSeconds,
            nowSec,
            statusListUrl,
          }),
        ),
      );
      const creds: NewCredential[] = [
        { jti: membership.jti, kind: 'membership', subjectDid: did, agentName: name, exp: membership.exp },
        ...caps.map((v) => ({ jti: v.jti, kind: 'capability' as const, subjectDid: did, agentName: name, exp: v.exp })),
      ];
      const replaced = await repo.provision(
        name,
        { did, publicKey: Buffer.from(pub).toString('base64'), membershipJti: membership.jti, membershipExp: membership.exp, creds },
        ctx.now(),
        guard,
      );
      if (!replaced) throw notFound('agent', name);
      // This replica knows at once; the others through the change feed.
      ctx.verifyIndex?.noteProvisioned(name, did);
      if (replaced.membershipJti) ctx.verifyIndex?.noteRevoked(replaced.membershipJti);
      await ctx.changes?.settled(); // answer once every replica has the new binding
      return c.json(
        {
          name,
          did,
          privateKeyB64: Buffer.from(rawPrivateSeed(privateKey)).toString('base64'),
          membershipVc: membership.jwt,
          capabilityVcs: caps.map((v) => v.jwt),
          issuerDid: issuer.did,
          membershipJti: membership.jti,
          ...(replaced.membershipJti ? { revokedMembershipJti: replaced.membershipJti } : {}),
        },
        200,
      );
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/v1/agents/verify-presentation',
      tags: ['agents'],
      summary: 'Verify an agent VP: holder signature, audience, nonce, issuer-signed Membership VC for this holder, not revoked, registered agent',
      request: { body: body(VerifyRequestSchema) },
      responses: { 200: json(VerifyResponseSchema), ...errors },
    }),
    async (c) => {
      const b = c.req.valid('json');
      return c.json(await verifyPresentation(ctx, b.vp, b.audience, b.nonce), 200);
    },
  );
  return app;
}
