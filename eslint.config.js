import neostandard from 'neostandard'

export default [
  ...neostandard({ ts: true, ignores: ['dist/**', 'client/dist/**', 'coverage/**', '.tap/**', 'node_modules/**'] }),
]
