# syntax=docker/dockerfile:1.7
# One image for every Writ component; the first argument picks it:
#   docker run writ:dev control-plane | identity | broker | operator | webhook [-flags] | sidecar | egress-gateway | all-in-one
# dumb-init is PID 1 (signals are passed on, zombies reaped); it runs /usr/local/bin/writ, which
# execs node on the component's built entry point (node replaces the shell: never npm, no shell
# between dumb-init and node).
ARG NODE_IMAGE=node:20-bookworm-slim

# 1. Build: every dependency, TypeScript -> dist/ with the runtime assets beside the JavaScript.
FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY runtime runtime
COPY operator operator
COPY webhook webhook
COPY sidecar sidecar
COPY crds crds
RUN npm run build

# 2. Production dependencies only.
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force

# 3. Runtime: non-root, no compiler, no dev dependencies, no npm in the process tree.
FROM ${NODE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends dumb-init libjemalloc2 \
 && ln -s "$(dpkg-query -L libjemalloc2 | grep '/libjemalloc\.so\.2$')" /usr/local/lib/libjemalloc.so.2 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 writ \
 && useradd --system --uid 10001 --gid writ --home-dir /app --shell /usr/sbin/nologin writ \
 && mkdir -p /data && chown writ:writ /data
WORKDIR /app
# malloc is jemalloc, as `npm start` has it where libjemalloc2 is installed, its background thread
# giving freed pages back to the system (bench/soak.bench.ts, the all-in-one over 1M decisions:
# on glibc's malloc settled RSS grew 8-71 MB, up to 51 MB of it in glibc's main heap; on jemalloc
# 9-17 MB, 2 MB or less of it malloc's, idling 50-95 MB lower). MALLOC_ARENA_MAX=2 bounds glibc's
# arenas where jemalloc is not preloaded (LD_PRELOAD= in a deployment's environment).
ENV NODE_ENV=production \
    LD_PRELOAD=/usr/local/lib/libjemalloc.so.2 \
    MALLOC_CONF=background_thread:true \
    MALLOC_ARENA_MAX=2 \
    WRIT_DATA_DIR=/data/writ \
    REGISTRY_DATA_DIR=/data/control-plane \
    IDP_DATA_DIR=/data/identity
COPY --from=deps /app/node_modules node_modules
COPY package.json ./
COPY --from=build /src/dist dist
COPY --chmod=0755 <<'SCRIPT' /usr/local/bin/writ
#!/bin/sh
# writ <component> [args...]: replaces itself with node running the component's entry point.
set -e
component="${1:-all-in-one}"
[ "$#" -gt 0 ] && shift
case "$component" in
  all-in-one)    exec node --enable-source-maps dist/runtime/main.js "$@" ;;
  control-plane) exec node --enable-source-maps dist/runtime/control-plane/main.js "$@" ;;
  identity)      exec node --enable-source-maps dist/runtime/identity/main.js "$@" ;;
  broker)        exec node --enable-source-maps dist/runtime/broker/main.js "$@" ;;
  operator)      exec node --enable-source-maps dist/operator/main.js "$@" ;;
  webhook)       exec node --enable-source-maps dist/webhook/main.js "$@" ;;
  egress-gateway) exec node --enable-source-maps dist/runtime/egress-gateway/main.js "$@" ;;
  sidecar)       exec node --enable-source-maps dist/sidecar/main.js "$@" ;;
  *) echo "usage: writ all-in-one|control-plane|identity|broker|operator|webhook|sidecar|egress-gateway [flags]" >&2; exit 64 ;;
esac
SCRIPT
USER 10001:10001
VOLUME ["/data"]
# decision 9191, gRPC ext_authz 9192, management 8181, forward proxy 9092, identity 8090,
# broker / webhook health 8080, webhook 8443, egress gateway 3128, sidecar 8788 (loopback only)
EXPOSE 9191 9192 8181 9092 8090 8080 8443 3128
ENTRYPOINT ["dumb-init", "--", "/usr/local/bin/writ"]
CMD ["all-in-one"]
