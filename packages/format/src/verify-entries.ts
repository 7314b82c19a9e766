import { Transform, type Readable } from 'node:stream';
import type tar from 'tar-stream';
import { quoteName } from '@offline-bundle/host';
import { newSha256 } from '@offline-bundle/oci';
import { FormatError } from './errors.js';
import {
  BUNDLE_JSON,
  MAX_BUNDLE_JSON_BYTES,
  MAX_INDEX_JSON_BYTES,
  MAX_SIGNATURE_BYTES,
  SIGNATURE,
  tarStreamBytes,
} from './layout.js';
import { entryMismatch } from './entry-files.js';
import { headerMessage } from './entry-header.js';
import { endsWithSeekTable, headerOverrun, readAll } from './bundle-ends.js';
import { ListedEntries } from './listing.js';
import { parseManifestBytes } from './manifest.js';
import type { RawHeaderFacts } from './tar-walker.js';
import { checkSignature, checkSigner } from './trust.js';
import { ConsumerFailure, truncated } from './verify-outcome.js';
import type { PassState, TrustedHead } from './verify-options.js';

function badEntry(header: tar.Header, raw: RawHeaderFacts): FormatError | undefined {
  const name = header.name;
  if (header.type !== 'file')
    return new FormatError(
      'NOT_A_FILE',
      `entry ${quoteName(name)} is a ${header.type ?? 'special entry'}; a bundle holds regular files only`,
    );
  if ((header.pax && Object.keys(header.pax).length > 0) || raw.extended) {
    return new FormatError(
      'UNEXPECTED_ENTRY',
      `entry ${quoteName(name)} carries pax or GNU extension headers, which bundles never use`,
    );
  }
  if (
    name.startsWith('/') ||
    name.split('/').some((p: string) => p === '..' || p === '.' || p === '')
  ) {
    return new FormatError(
      'UNEXPECTED_ENTRY',
      `entry ${quoteName(name)} points outside the layout`,
    );
  }
  if (raw.mismatch) return new FormatError('UNEXPECTED_ENTRY', headerMessage(name, raw.mismatch));
  return undefined;
}

/**
 * The entries phase of the pass: bundle.json and its signature first, checked before anything
 * else is trusted; then every entry one bundle.json lists, at its listed size and digest, in
 * the writer's order; then the archive's end.
 */
export class EntryChecks {
  private manifestBytes: Buffer | undefined;
  private listed: ListedEntries | undefined;
  /** Set once bundle.json and its signature are trusted. */
  head: TrustedHead | undefined;

  constructor(private readonly pass: PassState) {}

  async consume(extract: tar.Extract): Promise<void> {
    let n = 0;
    for await (const entry of extract) {
      const h = entry.header;
      // tar reads on past zero blocks; standard tools stop there, so whatever follows is not
      // part of the archive (bytes past the expected end are cut above, but a small archive
      // passes before that end is known)
      const raw = this.pass.walker.nextEntry();
      if (raw.followsEnd) {
        throw n < 2
          ? new FormatError(
              'BAD_ORDER',
              `the archive starts with end-of-archive blocks; a bundle starts with ${BUNDLE_JSON}`,
            )
          : new FormatError(
              'TRAILING_DATA',
              `entry ${quoteName(h.name)} follows the end of the archive: the file was altered`,
            );
      }
      const problem = badEntry(h, raw);
      if (problem) throw problem;
      if (n < 2) await this.headEntry(n, h, entry as unknown as Readable);
      else await this.layoutEntry(h, entry as unknown as Readable);
      n++;
    }
    await this.atEnd();
  }

  /** bundle.json (n = 0), then its signature (n = 1), which decides whether anything is trusted. */
  private async headEntry(n: number, h: tar.Header, data: Readable): Promise<void> {
    const want = n === 0 ? BUNDLE_JSON : SIGNATURE;
    if (h.name !== want)
      throw new FormatError(
        'BAD_ORDER',
        `the archive starts with ${quoteName(h.name)}; a bundle starts with ${BUNDLE_JSON} then ${SIGNATURE}`,
      );
    const buf = await readAll(data, n === 0 ? MAX_BUNDLE_JSON_BYTES : MAX_SIGNATURE_BYTES, want);
    if (n === 0) this.manifestBytes = buf;
    else await this.trustHead(this.manifestBytes!, buf);
  }

  private async trustHead(manifestBytes: Buffer, signature: Buffer): Promise<void> {
    const { opts } = this.pass;
    let claimed: string | undefined;
    try {
      claimed = (
        JSON.parse(manifestBytes.toString('utf8')) as { signer?: { fingerprint?: string } }
      ).signer?.fingerprint;
    } catch {
      // the signature check decides; an unparsable manifest cannot verify against anything
    }
    const signer = checkSignature(manifestBytes, signature, claimed, opts.trust);
    const manifest = parseManifestBytes(manifestBytes);
    if (signer) checkSigner(manifest, signer);
    this.head = { manifest, manifestBytes, signature, ...(signer ? { signer } : {}) };
    this.listed = new ListedEntries(manifest);
    this.pass.expectedTar = tarStreamBytes([
      manifestBytes.length,
      signature.length,
      ...this.listed.sizes,
    ]);
    // Whatever decodes past the archive's end is judged without being decoded in full.
    this.pass.decompress.stopAfter(this.pass.expectedTar);
    if (manifest.index.size > MAX_INDEX_JSON_BYTES)
      throw new FormatError(
        'OVERSIZED_ENTRY',
        `index.json is listed at ${manifest.index.size} bytes, over the ${MAX_INDEX_JSON_BYTES} limit`,
      );
    await opts.onManifest?.(manifest, manifestBytes, signature);
  }

  /** A layout entry: listed, in order, at its size; its bytes to onEntry and hashed to the listed digest. */
  private async layoutEntry(h: tar.Header, data: Readable): Promise<void> {
    const { opts } = this.pass;
    const want = this.listed!.accept(h.name, h.size ?? 0);
    const hash = newSha256();
    const hashed = data.pipe(
      new Transform({
        transform(chunk: Buffer, _e, cb) {
          hash.update(chunk);
          cb(null, chunk);
        },
      }),
    );
    if (opts.onEntry)
      await opts.onEntry({ path: h.name, ...want }, hashed).catch((err: unknown) => {
        throw new ConsumerFailure(err);
      });
    else
      for await (const _ of hashed) {
        /* hashing only */
      }
    const actual = 'sha256:' + hash.digest('hex');
    if (actual !== want.digest) throw entryMismatch(h.name, actual, want.digest);
    opts.onVerified?.({ path: h.name, ...want });
  }

  /** The tar stream ended: the archive must have ended exactly where the listed entries do. */
  private async atEnd(): Promise<void> {
    const { decompress, walker } = this.pass;
    // damage ends the tar stream early: name the damage, not what is missing because of it
    if (decompress.failed) throw decompress.failed;
    if (!this.head && decompress.overLimit) throw headerOverrun();
    if (!this.head)
      throw new FormatError('TRUNCATED', 'the archive ends before bundle.json and its signature');
    // tar ends quietly when the file is cut at an entry boundary; a file cut short has lost
    // its seek table too, while one that merely lacks an entry still ends with it
    if (!this.pass.complete() && !(await endsWithSeekTable(this.pass.source))) throw truncated();
    const missing = this.listed!.missing();
    if (missing)
      throw new FormatError(
        'MISSING_ENTRY',
        `entry ${quoteName(missing)} listed in bundle.json is missing from the archive`,
      );
    if (!this.pass.complete())
      throw new FormatError(
        'TRUNCATED',
        'the archive ends without its two end-of-archive blocks: the file is incomplete or was altered',
      );
    if (this.pass.tarBytes > this.pass.expectedTar)
      throw new FormatError(
        'TRAILING_DATA',
        'data follows the end of the archive: the file was altered',
      );
    const trailer = walker.trailerProblem(this.pass.expectedTar);
    if (trailer) throw trailer;
  }
}
