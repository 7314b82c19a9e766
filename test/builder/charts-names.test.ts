// Review fixes of the Helm charts (#23): a chart given as an image is refused by its config media
// type; oci:// names read as Helm reads them (the first component the host, served here through a
// registries.conf mirror: "charthost" has no dot, which Docker's rule takes for a docker.io path);
// a version's "+" as helm push tags it. Real docker-registry on 127.0.0.1 (charts-review-setup.ts).
import t from 'tap';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { errorCode } from './lib.js';
import {
  H,
  build,
  create,
  demo,
  dryRun,
  isc,
  lineCount,
  own,
  work,
} from './charts-review-setup.js';

t.test(
  'a chart given as an image is refused by its config, with or without --all-platforms; one given twice is named',
  async (t) => {
    for (const extra of [['--all-platforms'], []]) {
      const r = await dryRun(['--image', demo.ref, ...extra]);
      t.equal(errorCode(r.stderr), 'UNSUPPORTED_MEDIA_TYPE', `--image CHART ${extra.join(' ')}`);
      t.match(
        r.stderr,
        `--image #1: ${demo.ref} is a Helm chart: list it under charts (or --chart)`,
      );
      t.equal(lineCount(r.stderr), 1, `--image CHART ${extra.join(' ')}: one line`);
    }
    const twice = await dryRun(['--image', demo.ref, '--chart', `oci://${demo.ref}`]);
    t.equal(errorCode(twice.stderr), 'INVALID_CONFIG');
    t.match(
      twice.stderr,
      `${demo.ref} is given both as an image (--image #1) and as a chart (--chart #1)`,
    );
    t.equal(lineCount(twice.stderr), 1, 'image and chart: one line');
  },
);

t.test(
  'oci:// names: the first component is the host (flag, file, ImageSetConfiguration url); oci://HOST alone refused',
  async (t) => {
    const conf = path.join(work, 'charthost.conf');
    await writeFile(
      conf,
      `[[registry]]\nprefix = "charthost"\nlocation = "charthost"\n[[registry.mirror]]\nlocation = "${H}"\ninsecure = true\n`,
    );
    const flag = await dryRun([
      '--registries-conf',
      conf,
      '--chart',
      'oci://charthost/charts/demo:0.1.0',
    ]);
    t.equal(flag.code, 0, flag.stderr);
    t.same(
      flag.plan?.charts.map((c) => [c.reference, c.digest]),
      [['charthost/charts/demo:0.1.0', demo.digest]],
      '--chart: on host charthost, not docker.io/charthost',
    );
    const file = await create(
      own({ version: '1.0', charts: ['oci://charthost/charts/demo:0.1.0'] }),
      ['--registries-conf', conf, '--dry-run', '--json'],
    );
    t.equal(file.code, 0, file.stderr);
    t.same(
      JSON.parse(file.stdout).charts.map((c: { reference: string }) => c.reference),
      ['charthost/charts/demo:0.1.0'],
      'charts: in the file',
    );
    const fromIsc = await create(isc('oci://charthost/charts'), [
      '--version',
      '1.0',
      '--registries-conf',
      conf,
      '--dry-run',
      '--json',
    ]);
    t.equal(fromIsc.code, 0, fromIsc.stderr);
    t.same(
      JSON.parse(fromIsc.stdout).charts.map((c: { reference: string }) => c.reference),
      ['charthost/charts/demo:0.1.0'],
      "an ImageSetConfiguration's helm repository url",
    );

    for (const bare of ['oci://charthost', 'oci://charthost:0.1.0', `oci://${H}`]) {
      const r = await dryRun(['--chart', bare]);
      t.equal(errorCode(r.stderr), 'INVALID_CONFIG', bare);
      t.match(
        r.stderr,
        /--chart #1: chart: .*oci:\/\/HOST names no repository: give oci:\/\/HOST\/REPO\/NAME:VERSION/,
        `${bare}: names the fix`,
      );
      t.equal(lineCount(r.stderr), 1, `${bare}: one line`);
    }
  },
);

t.test(
  'a chart version\'s "+" is its tag\'s "_" (as helm push writes it), from the flag and the file alike',
  async (t) => {
    for (const chart of [`oci://${H}/charts/demo:0.2.0+build`, `${H}/charts/demo:0.2.0+build`]) {
      const r = await dryRun(['--chart', chart]);
      t.equal(r.code, 0, r.stderr);
      t.same(
        r.plan?.charts.map((c) => [c.reference, c.digest]),
        [[build.ref, build.digest]],
        chart,
      );
    }
    const file = await create(
      own({ version: '1.0', charts: [`oci://${H}/charts/demo:0.2.0+build`] }),
      ['--dry-run', '--json'],
    );
    t.equal(file.code, 0, file.stderr);
    t.same(
      JSON.parse(file.stdout).charts.map((c: { reference: string }) => c.reference),
      [build.ref],
      'charts: in the file',
    );
  },
);
