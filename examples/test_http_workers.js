'use strict';
// The server on two loops, one per thread, sharing a port (TAP).
// usage: node test_http_workers.js PATH/TO/http_server [CASE...]
//        (the cases whose name contains an argument; none: all)
//
// spread        40 connections reach both workers: /stats says workers=2 and
//               worker_accepted shows two counts, both > 0, summing to
//               `accepted`; every request is answered.
// timeouts      40 silent and 40 idle keep-alive connections, on both
//               workers: each silent one gets 408 at headersTimeout, each
//               idle one is closed at keepAliveTimeout, none early, and the
//               summed counters say so.
// drain         SIGTERM with /delay requests in flight on both workers and
//               idle connections: the idle ones close at once, new
//               connections are refused, every request in flight is
//               answered (Connection: close), and the process exits 0 once
//               the last answer is written, reporting them all.
// grace         SIGTERM with requests on both workers that outlast
//               --shutdown-grace: the process exits 0 when it ends,
//               reporting them all dropped.
// second_signal a second signal during the drain exits at once, 128 + it.
// usage         --workers 0 is refused.
//
// The kernel hashes each connection (its addresses and ports) to one of the
// two listening sockets, so 40 connections land on both but for a chance
// of 2 in 2^40; a case asserts where they landed before it relies on it.
// /stats is fetched on a connection of its own, which counts in the
// accepted counts too: a worker whose count grew by more than the number of
// fetches since the first took at least one of the case's connections.
// Loopback only; about 5 s.
const { spawnSync } = require('child_process');
const net = require('net');
const t = require('./http_test_lib');

const exe = process.argv[2];
const only = process.argv.slice(3);
const H = `Host: ${t.HOST}\r\n`;
const WORKERS = ['--workers', '2'];

function perWorker(st) {
  return String(st.worker_accepted).split(',').map(Number);
}

// Polls /stats until `pred` holds or `ms` passed, as t.waitStats, and
// counts the fetches: each is a connection that one worker accepts.
async function statsCounted(server, pred, ms) {
  const end = performance.now() + ms;
  let fetches = 1;
  let st = await t.stats(server);
  while (!pred(st) && performance.now() < end) {
    await t.sleep(20);
    st = await t.stats(server);
    fetches++;
  }
  return { st, fetches };
}

// Whether both workers took some of the connections made between the
// /stats `before` and the `fetches` later ones: each worker's accepted count
// grew by more than those fetches alone could make it grow. Says how much.
function bothTook(name, before, { st, fetches }) {
  const b = perWorker(before);
  const grown = perWorker(st).map((a, i) => a - b[i]);
  t.ok(grown.length === 2 && grown.every((n) => n > fetches),
    `${name} (they accepted ${grown.join(' and ')} connections; the /stats fetches make at most ${fetches})`,
    `expected each worker to accept more than ${fetches}; worker_accepted was ${before.worker_accepted}, then ${st.worker_accepted}`);
}

function refused(port) {
  return new Promise((resolve) => {
    const s = net.connect({ host: t.HOST, port });
    s.on('connect', () => { s.destroy(); resolve('connected'); });
    s.on('error', (e) => resolve(e.code));
  });
}

async function openMany(port, n, request) {
  const cs = [];
  for (let i = 0; i < n; i++) {
    const c = await t.connect(port);
    if (request) c.sock.write(request);
    cs.push(c);
  }
  return cs;
}

async function spread() {
  const N = 40;
  const server = await t.startServer(exe, WORKERS);
  const before = await t.stats(server);
  const cs = await openMany(server.port, N, `GET / HTTP/1.1\r\n${H}\r\n`);
  await Promise.all(cs.map((c) => t.waitData(c, (d) => t.parseResponses(d).responses.length === 1)));
  const hello = cs.filter((c) => {
    const r = t.parseResponses(c.data).responses;
    return r.length === 1 && r[0].status === 200 && r[0].body === 'hello\n';
  }).length;
  t.eq(hello, N, `spread: all ${N} requests answered`);
  const after = await statsCounted(server, (s) => s.requests >= before.requests + N + 1, 5000);
  const { st } = after;
  t.eq(st.workers, 2, 'spread: /stats says workers=2');
  const counts = perWorker(st);
  t.diag(`spread: worker_accepted=${st.worker_accepted}, accepted=${st.accepted}`);
  t.eq(counts.length, 2, 'spread: worker_accepted has one count per worker');
  t.eq(counts.reduce((a, b) => a + b, 0), st.accepted, 'spread: the counts sum to accepted');
  bothTook('spread: connections reached both workers', before, after);
  cs.forEach((c) => c.sock.destroy());
  server.proc.kill('SIGTERM');
  t.eq((await server.exited).code, 0, 'spread: the server exits 0 on SIGTERM');
}

async function timeouts() {
  const N = 40;
  const HEADERS = 300;
  const KEEPALIVE = 300;
  const server = await t.startServer(exe, [...WORKERS, '--headers-timeout', String(HEADERS),
    '--keep-alive-timeout', String(KEEPALIVE), '--keep-alive-timeout-buffer', '0']);
  const before = await t.stats(server);
  const t0 = performance.now();
  const silent = await openMany(server.port, N, null);
  const idle = await openMany(server.port, N, `GET / HTTP/1.1\r\n${H}\r\n`);
  await Promise.all([...silent, ...idle].map((c) => c.done));
  const got408 = silent.filter((c) => {
    const r = t.parseResponses(c.data).responses;
    return r.length === 1 && r[0].status === 408 && c.ended === 'end';
  }).length;
  t.eq(got408, N, `timeouts: all ${N} silent connections get 408 and a close`);
  const earliest = Math.min(...silent.map((c) => c.endedAt - t0));
  t.ok(earliest >= HEADERS - 5, `timeouts: none before headersTimeout (first at ${earliest.toFixed(0)} ms)`);
  const closedIdle = idle.filter((c) => t.parseResponses(c.data).responses.length === 1 && c.ended === 'end');
  t.eq(closedIdle.length, N, `timeouts: all ${N} idle keep-alive connections answered, then closed`);
  const after = await statsCounted(server, (s) => s.headers_timeouts >= before.headers_timeouts + N &&
    s.closed_keepalive_timeout >= before.closed_keepalive_timeout + N, 5000);
  const { st } = after;
  t.eq(st.headers_timeouts - before.headers_timeouts, N, `timeouts: /stats counts ${N} headers timeouts`);
  t.eq(st.closed_keepalive_timeout - before.closed_keepalive_timeout, N,
    `timeouts: /stats counts ${N} keep-alive closes`);
  t.eq(st.early_fires, 0, 'timeouts: no timeout fired before its deadline on its wheel');
  bothTook("timeouts: they ran on both workers' wheels", before, after);
  server.proc.kill('SIGTERM');
  t.eq((await server.exited).code, 0, 'timeouts: the server exits 0 on SIGTERM');
}

async function drain() {
  const DELAY = 1000;
  const BUSY = 60;
  const IDLE = 20;
  const server = await t.startServer(exe, WORKERS);
  const before = await t.stats(server);
  const idle = await openMany(server.port, IDLE, `GET / HTTP/1.1\r\n${H}\r\n`);
  await Promise.all(idle.map((c) => t.waitData(c, (d) => t.parseResponses(d).responses.length === 1)));
  const busy = await openMany(server.port, BUSY, `GET /delay?ms=${DELAY} HTTP/1.1\r\n${H}\r\n`);
  const after = await statsCounted(server, (s) => s.delay_scheduled >= BUSY, 5000);
  const { st } = after;
  t.eq(st.delay_scheduled, BUSY, `drain: the workers hold ${BUSY} /delay requests before the signal`);
  bothTook('drain: requests in flight on both workers', before, after);
  t.eq(st.delay_fired, 0, 'drain: none answered yet');

  const sig = performance.now();
  server.proc.kill('SIGTERM');
  await Promise.race([Promise.all(idle.map((c) => c.done)), t.sleep(DELAY / 2)]);
  const idleClosed = idle.filter((c) => c.ended === 'end' && c.endedAt - sig < DELAY / 2).length;
  t.eq(idleClosed, IDLE, `drain: the ${IDLE} idle keep-alive connections are closed at once`);
  t.eq(await refused(server.port), 'ECONNREFUSED', 'drain: new connections are refused');

  await Promise.all(busy.map((c) => c.done));
  const exit = await server.exited;
  const answered = busy.filter((c) => {
    const r = t.parseResponses(c.data).responses;
    return r.length === 1 && r[0].status === 200 && r[0].body === `delayed ${DELAY} ms\n` &&
      r[0].headers.connection === 'close' && c.ended === 'end';
  }).length;
  t.eq(answered, BUSY, `drain: every request in flight answered with Connection: close, then a clean close (${answered} of ${BUSY})`);
  t.eq(exit.code, 0, 'drain: the server exits 0');
  const exitMs = exit.at - sig;
  t.ok(exitMs < DELAY + 2000,
    `drain: it exits once the last answer is written (${exitMs.toFixed(0)} ms after SIGTERM)`);
  const line = /^shutdown: .*$/m.exec(server.out);
  t.diag(line ? line[0] : 'no shutdown line');
  t.ok(line && new RegExp(`answered ${BUSY} `).test(line[0]) && / dropped 0 /.test(line[0]),
    `drain: the server reports ${BUSY} answered, 0 dropped, over both workers`, server.out);
  const final = /^stats (.*)$/m.exec(server.out);
  const fin = final ? t.parseStats(final[1]) : {};
  t.ok(fin.workers === 2 && fin.delay_fired === BUSY && fin.open === 0,
    `drain: the final stats sum both workers (delay_fired=${fin.delay_fired}, open=${fin.open})`, server.out);
}

async function grace() {
  const GRACE = 300;
  const N = 40;
  const server = await t.startServer(exe, [...WORKERS, '--shutdown-grace', String(GRACE)]);
  const before = await t.stats(server);
  const cs = await openMany(server.port, N, `GET /delay?ms=5000 HTTP/1.1\r\n${H}\r\n`);
  bothTook('grace: requests in flight on both workers', before,
    await statsCounted(server, (s) => s.delay_scheduled >= N, 5000));
  const sig = performance.now();
  server.proc.kill('SIGTERM');
  const exit = await server.exited;
  await Promise.all(cs.map((c) => c.done));
  const exitMs = exit.at - sig;
  t.eq(exit.code, 0, 'grace: the server exits 0 when the grace period ends');
  t.ok(exitMs >= GRACE - 5 && exitMs < GRACE + 1000, `grace: after --shutdown-grace ${GRACE} ms (${exitMs.toFixed(0)} ms)`);
  t.ok(cs.every((c) => c.data.length === 0 && c.ended !== 'timeout'), 'grace: the unanswered connections are closed');
  const line = /^shutdown: .*$/m.exec(server.out);
  t.diag(line ? line[0] : 'no shutdown line');
  t.ok(line && new RegExp(` dropped ${N} `).test(line[0]), `grace: the server reports ${N} dropped`, server.out);
}

async function secondSignal() {
  const N = 40;
  const server = await t.startServer(exe, WORKERS);
  const cs = await openMany(server.port, N, `GET /delay?ms=5000 HTTP/1.1\r\n${H}\r\n`);
  await t.waitStats(server, (s) => s.delay_scheduled >= N, 5000);
  server.proc.kill('SIGTERM');
  await t.sleep(100);
  t.eq(server.exit, null, 'second_signal: after the first the workers still wait for their requests');
  const sig = performance.now();
  server.proc.kill('SIGINT');
  const exit = await server.exited;
  const exitMs = exit.at - sig;
  t.eq(exit.code, 128 + 2, 'second_signal: exits with 128 + SIGINT');
  t.ok(exitMs < 500, `second_signal: at once (${exitMs.toFixed(0)} ms)`);
  await Promise.all(cs.map((c) => c.done));
}

async function usage() {
  const r = spawnSync(exe, ['--workers', '0'], { encoding: 'utf8', timeout: 5000 });
  t.eq(r.status, 2, 'usage: --workers 0 is refused with status 2');
}

const cases = { spread, timeouts, drain, grace, second_signal: secondSignal, usage };

async function main() {
  const chosen = Object.keys(cases).filter((name) => only.length === 0 || only.some((a) => name.includes(a)));
  if (chosen.length === 0) throw new Error(`no case matches ${only.join(' ')}; cases: ${Object.keys(cases).join(' ')}`);
  for (const name of chosen) await cases[name]();
}

t.run(main, 60000);
