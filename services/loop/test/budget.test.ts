import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus } from "@tack/bus";
import { compileOperatorConfig } from "@tack/config";
import { removeNamespace } from "@tack/testkit";
import { Budgets, tenantBudgets } from "../src/budget.js";

const where = { stateDir: "/tmp", baseDir: "/tmp", source: undefined };
const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const namespace = `t${randomBytes(5).toString("hex")}`;
let buses: Bus[] = [];

beforeAll(async () => {
  buses = await Promise.all([1, 2].map((i) => Bus.connect({ url: NATS_URL, namespace, name: `loop-budget-test-${i}` })));
});
afterAll(async () => {
  if (buses[0]) await removeNamespace(buses[0].nc, namespace);
  await Promise.all(buses.map((bus) => bus.close()));
});

describe("budget", () => {
  it("budget - tenant budgets come from the operator configuration's budget_usd; TACK_TENANT_BUDGETS overrides per tenant", () => {
    const operator = compileOperatorConfig({ tenants: { acme: { budget_usd: 25 }, globex: { budget_usd: 5 }, free: {} } }, where);
    expect(tenantBudgets(operator)).toEqual({ acme: 25, globex: 5 });
    expect(tenantBudgets(operator, { globex: 7, local: 1 })).toEqual({ acme: 25, globex: 7, local: 1 });
    expect(tenantBudgets(compileOperatorConfig({}, where))).toEqual({});
  });

  it("budget - replicas recording at the same time lose no spending: a conflicting write reads again and retries", async () => {
    // Two replicas (each its own connection and bucket handle), ten calls at once: every
    // compare-and-set but one per round conflicts, and each must be retried, never dropped or counted twice.
    const replicas = buses.map((bus) => new Budgets(bus, {}));
    await Promise.all(Array.from({ length: 10 }, (_, i) => replicas[i % 2]!.record("acme", 0.5)));
    expect(await replicas[0]!.tenantSpend("acme")).toBe(5);
    expect(await replicas[1]!.tenantSpend("acme")).toBe(5);
    await replicas[1]!.record("acme", 0.25);
    await replicas[0]!.record("acme", 0); // nothing to record
    expect(await replicas[0]!.tenantSpend("acme")).toBe(5.25);
    expect(await replicas[0]!.tenantSpend("globex")).toBe(0);
  });
});
