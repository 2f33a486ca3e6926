/** Image formats `read` recognizes by their magic bytes. */
export type ImageFormat = "PNG" | "JPEG" | "GIF" | "WebP";

/** The media type of each format, as providers take it. */
export const IMAGE_MIME: Readonly<Record<ImageFormat, string>> = { PNG: "image/png", JPEG: "image/jpeg", GIF: "image/gif", WebP: "image/webp" };

/**
 * Largest image `read` attaches to its result. Attached images are resent with every later
 * request of the session, and a tool result crosses the bus whole (at most 1 MB a message).
 */
export const MAX_IMAGE_BYTES = 512 * 1024;

/**
 * How many leading bytes of an image `read` fetches with its first exec: enough for the
 * dimensions (a JPEG's frame header follows its EXIF, at most 64 KiB per segment) and for the
 * whole of most images it attaches, while their base64 stays under the exec's stdout cap.
 */
export const IMAGE_HEAD_BYTES = 262_144;

/** The format of an image from its first bytes, or undefined when they are not one of ImageFormat. */
export function imageFormat(head: Uint8Array): ImageFormat | undefined {
  const b = Buffer.from(head.buffer, head.byteOffset, head.byteLength);
  if (b.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))) return "PNG";
  if (b.subarray(0, 3).equals(Buffer.from([0xff, 0xd8, 0xff]))) return "JPEG";
  const ascii = b.toString("latin1", 0, 12);
  if (ascii.startsWith("GIF87a") || ascii.startsWith("GIF89a")) return "GIF";
  if (ascii.startsWith("RIFF") && ascii.slice(8, 12) === "WEBP") return "WebP";
  return undefined;
}

/** Width and height from an image's header bytes; undefined when they are not there (cut short, or an unusual layout). */
export function imageSize(format: ImageFormat, head: Uint8Array): { width: number; height: number } | undefined {
  const b = Buffer.from(head.buffer, head.byteOffset, head.byteLength);
  const fits = (end: number) => b.length >= end;
  switch (format) {
    case "PNG":
      // The IHDR chunk always comes first.
      return fits(24) ? { width: b.readUInt32BE(16), height: b.readUInt32BE(20) } : undefined;
    case "GIF":
      return fits(10) ? { width: b.readUInt16LE(6), height: b.readUInt16LE(8) } : undefined;
    case "WebP":
      return webpSize(b);
    case "JPEG":
      return jpegSize(b);
  }
}

function webpSize(b: Buffer): { width: number; height: number } | undefined {
  const chunk = b.toString("latin1", 12, 16);
  if (chunk === "VP8 " && b.length >= 30) return { width: b.readUInt16LE(26) & 0x3fff, height: b.readUInt16LE(28) & 0x3fff };
  if (chunk === "VP8L" && b.length >= 25) {
    const bits = b.readUInt32LE(21);
    return { width: (bits & 0x3fff) + 1, height: ((bits >>> 14) & 0x3fff) + 1 };
  }
  if (chunk === "VP8X" && b.length >= 30) return { width: b.readUIntLE(24, 3) + 1, height: b.readUIntLE(27, 3) + 1 };
  return undefined;
}

/** Walks the JPEG's segments to its first start-of-frame marker, which holds the dimensions. */
function jpegSize(b: Buffer): { width: number; height: number } | undefined {
  let at = 2;
  while (at + 9 <= b.length) {
    if (b[at] !== 0xff) return undefined;
    const marker = b[at + 1]!;
    // Fill bytes before a marker.
    if (marker === 0xff) {
      at += 1;
      continue;
    }
    // SOF0-SOF15, except DHT (C4), JPG (C8) and DAC (CC), which share the range.
    if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
      return { width: b.readUInt16BE(at + 7), height: b.readUInt16BE(at + 5) };
    }
    at += 2 + b.readUInt16BE(at + 2);
  }
  return undefined;
}

/** "12 KB" style, as the model reads a file's size. */
export function sizeText(bytes: number): string {
  if (bytes < 1024) return `${bytes} bytes`;
  if (bytes < 1024 * 1024) return `${Math.round(bytes / 1024)} KB`;
  return `${(bytes / (1024 * 1024)).toFixed(1)} MB`;
}
