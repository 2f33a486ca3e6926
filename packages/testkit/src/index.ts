// Shared test kit: throwaway servers that tests may break, built from local images only.
export { NATS_TEST_IMAGE, startThrowawayNats, type ThrowawayNats } from "./nats.js";
export { removeNamespace } from "./namespace.js";
export { stopWaiting, waitFor, type Probe, type WaitOptions } from "./wait.js";
export { startNatsCluster, type NatsCluster, type NatsClusterOptions } from "./cluster.js";
export { CuttableProxy } from "./proxy.js";
export { seededRandom } from "./random.js";
