#!/usr/bin/env python3
"""Checks a forkd-agent running as PID 1 in a VM started by boot.sh, over its agent socket.

usage: python3 agent/test-local/vm_check.py WORKDIR
"""
import base64, os, sys, time, hashlib
sys.argv = sys.argv[:1] + [a for a in sys.argv[1:]]
W = sys.argv[1]
sys.path.insert(0, os.path.dirname(__file__))
from check import Host, check  # noqa: E402


def connect():
    for _ in range(100):
        try:
            return Host(W + '/agent.sock')
        except OSError:
            time.sleep(0.1)
    raise SystemExit('no agent socket')


h = connect()
t = time.time()
h.sync()
print('sync after %.2fs' % (time.time() - t))
check(h.call({'type': 'ping', 'id': 1}) == {'type': 'result', 'id': 1}, 'ping')
info = h.call({'type': 'info', 'id': 2})
check(info['kernel'] == '6.1.0-57-cloud-amd64' and info['hostname'] == 'forkd', 'info %s' % info)
r, out, err, _ = h.run(['sh', '-c', 'echo $$; id; pwd; mount; ls -l /dev/ptmx /dev/fd; cat /proc/1/cmdline | tr "\\0" " "'])
print(out.decode(), err.decode())
check(r['exit_code'] == 0 and b'/tmp type tmpfs' in out and b'devpts' in out and b'/dev/shm' in out, 'mounts')
r, out, _, _ = h.run(['id'], user='nobody')
check(out.startswith(b'uid=65534'), 'user nobody %r' % out)
r, out, _, _ = h.run(['sh', '-c', 'ip link 2>/dev/null || cat /sys/class/net/lo/operstate /sys/class/net/lo/flags'])
print(out)
# zombies: orphans must be reaped by PID 1
r, out, _, _ = h.run(['sh', '-c', '(sleep 0.2 &) ; sleep 1; ls /proc | wc -l; grep -l zombie /proc/[0-9]*/status 2>/dev/null; grep -c "State:.Z" /proc/[0-9]*/status | grep -v ":0" || true'])
check(b'/proc/' not in out.split(b'\n', 1)[1] if b'\n' in out else True, 'no zombies %r' % out)
# throughput over virtio-serial under TCG
t = time.time()
r, out, _, msgs = h.run(['sh', '-c', 'head -c 20000000 /dev/zero | tr "\\0" x'])
dt = time.time() - t
check(len(out) == 20000000 and out == b'x' * 20000000, '20 MB over virtio in %.2fs (%d msgs)' % (dt, len(msgs)))
# configure
r = h.call({'type': 'configure', 'id': 9, 'time_ms': 1764531234567, 'hostname': 'sbx-1a2b',
            'entropy': base64.b64encode(os.urandom(64)).decode(), 'env': {'FORKD_SANDBOX_ID': 'sbx-1a2b'}})
check(r == {'type': 'result', 'id': 9}, 'configure %s' % r)
r, out, _, _ = h.run(['sh', '-c', 'date +%s; hostname; echo $FORKD_SANDBOX_ID'])
check(out.split()[0].startswith(b'176453') and out.split()[1:] == [b'sbx-1a2b', b'sbx-1a2b'], 'configured %r' % out)
# file roundtrip
data = os.urandom(1 << 20)
h.send({'type': 'file_write', 'id': 20, 'path': '/root/x/y.bin'})
for i in range(0, len(data), 192 << 10):
    h.send({'type': 'data', 'id': 20, 'data': base64.b64encode(data[i:i + (192 << 10)]).decode()})
h.send({'type': 'eof', 'id': 20})
check(h.until(20)[-1].get('size') == len(data), 'file_write 1 MiB')
r, out, _, _ = h.run(['sha256sum', '/root/x/y.bin'])
check(out.split()[0].decode() == hashlib.sha256(data).hexdigest(), 'file content in guest')
# disconnect mid-exec with output, reconnect
h.send({'type': 'exec', 'id': 30, 'argv': ['sh', '-c', 'yes | head -c 30000000; echo done']})
h.until(30, kinds=('started',))
time.sleep(0.3)
h.s.close()
time.sleep(1)
h = connect()
t = time.time()
h.sync()
print('resync after %.2fs' % (time.time() - t))
check(h.call({'type': 'ping', 'id': 31}) == {'type': 'result', 'id': 31}, 'ping after reconnect')
time.sleep(3)
r, out, _, _ = h.run(['sh', '-c', 'ps 2>/dev/null | grep -c yes || ls /proc | wc -l'])
check(h.call({'type': 'ping', 'id': 32}) == {'type': 'result', 'id': 32} and not h.pending, 'no stray old-session output')
h.s.close()
# host away: the agent must not spin
time.sleep(2)
pid = int(open(W + '/qemu.pid').read())
def cpu():
    f = open('/proc/%d/stat' % pid).read().split(')')[1].split()
    return int(f[11]) + int(f[12])
c0 = cpu(); time.sleep(3); c1 = cpu()
check((c1 - c0) < 150, 'idle QEMU CPU with host away: %d ticks in 3 s' % (c1 - c0))
h = connect()
h.sync()
check(h.call({'type': 'ping', 'id': 40}) == {'type': 'result', 'id': 40}, 'ping after idle')
print('FAILED %d' % check.failed if check.failed else 'ALL OK')
