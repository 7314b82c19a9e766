// Images can vanish from the runtime after they were loaded: CRI-O wipes its storage after an
// unclean shutdown (crio-wipe.service on OpenShift), and a pruned store loses unpinned ones. A
// layout kept on disk (staging.keep) brings them back with no stick.
import { checkSignature, loadTrust, parseManifestBytes, readLayoutDescription } from '@offline-bundle/format';
import { LayoutStore, catalogOf } from '@offline-bundle/registry';
import { plural, versionsInUse } from '@offline-bundle/status';
import { oneLine } from '../errors.js';
import { loadImages } from '../load/load-images.js';
import type { PipelineContext } from '../load/pipeline.js';
import { readReleases } from './state.js';
import { missingImages } from '../runtime/runtime-checks.js';
import { namesOf } from '../runtime/runtime-target.js';

/**
 * For every release still in use whose layout is kept: when any of its images is missing from
 * the runtime, serve the layout again (its signature checked and every blob hashed anew, as
 * the disk is not trusted since) and pull and pin them. Returns the versions restored.
 */
export async function restoreVanishedImages(ctx: PipelineContext): Promise<string[]> {
  const { config, log, tracker, runtime } = ctx;
  const inspector = await runtime.inspector().catch(() => undefined);
  if (!inspector) return [];
  const releases = await readReleases(config.paths.stateDir);
  // and a release loaded but not yet run: the upgrade to it needs its images as much
  const inUse = new Set([...versionsInUse(tracker.current.history), ...tracker.current.history.filter((e) => e.state === 'loaded').map((e) => e.version)]);
  const restored: string[] = [];
  for (const rec of releases) {
    if (!rec.layout || !inUse.has(rec.version)) continue;
    const missing = await missingImages(inspector, rec.refs);
    if (missing.length === 0) continue;
    log.warn('restore', `images of ${rec.version} are gone from the runtime (${missing.length} of their ${rec.refs.length} names); loading them again from the kept layout ${rec.layout}`, { version: rec.version });
    try {
      const { manifestBytes: bytes, signature } = await readLayoutDescription(rec.layout);
      const manifest = parseManifestBytes(bytes);
      const gone = new Set(missing);
      const lost = manifest.images.filter((img) => namesOf(img).some((n) => gone.has(n))).length;
      checkSignature(bytes, signature, manifest.signer.fingerprint, await loadTrust(config.trust.keys, config.trust.digest));
      const store = await LayoutStore.open(rec.layout, catalogOf(manifest));
      try {
        tracker.update((s) => {
          s.bundle = { file: rec.layout!, media: 'kept layout', name: manifest.release.name, version: rec.version, arch: rec.arch, mode: 'staged', ...(rec.digest ? { digest: rec.digest } : {}) };
          s.conditions = [];
        });
        await loadImages(ctx, { manifest, store, releases });
      } finally {
        await store.close();
      }
      tracker.phase('Ready');
      tracker.condition('Ready', 'True', 'Restored', `${lost} of the ${plural(manifest.images.length, 'image')} of ${rec.version} had vanished from the runtime and were loaded again from the layout kept on this node`);
      restored.push(rec.version);
    } catch (err) {
      tracker.condition('Failed', 'True', 'RestoreFailed', `images of ${rec.version} vanished from the runtime and could not be restored from ${rec.layout} (${oneLine(err)}): plug the USB stick in again`);
      tracker.phase('Failed');
      log.error('restore', `restoring ${rec.version} failed: ${oneLine(err)}`, { version: rec.version });
    }
  }
  return restored;
}
