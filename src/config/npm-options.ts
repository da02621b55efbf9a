import { ConfigError, refuseIfAny } from './config-error.js'
import { CONFIG_KEYS, envName, type ConfigKey } from './keys.js'

// `npm start --server.port=8081` gives the option to npm, not to the server: npm keeps what comes
// before `--` as its own setting and hands the script only an `npm_config_<name>` variable,
// which the server would ignore, starting on the file's port. Such a variable for a Leaf-TS
// name is refused with the fix. A dotted name (`npm_config_server.port`) reaches the server only
// where the script shell passes names with dots on (bash, Windows' cmd); dash, Debian's and
// Ubuntu's /bin/sh, drops it, and npm then leaves no trace of it but its own warning.

const PREFIX = 'npm_config_'
const KEY_OF_VARIABLE = new Map<string, ConfigKey>(CONFIG_KEYS.map((k) => [envName(k), k]))
/** Not echoed in the refusal: the value of a key that may hold a secret. */
const SECRET_LIKE = /password|token|auth|url/

/** An option npm kept: the Leaf-TS name meant, and how npm passed it on. */
export interface KeptOption {
  /** The key (`server.port`), `config` for `--config`, or the name as written (`leaf.segement.enable`). */
  name: string
  variable: string
  value: string
}

/** The options of Leaf-TS that npm kept for itself; none unless the process runs under npm. */
export function optionsNpmKept (env: Record<string, string | undefined>): KeptOption[] {
  if (env.npm_lifecycle_event === undefined) return []
  const kept: KeptOption[] = []
  for (const [variable, value = ''] of Object.entries(env)) {
    if (!variable.toLowerCase().startsWith(PREFIX)) continue
    const written = variable.slice(PREFIX.length)
    const upper = envName(written)
    const key = KEY_OF_VARIABLE.get(upper)
    // A key in any of npm's spellings (--server-port, --SERVER_PORT, --server.port), Leaf-TS's
    // --config, or any other name in its namespaces (a typo, which the server would refuse).
    if (key !== undefined) kept.push({ name: key, variable, value })
    else if (upper === 'CONFIG') kept.push({ name: 'config', variable, value })
    else if (upper.startsWith('LEAF_') || /^(leaf|server)\./i.test(written)) kept.push({ name: written.toLowerCase(), variable, value })
  }
  return kept
}

/** Refuses the start, one line per option, when npm kept options meant for the server. */
export function refuseOptionsNpmKept (env: Record<string, string | undefined>): void {
  const script = env.npm_lifecycle_event === 'start' ? 'npm start' : `npm run ${env.npm_lifecycle_event ?? ''}`
  refuseIfAny(optionsNpmKept(env).map(({ name, variable, value }) => {
    const shown = SECRET_LIKE.test(name) ? '<value>' : value
    return new ConfigError(name, `given to npm, not to the server (npm kept it as ${variable}); write the server's options after "--": ${script} -- --${name}=${shown}`,
      { code: 'CONFIG_BAD_ARGUMENT' })
  }))
}
