'use strict';
// Shedding load when the loop lags: --max-loop-delay and --retry-after (TAP).
// usage: node test_http_shed.js PATH/TO/http_server [CASE...]
//        cases: shed, in_flight, off, retry_after, workers, usage
//
// The 503 may take up to a second to come: the server compares the last
// second's p99 with --max-loop-delay once a second. Each worker decides on
// its own loop's lag: a spin blocks only the worker that owns the
// connection. Loopback only; about 15 s.
const { spawnSync } = require('child_process');
const t = require('./http_test_lib');

const exe = process.argv[2];
const SPIN = 300;

// One request on a new connection, closed by the client after the answer
// (or by the server); resolves { status, headers, body, ended }.
async function request(port, path) {
  const c = await t.connect(port, { timeoutMs: 5000 });
  c.sock.write(`GET ${path} HTTP/1.1\r\n${t.H}\r\n`);
  await t.waitResponses(c);
  const r = t.parseResponses(c.data).responses[0];
  if (r && r.headers.connection === 'close') await c.done; // the server closes: see how
  const ended = c.ended;
  c.sock.destroy();
  return r ? { status: r.status, headers: r.headers, body: r.body, ended } : { status: 0, ended };
}

// New requests every 50 ms until `pred(response)` or `ms` passed; returns
// the matching response (or null) and every status seen.
async function pollUntil(port, pred, ms) {
  const end = performance.now() + ms;
  const seen = [];
  while (performance.now() < end) {
    const r = await request(port, '/');
    seen.push(r.status);
    if (pred(r)) return { r, seen, at: performance.now() };
    await t.sleep(50);
  }
  return { r: null, seen };
}

// Waits until the server has made its first once-a-second check, so that a
// spin falls in a second that is checked, and is not shedding: on a loaded
// machine its first second may lag past the limit by itself.
async function started(server) {
  return t.waitStats(server, (s) => Number.isInteger(s.wheel_late_1s_p99_ms) && s.shedding === 0, 5000);
}

async function spin(port, ms = SPIN) {
  const r = await request(port, `/spin?ms=${ms}`);
  return r.status === 200 && r.body === `spun ${ms} ms\n`;
}

async function shed() {
  const server = await t.startServer(exe, ['--bench-routes', '--max-loop-delay', '50']);
  const before = await started(server);
  t.ok(before.max_loop_delay_ms === 50 && before.shedding === 0 && before.shed === 0,
    'shed: /stats says max_loop_delay_ms=50, not shedding, shed=0',
    `max_loop_delay_ms=${before.max_loop_delay_ms} shedding=${before.shedding} shed=${before.shed}`);
  t.ok(await spin(server.port), `shed: /spin?ms=${SPIN} answers 200 after blocking the loop`);
  const t0 = performance.now();
  const got = await pollUntil(server.port, (r) => r.status === 503, 2000);
  const r = got.r;
  t.ok(r !== null, `shed: a new request gets 503 within the next second (${got.r ? (got.at - t0).toFixed(0) : '-'} ms after the spin)`,
    `statuses seen: ${got.seen.join(' ')}`);
  if (r === null) {
    server.proc.kill('SIGKILL');
    return;
  }
  const m = await t.get(server.port, '/metrics');
  t.ok(m.status === 200 && /^http_server_shedding 1$/m.test(m.body),
    `shed: GET /metrics answers ${m.status} meanwhile, with http_server_shedding 1`);
  t.eq(r.headers['retry-after'], '10', 'shed: the 503 says Retry-After: 10 (the default)');
  t.eq(r.headers.connection, 'close', 'shed: the 503 says Connection: close');
  t.eq(r.ended, 'end', 'shed: and the server closes the connection');
  const during = await t.stats(server);
  t.ok(during.shed >= 1, `shed: /stats answers 200 meanwhile and counts shed=${during.shed}`,
    `shed=${during.shed} shedding=${during.shedding}`);
  // One snapshot: the server sheds exactly while the last second's p99 is
  // over the limit.
  t.ok((during.shedding === 1) === (during.wheel_late_1s_p99_ms > 50),
    `shed: /stats says shedding=${during.shedding} with the last second's p99 at ${during.wheel_late_1s_p99_ms} ms`);
  const back = await pollUntil(server.port, (x) => x.status === 200, 3000);
  t.ok(back.r !== null, `shed: 200 comes back once the loop is quiet (${back.r ? (back.at - t0).toFixed(0) : '-'} ms after the spin)`,
    `statuses seen: ${back.seen.join(' ')}`);
  const after = await t.stats(server);
  t.eq(after.shedding, 0, 'shed: /stats says shedding=0 again');
  await t.stopOk(server, 'shed');
}

async function inFlight() {
  const server = await t.startServer(exe, ['--bench-routes', '--max-loop-delay', '50']);
  await started(server);
  // A request begun before the lag: its head and half its body.
  const early = await t.connect(server.port);
  early.sock.write(`POST /upload HTTP/1.1\r\n${t.H}Content-Length: 4\r\n\r\nab`);
  await t.waitStats(server, (s) => s.received_bytes > 0, 2000);
  t.ok(await spin(server.port), `in_flight: /spin?ms=${SPIN} answers 200`);
  const st = await t.waitStats(server, (s) => s.shedding === 1, 2000);
  t.eq(st.shedding, 1, 'in_flight: the server sheds within a second of the spin');
  const fresh = await request(server.port, '/');
  t.eq(fresh.status, 503, 'in_flight: a new request gets 503');
  early.sock.write('cd');
  await t.waitData(early, (d) => t.parseResponses(d).responses.length === 1);
  const r = t.parseResponses(early.data, ['POST']).responses[0];
  t.ok(r && r.status === 200 && r.body === 'received 4 bytes\n',
    'in_flight: the request begun before the shedding is answered 200', early.data.toString('latin1'));
  early.sock.destroy();
  await t.stopOk(server, 'in_flight');
}

async function off() {
  const server = await t.startServer(exe, ['--bench-routes']);
  const before = await started(server);
  t.eq(before.max_loop_delay_ms, 0, 'off: /stats says max_loop_delay_ms=0 by default');
  t.ok(await spin(server.port), `off: /spin?ms=${SPIN} answers 200`);
  const got = await pollUntil(server.port, (r) => r.status !== 200, 1500);
  t.ok(got.r === null && got.seen.length > 5,
    `off: the ${got.seen.length} requests of the next 1.5 s all get 200`, `statuses seen: ${got.seen.join(' ')}`);
  const st = await t.stats(server);
  t.ok(st.shed === 0 && st.shedding === 0, 'off: /stats says shed=0, shedding=0', `shed=${st.shed} shedding=${st.shedding}`);
  await t.stopOk(server, 'off');
}

async function retryAfter() {
  const server = await t.startServer(exe, ['--bench-routes', '--max-loop-delay', '50', '--retry-after', '3']);
  await started(server);
  t.ok(await spin(server.port), `retry_after: /spin?ms=${SPIN} answers 200`);
  const got = await pollUntil(server.port, (r) => r.status === 503, 2000);
  t.ok(got.r !== null && got.r.headers['retry-after'] === '3',
    'retry_after: the 503 says Retry-After: 3', got.r ? got.r.headers : `statuses seen: ${got.seen.join(' ')}`);
  await t.stopOk(server, 'retry_after');
}

async function workers() {
  const N = 16;
  const EACH = 100;
  const server = await t.startServer(exe, ['--bench-routes', '--workers', '2', '--max-loop-delay', '50']);
  await started(server);
  const before = await t.stats(server);
  // The kernel picks a connection's worker by a hash of its ports: a round
  // of N all on one worker (a chance of 2 in 2^N) is followed by another.
  const cs = [];
  for (let round = 0; round < 4 && (round === 0 || !t.took(before, await t.stats(server), 1).both); round++)
    for (let i = 0; i < N; i++) cs.push(await t.connect(server.port));
  // Each worker blocks for EACH ms per spin on its connections.
  for (const c of cs) c.sock.write(`GET /spin?ms=${EACH} HTTP/1.1\r\n${t.H}\r\n`);
  await Promise.all(cs.map((c) => t.waitResponses(c)));
  // A worker that shed after its first spins answers the spins it reads
  // later with 503: their bytes were read while it was shedding.
  const answers = cs.map((c) => t.parseResponses(c.data).responses);
  const spun = answers.filter((r) => r.length === 1 && r[0].status === 200 &&
    r[0].headers.connection === 'keep-alive').length;
  const shedNow = answers.filter((r) => r.length === 1 && r[0].status === 503 &&
    r[0].headers.connection === 'close').length;
  t.eq(spun + shedNow, cs.length, `workers: ${cs.length} keep-alive connections each had a /spin?ms=${EACH} answered, 200 or 503 (${spun} and ${shedNow})`);
  t.ok(spun >= 2, `workers: at least the first spin on each worker ran (${spun})`);
  t.bothTook('workers: the connections reached both workers', before, await t.stats(server));
  const t0 = performance.now();
  const got = await pollUntil(server.port, (r) => r.status === 503, 2500);
  t.ok(got.r !== null && got.r.headers.connection === 'close' && got.r.headers['retry-after'] === '10',
    `workers: new requests get 503 with Retry-After and Connection: close (${got.r ? (got.at - t0).toFixed(0) : '-'} ms after the spins)`,
    `statuses seen: ${got.seen.join(' ')}`);
  const during = await t.stats(server);
  t.ok(during.shed >= 1 && during.workers === 2, `workers: /stats stays reachable and sums shed=${during.shed}`);
  const back = await pollUntil(server.port, (x) => x.status === 200, 3000);
  t.ok(back.r !== null, 'workers: 200 comes back once the loops are quiet', `statuses seen: ${back.seen.join(' ')}`);
  cs.forEach((c) => c.sock.destroy());
  await t.stopOk(server, 'workers');
}

async function usage() {
  for (const args of [['--max-loop-delay', 'x'], ['--retry-after', '-1']]) {
    const r = spawnSync(exe, args, { encoding: 'utf8', timeout: 5000 });
    t.eq(r.status, 2, `usage: ${args.join(' ')} is refused with status 2`);
  }
}

t.run(() => t.runCases({ shed, in_flight: inFlight, off, retry_after: retryAfter, workers, usage }), 50000);
