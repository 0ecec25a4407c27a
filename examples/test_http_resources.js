'use strict';
// Resources under clients that do not play along (TAP).
// usage: node test_http_resources.js PATH/TO/http_server
//
// 1. Pipelining clients that never read (GET /bytes?n=65536 over and over):
//    the server keeps at most PENDING_MAX bytes of further requests, stops
//    reading, and closes each connection at --send-timeout.
// 2. Accept without memory (--fail-accept-allocs N): the connection waits
//    in the listener, neither dropped nor spun on, until memory returns.
// 3. The lateness at /stats: a /spin?ms=1200 blocks the loop across the
//    once-a-second copy of the wheel's statistics, on 1 and 2 workers.
// Loopback only; about 15 s.
const { once } = require('events');
const t = require('./http_test_lib');

const exe = process.argv[2];
const { H, get, cpuSeconds } = t;

async function nonReaders() {
  const SEND_TIMEOUT = 500;
  const N = 20;
  const server = await t.startServer(exe, ['--bench-routes', '--send-timeout', String(SEND_TIMEOUT)]);
  const before = await t.stats(server);
  // 64 KiB answers fill the client's receive buffer and the server's send
  // buffer after a few hundred requests.
  const chunk = Buffer.from(`GET /bytes?n=65536 HTTP/1.1\r\n${H}\r\n`.repeat(100));
  const clients = await Promise.all(Array.from({ length: N }, async () => {
    const c = await t.connect(server.port, { timeoutMs: 20000 });
    c.sock.pause(); // never reads
    let sent = 0;
    // Write until the connection stays full for 300 ms (at most 64 MiB).
    while (sent < 64 * 1024 * 1024 && c.ended === null) {
      sent += chunk.length;
      if (!c.sock.write(chunk)) {
        const drained = await Promise.race([once(c.sock, 'drain').then(() => true), t.sleep(300).then(() => false)]);
        if (!drained) break;
      }
    }
    c.stalledAt = performance.now();
    c.sent = sent;
    return c;
  }));
  const stalled = Math.max(...clients.map((c) => c.stalledAt));
  const mid = await t.stats(server);
  const st = await t.waitStats(server, (s) => s.closed_send_timeout >= N && s.buffered_bytes === 0,
    SEND_TIMEOUT + 5000);
  const closedAfter = performance.now() - stalled;
  const sentMiB = clients.reduce((a, c) => a + c.sent, 0) / (1024 * 1024);
  t.diag(`non-readers: ${N} clients pipelined ${sentMiB.toFixed(1)} MiB without reading; ` +
    `when the last stalled the server had ${mid.open} open, rss ${mid.rss_kib} KiB (${before.rss_kib} before), ` +
    `held ${mid.buffered_bytes} bytes; ` +
    `closed_send_timeout=${st.closed_send_timeout} ${closedAfter.toFixed(0)} ms after the last client stalled`);
  t.eq(st.closed_send_timeout, N, `non-readers: all ${N} closed by the send timeout`);
  t.ok(closedAfter <= SEND_TIMEOUT + 2000,
    `non-readers: closed within send timeout + 2 s of the last stall (${closedAfter.toFixed(0)} ms)`);
  // Per connection at most PENDING_MAX (64 KiB) + one read (64 KiB) of kept
  // requests and one queued answer (64 KiB + headers).
  const bound = N * 200 * 1024;
  t.ok(st.buffered_bytes_peak <= bound,
    `non-readers: bytes the server held stayed bounded (peak ${st.buffered_bytes_peak} for ${sentMiB.toFixed(1)} MiB sent)`,
    `expected <= ${bound}`);
  t.eq(st.buffered_bytes, 0, 'non-readers: and all were freed');
  // The clients see the close once they read.
  for (const c of clients) c.sock.resume();
  await Promise.race([Promise.all(clients.map((c) => c.done)), t.sleep(3000)]);
  t.ok(clients.every((c) => c.ended !== null && c.ended !== 'timeout'),
    'non-readers: each client finds its connection closed when it reads',
    clients.map((c) => c.ended).join(' '));
  t.eq(st.early_fires, 0, 'non-readers: no timeout fired before its deadline');
  await t.stopOk(server, 'non-readers');
}

async function acceptNoMemory() {
  const FAILS = 40; // 40 retries 50 ms apart: 2 s without memory
  const server = await t.startServer(exe, ['--bench-routes', '--fail-accept-allocs', String(FAILS)]);
  const cpu0 = cpuSeconds(server.proc.pid);
  const first = await get(server.port, '/', 10000);
  const cpu = cpuSeconds(server.proc.pid) - cpu0;
  t.ok(first.status === 200 && first.body === 'hello\n',
    `no memory at accept: the waiting connection is served once memory returns (${first.ms.toFixed(0)} ms)`,
    JSON.stringify(first));
  t.ok(cpu < 0.3, `no memory at accept: no spinning meanwhile (${cpu.toFixed(2)} s of CPU in ${(first.ms / 1000).toFixed(1)} s)`);
  const more = await Promise.all(Array.from({ length: 20 }, () => get(server.port, '/')));
  t.ok(more.every((r) => r.status === 200), 'no memory at accept: then 20 more clients are served',
    JSON.stringify(more.filter((r) => r.status !== 200)));
  const st = await t.stats(server);
  t.eq(st.accept_nomem, FAILS, 'no memory at accept: every injected failure was counted');
  t.eq(st.accepted, 22, 'no memory at accept: every connection was accepted once (1 + 20 + /stats)');
  await t.stopOk(server, 'no memory at accept');
}

// A lateness key of /stats: a number of ms, or '-' when no callback ran in
// the window.
function isLateness(v) {
  return v === '-' || (Number.isInteger(v) && v >= 0);
}

const LATE_KEYS = ['wheel_late_1s_p50_ms', 'wheel_late_1s_p99_ms', 'wheel_late_1s_max_ms',
  'wheel_late_p50_ms', 'wheel_late_p99_ms'];

async function lateness(name, args) {
  const SPIN = 1200;
  const server = await t.startServer(exe, ['--bench-routes', ...args]);
  const first = await t.stats(server);
  const bad = LATE_KEYS.filter((k) => !isLateness(first[k]));
  t.ok(bad.length === 0, `${name}: /stats has ${LATE_KEYS.join(', ')}, each ms or '-'`,
    `not so: ${bad.map((k) => `${k}=${first[k]}`).join(' ')}`);
  // The first copy a second after the start makes the window non-empty: the
  // copying timer's own callback is in it.
  const quiet = await t.waitStats(server, (s) => Number.isInteger(s.wheel_late_1s_p99_ms), 3000);
  t.ok(Number.isInteger(quiet.wheel_late_1s_p50_ms) && quiet.wheel_late_1s_p50_ms <= quiet.wheel_late_1s_p99_ms &&
    quiet.wheel_late_1s_p99_ms <= quiet.wheel_late_1s_max_ms && quiet.wheel_late_1s_max_ms <= quiet.wheel_late_max_ms * 1.25 + 1,
    `${name}: once a second has passed, p50 <= p99 <= max for the last second ` +
    `(${quiet.wheel_late_1s_p50_ms}, ${quiet.wheel_late_1s_p99_ms}, ${quiet.wheel_late_1s_max_ms} ms)`,
    LATE_KEYS.map((k) => `${k}=${quiet[k]}`).join(' '));
  t.ok(Number.isInteger(quiet.wheel_late_p50_ms) && quiet.wheel_late_p50_ms <= quiet.wheel_late_p99_ms,
    `${name}: since start, p50 <= p99 (${quiet.wheel_late_p50_ms}, ${quiet.wheel_late_p99_ms} ms)`);
  // Sampling runs while there is work: an idle server sleeps (about 35
  // wakeups in 3 s, a last round of the 32 samplers after the /stats
  // connection and the copy each second, against 300 when sampling always).
  const before = await t.stats(server);
  await t.sleep(3000);
  const woken = (await t.stats(server)).wheel_wakeups - before.wheel_wakeups;
  t.ok(woken < 100, `${name}: an idle server is not woken 100 times a second (${woken} wakeups in 3 s)`);
  const spun = await get(server.port, `/spin?ms=${SPIN}`, SPIN + 5000);
  t.ok(spun.status === 200 && spun.body === `spun ${SPIN} ms\n` && spun.ms >= SPIN,
    `${name}: /spin?ms=${SPIN} answers after blocking the loop (${spun.ms.toFixed(0)} ms)`, JSON.stringify(spun));
  // The copy due during the spin ran at least SPIN - 1000 ms late, and it
  // ends the last completed second, until the next copy a second later.
  const late = SPIN - 1000;
  const st = await t.waitStats(server, (s) => s.wheel_late_1s_p99_ms >= late, 800);
  t.ok(st.wheel_late_1s_p99_ms >= late && st.wheel_late_1s_max_ms >= late,
    `${name}: after the spin the last second's p99 and max are at least ${late} ms ` +
    `(${st.wheel_late_1s_p99_ms}, ${st.wheel_late_1s_max_ms})`,
    LATE_KEYS.map((k) => `${k}=${st[k]}`).join(' '));
  t.ok(st.wheel_late_max_ms >= late, `${name}: and so is the largest since start (${st.wheel_late_max_ms} ms)`);
  const bad400 = await get(server.port, '/spin?ms=10001');
  t.eq(bad400.status, 400, `${name}: /spin?ms=10001 gets 400 (at most 10000)`);
  await t.stopOk(server, name);
}

async function main() {
  await nonReaders();
  await acceptNoMemory();
  await lateness('lateness', []);
  await lateness('lateness, 2 workers', ['--workers', '2']);
}

t.run(main, 50000);
