import { useState } from "react";
import type { Answer } from "@tack/client";
import type { WaitingView } from "./model.js";

/** The cards of calls waiting for a person; sticky, so they stay in reach while the conversation scrolls. */
export function WaitingCards(props: {
  waiting: WaitingView[];
  onApproval: (callId: string, decision: "allow_once" | "reject") => Promise<void>;
  onAnswers: (callId: string, answers: Answer[]) => Promise<void>;
  onPlan: (callId: string, approve: boolean, feedback: string) => Promise<void>;
}) {
  if (props.waiting.length === 0) return null;
  return (
    <div className="waiting">
      {props.waiting.map((w) => w.kind === "approval" ? <ApprovalCard key={w.callId} w={w} decide={props.onApproval} />
        : w.kind === "question" ? <QuestionCard key={w.callId} w={w} answer={props.onAnswers} />
        : <PlanCard key={w.callId} w={w} decide={props.onPlan} />)}
    </div>
  );
}

function ApprovalCard(props: { w: Extract<WaitingView, { kind: "approval" }>; decide: (callId: string, d: "allow_once" | "reject") => Promise<void> }) {
  const { w } = props;
  const [busy, setBusy] = useState(false);
  const decide = async (d: "allow_once" | "reject") => {
    setBusy(true);
    await props.decide(w.callId, d);
    setBusy(false);
  };
  return (
    <section className="card approval" aria-label="approval">
      <h3>Approval needed: <code>{w.tool}</code> <span className="kind">{w.approvalKind === "tool" ? "per-call tool approval" : `sandbox escalation ${w.currentMode} → ${w.requestedMode}`}</span></h3>
      <pre className="operation">{w.operation}</pre>
      {w.justification && <p className="justification"><strong>Why:</strong> {w.justification}</p>}
      <div className="row">
        <button className="deny" disabled={busy} onClick={() => decide("reject")}>Deny</button>
        <button className="allow" disabled={busy} onClick={() => decide("allow_once")}>Allow once</button>
      </div>
    </section>
  );
}

function QuestionCard(props: { w: Extract<WaitingView, { kind: "question" }>; answer: (callId: string, answers: Answer[]) => Promise<void> }) {
  const { w } = props;
  const [selected, setSelected] = useState<string[][]>(w.questions.map(() => []));
  const [other, setOther] = useState<string[]>(w.questions.map(() => ""));
  const [busy, setBusy] = useState(false);
  const toggle = (qi: number, label: string, multi: boolean) =>
    setSelected((prev) => prev.map((s, i) => (i !== qi ? s : multi ? (s.includes(label) ? s.filter((x) => x !== label) : [...s, label]) : [label])));
  const submit = async (event: React.FormEvent) => {
    event.preventDefault();
    setBusy(true);
    await props.answer(w.callId, w.questions.map((_, i) => ({ selected: selected[i], other: other[i] })));
    setBusy(false);
  };
  return (
    <form className="card question" aria-label="question" onSubmit={submit}>
      {w.questions.map((q, qi) => (
        <fieldset key={qi}>
          <legend>{q.header && <span className="kind">{q.header}</span>} {q.question}</legend>
          {q.options.map((o) => (
            <label key={o.label} className="option">
              <input type={q.multiSelect ? "checkbox" : "radio"} name={`q${qi}`} checked={selected[qi]!.includes(o.label)} onChange={() => toggle(qi, o.label, q.multiSelect)} />
              {o.label}{o.description && <span className="muted"> — {o.description}</span>}
            </label>
          ))}
          <input className="other" aria-label="your own answer" placeholder="or your own words" value={other[qi]} onChange={(e) => setOther((prev) => prev.map((x, i) => (i === qi ? e.target.value : x)))} />
        </fieldset>
      ))}
      <button type="submit" disabled={busy}>Answer</button>
    </form>
  );
}

function PlanCard(props: { w: Extract<WaitingView, { kind: "plan" }>; decide: (callId: string, approve: boolean, feedback: string) => Promise<void> }) {
  const [feedback, setFeedback] = useState("");
  return (
    <section className="card plan" aria-label="plan review">
      <h3>Plan for review</h3>
      <pre>{props.w.plan}</pre>
      <input aria-label="feedback" placeholder="feedback for the model (optional)" value={feedback} onChange={(e) => setFeedback(e.target.value)} />
      <div className="row">
        <button className="deny" onClick={() => props.decide(props.w.callId, false, feedback)}>Reject</button>
        <button className="allow" onClick={() => props.decide(props.w.callId, true, feedback)}>Approve</button>
      </div>
    </section>
  );
}
