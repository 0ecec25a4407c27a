'use strict';
// The server against hostile clients (TAP), on raw sockets: each point of
// examples/README.md, "Hostile clients" (its test table says what each case
// checks).
// usage: node test_http_hostile.js PATH/TO/http_server [CASE...]
//        cases: smuggling, host, version, expect, bytes, bench (one server), gone, buffered, ahead, fds
// Loopback only; about 10 s.
const t = require('./http_test_lib');

const exe = process.argv[2];

// Sends `text` and returns the statuses answered and how it ended.
async function answers(port, text, timeoutMs = 5000) {
  const r = await t.exchange(port, text, { timeoutMs });
  return { statuses: t.parseResponses(r.data).responses.map((x) => x.status), ended: r.ended, r };
}

const second = `GET /stats HTTP/1.1\r\n${t.H}\r\n`;
const smuggled = {
  'a head ended by CR CR X': `GET / HTTP/1.1\r\n${t.H}\rX${second}`,
  'chunk data without its CRLF': `POST /upload HTTP/1.1\r\n${t.H}Transfer-Encoding: chunked\r\n\r\n` +
    `4\r\nAAAAXX0\r\n\r\n${second}`,
  'a space in a header name': `POST /upload HTTP/1.1\r\n${t.H}Content Length: 5\r\n\r\n${second}`,
  'an empty header name': `POST /upload HTTP/1.1\r\n${t.H}: chunked\r\n\r\n${second}`,
  'Transfer-Encoding in HTTP/1.0': 'POST /upload HTTP/1.0\r\nConnection: keep-alive\r\n' +
    `Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n${second}`,
};

// Framing a server in front may read otherwise (RFC 9112 6.1, 6.3): each is
// followed by a hidden request, which must never be answered.
const hidden = `GET /SMUGGLED HTTP/1.1\r\n${t.H}\r\n`;
const post = `POST /upload HTTP/1.1\r\n${t.H}`;
const faulty = {
  'an empty Transfer-Encoding with Content-Length': `${post}Transfer-Encoding:\r\nContent-Length: 5\r\n\r\nhello`,
  'a whitespace Transfer-Encoding with Content-Length': `${post}Transfer-Encoding:  \t \r\nContent-Length: 5\r\n\r\nhello`,
  'Content-Length, then an empty Transfer-Encoding': `${post}Content-Length: 5\r\nTransfer-Encoding:\r\n\r\nhello`,
  'Content-Length, then Transfer-Encoding: chunked': `${post}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
  'an empty Transfer-Encoding alone': `${post}Transfer-Encoding:\r\n\r\n`,
  'HTTP/1.0 keep-alive, an empty Transfer-Encoding': 'POST /upload HTTP/1.0\r\nConnection: keep-alive\r\n' +
    'Transfer-Encoding:\r\nContent-Length: 5\r\n\r\nhello',
};
const unimplemented = {
  'gzip, chunked': `${post}Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n`,
  'identity, chunked': `${post}Transfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n`,
  'identity and chunked on two lines': `${post}Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
  'chunked twice on two lines': `${post}Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
  'chunked, gzip': `${post}Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n`,
  'gzip': `${post}Transfer-Encoding: gzip\r\n\r\n`,
  'a 300-byte coding list': `${post}Transfer-Encoding: ${'gzip, '.repeat(50)}chunked\r\n\r\n0\r\n\r\n`,
};

async function caseSmuggling(server) {
  for (const [what, text] of Object.entries(smuggled)) {
    const a = await answers(server.port, text);
    t.ok(a.statuses.length === 1 && a.statuses[0] === 400 && a.ended === 'end',
      `smuggling: ${what}: one 400 and a close`, `${a.ended}: ${a.statuses.join(' ')}`);
  }
  for (const [codes, shapes] of [[400, faulty], [501, unimplemented]]) {
    for (const [what, text] of Object.entries(shapes)) {
      const a = await answers(server.port, text + hidden);
      t.ok(a.statuses.join() === String(codes) && a.ended === 'end',
        `smuggling: ${what}: one ${codes} and a close`, `${a.ended}: ${a.statuses.join(' ')}`);
    }
  }
  const ok = await answers(server.port, `${post}Transfer-Encoding: Chunked \r\nConnection: close\r\n\r\n0\r\n\r\n`);
  t.eq(ok.statuses.join(), '200', 'smuggling: Transfer-Encoding: Chunked (any case, trailing space) is read');
}

async function caseHost(server) {
  const bad = {
    'no Host': 'GET / HTTP/1.1\r\n\r\n',
    'two Host lines': 'GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n',
    'Host: a, b': 'GET / HTTP/1.1\r\nHost: a, b\r\n\r\n',
    'Host: a,b': 'GET / HTTP/1.1\r\nHost: a,b\r\n\r\n',
    'Host: x:80:90': 'GET / HTTP/1.1\r\nHost: x:80:90\r\n\r\n',
    'Host: [::1': 'GET / HTTP/1.1\r\nHost: [::1\r\n\r\n',
    'Host: [::1]x': 'GET / HTTP/1.1\r\nHost: [::1]x\r\n\r\n',
    'Host: x:65536': 'GET / HTTP/1.1\r\nHost: x:65536\r\n\r\n',
    'Host: x:8a': 'GET / HTTP/1.1\r\nHost: x:8a\r\n\r\n',
    'Host: a b': 'GET / HTTP/1.1\r\nHost: a b\r\n\r\n',
    'Host: a/b': 'GET / HTTP/1.1\r\nHost: a/b\r\n\r\n',
    'a 300-byte Host': `GET / HTTP/1.1\r\nHost: ${'h'.repeat(300)}\r\n\r\n`,
  };
  for (const [what, text] of Object.entries(bad)) {
    const a = await answers(server.port, text);
    t.ok(a.statuses.length === 1 && a.statuses[0] === 400 && a.ended === 'end',
      `host: HTTP/1.1 with ${what}: 400 and a close`, `${a.ended}: ${a.statuses.join(' ')}`);
  }
  const old = await answers(server.port, 'GET / HTTP/1.0\r\n\r\n');
  t.eq(old.statuses.join(), '200', 'host: HTTP/1.0 without Host is answered');
  for (const host of [`${t.HOST}:8080`, '[::1]:80', '[::ffff:127.0.0.1]', 'example.com', 'xn--bcher-kva.example:443 ']) {
    const a = await answers(server.port, `GET / HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
    t.eq(a.statuses.join(), '200', `host: Host: ${host} is answered`);
  }
}

async function caseVersion(server) {
  for (const v of ['2.0', '3.0', '0.9']) {
    const a = await answers(server.port, `GET / HTTP/${v}\r\n${t.H}\r\n`);
    t.ok(a.statuses.join() === '505' && a.ended === 'end', `version: HTTP/${v}: 505 and a close`,
      `${a.ended}: ${a.statuses.join(' ')}`);
  }
  const a = await answers(server.port, `GET / HTTP/1.2\r\n${t.H}\r\n${second}`.replace(/\r\n$/, 'Connection: close\r\n\r\n'));
  t.eq(a.statuses.join(), '200,200', 'version: HTTP/1.2 is HTTP/1.1 (kept alive)');
}

async function caseExpect(server) {
  const a = await answers(server.port,
    `${post}Expect: 100-continue \t\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi`);
  t.eq(a.statuses.join(), '100,200', 'expect: 100-continue with trailing whitespace is met');
}

async function caseBytes(server) {
  const chunked = `POST /upload HTTP/1.1\r\n${t.H}Transfer-Encoding: chunked\r\n\r\n`;
  const big = {
    'a header value after 1 MiB of spaces':
      [`GET / HTTP/1.1\r\n${t.H}X-Pad: ${' '.repeat(1 << 20)}v\r\n\r\n`, 431],
    'a 4 MiB chunk extension': [`${chunked}1;${'e'.repeat(4 << 20)}\r\nx\r\n0\r\n\r\n`, 413],
    '20 KB of trailers': [`${chunked}1\r\nx\r\n0\r\nX-Trailer: ${'t'.repeat(20000)}\r\n\r\n`, 413],
    '2,000 chunks with 40-byte extensions': [`${chunked}${`1;${'e'.repeat(40)}\r\nx\r\n`.repeat(2000)}0\r\n\r\n`, 413],
  };
  for (const [what, [text, code]] of Object.entries(big)) {
    const a = await answers(server.port, text);
    t.ok(a.statuses.length === 1 && a.statuses[0] === code && a.ended === 'end',
      `bytes: ${what}: ${code} and a close`, `${a.ended}: ${a.statuses.join(' ')}`);
  }
  const small = {
    '3,000 chunks of 100 B': `${'64\r\n'}${'d'.repeat(100)}\r\n`.repeat(3000),
    '20,000 chunks of 1 B': '1\r\nd\r\n'.repeat(20000),
  };
  for (const [what, chunks] of Object.entries(small)) {
    const a = await answers(server.port, `${chunked.replace('\r\n\r\n', '\r\nConnection: close\r\n\r\n')}${chunks}0\r\n\r\n`);
    t.eq(a.statuses.join(), '200', `bytes: a body of ${what} is read`);
  }
}

// A client's EOF during /delay ends its request (the default, as nginx and
// Node): closed at once, its task cancelled, not a byte written (no probe),
// whether it closed or only half-closed. With --allow-half-open the answer
// comes when due, past --send-timeout (which bounds only a queued answer).
async function caseGone() {
  const server = await t.startServer(exe, []); // the default timeouts: 30 s to send
  for (const [n, how] of [[1, 'closed'], [2, 'half-closed']]) {
    const c = await t.connect(server.port);
    c.sock.write(`GET /delay?ms=3600000 HTTP/1.1\r\n${t.H}\r\n`);
    await t.waitStats(server, (st) => st.delay_scheduled === n, 2000);
    const left = performance.now();
    if (how === 'closed') c.sock.destroy(); else c.sock.end();
    const st = await t.waitStats(server, (x) => x.delay_cancelled === n && x.open === 1, 5000);
    const ms = performance.now() - left;
    if (how !== 'closed') await c.done;
    t.ok(st.delay_cancelled === n && st.closed_client_gone === n && st.open === 1 && ms < 500,
      `gone: a client that ${how} during /delay?ms=3600000 is let go in ${ms.toFixed(0)} ms, its task cancelled (closed_client_gone)`,
      `delay_cancelled=${st.delay_cancelled} closed_client_gone=${st.closed_client_gone} open=${st.open}`);
    if (how !== 'closed') t.ok(c.data.length === 0 && c.ended === 'end', 'gone: ... and not a byte written to it',
      `${c.ended}: ${c.data.toString('latin1')}`);
  }
  await t.stopOk(server, 'gone'); // nothing left in flight

  const half = await t.startServer(exe, ['--allow-half-open', '--send-timeout', '300']);
  const r = await t.exchange(half.port, `GET /delay?ms=1000 HTTP/1.1\r\n${t.H}\r\n`, { halfClose: true });
  const got = t.parseResponses(r.data).responses;
  t.ok(got.length === 1 && got[0].status === 200 && r.ended === 'end' && r.ms >= 999,
    `gone: --allow-half-open: a half-closed client gets its answer when due (${r.ms.toFixed(0)} ms), past --send-timeout 300, nothing else`,
    `${r.ended}: ${r.data.toString('latin1')}`);
  await t.stopOk(half, 'gone: --allow-half-open');
}

async function caseBuffered() {
  const CAP = 1 << 20;
  const server = await t.startServer(exe, ['--bench-routes', '--max-buffered', String(CAP)]);
  const get = `GET /bytes?n=1048576 HTTP/1.1\r\n${t.H}\r\n`.repeat(16);
  const clients = [];
  for (let i = 0; i < 12; i++) {
    const c = await t.connect(server.port, { timeoutMs: 8000 });
    c.sock.pause(); // never reads
    c.sock.write(get);
    clients.push(c);
  }
  const st = await t.waitStats(server, (x) => x.closed_slow_reader > 0, 4000);
  t.ok(st.closed_slow_reader > 0, `buffered: clients that do not read are cut (${st.closed_slow_reader})`);
  // Once the answers the kernel took are written: at most the cap, one
  // answer, and what each client pipelined.
  await t.sleep(300);
  const held = (await t.stats(server)).buffered_bytes;
  const bound = CAP + (1 << 20) + 4096 + clients.length * (128 << 10);
  t.ok(held <= bound, `buffered: the server holds at most ${bound} bytes for them (${held})`);
  for (const c of clients) c.sock.destroy();
  const after = await t.waitStats(server, (x) => x.buffered_bytes === 0, 3000);
  t.eq(after.buffered_bytes, 0, 'buffered: their memory is given back');
  await t.stop(server);
}

// Every byte a client makes the server hold counts against the caps:
// clients that pipeline 130 KiB behind an hour-long /delay keep 64 KiB
// each, a quarter of --max-buffered in all, those holding the most cut;
// a client reading 3 MiB of answers as they come is never the one cut.
async function caseAhead() {
  const CAP = 2 << 20;
  const server = await t.startServer(exe, ['--bench-routes', '--max-buffered', String(CAP), '--shutdown-grace', '100']);
  const pad = `GET / HTTP/1.1\r\n${t.H}X-Pad: ${'p'.repeat(1000)}\r\n\r\n`.repeat(133);
  const attackers = [];
  for (let i = 0; i < 30; i++) {
    const c = await t.connect(server.port, { timeoutMs: 15000 });
    c.sock.write(`GET /delay?ms=3600000 HTTP/1.1\r\n${t.H}\r\n${pad}`);
    attackers.push(c);
  }
  await t.sleep(300);
  const mid = await t.stats(server);
  t.ok(mid.buffered_bytes <= CAP / 4 + 65536 && mid.closed_read_ahead > 0,
    `ahead: 30 clients pipelining 130 KiB hold ${mid.buffered_bytes} bytes (<= a quarter of ${CAP} + 64 KiB), ` +
    `those holding the most cut (closed_read_ahead=${mid.closed_read_ahead})`);
  const reader = await t.connect(server.port, { timeoutMs: 15000 });
  reader.sock.write(`GET /bytes?n=1048576 HTTP/1.1\r\n${t.H}\r\n`.repeat(2) +
    `GET /bytes?n=1048576 HTTP/1.1\r\n${t.H}Connection: close\r\n\r\n`);
  await reader.done;
  const got = t.parseResponses(reader.data).responses;
  const st = await t.stats(server);
  t.ok(got.length === 3 && got.every((x) => x.status === 200 && x.body.length === 1048576),
    `ahead: a client reading 3 MiB of answers gets them all (${got.length})`, reader.ended);
  t.eq(st.closed_slow_reader, 0, 'ahead: and is not cut (closed_slow_reader=0)');
  // Those not cut are not read until their answer is written (back-pressure),
  // so their leaving is seen at the shutdown.
  const left = attackers.filter((c) => c.ended === null).length;
  t.ok(st.open === left + 1 && st.buffered_bytes <= left * 65536,
    `ahead: those cut gave their memory back (${st.buffered_bytes} bytes for ${left} left)`);
  for (const c of attackers) c.sock.destroy();
  await t.stopOk(server, 'ahead');
}

async function caseBench(server) {
  for (const route of ['/spin?ms=10', '/bytes?n=10']) {
    const r = await t.get(server.port, route);
    t.eq(r.status, 404, `bench: ${route} is 404 without --bench-routes`);
  }
}

// With one worker and with two (which take descriptors from one process at
// the same time): a client is answered or waits in the backlog, never
// accepted and closed unanswered.
async function caseDescriptors(workers) {
  const LIMIT = 40;
  const server = await t.startServer(exe, ['--workers', String(workers)],
    ['sh', '-c', `ulimit -n ${LIMIT} && exec "$0" "$@"`]);
  t.diag(`fds: --workers ${workers}`);
  const held = [];
  for (let i = 0; i < 2 * LIMIT; i++) held.push(await t.connect(server.port, { timeoutMs: 15000 }));
  const late = await t.connect(server.port, { timeoutMs: 15000 });
  late.sock.write(`GET / HTTP/1.1\r\n${t.H}Connection: close\r\n\r\n`);
  await t.sleep(300);
  const cpu0 = t.cpuSeconds(server.proc.pid);
  await t.sleep(1000);
  const cpu = t.cpuSeconds(server.proc.pid) - cpu0;
  t.ok(held.every((c) => c.ended === null), 'fds: connections beyond the descriptors wait, none dropped',
    `${held.filter((c) => c.ended !== null).length} of ${held.length} closed unanswered`);
  t.ok(cpu < 0.2, `fds: no spinning while out of descriptors (${cpu.toFixed(2)} s of CPU in 1 s)`);
  for (const c of held) c.sock.destroy();
  await late.done;
  t.eq(t.single(late)?.status, 200, 'fds: a request that waited is answered once descriptors are free');
  let r = { status: 0 };
  const t0 = performance.now();
  while (r.status !== 200 && performance.now() - t0 < 3000) {
    r = await t.get(server.port, '/', 1000);
    if (r.status !== 200) await t.sleep(50);
  }
  t.eq(r.status, 200, `fds: new clients are served again (${(performance.now() - t0).toFixed(0)} ms)`);
  // The server closes each released connection when it reads its end, which
  // may come after the request above: wait up to 2 s for the count to settle.
  const st = await t.waitStats(server, (s) => s.open === 1, 2000);
  t.diag(`fds: accepted=${st.accepted} accept_errors=${st.accept_errors} open=${st.open}`);
  t.eq(st.open, 1, 'fds: nothing left open but the /stats connection');
  t.ok(st.fd_exhausted >= 1, `fds: /stats counts the exhaustion (fd_exhausted=${st.fd_exhausted})`);
  const m = await t.get(server.port, '/metrics');
  t.ok(/^http_server_fd_exhausted_total(\{[^}]*\})? [1-9]/m.test(m.body), 'fds: /metrics shows it (http_server_fd_exhausted_total)');
  const logged = (server.err.match(/out of descriptors/g) || []).length;
  t.eq(logged, 1, 'fds: logged once for the burst');
  await t.stopOk(server, 'fds');
}

async function main() {
  const server = await t.startServer(exe, []);
  if (t.want('smuggling')) await caseSmuggling(server);
  if (t.want('host')) await caseHost(server);
  if (t.want('version')) await caseVersion(server);
  if (t.want('expect')) await caseExpect(server);
  if (t.want('bytes')) await caseBytes(server);
  if (t.want('bench')) await caseBench(server);
  await t.stop(server);
  if (t.want('gone')) await caseGone();
  if (t.want('buffered')) await caseBuffered();
  if (t.want('ahead')) await caseAhead();
  if (t.want('fds')) {
    await caseDescriptors(1);
    await caseDescriptors(2);
  }
}

t.run(main, 50000);
