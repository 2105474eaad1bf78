// Reproduction of a contract violation found by durasim conformance --vercel.
// Package: @workflow/world-postgres@4.3.7.  No durasim needed:
//   npm install @workflow/world-postgres@4.3.7
//   export WORKFLOW_POSTGRES_URL=postgres://USER@HOST:5432/EMPTY_DATABASE
//   node node_modules/@workflow/world-postgres/dist/cli.js   # the package's own set-up
//   node THIS_FILE.mjs
// durasim check: contract: test_contract_hooks.py::test_hook_refusals
// What durasim's contract (docs/protocol.md) expected, and what happened:
//   durasim.worlds.HookNotFound: HookNotFoundError from the Vercel World: Hook not found
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
const EXPECTED = {"1": "event run_created", "2": "page[run_created@run1]", "3": "pending@run1", "4": "event run_started", "5": "page[run_created@run1,run_started@run1]", "6": "running@run1", "7": "event hook_created", "8": "page[run_created@run1,run_started@run1,hook_created@run1]", "9": "running@run1", "10": "page[running@run1]", "11": "page[run_created@run1,run_started@run1,hook_created@run1]", "12": "page[run_created@run1,run_started@run1,hook_created@run1]", "13": "page[]", "14": "page[run_created@run1,run_started@run1,hook_created@run1]", "15": "page[run_created@run1,run_started@run1,hook_created@run1]", "16": "throws EntityConflictError", "17": "page[running@run1]", "18": "page[run_created@run1,run_started@run1,hook_created@run1]", "19": "page[run_created@run1,run_started@run1,hook_created@run1]", "20": "page[]", "21": "page[run_created@run1,run_started@run1,hook_created@run1]", "22": "page[run_created@run1,run_started@run1,hook_created@run1]", "23": "page[running@run1]", "24": "page[run_created@run1,run_started@run1,hook_created@run1]", "25": "page[run_created@run1,run_started@run1,hook_created@run1]", "26": "page[]", "27": "page[run_created@run1,run_started@run1,hook_created@run1]", "28": "page[run_created@run1,run_started@run1,hook_created@run1]", "29": "throws HookNotFoundError", "30": "page[running@run1]", "31": "page[run_created@run1,run_started@run1,hook_created@run1]", "32": "page[run_created@run1,run_started@run1,hook_created@run1]", "33": "page[]", "34": "page[run_created@run1,run_started@run1,hook_created@run1]", "35": "page[run_created@run1,run_started@run1,hook_created@run1]", "36": "page[running@run1]", "37": "page[run_created@run1,run_started@run1,hook_created@run1]", "38": "page[run_created@run1,run_started@run1,hook_created@run1]", "39": "page[]", "40": "page[run_created@run1,run_started@run1,hook_created@run1]", "41": "page[run_created@run1,run_started@run1,hook_created@run1]", "42": "throws HookNotFoundError", "43": "page[running@run1]", "44": "page[run_created@run1,run_started@run1,hook_created@run1]", "45": "page[run_created@run1,run_started@run1,hook_created@run1]", "46": "page[]", "47": "page[run_created@run1,run_started@run1,hook_created@run1]", "48": "page[run_created@run1,run_started@run1,hook_created@run1]", "49": "event hook_disposed", "50": "page[run_created@run1,run_started@run1,hook_created@run1,hook_disposed@run1]", "51": "running@run1", "52": "page[running@run1]", "53": "page[run_created@run1,run_started@run1,hook_created@run1,hook_disposed@run1]", "54": "page[run_created@run1,run_started@run1,hook_created@run1,hook_disposed@run1]", "55": "page[]", "56": "page[run_created@run1,run_started@run1,hook_created@run1,hook_disposed@run1]", "57": "page[run_created@run1,run_started@run1,hook_created@run1,hook_disposed@run1]", "58": "throws HookNotFoundError", "59": "page[running@run1]", "60": "page[run_created@run1,run_started@run1,hook_created@run1,hook_disposed@run1]", "61": "page[run_created@run1,run_started@run1,hook_created@run1,hook_disposed@run1]", "62": "page[]", "63": "page[run_created@run1,run_started@run1,hook_created@run1,hook_disposed@run1]", "64": "page[run_created@run1,run_started@run1,hook_created@run1,hook_disposed@run1]", "65": "page[running@run1]", "66": "page[run_created@run1,run_started@run1,hook_created@run1,hook_disposed@run1]", "67": "page[run_created@run1,run_started@run1,hook_created@run1,hook_disposed@run1]", "68": "page[]", "69": "page[run_created@run1,run_started@run1,hook_created@run1,hook_disposed@run1]", "70": "page[run_created@run1,run_started@run1,hook_created@run1,hook_disposed@run1]", "71": "throws HookNotFoundError"};
const IDS = new Set(["h1", "tok", "other", "nope"]);
const STATIC_RUNS = [];
const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
const RUNS = new Map();
let round = 0;
let matched = true;
let run1;

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
  await call(7, 1704067200000, "events.create", [run1, {"eventType": "hook_created", "specVersion": 3, "correlationId": "h1", "eventData": {"token": "tok"}}, {"resolveData": "all"}]);
  await call(8, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(9, 1704067200000, "runs.get", [run1]);
  await call(10, 1704067200000, "runs.list", [{"resolveData": "all", "pagination": {"limit": 100, "sortOrder": "desc"}}]);
  await call(11, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(12, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(13, 1704067200000, "steps.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}}]);
  await call(14, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(15, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(16, 1704067200000, "events.create", [run1, {"eventType": "hook_created", "specVersion": 3, "correlationId": "h1", "eventData": {"token": "other"}}, {"resolveData": "all"}]);
  await call(17, 1704067200000, "runs.list", [{"resolveData": "all", "pagination": {"limit": 100, "sortOrder": "desc"}}]);
  await call(18, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(19, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(20, 1704067200000, "steps.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}}]);
  await call(21, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(22, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(23, 1704067200000, "runs.list", [{"resolveData": "all", "pagination": {"limit": 100, "sortOrder": "desc"}}]);
  await call(24, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(25, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(26, 1704067200000, "steps.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}}]);
  await call(27, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(28, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(29, 1704067200000, "events.create", [run1, {"eventType": "hook_received", "specVersion": 3, "correlationId": "nope", "eventData": {"payload": bytes("")}}, {"resolveData": "all"}]);
  await call(30, 1704067200000, "runs.list", [{"resolveData": "all", "pagination": {"limit": 100, "sortOrder": "desc"}}]);
  await call(31, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(32, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(33, 1704067200000, "steps.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}}]);
  await call(34, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(35, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(36, 1704067200000, "runs.list", [{"resolveData": "all", "pagination": {"limit": 100, "sortOrder": "desc"}}]);
  await call(37, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(38, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(39, 1704067200000, "steps.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}}]);
  await call(40, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(41, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(42, 1704067200000, "events.create", [run1, {"eventType": "hook_disposed", "specVersion": 3, "correlationId": "nope"}, {"resolveData": "all"}]);
  await call(43, 1704067200000, "runs.list", [{"resolveData": "all", "pagination": {"limit": 100, "sortOrder": "desc"}}]);
  await call(44, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(45, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(46, 1704067200000, "steps.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}}]);
  await call(47, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(48, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(49, 1704067200000, "events.create", [run1, {"eventType": "hook_disposed", "specVersion": 3, "correlationId": "h1"}, {"resolveData": "all"}]);
  await call(50, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(51, 1704067200000, "runs.get", [run1]);
  await call(52, 1704067200000, "runs.list", [{"resolveData": "all", "pagination": {"limit": 100, "sortOrder": "desc"}}]);
  await call(53, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(54, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(55, 1704067200000, "steps.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}}]);
  await call(56, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(57, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(58, 1704067200000, "events.create", [run1, {"eventType": "hook_received", "specVersion": 3, "correlationId": "h1", "eventData": {"payload": bytes("")}}, {"resolveData": "all"}]);
  await call(59, 1704067200000, "runs.list", [{"resolveData": "all", "pagination": {"limit": 100, "sortOrder": "desc"}}]);
  await call(60, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(61, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(62, 1704067200000, "steps.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}}]);
  await call(63, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(64, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(65, 1704067200000, "runs.list", [{"resolveData": "all", "pagination": {"limit": 100, "sortOrder": "desc"}}]);
  await call(66, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(67, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(68, 1704067200000, "steps.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}}]);
  await call(69, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(70, 1704067200000, "events.list", [{"runId": run1, "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(71, 1704067200000, "events.create", [run1, {"eventType": "hook_disposed", "specVersion": 3, "correlationId": "h1"}, {"resolveData": "all"}]);
  if (matched) reproduced += 1;
}
console.log(reproduced
  ? `REPRODUCED in ${reproduced} of ${ROUNDS} round(s): every answer had the shape durasim saw`
  : `not reproduced in ${ROUNDS} round(s)`);
await world.close?.();
process.exit(reproduced ? 1 : 0);
