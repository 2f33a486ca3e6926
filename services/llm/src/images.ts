import type { NatsConnection } from "@nats-io/nats-core";
import { Objm, type ObjectStore } from "@nats-io/obj";
import type { CompleteRequest, ImageRef } from "@tack/proto";

/** The images of a request a provider can send, by object name; a ref missing here could not be loaded. */
export type LoadedImages = ReadonlyMap<string, Uint8Array>;

/** What a model that cannot view images is told after a tool result that has some. */
export const CANNOT_VIEW_IMAGES = " — this model cannot view images";

/** Said in place of an image that could not be loaded (deleted with its session, or the bucket is gone). */
export const IMAGE_MISSING = "[the image could not be loaded; read the file again to see it]";

/** Bytes of images kept in memory: every later request of a session resends its images. */
const CACHE_BYTES = 16 * 1024 * 1024;

/** Default TACK_IMAGE_MODELS: OpenAI-compatible models known to take images. */
export const DEFAULT_IMAGE_MODELS = "gpt-4o*,gpt-4.1*,gpt-5*,o3*,o4*";

/**
 * Which model names take images, from a comma-separated list of patterns where `*` matches
 * anything (TACK_IMAGE_MODELS); an empty list matches none.
 */
export function imageModels(patterns: string): (model: string) => boolean {
  const globs = patterns.split(",").map((p) => p.trim()).filter(Boolean)
    .map((p) => new RegExp(`^${p.split("*").map((part) => part.replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join(".*")}$`));
  return (model) => globs.some((glob) => glob.test(model));
}

/** Estimated input tokens of an image: Anthropic's width*height/750, at most ~1,600 (it scales larger ones down); 1,600 when the size is unknown. */
export function imageTokens(ref: ImageRef): number {
  return ref.width > 0 && ref.height > 0 ? Math.min(1_600, Math.ceil((ref.width * ref.height) / 750)) : 1_600;
}

/**
 * Loads the images a request refers to from the spill object store (where the loop put them),
 * keeping recently used ones in memory. Only objects of the request's own session are loaded.
 */
export class ImageLoader {
  readonly #nc: NatsConnection;
  readonly #bucket: string;
  #store: ObjectStore | undefined;
  readonly #cache = new Map<string, Uint8Array>();
  #cached = 0;

  constructor(nc: NatsConnection, bucket: string) {
    this.#nc = nc;
    this.#bucket = bucket;
  }

  /** The request's images that could be loaded; an unknown object, another session's or a failed read is left out. */
  async load(request: CompleteRequest): Promise<LoadedImages> {
    const loaded = new Map<string, Uint8Array>();
    for (const message of request.messages) {
      for (const ref of message.images) {
        if (loaded.has(ref.object) || !ownedBy(ref.object, request.sessionId)) continue;
        const data = await this.#get(ref.object).catch(() => undefined);
        if (data) loaded.set(ref.object, data);
      }
    }
    return loaded;
  }

  async #get(name: string): Promise<Uint8Array | undefined> {
    const hit = this.#cache.get(name);
    if (hit) {
      // Map order is insertion order: re-inserting keeps recently used images from eviction.
      this.#cache.delete(name);
      this.#cache.set(name, hit);
      return hit;
    }
    this.#store ??= await new Objm(this.#nc).open(this.#bucket);
    const data = (await this.#store.getBlob(name)) ?? undefined;
    if (!data) return undefined;
    this.#cache.set(name, data);
    this.#cached += data.length;
    while (this.#cached > CACHE_BYTES && this.#cache.size > 1) {
      const [oldest, bytes] = this.#cache.entries().next().value!;
      this.#cache.delete(oldest);
      this.#cached -= bytes.length;
    }
    return data;
  }
}

/** Spill objects are named `<tenant>.<session>.<call id>…` (tenant and session are subject tokens, without dots). */
function ownedBy(object: string, sessionId: string): boolean {
  return sessionId !== "" && object.split(".")[1] === sessionId;
}
