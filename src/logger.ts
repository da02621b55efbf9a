import type { BaseLogger } from 'pino'

/** The logging the core needs: pino's, or a silent stand-in in tests. */
export type Logger = Pick<BaseLogger, 'error' | 'warn' | 'info' | 'debug'>
