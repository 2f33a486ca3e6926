// Executable entry of the loop service: `tsx services/loop/src/main.ts`.
import { commonConfig, ConfigError, loadOperatorConfig, runMain } from "@tack/config";
import { initTelemetry } from "@tack/telemetry";
import { tenantBudgets } from "./budget.js";
import { startLoopService } from "./service.js";

const telemetry = initTelemetry({ serviceName: "tack-loop" });
await runMain("loop", async () => {
  const common = commonConfig();
  const operator = loadOperatorConfig();
  const { retention } = operator;
  const service = await startLoopService({
    natsUrl: common.natsUrl,
    natsAuth: common.natsAuth,
    namespace: common.namespace,
    // The log stream's limits follow the operator configuration (lifted when removed from it).
    logMaxBytes: retention.logMaxBytes,
    logMaxAgeDays: retention.logMaxAgeDays,
    // Replicas of the log and of the lease, spend and spill buckets (operator `log.replicas`).
    logReplicas: operator.log.replicas,
    ...(process.env.TACK_LEASE_TTL_MS ? { leaseTtlMs: Number(process.env.TACK_LEASE_TTL_MS) } : {}),
    ...(process.env.TACK_APPROVAL_TIMEOUT_MS ? { approvalTimeoutMs: Number(process.env.TACK_APPROVAL_TIMEOUT_MS) } : {}),
    ...(process.env.TACK_CONTEXT_WINDOW_TOKENS ? { contextWindowTokens: Number(process.env.TACK_CONTEXT_WINDOW_TOKENS) } : {}),
    ...(process.env.TACK_CONTEXT_WINDOWS ? { contextWindows: jsonObject("TACK_CONTEXT_WINDOWS", process.env.TACK_CONTEXT_WINDOWS, '{"deepseek:deepseek-v4-flash": 1000000}') } : {}),
    // Tenant budgets are the operator configuration's budget_usd; TACK_TENANT_BUDGETS overrides them per tenant.
    tenantBudgets: tenantBudgets(operator, process.env.TACK_TENANT_BUDGETS ? jsonObject("TACK_TENANT_BUDGETS", process.env.TACK_TENANT_BUDGETS, '{"local": 25}') : {}),
  });
  return { stop: async () => { await service.stop(); await telemetry.shutdown(); } };
});

/** A JSON object of names to numbers from an environment variable (the values are checked by the loop's options). */
function jsonObject(variable: string, json: string, example: string): Record<string, number> {
  try {
    return JSON.parse(json) as Record<string, number>;
  } catch {
    throw new ConfigError(`${variable} is not JSON; write an object like ${example}`);
  }
}
