import t from 'tap'
import { ConfigError, ConfigErrors } from '../../src/config/config-error.js'
import { optionsNpmKept, refuseOptionsNpmKept } from '../../src/config/npm-options.js'

// `npm start --key=value` without `--`: npm keeps the option as an npm_config_ variable, which
// the server refuses with the fix rather than starting without it.

/** What npm sets for a script, beside what the user's options add. */
const NPM = { npm_lifecycle_event: 'start', npm_config_cache: '/root/.npm', npm_config_user_agent: 'npm/11.0.0 node/v20', npm_config_node_gyp: '/usr/lib/node-gyp.js', npm_command: 'start' }

t.test('each spelling npm passes on for a key is found, with the key it means', async (t) => {
  const cases: Array<[Record<string, string>, string]> = [
    [{ npm_config_server_port: '9' }, 'server.port'], // --server-port=9, --SERVER_PORT=9
    [{ npm_config_leaf_segment_enable: 'true' }, 'leaf.segment.enable'], // --leaf-segment-enable
    [{ 'npm_config_leaf.segment.enable': 'true' }, 'leaf.segment.enable'], // --leaf.segment.enable under bash or cmd
    [{ npm_config_leaf_snowflake_worker_id_source: 'db-lease' }, 'leaf.snowflake.worker-id.source'],
    [{ npm_config_config: 'my.properties' }, 'config'], // --config=my.properties
    [{ 'npm_config_leaf.x': 'y' }, 'leaf.x'], // a name in Leaf-TS's namespace that is no key
    [{ npm_config_leaf_segement_enable: 'true' }, 'leaf_segement_enable'],
  ]
  for (const [options, name] of cases) {
    const [variable] = Object.keys(options)
    t.same(optionsNpmKept({ ...NPM, ...options }), [{ name, variable, value: options[variable as string] }], `${variable}: ${name}`)
  }
})

t.test('nothing is found outside npm, nor in npm\'s own variables', async (t) => {
  t.same(optionsNpmKept({ npm_config_server_port: '9' }), [], 'no npm_lifecycle_event: not started through npm')
  t.same(optionsNpmKept({ ...NPM, npm_config_foo: 'true', npm_config_loglevel: 'silent', SERVER_PORT: '9', LEAF_JDBC_URL: 'x' }), [], 'npm\'s and other variables, and the server\'s own')
  t.doesNotThrow(() => refuseOptionsNpmKept({ ...NPM, npm_config_foo: 'true' }))
})

t.test('the refusal: one line per option, saying to write it after --, never echoing a secret', async (t) => {
  const one = t.throws(() => refuseOptionsNpmKept({ ...NPM, npm_config_server_port: '9' })) as ConfigError
  t.ok(one instanceof ConfigError)
  t.match(one, { code: 'CONFIG_BAD_ARGUMENT', key: 'server.port' })
  t.equal(one.message, 'server.port: given to npm, not to the server (npm kept it as npm_config_server_port); write the server\'s options after "--": npm start -- --server.port=9')
  const two = t.throws(() => refuseOptionsNpmKept({ ...NPM, npm_lifecycle_event: 'dev', npm_config_leaf_segment_enable: 'true', npm_config_leaf_jdbc_password: 'hunter2' })) as ConfigErrors
  t.ok(two instanceof ConfigErrors)
  t.same(two.errors.map((e) => e.message), [
    'leaf.segment.enable: given to npm, not to the server (npm kept it as npm_config_leaf_segment_enable); write the server\'s options after "--": npm run dev -- --leaf.segment.enable=true',
    'leaf.jdbc.password: given to npm, not to the server (npm kept it as npm_config_leaf_jdbc_password); write the server\'s options after "--": npm run dev -- --leaf.jdbc.password=<value>',
  ])
  t.notMatch(two.message, 'hunter2', 'the password is not echoed')
})
