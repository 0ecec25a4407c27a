'use strict';
// GET /metrics, checked by Prometheus's own tools (TAP).
// usage: node test_http_metrics.js PATH/TO/http_server [CASE...]
//        cases: page, promtool, prometheus (the last two skipped, saying
//        so, without Debian's prometheus or promtool)
//
// prometheus: a real Prometheus scrapes the server every second, run as an
// operator would (--workers 2, no other flag), and answers the p99 query of
// examples/README.md, "Prometheus", below 0.05 s on the quiet server and
// at least 0.2 s within 5 s after the process stalled 300 ms (SIGSTOP,
// SIGCONT). Loopback only; about 25 s with Prometheus.
const { spawn, spawnSync } = require('child_process');
const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');
const t = require('./http_test_lib');

const exe = process.argv[2];
const QUERY =
  'histogram_quantile(0.99, sum by (le) (rate(uvtw_timer_lateness_seconds_bucket[5s])))';

// The samples of a page: [{ name, labels: {k: v}, value }].
function samples(page) {
  const out = [];
  for (const line of page.split('\n')) {
    const m = /^([a-z_]+)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const kv of (m[2] || '').split(',').filter((s) => s !== '')) {
      const [k, v] = kv.split('=');
      labels[k] = v.replace(/^"|"$/g, '');
    }
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

async function casePage() {
  const s = await t.startServer(exe, ['--workers', '2']);
  await t.get(s.port, '/');
  const r = await t.get(s.port, '/metrics');
  t.eq(r.status, 200, 'page: GET /metrics answers 200');
  t.eq(r.type, 'text/plain; version=0.0.4; charset=utf-8', 'page: the Prometheus text format, 0.0.4');
  const all = samples(r.body);
  const families = new Set(all.filter((x) => !x.name.startsWith('process_')).map((x) => x.name));
  let bothWorkers = true;
  for (const f of families) {
    const workers = new Set(all.filter((x) => x.name === f).map((x) => x.labels.worker));
    if (!(workers.has('0') && workers.has('1') && workers.size === 2)) bothWorkers = false;
  }
  t.ok(families.size >= 15 && bothWorkers, `page: ${families.size} families, each with worker="0" and worker="1"`);
  for (const w of ['0', '1']) {
    const buckets = all.filter((x) => x.name === 'uvtw_timer_lateness_seconds_bucket' && x.labels.worker === w);
    const les = buckets.map((x) => (x.labels.le === '+Inf' ? Infinity : Number(x.labels.le)));
    const cumulative = buckets.every((x, i) => i === 0 || (x.value >= buckets[i - 1].value && les[i] > les[i - 1]));
    const count = all.find((x) => x.name === 'uvtw_timer_lateness_seconds_count' && x.labels.worker === w);
    const sum = all.find((x) => x.name === 'uvtw_timer_lateness_seconds_sum' && x.labels.worker === w);
    t.ok(buckets.length === 74 && cumulative && les[les.length - 1] === Infinity &&
         count && buckets[buckets.length - 1].value === count.value && sum && sum.value >= 0,
    `page: worker ${w}: 74 cumulative buckets ending in +Inf == _count, and a _sum`,
    `${buckets.length} buckets, cumulative ${cumulative}, count ${count && count.value}, sum ${sum && sum.value}`);
  }
  const ok2xx = all.filter((x) => x.name === 'http_server_responses_total' && x.labels.class === '2xx')
    .reduce((a, x) => a + x.value, 0);
  t.ok(ok2xx >= 1, `page: the GET / counts in http_server_responses_total{class="2xx"} (${ok2xx})`);
  const rss = all.find((x) => x.name === 'process_resident_memory_bytes');
  const fds = all.find((x) => x.name === 'process_open_fds');
  t.ok(rss && rss.value > 1e6 && fds && fds.value >= 4,
    `page: process_resident_memory_bytes ${rss && rss.value}, process_open_fds ${fds && fds.value}`);
  await t.stop(s);
  return r.body;
}

async function casePromtool(page) {
  const promtool = t.which('promtool');
  if (promtool === null) {
    t.skip('promtool: check metrics', 'promtool not found (Debian package prometheus)');
    return;
  }
  const r = spawnSync(promtool, ['check', 'metrics'], { input: page, encoding: 'utf8' });
  t.ok(r.status === 0 && (r.stdout + r.stderr).trim() === '',
    'promtool: `promtool check metrics` finds no error and no warning', r.stdout + r.stderr);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, t.HOST, () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

async function query(promPort, expr) {
  const r = await t.get(promPort, `/api/v1/query?query=${encodeURIComponent(expr)}`);
  if (r.status !== 200) throw new Error(`Prometheus: ${r.error || r.status}`);
  const j = JSON.parse(r.body);
  const v = j.data && j.data.result && j.data.result[0];
  return v ? Number(v.value[1]) : NaN;
}

async function casePrometheus() {
  const prometheus = t.which('prometheus');
  if (prometheus === null) {
    t.skip('prometheus: a real Prometheus scrapes /metrics', 'prometheus not found (Debian package prometheus)');
    return;
  }
  const s = await t.startServer(exe, ['--workers', '2']);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'uvtw-prometheus-'));
  const promPort = await freePort();
  fs.writeFileSync(path.join(dir, 'prometheus.yml'), [
    'global:', '  scrape_interval: 1s', '  evaluation_interval: 1s', 'scrape_configs:',
    '  - job_name: uvtw', '    static_configs:', `      - targets: ['${t.HOST}:${s.port}']`, '',
  ].join('\n'));
  const prom = spawn(prometheus, [`--config.file=${path.join(dir, 'prometheus.yml')}`,
    `--storage.tsdb.path=${path.join(dir, 'data')}`, `--web.listen-address=${t.HOST}:${promPort}`],
  { stdio: ['ignore', 'ignore', 'pipe'] });
  let promLog = '';
  prom.stderr.on('data', (d) => { promLog += d; });
  try {
    let up = NaN;
    const ready = performance.now() + 20000;
    while (performance.now() < ready && !(up >= 1)) {
      await t.sleep(250);
      up = await query(promPort, 'sum(up{job="uvtw"})').catch(() => NaN);
    }
    if (!t.ok(up >= 1, 'prometheus: Prometheus is up and scrapes the server', promLog.slice(-2000))) return;
    await t.sleep(6500); // a full 5 s window of scrapes
    const quiet = await query(promPort, QUERY);
    t.ok(quiet < 0.05, `prometheus: the quiet server's p99 lateness is ${quiet} s (< 0.05)`);
    s.proc.kill('SIGSTOP'); // a stall of every loop, as a swapped-out process has
    await t.sleep(300);
    s.proc.kill('SIGCONT');
    let worst = NaN;
    const seen = [];
    const end = performance.now() + 5000;
    while (performance.now() < end && !(worst >= 0.2)) {
      await t.sleep(500);
      const v = await query(promPort, QUERY);
      seen.push(v);
      worst = Number.isNaN(worst) || v > worst ? v : worst;
    }
    t.ok(worst >= 0.2, `prometheus: after a 300 ms stall the p99 lateness reaches ${worst} s (>= 0.2)`,
      `answers every 0.5 s: ${seen.join(', ')}`);
  } finally {
    prom.kill('SIGTERM');
    await new Promise((done) => prom.on('exit', done));
    fs.rmSync(dir, { recursive: true, force: true });
    await t.stop(s);
  }
}

async function main() {
  let page = null;
  if (t.want('page') || t.want('promtool')) page = await casePage();
  if (t.want('promtool')) await casePromtool(page);
  if (t.want('prometheus')) await casePrometheus();
}

t.run(main, 80000);
