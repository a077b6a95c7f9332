// A stand-in upstream that parses multipart/form-data with busboy, the
// parser behind multer and most Node.js upload handling.
//
// keygate's differential tests post the exact bytes keygate forwarded to this
// server and compare what busboy reads with what keygate checked. It listens
// on 127.0.0.1 on a free port, prints the port on its first line of output,
// and answers every request with JSON: {"fields": [[name, value, kind], ...]}
// or {"error": "..."} when busboy refuses the body.
'use strict';
const http = require('http');
const busboy = require('busboy');

const server = http.createServer((req, res) => {
  let done = false;
  const reply = (o) => {
    if (done) return;
    done = true;
    const b = Buffer.from(JSON.stringify(o));
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': b.length });
    res.end(b);
    req.resume();
  };
  let bb;
  try {
    bb = busboy({ headers: req.headers, limits: { fieldSize: 1 << 20 } });
  } catch (e) {
    reply({ error: String((e && e.message) || e) });
    return;
  }
  const fields = [];
  let pending = 0;
  let closed = false;
  const maybeReply = () => { if (closed && pending === 0) reply({ fields }); };
  bb.on('field', (name, val, info) => {
    if (info.valueTruncated) { reply({ error: 'field value truncated' }); return; }
    fields.push([name, val, 'field']);
  });
  bb.on('file', (name, stream) => {
    pending++;
    const chunks = [];
    stream.on('data', (d) => chunks.push(d));
    stream.on('end', () => {
      fields.push([name, Buffer.concat(chunks).toString('latin1'), 'file']);
      pending--;
      maybeReply();
    });
  });
  bb.on('error', (e) => reply({ error: String((e && e.message) || e) }));
  bb.on('close', () => { closed = true; maybeReply(); });
  req.pipe(bb);
});

server.listen(0, '127.0.0.1', () => {
  process.stdout.write(server.address().port + '\n');
});
