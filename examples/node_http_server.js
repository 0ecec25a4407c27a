'use strict';
// Node's http.Server serving the routes of examples/http_server that the load
// table measures (examples/bench_http.sh): GET / answers "hello", GET
// /delay?ms=N answers after N ms (a setTimeout). One process, one loop.
// usage: node node_http_server.js [PORT]   (0, the default: a free port);
// prints "listening on HOST:PORT" as examples/http_server does.
const http = require('http');

const server = http.createServer((req, res) => {
  const m = /^\/delay\?ms=(\d+)$/.exec(req.url);
  if (req.url === '/') {
    res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': 6 });
    res.end('hello\n');
  } else if (m && Number(m[1]) <= 3600000) {
    const body = `delayed ${m[1]} ms\n`;
    setTimeout(() => {
      res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': body.length });
      res.end(body);
    }, Number(m[1]));
  } else {
    res.writeHead(404, { 'Content-Type': 'text/plain', 'Content-Length': 10 });
    res.end('not found\n');
  }
});

server.listen(Number(process.argv[2] || 0), '127.0.0.1', () => {
  const { address, port } = server.address();
  console.log(`listening on ${address}:${port}`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
