// Before a byte leaves the stick: does the runtime read the files the agent is about to write?
// containerd's CRI reads <config_path>/<host>/hosts.toml only when its registry config_path
// names that directory, and containerd 1.x ships it empty (Debian's package as well): the
// pulls would then go to the real registries, fail on a node without a network, and the
// technician would have waited for the whole copy for nothing.
import {
  configPathReads,
  criStatusInfo,
  hostPath,
  registryConfigPath,
} from '@offline-bundle/runtime';
import type { AgentConfig } from '../config.js';
import { AgentError, oneLine } from '../errors.js';
import type { Logger } from '../log.js';

/** The one line that names the setting and the fix. */
function ignoredCertsDirMessage(configPath: string, certsDir: string): string {
  const why =
    configPath === ''
      ? `its CRI registry config_path is "" (containerd 1.x's default, Debian's too)`
      : `its CRI registry config_path is ${JSON.stringify(configPath)}, which does not name it`;
  return (
    `containerd ignores ${certsDir}: ${why}; run install.sh --runtime containerd --configure-containerd, ` +
    `or add [plugins."io.containerd.grpc.v1.cri".registry] config_path = ${JSON.stringify(certsDir)} to a file containerd imports, then restart containerd`
  );
}

/**
 * Asks containerd's CRI for its configuration (Status, verbose: what `crictl info` shows) and
 * refuses the load with RuntimeIgnoresMirror when its registry config_path does not include
 * paths.containerdCertsDir. A containerd that does not say (not answering, or no registry
 * config in its answer, as containerd 2 may) is not refused: the pulls then tell, and the log
 * says the check could not be made.
 */
export async function checkContainerdConfig(
  config: AgentConfig,
  log?: Logger,
  timeoutMs = 5_000,
): Promise<void> {
  const certsDir = config.paths.containerdCertsDir;
  let info: Record<string, string>;
  try {
    info = await criStatusInfo(config.criSocket, timeoutMs);
  } catch (err) {
    log?.warn(
      'runtime-config',
      `cannot ask containerd for its CRI configuration (${oneLine(err)}): whether it reads ${certsDir} is not checked`,
      { socket: config.criSocket },
    );
    return;
  }
  const configPath = registryConfigPath(info);
  if (configPath === undefined) {
    log?.warn(
      'runtime-config',
      `containerd's CRI status does not report its registry config_path: whether it reads ${certsDir} is not checked`,
      { socket: config.criSocket },
    );
    return;
  }
  if (configPathReads(configPath, certsDir, config.root)) {
    log?.info(
      'runtime-config',
      `containerd reads hosts.toml from ${certsDir} (config_path ${JSON.stringify(configPath)})`,
      { configPath },
    );
    return;
  }
  throw new AgentError(
    'RuntimeIgnoresMirror',
    ignoredCertsDirMessage(configPath, hostPath(certsDir, config.root)),
  );
}
