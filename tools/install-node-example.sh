#!/bin/sh
# Node and the Node agent's own node_modules for its test (tests/test_examples_node.py):
# Debian's `nodejs` and `npm` where missing (tools/apt-install.sh), then `npm ci` in
# examples/agents/node-openai when its node_modules is missing. Otherwise it says how and
# exits 0: `make test` goes on, and the test fails with the same instruction (it never skips).
set -eu
here=$(dirname "$0")
command -v node >/dev/null 2>&1 || "$here/apt-install.sh" nodejs "for the Node agent's test" \
    "the Node agent's test will fail until it is installed"
command -v npm >/dev/null 2>&1 || "$here/apt-install.sh" npm "for the Node agent's test" \
    "the Node agent's test will fail until it is installed"
project="$here/../examples/agents/node-openai"
if [ -d "$project/node_modules/openai" ]; then exit 0; fi
if ! command -v npm >/dev/null 2>&1; then exit 0; fi
echo "make: npm ci in examples/agents/node-openai (the OpenAI Node SDK, from package-lock.json)" >&2
(cd "$project" && npm ci --no-audit --no-fund >/dev/null) \
    || echo "make: npm ci failed in $project; the Node agent's test will fail until it succeeds" >&2
