// Reproduction of a contract violation found by durasim conformance --vercel.
// Package: @workflow/world-postgres@4.3.7.  No durasim needed:
//   npm install @workflow/world-postgres@4.3.7
//   export WORKFLOW_POSTGRES_URL=postgres://USER@HOST:5432/EMPTY_DATABASE
//   node node_modules/@workflow/world-postgres/dist/cli.js   # the package's own set-up
//   node THIS_FILE.mjs
// durasim check: contract: test_contract_runs.py::test_runs_list_newest_first
// What durasim's contract (docs/protocol.md) expected, and what happened:
//   AssertionError: assert ['run-2', 'ru... 'run-3', ...] == ['run-6', 'ru... 'run-1', ...]
//   
//   At index 0 diff: 'run-2' != 'run-6'
//   Use -v to get more diff
// The script replays durasim's calls (calls in flight together in durasim's run start
// together here) with the test's virtual time (Date follows it, as in the bridge),
// prints each answer and compares its shape (outcome, event types, statuses, run order)
// with what durasim saw (in a race too: the reads made while it was on are its evidence).
// Exit status 1: reproduced (every shape as durasim saw it in at least one of
// 1 round(s)); 0: not reproduced.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

let now = 1704067201000;
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...args) { if (args.length) super(...args); else super(now); }
  static now() { return now; }
};
const pkg = await import("@workflow/world-postgres");
const world = (pkg.createWorld ?? pkg.createLocalWorld)({ connectionString: process.env.WORKFLOW_POSTGRES_URL });
const bytes = (b64) => new Uint8Array(Buffer.from(b64, 'base64'));

const ROUNDS = 1;
const EXPECTED = {"1": "event run_created", "2": "page[run_created@run1]", "3": "pending@run1", "4": "event run_created", "5": "page[run_created@run2]", "6": "pending@run2", "7": "event run_started", "8": "page[run_created@run2,run_started@run2]", "9": "running@run2", "10": "event run_completed", "11": "page[run_created@run2,run_started@run2,run_completed@run2]", "12": "completed@run2", "13": "event run_created", "14": "page[run_created@run3]", "15": "pending@run3", "16": "event run_started", "17": "page[run_created@run3,run_started@run3]", "18": "running@run3", "19": "event run_created", "20": "page[run_created@run4]", "21": "pending@run4", "22": "event run_created", "23": "page[run_created@run5]", "24": "pending@run5", "25": "event run_started", "26": "page[run_created@run5,run_started@run5]", "27": "running@run5", "28": "event run_created", "29": "page[run_created@run6]", "30": "pending@run6", "31": "event run_started", "32": "page[run_created@run6,run_started@run6]", "33": "running@run6", "34": "event run_completed", "35": "page[run_created@run6,run_started@run6,run_completed@run6]", "36": "completed@run6", "37": "event run_created", "38": "page[run_created@run7]", "39": "pending@run7", "40": "event run_created", "41": "page[run_created@run8]", "42": "pending@run8", "43": "event run_started", "44": "page[run_created@run8,run_started@run8]", "45": "running@run8", "46": "event run_created", "47": "page[run_created@run9]", "48": "pending@run9", "49": "event run_started", "50": "page[run_created@run9,run_started@run9]", "51": "running@run9", "52": "page[running@run9,running@run8,pending@run7,completed@run6,running@run5,pending@run4,running@run3,completed@run2,pending@run1]"};
const IDS = new Set(["wrun_01HK153XZ80000000000000000", "wrun_01HK153XZ80000000000000001", "wrun_01HK153XZ80000000000000002", "wrun_01HK153YYG0000000000000003", "wrun_01HK153YYG0000000000000004", "wrun_01HK153YYG0000000000000005", "wrun_01HK153ZXR0000000000000006", "wrun_01HK153ZXR0000000000000007", "wrun_01HK153ZXR0000000000000008"]);
const STATIC_RUNS = [["wrun_01HK153XZ80000000000000000", "run1"], ["wrun_01HK153XZ80000000000000001", "run2"], ["wrun_01HK153XZ80000000000000002", "run3"], ["wrun_01HK153YYG0000000000000003", "run4"], ["wrun_01HK153YYG0000000000000004", "run5"], ["wrun_01HK153YYG0000000000000005", "run6"], ["wrun_01HK153ZXR0000000000000006", "run7"], ["wrun_01HK153ZXR0000000000000007", "run8"], ["wrun_01HK153ZXR0000000000000008", "run9"]];
const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
const RUNS = new Map();
let round = 0;
let matched = true;

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
  await call(1, 1704067201000, "events.create", ["wrun_01HK153XZ80000000000000000", {"eventType": "run_created", "specVersion": 3, "eventData": {"workflowName": "alpha", "input": bytes("aW4="), "deploymentId": ""}}, {"resolveData": "all"}]);
  await call(2, 1704067201000, "events.list", [{"runId": "wrun_01HK153XZ80000000000000000", "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(3, 1704067201000, "runs.get", ["wrun_01HK153XZ80000000000000000"]);
  await call(4, 1704067201000, "events.create", ["wrun_01HK153XZ80000000000000001", {"eventType": "run_created", "specVersion": 3, "eventData": {"workflowName": "beta", "input": bytes("aW4="), "deploymentId": ""}}, {"resolveData": "all"}]);
  await call(5, 1704067201000, "events.list", [{"runId": "wrun_01HK153XZ80000000000000001", "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(6, 1704067201000, "runs.get", ["wrun_01HK153XZ80000000000000001"]);
  await call(7, 1704067201000, "events.create", ["wrun_01HK153XZ80000000000000001", {"eventType": "run_started", "specVersion": 3}, {"resolveData": "all"}]);
  await call(8, 1704067201000, "events.list", [{"runId": "wrun_01HK153XZ80000000000000001", "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(9, 1704067201000, "runs.get", ["wrun_01HK153XZ80000000000000001"]);
  await call(10, 1704067201000, "events.create", ["wrun_01HK153XZ80000000000000001", {"eventType": "run_completed", "specVersion": 3, "eventData": {"output": bytes("b3V0")}}, {"resolveData": "all"}]);
  await call(11, 1704067201000, "events.list", [{"runId": "wrun_01HK153XZ80000000000000001", "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(12, 1704067201000, "runs.get", ["wrun_01HK153XZ80000000000000001"]);
  await call(13, 1704067201000, "events.create", ["wrun_01HK153XZ80000000000000002", {"eventType": "run_created", "specVersion": 3, "eventData": {"workflowName": "alpha", "input": bytes("aW4="), "deploymentId": ""}}, {"resolveData": "all"}]);
  await call(14, 1704067201000, "events.list", [{"runId": "wrun_01HK153XZ80000000000000002", "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(15, 1704067201000, "runs.get", ["wrun_01HK153XZ80000000000000002"]);
  await call(16, 1704067201000, "events.create", ["wrun_01HK153XZ80000000000000002", {"eventType": "run_started", "specVersion": 3}, {"resolveData": "all"}]);
  await call(17, 1704067201000, "events.list", [{"runId": "wrun_01HK153XZ80000000000000002", "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(18, 1704067201000, "runs.get", ["wrun_01HK153XZ80000000000000002"]);
  await call(19, 1704067202000, "events.create", ["wrun_01HK153YYG0000000000000003", {"eventType": "run_created", "specVersion": 3, "eventData": {"workflowName": "beta", "input": bytes("aW4="), "deploymentId": ""}}, {"resolveData": "all"}]);
  await call(20, 1704067202000, "events.list", [{"runId": "wrun_01HK153YYG0000000000000003", "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(21, 1704067202000, "runs.get", ["wrun_01HK153YYG0000000000000003"]);
  await call(22, 1704067202000, "events.create", ["wrun_01HK153YYG0000000000000004", {"eventType": "run_created", "specVersion": 3, "eventData": {"workflowName": "alpha", "input": bytes("aW4="), "deploymentId": ""}}, {"resolveData": "all"}]);
  await call(23, 1704067202000, "events.list", [{"runId": "wrun_01HK153YYG0000000000000004", "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(24, 1704067202000, "runs.get", ["wrun_01HK153YYG0000000000000004"]);
  await call(25, 1704067202000, "events.create", ["wrun_01HK153YYG0000000000000004", {"eventType": "run_started", "specVersion": 3}, {"resolveData": "all"}]);
  await call(26, 1704067202000, "events.list", [{"runId": "wrun_01HK153YYG0000000000000004", "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(27, 1704067202000, "runs.get", ["wrun_01HK153YYG0000000000000004"]);
  await call(28, 1704067202000, "events.create", ["wrun_01HK153YYG0000000000000005", {"eventType": "run_created", "specVersion": 3, "eventData": {"workflowName": "beta", "input": bytes("aW4="), "deploymentId": ""}}, {"resolveData": "all"}]);
  await call(29, 1704067202000, "events.list", [{"runId": "wrun_01HK153YYG0000000000000005", "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(30, 1704067202000, "runs.get", ["wrun_01HK153YYG0000000000000005"]);
  await call(31, 1704067202000, "events.create", ["wrun_01HK153YYG0000000000000005", {"eventType": "run_started", "specVersion": 3}, {"resolveData": "all"}]);
  await call(32, 1704067202000, "events.list", [{"runId": "wrun_01HK153YYG0000000000000005", "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(33, 1704067202000, "runs.get", ["wrun_01HK153YYG0000000000000005"]);
  await call(34, 1704067202000, "events.create", ["wrun_01HK153YYG0000000000000005", {"eventType": "run_completed", "specVersion": 3, "eventData": {"output": bytes("b3V0")}}, {"resolveData": "all"}]);
  await call(35, 1704067202000, "events.list", [{"runId": "wrun_01HK153YYG0000000000000005", "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(36, 1704067202000, "runs.get", ["wrun_01HK153YYG0000000000000005"]);
  await call(37, 1704067203000, "events.create", ["wrun_01HK153ZXR0000000000000006", {"eventType": "run_created", "specVersion": 3, "eventData": {"workflowName": "alpha", "input": bytes("aW4="), "deploymentId": ""}}, {"resolveData": "all"}]);
  await call(38, 1704067203000, "events.list", [{"runId": "wrun_01HK153ZXR0000000000000006", "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(39, 1704067203000, "runs.get", ["wrun_01HK153ZXR0000000000000006"]);
  await call(40, 1704067203000, "events.create", ["wrun_01HK153ZXR0000000000000007", {"eventType": "run_created", "specVersion": 3, "eventData": {"workflowName": "beta", "input": bytes("aW4="), "deploymentId": ""}}, {"resolveData": "all"}]);
  await call(41, 1704067203000, "events.list", [{"runId": "wrun_01HK153ZXR0000000000000007", "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(42, 1704067203000, "runs.get", ["wrun_01HK153ZXR0000000000000007"]);
  await call(43, 1704067203000, "events.create", ["wrun_01HK153ZXR0000000000000007", {"eventType": "run_started", "specVersion": 3}, {"resolveData": "all"}]);
  await call(44, 1704067203000, "events.list", [{"runId": "wrun_01HK153ZXR0000000000000007", "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(45, 1704067203000, "runs.get", ["wrun_01HK153ZXR0000000000000007"]);
  await call(46, 1704067203000, "events.create", ["wrun_01HK153ZXR0000000000000008", {"eventType": "run_created", "specVersion": 3, "eventData": {"workflowName": "alpha", "input": bytes("aW4="), "deploymentId": ""}}, {"resolveData": "all"}]);
  await call(47, 1704067203000, "events.list", [{"runId": "wrun_01HK153ZXR0000000000000008", "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(48, 1704067203000, "runs.get", ["wrun_01HK153ZXR0000000000000008"]);
  await call(49, 1704067203000, "events.create", ["wrun_01HK153ZXR0000000000000008", {"eventType": "run_started", "specVersion": 3}, {"resolveData": "all"}]);
  await call(50, 1704067203000, "events.list", [{"runId": "wrun_01HK153ZXR0000000000000008", "pagination": {"limit": 1000, "sortOrder": "asc"}, "resolveData": "all"}]);
  await call(51, 1704067203000, "runs.get", ["wrun_01HK153ZXR0000000000000008"]);
  await call(52, 1704067203000, "runs.list", [{"resolveData": "all", "pagination": {"limit": 100, "sortOrder": "desc"}}]);
  if (matched) reproduced += 1;
}
console.log(reproduced
  ? `REPRODUCED in ${reproduced} of ${ROUNDS} round(s): every answer had the shape durasim saw`
  : `not reproduced in ${ROUNDS} round(s)`);
await world.close?.();
process.exit(reproduced ? 1 : 0);
