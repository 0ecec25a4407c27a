'use strict';
// HTTP semantics a client relies on (TAP), with curl and raw sockets.
// usage: node test_http_semantics.js PATH/TO/http_server   (curl from $CURL or PATH)
//
// HEAD, Upgrade (ignored), CONNECT (405 and a clean close), Expect:
// 100-continue (100 before the body; 417 where the body would be refused),
// absolute-form targets, a half-closed client, 431 for a head above 16 KiB or
// too many headers, 413 for a body above the limit. Loopback only; a few
// seconds.
const { execFile } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const t = require('./http_test_lib');

const exe = process.argv[2];
const MAX_BODY = 100000;
const curlPath = process.env.CURL || t.which('curl');

// Runs curl; resolves { code, stdout, stderr }.
function curl(args) {
  return new Promise((resolve) => {
    execFile(curlPath, ['-sS', '--max-time', '10', ...args], { encoding: 'latin1' },
      (err, stdout, stderr) => resolve({ code: err ? err.code : 0, stdout, stderr }));
  });
}

async function testHead(port) {
  const r = await t.exchange(port,
    `GET / HTTP/1.1\r\n${t.H}\r\nHEAD / HTTP/1.1\r\n${t.H}\r\nGET /stats?x HTTP/1.1\r\n${t.H}Connection: close\r\n\r\n`);
  const { responses, rest } = t.parseResponses(r.data, ['GET', 'HEAD', 'GET']);
  t.eq(responses.length, 3, 'HEAD: GET, HEAD, GET on one connection: three responses');
  if (responses.length < 2) return;
  const [get, head] = responses;
  t.eq(head.status, 200, 'HEAD: 200');
  t.eq(head.headers['content-length'], get.headers['content-length'],
    'HEAD: the Content-Length of the GET');
  t.eq(head.head, get.head, 'HEAD: the same header lines as the GET');
  t.ok(responses[2] && responses[2].status === 404 && rest.length === 0,
    'HEAD: no body follows (the next bytes are the next response, nothing left over)',
    `next: ${JSON.stringify(responses[2] && responses[2].head)}, left over ${JSON.stringify(rest.toString())}`);
  if (!curlPath) { t.skip('HEAD: curl -I', 'curl not found'); return; }
  const c = await curl(['-I', `http://${t.HOST}:${port}/`]);
  t.ok(c.code === 0 && /^HTTP\/1\.1 200/.test(c.stdout) && /content-length: 6\r\n/i.test(c.stdout),
    'HEAD: curl -I gets 200 with Content-Length: 6', `curl exit ${c.code}: ${c.stdout}${c.stderr}`);
}

async function testUpgrade(port) {
  const r = await t.exchange(port,
    `GET / HTTP/1.1\r\n${t.H}Connection: Upgrade\r\nUpgrade: websocket\r\n` +
    `Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n` +
    `GET /delay?ms=0 HTTP/1.1\r\n${t.H}Connection: close\r\n\r\n`);
  const { responses } = t.parseResponses(r.data);
  t.ok(responses.length === 2 && responses[0].status === 200 && responses[0].body === 'hello\n',
    'Upgrade: ignored, the request answered 200 as plain HTTP/1.1',
    `got ${JSON.stringify(responses.map((x) => x.status))}: ${r.data.toString('latin1')}`);
  t.ok(responses.length === 2 && responses[1].status === 200 && responses[1].body === 'delayed 0 ms\n',
    'Upgrade: the connection still serves the next request');
  t.eq(r.ended, 'end', 'Upgrade: then a clean close, as the last request asked');
}

async function testConnect(port) {
  const r = await t.exchange(port,
    'CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n\x16\x03\x01\x00\x05hello-tunnel-bytes');
  const { responses } = t.parseResponses(r.data);
  t.ok(responses.length === 1 && responses[0].status === 405,
    'CONNECT: 405 Method Not Allowed', `got ${r.data.toString('latin1')}`);
  t.ok(responses.length === 1 && responses[0].headers.connection === 'close',
    'CONNECT: the response says Connection: close');
  t.eq(r.ended, 'end', 'CONNECT: the server closes cleanly (FIN, no reset), with the tunnel bytes unread');
}

async function testExpect(port) {
  // Raw: the 100 comes before any body byte is sent.
  const c = await t.connect(port);
  c.sock.write(`POST /upload HTTP/1.1\r\n${t.H}Content-Length: 5\r\nExpect: 100-continue\r\n\r\n`);
  await t.waitData(c, (d) => d.includes('\r\n\r\n'));
  const interim = c.data.toString('latin1');
  t.eq(interim, 'HTTP/1.1 100 Continue\r\n\r\n', 'Expect: 100 Continue arrives before the body is sent');
  c.sock.write('abcde');
  await t.waitData(c, (d) => t.parseResponses(d, ['POST']).responses.length === 2);
  const got = t.parseResponses(c.data, ['POST']).responses;
  t.ok(got.length === 2 && got[1].status === 200 && got[1].body === 'received 5 bytes\n',
    'Expect: then the body is read and answered', JSON.stringify(got.map((x) => x.body)));
  c.sock.destroy();

  // Raw: too large a body is refused before it is sent.
  const big = await t.exchange(port,
    `POST /upload HTTP/1.1\r\n${t.H}Content-Length: ${MAX_BODY + 1}\r\nExpect: 100-continue\r\n\r\n`);
  const bigR = t.parseResponses(big.data).responses;
  t.ok(bigR.length === 1 && bigR[0].status === 417 && big.ended === 'end',
    'Expect: 417 and a close for a body above the limit, with no 100 before it',
    big.data.toString('latin1'));

  // Raw: an expectation other than 100-continue (Node answers 417 too).
  const other = await t.exchange(port, `GET / HTTP/1.1\r\n${t.H}Expect: something-else\r\n\r\n`);
  const otherR = t.parseResponses(other.data).responses;
  t.ok(otherR.length === 1 && otherR[0].status === 417, 'Expect: 417 for an unknown expectation',
    other.data.toString('latin1'));

  if (!curlPath) { t.skip('Expect: curl', 'curl not found'); return; }
  const file = path.join(os.tmpdir(), `uvtw-expect-${process.pid}.bin`);
  fs.writeFileSync(file, Buffer.alloc(50000, 'x'));
  // --expect100-timeout 10: had the server not sent 100, curl would wait 10 s.
  const ok100 = await curl(['--expect100-timeout', '10', '-H', 'Expect: 100-continue',
    '--data-binary', `@${file}`, '-w', '\n%{http_code} %{time_total}', `http://${t.HOST}:${port}/upload`]);
  const [, code, secs] = /\n(\d+) ([\d.]+)$/.exec(ok100.stdout) || [];
  t.ok(ok100.code === 0 && code === '200' && ok100.stdout.startsWith('received 50000 bytes') &&
    Number(secs) < 2, `Expect: curl uploads 50000 bytes at once (${secs} s, not its 10 s wait)`,
  `curl exit ${ok100.code}: ${ok100.stdout}${ok100.stderr}`);
  fs.writeFileSync(file, Buffer.alloc(MAX_BODY + 1, 'x'));
  const refused = await curl(['--expect100-timeout', '10', '-H', 'Expect: 100-continue',
    '--data-binary', `@${file}`, '-o', '/dev/null', '-w', '%{http_code} %{size_upload} %{time_total}',
    `http://${t.HOST}:${port}/upload`]);
  fs.unlinkSync(file);
  const [rcode, sent, rsecs] = refused.stdout.split(' ');
  t.ok(rcode === '417' && Number(sent) === 0 && Number(rsecs) < 2,
    `Expect: curl gets 417 for ${MAX_BODY + 1} bytes and sends none of them (${rsecs} s)`,
    `got code ${rcode}, uploaded ${sent} bytes; ${refused.stderr}`);
}

async function testAbsoluteForm(port) {
  const raw = await t.exchange(port,
    `GET http://${t.HOST}:${port}/ HTTP/1.1\r\n${t.H}\r\n` +
    `GET http://a-very-long-host-name-that-would-not-fit-in-the-url-buffer.example:8080/delay?ms=3 HTTP/1.1\r\n${t.H}\r\n` +
    `GET http://${t.HOST} HTTP/1.1\r\n${t.H}Connection: close\r\n\r\n`);
  const got = t.parseResponses(raw.data).responses.map((r) => `${r.status} ${r.body.trim()}`);
  t.eq(JSON.stringify(got), JSON.stringify(['200 hello', '200 delayed 3 ms', '200 hello']),
    'absolute form: routed by the path (a long authority too; none means /)');
  if (!curlPath) { t.skip('absolute form: curl --request-target', 'curl not found'); return; }
  const c = await curl(['--request-target', `http://${t.HOST}:${port}/delay?ms=1`, `http://${t.HOST}:${port}/`]);
  t.eq(c.stdout, 'delayed 1 ms\n', 'absolute form: curl --request-target http://HOST:PORT/delay?ms=1');
}

// By default a client's EOF ends the requests it left pending (as nginx and
// Node); with --allow-half-open every one it sent is answered.
async function testHalfClose(port) {
  const both = `GET /delay?ms=300 HTTP/1.1\r\n${t.H}\r\nGET / HTTP/1.1\r\n${t.H}\r\n`;
  const gone = await t.exchange(port, both, { halfClose: true });
  t.ok(gone.data.length === 0 && gone.ended === 'end' && gone.ms < 300,
    `half-close: by default the EOF ends the pending requests: a close in ${gone.ms.toFixed(0)} ms, nothing written`,
    `${gone.ended}: ${gone.data.toString('latin1')}`);
  const server = await t.startServer(exe, ['--allow-half-open']);
  const r = await t.exchange(server.port, both, { halfClose: true });
  const got = t.parseResponses(r.data).responses;
  t.ok(got.length === 2 && got[0].body === 'delayed 300 ms\n' && got[1].body === 'hello\n',
    'half-close: --allow-half-open: both requests sent before the client shut down its side are answered, nothing else',
    `got ${r.data.toString('latin1')}`);
  t.ok(got.length === 2 && got[0].headers.connection === 'keep-alive' && got[1].headers.connection === 'close',
    'half-close: the last answer says Connection: close');
  t.eq(r.ended, 'end', 'half-close: then the server closes');
  t.ok(r.ms >= 299, `half-close: the /delay answer came when due (${r.ms.toFixed(0)} ms)`);
  await t.stop(server);
}

async function testLimits(port) {
  let many = '';
  for (let i = 0; i < 10000; i++) many += `X-H${i}: v\r\n`;
  let count = '';
  for (let i = 0; i < 2001; i++) count += `h${i}:\r\n`;
  const chunk = (MAX_BODY / 2).toString(16);
  const payload = 'c'.repeat(MAX_BODY / 2);
  const requests = [ // [request, status, whether a clean close must follow, check]
    [`GET / HTTP/1.1\r\n${t.H}X-Big: ${'a'.repeat(100 * 1024)}\r\n\r\n`, 431, true,
      '431: a 100 KiB header gets 431 and a clean close'],
    [`GET / HTTP/1.1\r\n${t.H}${many}\r\n`, 431, true, '431: 10,000 headers get 431 and a clean close'],
    [`GET / HTTP/1.1\r\n${count}\r\n`, 431, false,
      '431: 2,001 short headers (under 16 KiB) exceed maxHeadersCount 2000'],
    [`GET / HTTP/1.1\r\n${t.H}X-Fits: ${'a'.repeat(16000)}\r\nConnection: close\r\n\r\n`, 200, false,
      'a head just under 16 KiB gets 200'],
    [`POST /upload HTTP/1.1\r\n${t.H}Content-Length: ${MAX_BODY + 1}\r\n\r\n${'b'.repeat(MAX_BODY + 1)}`, 413, true,
      `413: a Content-Length above ${MAX_BODY} gets 413 and a clean close`],
    [`POST /upload HTTP/1.1\r\n${t.H}Transfer-Encoding: chunked\r\n\r\n` +
      `${chunk}\r\n${payload}\r\n${chunk}\r\n${payload}\r\n1\r\nc\r\n0\r\n\r\n`, 413, false,
    '413: a chunked body that grows past the limit'],
  ];
  for (const [text, status, closes, check] of requests) {
    const r = await t.exchange(port, text);
    const got = t.parseResponses(r.data).responses;
    t.ok(got.length === 1 && got[0].status === status && (!closes || r.ended === 'end'), check,
      `${r.ended}: ${r.data.toString('latin1').slice(0, 200)}`);
  }

  const fits = await t.exchange(port,
    `POST /upload HTTP/1.1\r\n${t.H}Content-Length: ${MAX_BODY}\r\nConnection: close\r\n\r\n${'b'.repeat(MAX_BODY)}`);
  const fr = t.parseResponses(fits.data, ['POST']).responses;
  t.ok(fr.length === 1 && fr[0].body === `received ${MAX_BODY} bytes\n`, `a body of exactly ${MAX_BODY} bytes is taken`,
    fits.data.toString('latin1').slice(0, 200));
}

async function main() {
  const server = await t.startServer(exe, ['--max-body-size', String(MAX_BODY)]);
  t.ok(server.port > 0, `server started (port ${server.port})`);
  if (!curlPath) t.diag('curl not found: its checks are skipped');
  await testHead(server.port);
  await testUpgrade(server.port);
  await testConnect(server.port);
  await testExpect(server.port);
  await testAbsoluteForm(server.port);
  await testHalfClose(server.port);
  await testLimits(server.port);
  const st = await t.stats(server);
  t.diag(`server: requests=${st.requests} closed_bad_request=${st.closed_bad_request} ` +
    `linger_timeouts=${st.linger_timeouts} early_fires=${st.early_fires}`);
  t.eq(st.open, 1, 'server: no connection left open but the one asking for /stats');
  t.eq((await t.stop(server)).code, 0, 'server exits 0 on SIGTERM');
}

t.run(main, 50000);
