import { execFileSync } from "node:child_process";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/nats-core";

/**
 * Removes everything a test run left under one namespace: its JetStream streams, KV buckets
 * and object stores (all named `<NS>_*`), and its sandbox containers (named `tack-<ns>-*`).
 */
export async function removeNamespace(nc: NatsConnection, namespace: string): Promise<void> {
  const upper = namespace.toUpperCase().replace(/-/g, "_");
  const jsm = await jetstreamManager(nc);
  const mine = (name: string) => [`${upper}_`, `KV_${upper}_`, `OBJ_${upper}_`].some((prefix) => name.startsWith(prefix));
  const names: string[] = [];
  for await (const info of jsm.streams.list()) if (mine(info.config.name)) names.push(info.config.name);
  for (const name of names) await jsm.streams.delete(name).catch(() => undefined);
  try {
    const ids = execFileSync("docker", ["ps", "-aq", "--filter", `name=^tack-${namespace}-`]).toString().split("\n").filter(Boolean);
    if (ids.length) execFileSync("docker", ["rm", "-f", ...ids], { stdio: "ignore" });
  } catch {
    // No Docker engine: nothing to remove there.
  }
}
