/**
 * The forward proxy decides on a host name and dials it afterwards, so what a name resolves to at
 * dial time must not reach what no decision could have meant (DNS rebinding, a name pointed at
 * the cloud metadata service). `guardedLookup` is `dns.lookup` for the proxy's upstream sockets
 * (plain HTTP and CONNECT) that refuses, for a name:
 * - link-local addresses (169.254.0.0/16, fe80::/10: the metadata endpoints live there),
 *   unspecified ones (0.0.0.0/8, ::) and multicast;
 * - loopback (127.0.0.0/8, ::1), unless the name is `localhost` or below it (RFC 6761 says those
 *   are loopback, so a decision on them meant it).
 * An address typed as one (`127.0.0.1`, `[::1]`) is not looked up: it was decided as written.
 */
import dns, { type LookupAddress, type LookupOptions } from 'node:dns';
import { BlockList } from 'node:net';
import { addressIn } from '../../lib/net.js';

const NEVER = new BlockList();
NEVER.addSubnet('169.254.0.0', 16, 'ipv4');
NEVER.addSubnet('0.0.0.0', 8, 'ipv4');
NEVER.addSubnet('224.0.0.0', 4, 'ipv4');
NEVER.addSubnet('fe80::', 10, 'ipv6');
NEVER.addSubnet('ff00::', 8, 'ipv6');
NEVER.addAddress('::', 'ipv6');

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

const isLocalhost = (name: string): boolean => {
  const n = name.toLowerCase().replace(/\.$/, '');
  return n === 'localhost' || n.endsWith('.localhost');
};

/** Why `name` may not be dialed at `address`, or undefined. */
export function refusedAddress(name: string, address: string): string | undefined {
  if (addressIn(NEVER, address)) return `${name} resolves to ${address}, a link-local, unspecified or multicast address`;
  if (addressIn(LOOPBACK, address) && !isLocalhost(name)) return `${name} resolves to ${address}, a loopback address`;
  return undefined;
}

type Callback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/** `dns.lookup` with `refusedAddress` applied to every address it gives (net's `lookup` option). */
export function guardedLookup(hostname: string, options: LookupOptions, callback: Callback): void {
  dns.lookup(hostname, { ...options, all: true }, (err, addresses) => {
    if (err) return callback(err, options.all ? [] : '');
    for (const a of addresses) {
      const why = refusedAddress(hostname, a.address);
      if (why) return callback(Object.assign(new Error(`refused: ${why}`), { code: 'EADDRREFUSED' }), options.all ? [] : '');
    }
    if (options.all) return callback(null, addresses);
    const one = addresses[0];
    if (!one) return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), '');
    callback(null, one.address, one.family);
  });
}
