// Which answer an ID request gets, from its Accept header. leaf-server's controller returns a
// String, so Spring MVC answers the bare digits for every Accept header and takes the content
// type from it: the most preferred concrete type (by q, then specificity, then order; application/*: application/json), else
// text/plain. Leaf-TS answers the same bytes, and keeps its own JSON forms for the one media
// type no Java client sends (docs/migrating.md, "What differs, on purpose").

/** The opt-in to Leaf-TS's own forms: `{"id":"..."}`, `{"ids":[...]}`. */
export const LEAF_TS_MEDIA_TYPE = 'application/vnd.leaf-ts+json'

export const TEXT_TYPE = 'text/plain; charset=utf-8'
const JSON_TYPE = 'application/json; charset=utf-8'
/** The content type of Leaf-TS's own forms; compared by identity on the hot path. */
export const LEAF_TS_TYPE = `${LEAF_TS_MEDIA_TYPE}; charset=utf-8`

/** RFC 9110 token characters: a type echoed into the answer's header is never anything else. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9a-z-]+$/
const Q_VALUE = /^(?:0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)$/

// Clients send one Accept header over and over (axios, RestTemplate, a browser): each distinct
// one is read once. Bounded, since the header is the caller's to vary.
const CACHE_SIZE = 64
const chosen = new Map<string, string>()

/**
 * The content type of the answer to an ID request with this Accept header: LEAF_TS_TYPE for
 * Leaf-TS's JSON forms, else the type the bare digits are sent as.
 */
export function idContentType (accept: string | undefined): string {
  if (accept === undefined) return TEXT_TYPE
  const cached = chosen.get(accept)
  if (cached !== undefined) return cached
  const type = chooseContentType(accept)
  if (chosen.size >= CACHE_SIZE) chosen.delete(chosen.keys().next().value as string)
  chosen.set(accept, type)
  return type
}

interface Candidate { type: string, subtype: string, q: number, order: number }

/** Uncached: idContentType's choice, as Spring MVC 4.3 makes it for a String answer. */
export function chooseContentType (accept: string): string {
  const candidates: Candidate[] = []
  for (const [order, entry] of accept.split(',').entries()) {
    const candidate = parseEntry(entry, order)
    // q=0 is "not acceptable" (RFC 9110 12.4.2): never chosen.
    if (candidate !== undefined && candidate.q > 0) candidates.push(candidate)
  }
  // Quality first, then the more specific (concrete over type/*, over */*), then the header's order.
  candidates.sort((a, b) => b.q - a.q || wildcards(a) - wildcards(b) || a.order - b.order)
  const best = candidates[0]
  if (best === undefined || best.type === '*') return TEXT_TYPE
  // Spring's Jackson converter can write a String too, and application/json is the most
  // specific type it offers inside application/*; text/* and */* get the String converter's.
  if (best.subtype === '*') return best.type === 'application' ? JSON_TYPE : TEXT_TYPE
  const type = `${best.type}/${best.subtype}`
  return type === LEAF_TS_MEDIA_TYPE ? LEAF_TS_TYPE : `${type}; charset=utf-8`
}

function parseEntry (entry: string, order: number): Candidate | undefined {
  const [range = '', ...parameters] = entry.split(';')
  const slash = range.indexOf('/')
  if (slash === -1) return undefined
  const type = range.slice(0, slash).trim().toLowerCase()
  const subtype = range.slice(slash + 1).trim().toLowerCase()
  if (!TOKEN.test(type) || !TOKEN.test(subtype) || (type === '*' && subtype !== '*')) return undefined
  let q = 1
  for (const parameter of parameters) {
    const [name = '', value = ''] = parameter.split('=', 2).map((s) => s.trim())
    if (name.toLowerCase() !== 'q') continue
    if (!Q_VALUE.test(value)) return undefined
    q = Number(value)
  }
  return { type, subtype, q, order }
}

function wildcards (c: Candidate): number {
  return (c.type === '*' ? 1 : 0) + (c.subtype === '*' ? 1 : 0)
}
