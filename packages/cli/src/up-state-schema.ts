// The schema of `.tack/up.json` (see UpState in state.ts), in a module of its own so that zod
// loads only when such a file is read.
import { z } from "zod";

const UpReplicaSchema = z.object({
  service: z.string(),
  replica: z.number().int().positive(),
  state: z.string(),
  pid: z.number().int().positive().nullable(),
  startedAt: z.string().nullable(),
  restarts: z.number().int().nonnegative(),
  lastExit: z.string().nullable(),
  logFile: z.string(),
});

export const UpStateSchema = z.object({
  gatewayUrl: z.string().url(),
  apiKeyFile: z.string().nullable(),
  pid: z.number().int().positive(),
  namespace: z.string(),
  natsUrl: z.string(),
  localNats: z.boolean().optional(),
  startedAt: z.string().optional(),
  updatedAt: z.string().optional(),
  replicas: z.array(UpReplicaSchema).optional(),
});
