/**
 * The JSON docs/eval.md shows is what `forkd eval --json` prints: each `sh` block that is
 * one `forkd eval "$id" --json 'CODE'` line and the `json` block right after it are run and
 * compared here, in a fresh Python sandbox of a real daemon (all but `duration_ms`, which
 * is only checked to be a number). The Python docs test does the same for docs/python.md.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { Sandbox } from '@forkd/sdk';
import { forkd } from '../../helpers/cli.js';
import { daemonForFile } from '../../helpers/daemon-process.js';
import { linkTestImage, PYTHON_IMAGE, privateGuest } from '../../helpers/python-image.js';

const DOC = 'docs/eval.md';
const EVAL_LINE = /^forkd eval "\$id" --json '([^']*)'$/;

/** Each documented `forkd eval --json` command's code and the output the doc shows. */
function examples(): { code: string; shown: Record<string, unknown> }[] {
  const blocks = [...readFileSync(DOC, 'utf8').matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)];
  const found: { code: string; shown: Record<string, unknown> }[] = [];
  for (const [i, b] of blocks.entries()) {
    const code = b[1] === 'sh' ? EVAL_LINE.exec((b[2] ?? '').trim())?.[1] : undefined;
    const next = blocks[i + 1];
    if (code === undefined || next?.[1] !== 'json') continue;
    found.push({ code, shown: JSON.parse(next[2] ?? '') as Record<string, unknown> });
  }
  return found;
}

const file = daemonForFile({
  prepare: async (home) => {
    await privateGuest(home);
    await linkTestImage(home, PYTHON_IMAGE);
  },
});

test('the output docs/eval.md shows for `forkd eval --json` is what it prints', async () => {
  const docs = examples();
  assert.ok(docs.length >= 1, `no forkd eval --json example with its output in ${DOC}`);
  for (const { code, shown } of docs) {
    // A fresh sandbox each: the example's execution_count is that of a new context.
    const sbx = await Sandbox.create({ image: PYTHON_IMAGE, memoryMib: 256, url: file.daemon.url });
    try {
      const r = await forkd(['eval', sbx.id, '--json', code], { env: file.home.env });
      assert.equal(r.code, 0, r.stderr);
      const printed = JSON.parse(r.stdout.toString()) as Record<string, unknown>;
      assert.equal(typeof printed.duration_ms, 'number', r.stdout.toString());
      assert.deepEqual({ ...printed, duration_ms: shown.duration_ms }, shown, code);
    } finally {
      await sbx.kill();
    }
  }
});
