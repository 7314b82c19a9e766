// How `bundle-agent releases` reads to a person (the --json output is the ReleasesView itself).
import { escapeControls, textTable } from '@offline-bundle/host';
import { plural } from '@offline-bundle/cli';
import type { Forgotten, PinState, ReleasesView } from './releases.js';

const PINNED: Record<PinState, string> = { yes: 'yes', no: 'no', unknown: 'unknown*' };

function forgottenText(view: ReleasesView): string {
  if (view.forgotten.length === 0) return '';
  const list = view.forgotten.map((f) => `${f.version} (${f.arch})`).join(', ');
  return (
    escapeControls(
      `Forgotten, not loaded again from a stick until "releases unforget VERSION": ${list}.`,
    ) + '\n'
  );
}

/** sha256:0123456789ab, enough to tell two bundles of one release apart. */
const shortDigest = (d: string | undefined) => (d ? d.slice(0, 'sha256:'.length + 12) : '-');

/** A release recorded from more than one bundle: then each row names its bundle. */
function severalBundles(view: ReleasesView): boolean {
  const seen = new Set<string>();
  return view.releases.some((r) => seen.size === seen.add(`${r.version}\0${r.arch}`).size);
}

/** One line per update path (#43) recorded: "Update path 4.15.40 → 4.16.2 (amd64), from one bundle: …". */
function pathsText(view: ReleasesView): string {
  const paths = new Map<string, { path: string[]; held: Set<string> }>();
  for (const r of view.releases) {
    if (!r.path) continue;
    const key = `${r.path.join(' → ')} (${r.arch})`;
    const p = paths.get(key) ?? { path: r.path, held: new Set<string>() };
    if (r.heldFor) p.held.add(r.version);
    paths.set(key, p);
  }
  return [...paths]
    .map(([key, p]) => {
      const keep = p.held.size
        ? `: ${[...p.held].join(', ')} stays pinned until ${p.path.at(-1)} runs`
        : '';
      return escapeControls(`Update path ${key}, from one bundle${keep}.`) + '\n';
    })
    .join('');
}

export function releasesTable(view: ReleasesView): string {
  if (view.releases.length === 0)
    return (
      escapeControls(
        `No release recorded on this node${view.running ? ` (it runs ${view.running})` : ''}.`,
      ) +
      '\n' +
      forgottenText(view)
    );
  const bundles = severalBundles(view);
  const rows = view.releases.map((r) => [
    r.version,
    r.arch,
    r.running ? 'running' : r.heldFor ? `kept for ${r.heldFor}` : (r.state ?? '-'),
    r.imagesPresent === undefined ? `${r.images}` : `${r.imagesPresent}/${r.images}`,
    PINNED[r.pinned],
    r.layout ?? '-',
    r.source === 'node' ? 'found on the node' : r.loadedAt,
    ...(bundles ? [shortDigest(r.digest)] : []),
  ]);
  const running = view.running
    ? `Running: ${view.running}.`
    : 'Running release unknown (no version.current, none seen running yet).';
  const unknown = view.releases.some((r) => r.pinned === 'unknown')
    ? ' *asked, but this runtime does not report pins (CRI-O before 1.28, containerd before 1.6.22).'
    : '';
  const several = bundles
    ? ' A release brought by more than one bundle has a row per bundle (BUNDLE: its sha256).'
    : '';
  return (
    textTable(
      [
        'VERSION',
        'ARCH',
        'STATE',
        'IMAGES',
        'PINNED',
        'KEPT LAYOUT',
        'LOADED',
        ...(bundles ? ['BUNDLE'] : []),
      ],
      rows,
    ) +
    escapeControls(`${running} IMAGES: in the runtime / of the release.${unknown}${several}`) +
    '\n' +
    pathsText(view) +
    forgottenText(view)
  );
}

export function forgottenLine(f: Forgotten): string {
  return `forgot ${f.version} (${f.arch}): ${plural(f.unpinned, 'image')} unpinned${f.layout ? `, layout ${f.layout} removed` : ''}, records dropped${f.digest ? ` (bundle ${shortDigest(f.digest)})` : ''}; not loaded again from a stick until releases unforget ${f.version}`;
}
