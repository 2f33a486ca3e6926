/**
 * A vitest reporter that ends the run with one short block naming every failed test
 * (file, full name, duration, first lines of each error), after the default reporter's
 * summary. CI keeps only the tail of a run's output; this puts what failed in that tail.
 */
import type { Reporter, TestModule } from "vitest/node";

type Failure = { file: string; name: string; ms: number; errors: string[] };

function firstLines(text: string | undefined, n: number): string {
  return (text ?? "").split("\n").filter((l) => l.trim() !== "").slice(0, n).join(" / ");
}

export default class FailureSummary implements Reporter {
  onTestRunEnd(modules: ReadonlyArray<TestModule>, unhandled: ReadonlyArray<{ message?: string; stack?: string }>): void {
    const failures: Failure[] = [];
    for (const mod of modules) {
      const file = mod.relativeModuleId ?? mod.moduleId;
      for (const error of mod.errors()) failures.push({ file, name: "(module)", ms: 0, errors: [firstLines(error.message, 3)] });
      for (const test of mod.children.allTests()) {
        const result = test.result();
        if (result.state !== "failed") continue;
        const errors = (result.errors ?? []).map((e) => {
          const cause = (e as { cause?: { message?: string } }).cause;
          return firstLines(e.message, 6) + (cause?.message ? ` (cause: ${firstLines(cause.message, 1)})` : "");
        });
        failures.push({ file, name: test.fullName, ms: Math.round(test.diagnostic()?.duration ?? 0), errors });
      }
    }
    for (const error of unhandled) failures.push({ file: "(unhandled)", name: "", ms: 0, errors: [firstLines(error.message ?? error.stack, 3)] });
    if (failures.length === 0) return;
    const out = [`\nFAILED (${failures.length}):`];
    for (const f of failures) {
      out.push(`  ${f.file} > ${f.name}${f.ms ? ` [${f.ms} ms]` : ""}`);
      for (const e of f.errors) out.push(`      ${e.slice(0, 1_500)}`);
    }
    process.stdout.write(out.join("\n") + "\n");
  }
}
