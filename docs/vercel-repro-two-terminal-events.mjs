// Two terminal events in one run: run_failed and run_cancelled written concurrently.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
const pkg = await import(process.env.WORLD_PACKAGE ?? '@workflow/world-local');
const world = (pkg.createWorld ?? pkg.createLocalWorld)(
  process.env.WORKFLOW_POSTGRES_URL
    ? { connectionString: process.env.WORKFLOW_POSTGRES_URL }
    : { dataDir: mkdtempSync(join(tmpdir(), 'repro-')) },
);
const SPEC = Number(process.env.SPEC_VERSION ?? 3);
const bytes = (s) => new Uint8Array(Buffer.from(s));
let twice = 0;
for (let i = 0; i < 20; i++) {
  const { run } = await world.events.create(null, {
    eventType: 'run_created', specVersion: SPEC,
    eventData: { deploymentId: '', workflowName: 'wf', input: bytes('in') },
  });
  const answers = await Promise.allSettled([
    world.events.create(run.runId, { eventType: 'run_failed', specVersion: SPEC, eventData: { error: 'e' } }),
    world.events.create(run.runId, { eventType: 'run_cancelled', specVersion: SPEC }),
  ]);
  const { data } = await world.events.list({ runId: run.runId, pagination: { limit: 100 } });
  const ends = data.filter((e) => ['run_completed', 'run_failed', 'run_cancelled'].includes(e.eventType));
  if (ends.length > 1) twice += 1;
  if (i === 0) console.log(answers.map((a) => a.status), data.map((e) => e.eventType));
}
console.log(`${twice} of 20 runs have two terminal events (the contract allows one)`);
await world.close?.();
process.exit(0);
