import { describe, expect, it } from "vitest";
import { compileOperatorConfig } from "@tack/config";
import { tenantBudgets } from "../src/budget.js";

const where = { stateDir: "/tmp", baseDir: "/tmp", source: undefined };

describe("budget", () => {
  it("budget - tenant budgets come from the operator configuration's budget_usd; TACK_TENANT_BUDGETS overrides per tenant", () => {
    const operator = compileOperatorConfig({ tenants: { acme: { budget_usd: 25 }, globex: { budget_usd: 5 }, free: {} } }, where);
    expect(tenantBudgets(operator)).toEqual({ acme: 25, globex: 5 });
    expect(tenantBudgets(operator, { globex: 7, local: 1 })).toEqual({ acme: 25, globex: 7, local: 1 });
    expect(tenantBudgets(compileOperatorConfig({}, where))).toEqual({});
  });
});
