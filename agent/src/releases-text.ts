// How `bundle-agent releases` reads to a person (the --json output is the ReleasesView itself).
import { escapeControls, textTable } from '@offline-bundle/oci';
import { plural } from '@offline-bundle/status';
import type { Forgotten, ReleasesView } from './releases.js';

export function releasesTable(view: ReleasesView): string {
  if (view.releases.length === 0) return escapeControls(`No release recorded on this node${view.running ? ` (it runs ${view.running})` : ''}.`) + '\n';
  const rows = view.releases.map((r) => [
    r.version,
    r.arch,
    r.running ? 'running' : (r.state ?? '-'),
    r.imagesPresent === undefined ? `${r.images}` : `${r.imagesPresent}/${r.images}`,
    r.pinned ? 'yes' : 'no',
    r.layout ?? '-',
    r.source === 'node' ? 'found on the node' : r.loadedAt,
  ]);
  const running = view.running ? `Running: ${view.running}.` : 'Running release unknown (no version.current, none seen running yet).';
  return textTable(['VERSION', 'ARCH', 'STATE', 'IMAGES', 'PINNED', 'KEPT LAYOUT', 'LOADED'], rows) + escapeControls(`${running} IMAGES: in the runtime / recorded.`) + '\n';
}

export function forgottenLine(f: Forgotten): string {
  return `forgot ${f.version} (${f.arch}): ${plural(f.unpinned, 'image')} unpinned${f.layout ? `, layout ${f.layout} removed` : ''}, records dropped`;
}
