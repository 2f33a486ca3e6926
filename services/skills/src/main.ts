// Executable entry of the skills service: `tsx services/skills/src/main.ts` (env NATS_URL, TACK_NAMESPACE, TACK_SKILLS_ROOTS).
import { commonConfig, runMain } from "@tack/config";
import { initTelemetry } from "@tack/telemetry";
import { startSkillsService } from "./service.js";
import { operatorRootsFromEnv } from "./skills.js";

const telemetry = initTelemetry({ serviceName: "tack-skills" });
await runMain("skills", async () => {
  const service = await startSkillsService({
    natsUrl: process.env.NATS_URL ?? "nats://127.0.0.1:4222",
    natsAuth: commonConfig().natsAuth,
    namespace: process.env.TACK_NAMESPACE || undefined,
    operatorRoots: operatorRootsFromEnv(),
  });
  return { stop: async () => { await service.stop(); await telemetry.shutdown(); } };
});
