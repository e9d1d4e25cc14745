/** Peer-address trust: which direct peers may speak for the client (x-forwarded-* headers). */
import { BlockList, isIP } from 'node:net';

/**
 * A predicate over peer addresses from a comma-separated list of IPs and CIDRs
 * (`10.0.0.0/8, 127.0.0.1, ::1`). Empty list: nobody is trusted. Throws on a malformed entry.
 */
export function trustedPeers(list: string): (addr: string | undefined) => boolean {
  const entries = list
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean);
  if (entries.length === 0) return () => false;
  const bl = new BlockList();
  for (const e of entries) {
    const [ip, bits] = e.split('/');
    const family = isIP(ip ?? '');
    if (!family) throw new Error(`TRUSTED_PROXIES: ${JSON.stringify(e)} is not an IP address or CIDR`);
    const type = family === 6 ? 'ipv6' : 'ipv4';
    if (bits === undefined) bl.addAddress(ip!, type);
    else {
      const n = Number(bits);
      if (!/^\d{1,3}$/.test(bits) || n > (family === 6 ? 128 : 32)) throw new Error(`TRUSTED_PROXIES: bad prefix length in ${JSON.stringify(e)}`);
      bl.addSubnet(ip!, n, type);
    }
  }
  return (addr) => !!addr && addressIn(bl, addr);
}

/**
 * Is an address in a BlockList? An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`: an IPv4 peer on a
 * dual-stack socket, or a resolver's answer) is looked up as the IPv4 address it is. Not an
 * address: false.
 */
export function addressIn(list: BlockList, addr: string): boolean {
  const v4 = addr.toLowerCase().startsWith('::ffff:') && isIP(addr.slice(7)) === 4 ? addr.slice(7) : undefined;
  if (v4) return list.check(v4, 'ipv4');
  const family = isIP(addr);
  return family !== 0 && list.check(addr, family === 6 ? 'ipv6' : 'ipv4');
}
