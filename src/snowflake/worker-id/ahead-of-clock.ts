import type { ResolvedConfig } from '../../config/resolve-config.js'

/**
 * How far past the clock the generator may take the time it records with the lease: the time it
 * borrows, plus the rest of a time unit longer than a millisecond (an ID of a second is
 * recorded at that second's last millisecond).
 */
export function aheadOfClockMs (config: ResolvedConfig): number {
  return config.snowflake.borrowAheadMs + config.snowflake.layout.unitMs - 1
}
