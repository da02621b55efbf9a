import { execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ROOT } from '../scripts/run-info.js'
import { serverFolder } from './variants.js'

// The CPU a server start costs, to listening, on the embedded store: the bundle the build writes
// (dist/server.js) against the same sources compiled file by file by tsc, interleaved.
// `npm run build && node --import tsx bench/start-cpu.ts [starts]` (default 8 of each).
// Why the build bundles: the fault suite's scenario 12 is bound by this figure (docs/development.md).

const STARTS = Number(process.argv[2] ?? 8)
/** Clock ticks per second, the unit of /proc/<pid>/stat's CPU times. */
const TICKS_PER_S = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }))

/** CPU milliseconds (user + system) the process used until it logged that it listens. */
async function startCpuMs (script: string): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'leaf-start-'))
  const child = spawn(process.execPath, [script, '--server.host=127.0.0.1', '--server.port=0', `--leaf.jdbc.url=sqlite:${dir}/leaf.db`], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] })
  try {
    await new Promise<void>((resolve, reject) => {
      let out = ''
      const seen = (chunk: Buffer) => { out += chunk.toString(); if (out.includes('Server listening')) resolve() }
      child.stdout.on('data', seen)
      child.stderr.on('data', seen)
      child.once('exit', (code) => reject(new Error(`${script} exited (${code}) before listening: ${out.slice(-500)}`)))
    })
    // /proc/<pid>/stat: utime and stime, in clock ticks, are fields 14 and 15.
    const fields = readFileSync(`/proc/${child.pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? []
    const ticks = Number(fields[11]) + Number(fields[12])
    return ticks * 1000 / TICKS_PER_S
  } finally {
    child.kill('SIGKILL')
    rmSync(dir, { recursive: true, force: true })
  }
}

const filesDir = serverFolder('leaf-tsc-')
try {
  execFileSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', join(ROOT, 'tsconfig.json'), '--noEmit', 'false', '--outDir', join(filesDir, 'dist')], { stdio: 'inherit' })
  const builds = { 'bundle (dist/server.js)': join(ROOT, 'dist/server.js'), 'tsc files': join(filesDir, 'dist/server.js') }
  const cpu = new Map<string, number[]>(Object.keys(builds).map((name) => [name, []]))
  for (let i = 0; i < STARTS; i++) {
    for (const [name, script] of Object.entries(builds)) cpu.get(name)?.push(await startCpuMs(script))
  }
  for (const [name, ms] of cpu) {
    const sorted = [...ms].sort((a, b) => a - b)
    console.log(`${name}: median ${sorted[Math.floor(sorted.length / 2)]} ms CPU to listening (${sorted[0]}..${sorted.at(-1)}, ${sorted.length} starts)`)
  }
} finally {
  rmSync(filesDir, { recursive: true, force: true })
}
