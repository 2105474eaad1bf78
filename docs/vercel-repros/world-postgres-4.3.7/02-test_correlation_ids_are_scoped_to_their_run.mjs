// Reproduction of a contract violation found by durasim conformance --vercel.
// Package: @workflow/world-postgres@4.3.7.  No durasim needed:
//   npm install @workflow/world-postgres@4.3.7
//   export WORKFLOW_POSTGRES_URL=postgres://USER@HOST:5432/EMPTY_DATABASE
//   node node_modules/@workflow/world-postgres/dist/cli.js   # the package's own set-up
//   node THIS_FILE.mjs
// durasim check: contract: test_contract_lifecycles.py::test_correlation_ids_are_scoped_to_their_run
// What durasim's contract (docs/protocol.md) expected, and what happened:
//   durasim.worlds.EntityConflict: EntityConflictError from the Vercel World: step_created for correlationId "s1" already exists in run "wrun_01HK153X00E1MWF0FKZD5WP9Z5"
// The script replays durasim's calls (calls in flight together in durasim's run start
// together here) with the test's virtual time (Date follows it, as in the bridge),
// prints each answer and compares its shape (outcome, event types, statuses, run order)
// with what durasim saw (in a race too: the reads made while it was on are its evidence).
// Exit status 1: reproduced (every shape as durasim saw it in at least one of
// 1 round(s)); 0: not reproduced.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

let now = 1704067200000;
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...args) { if (args.length) super(...args); else super(now); }
  static now() { return now; }
};
const pkg = await import("@workflow/world-postgres");
const world = (pkg.createWorld ?? pkg.createLocalWorld)({ connectionString: process.env.WORKFLOW_POSTGRES_URL });
const bytes = (b64) => new Uint8Array(Buffer.from(b64, 'base64'));

const ROUNDS = 1;
const EXPECTED = {"1": "event run_created", "2": "page[run_created@run1]", "3": "pending@run1", "4": "event run_started", "5": "page[run_created@run1,run_started@run1]", "6": "running@run1", "7": "event run_created", "8": "page[run_created@run2]", "9": "pending@run2", "10": "event run_started", "11": "page[run_created@run2,run_started@run2]", "12": "running@run2", "13": "event step_created", "14": "page[run_created@run1,run_started@run1,step_created@run1]", "15": "running@run1", "16": "pending@run1", "17": "event hook_created", "18": "page[run_created@run1,run_started@run1,step_created@run1,hook_created@run1]", "19": "running@run1", "20": "event wait_created", "21": "page[run_created@run1,run_started@run1,step_created@run1,hook_created@run1,wait_created@run1]", "22": "running@run1", "23": "throws EntityConflictError"};
const IDS = new Set(["s1", "h1", "tok-a", "w1"]);
const STATIC_RUNS = [];
const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
const RUNS = new Map();
let round = 0;
let matched = true;
let run1;
let run2;

function renamed(id) {
  if (round === 0 || !IDS.has(id)) return id;
  if (/^wrun_[0-9A-HJKMNP-TV-Z]{26}$/.test(id)) {
    const code = [3, 2, 1, 0].map((k) => CROCKFORD[(round >> (5 * k)) & 31]).join('');
    return id.slice(0, 15) + code + id.slice(19);
  }
  return `${id}-r${round}`;
}
function fresh(value) {
  if (typeof value === 'string') return renamed(value);
  if (Array.isArray(value)) return value.map(fresh);
  if (value && typeof value === 'object' && value.constructor === Object) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fresh(v)]));
  }
  return value;
}
function shapeItem(item) {
  if (!item || typeof item !== 'object') return 'item';
  const kind = item.eventType || item.status || 'item';
  const run = typeof item.runId === 'string' ? RUNS.get(item.runId) : undefined;
  return run ? `${kind}@${run}` : String(kind);
}
function shape(answer) {
  if (answer === undefined || answer === null) return 'none';
  if (Array.isArray(answer)) return '[' + answer.map(shapeItem).join(',') + ']';
  if (typeof answer === 'object') {
    if (Array.isArray(answer.data)) return 'page[' + answer.data.map(shapeItem).join(',') + ']';
    const event = answer.event;
    if (event && typeof event === 'object') return 'event ' + (event.eventType || 'none');
    return shapeItem(answer);
  }
  return 'ok';
}
function mint(variable, id) {
  if (typeof id === 'string') RUNS.set(id, variable);
  return id;
}

async function call(number, at, path, args) {
  now = at;
  args = fresh(args);
  const parts = path.split('.');
  const owner = parts.slice(0, -1).reduce((o, p) => o[p], world);
  let answer;
  let got;
  try {
    answer = await owner[parts.at(-1)](...args);
    got = shape(answer);
    console.log(`#${number} ${path} ->`, JSON.stringify(answer)?.slice(0, 400));
  } catch (error) {
    got = 'throws ' + (error?.constructor?.name || error?.name || typeof error);
    console.log(`#${number} ${path} threw ${got.slice(7)}: ${error?.message}`);
  }
  if (number in EXPECTED && got !== EXPECTED[number]) {
    matched = false;
    console.log(`   shape ${got}; durasim saw ${EXPECTED[number]}`);
  }
  return answer;
}

let reproduced = 0;
for (round = 0; round < ROUNDS; round++) {
  matched = true;
  RUNS.clear();
  for (const [id, variable] of STATIC_RUNS) RUNS.set(renamed(id), variable);
  if (ROUNDS > 1) console.log(`-- round ${round + 1} of ${ROUNDS}`);
  run1 = mint("run1", (await call(1, 1704067200000, "events.create", [null, {"eventType": "run_created", "specVersion": 3, "eventData": {"workflowName": "wf", "input": bytes("aW4="), "deploymentId": ""}}, {"resolveData": "all"}]))?.event?.runId);
  await call(2, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(3, 1704067200000, "runs.get", [run1]);
  await call(4, 1704067200000, "events.create", [run1, {"eventType": "run_started", "specVersion": 3}, {"resolveData": "all"}]);
  await call(5, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(6, 1704067200000, "runs.get", [run1]);
  run2 = mint("run2", (await call(7, 1704067200000, "events.create", [null, {"eventType": "run_created", "specVersion": 3, "eventData": {"workflowName": "wf", "input": bytes("aW4="), "deploymentId": ""}}, {"resolveData": "all"}]))?.event?.runId);
  await call(8, 1704067200000, "events.list", [{"runId": run2, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(9, 1704067200000, "runs.get", [run2]);
  await call(10, 1704067200000, "events.create", [run2, {"eventType": "run_started", "specVersion": 3}, {"resolveData": "all"}]);
  await call(11, 1704067200000, "events.list", [{"runId": run2, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(12, 1704067200000, "runs.get", [run2]);
  await call(13, 1704067200000, "events.create", [run1, {"eventType": "step_created", "specVersion": 3, "correlationId": "s1", "eventData": {"stepName": "st", "input": bytes("aQ==")}}, {"resolveData": "all"}]);
  await call(14, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(15, 1704067200000, "runs.get", [run1]);
  await call(16, 1704067200000, "steps.get", [run1, "s1"]);
  await call(17, 1704067200000, "events.create", [run1, {"eventType": "hook_created", "specVersion": 3, "correlationId": "h1", "eventData": {"token": "tok-a"}}, {"resolveData": "all"}]);
  await call(18, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(19, 1704067200000, "runs.get", [run1]);
  await call(20, 1704067200000, "events.create", [run1, {"eventType": "wait_created", "specVersion": 3, "correlationId": "w1", "eventData": {"resumeAt": new Date(1704067260000)}}, {"resolveData": "all"}]);
  await call(21, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(22, 1704067200000, "runs.get", [run1]);
  await call(23, 1704067200000, "events.create", [run2, {"eventType": "step_created", "specVersion": 3, "correlationId": "s1", "eventData": {"stepName": "st", "input": bytes("aQ==")}}, {"resolveData": "all"}]);
  if (matched) reproduced += 1;
}
console.log(reproduced
  ? `REPRODUCED in ${reproduced} of ${ROUNDS} round(s): every answer had the shape durasim saw`
  : `not reproduced in ${ROUNDS} round(s)`);
await world.close?.();
process.exit(reproduced ? 1 : 0);
