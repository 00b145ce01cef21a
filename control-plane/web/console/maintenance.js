// Maintenance (docs/console.md#a-computer): update and recover jobs with their progress pill,
// and releasing an interrupted job once a person confirms its workers are stopped.
import { html, useEffect, useState } from "./lib/preact.js";
import * as server from "./api.js";
import { clock, messageOf, usePoll } from "./util.js";

const STAGES = ["queued", "waiting", "checkpointing", "stopping", "provisioning", "starting", "restoring", "done"];
const ACTIVE = new Set(["queued", "running", "interrupted"]);

/** Whether a job still reserves its computer. */
export const isActive = (job) => ACTIVE.has(job.state);

/** A job's state and stage as a small pill with a progress bar. */
export function JobPill({ job }) {
  const at = Math.max(0, STAGES.indexOf(job.stage));
  const done = job.state === "succeeded" ? STAGES.length - 1 : at;
  const label = `${job.kind} ${job.state}${isActive(job) ? " · " + job.stage : ""}`;
  return html`<span class=${"pill job-" + job.state} title=${job.error || job.warning || label}>
    <span>${label}</span>
    ${isActive(job) && html`<progress max=${STAGES.length - 1} value=${done} aria-label=${job.kind + " progress"}></progress>`}
  </span>`;
}

function Interrupted({ job, onDone }) {
  const [checked, setChecked] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const release = async () => {
    setBusy(true);
    setError(null);
    try {
      await server.post("/v1/jobs/" + encodeURIComponent(job.id) + "/release-interrupted", { workers_stopped: true });
      onDone();
    } catch (e) {
      setError(messageOf(e));
    } finally {
      setBusy(false);
    }
  };
  const id = "stopped-" + job.id;
  return html`<div class="interrupted">
    <p>This job's worker stopped answering. The computer stays reserved until you check that every
    control plane that may have run it is stopped, then release it (then <em>Recover</em> rebuilds it).</p>
    <input type="checkbox" id=${id} checked=${checked} onChange=${(e) => setChecked(e.currentTarget.checked)} />
    <label for=${id} class="inline">The workers are stopped</label>
    <button type="button" class="danger" disabled=${!checked || busy} onClick=${release}>Release the interrupted job</button>
    ${error && html`<p class="error" role="alert">${error}</p>`}
  </div>`;
}

/** The computer's maintenance section; `onActive(bool)` hears whether a job reserves it. */
export function Maintenance({ computer, onActive }) {
  const [jobs, setJobs] = useState(null);
  const [busy, setBusy] = useState(null);
  const [confirmRecover, setConfirmRecover] = useState(false);
  const [error, setError] = useState(null);
  const [tick, setTick] = useState(0);
  const [open, setOpen] = useState(false);
  const active = (jobs || []).some(isActive);
  // A running job opens the section; only the person closes it.
  useEffect(() => {
    if (active) setOpen(true);
    if (onActive) onActive(active);
  }, [active]);
  usePoll(
    async (signal) => {
      const v = await server.get(server.c(computer.id, "jobs"));
      if (!signal.aborted) setJobs(v.jobs);
    },
    active ? 1500 : 8000,
    [computer.id, tick],
  );
  const start = async (kind) => {
    setBusy(kind);
    setError(null);
    try {
      await server.post(server.c(computer.id, kind), {});
      setConfirmRecover(false);
      setTick((t) => t + 1);
    } catch (e) {
      setError(messageOf(e));
    } finally {
      setBusy(null);
    }
  };
  const newest = jobs && jobs[0];
  return html`<details class="card maintenance" open=${open} onToggle=${(e) => setOpen(e.currentTarget.open)}>
    <summary>Maintenance ${newest && html`<${JobPill} job=${newest} />`}</summary>
    ${server.can("operator") && html`<div class="row">
      <button type="button" disabled=${busy || active} onClick=${() => start("update")}>${busy === "update" ? "Starting…" : "Update"}</button>
      ${confirmRecover
        ? html`<span class="confirm" role="group" aria-label="Confirm recover">
            <span>Recover builds a new machine from the last saved home: later work is lost.</span>
            <button type="button" class="danger" disabled=${busy} onClick=${() => start("recover")}>Recover now</button>
            <button type="button" onClick=${() => setConfirmRecover(false)}>Cancel</button></span>`
        : html`<button type="button" disabled=${busy || active} onClick=${() => setConfirmRecover(true)}>Recover…</button>`}
    </div>`}
    ${error && html`<p class="error" role="alert">${error}</p>`}
    ${jobs && jobs.length === 0 && html`<p class="muted">No maintenance jobs yet.</p>`}
    ${jobs && jobs.length > 0 && html`<ul class="jobs">
      ${jobs.slice(0, 5).map((j) => html`<li key=${j.id}>
        <${JobPill} job=${j} /> <span class="muted">${j.id} · ${clock(j.created_at_ms)}</span>
        ${j.error && html`<p class="error">${j.error}</p>`}
        ${j.warning && html`<p class="warning">${j.warning}</p>`}
        ${j.state === "interrupted" && server.can("operator") && html`<${Interrupted} job=${j} onDone=${() => setTick((t) => t + 1)} />`}
      </li>`)}
    </ul>`}
  </details>`;
}
