# syntax=docker/dockerfile:1
# Leaf-TS image: one image for every environment. Configuration comes from the environment
# (LEAF_*/SERVER_*, see docs/configuration.md) over config/leaf.properties, which is
# baked in as the default. The image sets no LEAF_* variable itself, so a properties file
# mounted over /app/config/leaf.properties (or named by LEAF_CONFIG) is taken as it is.
#
#   docker build -t leaf-ts .
#   docker run -p 8080:8080 leaf-ts     # embedded SQLite store in /app/data

# All three stages share one base, so the native module built in `deps` (better-sqlite3)
# matches the C library and Node ABI of `runtime`. Node 26 is the active LTS (from October
# 2026 to October 2027, then maintenance to April 2029); Debian 13 (trixie) is its images'
# default and is supported past that. better-sqlite3 12.11 lists Node 26 in its engines, and
# its release workflow builds binaries for it (ABI 147; glibc and musl, x64 and arm64); where
# none fits or none downloads, the `deps` stage compiles it (Node 25+ headers need GCC 11 or
# later; trixie has 14).
ARG NODE_IMAGE=node:26-trixie-slim

# --- build: check src/ and bundle it into dist/server.js ----------------------------------
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
# Only tsc and esbuild run in this stage: no install script (native build) is needed here
# (esbuild's binary comes as a package of its own).
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY scripts/build-server.ts ./scripts/build-server.ts
COPY src ./src
# The server alone: the workspace's client package (client/) is not part of the image.
RUN npm run build:server

# --- deps: production dependencies, native modules compiled for the runtime base ----------
FROM ${NODE_IMAGE} AS deps
# node-gyp's toolchain, for better-sqlite3 when no prebuilt binary fits. It stays in this stage.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
# npm runs better-sqlite3's install script (package.json's allowScripts approves it for npm
# versions that ask): a prebuilt binary, else node-gyp. If a policy skipped it anyway, build
# it here with npm's own node-gyp, and fail the image build if the module still does not load.
RUN npm ci --omit=dev --no-audit --no-fund \
 && if ! node -e "new (require('better-sqlite3'))(':memory:').close()" 2>/dev/null; then \
      (cd node_modules/better-sqlite3 \
        && node "$(npm root -g)/npm/node_modules/node-gyp/bin/node-gyp.js" rebuild --release); \
    fi \
 && node -e "new (require('better-sqlite3'))(':memory:').close()" \
 && npm cache clean --force

# --- runtime: slim, no compiler, not root --------------------------------------------------
FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY config ./config
# ./data holds the embedded SQLite store (leaf.db); /var/lib/leaf/snowflake is where compose
# mounts the worker-id cache. A named volume mounted there takes this owner on first use.
RUN mkdir -p /app/data /var/lib/leaf/snowflake \
 && chown -R node:node /app/data /var/lib/leaf
# The `node` user (uid 1000) ships with the base image.
USER node
EXPOSE 8080
# The image has no curl: Node's fetch asks /healthz on the configured port.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.SERVER_PORT || 8080) + '/healthz', { signal: AbortSignal.timeout(4000) }).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# Node is PID 1 on purpose: the server handles SIGTERM/SIGINT itself (close-with-grace
# drains requests in flight and removes its ZooKeeper node, within 10 s).
STOPSIGNAL SIGTERM
CMD ["node", "dist/server.js"]
