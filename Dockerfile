# The rollgym image: `rollgym serve` as the published package runs it (bin/ + the compiled
# dist/ + docs/, production dependencies only), non-root, with serve's tuned runtime.
#   docker build -t rollgym:0.1.0 .
#   docker run --rm -p 8787:8787 -e ROLLGYM_TOKEN=... rollgym:0.1.0
# Not built on the machine it was written on (no Docker there): test/deploy/dockerfile.test.ts
# checks what can be checked without it. Kubernetes: deploy/kubernetes/ and docs/kubernetes.md.

# Build: Node 24 strips types only outside node_modules, so the image runs JavaScript, compiled
# the way `npm pack` compiles it (scripts/build-dist.ts, tsconfig.build.json). Run with the
# image's node directly: install scripts are skipped, so the `node` devDependency is not set up.
FROM node:24-bookworm-slim AS build
WORKDIR /build
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts/build-dist.ts scripts/
COPY src src
COPY protocol protocol
COPY envs envs
RUN node scripts/build-dist.ts

FROM node:24-bookworm-slim
# jemalloc for the tuned runtime (docs/server.md "Memory over time"); the ENV below names the
# amd64 path, as `rollgym serve --print-runtime` prints it there (arm64: aarch64-linux-gnu).
RUN apt-get update \
  && apt-get install -y --no-install-recommends libjemalloc2 \
  && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force
COPY bin bin
COPY docs docs
COPY --from=build /build/dist dist
# The image's own non-root user (uid 1000); serve writes nothing to disk.
USER node
EXPOSE 8787
# From `rollgym serve --print-runtime --host 0.0.0.0` run in this image (the test holds them
# equal). --host 0.0.0.0: the default 127.0.0.1 is unreachable from outside the container.
ENV LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
CMD ["/usr/local/bin/node", "--max-semi-space-size=16", "--memory-saver-mode", "--heap-growing-percent=200", "/app/bin/rollgym.js", "serve", "--host", "0.0.0.0"]
