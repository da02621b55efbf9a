// Small readers of this repository's markdown, for the tests that hold the docs to the code.

/** The text with fenced code blocks and inline code spans blanked out. */
export function withoutCode (text: string): string {
  return text.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '')
}

/** The body of the `## heading` section (up to the next `## `), or undefined when there is none. */
export function section (text: string, heading: string): string | undefined {
  const start = text.indexOf(`\n## ${heading}\n`)
  if (start === -1) return undefined
  const end = text.indexOf('\n## ', start + 1)
  return text.slice(start, end === -1 ? undefined : end)
}

/** Rows of the first markdown table in a `## heading` section, without its header. */
export function tableUnder (text: string, heading: string): string[][] {
  const body = section(text, heading)
  if (body === undefined) throw new Error(`no "## ${heading}" section`)
  const lines = body.split('\n')
  const first = lines.findIndex((l) => l.startsWith('|'))
  if (first === -1) throw new Error(`no table under "## ${heading}"`)
  const table = lines.slice(first)
  const after = table.findIndex((l) => !l.startsWith('|'))
  return table.slice(2, after === -1 ? undefined : after).map((l) => l.split('|').slice(1, -1).map((c) => c.trim()))
}

/** GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to `-`, repeats numbered. */
export function anchors (text: string): Set<string> {
  const seen = new Map<string, number>()
  const result = new Set<string>()
  for (const m of text.replace(/^```[\s\S]*?^```/gm, '').matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const plain = (m[1] as string).replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    const slug = plain.toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '').replace(/ /g, '-')
    const n = seen.get(slug) ?? 0
    seen.set(slug, n + 1)
    result.add(n === 0 ? slug : `${slug}-${n}`)
  }
  return result
}

/** The targets of a page's inline links (`[text](target)`), outside code. */
export function linkTargets (text: string): string[] {
  return [...withoutCode(text).matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((m) => m[1] as string)
}
