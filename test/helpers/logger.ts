import pino from 'pino'

/** A real pino logger that writes nothing: tests pass it where the code wants a logger. */
export const silentLogger = pino({ level: 'silent' })

/** A real pino logger that keeps each line as an object, for tests that read the logs. */
export function captureLogger (): { logger: pino.Logger, lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = []
  const logger = pino({ level: 'debug' }, { write: (line: string) => { lines.push(JSON.parse(line) as Record<string, unknown>) } })
  return { logger, lines }
}
