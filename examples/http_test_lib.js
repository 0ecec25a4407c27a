'use strict';
// Shared by the examples' client tests (test_http_*.js): TAP output, starting
// examples/http_server on a free loopback port, raw-socket exchanges, parsing
// responses, and the server's /stats. Loopback only; everything is bounded in
// time by the callers' deadlines.
const { spawn, spawnSync } = require('child_process');
const fs = require('fs');
const net = require('net');
const http = require('http');

const HOST = '127.0.0.1';
const H = `Host: ${HOST}\r\n`;

// ---- TAP ----------------------------------------------------------------
let count = 0;
let failures = 0;

function ok(cond, name, diagnostic) {
  count++;
  if (!cond) failures++;
  console.log(`${cond ? 'ok' : 'not ok'} ${count} - ${name}`);
  if (!cond && diagnostic !== undefined) {
    for (const line of String(diagnostic).split('\n')) console.log(`#   ${line}`);
  }
  return cond;
}

function eq(got, want, name) {
  return ok(got === want, name, `expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
}

function skip(name, why) {
  count++;
  console.log(`ok ${count} - ${name} # SKIP ${why}`);
}

function diag(text) {
  for (const line of String(text).split('\n')) console.log(`# ${line}`);
}

const servers = new Set();

function finish() {
  for (const s of servers) s.proc.kill('SIGKILL');
  console.log(`1..${count}`);
  process.exit(failures > 0 ? 1 : 0);
}

// Runs `main` with a deadline for the whole script; a test that hangs fails
// instead of waiting for meson's timeout.
function run(main, deadlineMs) {
  const timer = setTimeout(() => {
    console.log(`Bail out! the script did not finish within ${deadlineMs} ms`);
    for (const s of servers) s.proc.kill('SIGKILL');
    process.exit(1);
  }, deadlineMs);
  timer.unref();
  main().then(finish, (err) => {
    ok(false, 'the script ran to its end', err && err.stack ? err.stack : err);
    finish();
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The script's cases to run: those whose name contains an argument after
// the server's path (none: all).
const only = process.argv.slice(3);
const want = (name) => only.length === 0 || only.some((o) => name.includes(o));

// Runs the functions of `cases` that `want` selects, in order.
async function runCases(cases) {
  const chosen = Object.keys(cases).filter(want);
  if (chosen.length === 0) throw new Error(`no case matches ${only.join(' ')}; cases: ${Object.keys(cases).join(' ')}`);
  for (const name of chosen) await cases[name]();
}

// The path of `program` on PATH, or null.
function which(program) {
  const r = spawnSync('sh', ['-c', `command -v ${program}`], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : null;
}

// ---- The server ---------------------------------------------------------

// CPU seconds (user + system) the process has used so far.
function cpuSeconds(pid) {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ 100)
}

// Starts the server (`prefix` runs it through another program, e.g. a shell
// that lowers a limit) and resolves once it printed its port.
function startServer(exe, args, prefix = []) {
  return new Promise((resolve, reject) => {
    const argv = [...prefix, exe, '--host', HOST, '--port', '0', ...args];
    const proc = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    const s = { proc, port: 0, out: '', err: '', exit: null };
    servers.add(s);
    s.exited = new Promise((done) => {
      proc.on('exit', (code, signal) => {
        servers.delete(s);
        s.exit = { code, signal, at: performance.now() };
        done(s.exit);
      });
    });
    const timer = setTimeout(() => reject(new Error(`server did not start: ${s.err}`)), 5000);
    proc.stdout.on('data', (d) => {
      s.out += d;
      const m = /^listening on [^\n]*:(\d+)$/m.exec(s.out);
      if (m && s.port === 0) {
        s.port = Number(m[1]);
        clearTimeout(timer);
        resolve(s);
      }
    });
    proc.stderr.on('data', (d) => { s.err += d; });
    proc.on('error', (e) => { clearTimeout(timer); reject(e); });
    proc.on('exit', () => { clearTimeout(timer); reject(new Error(`server exited: ${s.err}`)); });
  });
}

// Sends SIGTERM; resolves the exit ({ code, signal, at }).
function stop(server) {
  server.proc.kill('SIGTERM');
  return server.exited;
}

// Sends SIGTERM and checks that the server exits 0.
async function stopOk(server, name) {
  eq((await stop(server)).code, 0, `${name}: the server exits 0 on SIGTERM`);
}

// The server's `shutdown: ...` line, shown as a diagnostic ('' if none).
function shutdownLine(server) {
  const m = /^shutdown: .*$/m.exec(server.out);
  diag(m ? m[0] : 'no shutdown line');
  return m ? m[0] : '';
}

// GET on a fresh connection (no agent): resolves { status, type, body, ms },
// or { status: 0, error, ms } if the request failed or took over `timeoutMs`.
function get(port, pathname, timeoutMs = 5000) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const req = http.get({ host: HOST, port, path: pathname, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({
        status: res.statusCode, type: res.headers['content-type'], body, ms: performance.now() - t0,
      }));
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error('timeout')));
    req.on('error', (e) => resolve({ status: 0, error: e.code || e.message, ms: performance.now() - t0 }));
  });
}

// GET /stats on a fresh connection: the counters as numbers by name, and
// `fetch`, how many /stats connections the test has made to the server.
async function stats(server) {
  const r = await get(server.port, '/stats');
  if (r.status !== 200) throw new Error(`GET /stats: ${r.error || r.status}`);
  server.fetches = (server.fetches || 0) + 1;
  return { ...parseStats(r.body), fetch: server.fetches };
}

function parseStats(line) {
  const out = {};
  for (const kv of line.trim().split(/\s+/)) {
    const i = kv.indexOf('=');
    if (i > 0) out[kv.slice(0, i)] = /^\d+$/.test(kv.slice(i + 1)) ? Number(kv.slice(i + 1)) : kv.slice(i + 1);
  }
  return out;
}

// Whether each worker of a --workers 2 server accepted more than `more`
// connections between the /stats `before` and `st` beyond the /stats
// fetches since `before` (a connection each, on either worker).
function took(before, st, more = 0) {
  const b = String(before.worker_accepted).split(',').map(Number);
  const grown = String(st.worker_accepted).split(',').map((a, i) => Number(a) - b[i]);
  const fetches = st.fetch - before.fetch;
  return { grown, fetches, both: grown.length === 2 && grown.every((n) => n > fetches + more) };
}

function bothTook(name, before, st) {
  const { grown, fetches, both } = took(before, st);
  ok(both,
    `${name} (they accepted ${grown.join(' and ')} connections; the /stats fetches make at most ${fetches})`,
    `expected each worker to accept more than ${fetches}; worker_accepted was ${before.worker_accepted}, then ${st.worker_accepted}`);
}

// Polls /stats until `pred(stats)` holds or `ms` passed; returns the last stats.
async function waitStats(server, pred, ms) {
  const end = performance.now() + ms;
  let st = await stats(server);
  while (!pred(st) && performance.now() < end) {
    await sleep(20);
    st = await stats(server);
  }
  return st;
}

// ---- Raw exchanges ------------------------------------------------------

// Opens a connection; returns an object that collects every byte the server
// sends and records how the connection ended ('end' for a FIN, 'error:CODE',
// or 'timeout' after `timeoutMs`).
function connect(port, { timeoutMs = 10000 } = {}) {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host: HOST, port, allowHalfOpen: true });
    const c = { sock, data: Buffer.alloc(0), ended: null, endedAt: 0, waiters: [] };
    const settle = (how) => {
      if (c.ended !== null) return;
      c.ended = how;
      c.endedAt = performance.now();
      clearTimeout(timer);
      sock.destroy();
      for (const w of c.waiters.splice(0)) w();
    };
    const timer = setTimeout(() => settle('timeout'), timeoutMs);
    c.done = new Promise((done) => c.waiters.push(done));
    sock.on('data', (d) => {
      c.data = Buffer.concat([c.data, d]);
      if (c.onData) c.onData();
    });
    sock.on('end', () => settle('end'));
    sock.on('error', (e) => {
      if (c.ended === null && !c.connected) { clearTimeout(timer); reject(e); return; }
      settle(`error:${e.code}`);
    });
    sock.on('close', () => settle('close'));
    sock.on('connect', () => { c.connected = true; resolve(c); });
  });
}

// Resolves once the bytes received satisfy `pred` (or the connection ended).
function waitData(c, pred) {
  return new Promise((resolve) => {
    const check = () => {
      if (pred(c.data) || c.ended !== null) {
        c.onData = null;
        resolve();
        return true;
      }
      return false;
    };
    if (!check()) {
      c.onData = check;
      c.waiters.push(resolve);
    }
  });
}

// `n` connections, each sent `text` (if any) once connected.
async function connectMany(port, n, text) {
  const cs = [];
  for (let i = 0; i < n; i++) {
    const c = await connect(port);
    if (text) c.sock.write(text);
    cs.push(c);
  }
  return cs;
}

// Resolves how a connect ends: 'connected', or the error code.
function refused(port) {
  return new Promise((resolve) => {
    const s = net.connect({ host: HOST, port });
    s.on('connect', () => { s.destroy(); resolve('connected'); });
    s.on('error', (e) => resolve(e.code));
  });
}

// Sends `text`, optionally half-closes, and waits for the server to end the
// connection. Returns { data, ended, ms }.
async function exchange(port, text, { halfClose = false, timeoutMs = 5000 } = {}) {
  const c = await connect(port, { timeoutMs });
  const t0 = performance.now();
  c.sock.write(text);
  if (halfClose) c.sock.end();
  await c.done;
  return { data: c.data, ended: c.ended, ms: c.endedAt - t0 };
}

// Splits `buf` into responses. `methods` gives the request method of each
// response in order (a HEAD response has no body); 1xx responses are
// returned as their own entries. Stops at the first incomplete response.
function parseResponses(buf, methods = []) {
  const out = [];
  let off = 0;
  let i = 0;
  while (off < buf.length) {
    const headEnd = buf.indexOf('\r\n\r\n', off);
    if (headEnd < 0) break;
    const head = buf.slice(off, headEnd).toString('latin1');
    const lines = head.split('\r\n');
    const m = /^HTTP\/1\.[01] (\d{3}) ?(.*)$/.exec(lines[0]);
    if (!m) { out.push({ garbage: buf.slice(off).toString('latin1') }); break; }
    const headers = {};
    for (const l of lines.slice(1)) {
      const j = l.indexOf(':');
      headers[l.slice(0, j).trim().toLowerCase()] = l.slice(j + 1).trim();
    }
    const status = Number(m[1]);
    let bodyLen = 0;
    if (status >= 200 && methods[i] !== 'HEAD') bodyLen = Number(headers['content-length'] || 0);
    const bodyStart = headEnd + 4;
    if (bodyStart + bodyLen > buf.length) break;
    out.push({ status, reason: m[2], headers, head, body: buf.slice(bodyStart, bodyStart + bodyLen).toString('latin1') });
    off = bodyStart + bodyLen;
    if (status >= 200) i++;
  }
  return { responses: out, rest: buf.slice(off) };
}

// The response a connection received if it received exactly one, else null.
function single(c, methods) {
  const r = parseResponses(c.data, methods).responses;
  return r.length === 1 ? r[0] : null;
}

// Resolves once `c` has `n` complete responses (or ended).
const waitResponses = (c, n = 1) => waitData(c, (d) => parseResponses(d).responses.length >= n);

module.exports = {
  HOST, H, ok, eq, skip, diag, run, sleep, want, runCases, which, cpuSeconds, startServer, stop, stopOk,
  shutdownLine, get, stats, parseStats, waitStats, took, bothTook, connect, connectMany, refused, waitData, exchange,
  parseResponses, single, waitResponses,
};
