#!/usr/bin/env node
// The `tack` executable: runs the TypeScript CLI through tsx (Tack has no build step).
import { register } from "tsx/esm/api";

register();
await import("../src/main.ts");
