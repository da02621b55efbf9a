// A tag's issue rate, from its count of issued IDs sampled about once a second.

/** The rate the horizon plans with falls by e every this many ms: to 5% within a minute. */
export const RATE_DECAY_MS = 20_000
/** The history kept for the views: 90 buckets of 10 s, the last 15 minutes. */
export const HISTORY_BUCKET_MS = 10_000
export const HISTORY_BUCKETS = 90
/** A sample closer than this to the last one is too short to read a rate from. */
const MIN_SAMPLE_MS = 100

/**
 * Under this rate (IDs/s) a tag is idle and its horizon has no seconds figure: with samples a
 * second apart, a lower rate is only the decaying remnant of a burst, which never reaches 0 and
 * would give ever larger figures (61,597 IDs at 0.0000285 IDs/s: 2,160,684,850.9 s).
 */
export const MIN_HORIZON_RATE = 1

/** How long `bufferedIds` last at `idsPerSecond`, in seconds; undefined while the tag is idle (under MIN_HORIZON_RATE). */
export function horizonSeconds (bufferedIds: number, idsPerSecond: number): number | undefined {
  return idsPerSecond >= MIN_HORIZON_RATE ? bufferedIds / idsPerSecond : undefined
}

export class RateMeter {
  /** IDs/s for the horizon: a burst raises it at once, a quieter spell lets it decay over a minute. */
  rate = 0
  private lastCount = 0
  private lastAt = Number.NaN
  /** A ring of IDs per bucket, made lazily: of 100,000 tags, those never asked for keep none. */
  private buckets: Float64Array | undefined
  private newest = 0
  private bucketAt = Number.NaN

  sample (count: number, now: number): void {
    if (Number.isNaN(this.lastAt)) {
      this.lastAt = now
      this.lastCount = count
      this.bucketAt = now
      return
    }
    const dt = now - this.lastAt
    if (dt < MIN_SAMPLE_MS) return
    const delta = count - this.lastCount
    this.rate = Math.max(delta * 1000 / dt, this.rate * Math.exp(-dt / RATE_DECAY_MS))
    this.lastAt = now
    this.lastCount = count
    this.record(delta, now)
  }

  /** The rate as of `now`: the sampled one, or the one since the last sample when higher (a burst). */
  current (count: number, now: number): number {
    const dt = now - this.lastAt
    if (!(dt >= MIN_SAMPLE_MS)) return this.rate
    return Math.max((count - this.lastCount) * 1000 / dt, this.rate * Math.exp(-dt / RATE_DECAY_MS))
  }

  /** IDs per second over the last `ms` (whole buckets, the newest included), as of the last sample. */
  average (ms: number): number {
    const buckets = this.buckets
    if (buckets === undefined) return 0
    const n = Math.min(HISTORY_BUCKETS, Math.max(1, Math.round(ms / HISTORY_BUCKET_MS)))
    let sum = 0
    for (let i = 0; i < n; i++) sum += buckets[(this.newest - i + HISTORY_BUCKETS) % HISTORY_BUCKETS] as number
    return sum / (n * HISTORY_BUCKET_MS / 1000)
  }

  /** IDs per second of each history bucket, oldest first (the newest still filling). */
  history (): number[] {
    const out: number[] = []
    for (let i = 1; i <= HISTORY_BUCKETS; i++) {
      out.push((this.buckets?.[(this.newest + i) % HISTORY_BUCKETS] ?? 0) / (HISTORY_BUCKET_MS / 1000))
    }
    return out
  }

  /** Whether any ID was issued within the last `ms` before the last sample, or since it (`count` now). */
  activeWithin (ms: number, count: number): boolean {
    return count > this.lastCount || this.average(ms) > 0
  }

  private record (delta: number, now: number): void {
    const buckets = this.buckets ??= new Float64Array(HISTORY_BUCKETS)
    while (now - this.bucketAt >= HISTORY_BUCKET_MS) {
      this.newest = (this.newest + 1) % HISTORY_BUCKETS
      buckets[this.newest] = 0
      this.bucketAt += HISTORY_BUCKET_MS
      if (now - this.bucketAt >= HISTORY_BUCKET_MS * HISTORY_BUCKETS) {
        buckets.fill(0)
        this.bucketAt = now
      }
    }
    buckets[this.newest] = (buckets[this.newest] as number) + delta
  }
}
