import pino from 'pino'

/** A real pino logger that writes nothing: tests pass it where the code wants a logger. */
export const silentLogger = pino({ level: 'silent' })
