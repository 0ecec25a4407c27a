'use strict';
// Keep-alive as clients expect it (TAP). usage: node test_http_keepalive.js PATH/TO/http_server
//
// 1. Node's own http.Agent({ keepAlive: true }) across the keep-alive
//    boundary, 200 clients of 15 requests in each of two setups at once:
//    a. keepAliveTimeout 1 s, gaps 950-1,050 ms, a default keep-alive agent;
//    b. keepAliveTimeout 2 s, gaps 800-2,200 ms, an agent with a `timeout`
//       like Node's globalAgent (5 s), which reuses sockets for short gaps.
//    No client may see ECONNRESET, or any other error.
// 2. On raw sockets: the advertised Keep-Alive: timeout=N against the close.
//
// How Node's agent reads `Keep-Alive: timeout=N`: Node 20 keeps a socket for
// N s - 1 s, and when that is 0 (N <= 1) does not reuse it at all; Node 18
// keeps it N s. Either way the hint only shortens the agent's own `timeout`
// option: an agent without one keeps idle sockets until the server closes
// them. The server's keepAliveTimeoutBuffer (1 s, as Node's server) is what
// keeps such clients, and Node 18's, from racing the close in these setups.
// Loopback only; about 25 s.
const http = require('http');
const t = require('./http_test_lib');

const exe = process.argv[2];
const CLIENTS = 200;
const PER_CLIENT = 15;

async function agentClient(port, id, setup, tally) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1, ...setup.agentOptions });
  const span = setup.gapMax - setup.gapMin;
  for (let i = 0; i < PER_CLIENT; i++) {
    // Spread the gaps evenly over the range, in a different order per client.
    const gap = setup.gapMin + (((id * 7 + i * 13) % PER_CLIENT) + Math.random()) * (span / PER_CLIENT);
    if (i > 0) await t.sleep(gap);
    await new Promise((resolve) => {
      const req = http.get({ host: t.HOST, port, path: '/', agent }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d) => { body += d; });
        res.on('end', () => {
          tally.responses++;
          if (res.statusCode !== 200 || body !== 'hello\n') tally.wrong++;
          if (res.headers['keep-alive'] !== `timeout=${setup.keepAliveMs / 1000}`) tally.noHint++;
          if (req.reusedSocket) tally.reused++;
          resolve();
        });
      });
      req.setTimeout(10000, () => req.destroy(new Error('no answer in 10 s')));
      req.on('error', (e) => {
        tally.errors[e.code || e.message] = (tally.errors[e.code || e.message] || 0) + 1;
        resolve();
      });
      tally.requests++;
    });
  }
  agent.destroy();
}

async function agentPhase(setup) {
  const server = await t.startServer(exe, ['--keep-alive-timeout', String(setup.keepAliveMs)]);
  const tally = { requests: 0, responses: 0, wrong: 0, noHint: 0, reused: 0, errors: {} };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: CLIENTS }, (_, id) => agentClient(server.port, id, setup, tally)));
  tally.secs = ((performance.now() - t0) / 1000).toFixed(1);
  tally.stats = await t.stats(server);
  tally.exit = await t.stop(server);
  return tally;
}

function report(name, setup, tally) {
  t.diag(`${name}: keepAliveTimeout ${setup.keepAliveMs} ms, gaps ${setup.gapMin}-${setup.gapMax} ms, ` +
    `agent ${JSON.stringify(setup.agentOptions)}: ${tally.requests} requests in ${tally.secs} s, ` +
    `${tally.responses} responses, ${tally.reused} on a reused socket, ` +
    `ECONNRESET ${tally.errors.ECONNRESET || 0}, errors ${JSON.stringify(tally.errors)}; ` +
    `server closed_keepalive_timeout=${tally.stats.closed_keepalive_timeout} ` +
    `closed_by_peer=${tally.stats.closed_by_peer}`);
  t.eq(tally.requests, CLIENTS * PER_CLIENT, `${name}: every request was sent`);
  t.eq(tally.errors.ECONNRESET || 0, 0, `${name}: ECONNRESET in ${tally.requests} requests`);
  t.eq(Object.keys(tally.errors).length, 0, `${name}: no error of any kind`);
  t.eq(tally.responses, tally.requests, `${name}: every request got its response`);
  t.eq(tally.wrong, 0, `${name}: every response was 200 hello`);
  t.eq(tally.noHint, 0, `${name}: every response advertised Keep-Alive: timeout=${setup.keepAliveMs / 1000}`);
  t.eq(tally.stats.early_fires, 0, `${name}: server: no timeout fired before its deadline`);
  t.eq(tally.exit.code, 0, `${name}: server exits 0 on SIGTERM`);
}

async function main() {
  const a = { keepAliveMs: 1000, gapMin: 950, gapMax: 1050, agentOptions: {} };
  const b = { keepAliveMs: 2000, gapMin: 800, gapMax: 2200, agentOptions: { timeout: 5000 } };
  const [ta, tb] = await Promise.all([agentPhase(a), agentPhase(b)]);
  report('agent a', a, ta);
  report('agent b', b, tb);
  t.ok(tb.reused > tb.requests / 10,
    `agent b: sockets were reused across short gaps (${tb.reused} of ${tb.requests})`,
    'expected the agent to reuse sockets for gaps under 1 s');

  const KEEP_ALIVE_MS = 2000;
  const server = await t.startServer(exe, ['--keep-alive-timeout', String(KEEP_ALIVE_MS)]);
  // Part 2: the advertised timeout against the actual close, on raw sockets.
  const N = 10;
  const results = await Promise.all(Array.from({ length: N }, async () => {
    const c = await t.connect(server.port, { timeoutMs: KEEP_ALIVE_MS + 3000 });
    const sent = performance.now();
    c.sock.write(`GET / HTTP/1.1\r\nHost: ${t.HOST}\r\n\r\n`);
    await t.waitResponses(c);
    const answered = performance.now();
    await c.done;
    const r = t.parseResponses(c.data).responses[0] || { headers: {} };
    return { hint: r.headers['keep-alive'], ended: c.ended, fromSent: c.endedAt - sent, fromAnswer: c.endedAt - answered };
  }));
  const hints = new Set(results.map((r) => r.hint));
  t.ok(hints.size === 1 && hints.has(`timeout=${KEEP_ALIVE_MS / 1000}`),
    `raw: every response advertised Keep-Alive: timeout=${KEEP_ALIVE_MS / 1000}`, `got ${[...hints]}`);
  t.ok(results.every((r) => r.ended === 'end'), 'raw: the server closed each idle connection (FIN)',
    `got ${results.map((r) => r.ended)}`);
  const earliest = Math.min(...results.map((r) => r.fromSent));
  const latest = Math.max(...results.map((r) => r.fromAnswer));
  // uv_now() counts whole milliseconds: 1 ms of truncation, as with uv_timer_t.
  const closesAt = KEEP_ALIVE_MS + 1000;
  t.ok(earliest >= KEEP_ALIVE_MS - 1,
    `raw: no close earlier than advertised (earliest ${earliest.toFixed(1)} ms after the request)`,
    `expected >= ${KEEP_ALIVE_MS - 1} ms`);
  t.ok(earliest >= closesAt - 1,
    `raw: none before keepAliveTimeout + 1 s buffer (${closesAt} ms)`,
    `expected >= ${closesAt - 1} ms, earliest ${earliest.toFixed(1)} ms`);
  t.ok(latest <= closesAt + 1000,
    `raw: closed within keepAliveTimeout + 1 s buffer + 1 s of the response (latest ${latest.toFixed(1)} ms)`,
    `expected <= ${closesAt + 1000} ms`);

  t.eq((await t.stop(server)).code, 0, 'raw: server exits 0 on SIGTERM');
}

t.run(main, 55000);
