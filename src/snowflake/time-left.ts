import { layoutEnd, type Layout } from '../layout/layout.js'

/** A year of 365.25 days, in seconds, as the layout's 10-year start check counts it. */
export const YEAR_SECONDS = 365.25 * 86_400
/** Under this much time left, the start warns (LeafSnowflakeLayoutEnding's warning in config/alerts.yml). */
export const WARN_SECONDS_LEFT = 2 * YEAR_SECONDS
/** LeafSnowflakeLayoutEnding's critical threshold (config/alerts.yml). */
export const CRITICAL_SECONDS_LEFT = 180 * 86_400

/** Seconds from `now` (ms) until the layout's time field ends; 0 once it has. */
export function timeLeftSeconds (layout: Layout, now: number): number {
  return Math.max(0, layoutEnd(layout) - now) / 1000
}
