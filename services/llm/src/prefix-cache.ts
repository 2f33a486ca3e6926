import { createHash } from "node:crypto";

/**
 * Emulates a provider prefix cache that stores request prefixes in whole blocks of tokens,
 * as DeepSeek's disk cache does: a request hits for the longest prefix, in whole blocks,
 * that an earlier request also started with.
 */
export class PrefixCache {
  /** Tokens per cached block. */
  readonly blockTokens: number;
  // One hash per cached prefix, each chained from the hash of the prefix one block shorter.
  readonly #prefixes = new Set<string>();

  constructor(blockTokens: number) {
    this.blockTokens = blockTokens;
  }

  /**
   * How many leading tokens of the concatenated `segments` were cached (a multiple of
   * `blockTokens`); then caches every whole-block prefix of them.
   */
  lookup(segments: readonly (readonly number[])[]): number {
    const block = new Int32Array(this.blockTokens);
    const bytes = new Uint8Array(block.buffer);
    let filled = 0;
    let blocks = 0;
    let hitBlocks = 0;
    let previous = "";
    for (const segment of segments) {
      for (const id of segment) {
        block[filled++] = id;
        if (filled < this.blockTokens) continue;
        previous = createHash("sha256").update(previous).update(bytes).digest("hex");
        blocks++;
        if (hitBlocks === blocks - 1 && this.#prefixes.has(previous)) hitBlocks = blocks;
        this.#prefixes.add(previous);
        filled = 0;
      }
    }
    return hitBlocks * this.blockTokens;
  }
}
