import { fileURLToPath } from 'node:url'
import closeWithGrace from 'close-with-grace'
import pino from 'pino'
import { buildApp } from './app.js'
import { ConfigError, ConfigErrors, loadConfig, type LoadedConfig } from './config/load-config.js'
import { StartRefused } from './errors.js'
import { bindPort, type BoundServer } from './http/bound-server.js'
import { refuseOptionsNpmKept } from './config/npm-options.js'
import { resolveConfig, type ResolvedConfig } from './config/resolve-config.js'

// Entry point: read the config, build the app, listen, and drain on SIGTERM/SIGINT.
// The package's own file, beside dist/ (and src/ under `npm run dev`): found from any working folder.
const SHIPPED_CONFIG = fileURLToPath(new URL('../config/leaf.properties', import.meta.url))
const INSTALL_DIR = fileURLToPath(new URL('../', import.meta.url))

let loaded: LoadedConfig
let config: ResolvedConfig
try {
  refuseOptionsNpmKept(process.env)
  loaded = loadConfig({ argv: process.argv.slice(2), env: process.env, shippedPath: SHIPPED_CONFIG, installDir: INSTALL_DIR })
  // Even with snowflake mode off (the decode routes read the layout): a configuration error like any.
  config = resolveConfig(loaded.config)
} catch (err) {
  if (!(err instanceof ConfigError)) throw err
  for (const each of err instanceof ConfigErrors ? err.errors : [err]) process.stderr.write(`leaf-ts: configuration error: ${each.message}\n`)
  process.exit(1)
}
const { file, fileFrom, warnings, relativeTo } = loaded

const logger = pino({
  level: config.logLevel,
  // Belt and braces: nothing logs these on purpose.
  redact: { paths: ['req.headers.authorization', 'headers.authorization', '*.password', 'password', '*.token', 'token'], censor: '[redacted]' },
  transport: process.stdout.isTTY ? { target: 'pino-pretty' } : undefined,
})
for (const warning of warnings) logger.warn(warning)
logger.info({ file: file ?? '(none: built-in defaults)', from: fileFrom ?? null, relativePathsFrom: relativeTo },
  file === undefined ? 'configuration loaded: no file found, built-in defaults' : `configuration loaded from ${file}`)

// The port first: a second process on a port in use stops before touching any file or store.
let bound: BoundServer
try {
  bound = await bindPort(config.server)
} catch (err) {
  if (err instanceof StartRefused) logger.fatal(`start refused: ${err.message}`)
  else logger.fatal({ err }, 'start failed')
  process.exit(1)
}

let app
try {
  app = await buildApp(config, { logger, server: bound })
  await app.ready()
  const scheme = config.server.tls === undefined ? 'http' : 'https'
  for (const a of app.addresses()) {
    if (typeof a === 'string') continue
    logger.info(`Server listening at ${scheme}://${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}`)
  }
} catch (err) {
  if (err instanceof StartRefused) logger.fatal(`start refused: ${err.message}`)
  else logger.fatal({ err }, 'start failed')
  await app?.close() // (a buildApp that threw has closed its app, and the bound socket with it)
  process.exit(1)
}

closeWithGrace({ delay: 10_000, logger }, async ({ signal, err }) => {
  if (err !== undefined) logger.error({ err }, 'closing after an error')
  else logger.info({ signal }, 'closing: finishing requests in flight')
  await app.close()
})
