import type { TurnSpan } from "./model.js";
import { ms, stepParts } from "./model.js";

/** The trajectory: per turn and step, model time (waiting for the first token, decoding) and tool time, drawn to scale within the turn. */
export function Timeline(props: { turns: TurnSpan[] }) {
  if (props.turns.length === 0) return <p className="muted">No turns yet.</p>;
  return (
    <div className="timeline" aria-label="timeline">
      {props.turns.map((t) => {
        const end = t.endMs ?? Math.max(t.startMs, ...t.steps.flatMap((s) => [s.endMs ?? s.messageMs ?? s.startMs, ...s.tools.map((x) => x.endMs ?? x.startMs)]));
        const span = Math.max(1, end - t.startMs);
        const x = (at: number) => `${(((at - t.startMs) / span) * 100).toFixed(2)}%`;
        const w = (a: number, b: number) => `${Math.max(0.3, ((b - a) / span) * 100).toFixed(2)}%`;
        return (
          <section key={t.turn} className="turn">
            <h4>Turn {t.turn} <span className="muted">{ms(t.endMs === undefined ? undefined : t.endMs - t.startMs)} · {t.steps.length} step(s){t.reason ? ` · ${t.reason}` : " · running"}</span></h4>
            <table>
              <thead><tr><th>step</th><th>wait for first token</th><th>decode</th><th>tools</th><th className="track-h">time</th></tr></thead>
              <tbody>
                {t.steps.map((s) => {
                  const p = stepParts(s);
                  const first = s.firstTokenMs ?? s.messageMs;
                  return (
                    <tr key={s.step} className="step">
                      <td>{s.step}</td><td>{ms(p.waitMs)}</td><td>{ms(p.decodeMs)}</td><td>{ms(p.toolMs)}</td>
                      <td className="track">
                        {first !== undefined && <span className="seg wait" style={{ left: x(s.startMs), width: w(s.startMs, first) }} title={`wait ${ms(p.waitMs)}`} />}
                        {first !== undefined && s.messageMs !== undefined && <span className="seg decode" style={{ left: x(first), width: w(first, s.messageMs) }} title={`decode ${ms(p.decodeMs)}`} />}
                        {s.tools.map((tool) => <span key={tool.callId} className="seg tool" style={{ left: x(tool.startMs), width: w(tool.startMs, tool.endMs ?? end) }} title={`${tool.name} ${ms(tool.endMs === undefined ? undefined : tool.endMs - tool.startMs)}`} />)}
                      </td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          </section>
        );
      })}
      <p className="legend"><span className="seg-key wait" /> wait for first token <span className="seg-key decode" /> decode <span className="seg-key tool" /> tool</p>
    </div>
  );
}
