// durasim's Node host for one Vercel World (docs/vercel.md).  No build step, no dependency.
//
//   node vercel_host.mjs INSTALL_DIR PACKAGE
//
// INSTALL_DIR holds node_modules/PACKAGE (npm install).  The host speaks JSON lines on
// stdin/stdout, one request or answer per line, several requests in flight at once:
//
//   -> {"id": 1, "now": 1704067200000, "op": "open", "config": {...}}
//   -> {"id": 2, "now": ..., "op": "call", "path": "events.create", "args": [...]}
//   <- {"id": 2, "ok": <value>}          or   {"id": 2, "error": {"name", "message", ...}}
//
// Bytes travel as {"$bytes": base64}, dates as {"$date": epoch ms}, undefined as
// {"$undefined": 1}.  `now` is durasim's virtual clock: the host's Date follows it.  The
// host exits when stdin closes (its parent is gone).

import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as readline from 'node:readline';

const [installDir, packageName] = process.argv.slice(2);

// --- the virtual clock -------------------------------------------------------------
const RealDate = Date;
let virtualNow = RealDate.now();

class VirtualDate extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(virtualNow);
    else super(...args);
  }
  static now() {
    return virtualNow;
  }
}
globalThis.Date = VirtualDate;

// --- lossless values -----------------------------------------------------------------
function encode(value) {
  if (value === undefined) return { $undefined: 1 };
  if (value === null || typeof value !== 'object') {
    if (typeof value === 'bigint') return Number(value);
    return value;
  }
  if (value instanceof RealDate) return { $date: value.getTime() };
  if (value instanceof Uint8Array) return { $bytes: Buffer.from(value).toString('base64') };
  if (value instanceof ArrayBuffer) return { $bytes: Buffer.from(value).toString('base64') };
  if (Array.isArray(value)) return value.map(encode);
  const out = {};
  for (const [key, item] of Object.entries(value)) {
    if (item === undefined || typeof item === 'function') continue;
    out[key] = encode(item);
  }
  return out;
}

function decode(value) {
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map(decode);
  if ('$bytes' in value) return new Uint8Array(Buffer.from(value.$bytes, 'base64'));
  if ('$date' in value) return new VirtualDate(value.$date);
  if ('$undefined' in value) return undefined;
  const out = {};
  for (const [key, item] of Object.entries(value)) out[key] = decode(item);
  return out;
}

function describeError(error) {
  const out = {
    name: error?.constructor?.name || error?.name || typeof error,
    message: String(error?.message ?? error),
  };
  for (const key of ['status', 'code', 'retryAfter']) {
    if (error && error[key] !== undefined) out[key] = encode(error[key]);
  }
  return out;
}

// --- the World -------------------------------------------------------------------
const require = createRequire(join(installDir, 'package.json'));
let world = null;
let opening = null;
let module = null;

async function load() {
  if (module) return module;
  const entry = require.resolve(packageName);
  module = await import(pathToFileURL(entry).href);
  return module;
}

function packageVersion() {
  const manifest = join(installDir, 'node_modules', packageName, 'package.json');
  return JSON.parse(readFileSync(manifest, 'utf8')).version;
}

async function open(config) {
  const mod = await load();
  const make = mod.createWorld || mod.createLocalWorld || mod.default;
  if (typeof make !== 'function') {
    throw new Error(`${packageName} exports no createWorld(config)`);
  }
  world = make(config);
  return {
    version: packageVersion(),
    specVersion: world.specVersion ?? null,
    capabilities: world.capabilities ?? null,
    hasCreateBatch: typeof world.events?.createBatch === 'function',
    streamsFacet: typeof world.streams === 'object' && world.streams !== null,
  };
}

async function call(path, args) {
  if (opening) await opening.catch(() => {});
  if (!world) throw new Error('the World is not open: send "open" first');
  const parts = path.split('.');
  let owner = world;
  for (const part of parts.slice(0, -1)) owner = owner?.[part];
  const method = owner?.[parts[parts.length - 1]];
  if (typeof method !== 'function') {
    const error = new Error(`the World has no method ${path}`);
    error.name = 'NoSuchMethod';
    throw error;
  }
  return await method.apply(owner, args);
}

async function sql(statements, connectionString) {
  // Administration of world-postgres's database, with the pg client the package brings.
  const pg = require('pg');
  const client = new (pg.default?.Client ?? pg.Client)({ connectionString });
  await client.connect();
  let rows = null;
  try {
    for (const statement of statements) rows = (await client.query(statement)).rows;
  } finally {
    await client.end();
  }
  return rows;
}

async function handle(request) {
  // durasim's clock never moves backwards; the latest request carries its time
  if (typeof request.now === 'number') virtualNow = request.now;
  switch (request.op) {
    case 'open':
      opening = open(decode(request.config ?? {}));
      return await opening;
    case 'call':
      return await call(request.path, decode(request.args ?? []));
    case 'sql':
      return await sql(request.statements, request.connectionString);
    case 'close':
      if (world && typeof world.close === 'function') await world.close();
      world = null;
      return null;
    default:
      throw new Error(`unknown op ${request.op}`);
  }
}

function answer(message) {
  process.stdout.write(JSON.stringify(message) + '\n');
}

// Import the package at once: a spare host is warm before it is given a World.
load().catch(() => {});

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
let inFlight = 0;
let stdinClosed = false;
lines.on('line', (line) => {
  if (!line.trim()) return;
  let request;
  try {
    request = JSON.parse(line);
  } catch (error) {
    answer({ id: null, error: describeError(error) });
    return;
  }
  inFlight += 1;
  handle(request)
    .then(
      (value) => answer({ id: request.id, ok: encode(value) }),
      (error) => answer({ id: request.id, error: describeError(error) }),
    )
    .finally(() => {
      inFlight -= 1;
      if (stdinClosed && inFlight === 0) process.exit(0);
    });
});
lines.on('close', () => {
  stdinClosed = true;
  if (inFlight === 0) process.exit(0);
  // the parent is gone: finish what is in flight, but never hang on it
  setTimeout(() => process.exit(0), 5000).unref();
});
process.on('unhandledRejection', (error) => {
  process.stderr.write(`durasim vercel host: unhandled rejection: ${error?.stack ?? error}\n`);
});
// Library code must never write to stdout: it carries the protocol.
console.log = (...args) => process.stderr.write(args.join(' ') + '\n');
console.info = console.log;
console.debug = console.log;
console.warn = console.log;
