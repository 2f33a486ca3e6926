// What one gateway replica tells the others so that no replica keeps using a stale copy: a revoked
// API key (its hash), a session whose index row changed. Plain NATS publish/subscribe on
// `<namespace>.gateway.changed` (decision 0019); a replica that misses a message still reads the
// index again within a second (the caches' lifetime).
import type { Bus } from "@tack/bus";
import type { Subscription } from "@nats-io/nats-core";

/** One change: a key revoked (hex hash), or a session's row changed or removed. */
export type Change = { readonly key: string } | { readonly session: string };

function parseChange(text: string): Change | undefined {
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value !== "object" || value === null) return undefined;
    if ("key" in value && typeof value.key === "string" && /^[0-9a-f]{64}$/.test(value.key)) return { key: value.key };
    if ("session" in value && typeof value.session === "string" && value.session.length > 0 && value.session.length <= 200) return { session: value.session };
  } catch {
    // Not a change this version knows: ignored.
  }
  return undefined;
}

/** This replica's side of the change announcements. */
export class ReplicaChanges {
  readonly #bus: Bus;
  readonly #subscription: Subscription;

  /** Listens for other replicas' changes (its own come back too, harmlessly: the same caches are dropped again). */
  constructor(bus: Bus, onChange: (change: Change) => void) {
    this.#bus = bus;
    this.#subscription = bus.nc.subscribe(bus.names.gatewayChanged, {
      callback: (_error, message) => {
        const change = parseChange(message.string());
        if (change) onChange(change);
      },
    });
  }

  /** Publishes `change` and waits until the server has it, so the other replicas hear it before this replica answers. */
  async announce(change: Change): Promise<void> {
    this.#bus.nc.publish(this.#bus.names.gatewayChanged, JSON.stringify(change));
    await this.#bus.nc.flush().catch(() => undefined);
  }

  close(): void {
    this.#subscription.unsubscribe();
  }
}
