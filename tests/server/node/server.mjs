// Starts `moestream serve` on a free loopback port for a test file and stops
// it afterwards. MOESTREAM_BIN points at the binary (default: build/).
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../../..');
export const bin = process.env.MOESTREAM_BIN || path.join(root, 'build/moestream');
export const goldenModel = path.resolve(root, '../shared/golden/models/qwen3moe-Q8_0.gguf');
// Qwen3's own chat template (the golden model carries a plain ChatML one), which offers tools.
export const qwen3Template = path.resolve(root, '../shared/golden/chat/templates/Qwen-Qwen3-0.6B.jinja');

// The demo model shipped in models/ (chats through its paragraph template).
export const demoModel = path.resolve(root, 'models/demo-Q8_0.gguf');

export async function startServer(args, model = goldenModel, alias = 'golden') {
  const proc = spawn(bin, ['serve', '-m', model, '--port', '0', '--alias', alias, '-t', '1', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  const port = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error('server did not start in 120 s: ' + stderr)), 120000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited ${code}: ${stderr}`)); });
  });
  const base = `http://127.0.0.1:${port}`;
  return {
    base,
    proc,
    async metric(name) {
      const text = await (await fetch(`${base}/metrics`)).text();
      const line = text.split('\n').find((l) => l.startsWith(name + ' '));
      return line === undefined ? undefined : Number(line.slice(name.length + 1));
    },
    async stop() {
      const exited = new Promise((resolve) => proc.on('exit', resolve));
      proc.kill('SIGTERM');
      return exited;
    },
  };
}
