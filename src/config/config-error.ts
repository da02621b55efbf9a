/** Stable: callers and tests switch on it. */
export type ConfigErrorCode =
  /** A key's value does not read (a number out of range, an unknown URL scheme, an empty secret file). */
  | 'CONFIG_INVALID_VALUE'
  /** Values that each read but not together (a secret given two ways, a lease TTL below 3 heartbeats). */
  | 'CONFIG_CONFLICT'
  /** The properties file or a secret file cannot be read. */
  | 'CONFIG_FILE_UNREADABLE'
  /** The command line holds something that is no `--key=value` or `--key value`. */
  | 'CONFIG_BAD_ARGUMENT'
  /** A name in Leaf-TS's namespaces that is not a key (docs/configuration.md). */
  | 'UNKNOWN_KEY'
  /** A Java Leaf or Spring Boot key whose meaning Leaf-TS cannot honour. */
  | 'UNSUPPORTED_KEY'
  /** Several of the above, found in one load (ConfigErrors). */
  | 'CONFIG_ERRORS'

export interface ConfigErrorOptions {
  code?: ConfigErrorCode
  cause?: unknown
}

/** A configuration the server refuses to start on; the message begins with the key (or what named a file). */
export class ConfigError extends Error {
  readonly code: ConfigErrorCode
  readonly key: string
  constructor (key: string, problem: string, { code = 'CONFIG_INVALID_VALUE', cause }: ConfigErrorOptions = {}) {
    super(`${key}: ${problem}`, cause === undefined ? undefined : { cause })
    this.name = 'ConfigError'
    this.code = code
    this.key = key
  }
}

/** Every error one load found, so that a start names them all at once: one line each. */
export class ConfigErrors extends ConfigError {
  readonly errors: readonly ConfigError[]
  constructor (errors: readonly ConfigError[]) {
    const [first] = errors
    if (first === undefined) throw new TypeError('ConfigErrors needs at least one error')
    super(first.key, '', { code: 'CONFIG_ERRORS' })
    this.name = 'ConfigErrors'
    this.message = errors.map((error) => error.message).join('\n')
    this.errors = errors
  }
}

export function refuseIfAny (errors: readonly ConfigError[]): void {
  const [first] = errors
  if (first === undefined) return
  throw errors.length === 1 ? first : new ConfigErrors(errors)
}

/** Runs `step`, adding the ConfigError it throws to `errors`; undefined when it threw one. */
export function collect<T> (errors: ConfigError[], step: () => T): T | undefined {
  try {
    return step()
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err
    errors.push(...(err instanceof ConfigErrors ? err.errors : [err]))
    return undefined
  }
}
