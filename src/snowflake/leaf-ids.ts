// Java Leaf's own IDs, whatever layout this instance issues: its bit widths, its epoch, and an
// ID read back by them (the tests and fault scenarios check issued IDs with it).

export const WORKER_ID_BITS = 10
export const SEQUENCE_BITS = 12
export const MAX_WORKER_ID = (1 << WORKER_ID_BITS) - 1 // 1023
export const SEQUENCE_MASK = (1 << SEQUENCE_BITS) - 1 // 4095
const WORKER_SHIFT = BigInt(SEQUENCE_BITS)
const TIMESTAMP_SHIFT = BigInt(WORKER_ID_BITS + SEQUENCE_BITS)
/** 2010-11-04 09:42:54.657 +08:00, Java Leaf's epoch. */
export const DEFAULT_TWEPOCH = 1288834974657

export interface SnowflakeParts {
  timestamp: number
  workerId: number
  sequence: number
}

export function decodeSnowflakeId (id: bigint, twepoch = DEFAULT_TWEPOCH): SnowflakeParts {
  return {
    timestamp: Number(id >> TIMESTAMP_SHIFT) + twepoch,
    workerId: Number((id >> WORKER_SHIFT) & BigInt(MAX_WORKER_ID)),
    sequence: Number(id & BigInt(SEQUENCE_MASK)),
  }
}
