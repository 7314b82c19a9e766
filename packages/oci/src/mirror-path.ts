/**
 * The repository name under which a local mirror registry serves an image of
 * "registry/repository": the source host becomes the first path component, so names from
 * different registries never collide. A port's ":" is not allowed in a repository path, so
 * "host:5000" becomes "host_5000".
 */
export function mirrorPath(repository: string): string {
  const slash = repository.indexOf('/');
  const host = slash < 0 ? repository : repository.slice(0, slash);
  const rest = slash < 0 ? '' : repository.slice(slash);
  return host.toLowerCase().replace(/:/g, '_') + rest;
}
