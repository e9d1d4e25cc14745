/**
 * The resource glob of task-scoped delegations (SPEC 2.6, 3.3), pure: the identity authority's
 * delegation check and an enforcement point checking an access token's delegation (issue 43) read
 * a delegation's resource the same way.
 */

/**
 * A path (before any `?` or `#`) a server may resolve somewhere other than where it reads: a `.`
 * or `..` segment, also percent-encoded (`%2e`), an encoded `/` or `\` (`%2f`, `%5c`), or a `\`.
 * `/public/../admin` starts with `/public/` and reaches `/admin`.
 */
const AMBIGUOUS_PATH = /(?:^|[/\\])(?:\.|%2e){1,2}(?:[/\\]|$)|%2f|%5c|\\/i;

/**
 * A trailing `/*` matches everything below that prefix, but never an ambiguous path (above): it
 * is held for a human, who sees it as sent. Anything else matches exactly.
 */
export function resourceMatches(pattern: string, resource: string): boolean {
  if (pattern.endsWith('/*')) {
    const prefix = pattern.slice(0, -1);
    return resource === pattern || (resource.startsWith(prefix) && !AMBIGUOUS_PATH.test(resource.split(/[?#]/, 1)[0]!));
  }
  return pattern === resource;
}
