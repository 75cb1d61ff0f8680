// Where the image (Dockerfile) puts what `rollgym serve --print-runtime` names: the official
// node image's node, the app's bin/rollgym.js, and Debian's libjemalloc2 on amd64.
export const IMAGE = {
  node: "/usr/local/bin/node",
  script: "/app/bin/rollgym.js",
  jemalloc: "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
} as const;
