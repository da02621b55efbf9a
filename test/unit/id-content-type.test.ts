import t from 'tap'
import { chooseContentType, idContentType, LEAF_TS_TYPE, TEXT_TYPE } from '../../src/http/id-content-type.js'

// What leaf-server's Spring MVC answers a String with, by Accept header (LEAF-REFERENCE, "What
// leaf-server answers on the wire"), and the one opt-in to Leaf-TS's forms.

t.test('the content type of the bare digits follows Accept as Spring MVC picks it', async (t) => {
  const cases: [string | undefined, string][] = [
    [undefined, TEXT_TYPE],
    ['*/*', TEXT_TYPE],
    ['text/plain', TEXT_TYPE],
    ['application/json, text/plain, */*', 'application/json; charset=utf-8'], // axios's default
    ['application/json', 'application/json; charset=utf-8'], // RestTemplate's
    ['text/html', 'text/html; charset=utf-8'],
    ['application/xml', 'application/xml; charset=utf-8'],
    ['text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8', 'text/html; charset=utf-8'], // a browser's
    ['text/plain;q=0.5, application/json', 'application/json; charset=utf-8'],
    ['*/*, text/html', 'text/html; charset=utf-8'],
    ['text/*', TEXT_TYPE],
    ['application/*', 'application/json; charset=utf-8'], // Spring's Jackson converter's type
    ['APPLICATION/JSON', 'application/json; charset=utf-8'],
    ['application/json;q=0', TEXT_TYPE],
    ['application/json;q=0, text/html;q=0.1', 'text/html; charset=utf-8'],
    ['application/json;charset=UTF-8', 'application/json; charset=utf-8'],
    ['', TEXT_TYPE],
    ['nonsense', TEXT_TYPE],
    ['a b/c, text/html', 'text/html; charset=utf-8'],
    ['application/json;q=2, text/html', 'text/html; charset=utf-8'],
  ]
  for (const [accept, type] of cases) t.equal(idContentType(accept), type, `Accept: ${String(accept)}`)
})

t.test('Leaf-TS\'s own forms only for its vendor media type, when it is the most preferred', async (t) => {
  t.equal(idContentType('application/vnd.leaf-ts+json'), LEAF_TS_TYPE)
  t.equal(idContentType('Application/Vnd.Leaf-TS+JSON; charset=utf-8'), LEAF_TS_TYPE)
  t.equal(idContentType('application/vnd.leaf-ts+json, */*;q=0.1'), LEAF_TS_TYPE)
  t.equal(idContentType('application/json, application/vnd.leaf-ts+json;q=0.5'), 'application/json; charset=utf-8', 'a less preferred opt-in is not taken')
  t.equal(idContentType('application/json, application/vnd.leaf-ts+json'), 'application/json; charset=utf-8', 'at equal q, the order of the header')
})

t.test('a repeated header gets the same answer, and so does one read again after a thousand others', async (t) => {
  const accept = 'application/json, text/plain, */*'
  t.equal(idContentType(accept), idContentType(accept))
  for (let i = 0; i < 1000; i++) t.equal(idContentType(`application/x-${i}`), `application/x-${i}; charset=utf-8`)
  t.equal(idContentType(accept), chooseContentType(accept), 'an evicted header is read again')
})
