// A layout kept on disk after its load is trusted again only as far as it can be checked: the
// signed bundle.json must be the one loaded (its recorded identity), for the release recorded,
// under a trusted key (or that identity), and every blob is hashed again on open.
import {
  bundleIdentity,
  checkSignature,
  loadTrust,
  parseManifestBytes,
  readLayoutDescription,
  releasePath,
  type BundleManifest,
} from '@offline-bundle/format';
import { LayoutStore, catalogOf } from '@offline-bundle/registry';
import type { AgentConfig } from '../config.js';
import { AgentError } from '../errors.js';
import type { ReleaseRecord } from '../state/release-records.js';

/** A kept layout checked and hashed: its store holds every chunk's digest, so whoever serves it later still refuses a changed byte. */
export interface KeptLayout {
  identity: string | undefined;
  manifest: BundleManifest;
  store: LayoutStore;
}

/** A staged layout's signed head, as the load admits it. */
export interface StagedHead {
  manifest: BundleManifest;
  manifestBytes: Buffer;
  signature: Buffer;
}

/**
 * The signed head of the layout in `dir`, read back from disk (not trusted from memory) and held
 * to the bundle.json it was staged or loaded under (`identity`): whatever signed bundle.json lies
 * there now is not enough. `which` names that bundle.json in the refusal.
 */
export async function readStagedHead(
  dir: string,
  identity: string | undefined,
  which: string,
): Promise<StagedHead> {
  const { manifestBytes, signature } = await readLayoutDescription(dir);
  if (identity !== undefined && bundleIdentity(manifestBytes) !== identity)
    throw new AgentError(
      'Corrupt',
      `${dir} holds another bundle.json than ${which}: it is not used`,
    );
  return { manifest: parseManifestBytes(manifestBytes), manifestBytes, signature };
}

export async function openKeptLayout(
  config: Pick<AgentConfig, 'trust'>,
  rec: ReleaseRecord & { layout: string },
): Promise<KeptLayout> {
  const { manifest, manifestBytes, signature } = await readStagedHead(
    rec.layout,
    rec.identity,
    `the one loaded for ${rec.version}`,
  );
  // a record of a path's earlier release (#43) names the layout of the bundle that carries it
  const carried = releasePath(manifest).some((h) => h.version === rec.version);
  if (!carried || manifest.release.arch !== rec.arch) {
    throw new AgentError(
      'Corrupt',
      `${rec.layout} holds release ${manifest.release.version} (${manifest.release.arch}), not ${rec.version} (${rec.arch}): it is not used`,
    );
  }
  const signer = checkSignature(
    manifestBytes,
    signature,
    manifest.signer.fingerprint,
    await loadTrust(config.trust.keys, config.trust.digest),
  );
  // digest-only trust vouched for the file at load time; on disk only the recorded identity can
  if (!signer && rec.identity === undefined)
    throw new AgentError(
      'NoTrust',
      `${rec.layout}: no trusted key signed it and no identity was recorded at its load: it is not used`,
    );
  return {
    identity: rec.identity,
    manifest,
    store: await LayoutStore.open(rec.layout, catalogOf(manifest)),
  };
}
