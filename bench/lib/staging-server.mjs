#!/usr/bin/env node
// The registry `bundle-agent load` pulls from (pipeline.ts, stageWhilePulling): a StagingStore
// over the layout its own verified extraction wrote, each blob servable once the extraction
// found its signed digest. Here the layout comes from `bundle extract` (the same verified
// extraction), so every blob is marked verified and the staging finished before listening.
// Prints {"address"} like `bundle-agent serve --json`; runs until SIGTERM.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { StagingStore } from '@offline-bundle/agent';
import { parseManifestBytes } from '@offline-bundle/format';
import { catalogOf, startRegistry } from '@offline-bundle/registry';

const dir = path.resolve(process.argv[2]);
const manifest = parseManifestBytes(await readFile(path.join(dir, 'bundle.json')));
const catalog = catalogOf(manifest);
const store = new StagingStore(`${dir}.partial`, dir, catalog, manifest);
for (const digest of catalog.blobs.keys()) store.verified(digest);
store.staged();
const reg = await startRegistry({ store, catalog });
process.stdout.write(
  JSON.stringify({ address: reg.address, images: manifest.images.length }) + '\n',
);
process.once('SIGTERM', () => reg.close().then(() => process.exit(0)));
