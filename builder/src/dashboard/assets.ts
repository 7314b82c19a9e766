/**
 * The page's files (HTML, CSS, one vanilla script), served by the tool itself: nothing comes
 * from a CDN, so the page works where the cluster is, with no internet. They live beside the
 * code: builder/src/dashboard/page in the source tree (the build runs from there), and
 * share/bundle/dashboard in the packaged tarball (scripts/package.mjs copies them).
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

export interface Asset {
  type: string;
  body: Buffer;
}

const FILES: Record<string, { file: string; type: string }> = {
  '/': { file: 'index.html', type: 'text/html; charset=utf-8' },
  '/style.css': { file: 'style.css', type: 'text/css; charset=utf-8' },
  '/app.js': { file: 'app.js', type: 'text/javascript; charset=utf-8' },
};

/** Where the page's files are: from builder/dist/dashboard (a checkout) or lib/bundle/app (the tarball). */
export function pageDir(here = import.meta.url): string {
  const candidates = ['../../src/dashboard/page/', '../../../share/bundle/dashboard/'].map((rel) =>
    fileURLToPath(new URL(rel, here)),
  );
  const found = candidates.find((d) => existsSync(`${d}index.html`));
  if (!found)
    throw Object.assign(
      new Error(
        `the dashboard's page files are missing (looked in ${candidates.join(' and ')}): reinstall the bundle tool`,
      ),
      { code: 'DASHBOARD_FILES_MISSING' },
    );
  return found;
}

/** Every page file, read once at start: a missing one fails the command, not a later request. */
export async function loadAssets(dir = pageDir()): Promise<Map<string, Asset>> {
  const out = new Map<string, Asset>();
  for (const [path, f] of Object.entries(FILES))
    out.set(path, { type: f.type, body: await readFile(`${dir}${f.file}`) });
  return out;
}
