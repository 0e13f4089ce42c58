#!/usr/bin/env python3
"""Quick local check of forkd-agent --listen (not the real suite: that is test/agent/*.ts).

usage: python3 agent/test-local/check.py [path/to/forkd-agent] [--valgrind]
"""
import base64, json, os, random, signal, socket, subprocess, sys, tempfile, time

AGENT = next((a for a in sys.argv[1:] if not a.startswith('--')),
             os.path.join(os.path.dirname(__file__), '..', 'build', 'forkd-agent'))
VALGRIND = '--valgrind' in sys.argv


class Host:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.buf = b''
        self.pending = []

    def send(self, obj):
        self.s.sendall(json.dumps(obj).encode() + b'\n')

    def raw(self, b):
        self.s.sendall(b)

    def line(self, timeout=10):
        self.s.settimeout(timeout)
        while b'\n' not in self.buf:
            d = self.s.recv(1 << 20)
            if not d:
                raise EOFError('agent closed')
            self.buf += d
        line, self.buf = self.buf.split(b'\n', 1)
        return line

    def msg(self, timeout=10):
        if self.pending:
            return self.pending.pop(0)
        return self._read(timeout)

    def _read(self, timeout):
        while True:
            line = self.line(timeout)
            if line.strip(b'\xff').strip():
                return json.loads(line.replace(b'\xff', b''))

    def sync(self):
        nonce = random.randrange(2**53)
        self.raw(b'\xff' + json.dumps({'type': 'sync', 'id': 0, 'nonce': nonce}).encode() + b'\n')
        while True:
            line = self.line()
            if line.startswith(b'\xff') or b'\xff' in line:
                m = json.loads(line.split(b'\xff')[-1])
                if m.get('nonce') == nonce:
                    assert m['protocol'] == 1 and m['agent'], m
                    return m

    def until(self, id, kinds=('result', 'error'), timeout=20):
        """All messages for id up to its terminal; others are kept for later."""
        out = []
        while True:
            mine = [m for m in self.pending if m.get('id') == id]
            if mine:
                m = mine[0]
                self.pending.remove(m)
            else:
                m = self._read(timeout)
                if m.get('id') != id:
                    self.pending.append(m)
                    continue
            out.append(m)
            if m['type'] in kinds:
                return out

    def call(self, obj, timeout=20):
        self.send(obj)
        return self.until(obj['id'], timeout=timeout)[-1]

    def run(self, argv, **kw):
        rid = random.randrange(1, 2**31)
        self.send(dict(type='exec', id=rid, argv=argv, **kw))
        msgs = self.until(rid, timeout=60)
        out = b''.join(base64.b64decode(m['data']) for m in msgs if m['type'] == 'stdout')
        err = b''.join(base64.b64decode(m['data']) for m in msgs if m['type'] == 'stderr')
        return msgs[-1], out, err, msgs


def check(cond, what):
    print(('ok   ' if cond else 'FAIL ') + what)
    if not cond:
        check.failed += 1
check.failed = 0


def main():
    d = tempfile.mkdtemp()
    sock = os.path.join(d, 'a.sock')
    cmd = [AGENT, '--listen', sock]
    if VALGRIND:
        cmd = ['valgrind', '--error-exitcode=9', '--leak-check=full', '--track-fds=yes',
               '--trace-children=no', '--log-file=' + d + '/vg.log'] + cmd
    p = subprocess.Popen(cmd, stderr=open(d + '/agent.log', 'w'))
    for _ in range(500):
        if os.path.exists(sock):
            break
        time.sleep(0.02)
    h = Host(sock)
    h.sync()
    check(h.call({'type': 'ping', 'id': 1}) == {'type': 'result', 'id': 1}, 'ping')
    info = h.call({'type': 'info', 'id': 2})
    check(info['protocol'] == 1 and 'kernel' in info and info['uptime_ms'] > 0, 'info %s' % info)

    r, out, err, msgs = h.run(['sh', '-c', 'echo hi; echo oops >&2; exit 3'])
    check(msgs[0]['type'] == 'started' and msgs[0]['pid'] > 0, 'exec started')
    check(out == b'hi\n' and err == b'oops\n' and r['exit_code'] == 3 and r['signal'] is None
          and r['timed_out'] is False, 'exec output+exit %s' % r)
    r = h.call({'type': 'exec', 'id': 5, 'argv': ['nosuch-cmd']})
    check(r['type'] == 'error' and r['code'] == 'not_found', 'exec not found %s' % r)
    r = h.call({'type': 'exec', 'id': 6, 'argv': ['/etc/passwd']})
    check(r['type'] == 'error' and r['code'] == 'permission', 'exec permission %s' % r)
    r = h.call({'type': 'exec', 'id': 7, 'argv': ['true'], 'cwd': '/nonexistent'})
    check(r['type'] == 'error' and r['code'] == 'not_found', 'exec bad cwd %s' % r)
    r, out, _, _ = h.run(['sh', '-c', 'echo $FOO $HOME $TERM; pwd'], env={'FOO': 'bar'}, cwd='/tmp')
    check(out == b'bar /root xterm\n/tmp\n', 'env+cwd %r' % out)
    r, out, _, _ = h.run(['sh', '-c', 'kill -SEGV $$'])
    check(r['exit_code'] is None and r['signal'] == 'SIGSEGV', 'signal exit %s' % r)
    t = time.time()
    r, _, _, _ = h.run(['sleep', '30'], timeout_ms=300)
    check(r['timed_out'] and r['signal'] == 'SIGKILL' and time.time() - t < 3, 'timeout %s' % r)
    # background grandchild holding the pipe: result within ~100 ms of exit
    t = time.time()
    r, out, _, _ = h.run(['sh', '-c', 'sleep 5 & echo fg'])
    check(out == b'fg\n' and time.time() - t < 2, 'grandchild grace %.2fs' % (time.time() - t))

    # stdin
    h.send({'type': 'exec', 'id': 20, 'argv': ['cat'], 'stdin': True})
    h.send({'type': 'stdin', 'id': 20, 'data': base64.b64encode(b'a\nb\n').decode()})
    h.send({'type': 'stdin', 'id': 20, 'eof': True})
    msgs = h.until(20)
    out = b''.join(base64.b64decode(m['data']) for m in msgs if m['type'] == 'stdout')
    check(out == b'a\nb\n' and msgs[-1]['exit_code'] == 0, 'stdin cat %r' % out)
    r = h.call({'type': 'stdin', 'id': 999, 'data': ''})
    check(r['code'] == 'no_such_request', 'stdin unknown')
    # big stdin through a slow reader
    blob = os.urandom(3 << 20)
    h.send({'type': 'exec', 'id': 21, 'argv': ['sh', '-c', 'sleep 0.3; sha256sum'], 'stdin': True})
    for i in range(0, len(blob), 192 << 10):
        h.send({'type': 'stdin', 'id': 21, 'data': base64.b64encode(blob[i:i + (192 << 10)]).decode()})
    h.send({'type': 'stdin', 'id': 21, 'eof': True})
    msgs = h.until(21)
    out = b''.join(base64.b64decode(m['data']) for m in msgs if m['type'] == 'stdout')
    import hashlib
    check(out.split()[0].decode() == hashlib.sha256(blob).hexdigest(), 'stdin 3 MiB intact')

    # signal
    h.send({'type': 'exec', 'id': 30, 'argv': ['sleep', '30']})
    h.until(30, kinds=('started',))
    r = h.call({'type': 'signal', 'id': 31, 'target': 30, 'signal': 'SIGTERM'})
    check(r == {'type': 'result', 'id': 31}, 'signal reply')
    r = h.until(30)[-1]
    check(r['signal'] == 'SIGTERM', 'signal delivered %s' % r)
    r = h.call({'type': 'signal', 'id': 32, 'target': 30, 'signal': 'SIGTERM'})
    check(r['code'] == 'no_such_request', 'signal finished')
    r = h.call({'type': 'signal', 'id': 33, 'target': 30, 'signal': 'SIGNOPE'})
    check(r['code'] == 'bad_request', 'signal bad name')

    # throughput
    t = time.time()
    r, out, _, msgs = h.run(['sh', '-c', 'head -c 20000000 /dev/urandom | tee /tmp/forkd-check.bin | wc -c >/dev/null'])
    r, out, _, msgs = h.run(['cat', '/tmp/forkd-check.bin'])
    dt = time.time() - t
    check(out == open('/tmp/forkd-check.bin', 'rb').read(), '20 MB intact in %.2fs, %d chunks' % (dt, len(msgs)))

    # many at once
    for i in range(100, 150):
        h.send({'type': 'exec', 'id': i, 'argv': ['sh', '-c', 'echo %d' % i]})
    got = {}
    for i in range(100, 150):
        msgs = h.until(i)
        got[i] = b''.join(base64.b64decode(m['data']) for m in msgs if m['type'] == 'stdout')
    check(all(got[i] == b'%d\n' % i for i in got), '50 concurrent execs')

    # files
    fdir = os.path.join(d, 'f')
    data = os.urandom(700000)
    h.send({'type': 'file_write', 'id': 40, 'path': fdir + '/a/b.bin', 'mode': 0o600})
    for i in range(0, len(data), 192 << 10):
        h.send({'type': 'data', 'id': 40, 'data': base64.b64encode(data[i:i + (192 << 10)]).decode()})
    h.send({'type': 'eof', 'id': 40})
    r = h.until(40)[-1]
    check(r.get('size') == len(data) and open(fdir + '/a/b.bin', 'rb').read() == data
          and os.stat(fdir + '/a/b.bin').st_mode & 0o777 == 0o600, 'file_write %s' % r)
    check(os.listdir(fdir + '/a') == ['b.bin'], 'no temp left')
    h.send({'type': 'file_read', 'id': 41, 'path': fdir + '/a/b.bin'})
    msgs = h.until(41)
    back = b''.join(base64.b64decode(m['data']) for m in msgs if m['type'] == 'data')
    check(back == data and msgs[-1]['size'] == len(data) and
          all(len(base64.b64decode(m['data'])) <= 256 << 10 for m in msgs if m['type'] == 'data'),
          'file_read %d chunks' % len(msgs))
    r = h.call({'type': 'file_read', 'id': 42, 'path': fdir + '/nope'})
    check(r['code'] == 'not_found', 'file_read missing')
    r = h.call({'type': 'file_read', 'id': 43, 'path': fdir})
    check(r['code'] == 'is_dir', 'file_read dir %s' % r)
    r = h.call({'type': 'stat', 'id': 44, 'path': fdir + '/a'})
    check(r['kind'] == 'dir' and r['name'] == 'a' and r['mode'] == 0o755, 'stat %s' % r)
    os.symlink('/etc', fdir + '/link')
    r = h.call({'type': 'stat', 'id': 45, 'path': fdir + '/link'})
    check(r['kind'] == 'symlink', 'stat symlink')
    r = h.call({'type': 'list', 'id': 46, 'path': fdir})
    check([e['name'] for e in r['entries']] == ['a', 'link'] and r['truncated'] is False, 'list %s' % r)
    r = h.call({'type': 'list', 'id': 47, 'path': fdir + '/a/b.bin'})
    check(r['code'] == 'not_dir', 'list file')
    r = h.call({'type': 'mkdir', 'id': 48, 'path': fdir + '/x/y/z', 'parents': True, 'mode': 0o700})
    check(r == {'type': 'result', 'id': 48} and os.stat(fdir + '/x/y/z').st_mode & 0o777 == 0o700, 'mkdir -p')
    r = h.call({'type': 'mkdir', 'id': 49, 'path': fdir + '/x/y/z', 'parents': True})
    check(r['type'] == 'result', 'mkdir -p existing')
    r = h.call({'type': 'mkdir', 'id': 50, 'path': fdir + '/x/y/z'})
    check(r['code'] == 'exists', 'mkdir existing')
    r = h.call({'type': 'remove', 'id': 51, 'path': fdir + '/x'})
    check(r['code'] == 'io' and 'empty' in r['message'], 'remove non-empty %s' % r)
    os.symlink('/etc', fdir + '/x/y/etc-link')
    r = h.call({'type': 'remove', 'id': 52, 'path': fdir + '/x', 'recursive': True})
    check(r['type'] == 'result' and not os.path.exists(fdir + '/x') and os.path.exists('/etc/passwd'), 'remove -r')
    r = h.call({'type': 'remove', 'id': 53, 'path': fdir + '/x'})
    check(r['code'] == 'not_found', 'remove missing')
    # abandoned write: the host goes away mid-transfer
    h.send({'type': 'file_write', 'id': 60, 'path': fdir + '/half'})
    h.send({'type': 'data', 'id': 60, 'data': 'aGVsbG8='})
    h.send({'type': 'exec', 'id': 61, 'argv': ['sh', '-c', 'yes | head -c 50000000']})
    h.until(61, kinds=('started',))
    h.s.close()
    time.sleep(0.3)
    h = Host(sock)
    h.sync()
    check(sorted(os.listdir(fdir)) == ['a', 'link'], 'temp removed after disconnect %s' % os.listdir(fdir))
    check(h.call({'type': 'ping', 'id': 62}) == {'type': 'result', 'id': 62}, 'reconnect works')
    # sync mid-exec: old output discarded, no result
    h.send({'type': 'exec', 'id': 63, 'argv': ['sh', '-c', 'sleep 0.3; echo late']})
    h.until(63, kinds=('started',))
    h.sync()
    time.sleep(0.6)
    check(h.call({'type': 'ping', 'id': 64}) == {'type': 'result', 'id': 64} and not h.pending, 'old session silent')

    # configure
    r = h.call({'type': 'configure', 'id': 70, 'entropy': base64.b64encode(os.urandom(64)).decode(),
                'env': {'FORKD_SANDBOX_ID': 'sbx-1', 'TERM': None}, 'hostname': 'sbx-test',
                'time_ms': int(time.time() * 1000)})
    check(r['type'] == 'result', 'configure %s' % r)
    r, out, _, _ = h.run(['sh', '-c', 'echo $FORKD_SANDBOX_ID ${TERM-unset}; hostname'])
    check(out == b'sbx-1 unset\nsbx-test\n', 'configure env/hostname %r' % out)
    check(h.call({'type': 'info', 'id': 71})['hostname'] == 'sbx-test', 'info hostname')

    # malformed input
    h.raw(b'{not json}\n')
    r = h.msg()
    check(r == {'type': 'error', 'id': None, 'code': 'bad_json', 'message': r.get('message')}, 'bad json %s' % r)
    h.raw(b'[1,2]\n')
    check(h.msg()['code'] == 'bad_json', 'non-object')
    h.send({'type': 'frobnicate', 'id': 80})
    r = h.msg()
    check(r['code'] == 'unknown_type' and r['id'] == 80, 'unknown type')
    h.raw(b'{"type":"ping","id":81,"x":[[[[[[[[1]]]]]]]]}\n')
    r = h.msg()
    check(r['code'] == 'too_large' and r['id'] is None, 'too deep %s' % r)
    h.raw(b'{"type":"ping","id":82,"x":[[[[[[[1]]]]]]]}\n')
    check(h.msg() == {'type': 'result', 'id': 82}, 'depth 8 ok')
    h.raw(b'{"type":"ping","id":83,"pad":"' + b'x' * (2 << 20) + b'"}\n')
    r = h.msg()
    check(r['code'] == 'too_large' and r['id'] is None, 'line too long')
    h.raw(b'{"type":"ping","id":8')
    h.raw(b'\xff{"type":"ping","id":84}\n')
    check(h.msg() == {'type': 'result', 'id': 84}, '0xFF drops partial line')
    h.raw(b'{"type":"ping","id":85,"s":"\\ud800 \xc3\x28"}\n')
    check(h.msg()['code'] == 'bad_json', 'invalid utf-8')
    h.send({'type': 'exec', 'id': 86, 'argv': []})
    check(h.msg()['code'] == 'bad_request', 'empty argv')
    h.send({'type': 'exec', 'id': 87, 'argv': ['x'] * 4097})
    check(h.msg()['code'] == 'too_large', 'argv > 4096')
    junk = [b'{', b'}', b'"', b'[]', b'nul', b'{"type":1}', b'{"type":"exec"}', b'\x00\x01',
            b'{"type":"stdin","id":5,"data":"@@"}', b'{"type":"file_write","id":1}', b'123']
    for i in range(1000):
        h.raw(random.choice(junk) + b'\n')
    n = 0
    while n < 1000:
        h.msg()
        n += 1
    nfd = len(os.listdir('/proc/%d/fd' % p.pid)) if not VALGRIND else 0
    check(h.call({'type': 'ping', 'id': 90}) == {'type': 'result', 'id': 90}, '1000 bad then ping (fds %d)' % nfd)

    # busy
    for i in range(300, 557):
        h.send({'type': 'exec', 'id': i, 'argv': ['sleep', '2']})
    busy = 0
    for i in range(300, 557):
        m = h.until(i, kinds=('started', 'error'))[-1]
        busy += m['type'] == 'error' and m['code'] == 'busy'
    check(busy >= 1, 'busy at 256 (%d refused)' % busy)
    h.sync()

    h.s.close()
    p.send_signal(signal.SIGTERM)
    rc = p.wait(30)
    check(rc == 0 and not os.path.exists(sock), 'SIGTERM exit %d, socket removed' % rc)
    if VALGRIND:
        print(open(d + '/vg.log').read()[-3000:])
    print('agent log:', open(d + '/agent.log').read()[-500:])
    print('FAILED %d' % check.failed if check.failed else 'ALL OK')
    sys.exit(1 if check.failed else 0)


if __name__ == "__main__":
    main()
