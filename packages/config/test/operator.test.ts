import { describe, expect, it } from "vitest";
import { compileOperatorConfig } from "@tack/config";

const where = { stateDir: "/tmp/tack-config-test", baseDir: "/tmp", source: "/etc/tack/config.yaml" };

describe("operator configuration", () => {
  it("config - log.replicas is 1 by default and takes 3 or 5 for a cluster", () => {
    expect(compileOperatorConfig({}, where).log).toEqual({ replicas: 1 });
    expect(compileOperatorConfig({ log: { replicas: 3 } }, where).log).toEqual({ replicas: 3 });
    expect(compileOperatorConfig({ log: { replicas: 5 } }, where).log).toEqual({ replicas: 5 });
  });

  it("config - log.replicas other than 1, 3 or 5 is refused naming the file, the field and the choices", () => {
    for (const replicas of [0, 2, 4, 7, 3.5, "3"]) {
      expect(() => compileOperatorConfig({ log: { replicas } }, where), String(replicas)).toThrow(
        /^\/etc\/tack\/config\.yaml is invalid: log\.replicas: must be 1 \(a single NATS server\), 3 or 5 \(a JetStream cluster of at least that many servers; odd, so that a majority survives a failed server\)$/,
      );
    }
    expect(() => compileOperatorConfig({ log: { replicas: 3, copies: 2 } }, where)).toThrow(/log: Unrecognized key: "copies"/);
  });
});
