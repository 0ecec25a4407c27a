'use strict';
// The server on two loops, one per thread, sharing a port (TAP).
// usage: node test_http_workers.js PATH/TO/http_server [CASE...]
//        cases: spread, timeouts, usage (test_http_shutdown.js runs each
//        of its cases on two workers too)
//
// The kernel hashes each connection (its addresses and ports) to one of the
// two listening sockets, so 40 connections land on both but for a chance
// of 2 in 2^40; a case asserts where they landed before it relies on it.
// /stats is fetched on a connection of its own, which counts in the
// accepted counts too: a worker whose count grew by more than the number of
// fetches since the first took at least one of the case's connections.
// Loopback only; about 5 s.
const { spawnSync } = require('child_process');
const t = require('./http_test_lib');

const exe = process.argv[2];
const WORKERS = ['--workers', '2'];

async function spread() {
  const N = 40;
  const server = await t.startServer(exe, WORKERS);
  const before = await t.stats(server);
  const cs = await t.connectMany(server.port, N, `GET / HTTP/1.1\r\n${t.H}\r\n`);
  await Promise.all(cs.map((c) => t.waitResponses(c)));
  t.eq(cs.filter((c) => t.single(c)?.body === 'hello\n' && t.single(c).status === 200).length, N,
    `spread: all ${N} requests answered`);
  const st = await t.waitStats(server, (s) => s.requests >= before.requests + N + 1, 5000);
  t.eq(st.workers, 2, 'spread: /stats says workers=2');
  const counts = String(st.worker_accepted).split(',').map(Number);
  t.diag(`spread: worker_accepted=${st.worker_accepted}, accepted=${st.accepted}`);
  t.eq(counts.length, 2, 'spread: worker_accepted has one count per worker');
  t.eq(counts.reduce((a, b) => a + b, 0), st.accepted, 'spread: the counts sum to accepted');
  t.bothTook('spread: connections reached both workers', before, st);
  cs.forEach((c) => c.sock.destroy());
  await t.stopOk(server, 'spread');
}

async function timeouts() {
  const N = 40;
  const HEADERS = 300;
  const KEEPALIVE = 300;
  const server = await t.startServer(exe, [...WORKERS, '--headers-timeout', String(HEADERS),
    '--keep-alive-timeout', String(KEEPALIVE), '--keep-alive-timeout-buffer', '0']);
  const before = await t.stats(server);
  const t0 = performance.now();
  const silent = await t.connectMany(server.port, N, null);
  const idle = await t.connectMany(server.port, N, `GET / HTTP/1.1\r\n${t.H}\r\n`);
  await Promise.all([...silent, ...idle].map((c) => c.done));
  t.eq(silent.filter((c) => t.single(c)?.status === 408 && c.ended === 'end').length, N,
    `timeouts: all ${N} silent connections get 408 and a close`);
  const earliest = Math.min(...silent.map((c) => c.endedAt - t0));
  t.ok(earliest >= HEADERS - 5, `timeouts: none before headersTimeout (first at ${earliest.toFixed(0)} ms)`);
  t.eq(idle.filter((c) => t.single(c) !== null && c.ended === 'end').length, N,
    `timeouts: all ${N} idle keep-alive connections answered, then closed`);
  const st = await t.waitStats(server, (s) => s.headers_timeouts >= before.headers_timeouts + N &&
    s.closed_keepalive_timeout >= before.closed_keepalive_timeout + N, 5000);
  t.eq(st.headers_timeouts - before.headers_timeouts, N, `timeouts: /stats counts ${N} headers timeouts`);
  t.eq(st.closed_keepalive_timeout - before.closed_keepalive_timeout, N,
    `timeouts: /stats counts ${N} keep-alive closes`);
  t.eq(st.early_fires, 0, 'timeouts: no timeout fired before its deadline on its wheel');
  t.bothTook("timeouts: they ran on both workers' wheels", before, st);
  await t.stopOk(server, 'timeouts');
}

async function usage() {
  const r = spawnSync(exe, ['--workers', '0'], { encoding: 'utf8', timeout: 5000 });
  t.eq(r.status, 2, 'usage: --workers 0 is refused with status 2');
}

t.run(() => t.runCases({ spread, timeouts, usage }), 60000);
