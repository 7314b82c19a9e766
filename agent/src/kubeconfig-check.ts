import { stat } from 'node:fs/promises';
import { adminApis } from '@offline-bundle/kube';
import { ConfigError, type AgentConfig } from './config.js';
import { oneLine } from './errors.js';

/**
 * status.kubeconfig, read before the daemon starts: one that cannot be used (not YAML, no
 * cluster, an exec plugin, a certificate it names missing) is no passing fault. The reporter
 * would retry it in the background for ever, and every stop would wait for a status it can
 * never send. One not there yet is left to those retries: the kubelet writes its own at bootstrap.
 */
export async function checkKubeconfig(config: AgentConfig, configFile: string): Promise<void> {
  const file = config.status.kubeconfig;
  if (
    !file ||
    !(await stat(file).then(
      () => true,
      () => false,
    ))
  )
    return;
  await adminApis(file).catch((err: unknown) => {
    throw new ConfigError(
      `${configFile}: status.kubeconfig: ${file} cannot be used (${oneLine(err)}): fix it ("kubectl --kubeconfig ${file} config view" reads it as the agent does), or remove status.kubeconfig to run without cluster reporting`,
    );
  });
}
